// az://container/prefix — blobs in an Azure Storage container, through azure::Client.
// Lodge's state is a blob index tag (state=pending, then committed) that the lifecycle rule
// reads; a guarded delete is conditional on the ETag whose stamp was read and on the tag.
// Here: the URL and the scheme's entry, the puts, reads, tags, listing and deletes;
// staged uploads (uncommitted blocks) are in azure_store_staged.cpp.
#include "azure_store.hpp"

#include <algorithm>
#include <lodge/store/lifecycle.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <optional>

namespace lodge::store::az {

Error file_changed(const std::string &key) {
  return Error(Errc::file_changed, "the file changed while it was being sent as " + key);
}

Result<crypto::Md5Digest> range_md5(const Body &b, const std::string &key) {
  crypto::Md5 md5;
  crypto::Sha256 sha;
  std::string buf(static_cast<size_t>(1) << 20, '\0');
  uint64_t pos = 0;
  while (pos < b.size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), b.size - pos));
    ssize_t got = 0;
    do {
      got = ::pread(b.fd, buf.data(), want, static_cast<off_t>(b.offset + pos));
    } while (got < 0 && errno == EINTR);
    if (got == 0) return file_changed(key);
    if (got < 0) return Error(Errc::unreadable, "reading the file to send as " + key + " failed");
    md5.update(buf.data(), static_cast<size_t>(got));
    sha.update(buf.data(), static_cast<size_t>(got));
    pos += static_cast<uint64_t>(got);
  }
  if (crypto::to_hex(sha.finish()) != b.sha256_hex) return file_changed(key);
  return md5.finish();
}

Error changed_or(FileRangeBody &body, const Error &e, const std::string &key) {
  if (body.shrank() || e.code == Errc::unreadable || e.code == Errc::bad_digest) {
    Error c = file_changed(key);
    c.details = e.details;
    return c;
  }
  return e;
}

namespace {
std::optional<std::string> container_problem(const std::string &c) {
  if (c.size() < 3 || c.size() > 63) return "a container name has 3 to 63 characters";
  for (char ch : c)
    if ((ch < 'a' || ch > 'z') && (ch < '0' || ch > '9') && ch != '-')
      return "a container name has only a-z, 0-9 and '-'";
  if (c.front() == '-' || c.back() == '-' || c.find("--") != std::string::npos)
    return "a container name neither starts nor ends with '-' nor holds \"--\"";
  return std::nullopt;
}

std::pair<std::string, std::string> split_url(const std::string &url) {
  std::string rest = url.substr(5); // "az://"
  auto slash = rest.find('/');
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/')
    prefix.pop_back();
  return {rest.substr(0, slash), prefix};
}

void check_url(const std::string &url) {
  auto [container, prefix] = split_url(url);
  if (auto why = container_problem(container))
    throw LodgeError(Errc::config_invalid, "store: invalid container in '" + util::escape_for_terminal(url) +
                                               "': " + *why + " (expected az://container/prefix)");
  refuse_unsafe(url, "prefix", prefix);
}

Binding bind(const std::string &url, const std::string &endpoint) {
  auto [container, prefix] = split_url(url);
  Binding b;
  b.scheme = "az";
  b.endpoint = canonical_endpoint_url(endpoint);
  if (b.endpoint.empty()) b.endpoint = "azure"; // the account's own, from the environment
  b.location = container;
  b.root = join_segments(prefix);
  return b;
}
} // namespace

AzureStore::AzureStore(const StoreOptions &o, const azure::Account &account, const std::string &container,
                       std::string prefix)
    : m_url(o.url), m_prefix(std::move(prefix)) {
  azure::ClientConfig cfg;
  cfg.account = account;
  cfg.container = container;
  // The retry policy's own bound unless the caller set one: AWS_MAX_ATTEMPTS and the AWS
  // profile speak for S3 only.
  if (o.max_attempts > 0) cfg.retry.max_attempts = o.max_attempts;
  cfg.retry.backpressure = o.backpressure;
  cfg.traits = azure::traits_for(account.endpoint + " " + container);
  http::TransportOptions t;
  t.ca_bundle = o.config->ca_bundle();
  t.verify_tls = o.verify_tls;
  t.connect_timeout_ms = o.connect_timeout_ms;
  t.low_speed_time_s = o.low_speed_time_s;
  t.limiter = o.limiter;
  m_client = std::make_unique<azure::Client>(cfg, http::make_curl_transport(t), util::system_clock());
}

Support AzureStore::support(Capability c) const {
  if (c == Capability::staged_listing) return Support::present;
  auto s = m_client->versions_support();
  return s == azure::Support::present  ? Support::present
         : s == azure::Support::absent ? Support::absent
                                       : Support::unknown;
}

Capabilities AzureStore::capabilities() const {
  Capabilities c;
  c.versions = true; // where the account keeps versions; learned from the listing
  c.staged_listing = true;
  c.guarded_delete = true;
  c.state_tags = true;
  c.presign = !m_client->config().account.key.empty();
  c.max_presigned_put = 5000ULL << 20;
  // Put Block through a SAS (presign_part); a blob commits up to 50,000 blocks of up to
  // 4000 MiB each, and a block has no least size.
  c.presign_parts = c.presign;
  c.max_part_size = 4000ULL << 20;
  c.max_parts = k_max_blocks;
  return c;
}

Result<PutResult> AzureStore::put(const PutRequest &req) {
  auto md5 = range_md5(req.body, req.key);
  if (!md5) return md5.error();
  FileRangeBody body(req.body);
  azure::WriteOptions o;
  o.content_type = req.content_type;
  o.content_md5 = crypto::to_base64(md5.value());
  o.metadata = req.metadata;
  set_options(o, req.options);
  o.deadline_steady_ms = req.deadline_steady_ms;
  auto r = m_client->put_blob(req.key, body, o);
  if (!r) return changed_or(body, r.error(), req.key);
  if (body.sent_sha256_hex() != req.body.sha256_hex) return file_changed(req.key);
  return PutResult{r->etag, r->version_id};
}

// A SAS pins no header (rsct and its kin only override what a GET through that SAS
// answers): whoever holds it may create this one blob (never overwrite it) until it
// expires, and do nothing else. Its permission is c alone: with t (which Azure asks of a
// Put Blob that sends x-ms-tags) the holder could set the blob's tags at any time, such as
// state=pending on a confirmed blob, which the lifecycle rule then deletes. So the sender
// sends no tags: the blob arrives untagged, confirm tags it committed (with the user's
// tags), and a failed upload's guarded delete counts an untagged blob as pending
// (remove_owned). What arrives is checked by lodge confirm, byte for byte, type included.
Result<PresignedPut> AzureStore::presign_put(const PresignPutRequest &req) {
  azure::WriteOptions o;
  o.content_type = req.content_type;
  o.metadata = req.metadata;
  o.access_tier = req.options.storage_class;
  o.cache_control = req.options.cache_control;
  // `c` alone (create, never overwrite). Not `t`: its holder could then tag the blob
  // whenever it likes (state=pending on a confirmed blob, which the backstop deletes). So the
  // sender sends no tags; the blob arrives untagged and lodge tags it at confirm.
  auto url = m_client->presign(req.key, req.expires_s, "c");
  if (!url) return url.error();
  PresignedPut p;
  p.url = url.value();
  p.headers.emplace_back("content-length", std::to_string(req.size));
  for (auto &h : m_client->write_headers(o))
    p.headers.push_back(std::move(h));
  return p;
}

Result<ObjectInfo> AzureStore::head(const std::string &key) {
  auto r = m_client->get_properties(key);
  if (!r) return r.error();
  ObjectInfo i;
  i.key = key;
  i.size = r->size;
  i.etag = r->etag;
  i.content_type = r->content_type;
  i.metadata = r->metadata;
  i.last_modified_ms = r->last_modified_ms;
  if (auto it = i.metadata.find(meta::sha256); it != i.metadata.end()) i.sha256_hex = it->second;
  i.version_id = r->version_id;
  return i;
}

Status AzureStore::read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) {
  return m_client->get_blob(key, sink);
}

Result<std::string> AzureStore::presign_get(const std::string &key, int64_t expires_s) {
  return m_client->presign_get(key, expires_s);
}

// Set Blob Tags replaces the whole set: the user's tags go with lodge's state.
Status AzureStore::mark_committed(const std::string &key,
                                  const std::map<std::string, std::string> &user_tags) {
  auto tags = user_tags;
  tags.insert(k_committed.begin(), k_committed.end());
  return m_client->set_tags(key, tags);
}

Status AzureStore::mark_pending(const std::string &key, const std::map<std::string, std::string> &user_tags) {
  auto tags = user_tags;
  tags.insert(k_pending.begin(), k_pending.end());
  return m_client->set_tags(key, tags);
}

Result<std::optional<std::string>> AzureStore::guard_refusal(const std::string &key) {
  auto tags = m_client->get_tags(key);
  if (!tags) return tags.error();
  if (tags->empty()) return std::optional<std::string>(); // counts as pending (remove_current)
  auto it = tags->find(k_pending.begin()->first);
  if (it == tags->end()) return std::optional<std::string>("has no state tag");
  if (it->second == "pending") return std::optional<std::string>();
  return std::optional<std::string>("is tagged state=" + it->second);
}

Status AzureStore::accepts(const ObjectOptions &o) const {
  if (!o.sse.empty())
    return Error(Errc::unsupported, describe() +
                                        ": Azure Storage encrypts every blob itself; --sse is for S3 "
                                        "(an encryption scope is set on the container)");
  if (!o.storage_class.empty() && o.storage_class != "Hot" && o.storage_class != "Cool" &&
      o.storage_class != "Cold" && o.storage_class != "Archive")
    return Error(Errc::usage, "storage class '" + o.storage_class + "': " + describe() +
                                  " takes an access tier: Hot, Cool, Cold or Archive");
  if (o.tags.size() > k_max_tags - 1)
    return Error(Errc::usage, std::to_string(o.tags.size()) + " tags; " + describe() + " takes at most " +
                                  std::to_string(k_max_tags - 1) + " (lodge's state tag is the tenth)");
  if (o.tags.contains("state")) return Error(Errc::usage, "tag 'state' is lodge's own on " + describe());
  return ok_status();
}

Result<Removal> AzureStore::remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard guard) {
  Removal out;
  if (auto s = remove_current(key, stamp, guard, out); !s) return s.error();
  if (auto s = remove_versions(key, stamp, out); !s) return s.error();
  // Something not ours is at the key: its writer may be staging blocks there too.
  if (!out.kept.empty() || out.refused) return out;
  if (auto s = clear_uncommitted(key); !s) return s.error();
  return out;
}

Status AzureStore::remove_small(const std::string &key) {
  if (auto s = m_client->delete_blob(key); !s) return s;
  if (m_client->versions_support() == azure::Support::absent) return ok_status();
  std::vector<std::string> versions;
  auto s = m_client->list_blobs(key, azure::Include::versions, [&](const azure::ListedBlob &b) {
    if (b.name == key && !b.version_id.empty()) versions.push_back(b.version_id);
    return true;
  });
  if (!s && s.error().code == Errc::unsupported) return ok_status(); // said once by the client
  if (!s) return s;
  for (const auto &v : versions)
    if (auto d = m_client->delete_blob(key, {"", "", v}); !d) return d;
  return ok_status();
}

// With each blob's tags (reconcile compares lodge's state tag with the row), unless the
// credential may not read tags (a SAS without 't'): then once without, and said once.
Status AzureStore::list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) {
  bool visited = false;
  auto each = [&](const azure::ListedBlob &b) {
    visited = true;
    ObjectInfo i;
    i.key = b.name;
    i.size = b.size;
    i.etag = b.etag;
    // reconcile leaves objects younger than its --older-than alone (maybe in flight).
    i.last_modified_ms = util::parse_http_date_ms(b.last_modified).value_or(0);
    if (m_list_tags) {
      auto it = b.tags.find(k_pending.begin()->first);
      i.state_tag = it == b.tags.end() ? std::string() : it->second;
    }
    return visit(i);
  };
  auto listed = m_client->list_blobs(prefix, m_list_tags ? azure::Include::tags : azure::Include::none, each);
  if (listed || !m_list_tags || visited || listed.error().code != Errc::access_denied) return listed;
  util::log::warn("cannot list the tags of " + m_url + " (" + listed.error().message +
                  "); listing without them: state tags are not compared with the ledger");
  m_list_tags = false;
  return m_client->list_blobs(prefix, azure::Include::none, each);
}

Result<SmallObject> AzureStore::get_small(const std::string &key) {
  auto r = m_client->get_small_blob(key);
  if (!r) return r.error();
  return SmallObject{std::move(r->first), std::move(r->second)};
}

// lodge's own marker: never tagged pending (the backstop rule would expire it).
Result<std::string> AzureStore::put_small(const std::string &key, const std::string &bytes,
                                          const std::string &if_tag) {
  http::StringBody body(bytes);
  azure::WriteOptions o;
  o.content_type = "application/json";
  o.content_md5 = crypto::md5_base64(bytes);
  o.if_none_match = if_tag.empty();
  o.if_match = if_tag;
  auto r = m_client->put_blob(key, body, o);
  if (!r) return r.error();
  return r->etag;
}

Result<LifecycleRule> AzureStore::lifecycle_rule(int days) {
  if (days < 1) return Error(Errc::usage, "lifecycle: days must be at least 1, got " + std::to_string(days));
  const auto &cfg = m_client->config();
  LifecycleRule r;
  r.format = "azure-management-policy-json";
  r.document = lifecycle::azure_management_policy(cfg.container, m_prefix, days) + "\n";
  r.apply_hint = lifecycle::azure_apply_hint(cfg.account.name);
  r.can_apply = false;
  return r;
}

Result<std::vector<std::string>> AzureStore::installed_lifecycle_rules() {
  return Error(Errc::unsupported, "lodge cannot read the lifecycle policy of " +
                                      m_client->config().account.name +
                                      " (the account's management policy: a storage key cannot read it)");
}

void AzureStore::set_options(azure::WriteOptions &o, const ObjectOptions &opt) {
  o.tags = opt.tags;
  o.tags.insert(k_pending.begin(), k_pending.end());
  o.access_tier = opt.storage_class;
  o.cache_control = opt.cache_control;
}

// The current blob, if its stamp is `stamp`'s: deleted under If-Match on the ETag whose
// metadata was read (and, guarded, x-ms-if-tags state = 'pending'), so a blob written
// over it meanwhile is never the one deleted. A 412 is told apart by reading the blob
// again: another ETag is a change (an error: the caller's retry looks again), the same
// one is the tag condition (refused).
// A blob of this row with no tag at all is a direct upload's (its sender may not set
// tags: its SAS has no t), never a committed object (only lodge tags, and only an ACTIVE
// row's object committed): it counts as pending, so it is tagged pending first and then
// deleted under the tag condition and the ETag read (tagging keeps the ETag; Set Blob
// Tags takes no ETag condition, so a blob written over the key in between would be
// tagged pending, and then kept by the If-Match).
Status AzureStore::remove_current(const std::string &key, const Stamp &stamp, DeleteGuard guard,
                                  Removal &out) {
  auto p = m_client->get_properties(key);
  if (!p && p.error().code == Errc::not_found) return ok_status();
  if (!p) return p.error();
  if (auto why = stamp_mismatch(p->metadata, stamp.ledger_uuid, stamp.record_id)) {
    out.kept.push_back(key + ": " + *why);
    return ok_status();
  }
  azure::DeleteOptions d;
  d.if_match = p->etag;
  if (guard == DeleteGuard::pending_only) {
    d.if_tags = azure::k_if_pending;
    if (p->tag_count == 0) {
      if (auto t = m_client->set_tags(key, k_pending); !t) return t;
    } else if (auto why = guard_refusal(key); why && why.value()) {
      // Azure enforces both conditions; Azurite 3.37 stops at If-Match and ignores
      // x-ms-if-tags beside it, so the tag is also read first.
      out.refused = key + " " + *why.value();
      return ok_status();
    }
  }
  auto del = m_client->delete_blob(key, d);
  if (del) {
    ++out.removed;
    return ok_status();
  }
  if (del.error().code != Errc::precondition_failed) return del;
  auto again = m_client->get_properties(key);
  if (!again && again.error().code == Errc::not_found) return ok_status(); // deleted meanwhile
  if (!again) return again.error();
  if (again->etag != p->etag)
    return Error(Errc::storage_error,
                 "DELETE BLOB " + key + ": it changed between reading its stamp and its delete",
                 del.error().details);
  auto why = guard_refusal(key);
  out.refused = key + " " + (why && why.value() ? *why.value() : std::string("is not tagged state=pending")) +
                " (the service refused the guarded delete: " + del.error().message + ")";
  return ok_status();
}

// Older versions of exactly this name, where the account keeps versions: each whose
// stamp is `stamp`'s (a version is immutable: the one read is the one deleted).
Status AzureStore::remove_versions(const std::string &key, const Stamp &stamp, Removal &out) {
  if (m_client->versions_support() == azure::Support::absent) return ok_status();
  std::vector<std::string> versions;
  auto s = m_client->list_blobs(key, azure::Include::versions, [&](const azure::ListedBlob &b) {
    if (b.name == key && !b.version_id.empty() && !b.is_current_version) versions.push_back(b.version_id);
    return true;
  });
  if (!s && s.error().code == Errc::unsupported) return ok_status(); // said once by the client
  if (!s) return s;
  for (const auto &v : versions) {
    auto p = m_client->get_properties(key, v);
    if (!p && p.error().code == Errc::not_found) continue;
    if (!p) return p.error();
    if (auto why = stamp_mismatch(p->metadata, stamp.ledger_uuid, stamp.record_id)) {
      out.kept.push_back("version " + v + " of " + key + ": " + *why);
      continue;
    }
    if (auto d = m_client->delete_blob(key, {"", "", v}); !d) return d;
    ++out.removed;
  }
  return ok_status();
}

// A blob holding only uncommitted blocks (a losing or abandoned staged upload) is made
// real by committing an empty block list under lodge's conditions, which drops every
// uncommitted block, then deleted under the ETag just made and the pending tag.
// Uncommitted blocks of a committed blob are never touched (it is not ours to clear).
Status AzureStore::clear_uncommitted(const std::string &key) {
  auto blocks = m_client->get_block_list(key, azure::BlockListType::all);
  if (!blocks && blocks.error().code == Errc::not_found) return ok_status();
  if (!blocks) return blocks.error();
  if (blocks->uncommitted.empty() || !blocks->committed.empty()) return ok_status();
  if (m_client->get_properties(key)) return ok_status(); // a committed (empty) blob
  azure::WriteOptions o;
  o.tags = k_pending;
  o.metadata = {{meta::record, "0"}};
  auto made = m_client->put_block_list(key, {}, o);
  if (!made && made.error().code == Errc::precondition_failed) return ok_status(); // someone committed
  if (!made) return made.error();
  azure::DeleteOptions d;
  d.if_tags = azure::k_if_pending;
  d.if_match = made->etag;
  auto del = m_client->delete_blob(key, d);
  if (!del && del.error().code == Errc::precondition_failed) return ok_status();
  return del;
}

namespace {
// The container and prefix parsed, the account and credential resolved once for every
// connection of the process.
class AzureBackend final : public Backend {
public:
  explicit AzureBackend(const StoreOptions &o)
      : m_opts(o), m_account(azure::resolve_account(o.env, o.config->endpoint())) {
    auto [container, prefix] = split_url(o.url);
    m_container = container;
    prefix = join_segments(prefix);
    m_prefix = prefix.empty() ? "" : prefix + "/";
  }
  std::unique_ptr<ObjectStore> connect() override {
    if (!m_account) throw LodgeError(m_account.error());
    return with_failpoints(std::make_unique<AzureStore>(m_opts, m_account.value(), m_container, m_prefix));
  }
  [[nodiscard]] std::optional<CredentialView> credentials() const override {
    CredentialView v;
    if (!m_account) {
      v.error = m_account.error().message;
      return v;
    }
    v.source = m_account->source;
    v.identity = m_account->name + (m_account->key.empty() ? " (SAS token)" : " (account key)");
    v.has_token = !m_account->sas.empty();
    return v;
  }

private:
  StoreOptions m_opts;
  Result<azure::Account> m_account;
  std::string m_container;
  std::string m_prefix;
};

std::shared_ptr<Backend> open(const StoreOptions &o) {
  return std::make_shared<AzureBackend>(o);
}
} // namespace
} // namespace lodge::store::az

namespace lodge::store {

const Scheme &az_scheme() {
  // endpoint and ca_bundle; S3's keys (region, profile, tag_state) are ignored, as they
  // always were: one configuration may serve hosts of both clouds, and tagging is not a
  // choice here (Azure always tags).
  static const Scheme k{"az",      "az://container/prefix",       Scheme::Tagging::always, &az::check_url,
                        &az::bind, {{"endpoint"}, {"ca_bundle"}}, &common_config,          &az::open};
  return k;
}

} // namespace lodge::store
