#include "stores.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <lodge/failpoint.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::store {
namespace {

// Applies the store.* failpoints in front of any backend: `error` raises the failure a
// refused request would (definite, never ambiguous), `sleep`/`pause` delay the call.
class FailpointStore final : public ObjectStore {
public:
  explicit FailpointStore(std::unique_ptr<ObjectStore> inner) : m_inner(std::move(inner)) {}
  [[nodiscard]] std::string describe() const override { return m_inner->describe(); }
  [[nodiscard]] const std::string &key_prefix() const override { return m_inner->key_prefix(); }
  [[nodiscard]] Support support(Capability c) const override { return m_inner->support(c); }
  [[nodiscard]] Capabilities capabilities() const override { return m_inner->capabilities(); }
  Status mark_committed(const std::string &key,
                        const std::map<std::string, std::string> &user_tags) override {
    if (failpoint::hit("store.tag")) return injected("PUT TAGGING " + key);
    return m_inner->mark_committed(key, user_tags);
  }
  Status mark_pending(const std::string &key, const std::map<std::string, std::string> &user_tags) override {
    return m_inner->mark_pending(key, user_tags);
  }
  Result<std::optional<std::string>> guard_refusal(const std::string &key) override {
    return m_inner->guard_refusal(key);
  }
  [[nodiscard]] Status accepts(const ObjectOptions &o) const override { return m_inner->accepts(o); }
  Result<LifecycleRule> lifecycle_rule(int days) override { return m_inner->lifecycle_rule(days); }
  Status apply_lifecycle(const LifecycleRule &rule) override { return m_inner->apply_lifecycle(rule); }
  Result<std::vector<std::string>> installed_lifecycle_rules() override {
    return m_inner->installed_lifecycle_rules();
  }
  Result<std::string> versioning_state() override { return m_inner->versioning_state(); }

  Result<PutResult> put(const PutRequest &req) override {
    if (failpoint::hit("store.put")) return injected("PUT " + req.key);
    return m_inner->put(req);
  }
  Status flush() override { return m_inner->flush(); }
  [[nodiscard]] const void *flush_domain() const override { return m_inner->flush_domain(); }
  [[nodiscard]] std::function<Status()> flusher() const override { return m_inner->flusher(); }
  Result<ObjectInfo> head(const std::string &key) override {
    if (failpoint::hit("store.head")) return injected("HEAD " + key);
    return m_inner->head(key);
  }
  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override {
    return m_inner->read(key, sink);
  }
  Result<std::string> presign_get(const std::string &key, int64_t expires_s) override {
    return m_inner->presign_get(key, expires_s);
  }
  Result<PresignedPut> presign_put(const PresignPutRequest &req) override {
    return m_inner->presign_put(req);
  }
  Result<PresignedPut> presign_part(const PresignPartRequest &req) override {
    return m_inner->presign_part(req);
  }
  Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &handle) override {
    if (failpoint::hit("store.list")) return injected("LIST PARTS " + key);
    return m_inner->list_parts(key, handle);
  }
  Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard guard) override {
    if (failpoint::hit("store.head")) return injected("HEAD " + key); // its stamp is read first
    if (failpoint::hit("store.delete")) return injected("DELETE " + key);
    return m_inner->remove_owned(key, stamp, guard);
  }
  bool batches_removals() override { return m_inner->batches_removals(); }
  Result<PlannedRemoval> plan_removal(const std::string &key, const Stamp &stamp,
                                      DeleteGuard guard) override {
    if (failpoint::hit("store.head")) return injected("HEAD " + key); // its stamp is read first
    return m_inner->plan_removal(key, stamp, guard);
  }
  std::vector<Result<Removal>> remove_planned(const std::vector<PlannedRemoval> &plans) override {
    // Each key meets the delete failpoint once, as remove_owned's does.
    std::vector<std::optional<Error>> injected_at(plans.size());
    std::vector<PlannedRemoval> pass;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (failpoint::hit("store.delete"))
        injected_at[i] = injected("DELETE " + plans[i].key);
      else
        pass.push_back(plans[i]);
    }
    auto done = m_inner->remove_planned(pass);
    std::vector<Result<Removal>> out;
    out.reserve(plans.size());
    size_t next = 0;
    for (auto &e : injected_at)
      out.push_back(e ? Result<Removal>(std::move(*e)) : std::move(done.at(next++)));
    return out;
  }
  Status remove_small(const std::string &key) override { return m_inner->remove_small(key); }
  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override {
    if (failpoint::hit("store.list")) return injected("LIST " + prefix);
    return m_inner->list(prefix, visit);
  }
  Result<std::string> begin_staged(const StagedRequest &req) override {
    if (failpoint::hit("store.put")) return injected("BEGIN STAGED UPLOAD " + req.key);
    auto handle = m_inner->begin_staged(req);
    // The create reached the server but its answer was lost, and the client's retry made a
    // second staged upload: the first is never recorded anywhere.
    if (handle && failpoint::hit("store.after_create")) return m_inner->begin_staged(req);
    return handle;
  }
  Result<Part> put_part(const std::string &key, const std::string &handle, int n, const Body &b,
                        int64_t d) override {
    return m_inner->put_part(key, handle, n, b, d);
  }
  Result<PutResult> complete_staged(const StagedRequest &req, const std::string &handle,
                                    const std::vector<Part> &p, int64_t d) override {
    return m_inner->complete_staged(req, handle, p, d);
  }
  Status abort_staged(const std::string &key, const std::string &handle) override {
    if (failpoint::hit("store.delete")) return injected("ABORT STAGED UPLOAD " + key);
    return m_inner->abort_staged(key, handle);
  }
  Status list_staged(const std::string &prefix,
                     const std::function<bool(const StagedUpload &)> &visit) override {
    if (failpoint::hit("store.list")) return injected("LIST UPLOADS " + prefix);
    return m_inner->list_staged(prefix, visit);
  }
  Status list_temps(const std::function<bool(const StoreTemp &)> &visit) override {
    return m_inner->list_temps(visit);
  }
  Result<bool> remove_temp(const std::string &name, int64_t before_ms) override {
    return m_inner->remove_temp(name, before_ms);
  }
  // The id marker: no store.* failpoint applies (they test the protocol's own objects).
  Result<SmallObject> get_small(const std::string &key) override { return m_inner->get_small(key); }
  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override {
    return m_inner->put_small(key, bytes, if_tag);
  }

private:
  static Error injected(const std::string &what) {
    ErrorDetails d;
    d.http_status = 503;
    d.s3_code = "InjectedFault";
    return Error(Errc::storage_unavailable, what + ": injected failure (failpoint)", d);
  }
  std::unique_ptr<ObjectStore> m_inner;
};
} // namespace

std::unique_ptr<ObjectStore> with_failpoints(std::unique_ptr<ObjectStore> inner) {
  return std::make_unique<FailpointStore>(std::move(inner));
}

Result<PlannedRemoval> ObjectStore::plan_removal(const std::string &key, const Stamp &stamp,
                                                 DeleteGuard guard) {
  PlannedRemoval p;
  p.key = key;
  p.stamp = stamp;
  p.guard = guard;
  return p;
}

std::vector<Result<Removal>> ObjectStore::remove_planned(const std::vector<PlannedRemoval> &plans) {
  std::vector<Result<Removal>> out;
  out.reserve(plans.size());
  for (const auto &p : plans)
    out.push_back(p.per_object ? remove_owned(p.key, p.stamp, p.guard) : Result<Removal>(p.found));
  return out;
}

Result<std::string> ObjectStore::presign_get(const std::string &key, int64_t /*expires_s*/) {
  return Error(Errc::unsupported,
               "cannot make a presigned URL for " + key + ": " + describe() + " cannot sign one");
}

Result<PresignedPut> ObjectStore::presign_part(const PresignPartRequest &req) {
  return Error(Errc::unsupported,
               "cannot make a presigned part URL for " + req.key + ": " + describe() + " cannot sign one");
}

Status ObjectStore::list_temps(const std::function<bool(const StoreTemp &)> & /*visit*/) {
  return ok_status();
}

Result<bool> ObjectStore::remove_temp(const std::string &name, int64_t /*before_ms*/) {
  return Error(Errc::unsupported, describe() + " keeps no temporary files: " + name + " is none of its own");
}

Result<std::vector<StoredPart>> ObjectStore::list_parts(const std::string &key,
                                                        const std::string & /*handle*/) {
  return Error(Errc::unsupported, "cannot list the parts of " + key + " on " + describe());
}

Result<PresignedPut> ObjectStore::presign_put(const PresignPutRequest &req) {
  return Error(Errc::unsupported, "cannot make a presigned upload URL for " + req.key + ": " + describe() +
                                      " cannot sign one (direct uploads need an S3 or Azure store)");
}

Status ObjectStore::mark_pending(const std::string & /*key*/,
                                 const std::map<std::string, std::string> & /*user_tags*/) {
  return ok_status();
}

Result<std::optional<std::string>> ObjectStore::guard_refusal(const std::string &key) {
  return Error(Errc::unsupported, describe() + " does not tag objects (" + key + ")");
}

Result<LifecycleRule> ObjectStore::lifecycle_rule(int /*days*/) {
  return Error(Errc::unsupported,
               describe() + " has no lifecycle rules: nothing expires there but what sweep deletes");
}

Status ObjectStore::apply_lifecycle(const LifecycleRule &rule) {
  return Error(Errc::unsupported, "lodge cannot install the lifecycle rule of " + describe() +
                                      (rule.apply_hint.empty() ? std::string{} : ": " + rule.apply_hint));
}

Status ObjectStore::accepts(const ObjectOptions &o) const {
  auto refuse = [&](const char *what) {
    return Error(Errc::unsupported, describe() + " cannot keep " + what + " on its objects");
  };
  if (!o.tags.empty()) return refuse("tags");
  if (!o.storage_class.empty()) return refuse("a storage class");
  if (!o.sse.empty()) return refuse("a server-side encryption setting");
  return ok_status();
}

Result<std::vector<std::string>> ObjectStore::installed_lifecycle_rules() {
  return Error(Errc::unsupported, "lodge cannot read the lifecycle rules of " + describe());
}

Result<std::string> ObjectStore::versioning_state() {
  return Error(Errc::unsupported, describe() + " has no versioning setting lodge can read");
}

void adopt_legacy_metadata(Metadata &m) {
  static constexpr std::array<std::pair<const char *, const char *>, 6> k_old{{
      {"lodge-record-id", meta::record},
      {"lodge-sha256", meta::sha256},
      {"lodge-ledger", meta::ledger},
      {"lodge-owner", meta::owner},
      {"lodge-path", meta::path},
      {"lodge-prefix", meta::prefix},
  }};
  for (const auto &[old_name, name] : k_old) {
    auto it = m.find(old_name);
    if (it == m.end()) continue;
    m.emplace(name, it->second); // a new name already present wins
    m.erase(it);
  }
}

StampSeen read_stamp(const Metadata &meta) {
  StampSeen s;
  if (auto l = meta.find(meta::ledger); l != meta.end()) s.ledger = l->second;
  if (auto r = meta.find(meta::record); r != meta.end()) {
    s.record = r->second;
    // Only the form lodge writes: digits, no sign, no leading zero, no trailing text.
    const std::string &t = r->second;
    int64_t id = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), id);
    if (ec == std::errc() && end == t.data() + t.size() && id > 0 && t.front() != '0' && t.front() != '+')
      s.record_id = id;
  }
  return s;
}

std::optional<std::string> stamp_mismatch(const Metadata &meta, const std::string &ledger_uuid,
                                          int64_t record_id) {
  auto seen = read_stamp(meta);
  if (!seen.ledger && !seen.record) return std::string("it has no lodge stamp (another tool wrote it)");
  const std::string named_ledger = seen.ledger ? *seen.ledger : std::string("(none)");
  const std::string named_record = seen.record ? "#" + util::escape_for_terminal(*seen.record) : "(none)";
  if (!seen.ledger || *seen.ledger != ledger_uuid)
    return "it is stamped by ledger " + util::escape_for_terminal(named_ledger) + " as record " +
           named_record;
  if (seen.record_id == 0)
    return "its stamp names this ledger but record " + named_record + ", which is no record id";
  if (record_id < 1 || seen.record_id != record_id)
    return "it is stamped as record #" + std::to_string(seen.record_id) + " of this ledger";
  return std::nullopt;
}

Status ObjectStore::get(const std::string &key, int fd) {
  bool write_failed = false;
  auto r = read(key, [&](const char *p, size_t n) { return !(write_failed = !write_all(fd, p, n)); });
  if (write_failed) return Error(Errc::internal, "GET " + key + ": writing the output failed");
  return r;
}

bool is_unreachable(const Error &e) {
  return e.code == Errc::access_denied || (e.code == Errc::storage_unavailable && e.details.curl_code != 0);
}

std::string file_store_root(const std::string &url) {
  return url.rfind("file://", 0) == 0 ? url.substr(7) : std::string{};
}

std::string join_segments(const std::string &path) {
  std::string out;
  for (const auto &seg : util::split(path, '/')) {
    if (seg.empty()) continue;
    if (!out.empty()) out += '/';
    out += seg;
  }
  return out;
}

std::string canonical_endpoint_url(std::string e) {
  while (!e.empty() && std::isspace(static_cast<unsigned char>(e.back())))
    e.pop_back();
  while (!e.empty() && e.back() == '/')
    e.pop_back();
  if (e.empty()) return e;
  auto sep = e.find("://");
  size_t host_begin = sep == std::string::npos ? 0 : sep + 3;
  size_t host_end = e.find('/', host_begin);
  if (host_end == std::string::npos) host_end = e.size();
  // Scheme and host are case-insensitive; the path (a gateway's) is not.
  std::transform(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(host_end), e.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::string scheme = sep == std::string::npos ? "" : e.substr(0, sep);
  std::string host = e.substr(host_begin, host_end - host_begin);
  if ((scheme == "http" && host.ends_with(":80")) || (scheme == "https" && host.ends_with(":443")))
    host.erase(host.rfind(':'));
  return e.substr(0, host_begin) + host + e.substr(host_end);
}

const Scheme *scheme_for(const std::string &url) {
  static const std::array<const Scheme *, 3> k_schemes{&s3_scheme(), &az_scheme(), &file_scheme()};
  for (const Scheme *sc : k_schemes)
    if (url.rfind(std::string(sc->name) + "://", 0) == 0) return sc;
  return nullptr;
}

namespace {
const Scheme &scheme_or_throw(const std::string &url) {
  if (const Scheme *sc = scheme_for(url)) return *sc;
  throw LodgeError(Errc::config_invalid,
                   "store: expected s3://bucket/prefix, az://container/prefix or file:///dir, got '" +
                       util::escape_for_terminal(url) + "'");
}
} // namespace

void check_store_url(const std::string &url) {
  scheme_or_throw(url).check(url);
}

Binding canonical_binding(const std::string &url, const std::string &endpoint, bool tag_state) {
  const Scheme &sc = scheme_or_throw(url);
  Binding b = sc.bind(url, endpoint);
  b.state_tags =
      sc.tagging == Scheme::Tagging::always || (sc.tagging == Scheme::Tagging::configured && tag_state);
  return b;
}

std::string describe(const Binding &b) {
  if (b.scheme == "file") return "file://" + b.location;
  std::string s = b.scheme + "://" + b.location + (b.root.empty() ? "" : "/" + b.root);
  return s + (b.endpoint == "aws" ? " (AWS)" : " at " + b.endpoint);
}

void refuse_unsafe(const std::string &url, const char *what, const std::string &path) {
  if (path.empty()) return;
  if (auto why = util::unsafe_path_reason(path))
    throw LodgeError(Errc::config_invalid, "store: the " + std::string(what) + " of '" + url + "' has " +
                                               *why + "; use plain '/'-separated names");
}

std::vector<SettingKey> setting_keys() {
  std::vector<SettingKey> out;
  for (const Scheme *sc : {&s3_scheme(), &az_scheme(), &file_scheme()})
    for (const auto &k : sc->keys)
      if (std::none_of(out.begin(), out.end(),
                       [&](const SettingKey &o) { return o.name == std::string(k.name); }))
        out.push_back(k);
  return out;
}

std::shared_ptr<const StoreConfig> resolve_settings(const std::string &url, const Settings &given,
                                                    const std::map<std::string, std::string> &env) {
  return scheme_or_throw(url).resolve(given, env);
}

std::shared_ptr<Backend> open_backend(const StoreOptions &o) {
  const Scheme &sc = scheme_or_throw(o.url);
  sc.check(o.url);
  if (o.config) return sc.open(o);
  // A caller without a configuration (tests, tools): its endpoint and CA bundle as flags.
  StoreOptions resolved = o;
  if (!o.endpoint.empty()) resolved.settings["endpoint"] = {o.endpoint, "the store options"};
  if (!o.ca_bundle.empty()) resolved.settings["ca_bundle"] = {o.ca_bundle, "the store options"};
  resolved.config = sc.resolve(resolved.settings, o.env);
  return sc.open(resolved);
}

std::unique_ptr<ObjectStore> open_store(const StoreOptions &o) {
  return open_backend(o)->connect();
}

} // namespace lodge::store
