#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <sys/stat.h>

namespace lodge::config {
namespace {
using nlohmann::json;

[[noreturn]] void bad(const std::string &path, const std::string &what) {
  throw LodgeError(Errc::config_invalid, path + ": " + what);
}

void reject_unknown(const json &obj, const std::string &path, const std::set<std::string> &allowed) {
  for (const auto &[k, v] : obj.items()) {
    if (!allowed.contains(k)) {
      std::string known;
      for (const auto &a : allowed)
        known += (known.empty() ? "" : ", ") + a;
      bad(path.empty() ? k : path + "." + k, "unknown key (known: " + known + ")");
    }
  }
}

std::string get_string(const json &v, const std::string &path) {
  if (!v.is_string()) bad(path, "expected a string");
  return v.get<std::string>();
}

// S3's bounds on one part (the last may be smaller); the same for every store lodge writes.
uint64_t part_size_value(uint64_t bytes, const std::string &name, Errc code) {
  if (bytes < (5ULL << 20) || bytes > (5ULL << 30))
    throw LodgeError(code,
                     name + ": S3 takes parts of 5MiB to 5GiB (got " + util::format_size_exact(bytes) + ")");
  return bytes;
}

uint64_t get_size(const json &v, const std::string &path) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > 0) return v.get<uint64_t>();
  if (!v.is_string()) bad(path, "expected a size like 10MiB");
  return size_value(v.get<std::string>(), path, Errc::config_invalid, 1);
}

int64_t get_duration(const json &v, const std::string &path, DurationRange range = {}) {
  if (!v.is_string()) bad(path, "expected a duration like 15m or 500ms");
  return duration_value(v.get<std::string>(), path, Errc::config_invalid, range);
}

int64_t get_count(const json &v, const std::string &path, int64_t min, int64_t max) {
  if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > max)
    bad(path, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
  return v.get<int64_t>();
}

std::vector<std::string> get_string_list(const json &v, const std::string &path, bool lower) {
  if (!v.is_array()) bad(path, "expected a list of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    auto s = get_string(v[i], path + "[" + std::to_string(i) + "]");
    if (s.empty()) bad(path + "[" + std::to_string(i) + "]", "must not be empty");
    if (lower) {
      s = util::to_lower(s);
      if (!s.empty() && s[0] == '.') s.erase(0, 1);
    }
    out.push_back(s);
  }
  return out;
}

// "0644", "644": permission bits only (a set-id or sticky bit on a metrics file is a mistake).
std::optional<unsigned> parse_file_mode(const std::string &text) {
  if (text.size() < 3 || text.size() > 4) return std::nullopt;
  unsigned mode = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '7') return std::nullopt;
    mode = mode * 8 + static_cast<unsigned>(ch - '0');
  }
  if (mode > 0777) return std::nullopt;
  return mode;
}

// RFC 6838 section 4.2: type "/" subtype, each 1-127 characters, starting with a letter
// or digit, then letters, digits and ! # $ & - ^ _ . +
bool valid_media_type(const std::string &t) {
  auto name_ok = [](std::string_view n) {
    if (n.empty() || n.size() > 127 || !std::isalnum(static_cast<unsigned char>(n[0]))) return false;
    for (char ch : n)
      if (!std::isalnum(static_cast<unsigned char>(ch)) &&
          std::string_view("!#$&-^_.+").find(ch) == std::string_view::npos)
        return false;
    return true;
  };
  auto slash = t.find('/');
  if (slash == std::string::npos) return false;
  return name_ok(std::string_view(t).substr(0, slash)) && name_ok(std::string_view(t).substr(slash + 1));
}

Policy parse_policy(const json &obj, const std::string &name, const std::string &path, Policy p) {
  if (!obj.is_object()) bad(path, "expected an object");
  reject_unknown(obj, path,
                 {"max_size", "extensions", "media_types", "max_files", "deadline", "stall", "grace",
                  "allow_empty", "dedup", "content_type", "metadata", "tags", "storage_class", "sse",
                  "sse_kms_key_id", "cache_control", "expire_after"});
  p.name = name;
  if (obj.contains("max_size")) p.max_size = get_size(obj["max_size"], path + ".max_size");
  if (obj.contains("extensions"))
    p.extensions = get_string_list(obj["extensions"], path + ".extensions", true);
  if (obj.contains("media_types")) {
    p.media_types = get_string_list(obj["media_types"], path + ".media_types", true);
    for (size_t i = 0; i < p.media_types.size(); ++i)
      if (!valid_media_type(p.media_types[i]))
        bad(path + ".media_types[" + std::to_string(i) + "]",
            "expected a media type like application/pdf (type/subtype, as detected from the content; no "
            "wildcards or parameters), got '" +
                util::escape_for_terminal(p.media_types[i]) + "'");
  }
  if (obj.contains("max_files")) {
    if (obj["max_files"].is_null())
      p.max_files.reset(); // no limit, as lodge config prints it
    else
      p.max_files = get_count(obj["max_files"], path + ".max_files", 0, 1'000'000'000);
  }
  if (obj.contains("deadline")) p.deadline_ms = get_duration(obj["deadline"], path + ".deadline");
  if (obj.contains("stall")) p.stall_ms = get_duration(obj["stall"], path + ".stall");
  if (obj.contains("grace")) p.grace_ms = get_duration(obj["grace"], path + ".grace");
  if (obj.contains("expire_after")) {
    if (obj["expire_after"].is_null())
      p.expire_after_ms.reset(); // never, as lodge config prints it
    else
      p.expire_after_ms = get_duration(obj["expire_after"], path + ".expire_after");
  }
  if (obj.contains("allow_empty")) {
    const auto &v = obj["allow_empty"];
    if (!v.is_boolean()) bad(path + ".allow_empty", "expected true or false (got " + v.dump() + ")");
    p.allow_empty = v.get<bool>();
  }
  if (obj.contains("dedup")) {
    auto d = get_string(obj["dedup"], path + ".dedup");
    if (d != "owner" && d != "prefix" && d != "none")
      bad(path + ".dedup",
          R"(expected "owner", "prefix" or "none" (got ')" + util::escape_for_terminal(d) + "')");
    p.dedup = d;
  }
  auto text_key = [&](const char *k, std::string &out) {
    if (obj.contains(k)) out = get_string(obj[k], path + "." + k);
  };
  auto map_key = [&](const char *k, std::map<std::string, std::string> &out, bool lower) {
    if (!obj.contains(k)) return;
    const auto &m = obj[k];
    if (!m.is_object()) bad(path + "." + k, "expected an object of names and string values");
    for (const auto &[entry, v] : m.items())
      out[lower ? util::to_lower(entry) : entry] = get_string(v, path + "." + k + "." + entry);
  };
  text_key("content_type", p.object.content_type);
  map_key("metadata", p.object.metadata, true);
  map_key("tags", p.object.tags, false);
  text_key("storage_class", p.object.storage_class);
  text_key("sse", p.object.sse);
  text_key("sse_kms_key_id", p.object.sse_kms_key_id);
  text_key("cache_control", p.object.cache_control);
  if (auto v = store::validate(p.object, path); !v) throw LodgeError(Errc::config_invalid, v.error().message);
  return p;
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

std::string env_or(const std::map<std::string, std::string> &env, const std::string &k) {
  auto it = env.find(k);
  return it == env.end() ? std::string{} : it->second;
}

bool file_exists(const std::string &p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// The store keys in the file, each handed over as given (with its source) for the store's
// scheme to interpret; only their JSON type is checked here.
void parse_store_keys(const json &doc, const std::string &source, store::Settings &out) {
  for (const auto &k : store::setting_keys()) {
    if (!doc.contains(k.name)) continue;
    const auto &v = doc[k.name];
    std::string value;
    if (k.boolean) {
      if (!v.is_boolean()) bad(k.name, "expected true or false (got " + v.dump() + ")");
      value = v.get<bool>() ? "true" : "false";
    } else {
      value = get_string(v, k.name);
    }
    out[k.name] = {value, "file " + source};
  }
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

namespace {
// The "sweep" object of a configuration file, over `sweep`.
void parse_sweep(const json &s, SweepSettings &sweep) {
  if (!s.is_object()) bad("sweep", "expected an object");
  reject_unknown(s, "sweep", {"lease", "max_retries", "backoff_base", "backoff_max"});
  if (s.contains("lease")) sweep.lease_ms = get_duration(s["lease"], "sweep.lease");
  if (s.contains("max_retries"))
    sweep.max_retries = static_cast<int>(get_count(s["max_retries"], "sweep.max_retries", 0, 1000));
  if (s.contains("backoff_base"))
    sweep.backoff_base_ms = get_duration(s["backoff_base"], "sweep.backoff_base");
  if (s.contains("backoff_max")) sweep.backoff_max_ms = get_duration(s["backoff_max"], "sweep.backoff_max");
}

} // namespace

std::string without_password(const std::string &url) {
  // The one redaction: a malformed URL's password (a raw '/' or '?' in it) too.
  return util::log::redact(url, url);
}

namespace {
// The "cleanup" object: {"via": "tasks" | "queue", "queue": URL}.
void parse_cleanup(const json &s, OutboxConfig &o) {
  if (!s.is_object()) bad("cleanup", "expected an object");
  reject_unknown(s, "cleanup", {"via", "queue"});
  if (s.contains("via")) {
    o.cleanup_via = get_string(s["via"], "cleanup.via");
    if (o.cleanup_via != "tasks" && o.cleanup_via != "queue")
      bad("cleanup.via", "expected tasks or queue (got '" + util::escape_for_terminal(o.cleanup_via) + "')");
  }
  if (s.contains("queue")) o.cleanup_queue = get_string(s["queue"], "cleanup.queue");
  if (o.cleanup_via == "queue" && o.cleanup_queue.empty())
    bad("cleanup.queue", R"(required with "via": "queue" (sqs://NAME or amqp://USER@HOST/VHOST?queue=NAME))");
  o.cleanup_given = true;
}

// The "events" object: {"queue": URL, "types": ["file.active", ...]}.
void parse_events(const json &s, OutboxConfig &o) {
  if (!s.is_object()) bad("events", "expected an object");
  reject_unknown(s, "events", {"queue", "types"});
  if (s.contains("queue")) o.events_queue = get_string(s["queue"], "events.queue");
  if (s.contains("types")) {
    auto types = get_string_list(s["types"], "events.types", false);
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != "file.active" && types[i] != "file.deleted" && types[i] != "file.failed")
        bad("events.types[" + std::to_string(i) + "]",
            "expected file.active, file.deleted or file.failed (got '" + util::escape_for_terminal(types[i]) +
                "')");
    o.event_types = types;
  } else {
    o.event_types = {"file.active", "file.deleted", "file.failed"};
  }
  if (o.events_queue.empty() && !o.event_types.empty())
    bad("events.queue",
        "required: where the upload events go (sqs://NAME or amqp://USER@HOST/VHOST?queue=NAME)");
  o.events_given = true;
}

// The "status" object of a configuration file, over `status`.
void parse_status(const json &s, StatusSettings &status) {
  if (!s.is_object()) bad("status", "expected an object");
  reject_unknown(s, "status",
                 {"sweep_max_age", "repair_max_age", "reconcile_max_age", "prune_max_age", "relay_max_age",
                  "consume_max_age", "required_jobs", "upload_failed_max", "upload_failed_window",
                  "prometheus_file_mode"});
  for (const char *job : k_jobs) {
    std::string key = std::string(job) + "_max_age";
    if (s.contains(key)) status.max_age_ms[job] = get_duration(s[key], "status." + key);
  }
  if (s.contains("required_jobs")) {
    auto jobs = get_string_list(s["required_jobs"], "status.required_jobs", false);
    for (size_t i = 0; i < jobs.size(); ++i)
      if (!status.max_age_ms.contains(jobs[i]))
        bad("status.required_jobs[" + std::to_string(i) + "]",
            "expected sweep, repair, reconcile, prune, relay or consume (got '" +
                util::escape_for_terminal(jobs[i]) + "')");
    status.required_jobs = jobs;
  }
  if (s.contains("upload_failed_max"))
    status.upload_failed_max =
        get_count(s["upload_failed_max"], "status.upload_failed_max", 0, 1'000'000'000);
  if (s.contains("upload_failed_window"))
    status.upload_failed_window_ms = get_duration(s["upload_failed_window"], "status.upload_failed_window");
  if (s.contains("prometheus_file_mode")) {
    const auto &v = s["prometheus_file_mode"];
    auto mode = v.is_string() ? parse_file_mode(v.get<std::string>()) : std::nullopt;
    if (!mode)
      bad("status.prometheus_file_mode", "expected an octal mode like \"0644\" (a string of 3 or 4 octal "
                                         "digits, no set-id or sticky bit; got " +
                                             util::escape_for_terminal(v.dump()) + ")");
    status.prometheus_file_mode = *mode;
  }
}

} // namespace

namespace {
// The line of the n-th key (0-based, in document order) of a JSON text: a key is a string
// followed by ':', which no other string is.
size_t line_of_key(const std::string &text, size_t n) {
  size_t line = 1, seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') ++line;
    if (text[i] != '"') continue;
    const size_t begin_line = line;
    for (++i; i < text.size() && text[i] != '"'; ++i)
      if (text[i] == '\\') ++i;
    size_t j = i + 1;
    while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j])))
      ++j;
    if (j < text.size() && text[j] == ':' && seen++ == n) return begin_line;
  }
  return line;
}

// A JSON parser callback that refuses a key given twice in one object (nlohmann keeps the
// last, silently), naming the file, the line and the key's path.
class DuplicateKeys {
public:
  DuplicateKeys(const std::string &text, const std::string &source) : m_text(text), m_source(source) {}
  bool operator()(int /*depth*/, json::parse_event_t event, json &parsed) {
    using E = json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      std::string path;
      if (!m_open.empty())
        path =
            m_open.back().object ? joined(m_open.back().path, m_open.back().key) : m_open.back().path + "[]";
      m_open.push_back({event == E::object_start, std::move(path), {}, {}});
    } else if (event == E::object_end || event == E::array_end) {
      if (!m_open.empty()) m_open.pop_back();
    } else if (event == E::key && !m_open.empty()) {
      auto &top = m_open.back();
      top.key = parsed.get<std::string>();
      if (!top.keys.insert(top.key).second)
        throw LodgeError(Errc::config_invalid, m_source + ":" + std::to_string(line_of_key(m_text, m_keys)) +
                                                   ": " +
                                                   util::escape_for_terminal(joined(top.path, top.key)) +
                                                   ": given twice (a key appears once in its object)");
      ++m_keys;
    }
    return true;
  }

private:
  struct Open {
    bool object = false;
    std::string path;
    std::set<std::string> keys;
    std::string key; // the last key seen: the one whose value is being read
  };
  static std::string joined(const std::string &path, const std::string &key) {
    return path.empty() ? key : path + "." + key;
  }
  const std::string &m_text;
  const std::string &m_source;
  std::vector<Open> m_open;
  size_t m_keys = 0;
};
} // namespace

Config parse_json(const std::string &text, const std::string &source, Config c) {
  json doc;
  try {
    doc = json::parse(text, DuplicateKeys(text, source));
  } catch (const json::exception &e) { // parse errors, and out_of_range for numbers like 3e388
    throw LodgeError(Errc::config_invalid, source + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object()) bad(source, "expected a JSON object at the top");
  std::set<std::string> known{"ledger",
                              "store",
                              "default_owner",
                              "busy_timeout",
                              "multipart_threshold",
                              "part_size",
                              "part_concurrency",
                              "jobs",
                              "policies",
                              "sweep",
                              "status",
                              "fail_killed_runs",
                              "ledger_timeout",
                              "in_progress_wait",
                              "bwlimit",
                              "stats",
                              "cleanup",
                              "events"};
  for (const auto &k : store::setting_keys())
    known.insert(k.name);
  reject_unknown(doc, "", known);
  if (doc.contains("ledger")) c.ledger = get_string(doc["ledger"], "ledger");
  if (doc.contains("store")) c.store = get_string(doc["store"], "store");
  parse_store_keys(doc, source, c.store_settings);
  if (doc.contains("default_owner")) {
    c.default_owner = get_string(doc["default_owner"], "default_owner");
    check_owner(c.default_owner, "default_owner");
  }
  if (doc.contains("fail_killed_runs")) {
    const auto &v = doc["fail_killed_runs"];
    if (!v.is_boolean()) bad("fail_killed_runs", "expected true or false (got " + v.dump() + ")");
    c.fail_killed_runs = v.get<bool>();
  }
  // SQLite takes the busy timeout as an int of milliseconds: a longer one would wrap
  // around to "do not wait at all".
  if (doc.contains("busy_timeout"))
    c.busy_timeout_ms =
        get_duration(doc["busy_timeout"], "busy_timeout",
                     {1, std::numeric_limits<int>::max(), "SQLite waits at most 2147483647ms, about 24d20h"});
  if (doc.contains("ledger_timeout"))
    c.ledger_timeout_ms = get_duration(doc["ledger_timeout"], "ledger_timeout", k_ledger_timeout_range);
  if (doc.contains("in_progress_wait"))
    c.in_progress_wait_ms =
        get_duration(doc["in_progress_wait"], "in_progress_wait", k_in_progress_wait_range);
  // null: not set (as `lodge config` shows it), which leaves the limit to what comes after.
  if (doc.contains("bwlimit") && !doc["bwlimit"].is_null()) {
    if (!doc["bwlimit"].is_string()) bad("bwlimit", R"(expected a rate like "10M" or "off")");
    c.bwlimit = bwlimit_value(doc["bwlimit"].get<std::string>(), "bwlimit", Errc::config_invalid);
  }
  if (doc.contains("stats")) {
    if (!doc["stats"].is_string()) bad("stats", R"(expected an interval like "1m" or "off")");
    c.stats_ms = stats_value(doc["stats"].get<std::string>(), "stats", Errc::config_invalid);
  }
  if (doc.contains("multipart_threshold"))
    c.multipart_threshold = get_size(doc["multipart_threshold"], "multipart_threshold");
  if (doc.contains("part_size"))
    c.part_size = part_size_value(get_size(doc["part_size"], "part_size"), "part_size", Errc::config_invalid);
  if (doc.contains("part_concurrency"))
    c.part_concurrency = static_cast<int>(get_count(doc["part_concurrency"], "part_concurrency", 1, 64));
  if (doc.contains("jobs")) c.jobs = static_cast<int>(get_count(doc["jobs"], "jobs", 1, 256));
  for (const char *k : {"multipart_threshold", "part_size", "part_concurrency", "jobs"})
    if (doc.contains(k)) c.sources[k] = "file " + source;
  if (doc.contains("policies")) {
    const auto &ps = doc["policies"];
    if (!ps.is_object()) bad("policies", "expected an object of named policies");
    for (const auto &[name, obj] : ps.items()) {
      if (name.empty()) bad("policies", "a policy name must not be empty");
      Policy base = c.policies.contains(name) ? c.policies[name] : Policy{};
      c.policies[name] = parse_policy(obj, name, "policies." + name, base);
    }
  }
  if (doc.contains("sweep")) parse_sweep(doc["sweep"], c.sweep);
  if (doc.contains("status")) parse_status(doc["status"], c.status);
  if (doc.contains("cleanup")) parse_cleanup(doc["cleanup"], c.outbox);
  if (doc.contains("events")) parse_events(doc["events"], c.outbox);
  return c;
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
