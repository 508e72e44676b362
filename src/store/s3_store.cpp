#include "file_body.hpp"
#include "stores.hpp"

#include <lodge/s3/client.hpp>
#include <lodge/s3/xml.hpp>
#include <lodge/store/lifecycle.hpp>

namespace lodge::store {
namespace {

class S3Store final : public ObjectStore {
public:
  S3Store(const StoreOptions &o, std::string bucket, std::string prefix)
      : m_url(o.url), m_prefix(std::move(prefix)) {
    s3::ClientConfig cfg;
    cfg.endpoint = o.endpoint;
    cfg.region = o.region;
    cfg.bucket = std::move(bucket);
    cfg.credentials = o.credentials;
    cfg.retry.max_attempts = o.max_attempts;
    // Every connection of this process to the same server shares what it cannot do.
    cfg.traits = s3::traits_for((o.endpoint.empty() ? "aws:" + o.region : o.endpoint) + " " + cfg.bucket);
    http::TransportOptions t;
    t.ca_bundle = o.ca_bundle;
    t.verify_tls = o.verify_tls;
    t.connect_timeout_ms = o.connect_timeout_ms;
    t.low_speed_time_s = o.low_speed_time_s;
    m_client = std::make_unique<s3::Client>(cfg, http::make_curl_transport(t), util::system_clock());
  }

  [[nodiscard]] std::string describe() const override { return m_url; }
  [[nodiscard]] const std::string &key_prefix() const override { return m_prefix; }
  [[nodiscard]] Support support(Capability c) const override {
    auto s = m_client->support(c == Capability::version_listing ? s3::Feature::list_versions
                                                                : s3::Feature::list_uploads);
    return s == s3::Support::present  ? Support::present
           : s == s3::Support::absent ? Support::absent
                                      : Support::unknown;
  }

  Result<PutResult> put(const PutRequest &req) override {
    FileRangeBody body(req.body.fd, req.body.offset, req.body.size);
    s3::PutOptions o;
    o.content_type = req.content_type;
    o.sha256_hex = req.body.sha256_hex;
    o.metadata = req.metadata;
    o.deadline_steady_ms = req.deadline_steady_ms;
    auto r = m_client->put_object(req.key, body, o);
    if (!r) return changed_or(body, r.error(), req.key);
    if (body.sent_sha256_hex() != req.body.sha256_hex) return file_changed(req.key);
    return PutResult{r->etag, r->version_id};
  }

  Result<ObjectInfo> head(const std::string &key) override {
    auto r = m_client->head_object(key);
    if (!r) return r.error();
    ObjectInfo i;
    i.key = key;
    i.size = r->size;
    i.etag = r->etag;
    i.content_type = r->content_type;
    i.metadata = r->metadata;
    i.last_modified_ms = r->last_modified_ms;
    i.sha256_hex = r->checksum_sha256_hex;
    i.version_id = r->version_id;
    return i;
  }

  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override {
    return m_client->get_object(key, sink);
  }

  Result<std::string> presign_get(const std::string &key, int64_t expires_s) override {
    return m_client->presign_get(key, expires_s);
  }

  Status remove_all(const std::string &key) override { return m_client->delete_everything(key); }

  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override {
    return m_client->list_objects(prefix, [&](const s3::ListedObject &o) {
      ObjectInfo i;
      i.key = o.key;
      i.size = o.size;
      i.etag = o.etag;
      i.last_modified_ms = s3::parse_iso8601_ms(o.last_modified).value_or(0);
      return visit(i);
    });
  }

  Result<std::string> begin_multipart(const std::string &key, const std::string &content_type,
                                      const Metadata &metadata) override {
    s3::PutOptions o;
    o.content_type = content_type;
    o.metadata = metadata;
    return m_client->create_multipart(key, o);
  }

  Result<Part> put_part(const std::string &key, const std::string &upload_id, int number, const Body &b,
                        int64_t deadline_steady_ms) override {
    FileRangeBody body(b.fd, b.offset, b.size);
    auto r = m_client->upload_part(key, upload_id, number, body, b.sha256_hex, deadline_steady_ms);
    if (!r) return changed_or(body, r.error(), key);
    if (body.sent_sha256_hex() != b.sha256_hex) return file_changed(key);
    return Part{r->number, r->etag, r->sha256_hex};
  }

  Result<PutResult> complete_multipart(const std::string &key, const std::string &upload_id,
                                       const std::vector<Part> &parts, int64_t deadline_steady_ms) override {
    std::vector<s3::CompletedPart> cp;
    cp.reserve(parts.size());
    for (const auto &p : parts)
      cp.push_back({p.number, p.etag, p.sha256_hex});
    auto r = m_client->complete_multipart(key, upload_id, cp, true, deadline_steady_ms);
    if (!r) return r.error();
    return PutResult{r->etag, r->version_id};
  }

  Result<SmallObject> get_small(const std::string &key) override {
    auto r = m_client->get_small_object(key);
    if (!r) return r.error();
    return SmallObject{std::move(r->first), std::move(r->second)};
  }

  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override {
    http::StringBody body(bytes);
    s3::PutOptions o;
    o.content_type = "application/json";
    o.if_none_match = if_tag.empty();
    o.if_match = if_tag;
    auto r = m_client->put_object(key, body, o);
    if (!r) return r.error();
    return r->etag;
  }

  Status abort_multipart(const std::string &key, const std::string &upload_id) override {
    return m_client->abort_multipart(key, upload_id);
  }

  Status list_multipart(const std::string &prefix,
                        const std::function<bool(const UploadInfo &)> &visit) override {
    return m_client->list_multipart_uploads(prefix, [&](const s3::ListedUpload &u) {
      return visit(UploadInfo{u.key, u.upload_id, s3::parse_iso8601_ms(u.initiated).value_or(0)});
    });
  }

  Result<LifecycleRule> lifecycle_rule(int days) override {
    // The whole configuration is replaced by a PUT, so the rule is the bucket's current
    // configuration merged with lodge's rules; a versioned (or suspended) bucket also
    // gets the noncurrent-version rule.
    auto versioning = m_client->get_versioning();
    if (!versioning) return versioning.error();
    std::string current;
    if (auto existing = m_client->get_bucket_lifecycle())
      current = std::move(existing.value());
    else if (existing.error().code != Errc::not_found)
      return existing.error();
    lifecycle::S3Rules rules{m_prefix, days, m_tag_state, !versioning->empty()};
    auto document = lifecycle::s3_configuration(rules, current);
    if (!document) return document.error();
    LifecycleRule r;
    r.format = k_s3_format;
    r.document = std::move(document.value());
    r.can_apply = true;
    r.apply_hint = "lodge --store " + m_url +
                   " lifecycle --apply (PutBucketLifecycleConfiguration of this whole document: the bucket's "
                   "rules whose IDs do not start with lodge- are kept as they are)";
    return r;
  }

  Status apply_lifecycle(const LifecycleRule &rule) override {
    if (rule.format != k_s3_format)
      return Error(Errc::internal, "a " + rule.format + " rule cannot be installed on " + m_url);
    return m_client->put_bucket_lifecycle(rule.document);
  }

private:
  static constexpr const char *k_s3_format = "s3-lifecycle-xml";
  static Error file_changed(const std::string &key) {
    return Error(Errc::file_changed, "the file changed while it was being sent as " + key);
  }
  static Error changed_or(FileRangeBody &body, const Error &e, const std::string &key) {
    if (body.shrank() || e.code == Errc::unreadable) {
      Error c = file_changed(key);
      c.details = e.details;
      return c;
    }
    return e;
  }

  std::string m_url;
  std::string m_prefix;
  std::unique_ptr<s3::Client> m_client;
  bool m_tag_state = false; // objects are tagged lodge-state=pending/committed
};
} // namespace

std::unique_ptr<ObjectStore> make_s3_store(const StoreOptions &o, const std::string &bucket,
                                           const std::string &prefix) {
  return std::make_unique<S3Store>(o, bucket, prefix);
}

} // namespace lodge::store
