#include <algorithm>
#include <cstdio>
#include <ctime>
#include <lodge/azure/client.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>

namespace lodge::azure {

namespace {

// "bytes FIRST-LAST/TOTAL" of a 206 answer.
std::optional<std::pair<uint64_t, uint64_t>> parse_content_range(const std::string &v) {
  unsigned long long first = 0, last = 0, total = 0;
  if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu", &first, &last, &total) != 3) return std::nullopt;
  return std::make_pair(static_cast<uint64_t>(first), static_cast<uint64_t>(total));
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
  ErrorDetails d;
  d.http_status = r.status;
  d.request_id = r.header("x-ms-request-id");
  d.s3_code = r.header("x-ms-error-code");
  std::string message;
  if (auto body = parse_error(r.body)) {
    if (d.s3_code.empty()) d.s3_code = body->code;
    message = body->message;
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl); // RequestId/Time follow
  }
  const auto &c = d.s3_code;
  Errc code = http::errc_for_status(r.status);
  // The REST reference answers a failed If-None-Match: * with 412 ConditionNotMet;
  // Azurite (3.37) answers 409 BlobAlreadyExists. Both mean "exists".
  if (c == "BlobAlreadyExists" || c == "ConditionNotMet" || c == "TargetConditionNotMet")
    code = Errc::precondition_failed;
  else if (c == "Md5Mismatch" || c == "InvalidMd5" || c == "Crc64Mismatch")
    code = Errc::bad_digest;
  else if (c == "ServerBusy" || c == "OperationTimedOut")
    code = r.status == 503 ? Errc::throttled : Errc::storage_unavailable;
  else if (c == "AuthenticationFailed" || c == "AuthorizationFailure" ||
           c == "AuthorizationPermissionMismatch")
    code = Errc::access_denied;
  d.retry_after_ms = http::retry_after_ms(r);
  std::string text = what + ": HTTP " + std::to_string(r.status);
  if (!c.empty()) text += " " + c;
  if (!message.empty()) text += ": " + util::escape_for_terminal(message);
  if (!d.request_id.empty()) text += " (request id " + d.request_id + ")";
  return Error(code, text, d);
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
  bool ambiguous = false;
  for (int attempt = 1;; ++attempt) {
    auto r = send_once(call);
    if (r) return r;
    Error e = r.error();
    ambiguous = ambiguous || e.details.ambiguous;
    e.details.ambiguous = ambiguous;
    if (!http::retry_after(m_cfg.retry, m_sleeper, call.what, attempt, e, call.deadline_steady_ms)) return e;
  }
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
  // As s3::Client::get_object: a retry asks only for what the sink has not seen, of the
  // very blob it started on.
  uint64_t delivered = 0;
  std::optional<uint64_t> total;
  std::string etag;
  for (int attempt = 1;; ++attempt) {
    const bool resuming = delivered > 0;
    uint64_t skip = 0;
    std::string refusal;
    Call c{"GET", name, {}, {}, nullptr, {}, 0, "GET BLOB " + name};
    if (resuming) {
      c.headers.emplace_back("range", "bytes=" + std::to_string(delivered) + "-");
      if (!etag.empty()) c.headers.emplace_back("if-match", etag);
    }
    auto accept = [&](const http::Response &h) {
      auto length = util::parse_int(h.header("content-length"));
      if (!resuming) {
        etag = h.header("etag");
        if (h.status == 200 && length && *length >= 0) total = static_cast<uint64_t>(*length);
        return true;
      }
      if (!etag.empty() && h.header("etag") != etag) {
        refusal = "the blob changed between attempts (ETag " + etag + ", then " + h.header("etag") + ")";
        return false;
      }
      if (h.status == 206) {
        auto range = parse_content_range(h.header("content-range"));
        if (range && range->first == delivered && (!total || range->second == *total)) return true;
        refusal = "the resumed answer covers '" + h.header("content-range") + "', not bytes " +
                  std::to_string(delivered) + "- of the blob";
        return false;
      }
      if (h.status == 200 && (!total || (length && static_cast<uint64_t>(*length) == *total))) {
        skip = delivered;
        return true;
      }
      refusal = "unexpected HTTP " + std::to_string(h.status) + " to a resumed GET";
      return false;
    };
    c.sink = [&](const char *p, size_t n) {
      if (skip > 0) {
        auto k = static_cast<size_t>(std::min<uint64_t>(skip, n));
        skip -= k;
        p += k;
        n -= k;
        if (n == 0) return true;
      }
      delivered += n;
      return sink(p, n);
    };
    auto r = send_once(c, accept);
    if (r) {
      if (total && delivered != *total)
        return Error(Errc::storage_error, "GET BLOB " + name + ": the body ended after " +
                                              std::to_string(delivered) + " of " + std::to_string(*total) +
                                              " bytes");
      return ok_status();
    }
    if (!refusal.empty()) return Error(Errc::storage_error, "GET BLOB " + name + ": " + refusal);
    if (!http::retry_after(m_cfg.retry, m_sleeper, c.what, attempt, r.error(), 0)) return r.error();
    if (delivered > 0)
      util::log::info("resuming GET BLOB " + name + " at byte " + std::to_string(delivered) +
                      (total ? " of " + std::to_string(*total) : std::string{}));
  }
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
