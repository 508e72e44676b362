#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <lodge/ledger/inspect.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/ops/read/doctor.hpp>
#include <lodge/store/lifecycle.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fs.hpp>
#include <lodge/util/units.hpp>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>

namespace lodge::ops::doctor {
namespace {

namespace fs = std::filesystem;

Check make(std::string name, Level level, std::string message, std::string fix = {}) {
  return Check{std::move(name), level, std::move(message), std::move(fix)};
}

} // namespace

const char *level_name(Level l) {
  switch (l) {
  case Level::ok:
    return "ok";
  case Level::warn:
    return "warn";
  case Level::fail:
    return "fail";
  }
  return "fail";
}

Check filesystem(const std::string &dir, unsigned long f_type) {
  if (auto net = util::network_fs_name(f_type))
    return make("ledger.filesystem", Level::warn,
                dir + " is on " + std::string(*net) +
                    ", a network filesystem: SQLite's locks and WAL are not safe there",
                "move the ledger to a local disk, or use a PostgreSQL ledger (--db postgres://...)");
  std::string name;
  if (auto known = util::fs_type_name(f_type)) {
    name = *known;
  } else {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%lX", f_type);
    name = std::string("type ") + hex;
  }
  return make("ledger.filesystem", Level::ok, dir + " is on " + name);
}

std::vector<Check> sqlite_ledger(const std::string &path, bool &usable) {
  usable = false;
  std::vector<Check> out;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  if (!fs::exists(p, ec)) {
    out.push_back(
        make("ledger.location", Level::fail, "no ledger at " + p.string(),
             "create it with `lodge --db " + path + " init`, or point --db / LODGE_DB at the ledger"));
    return out;
  }
  out.push_back(make("ledger.location", Level::ok, p.string() + " (SQLite)"));

  std::string dir = p.parent_path().string();
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) == 0) out.push_back(filesystem(dir, static_cast<unsigned long>(sf.f_type)));
  struct statvfs sv {};
  if (::statvfs(dir.c_str(), &sv) == 0) {
    uint64_t avail = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    std::string msg = util::format_size(avail) + " free in " + dir;
    if (avail < k_min_free_bytes)
      out.push_back(make("ledger.free_space", Level::warn,
                         msg + " (under " + util::format_size(k_min_free_bytes) + ")",
                         "free space on that filesystem: a full disk makes every ledger write fail"));
    else
      out.push_back(make("ledger.free_space", Level::ok, msg));
  }

  try {
    auto db = ledger::open_to_inspect(p.string(), 2000);
    auto version = db->schema_version();
    std::string have = std::to_string(version), mine = std::to_string(ledger::k_schema_version);
    if (version > ledger::k_schema_version) {
      out.push_back(make("ledger.schema", Level::fail,
                         "schema version " + have + ", newer than this lodge's " + mine +
                             ": this lodge refuses to open it",
                         "upgrade lodge to the version that wrote this ledger (or newer)"));
      return out;
    }
    if (version < ledger::k_oldest_schema_version) {
      out.push_back(make("ledger.schema", Level::fail, "schema version " + have + ": not a lodge ledger",
                         "point --db / LODGE_DB at the ledger `lodge init` made"));
      return out;
    }
    if (version < ledger::k_schema_version)
      out.push_back(make("ledger.schema", Level::warn,
                         "schema version " + have + ", older than this lodge's " + mine +
                             ": the next command that writes migrates it",
                         "run `lodge init` now (it migrates the ledger) rather than in the middle of a job"));
    else
      out.push_back(make("ledger.schema", Level::ok, "schema version " + have + " (this lodge's)"));
    std::string qc = db->integrity_check();
    if (qc == "ok")
      out.push_back(make("ledger.integrity", Level::ok, "PRAGMA quick_check: ok"));
    else
      out.push_back(make("ledger.integrity", Level::fail, "PRAGMA quick_check: " + qc,
                         "restore the ledger from a backup (sqlite3 " + p.string() +
                             " .recover can salvage rows); stop the cron jobs until then"));
    usable = version <= ledger::k_schema_version && qc == "ok";
  } catch (const LodgeError &e) {
    out.push_back(make("ledger.integrity", Level::fail, e.error().message,
                       "check the file is the lodge ledger and readable by this user"));
    return out;
  }

  std::string wal = p.string() + "-wal";
  auto wal_size = fs::file_size(wal, ec);
  if (ec)
    out.push_back(make("ledger.wal", Level::ok, "no WAL file"));
  else if (wal_size > k_max_wal_bytes)
    out.push_back(make("ledger.wal", Level::warn,
                       "WAL file " + wal + " is " + util::format_size(wal_size) + " (over " +
                           util::format_size(k_max_wal_bytes) + ")",
                       "a long-running reader keeps SQLite from checkpointing: stop it, then run `sqlite3 " +
                           p.string() + " 'PRAGMA wal_checkpoint(TRUNCATE)'`"));
  else
    out.push_back(make("ledger.wal", Level::ok, "WAL file " + util::format_size(wal_size)));
  return out;
}

Check clock_skew(const std::string &server_date, int64_t local_ms) {
  auto server_ms = util::parse_http_date_ms(server_date);
  if (server_date.empty() || !server_ms)
    return make("store.clock", Level::warn,
                server_date.empty() ? "the store sent no Date header"
                                    : "unreadable Date header: " + server_date,
                "check this host's clock with NTP (timedatectl, chronyc tracking)");
  int64_t skew = local_ms - *server_ms;
  int64_t abs_s = (skew < 0 ? -skew : skew) / 1000;
  std::string msg = "this host's clock is " + std::to_string(abs_s) + " s " +
                    (skew < 0 ? "behind" : "ahead of") + " the store's (Date: " + server_date + ")";
  const std::string fix = "synchronize this host's clock (NTP: timedatectl set-ntp true, or chrony)";
  int64_t abs_ms = skew < 0 ? -skew : skew;
  if (abs_ms > k_skew_fail_ms)
    return make("store.clock", Level::fail, msg + ": signed requests are refused past 15 minutes", fix);
  if (abs_ms > k_skew_warn_ms)
    return make("store.clock", Level::warn, msg + ": over 5 minutes, signed requests fail past 15", fix);
  return make("store.clock", Level::ok, msg);
}

namespace {

std::string store_fix(const Error &e) {
  if (e.details.s3_code == "NoSuchBucket" || e.details.s3_code == "ContainerNotFound")
    return "create the bucket, or correct --store / LODGE_STORE";
  if (e.details.s3_code == "SignatureDoesNotMatch")
    return "check the credentials: the store computed another signature, so the secret key is not the one of "
           "that access key id (`lodge config --explain` shows which were used)";
  if (e.details.s3_code == "InvalidAccessKeyId")
    return "check the credentials: the store knows no such access key id (`lodge config --explain` shows "
           "which were used)";
  if (e.code == Errc::access_denied)
    return "check the credentials (`lodge config --explain` shows which were used) and that their policy "
           "allows this request on the store";
  if (store::is_unreachable(e))
    return "check --endpoint / AWS_ENDPOINT_URL, the network and any proxy; the store must answer from this "
           "host";
  return "see the error; `lodge -vv` shows the requests";
}

std::string why(const Error &e) {
  std::string s = e.message + " (" + std::string(e.name());
  if (!e.details.s3_code.empty()) s += ", " + e.details.s3_code;
  return s + ")";
}

bool is_ours(const std::string &rule_id) {
  return rule_id.rfind(store::lifecycle::k_rule_prefix, 0) == 0;
}

// The bucket's versioning: with it on, every object lodge deletes leaves a noncurrent version
// behind, which only a listing of versions (or a lifecycle rule) ever removes.
Check versioning_check(const Result<std::string> &state, const Result<std::vector<std::string>> &rules) {
  if (!state) {
    const auto &e = state.error();
    return make("store.versioning", Level::warn, "the bucket's versioning cannot be read: " + why(e),
                e.code == Errc::access_denied
                    ? "allow s3:GetBucketVersioning to check it (`lodge lifecycle` needs it too)"
                    : store_fix(e));
  }
  if (state.value().empty()) return make("store.versioning", Level::ok, "versioning off");
  const std::string &s = state.value();
  const std::string noncurrent(store::lifecycle::k_s3_noncurrent_rule);
  if (rules && std::find(rules->begin(), rules->end(), noncurrent) != rules->end())
    return make("store.versioning", Level::ok,
                "versioning " + s + "; lodge's lifecycle rule " + noncurrent +
                    " expires noncurrent versions");
  std::string msg = "versioning " + s +
                    (s == "Suspended" ? ": the versions kept while it was enabled stay as noncurrent versions"
                                      : ": deleted objects leave noncurrent versions") +
                    "; lodge removes them only if it can list versions";
  if (!rules)
    return make("store.versioning", Level::warn,
                msg + " (the lifecycle rules could not be read: see store.lifecycle)",
                "install the lifecycle backstop (`lodge lifecycle --apply`) to expire noncurrent versions");
  bool installed = std::any_of(rules->begin(), rules->end(), is_ours);
  return make("store.versioning", Level::warn, msg,
              installed ? "run `lodge lifecycle --apply` again: the installed backstop has no " + noncurrent +
                              " rule (it was installed while the bucket was not versioned)"
                        : "install the lifecycle backstop (`lodge lifecycle --apply`) to expire noncurrent "
                          "versions");
}

// The lifecycle backstop: what expires the objects and staged uploads a crashed run left,
// when no sweep comes to delete them.
std::optional<Check> lifecycle_check(store::ObjectStore &st, const Result<std::vector<std::string>> &rules) {
  const std::string apply = "`lodge lifecycle --apply` installs it";
  if (rules) {
    std::vector<std::string> ours;
    std::copy_if(rules->begin(), rules->end(), std::back_inserter(ours), is_ours);
    if (!ours.empty()) {
      std::string list;
      for (const auto &id : ours)
        list += (list.empty() ? "" : ", ") + id;
      return make("store.lifecycle", Level::ok,
                  "lodge's lifecycle backstop is installed (rules: " + list + ")");
    }
    std::string others = rules->empty() ? ""
                         : rules->size() == 1
                             ? " (the bucket has 1 rule of another tool)"
                             : " (the bucket has " + std::to_string(rules->size()) + " rules of other tools)";
    return make("store.lifecycle", Level::warn,
                "no lifecycle backstop" + others + ": objects a crashed run left are removed only by sweep",
                apply + " (keeping other tools' rules)");
  }
  const auto &e = rules.error();
  if (e.code == Errc::access_denied)
    return make("store.lifecycle", Level::warn, "the bucket's lifecycle rules cannot be read: " + why(e),
                "allow s3:GetLifecycleConfiguration to check the backstop (" + apply +
                    " with s3:PutLifecycleConfiguration)");
  if (e.code != Errc::unsupported)
    return make("store.lifecycle", Level::warn, "the bucket's lifecycle rules cannot be read: " + why(e),
                store_fix(e));
  // A store whose rules lodge cannot read: the rule it would install says how, if there is one.
  auto rule = st.lifecycle_rule(1);
  if (!rule) return std::nullopt;
  return make(
      "store.lifecycle", Level::ok,
      "not checked: " + e.message +
          "; if the backstop is not installed yet (`lodge lifecycle` prints it): " + rule->apply_hint);
}

} // namespace

std::vector<Check> store_checks(store::ObjectStore &st, const std::string &probe_key) {
  std::vector<Check> out;
  const std::string where = st.describe();
  // A signed LIST under lodge's own folder: reaches the server, proves the credentials and
  // that the bucket exists.
  auto listed = st.list(st.key_prefix() + ".lodge/", [](const store::ObjectInfo &) { return false; });
  if (!listed) {
    const auto &e = listed.error();
    out.push_back(make("store.reachable", Level::fail, where + ": " + why(e), store_fix(e)));
    return out;
  }
  out.push_back(make("store.reachable", Level::ok, where + " answered a LIST under .lodge/"));

  auto put = st.put_small(probe_key, "lodge doctor probe\n", "");
  if (!put) {
    const auto &e = put.error();
    out.push_back(make("store.put", Level::fail, "PUT " + probe_key + ": " + why(e),
                       "lodge needs s3:PutObject on the store's prefix: " + store_fix(e)));
    return out;
  }
  out.push_back(make("store.put", Level::ok, "PUT " + probe_key + " permitted"));

  auto removed = st.remove_small(probe_key);
  if (!removed) {
    const auto &e = removed.error();
    out.push_back(
        make("store.delete", Level::fail,
             "DELETE " + probe_key + ": " + why(e) + "; sweep and repair cannot remove objects",
             "lodge needs s3:DeleteObject (and s3:DeleteObjectVersion on a versioned bucket) on the "
             "store's prefix; remove the probe object by hand: " +
                 probe_key));
  } else {
    out.push_back(make("store.delete", Level::ok, "DELETE " + probe_key + " permitted"));
  }
  auto caps = st.capabilities();
  // Said, not warned of: the user chose it for a store that refuses flexible checksums.
  if (!caps.sends_checksums)
    out.push_back(make("store.checksums", Level::ok,
                       "the store is not asked to check each upload's SHA-256 (request_checksum_calculation "
                       "= when_required): lodge still hashes every file, and get verifies what it reads"));
  if (caps.versions) {
    auto s = st.support(store::Capability::version_listing);
    if (s == store::Support::absent)
      out.push_back(
          make("store.version_listing", Level::warn,
               "the server does not list object versions: old versions of deleted objects are not removed",
               "allow s3:ListBucketVersions, or expire noncurrent versions with a lifecycle rule "
               "(`lodge lifecycle`)"));
    else if (s == store::Support::present)
      out.push_back(make("store.version_listing", Level::ok, "object versions can be listed"));
  }
  if (caps.staged_listing) {
    auto staged = st.list_staged(probe_key, [](const store::StagedUpload &) { return false; });
    if (!staged && staged.error().code == Errc::unsupported)
      out.push_back(
          make("store.staged_listing", Level::warn,
               "the server cannot list incomplete multipart uploads: repair cannot find abandoned ones",
               "abort incomplete multipart uploads with a lifecycle rule (`lodge lifecycle --apply`)"));
    else if (!staged)
      out.push_back(make("store.staged_listing", Level::fail,
                         "listing multipart uploads: " + why(staged.error()),
                         "lodge needs s3:ListBucketMultipartUploads: " + store_fix(staged.error())));
    else
      out.push_back(make("store.staged_listing", Level::ok, "incomplete multipart uploads can be listed"));
  }
  auto rules = st.installed_lifecycle_rules();
  auto versioning = st.versioning_state();
  if (versioning || versioning.error().code != Errc::unsupported)
    out.push_back(versioning_check(versioning, rules));
  if (auto c = lifecycle_check(st, rules)) out.push_back(std::move(*c));
  return out;
}

} // namespace lodge::ops::doctor
