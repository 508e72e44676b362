#include "stores.hpp"

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
