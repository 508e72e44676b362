#include "stores.hpp"

#include <algorithm>
#include <cctype>
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

  Result<PutResult> put(const PutRequest &req) override {
    if (failpoint::hit("store.put")) return injected("PUT " + req.key);
    return m_inner->put(req);
  }
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
  Result<LifecycleRule> lifecycle_rule(int days) override { return m_inner->lifecycle_rule(days); }
  Status apply_lifecycle(const LifecycleRule &rule) override { return m_inner->apply_lifecycle(rule); }
  Status remove_all(const std::string &key) override {
    if (failpoint::hit("store.delete")) return injected("DELETE " + key);
    return m_inner->remove_all(key);
  }
  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override {
    if (failpoint::hit("store.list")) return injected("LIST " + prefix);
    return m_inner->list(prefix, visit);
  }
  Result<std::string> begin_multipart(const std::string &key, const std::string &ct,
                                      const Metadata &m) override {
    if (failpoint::hit("store.put")) return injected("CREATE MULTIPART " + key);
    return m_inner->begin_multipart(key, ct, m);
  }
  Result<Part> put_part(const std::string &key, const std::string &id, int n, const Body &b,
                        int64_t d) override {
    return m_inner->put_part(key, id, n, b, d);
  }
  Result<PutResult> complete_multipart(const std::string &key, const std::string &id,
                                       const std::vector<Part> &p, int64_t d) override {
    return m_inner->complete_multipart(key, id, p, d);
  }
  Status abort_multipart(const std::string &key, const std::string &id) override {
    if (failpoint::hit("store.delete")) return injected("ABORT MULTIPART " + key);
    return m_inner->abort_multipart(key, id);
  }
  Status list_multipart(const std::string &prefix,
                        const std::function<bool(const UploadInfo &)> &visit) override {
    if (failpoint::hit("store.list")) return injected("LIST UPLOADS " + prefix);
    return m_inner->list_multipart(prefix, visit);
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

Result<std::string> ObjectStore::presign_get(const std::string &key, int64_t /*expires_s*/) {
  return Error(Errc::unsupported,
               "cannot make a presigned URL for " + key + ": " + describe() + " is not an S3 store");
}

Result<LifecycleRule> ObjectStore::lifecycle_rule(int /*days*/) {
  return Error(Errc::unsupported, describe() +
                                      ": this store has no lifecycle rules; `lodge sweep` (run from cron) is "
                                      "its only cleanup");
}

Status ObjectStore::apply_lifecycle(const LifecycleRule & /*rule*/) {
  return Error(Errc::unsupported, "lodge cannot install a lifecycle rule on " + describe());
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

bool is_s3_url(const std::string &url) {
  return url.rfind("s3://", 0) == 0;
}

std::string file_store_root(const std::string &url) {
  return url.rfind("file://", 0) == 0 ? url.substr(7) : std::string{};
}

namespace {
// "a//b/" -> "a/b": the segments, none empty, joined by one '/'.
std::string join_segments(const std::string &path) {
  std::string out;
  for (const auto &seg : util::split(path, '/')) {
    if (seg.empty()) continue;
    if (!out.empty()) out += '/';
    out += seg;
  }
  return out;
}

std::string canonical_endpoint(std::string e) {
  while (!e.empty() && std::isspace(static_cast<unsigned char>(e.back())))
    e.pop_back();
  while (!e.empty() && e.back() == '/')
    e.pop_back();
  if (e.empty()) return "aws";
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
} // namespace

Binding canonical_binding(const std::string &url, const std::string &endpoint) {
  Binding b;
  if (is_s3_url(url)) {
    std::string rest = url.substr(5);
    auto slash = rest.find('/');
    b.scheme = "s3";
    b.endpoint = canonical_endpoint(endpoint);
    b.location = rest.substr(0, slash);
    b.root = slash == std::string::npos ? "" : join_segments(rest.substr(slash + 1));
    return b;
  }
  if (url.rfind("file://", 0) == 0) {
    namespace fs = std::filesystem;
    std::string dir = url.substr(7);
    if (dir.empty()) dir = ".";
    std::error_code ec;
    fs::path p = fs::absolute(fs::path(dir), ec);
    if (ec) throw LodgeError(Errc::config_invalid, "store: cannot resolve the directory of '" + url + "'");
    // Symlinks resolved for the part that exists, '.', '..' and doubled '/' for the rest.
    fs::path canon = fs::weakly_canonical(p, ec);
    std::string s = (ec ? p.lexically_normal() : canon.lexically_normal()).string();
    while (s.size() > 1 && s.back() == '/')
      s.pop_back();
    b.scheme = "file";
    b.location = s;
    return b;
  }
  throw LodgeError(Errc::config_invalid,
                   "store: expected s3://bucket/prefix or file:///dir, got '" + url + "'");
}

std::string describe(const Binding &b) {
  if (b.scheme == "file") return "file://" + b.location;
  std::string s = b.scheme + "://" + b.location + (b.root.empty() ? "" : "/" + b.root);
  return s + (b.endpoint == "aws" ? " (AWS)" : " at " + b.endpoint);
}

namespace {
// A prefix or directory with a segment a server would rewrite (an empty, '.' or '..'
// one, percent-encoding, a backslash...) lands under keys no row records.
void refuse_unsafe(const std::string &url, const char *what, const std::string &path) {
  if (path.empty()) return;
  if (auto why = util::unsafe_path_reason(path))
    throw LodgeError(Errc::config_invalid,
                     "store: the " + std::string(what) + " of '" + url + "' has " + *why);
}
} // namespace

std::unique_ptr<ObjectStore> open_store(const StoreOptions &o) {
  const auto &url = o.url;
  if (is_s3_url(url)) {
    std::string rest = url.substr(5);
    auto slash = rest.find('/');
    std::string bucket = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    refuse_unsafe(url, "prefix", prefix);
    if (!prefix.empty()) prefix += "/";
    if (bucket.size() < 3 || bucket.size() > 63)
      throw LodgeError(Errc::config_invalid, "store: bucket name must be 3-63 characters in '" + url + "'");
    for (char c : bucket)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
        throw LodgeError(Errc::config_invalid, "store: invalid bucket name in '" + url + "'");
    return with_failpoints(make_s3_store(o, bucket, prefix));
  }
  if (url.rfind("file://", 0) == 0) {
    std::string root = url.substr(7);
    if (root.empty() || root[0] != '/')
      throw LodgeError(Errc::config_invalid,
                       "store: file:// needs an absolute path, as in file:///srv/lodge (got '" + url + "')");
    std::string dir = root.substr(1);
    if (!dir.empty() && dir.back() == '/') dir.pop_back();
    refuse_unsafe(url, "directory", dir);
    return with_failpoints(make_file_store(url, root));
  }
  throw LodgeError(Errc::config_invalid,
                   "store: expected s3://bucket/prefix or file:///dir, got '" + url + "'");
}

} // namespace lodge::store
