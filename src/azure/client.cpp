#include <algorithm>
#include <ctime>
#include <lodge/azure/client.hpp>
#include <lodge/http/resumable_get.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>

namespace lodge::azure {

namespace {

// The class an Azure error code names, where it names one (else the status decides).
std::optional<Errc> errc_for_code(const std::string &c, long status) {
  // The REST reference answers a failed If-None-Match: * with 412 ConditionNotMet;
  // Azurite (3.37) answers 409 BlobAlreadyExists. Both mean "exists".
  if (c == "BlobAlreadyExists" || c == "ConditionNotMet" || c == "TargetConditionNotMet")
    return Errc::precondition_failed;
  if (c == "Md5Mismatch" || c == "InvalidMd5" || c == "Crc64Mismatch") return Errc::bad_digest;
  if (c == "ServerBusy" || c == "OperationTimedOut")
    return status == 503 ? Errc::throttled : Errc::storage_unavailable;
  if (c == "AuthenticationFailed" || c == "AuthorizationFailure" || c == "AuthorizationPermissionMismatch")
    return Errc::access_denied;
  return std::nullopt;
}

std::string query_string(const Params &q) {
  std::string out;
  for (const auto &[k, v] : q) {
    if (!out.empty()) out += "&";
    out += url_encode(k, false) + "=" + url_encode(v, false);
  }
  return out;
}
} // namespace

std::shared_ptr<ServerTraits> traits_for(const std::string &server) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<ServerTraits>> all;
  std::lock_guard lock(mutex);
  auto &t = all[server];
  if (!t) t = std::make_shared<ServerTraits>();
  return t;
}

std::string tags_header(const std::map<std::string, std::string> &tags) {
  std::string out;
  for (const auto &[k, v] : tags) {
    if (!out.empty()) out += "&";
    out += url_encode(k, false) + "=" + url_encode(v, false);
  }
  return out;
}

Client::Client(ClientConfig cfg, std::unique_ptr<http::Transport> transport, const util::Clock &clock,
               http::Sleeper &sleeper)
    : m_cfg(std::move(cfg)), m_transport(std::move(transport)), m_clock(clock), m_sleeper(sleeper),
      m_traits(m_cfg.traits ? m_cfg.traits : std::make_shared<ServerTraits>()) {
  auto ep = parse_endpoint(m_cfg.account.endpoint, "blob endpoint");
  if (!ep) throw LodgeError(ep.error());
  m_base_url = ep->base;
  if (!ep->path_account.empty()) m_base_path = "/" + ep->path_account;
}

std::string Client::blob_url(const std::string &name) const {
  return m_base_url + m_base_path + "/" + m_cfg.container + "/" + url_encode(name, true);
}

Error Client::error_from(const http::Response &r, const std::string &what) const {
  http::ServiceError said;
  said.request_id = r.header("x-ms-request-id");
  said.code = r.header("x-ms-error-code");
  if (auto body = parse_error(r.body)) {
    if (said.code.empty()) said.code = body->code;
    std::string message = body->message;
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl); // RequestId/Time follow
    said.message = util::escape_for_terminal(message);
  }
  return http::error_for_answer(r, what, said, errc_for_code(said.code, r.status));
}

Result<http::Response> Client::send_once(const Call &call,
                                         const std::function<bool(const http::Response &)> &accept) {
  if (util::has_dot_segment(call.name))
    return Error(Errc::storage_error, call.what + ": invalid blob name '" +
                                          util::escape_for_terminal(call.name) + "': a '.' or '..' segment");
  std::string path = m_base_path + "/" + m_cfg.container;
  if (!call.name.empty()) path += "/" + url_encode(call.name, true);
  http::Request req;
  req.method = call.method;
  req.headers = call.headers;
  req.headers.emplace_back("x-ms-date", ms_date(m_clock.now_ms()));
  req.headers.emplace_back("x-ms-version", k_api_version);
  std::string query = query_string(call.query);
  if (m_cfg.account.key.empty()) {
    query += (query.empty() ? "" : "&") + m_cfg.account.sas;
  } else {
    SignInput in;
    in.method = call.method;
    in.account = m_cfg.account.name;
    in.encoded_path = path;
    in.raw_query = call.query;
    in.headers = req.headers;
    // curl sends the body's length; the signature covers what goes on the wire.
    if (call.body) in.headers.emplace_back("content-length", std::to_string(call.body->size()));
    std::string sts = string_to_sign(in);
    if (util::log::enabled(util::log::Level::debug)) util::log::debug("azure string to sign:\n" + sts);
    req.headers.emplace_back("authorization", authorization(m_cfg.account.name, m_cfg.account.key, sts));
  }
  req.url = m_base_url + path + (query.empty() ? "" : "?" + query);
  // A PUT always carries a body so that curl sends Content-Length (0 for none).
  http::StringBody empty("");
  req.body = call.body ? call.body : (call.method == "PUT" ? &empty : nullptr);
  req.sink = call.sink;
  req.accept = accept;
  req.deadline_steady_ms = call.deadline_steady_ms;
  auto r = m_transport->perform(req);
  if (!r) return r.error();
  if (r->status >= 300) return error_from(r.value(), call.what);
  return r;
}

Result<http::Response> Client::send(const Call &call) {
  return http::with_retries(m_cfg.retry, m_sleeper, call.what, call.deadline_steady_ms,
                            [&] { return send_once(call); });
}

void Client::add_write_headers(Call &c, const WriteOptions &o) const {
  c.headers.emplace_back("x-ms-blob-content-type", o.content_type);
  if (!o.if_match.empty())
    c.headers.emplace_back("if-match", o.if_match);
  else if (o.if_none_match)
    c.headers.emplace_back("if-none-match", "*");
  for (const auto &[k, v] : o.metadata)
    c.headers.emplace_back("x-ms-meta-" + k, v);
  if (!o.tags.empty()) c.headers.emplace_back("x-ms-tags", tags_header(o.tags));
  if (!o.access_tier.empty()) c.headers.emplace_back("x-ms-access-tier", o.access_tier);
  if (!o.cache_control.empty()) c.headers.emplace_back("x-ms-blob-cache-control", o.cache_control);
}

Result<PutResult> Client::put_blob(const std::string &name, http::BodySource &body, const WriteOptions &o) {
  Call c{"PUT",
         name,
         {},
         {{"x-ms-blob-type", "BlockBlob"}},
         &body,
         {},
         o.deadline_steady_ms,
         "PUT BLOB " + name};
  if (!o.content_md5.empty()) c.headers.emplace_back("content-md5", o.content_md5);
  add_write_headers(c, o);
  auto r = send(c);
  if (!r) return r.error();
  return PutResult{r->header("etag"), r->header("x-ms-version-id")};
}

Status Client::put_block(const std::string &name, const std::string &block_id, http::BodySource &body,
                         const std::string &content_md5, int64_t deadline_steady_ms) {
  Call c{"PUT",
         name,
         {{"comp", "block"}, {"blockid", block_id}},
         {},
         &body,
         {},
         deadline_steady_ms,
         "PUT BLOCK " + name};
  if (!content_md5.empty()) c.headers.emplace_back("content-md5", content_md5);
  auto r = send(c);
  if (!r) return r.error();
  return ok_status();
}

Result<PutResult> Client::put_block_list(const std::string &name, const std::vector<std::string> &block_ids,
                                         const WriteOptions &o) {
  http::StringBody body(block_list_xml(block_ids));
  Call c{"PUT", name, {{"comp", "blocklist"}}, {}, &body, {}, o.deadline_steady_ms, "PUT BLOCK LIST " + name};
  add_write_headers(c, o);
  auto r = send(c);
  if (!r) return r.error();
  return PutResult{r->header("etag"), r->header("x-ms-version-id")};
}

Result<Properties> Client::get_properties(const std::string &name, const std::string &version_id) {
  Call c{"HEAD", name, {}, {}, nullptr, {}, 0, "GET PROPERTIES " + name};
  if (!version_id.empty()) c.query.emplace_back("versionid", version_id);
  auto r = send(c);
  if (!r) return r.error();
  Properties p;
  p.size = static_cast<uint64_t>(util::parse_int(r->header("content-length")).value_or(0));
  p.etag = r->header("etag");
  p.content_type = r->header("content-type");
  p.content_md5 = r->header("content-md5");
  p.version_id = r->header("x-ms-version-id");
  p.last_modified_ms = util::parse_http_date_ms(r->header("last-modified")).value_or(0);
  p.tag_count = static_cast<int>(util::parse_int(r->header("x-ms-tag-count")).value_or(0));
  for (const auto &[k, v] : r->headers)
    if (k.rfind("x-ms-meta-", 0) == 0) p.metadata[k.substr(10)] = v;
  return p;
}

Result<std::pair<std::string, std::string>> Client::get_small_blob(const std::string &name) {
  Call c{"GET", name, {}, {}, nullptr, {}, 0, "GET BLOB " + name};
  auto r = send(c);
  if (!r) return r.error();
  if (r->body.size() >= (1U << 20))
    return Error(Errc::storage_error, "GET BLOB " + name + ": larger than lodge's own metadata can be");
  return std::make_pair(r->body, r->header("etag"));
}

Status Client::get_blob(const std::string &name, const std::function<bool(const char *, size_t)> &sink) {
  return http::resumable_get(m_cfg.retry, m_sleeper, {"GET BLOB " + name, "blob"}, sink,
                             [&](const http::Headers &extra, const http::Sink &counted,
                                 const std::function<bool(const http::Response &)> &accept) {
                               Call c{"GET", name, {}, extra, nullptr, counted, 0, "GET BLOB " + name};
                               return send_once(c, accept);
                             });
}

Status Client::delete_blob(const std::string &name, const DeleteOptions &o) {
  Call c{"DELETE", name, {}, {}, nullptr, {}, 0, "DELETE BLOB " + name};
  if (!o.version_id.empty())
    c.query.emplace_back("versionid", o.version_id);
  else
    c.headers.emplace_back("x-ms-delete-snapshots", "include");
  if (!o.if_tags.empty()) c.headers.emplace_back("x-ms-if-tags", o.if_tags);
  if (!o.if_match.empty()) c.headers.emplace_back("if-match", o.if_match);
  auto r = send(c);
  if (!r && r.error().code == Errc::not_found && r.error().details.s3_code != "ContainerNotFound")
    return ok_status();
  if (!r) return r.error();
  return ok_status();
}

Status Client::set_tags(const std::string &name, const std::map<std::string, std::string> &tags,
                        const std::string &if_match) {
  http::StringBody body(tags_xml(tags));
  Call c{"PUT", name, {{"comp", "tags"}}, {{"content-type", "application/xml; charset=UTF-8"}}, &body,
         {},    0,    "SET TAGS " + name};
  if (!if_match.empty()) c.headers.emplace_back("if-match", if_match);
  auto r = send(c);
  if (!r) return r.error();
  return ok_status();
}

Result<std::map<std::string, std::string>> Client::get_tags(const std::string &name) {
  Call c{"GET", name, {{"comp", "tags"}}, {}, nullptr, {}, 0, "GET TAGS " + name};
  auto r = send(c);
  if (!r) return r.error();
  auto tags = parse_tags(r->body);
  if (!tags) return Error(Errc::storage_error, "GET TAGS " + name + ": unreadable answer");
  return *tags;
}

Support Client::versions_support() const {
  return static_cast<Support>(m_traits->versions.load());
}

Status Client::list_blobs(const std::string &prefix, Include include,
                          const std::function<bool(const ListedBlob &)> &visit, int page_size) {
  const bool versions = has(include, Include::versions);
  if (versions && versions_support() == Support::absent)
    return Error(Errc::unsupported, "LIST BLOBS " + prefix + ": the service does not list versions");
  std::string inc;
  auto add = [&](const char *s) { inc += (inc.empty() ? "" : ",") + std::string(s); };
  if (has(include, Include::metadata)) add("metadata");
  if (has(include, Include::uncommitted)) add("uncommittedblobs");
  if (versions) add("versions");
  if (has(include, Include::tags)) add("tags");
  std::string marker;
  while (true) {
    Call c{"GET",
           "",
           {{"restype", "container"}, {"comp", "list"}, {"maxresults", std::to_string(page_size)}},
           {},
           nullptr,
           {},
           0,
           "LIST BLOBS " + prefix};
    if (!prefix.empty()) c.query.emplace_back("prefix", prefix);
    if (!inc.empty()) c.query.emplace_back("include", inc);
    if (!marker.empty()) c.query.emplace_back("marker", marker);
    auto r = send(c);
    if (versions) {
      int unknown = static_cast<int>(Support::unknown);
      if (r)
        m_traits->versions.compare_exchange_strong(unknown, static_cast<int>(Support::present));
      else if (r.error().code == Errc::unsupported || (r.error().details.http_status == 400 &&
                                                       r.error().details.s3_code != "AuthenticationFailed")) {
        if (m_traits->versions.exchange(static_cast<int>(Support::absent)) !=
            static_cast<int>(Support::absent))
          util::log::warn(m_base_url + m_base_path + " (container " + m_cfg.container +
                          ") does not list blob versions (" + r.error().message +
                          "); for the rest of this run deletes remove the current version only");
        return Error(Errc::unsupported, r.error().message, r.error().details);
      }
    }
    if (!r) return r.error();
    auto page = parse_list_blobs(r->body);
    if (!page)
      return Error(Errc::storage_error, "LIST BLOBS " + prefix + ": unreadable answer: " +
                                            util::escape_for_terminal(r->body.substr(0, 300)));
    for (const auto &b : page->blobs)
      if (!visit(b)) return ok_status();
    if (page->next_marker.empty()) return ok_status();
    marker = page->next_marker;
  }
}

Result<BlockList> Client::get_block_list(const std::string &name, BlockListType type) {
  const char *t = type == BlockListType::committed     ? "committed"
                  : type == BlockListType::uncommitted ? "uncommitted"
                                                       : "all";
  Call c{"GET",
         name,
         {{"comp", "blocklist"}, {"blocklisttype", t}},
         {},
         nullptr,
         {},
         0,
         "GET BLOCK LIST " + name};
  auto r = send(c);
  if (!r) return r.error();
  auto list = parse_block_list(r->body);
  if (!list) return Error(Errc::storage_error, "GET BLOCK LIST " + name + ": unreadable answer");
  return *list;
}

Result<std::string> Client::presign_get(const std::string &name, int64_t expires_s) {
  return presign(name, expires_s, "r");
}

http::Headers Client::write_headers(const WriteOptions &o) const {
  Call c{"PUT", "", {}, {{"x-ms-blob-type", "BlockBlob"}}, nullptr, {}, 0, ""};
  add_write_headers(c, o);
  return c.headers;
}

Result<std::string> Client::presign(const std::string &name, int64_t expires_s,
                                    const std::string &permissions) {
  if (m_cfg.account.key.empty())
    return Error(Errc::unsupported,
                 "presigned URL of " + name +
                     ": the credential is a SAS token; signing a URL needs the account key");
  if (expires_s < 1 || expires_s > 604'800)
    return Error(Errc::usage, "presigned URL of " + name + ": expiry must be 1s to 7d, got " +
                                  std::to_string(expires_s) + "s");
  if (util::has_dot_segment(name) || name.empty())
    return Error(Errc::storage_error,
                 "presigned URL: invalid blob name '" + util::escape_for_terminal(name) + "'");
  BlobSas sas;
  sas.permissions = permissions;
  sas.expiry_ms = m_clock.now_ms() + expires_s * 1000;
  sas.account = m_cfg.account.name;
  sas.container = m_cfg.container;
  sas.blob = name;
  return blob_url(name) + "?" + sas_query(sas, m_cfg.account.key);
}

} // namespace lodge::azure
