// lodge's configuration as a run sees it: the defaults, the configuration file (parse_json,
// in config_file.cpp), the environment and the flags layered by load(), and `lodge config`'s
// JSON (to_json); the checks of one value that flags and keys share (sizes, durations,
// rates, part sizes, run prefixes).
#include "checks.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

namespace lodge::config {

[[noreturn]] void bad(const std::string &path, const std::string &what) {
  throw LodgeError(Errc::config_invalid, path + ": " + what);
}

// S3's bounds on one part (the last may be smaller); the same for every store lodge writes.
uint64_t part_size_value(uint64_t bytes, const std::string &name, Errc code) {
  if (bytes < (5ULL << 20) || bytes > (5ULL << 30))
    throw LodgeError(code,
                     name + ": S3 takes parts of 5MiB to 5GiB (got " + util::format_size_exact(bytes) + ")");
  return bytes;
}

bool valid_owner(const std::string &s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return s != "." && s != ".." && s != ".lodge"; // <root>/.lodge/ holds the id markers
}

void check_owner(const std::string &owner, const std::string &path) {
  if (!owner.empty() && !valid_owner(owner))
    bad(path, "owner ids are 1-128 characters of A-Z a-z 0-9 . _ -, not '.', '..' or '.lodge' (got '" +
                  util::escape_for_terminal(owner) + "')");
}

namespace {
using nlohmann::json;

std::string env_or(const std::map<std::string, std::string> &env, const std::string &k) {
  auto it = env.find(k);
  return it == env.end() ? std::string{} : it->second;
}

bool file_exists(const std::string &p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}
} // namespace

uint64_t size_value(const std::string &text, const std::string &name, Errc code, uint64_t min) {
  auto v = util::parse_size(text);
  if (!v) {
    auto hint = util::size_unit_hint(text);
    throw LodgeError(code, name + ": expected a size like 10MiB, got '" + util::escape_for_terminal(text) +
                               "'" + (hint ? ": " + *hint : std::string()));
  }
  if (*v < min)
    throw LodgeError(code, name + ": '" + util::escape_for_terminal(text) + "' is too small (at least " +
                               util::format_size_exact(min) + ")");
  return *v;
}

int64_t duration_value(const std::string &text, const std::string &name, Errc code, DurationRange range) {
  auto v = util::parse_duration_ms(text);
  if (!v)
    throw LodgeError(code, name +
                               ": expected a duration like 15m or 500ms (a number and its unit: ms, s, m, "
                               "h, d, w; 1h30m), got '" +
                               util::escape_for_terminal(text) + "'");
  if (*v < range.min_ms)
    throw LodgeError(code, name + ": '" + util::escape_for_terminal(text) + "' is too short (" +
                               (range.min_ms == 1 ? std::string("more than 0")
                                                  : "at least " + util::format_duration_exact(range.min_ms)) +
                               ")");
  if (*v > range.max_ms)
    throw LodgeError(code,
                     name + ": '" + util::escape_for_terminal(text) + "' is too long (" + range.why + ")");
  return *v;
}

std::optional<std::string> run_prefix_problem(const std::string &prefix) {
  if (prefix.empty()) return std::string("it is empty");
  if (prefix.size() > 512) return std::string("it is longer than 512 bytes");
  for (const auto &seg : util::split(prefix, '/')) {
    if (seg.empty()) return std::string("it has an empty segment ('//', or '/' at either end)");
    if (!valid_owner(seg))
      return "segment '" + util::escape_for_terminal(seg) +
             "' is not 1-128 characters of A-Z a-z 0-9 . _ - (or is '.' or '..')";
  }
  return std::nullopt;
}

uint64_t parse_part_size(const std::string &text, const std::string &name, Errc code) {
  return part_size_value(size_value(text, name, code), name, code);
}

int parse_part_concurrency(const std::string &text, const std::string &name, Errc code) {
  auto n = util::parse_int(text);
  if (!n || *n < 1 || *n > 64)
    throw LodgeError(code, name + ": expected an integer from 1 to 64, got '" +
                               util::escape_for_terminal(text) + "'");
  return static_cast<int>(*n);
}

const Policy &Config::policy(const std::string &name) const {
  auto it = policies.find(name);
  if (it == policies.end()) {
    std::string known;
    for (const auto &[k, v] : policies)
      known += (known.empty() ? "" : ", ") + k;
    throw LodgeError(Errc::config_invalid, "unknown policy '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

uint64_t bwlimit_value(const std::string &text, const std::string &what, Errc code) {
  auto v = util::parse_bwlimit(text);
  if (!v)
    throw LodgeError(code, what +
                               ": expected a rate in bytes per second like 10M or 512K (rclone's units, "
                               "powers of 1024; a bare number is bytes), or off, got '" +
                               util::escape_for_terminal(text) + "'");
  return *v;
}

int64_t stats_value(const std::string &text, const std::string &what, Errc code) {
  if (util::to_lower(text) == "off" || text == "0") return 0;
  return duration_value(text, what, code, k_stats_range);
}

std::string without_password(const std::string &url) {
  // The one redaction: a malformed URL's password (a raw '/' or '?' in it) too.
  return util::log::redact(url, url);
}

namespace {
// The store's own transfer defaults (S3: the AWS profile's `s3 =` keys) where lodge's
// configuration set nothing: flags > lodge's configuration > the store's > defaults.
void apply_store_defaults(Config &c) {
  auto d = c.store_config->transfer_defaults();
  auto source = [&](const char *k) { return d.sources.contains(k) ? d.sources.at(k) : std::string(); };
  if (d.jobs > 0 && c.sources["jobs"] == "default") {
    c.jobs = d.jobs;
    c.sources["jobs"] = source("jobs");
  }
  if (d.multipart_threshold > 0 && c.sources["multipart_threshold"] == "default") {
    c.multipart_threshold = d.multipart_threshold;
    c.sources["multipart_threshold"] = source("multipart_threshold");
  }
  if (d.part_size > 0 && c.sources["part_size"] == "default") {
    c.part_size = d.part_size;
    c.sources["part_size"] = source("part_size");
  }
  if (d.bandwidth > 0) {
    c.store_bandwidth = d.bandwidth;
    c.sources["bandwidth"] = source("bandwidth");
  }
}
} // namespace

Config load(const ConfigInputs &in) {
  Config c;
  for (const char *k : {"multipart_threshold", "part_size", "part_concurrency", "jobs"})
    c.sources[k] = "default";
  Policy def;
  def.name = "default";
  c.policies["default"] = def;
  const auto &env = in.env;

  std::string home = env_or(env, "HOME");
  std::string data_home = env_or(env, "XDG_DATA_HOME");
  if (data_home.empty() && !home.empty()) data_home = home + "/.local/share";
  if (data_home.empty()) data_home = ".";
  c.ledger = data_home + "/lodge/ledger.db";
  c.store = "file://" + data_home + "/lodge/store";

  // The file: --config, LODGE_CONFIG (both must exist), then the usual places.
  std::string path;
  if (in.config_flag)
    path = *in.config_flag;
  else if (!env_or(env, "LODGE_CONFIG").empty())
    path = env_or(env, "LODGE_CONFIG");
  if (!path.empty()) {
    if (!file_exists(path)) throw LodgeError(Errc::config_invalid, path + ": configuration file not found");
  } else {
    std::string cfg_home = env_or(env, "XDG_CONFIG_HOME");
    if (cfg_home.empty() && !home.empty()) cfg_home = home + "/.config";
    for (const auto &cand : {cfg_home.empty() ? std::string{} : cfg_home + "/lodge/config.json",
                             std::string("/etc/lodge/config.json")}) {
      if (!cand.empty() && file_exists(cand)) {
        path = cand;
        break;
      }
    }
  }
  if (!path.empty()) {
    // Bounded: an endless input (/dev/zero) is refused, not read until memory runs out.
    constexpr size_t k_max_config_bytes = size_t{1} << 20;
    auto text = util::read_file_limited(path, k_max_config_bytes);
    if (!text && errno == EFBIG)
      throw LodgeError(Errc::config_invalid,
                       path + ": holds more than 1 MiB: not a lodge configuration file");
    if (!text)
      throw LodgeError(Errc::config_invalid,
                       path + ": cannot read configuration file: " + std::strerror(errno));
    c = parse_json(*text, path, std::move(c));
    c.config_file = path;
  }

  // Environment (the store's keys: its scheme reads the environment itself).
  auto apply_env = [&](std::string &field, const char *name) {
    if (auto v = env_or(env, name); !v.empty()) field = v;
  };
  apply_env(c.ledger, "LODGE_DB");
  apply_env(c.store, "LODGE_STORE");
  apply_env(c.default_owner, "LODGE_OWNER");
  check_owner(c.default_owner, "LODGE_OWNER");
  if (auto v = env_or(env, "LODGE_JOBS"); !v.empty()) {
    auto n = util::parse_int(v);
    if (!n || *n < 1 || *n > 256) bad("LODGE_JOBS", "expected an integer from 1 to 256");
    c.jobs = static_cast<int>(*n);
    c.sources["jobs"] = "env LODGE_JOBS";
  }
  if (auto v = env_or(env, "LODGE_LEDGER_TIMEOUT"); !v.empty())
    c.ledger_timeout_ms =
        duration_value(v, "LODGE_LEDGER_TIMEOUT", Errc::config_invalid, k_ledger_timeout_range);
  if (auto v = env_or(env, "LODGE_BWLIMIT"); !v.empty())
    c.bwlimit = bwlimit_value(v, "LODGE_BWLIMIT", Errc::config_invalid);
  if (auto v = env_or(env, "LODGE_STATS"); !v.empty())
    c.stats_ms = stats_value(v, "LODGE_STATS", Errc::config_invalid);

  // Flags; the store's keys (--endpoint, --region, --ca-bundle, --profile) go to its scheme
  // as given, named by the flag.
  auto flag = [&](const char *k, std::string &field) {
    if (auto it = in.flags.find(k); it != in.flags.end()) field = it->second;
  };
  flag("ledger", c.ledger);
  flag("store", c.store);
  for (const auto &k : store::setting_keys()) {
    auto it = in.flags.find(k.name);
    if (it == in.flags.end()) continue;
    std::string name = k.name;
    std::replace(name.begin(), name.end(), '_', '-');
    c.store_settings[k.name] = {it->second, "flag --" + name};
  }
  flag("owner", c.default_owner);
  check_owner(c.default_owner, "--owner");
  if (auto it = in.flags.find("ledger_timeout"); it != in.flags.end())
    c.ledger_timeout_ms = duration_value(it->second, "--ledger-timeout", Errc::usage, k_ledger_timeout_range);
  if (in.no_verify_ssl) c.verify_tls = false;
  if (in.force_network_fs) c.force_network_fs = true;

  if (c.ledger.empty()) bad("ledger", "must not be empty");
  // file://./x and file://x name a directory under the current one: made absolute here,
  // so that every key, message and binding speaks of the one directory.
  if (c.store.rfind("file://", 0) == 0 && c.store.size() > 7 && c.store[7] != '/') {
    std::string rel = c.store.substr(7);
    while (rel.rfind("./", 0) == 0)
      rel.erase(0, 2);
    if (rel == ".") rel.clear();
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (ec)
      bad("store", "cannot resolve '" + c.store + "': the current directory is unknown: " + ec.message());
    c.store =
        "file://" + (cwd.string() == "/" ? std::string{} : cwd.string()) + (rel.empty() ? "" : "/" + rel);
    if (c.store == "file://") c.store = "file:///";
  }
  // The store's own backend checks its URL (one registry of schemes): a prefix or a
  // directory a server or a URL parser would rewrite lands under keys no row records.
  store::check_store_url(c.store);
  // Its scheme resolves the store's settings (S3: the AWS environment and shared files).
  c.store_config = store::resolve_settings(c.store, c.store_settings, env);
  apply_store_defaults(c);
  return c;
}

nlohmann::json to_json(const Config &c) {
  json j;
  j["config_file"] = c.config_file.empty() ? json(nullptr) : json(c.config_file);
  j["ledger"] = c.ledger;
  j["store"] = c.store;
  j["default_owner"] = c.default_owner;
  j["verify_tls"] = c.verify_tls;
  // endpoint, region, ca_bundle, profile, tag_state and, for S3, "s3": each resolved setting
  // with its source (not a config key).
  if (c.store_config) c.store_config->to_json(j);
  j["fail_killed_runs"] = c.fail_killed_runs;
  j["busy_timeout"] = util::format_duration_exact(c.busy_timeout_ms);
  j["ledger_timeout"] = util::format_duration_exact(c.ledger_timeout_ms);
  j["in_progress_wait"] = util::format_duration_exact(c.in_progress_wait_ms);
  j["multipart_threshold"] = util::format_size_exact(c.multipart_threshold);
  j["part_size"] = util::format_size_exact(c.part_size);
  j["part_concurrency"] = c.part_concurrency;
  j["bwlimit"] = c.bwlimit ? json(util::format_bwlimit(*c.bwlimit)) : json(nullptr);
  j["stats"] = c.stats_ms > 0 ? json(util::format_duration_exact(c.stats_ms)) : json("off");
  j["jobs"] = c.jobs;
  // Where each of those came from (upload's --jobs, --part-size, --part-concurrency win).
  j["sources"] = c.sources;
  // The store's own rate limit (bytes per second), when it has one: below a lodge bwlimit.
  if (c.store_bandwidth > 0) j["store_bandwidth"] = c.store_bandwidth;
  json status;
  for (const char *job : k_jobs)
    status[std::string(job) + "_max_age"] = util::format_duration_exact(c.status.max_age_ms.at(job));
  status["required_jobs"] = c.status.required_jobs;
  status["upload_failed_max"] = c.status.upload_failed_max;
  status["upload_failed_window"] = util::format_duration_exact(c.status.upload_failed_window_ms);
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", c.status.prometheus_file_mode);
  status["prometheus_file_mode"] = mode;
  j["status"] = status;
  j["sweep"] = {{"lease", util::format_duration_exact(c.sweep.lease_ms)},
                {"max_retries", c.sweep.max_retries},
                {"backoff_base", util::format_duration_exact(c.sweep.backoff_base_ms)},
                {"backoff_max", util::format_duration_exact(c.sweep.backoff_max_ms)}};
  j["cleanup"] = {{"via", c.outbox.cleanup_via}, {"queue", without_password(c.outbox.cleanup_queue)}};
  j["events"] = {{"queue", without_password(c.outbox.events_queue)}, {"types", c.outbox.event_types}};
  json ps = json::object();
  for (const auto &[name, p] : c.policies) {
    json pj;
    pj["max_size"] = util::format_size_exact(p.max_size);
    pj["extensions"] = p.extensions;
    pj["media_types"] = p.media_types;
    pj["max_files"] = p.max_files ? json(*p.max_files) : json(nullptr);
    pj["dedup"] = p.dedup;
    pj["deadline"] = util::format_duration_exact(p.deadline_ms);
    pj["stall"] = util::format_duration_exact(p.stall_ms);
    pj["grace"] = util::format_duration_exact(p.grace_ms);
    pj["allow_empty"] = p.allow_empty;
    pj["expire_after"] =
        p.expire_after_ms ? json(util::format_duration_exact(*p.expire_after_ms)) : json(nullptr);
    if (auto o = store::to_json(p.object); !o.empty()) {
      const json options = json::parse(o); // kept alive: items() only views it
      for (const auto &[k, v] : options.items())
        pj[k] = v;
    }
    ps[name] = pj;
  }
  j["policies"] = ps;
  return j;
}

} // namespace lodge::config