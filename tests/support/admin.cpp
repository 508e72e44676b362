#include "admin.hpp"

#include "decode.hpp"

#include <lodge/aws/signer.hpp>
#include <lodge/azure/signer.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/util/clock.hpp>

namespace lodge::test {
namespace {

Result<http::Response> perform(http::Request &req, const std::string &what) {
  auto r = http::make_curl_transport({})->perform(req);
  if (!r) return r.error();
  if (r->status >= 300) {
    ErrorDetails d;
    d.http_status = r->status;
    return Error(http::errc_for_status(r->status),
                 what + ": HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300), d);
  }
  return r;
}

// A bucket-level S3 request, SigV4-signed, path-style.
Result<http::Response> s3_bucket_call(const s3::ClientConfig &c, const std::string &method,
                                      const aws::Params &query, const std::string &xml,
                                      const std::string &what) {
  std::string base = c.endpoint;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  auto scheme_end = base.find("://");
  if (c.endpoint.empty() || scheme_end == std::string::npos)
    return Error(Errc::usage, what + ": the tests' set-up needs an endpoint URL, got '" + c.endpoint + "'");
  const int64_t now = util::system_clock().now_ms();
  aws::SignInput in;
  in.method = method;
  in.raw_path = "/" + c.bucket;
  in.raw_query = query;
  in.payload_hash = crypto::sha256_hex(xml);
  in.headers = {{"host", base.substr(scheme_end + 3)},
                {"x-amz-date", aws::amz_date(now)},
                {"x-amz-content-sha256", in.payload_hash}};
  if (!xml.empty()) in.headers.emplace_back("content-type", "application/xml");
  if (!c.credentials.session_token.empty())
    in.headers.emplace_back("x-amz-security-token", c.credentials.session_token);
  auto s = aws::sign_header(in, c.credentials, c.region, "s3", now);
  http::StringBody body(xml);
  http::Request req;
  req.method = method;
  req.url = base + aws::canonical_uri(in.raw_path);
  if (!query.empty()) req.url += "?" + aws::canonical_query(query);
  req.headers = in.headers;
  req.headers.emplace_back("authorization", s.authorization);
  req.body = method == "PUT" ? &body : nullptr;
  return perform(req, what);
}

// An Azure request on the container (name "") or one of its blobs, signed with Shared Key.
Result<http::Response> azure_call(const azure::ClientConfig &c, const std::string &method,
                                  const std::string &name, const azure::Params &query,
                                  const std::string &what) {
  auto ep = azure::parse_endpoint(c.account.endpoint, "blob endpoint");
  if (!ep) return ep.error();
  std::string path = (ep->path_account.empty() ? "" : "/" + ep->path_account) + "/" + c.container;
  if (!name.empty()) path += "/" + azure::url_encode(name, true);
  http::Request req;
  req.method = method;
  req.headers = {{"x-ms-date", azure::ms_date(util::system_clock().now_ms())},
                 {"x-ms-version", azure::k_api_version}};
  azure::SignInput in;
  in.method = method;
  in.account = c.account.name;
  in.encoded_path = path;
  in.raw_query = query;
  in.headers = req.headers;
  req.headers.emplace_back("authorization",
                           azure::authorization(c.account.name, c.account.key, azure::string_to_sign(in)));
  std::string q;
  for (const auto &[k, v] : query)
    q += (q.empty() ? "?" : "&") + azure::url_encode(k, false) + "=" + azure::url_encode(v, false);
  req.url = ep->base + path + q;
  http::StringBody empty(""); // a PUT carries Content-Length: 0
  req.body = method == "PUT" ? &empty : nullptr;
  return perform(req, what);
}

} // namespace

Status create_bucket(const s3::ClientConfig &c) {
  std::string xml;
  if (c.region != "us-east-1")
    xml = "<CreateBucketConfiguration><LocationConstraint>" + c.region +
          "</LocationConstraint></CreateBucketConfiguration>";
  auto r = s3_bucket_call(c, "PUT", {}, xml, "CREATE BUCKET " + c.bucket);
  if (!r) return r.error();
  return ok_status();
}

Status set_versioning(const s3::ClientConfig &c, bool enabled) {
  std::string xml = std::string("<VersioningConfiguration><Status>") + (enabled ? "Enabled" : "Suspended") +
                    "</Status></VersioningConfiguration>";
  auto r = s3_bucket_call(c, "PUT", {{"versioning", ""}}, xml, "PUT VERSIONING " + c.bucket);
  if (!r) return r.error();
  return ok_status();
}

Status create_container(const azure::ClientConfig &c) {
  auto r = azure_call(c, "PUT", "", {{"restype", "container"}}, "CREATE CONTAINER " + c.container);
  if (!r) return r.error();
  return ok_status();
}

Status delete_container(const azure::ClientConfig &c) {
  auto r = azure_call(c, "DELETE", "", {{"restype", "container"}}, "DELETE CONTAINER " + c.container);
  if (!r && r.error().code != Errc::not_found) return r.error();
  return ok_status();
}

Result<std::map<std::string, std::string>> blob_tags(const azure::ClientConfig &c, const std::string &name) {
  auto r = azure_call(c, "GET", name, {{"comp", "tags"}}, "GET TAGS " + name);
  if (!r) return r.error();
  auto tags = parse_blob_tags(r->body);
  if (!tags) return Error(Errc::storage_error, "GET TAGS " + name + ": unreadable answer");
  return *tags;
}

} // namespace lodge::test
