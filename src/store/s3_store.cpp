#include "file_body.hpp"
#include "s3_removal.hpp"
#include "stores.hpp"

#include <lodge/aws/aws_config.hpp>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/aws/credentials.hpp>
#include <lodge/s3/client.hpp>
#include <lodge/s3/settings.hpp>
#include <lodge/s3/xml.hpp>
#include <lodge/store/lifecycle.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>

namespace lodge::store {
namespace {

// An s3:// store's resolved settings (s3/settings.hpp), as the store layer hands them on.
class S3Config final : public StoreConfig {
public:
  explicit S3Config(s3::S3Settings s) : m_s(std::move(s)) {}
  [[nodiscard]] const s3::S3Settings &s3() const { return m_s; }
  [[nodiscard]] const std::string &endpoint() const override { return m_s.endpoint; }
  [[nodiscard]] const std::string &ca_bundle() const override { return m_s.ca_bundle; }
  [[nodiscard]] bool tag_state() const override { return m_s.tag_state; }
  [[nodiscard]] std::string default_service_url() const override {
    return "https://s3." + m_s.region + ".amazonaws.com/";
  }
  // Never a surprise: with no endpoint and no region, say where requests will go.
  [[nodiscard]] std::string notice() const override {
    if (!m_s.region_assumed) return {};
    return "no S3 endpoint or region configured: assuming region " + util::escape_for_terminal(m_s.region) +
           " (set --region, AWS_REGION or region in the AWS config profile)";
  }
  [[nodiscard]] TransferDefaults transfer_defaults() const override {
    TransferDefaults t;
    t.jobs = m_s.max_concurrent_requests;
    t.multipart_threshold = m_s.multipart_threshold;
    t.part_size = m_s.multipart_chunksize;
    t.bandwidth = m_s.max_bandwidth;
    for (const auto &[name, key] : {std::pair{"jobs", "max_concurrent_requests"},
                                    {"multipart_threshold", "multipart_threshold"},
                                    {"part_size", "multipart_chunksize"},
                                    {"bandwidth", "max_bandwidth"}})
      if (auto it = m_s.sources.find(key); it != m_s.sources.end()) t.sources[name] = it->second;
    return t;
  }
  void to_json(nlohmann::json &out) const override {
    out["endpoint"] = m_s.endpoint;
    out["region"] = m_s.region;
    out["ca_bundle"] = m_s.ca_bundle;
    out["profile"] = m_s.profile;
    out["tag_state"] = m_s.tag_state;
    out["s3"] = s3::to_json(m_s); // every resolved setting and where it came from (not a config key)
  }

private:
  s3::S3Settings m_s;
};

std::shared_ptr<const StoreConfig> resolve(const Settings &given,
                                           const std::map<std::string, std::string> &env) {
  s3::GivenSettings in;
  for (const auto &[k, v] : layer_settings(given, env))
    in[k] = {v.value, v.source};
  return std::make_shared<S3Config>(s3::parse_s3_settings(in, env));
}

const s3::S3Settings &settings_of(const StoreOptions &o) {
  const auto *c = dynamic_cast<const S3Config *>(o.config.get());
  if (c == nullptr)
    throw LodgeError(Errc::internal, o.url + ": the store's settings are not an s3:// store's");
  return c->s3();
}

class S3Store final : public ObjectStore {
public:
  S3Store(const StoreOptions &o, const aws::Credentials &credentials,
          std::shared_ptr<aws::CredentialSource> source, std::string bucket, std::string prefix)
      : m_url(o.url), m_prefix(std::move(prefix)), m_tag_state(settings_of(o).tag_state),
        m_aws(settings_of(o).endpoint.empty()), m_sends_checksums(settings_of(o).sends_checksums()) {
    const auto &s = settings_of(o);
    s3::ClientConfig cfg;
    cfg.endpoint = s.endpoint;
    cfg.region = s.region;
    cfg.addressing_style = s.addressing_style;
    cfg.bucket = std::move(bucket);
    cfg.credentials = credentials;
    cfg.credential_source = std::move(source);
    cfg.retry.max_attempts = o.max_attempts > 0 ? o.max_attempts : s.max_attempts;
    cfg.retry.backpressure = o.backpressure;
    cfg.send_checksums = s.sends_checksums();
    // Every connection of this process to the same server shares what it cannot do.
    cfg.traits = s3::traits_for((s.endpoint.empty() ? "aws:" + s.region : s.endpoint) + " " + cfg.bucket);
    http::TransportOptions t;
    t.ca_bundle = s.ca_bundle;
    t.verify_tls = o.verify_tls;
    t.connect_timeout_ms = o.connect_timeout_ms;
    t.low_speed_time_s = o.low_speed_time_s;
    t.limiter = o.limiter;
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
  [[nodiscard]] Capabilities capabilities() const override {
    Capabilities c;
    c.versions = true;
    c.staged_listing = true;
    c.presign = true;
    c.state_tags = m_tag_state;
    // AWS's own S3 (not a server behind a custom endpoint), when it is sent a checksum.
    c.verifies_checksums = m_aws && m_sends_checksums;
    c.sends_checksums = m_sends_checksums;
    c.max_presigned_put = 5ULL << 30;
    c.presign_parts = true;
    c.min_part_size = 5ULL << 20;
    c.max_part_size = 5ULL << 30;
    c.max_parts = 10'000;
    return c;
  }
  // PutObjectTagging replaces the object's whole tag set: the user's tags go with it. Set
  // whatever this connection's tag_state: it is only asked when the ledger recorded the
  // tag as owed, and a tag owed must be set by whichever host finishes it.
  Status mark_committed(const std::string &key,
                        const std::map<std::string, std::string> &user_tags) override {
    auto tags = user_tags;
    tags[std::string(lifecycle::k_s3_state_tag)] = "committed";
    return m_client->put_object_tagging(key, tags);
  }
  Status mark_pending(const std::string &key, const std::map<std::string, std::string> &user_tags) override {
    if (!m_tag_state) return ok_status();
    auto tags = user_tags;
    tags[std::string(lifecycle::k_s3_state_tag)] = "pending";
    return m_client->put_object_tagging(key, tags);
  }
  // The guard here is lodge's own read of the tags (remove_version): it keeps only what is
  // tagged committed.
  Result<std::optional<std::string>> guard_refusal(const std::string &key) override {
    if (!m_tag_state) return ObjectStore::guard_refusal(key);
    auto tags = m_client->get_object_tagging(key);
    if (!tags) return tags.error();
    auto it = tags->find(std::string(lifecycle::k_s3_state_tag));
    if (it == tags->end() || it->second != "committed") return std::optional<std::string>();
    return std::optional<std::string>("is tagged " + it->first + "=committed");
  }
  [[nodiscard]] Status accepts(const ObjectOptions &o) const override {
    // Ten tags at most, lodge's state tag among them when it writes one.
    const size_t room = k_max_tags - (m_tag_state ? 1 : 0);
    if (o.tags.size() > room)
      return Error(Errc::usage, std::to_string(o.tags.size()) + " tags; " + describe() + " takes at most " +
                                    std::to_string(room) + " (lodge's " +
                                    std::string(lifecycle::k_s3_state_tag) + " tag is the tenth)");
    return ok_status();
  }

  Result<PutResult> put(const PutRequest &req) override {
    FileRangeBody body(req.body);
    s3::PutOptions o;
    o.content_type = req.content_type;
    o.sha256_hex = req.body.sha256_hex;
    o.metadata = req.metadata;
    set_options(o, req.options);
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
    adopt_legacy_metadata(i.metadata);
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
  Result<PresignedPut> presign_put(const PresignPutRequest &req) override {
    s3::PutOptions o;
    o.content_type = req.content_type;
    o.sha256_hex = req.sha256_hex;
    o.metadata = req.metadata;
    set_options(o, req.options);
    auto r = m_client->presign_put(req.key, req.size, o, req.expires_s);
    if (!r) return r.error();
    return PresignedPut{"PUT", r->first, r->second};
  }

  Result<PresignedPut> presign_part(const PresignPartRequest &req) override {
    auto r = m_client->presign_part(req.key, req.handle, req.number, req.size, req.sha256_hex, req.expires_s);
    if (!r) return r.error();
    return PresignedPut{"PUT", r->first, r->second};
  }
  Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &handle) override {
    auto r = m_client->list_parts(key, handle);
    if (!r) return r.error();
    std::vector<StoredPart> out;
    out.reserve(r->size());
    for (const auto &p : r.value())
      out.push_back(StoredPart{p.number, p.size, p.etag, s3::part_sha256_hex(p), s3::part_md5_hex(p)});
    return out;
  }

  Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard guard) override {
    Removal out;
    std::vector<s3::ListedVersion> versions;
    auto listed = m_client->list_versions(key, [&](const s3::ListedVersion &v) {
      if (v.key == key) versions.push_back(v);
      return true;
    });
    if (listed) {
      // Delete markers have no bytes and no stamp: they stay (lodge never makes one now).
      for (const auto &v : versions)
        if (!v.delete_marker)
          if (auto r = remove_version(key, &v, stamp, guard, out); !r) return r.error();
    } else {
      // A server without ListObjectVersions (warned once, when learned), or credentials
      // without s3:ListBucketVersions: the current object is all that can be seen (on a
      // versioned bucket older versions stay).
      const auto &e = listed.error();
      if (e.code != Errc::unsupported && e.code != Errc::access_denied) return e;
      if (e.code == Errc::access_denied)
        util::log::warn("cannot list versions of " + key + " (" + e.message +
                        "); deleting the current version only");
      if (auto r = remove_version(key, nullptr, stamp, guard, out); !r) return r.error();
    }
    // Something not ours is at the key: its writer may have an upload there too.
    if (!out.kept.empty() || out.refused) return out;
    std::vector<std::string> uploads;
    auto lu = m_client->list_multipart_uploads(key, [&](const s3::ListedUpload &u) {
      if (u.key == key) uploads.push_back(u.upload_id);
      return true;
    });
    if (!lu && lu.error().code != Errc::unsupported) return lu.error();
    for (const auto &id : uploads)
      if (auto a = m_client->abort_multipart(key, id); !a) return a.error();
    return out;
  }

  // A bucket never versioned holds one object per key at most: its deletes go in batches
  // (s3_removal.hpp), without listing each key's versions and uploads.
  bool batches_removals() override { return m_client->never_versioned(); }
  Result<PlannedRemoval> plan_removal(const std::string &key, const Stamp &stamp,
                                      DeleteGuard guard) override {
    return s3_plan_removal(*m_client, m_tag_state, key, stamp, guard);
  }
  std::vector<Result<Removal>> remove_planned(const std::vector<PlannedRemoval> &plans) override {
    return s3_remove_planned(
        *m_client, plans, [this](const PlannedRemoval &p) { return remove_owned(p.key, p.stamp, p.guard); });
  }

  Status remove_small(const std::string &key) override { return m_client->delete_everything(key); }

  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override {
    return m_client->list_objects(prefix, [&](const s3::ListedObject &o) {
      ObjectInfo i;
      i.key = o.key;
      i.size = o.size;
      i.etag = o.etag;
      i.last_modified_ms = aws::parse_iso8601_ms(o.last_modified).value_or(0);
      return visit(i);
    });
  }

  Result<std::string> begin_staged(const StagedRequest &req) override {
    s3::PutOptions o;
    o.content_type = req.content_type;
    o.metadata = req.metadata;
    o.part_checksums = req.part_checksums;
    set_options(o, req.options);
    return m_client->create_multipart(req.key, o);
  }

  Result<Part> put_part(const std::string &key, const std::string &upload_id, int number, const Body &b,
                        int64_t deadline_steady_ms) override {
    FileRangeBody body(b);
    auto r = m_client->upload_part(key, upload_id, number, body, b.sha256_hex, deadline_steady_ms);
    if (!r) return changed_or(body, r.error(), key);
    if (body.sent_sha256_hex() != b.sha256_hex) return file_changed(key);
    return Part{r->number, r->etag, r->sha256_hex};
  }

  Result<PutResult> complete_staged(const StagedRequest &req, const std::string &upload_id,
                                    const std::vector<Part> &parts, int64_t deadline_steady_ms) override {
    std::vector<s3::CompletedPart> cp;
    cp.reserve(parts.size());
    for (const auto &p : parts)
      cp.push_back({p.number, p.etag, p.sha256_hex});
    auto r = m_client->complete_multipart(req.key, upload_id, cp, true, deadline_steady_ms);
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

  Status abort_staged(const std::string &key, const std::string &upload_id) override {
    return m_client->abort_multipart(key, upload_id);
  }

  Status list_staged(const std::string &prefix,
                     const std::function<bool(const StagedUpload &)> &visit) override {
    return m_client->list_multipart_uploads(prefix, [&](const s3::ListedUpload &u) {
      return visit(StagedUpload{u.key, u.upload_id, aws::parse_iso8601_ms(u.initiated).value_or(0)});
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

  Result<std::vector<std::string>> installed_lifecycle_rules() override {
    auto xml = m_client->get_bucket_lifecycle();
    if (!xml && xml.error().code == Errc::not_found) return std::vector<std::string>{};
    if (!xml) return xml.error();
    return lifecycle::s3_rule_ids(xml.value());
  }

  Result<std::string> versioning_state() override { return m_client->get_versioning(); }

private:
  static constexpr const char *k_s3_format = "s3-lifecycle-xml";

  // One version of `key` (`v`; nullptr: the current object, versions unknown): HEADed for
  // its stamp, then deleted only if the stamp is `stamp`'s. A version id names immutable
  // bytes, so its delete removes exactly what was read; the current "null" version (an
  // unversioned or suspended bucket) is replaced in place by a put, so its delete carries
  // If-Match on the ETag read (a change meanwhile: PRECONDITION_FAILED from
  // the server, an error here, and the caller's retry looks again).
  Status remove_version(const std::string &key, const s3::ListedVersion *v, const Stamp &stamp,
                        DeleteGuard guard, Removal &out) {
    const std::string version = v ? v->version_id : "";
    const std::string what = v && version != "null" ? "version " + version + " of " + key : key;
    // The current "null" version (an unversioned bucket's only one) is HEADed as the current
    // object: a HEAD naming versionId=null is refused (400) where versioning was never on.
    const bool current_null = v && version == "null" && v->latest;
    auto h = m_client->head_object(key, current_null ? std::string() : version);
    if (!h && h.error().code == Errc::not_found) return ok_status(); // gone meanwhile
    if (!h) return h.error();
    if (current_null && !h->version_id.empty() && h->version_id != "null")
      return Error(Errc::storage_error, "DELETE " + what + ": a new version was put meanwhile");
    auto meta = h->metadata;
    adopt_legacy_metadata(meta);
    if (auto why = stamp_mismatch(meta, stamp.ledger_uuid, stamp.record_id)) {
      out.kept.push_back(what + ": " + *why);
      return ok_status();
    }
    if (m_tag_state && guard == DeleteGuard::pending_only) {
      // S3 has no delete conditional on tags: they are read first. The stamp is this failed
      // row's, so this only stops a task meeting an object someone tagged committed since.
      auto tags = m_client->get_object_tagging(key, current_null ? std::string() : version);
      if (!tags && tags.error().code != Errc::not_found && tags.error().code != Errc::unsupported)
        return tags.error();
      if (tags) {
        auto it = tags->find(std::string(lifecycle::k_s3_state_tag));
        if (it != tags->end() && it->second == "committed") {
          out.refused = what + " is tagged " + it->first + "=committed";
          return ok_status();
        }
      }
    }
    // (A "null" version that is not the latest changes only by becoming the latest.)
    auto d = m_client->delete_object(key, version, !v || current_null ? h->etag : std::string());
    if (!d && d.error().code == Errc::precondition_failed)
      return Error(Errc::storage_error, "DELETE " + what + ": it changed between its HEAD and its delete",
                   d.error().details);
    if (!d) return d;
    ++out.removed;
    return ok_status();
  }
  // The user's options, and lodge's pending tag on every put of a tagging store (not on
  // lodge's own small objects).
  void set_options(s3::PutOptions &o, const ObjectOptions &opt) const {
    auto tags = opt.tags;
    if (m_tag_state) tags[std::string(lifecycle::k_s3_state_tag)] = "pending";
    o.tagging = s3_tagging(tags);
    o.storage_class = opt.storage_class;
    o.sse = opt.sse;
    o.sse_kms_key_id = opt.sse_kms_key_id;
    o.cache_control = opt.cache_control;
  }
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
  bool m_tag_state = false;
  bool m_aws = false;            // AWS's own endpoint
  bool m_sends_checksums = true; // request_checksum_calculation = when_supported
  std::unique_ptr<s3::Client> m_client;
};

// s3://bucket[/prefix]: the bucket, and the prefix without its one allowed trailing '/'.
std::pair<std::string, std::string> split_url(const std::string &url) {
  std::string rest = url.substr(5);
  auto slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {bucket, prefix};
}

void check_url(const std::string &url) {
  auto [bucket, prefix] = split_url(url);
  refuse_unsafe(url, "prefix", prefix);
  if (bucket.size() < 3 || bucket.size() > 63)
    throw LodgeError(Errc::config_invalid, "store: bucket name must be 3-63 characters in '" + url + "'");
  for (char c : bucket)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
      throw LodgeError(Errc::config_invalid, "store: invalid bucket name in '" + url + "'");
}

Binding bind(const std::string &url, const std::string &endpoint) {
  std::string rest = url.substr(5);
  auto slash = rest.find('/');
  Binding b;
  b.scheme = "s3";
  b.endpoint = canonical_endpoint_url(endpoint);
  if (b.endpoint.empty()) b.endpoint = "aws";
  b.location = rest.substr(0, slash);
  b.root = slash == std::string::npos ? "" : join_segments(rest.substr(slash + 1));
  return b;
}

// The credentials chain, walked once for the process, over the AWS shared files the settings read.
aws::CredentialChain walk_chain(const StoreOptions &o) {
  const auto &s = settings_of(o);
  // STS (web identity) at AWS_ENDPOINT_URL_STS, else at the configured endpoint: a local
  // server (moto) answers both, and a surprise trip to AWS is what the endpoint rules out.
  aws::ChainAccess sts;
  auto it = o.env.find("AWS_ENDPOINT_URL_STS");
  sts.sts_endpoint = it != o.env.end() && !it->second.empty() ? it->second : s.endpoint;
  if (util::log::url_has_userinfo(sts.sts_endpoint)) // as parse_s3_settings refuses one for S3
    throw LodgeError(
        Errc::config_invalid,
        "endpoint (env AWS_ENDPOINT_URL_STS): user information (user:password@ before the host) is "
        "refused in an endpoint URL");
  sts.region = s.region;
  sts.sts_transport = [o, ca_bundle = s.ca_bundle] {
    http::TransportOptions t;
    t.ca_bundle = ca_bundle;
    t.verify_tls = o.verify_tls;
    t.connect_timeout_ms = o.connect_timeout_ms;
    t.total_timeout_ms = 60'000;
    return http::make_curl_transport(t);
  };
  // The container and instance metadata services: link-local, never through a proxy, and
  // a short timeout so that a machine without them (a laptop, CI) does not hang.
  sts.metadata_transport = [](int64_t timeout_ms) {
    http::TransportOptions t;
    t.connect_timeout_ms = timeout_ms;
    t.total_timeout_ms = timeout_ms;
    t.no_proxy = true;
    return http::make_curl_transport(t);
  };
  try {
    return aws::resolve_credential_chain(o.env, *s.aws, &sts);
  } catch (const LodgeError &e) {
    aws::CredentialChain c;
    c.credentials = e.error();
    return c;
  }
}

// The bucket and prefix parsed, the credentials resolved once (the SDKs' chain: the
// environment, then the shared files' profile) for every connection of the process.
class S3Backend final : public Backend {
public:
  explicit S3Backend(const StoreOptions &o) : m_opts(o), m_chain(walk_chain(o)) {
    auto [bucket, prefix] = split_url(o.url);
    m_bucket = bucket;
    m_prefix = prefix.empty() ? "" : prefix + "/";
    // Temporary credentials (STS, credential_process, container, IMDS) are renewed by walking the chain
    // again, five minutes before they expire, for every connection of the process at once.
    if (m_chain.credentials && m_chain.credentials->expires_ms != 0)
      m_source = std::make_shared<aws::CredentialSource>(
          m_chain.credentials.value(), [opts = o] { return walk_chain(opts).credentials; },
          util::system_clock());
  }
  std::unique_ptr<ObjectStore> connect() override {
    const auto &c = m_chain.credentials;
    if (!c) throw LodgeError(c.error());
    return with_failpoints(std::make_unique<S3Store>(m_opts, c.value(), m_source, m_bucket, m_prefix));
  }
  [[nodiscard]] std::optional<CredentialView> credentials() const override {
    CredentialView v;
    for (const auto &s : m_chain.steps)
      v.chain.push_back({s.provider, s.used, s.why});
    const auto &c = m_chain.credentials;
    if (!c) {
      v.error = c.error().message;
      return v;
    }
    const auto &id = c->access_key_id;
    v.source = c->source;
    // "AKIA…XYZ1": enough to tell keys apart, never the whole id (and never the secret).
    v.identity = id.size() > 8 ? id.substr(0, 4) + "\u2026" + id.substr(id.size() - 4) : "****";
    v.has_token = !c->session_token.empty();
    return v;
  }

private:
  StoreOptions m_opts;
  aws::CredentialChain m_chain;
  std::shared_ptr<aws::CredentialSource> m_source; // temporary credentials only
  std::string m_bucket;
  std::string m_prefix;
};

std::shared_ptr<Backend> open(const StoreOptions &o) {
  return std::make_shared<S3Backend>(o);
}
} // namespace

const Scheme &s3_scheme() {
  static const Scheme k{"s3",
                        "s3://bucket/prefix",
                        Scheme::Tagging::configured,
                        &check_url,
                        &bind,
                        {{"endpoint"}, {"region"}, {"ca_bundle"}, {"profile"}, {"tag_state", true}},
                        &resolve,
                        &open};
  return k;
}

} // namespace lodge::store
