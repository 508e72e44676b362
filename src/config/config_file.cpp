// The configuration file: its JSON read (a key given twice is refused, naming its line),
// each key checked for its type and range, the policies and the sweep, status, cleanup
// and events objects; parse_json of lodge/config/config.hpp.
#include "checks.hpp"

#include <cctype>
#include <cstdint>
#include <limits>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace lodge::config {
namespace {
using nlohmann::json;

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

} // namespace lodge::config
