#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <curl/curl.h>
#include <fstream>
#include <lodge/crypto/random.hpp>
#include <lodge/http/resumable_get.hpp>
#include <lodge/s3/client.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>
#include <map>
#include <mutex>
#include <openssl/evp.h>
#include <thread>

namespace lodge::s3 {

namespace {
// Content-MD5 (RFC 1864: base64 of the raw digest), which S3 requires on the tagging and
// lifecycle PUTs.
std::string md5_base64(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md.data(), &len, EVP_md5(), nullptr) != 1)
    throw LodgeError(Errc::internal, "EVP_Digest(MD5) failed");
  return util::base64_encode(std::string_view(reinterpret_cast<const char *>(md.data()), len));
}

std::string base64_of_hex(const std::string &hex) {
  auto raw = util::hex_decode(hex);
  return raw ? util::base64_encode(*raw) : std::string{};
}
} // namespace

Support ServerTraits::get(Feature f) const {
  return static_cast<Support>(m_slots.at(static_cast<size_t>(f)).load());
}

bool ServerTraits::learn(Feature f, Support s) {
  auto &slot = m_slots.at(static_cast<size_t>(f));
  if (s == Support::absent) return slot.exchange(static_cast<int>(Support::absent)) != static_cast<int>(s);
  // Presence never overrides a learned absence (a proxy in front may answer differently).
  int unknown = static_cast<int>(Support::unknown);
  slot.compare_exchange_strong(unknown, static_cast<int>(s));
  return false;
}

std::shared_ptr<ServerTraits> traits_for(const std::string &server) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<ServerTraits>> all;
  std::lock_guard lock(mutex);
  auto &t = all[server];
  if (!t) t = std::make_shared<ServerTraits>();
  return t;
}

Client::Client(ClientConfig cfg, std::unique_ptr<http::Transport> transport, const util::Clock &clock,
               Sleeper &sleeper)
    : m_cfg(std::move(cfg)), m_transport(std::move(transport)), m_clock(clock), m_sleeper(sleeper),
      m_traits(m_cfg.traits ? m_cfg.traits : std::make_shared<ServerTraits>()) {
  const auto &style = m_cfg.addressing_style;
  if (m_cfg.endpoint.empty()) {
    // AWS itself: virtual-hosted addressing, unless the bucket name would break TLS.
    m_path_style = style == "path" || (style != "virtual" && m_cfg.bucket.find('.') != std::string::npos);
    std::string region_host = "s3." + m_cfg.region + ".amazonaws.com";
    m_host = m_path_style ? region_host : m_cfg.bucket + "." + region_host;
    m_base_url = "https://" + m_host;
  } else {
    // Custom endpoints (MinIO, Ceph, moto, IP addresses, localhost): path-style.
    m_path_style = true;
    std::string e = m_cfg.endpoint;
    while (!e.empty() && e.back() == '/')
      e.pop_back();
    auto scheme_end = e.find("://");
    if (scheme_end == std::string::npos)
      throw LodgeError(Errc::config_invalid,
                       "endpoint: expected http://host[:port] or https://host[:port], got '" + e + "'");
    std::string scheme = e.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https")
      throw LodgeError(Errc::config_invalid, "endpoint: only http and https are supported, got '" + e + "'");
    std::string rest = e.substr(scheme_end + 3);
    if (rest.find('/') != std::string::npos)
      throw LodgeError(Errc::config_invalid, "endpoint: must not contain a path, got '" + e + "'");
    if (rest.empty()) throw LodgeError(Errc::config_invalid, "endpoint: no host in '" + e + "'");
    m_host = rest;
    m_base_url = e;
    if (style == "virtual") { // bucket.host[:port], as the CLI sends it when told to
      m_path_style = false;
      m_host = m_cfg.bucket + "." + rest;
      m_base_url = scheme + "://" + m_host;
    }
  }
}

namespace {
// The class an S3 error code names, where it names one (else the status decides).
std::optional<Errc> errc_for_code(const std::string &c) {
  if (c == "PreconditionFailed" || c == "ConditionalRequestConflict") return Errc::precondition_failed;
  if (c == "AccessDenied" || c == "SignatureDoesNotMatch" || c == "InvalidAccessKeyId")
    return Errc::access_denied;
  if (c == "BadDigest" || c == "XAmzContentSHA256Mismatch" || c == "InvalidDigest") return Errc::bad_digest;
  if (c == "SlowDown" || c == "Throttling" || c == "ThrottlingException") return Errc::throttled;
  if (c == "NotImplemented" || c == "MethodNotAllowed")
    return Errc::unsupported; // the server answered: it cannot do this, and never will
  if (c == "RequestTimeout" || c == "InternalError") return Errc::storage_unavailable;
  return std::nullopt;
}
} // namespace

Error Client::error_from(const http::Response &r, const std::string &what) const {
  http::ServiceError said;
  said.request_id = r.header("x-amz-request-id");
  if (auto body = parse_error(r.body)) {
    said.code = body->code;
    if (!body->request_id.empty()) said.request_id = body->request_id;
    said.message = body->message;
  }
  return http::error_for_answer(r, what, said, errc_for_code(said.code));
}

Result<http::Response> Client::send_once(const Call &call,
                                         const std::function<bool(const http::Response &)> &accept) {
  // A '.' or '..' segment is resolved on the way (by curl, and by servers): the request
  // would name another key, or another bucket. lodge never makes such keys.
  if (util::has_dot_segment(call.key))
    return Error(Errc::storage_error, call.what + ": invalid object key '" +
                                          util::escape_for_terminal(call.key) + "': a '.' or '..' segment");
  std::string path = m_path_style ? "/" + m_cfg.bucket : "";
  path += "/" + call.key;
  if (call.key.empty() && !m_path_style) path = "/";
  int64_t now = m_clock.now_ms();
  aws::SignInput in;
  in.method = call.method;
  in.raw_path = path;
  in.raw_query = call.query;
  in.payload_hash = call.payload_hash.empty() ? std::string(aws::k_empty_sha256) : call.payload_hash;
  in.headers = call.headers;
  in.headers.emplace_back("host", m_host);
  in.headers.emplace_back("x-amz-date", aws::amz_date(now));
  in.headers.emplace_back("x-amz-content-sha256", in.payload_hash);
  auto held = m_cfg.credential_source ? m_cfg.credential_source->current() : nullptr;
  const aws::Credentials &creds = held ? *held : m_cfg.credentials;
  if (!creds.session_token.empty()) in.headers.emplace_back("x-amz-security-token", creds.session_token);
  auto s = aws::sign_header(in, creds, m_cfg.region, "s3", now, &m_keys);
  if (util::log::enabled(util::log::Level::debug))
    util::log::debug("canonical request:\n" + s.canonical_request + "\nstring to sign:\n" + s.string_to_sign);

  http::Request req;
  req.method = call.method;
  req.url = m_base_url + aws::canonical_uri(path);
  if (!call.query.empty()) req.url += "?" + aws::canonical_query(call.query);
  req.headers = in.headers;
  req.headers.emplace_back("authorization", s.authorization);
  req.body = call.body;
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

void Client::add_object_headers(Call &c, const PutOptions &o) {
  for (const auto &[k, v] : o.metadata)
    c.headers.emplace_back("x-amz-meta-" + k, v);
  if (!o.tagging.empty()) c.headers.emplace_back("x-amz-tagging", o.tagging);
  if (!o.storage_class.empty()) c.headers.emplace_back("x-amz-storage-class", o.storage_class);
  if (!o.sse.empty()) c.headers.emplace_back("x-amz-server-side-encryption", o.sse);
  if (!o.sse_kms_key_id.empty())
    c.headers.emplace_back("x-amz-server-side-encryption-aws-kms-key-id", o.sse_kms_key_id);
  if (!o.cache_control.empty()) c.headers.emplace_back("cache-control", o.cache_control);
}

Result<PutResult> Client::put_object(const std::string &key, http::BodySource &body, const PutOptions &o) {
  Call c{"PUT", key, {}, {}, &body, o.sha256_hex, {}, o.deadline_steady_ms, "PUT " + key};
  c.headers.emplace_back("content-type", o.content_type);
  if (!o.sha256_hex.empty() && m_cfg.send_checksums)
    c.headers.emplace_back("x-amz-checksum-sha256", base64_of_hex(o.sha256_hex));
  if (!o.if_match.empty())
    c.headers.emplace_back("if-match", o.if_match);
  else if (o.if_none_match)
    c.headers.emplace_back("if-none-match", "*");
  add_object_headers(c, o);
  auto r = send(c);
  if (!r) return r.error();
  return PutResult{util::trim(r->header("etag")), r->header("x-amz-version-id")};
}

Result<std::pair<std::string, std::string>> Client::get_small_object(const std::string &key) {
  Call c{"GET", key, {}, {}, nullptr, {}, {}, 0, "GET " + key};
  auto r = send(c);
  if (!r) return r.error();
  if (r->body.size() >= (1U << 20))
    return Error(Errc::storage_error, "GET " + key + ": larger than lodge's own metadata can be");
  return std::make_pair(r->body, util::trim(r->header("etag")));
}

Result<HeadResult> Client::head_object(const std::string &key, const std::string &version_id) {
  Call c{"HEAD", key, {}, {{"x-amz-checksum-mode", "ENABLED"}}, nullptr, {}, {}, 0, "HEAD " + key};
  if (!version_id.empty()) c.query.emplace_back("versionId", version_id);
  auto r = send(c);
  if (!r) return r.error();
  HeadResult h;
  h.size = static_cast<uint64_t>(util::parse_int(r->header("content-length")).value_or(0));
  h.etag = r->header("etag");
  if (h.etag.size() >= 2 && h.etag.front() == '"') h.etag = h.etag.substr(1, h.etag.size() - 2);
  h.content_type = r->header("content-type");
  h.version_id = r->header("x-amz-version-id");
  h.last_modified_ms = util::parse_http_date_ms(r->header("last-modified")).value_or(0);
  if (auto b64 = r->header("x-amz-checksum-sha256"); !b64.empty())
    if (auto raw = util::base64_decode(b64)) h.checksum_sha256_hex = util::hex_encode(*raw);
  for (const auto &[k, v] : r->headers)
    if (k.rfind("x-amz-meta-", 0) == 0) h.metadata[k.substr(11)] = v;
  return h;
}

Result<std::string> Client::presign(const std::string &method, const std::string &key,
                                    const http::Headers &headers, int64_t expires_s,
                                    const aws::Params &query) {
  if (expires_s < 1 || expires_s > 604'800)
    return Error(Errc::usage, "presigned URL of " + key + ": expiry must be 1s to 7d, got " +
                                  std::to_string(expires_s) + "s");
  if (util::has_dot_segment(key) || key.empty())
    return Error(Errc::storage_error,
                 "presigned URL: invalid object key '" + util::escape_for_terminal(key) + "'");
  std::string path = (m_path_style ? "/" + m_cfg.bucket : "") + "/" + key;
  aws::SignInput in;
  in.method = method;
  in.raw_path = path;
  in.payload_hash = std::string(aws::k_unsigned_payload);
  in.raw_query = query;
  in.headers.emplace_back("host", m_host);
  for (const auto &h : headers)
    in.headers.push_back(h);
  auto held = m_cfg.credential_source ? m_cfg.credential_source->current() : nullptr;
  std::string q = aws::presign_query(in, held ? *held : m_cfg.credentials, m_cfg.region, "s3",
                                     m_clock.now_ms(), expires_s);
  return m_base_url + aws::canonical_uri(path) + "?" + q;
}

Result<std::string> Client::presign_get(const std::string &key, int64_t expires_s) {
  return presign("GET", key, {}, expires_s);
}

Result<std::pair<std::string, http::Headers>> Client::presign_put(const std::string &key, uint64_t size,
                                                                  const PutOptions &o, int64_t expires_s) {
  // The headers a PUT of put_object would carry, every one signed.
  Call c{"PUT", key, {}, {}, nullptr, {}, {}, 0, "PUT " + key};
  c.headers.emplace_back("content-length", std::to_string(size));
  c.headers.emplace_back("content-type", o.content_type);
  if (!o.sha256_hex.empty() && m_cfg.send_checksums)
    c.headers.emplace_back("x-amz-checksum-sha256", base64_of_hex(o.sha256_hex));
  if (o.if_none_match) c.headers.emplace_back("if-none-match", "*");
  add_object_headers(c, o);
  auto url = presign("PUT", key, c.headers, expires_s);
  if (!url) return url.error();
  return std::make_pair(url.value(), c.headers);
}

Result<std::pair<std::string, http::Headers>>
Client::presign_part(const std::string &key, const std::string &upload_id, int number, uint64_t size,
                     const std::string &sha256_hex, int64_t expires_s) {
  // The headers upload_part sends, every one signed: the server refuses another length.
  http::Headers h;
  h.emplace_back("content-length", std::to_string(size));
  if (!sha256_hex.empty()) h.emplace_back("x-amz-checksum-sha256", base64_of_hex(sha256_hex));
  auto url =
      presign("PUT", key, h, expires_s, {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}});
  if (!url) return url.error();
  return std::make_pair(url.value(), h);
}

Result<std::vector<ListedPart>> Client::list_parts(const std::string &key, const std::string &upload_id) {
  std::vector<ListedPart> out;
  std::string marker;
  while (true) {
    Call c{"GET", key, {{"uploadId", upload_id}}, {}, nullptr, {}, {}, 0, "LIST PARTS " + key};
    if (!marker.empty()) c.query.emplace_back("part-number-marker", marker);
    auto r = send(c);
    if (!r) return r.error();
    auto page = parse_list_parts(r->body);
    if (!page) return Error(Errc::storage_error, "LIST PARTS " + key + ": unreadable answer");
    out.insert(out.end(), page->parts.begin(), page->parts.end());
    if (!page->truncated) return out;
    if (page->next_marker == marker) return Error(Errc::storage_error, "LIST PARTS " + key + ": no progress");
    marker = page->next_marker;
  }
}

Status Client::get_object(const std::string &key, const std::function<bool(const char *, size_t)> &sink) {
  return http::resumable_get(m_cfg.retry, m_sleeper, {"GET " + key, "object"}, sink,
                             [&](const http::Headers &extra, const http::Sink &counted,
                                 const std::function<bool(const http::Response &)> &accept) {
                               Call c{"GET", key, {}, extra, nullptr, {}, counted, 0, "GET " + key};
                               return send_once(c, accept);
                             });
}

void Client::learn(Feature f, const Status &outcome) {
  if (outcome) {
    m_traits->learn(f, Support::present);
    return;
  }
  if (outcome.error().code != Errc::unsupported || !m_traits->learn(f, Support::absent)) return;
  std::string server = m_base_url + " (bucket " + m_cfg.bucket + ")";
  if (f == Feature::list_versions)
    util::log::warn(server + " does not list object versions (" + outcome.error().message +
                    "); for the rest of this run deletes remove the current version only");
  else if (f == Feature::delete_objects)
    util::log::warn(server + " does not take DeleteObjects (" + outcome.error().message +
                    "); for the rest of this run objects are deleted one request each");
  else
    util::log::warn(
        server + " does not list incomplete multipart uploads (" + outcome.error().message +
        "); for the rest of this run they are neither aborted by deletes nor checked by reconcile");
}

Status Client::delete_object(const std::string &key, const std::string &version_id,
                             const std::string &if_match) {
  Call c{"DELETE", key, {}, {}, nullptr, {}, {}, 0, "DELETE " + key};
  if (!version_id.empty()) c.query.emplace_back("versionId", version_id);
  if (!if_match.empty())
    c.headers.emplace_back("if-match", if_match.front() == '"' ? if_match : "\"" + if_match + "\"");
  auto r = send(c);
  if (!r) {
    const auto &e = r.error();
    if (e.code == Errc::not_found && e.details.s3_code != "NoSuchBucket") return ok_status();
    return e;
  }
  return ok_status();
}

Result<std::vector<Status>> Client::delete_objects(const std::vector<DeleteEntry> &entries) {
  if (entries.empty()) return std::vector<Status>{};
  if (entries.size() > 1000) throw LodgeError(Errc::internal, "DeleteObjects takes 1000 keys at most");
  const std::string what = "DELETE " + std::to_string(entries.size()) + " objects";
  if (support(Feature::delete_objects) == Support::absent)
    return Error(Errc::unsupported, what + ": the server does not take DeleteObjects");
  std::map<std::string, size_t> index;
  std::string xml = R"(<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>)";
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto &e = entries[i];
    if (!index.emplace(e.key, i).second)
      throw LodgeError(Errc::internal, "DeleteObjects: " + e.key + " twice");
    xml += "<Object><Key>" + util::xml_escape(e.key) + "</Key>";
    if (!e.etag.empty())
      xml += "<ETag>" + util::xml_escape(e.etag.front() == '"' ? e.etag : "\"" + e.etag + "\"") + "</ETag>";
    xml += "</Object>";
  }
  xml += "</Delete>";
  auto r = send_xml("POST", "", {{"delete", ""}}, xml, what);
  learn(Feature::delete_objects, r ? ok_status() : Status(r.error()));
  if (!r) return r.error();
  auto parsed = parse_delete_result(r->body);
  if (!parsed) return Error(Errc::storage_error, what + ": unreadable answer");
  std::vector<Status> out(entries.size(), ok_status());
  for (const auto &[key, why] : parsed->errors) {
    auto it = index.find(key);
    if (it == index.end()) return Error(Errc::storage_error, what + ": an error for a key not asked: " + key);
    if (why.code == "NoSuchKey") continue; // gone meanwhile: what a delete wants
    ErrorDetails d;
    d.s3_code = why.code;
    out[it->second] =
        Error(errc_for_code(why.code).value_or(Errc::storage_error),
              "DELETE " + key + ": " + why.code + (why.message.empty() ? "" : " (" + why.message + ")"), d);
  }
  return out;
}

Status Client::list_objects(const std::string &prefix, const std::function<bool(const ListedObject &)> &visit,
                            int page_size) {
  std::string token;
  while (true) {
    Call c{"GET", "",      {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_size)}},
           {},    nullptr, {},
           {},    0,       "LIST " + prefix};
    if (!token.empty()) c.query.emplace_back("continuation-token", token);
    auto r = send(c);
    if (!r) return r.error();
    auto page = parse_list_objects_v2(r->body);
    if (!page) return Error(Errc::storage_error, "LIST " + prefix + ": unreadable ListObjectsV2 answer");
    for (const auto &o : page->objects)
      if (!visit(o)) return ok_status();
    if (!page->truncated) return ok_status();
    token = page->next_token;
  }
}

Status Client::list_versions(const std::string &prefix,
                             const std::function<bool(const ListedVersion &)> &visit) {
  if (m_traits->get(Feature::list_versions) == Support::absent)
    return Error(Errc::unsupported, "LIST VERSIONS " + prefix + ": the server does not implement it");
  std::string key_marker, version_marker;
  while (true) {
    Call c{
        "GET", "", {{"versions", ""}, {"prefix", prefix}}, {}, nullptr, {}, {}, 0, "LIST VERSIONS " + prefix};
    if (!key_marker.empty()) c.query.emplace_back("key-marker", key_marker);
    if (!version_marker.empty()) c.query.emplace_back("version-id-marker", version_marker);
    auto r = send(c);
    learn(Feature::list_versions, r ? ok_status() : Status(r.error()));
    if (!r) return r.error();
    auto page = parse_list_versions(r->body);
    if (!page) return Error(Errc::storage_error, "LIST VERSIONS " + prefix + ": unreadable answer");
    for (const auto &v : page->versions)
      if (!visit(v)) return ok_status();
    if (!page->truncated) return ok_status();
    key_marker = page->next_key_marker;
    version_marker = page->next_version_id_marker;
  }
}

Status Client::delete_everything(const std::string &key) {
  std::vector<std::string> versions;
  auto listed = list_versions(key, [&](const ListedVersion &v) {
    if (v.key == key) versions.push_back(v.version_id);
    return true;
  });
  if (!listed) {
    // A server without ListObjectVersions (warned once, when learned), or credentials
    // without s3:ListBucketVersions: a plain delete is all we can do (on a versioned
    // bucket it leaves older versions, which the warning says).
    const auto &e = listed.error();
    if (e.code != Errc::unsupported && e.code != Errc::access_denied) return e;
    if (e.code == Errc::access_denied)
      util::log::warn("cannot list versions of " + key + " (" + e.message +
                      "); deleting the current version only");
    if (auto d = delete_object(key); !d) return d.error();
  }
  for (const auto &v : versions)
    if (auto d = delete_object(key, v); !d) return d.error();
  std::vector<std::string> uploads;
  auto lu = list_multipart_uploads(key, [&](const ListedUpload &u) {
    if (u.key == key) uploads.push_back(u.upload_id);
    return true;
  });
  if (!lu && lu.error().code != Errc::unsupported) return lu.error();
  for (const auto &id : uploads)
    if (auto a = abort_multipart(key, id); !a) return a.error();
  return ok_status();
}

Result<std::string> Client::create_multipart(const std::string &key, const PutOptions &o) {
  Call c{
      "POST", key, {{"uploads", ""}}, {}, nullptr, {}, {}, o.deadline_steady_ms, "CREATE MULTIPART " + key};
  c.headers.emplace_back("content-type", o.content_type);
  if (m_cfg.send_checksums && o.part_checksums) c.headers.emplace_back("x-amz-checksum-algorithm", "SHA256");
  add_object_headers(c, o);
  auto r = send(c);
  if (!r) return r.error();
  auto id = parse_initiate_multipart(r->body);
  if (!id) return Error(Errc::storage_error, "CREATE MULTIPART " + key + ": unreadable answer");
  return *id;
}

Result<CompletedPart> Client::upload_part(const std::string &key, const std::string &upload_id, int number,
                                          http::BodySource &body, const std::string &sha256_hex,
                                          int64_t deadline_steady_ms) {
  Call c{"PUT",
         key,
         {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}},
         {},
         &body,
         sha256_hex,
         {},
         deadline_steady_ms,
         "PUT PART " + std::to_string(number) + " " + key};
  c.headers.emplace_back("content-type", "application/octet-stream");
  if (m_cfg.send_checksums) c.headers.emplace_back("x-amz-checksum-sha256", base64_of_hex(sha256_hex));
  auto r = send(c);
  if (!r) return r.error();
  return CompletedPart{number, util::trim(r->header("etag")), sha256_hex};
}

Result<PutResult> Client::complete_multipart(const std::string &key, const std::string &upload_id,
                                             const std::vector<CompletedPart> &parts, bool if_none_match,
                                             int64_t deadline_steady_ms) {
  std::string xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (const auto &p : parts)
    xml += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>" +
           util::xml_escape(p.etag) + "</ETag>" +
           (m_cfg.send_checksums && !p.sha256_hex.empty()
                ? "<ChecksumSHA256>" + base64_of_hex(p.sha256_hex) + "</ChecksumSHA256>"
                : "") +
           "</Part>";
  xml += "</CompleteMultipartUpload>";
  http::StringBody body(xml);
  Call c{"POST",
         key,
         {{"uploadId", upload_id}},
         {},
         &body,
         crypto::sha256_hex(xml),
         {},
         deadline_steady_ms,
         "COMPLETE MULTIPART " + key};
  c.headers.emplace_back("content-type", "application/xml");
  if (if_none_match) c.headers.emplace_back("if-none-match", "*");
  auto r = send(c);
  if (!r) return r.error();
  auto res = parse_complete_multipart(r->body);
  if (!res)
    return Error(Errc::storage_error, "COMPLETE MULTIPART " + key + ": unreadable answer: " +
                                          util::escape_for_terminal(r->body.substr(0, 300)));
  if (res->error) {
    http::Response fake;
    fake.status = 500;
    fake.body = r->body;
    return error_from(fake, "COMPLETE MULTIPART " + key);
  }
  return PutResult{res->etag, r->header("x-amz-version-id")};
}

Status Client::abort_multipart(const std::string &key, const std::string &upload_id) {
  Call c{"DELETE", key, {{"uploadId", upload_id}}, {}, nullptr, {}, {}, 0, "ABORT MULTIPART " + key};
  auto r = send(c);
  if (!r && r.error().code != Errc::not_found) return r.error();
  return ok_status();
}

Status Client::list_multipart_uploads(const std::string &prefix,
                                      const std::function<bool(const ListedUpload &)> &visit) {
  if (m_traits->get(Feature::list_uploads) == Support::absent)
    return Error(Errc::unsupported, "LIST UPLOADS " + prefix + ": the server does not implement it");
  std::string key_marker, id_marker;
  while (true) {
    Call c{
        "GET", "", {{"uploads", ""}, {"prefix", prefix}}, {}, nullptr, {}, {}, 0, "LIST UPLOADS " + prefix};
    if (!key_marker.empty()) c.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) c.query.emplace_back("upload-id-marker", id_marker);
    auto r = send(c);
    learn(Feature::list_uploads, r ? ok_status() : Status(r.error()));
    if (!r) return r.error();
    auto page = parse_list_uploads(r->body);
    if (!page) return Error(Errc::storage_error, "LIST UPLOADS " + prefix + ": unreadable answer");
    for (const auto &u : page->uploads)
      if (!visit(u)) return ok_status();
    if (!page->truncated) return ok_status();
    key_marker = page->next_key_marker;
    id_marker = page->next_upload_id_marker;
  }
}

Result<http::Response> Client::send_xml(const std::string &method, const std::string &key, aws::Params query,
                                        const std::string &xml, const std::string &what) {
  http::StringBody body(xml);
  Call c{method, key, std::move(query), {}, &body, crypto::sha256_hex(xml), {}, 0, what};
  c.headers.emplace_back("content-type", "application/xml");
  c.headers.emplace_back("content-md5", md5_base64(xml));
  if (m_cfg.send_checksums)
    c.headers.emplace_back("x-amz-checksum-sha256", crypto::to_base64(crypto::sha256(xml)));
  return send(c);
}

Status Client::put_object_tagging(const std::string &key, const std::map<std::string, std::string> &tags) {
  std::string xml = "<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet>";
  for (const auto &[k, v] : tags)
    xml += "<Tag><Key>" + util::xml_escape(k) + "</Key><Value>" + util::xml_escape(v) + "</Value></Tag>";
  xml += "</TagSet></Tagging>";
  auto r = send_xml("PUT", key, {{"tagging", ""}}, xml, "PUT TAGGING " + key);
  if (!r) return r.error();
  return ok_status();
}

Result<std::map<std::string, std::string>> Client::get_object_tagging(const std::string &key,
                                                                      const std::string &version_id) {
  Call c{"GET", key, {{"tagging", ""}}, {}, nullptr, {}, {}, 0, "GET TAGGING " + key};
  if (!version_id.empty()) c.query.emplace_back("versionId", version_id);
  auto r = send(c);
  if (!r) return r.error();
  auto tags = parse_tagging(r->body);
  if (!tags) return Error(Errc::storage_error, "GET TAGGING " + key + ": unreadable answer");
  return *tags;
}

Result<std::string> Client::get_bucket_lifecycle() {
  Call c{"GET", "", {{"lifecycle", ""}}, {}, nullptr, {}, {}, 0, "GET LIFECYCLE " + m_cfg.bucket};
  auto r = send(c);
  if (!r) {
    // NOT_FOUND means "no configuration" to callers; a missing bucket (404 NoSuchBucket)
    // must not read as an empty one.
    const auto &e = r.error();
    if (e.code == Errc::not_found && e.details.s3_code != "NoSuchLifecycleConfiguration")
      return Error(Errc::storage_error, e.message, e.details);
    return e;
  }
  return r->body;
}

Status Client::put_bucket_lifecycle(const std::string &xml) {
  auto r = send_xml("PUT", "", {{"lifecycle", ""}}, xml, "PUT LIFECYCLE " + m_cfg.bucket);
  if (!r) return r.error();
  return ok_status();
}

Result<std::string> Client::get_versioning() {
  Call c{"GET", "", {{"versioning", ""}}, {}, nullptr, {}, {}, 0, "GET VERSIONING " + m_cfg.bucket};
  auto r = send(c);
  if (!r) return r.error();
  auto status = parse_versioning(r->body);
  if (!status) return Error(Errc::storage_error, "GET VERSIONING " + m_cfg.bucket + ": unreadable answer");
  return *status;
}

bool Client::never_versioned() {
  if (auto known = m_traits->get(Feature::never_versioned); known != Support::unknown)
    return known == Support::present;
  auto v = get_versioning();
  if (!v)
    util::log::debug("GET VERSIONING " + m_cfg.bucket + ": " + v.error().message +
                     "; deletes read each key's versions");
  m_traits->learn(Feature::never_versioned, v && v->empty() ? Support::present : Support::absent);
  return m_traits->get(Feature::never_versioned) == Support::present;
}

} // namespace lodge::s3
