#include <ctime>
#include <lodge/http/retry.hpp>
#include <lodge/s3/aws_config.hpp>
#include <lodge/s3/signer.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>

namespace lodge::s3 {
namespace {
std::optional<int64_t> parse_iso8601_ms(const std::string &s) {
  std::tm tm{};
  const char *end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

std::string form(const Params &p) {
  std::string out;
  for (const auto &[k, v] : p)
    out += (out.empty() ? "" : "&") + uri_encode(k, false) + "=" + uri_encode(v, false);
  return out;
}
} // namespace

Result<Credentials> assume_role_with_web_identity(const StsAccess &sts, const std::string &role_arn,
                                                  const std::string &session_name, const std::string &token) {
  std::string what = "STS AssumeRoleWithWebIdentity for " + role_arn;
  std::string endpoint = sts.endpoint.empty() ? "https://sts." + sts.region + ".amazonaws.com" : sts.endpoint;
  while (!endpoint.empty() && endpoint.back() == '/')
    endpoint.pop_back();
  // Unsigned: the token is the proof
  // (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html).
  http::StringBody body(form({{"Action", "AssumeRoleWithWebIdentity"},
                              {"Version", "2011-06-15"},
                              {"RoleArn", role_arn},
                              {"RoleSessionName", session_name},
                              {"WebIdentityToken", token}}));
  http::Request req;
  req.method = "POST";
  req.url = endpoint + "/";
  req.headers = {{"content-type", "application/x-www-form-urlencoded; charset=utf-8"},
                 {"accept", "text/xml"}};
  req.body = &body;
  auto transport = sts.transport();
  auto r = transport->perform(req);
  if (!r)
    return Error(r.error().code, what + " at " + endpoint + ": " + r.error().message, r.error().details);
  auto doc = util::load_xml(r->body);
  if (r->status >= 300) {
    std::string code, message;
    if (doc) {
      auto e = doc->document_element().child("Error");
      code = util::xml_text(e, "Code");
      message = util::xml_text(e, "Message");
    }
    Errc c = http::errc_for_status(r->status);
    if (r->status == 400 || r->status == 403) c = Errc::access_denied;
    ErrorDetails d;
    d.http_status = r->status;
    d.s3_code = code;
    return Error(c,
                 what + " at " + endpoint + ": HTTP " + std::to_string(r->status) +
                     (code.empty() ? "" : " " + code) +
                     (message.empty() ? "" : ": " + util::escape_for_terminal(message)),
                 d);
  }
  pugi::xml_node creds;
  if (doc) creds = doc->document_element().child("AssumeRoleWithWebIdentityResult").child("Credentials");
  Credentials c;
  c.access_key_id = util::xml_text(creds, "AccessKeyId");
  c.secret_access_key = util::xml_text(creds, "SecretAccessKey");
  c.session_token = util::xml_text(creds, "SessionToken");
  auto expires = parse_iso8601_ms(util::xml_text(creds, "Expiration"));
  if (c.access_key_id.empty() || c.secret_access_key.empty() || c.session_token.empty() || !expires)
    return Error(Errc::storage_error, what + " at " + endpoint + ": an answer without complete credentials");
  c.expires_ms = *expires;
  c.source = "web identity (" + role_arn + ")";
  return c;
}

} // namespace lodge::s3
