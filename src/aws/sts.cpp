#include <cstdio>
#include <cstring>
#include <ctime>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/aws/signer.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>

namespace lodge::aws {
namespace {
std::string form(const Params &p) {
  std::string out;
  for (const auto &[k, v] : p)
    out += (out.empty() ? "" : "&") + uri_encode(k, false) + "=" + uri_encode(v, false);
  return out;
}

std::string endpoint_of(const ChainAccess &sts) {
  std::string e =
      sts.sts_endpoint.empty() ? "https://sts." + sts.region + ".amazonaws.com" : sts.sts_endpoint;
  while (!e.empty() && e.back() == '/')
    e.pop_back();
  return e;
}

// "host[:port]" of an http(s) URL without a path.
std::string host_of(const std::string &endpoint) {
  auto s = endpoint.find("://");
  std::string rest = s == std::string::npos ? endpoint : endpoint.substr(s + 3);
  return rest.substr(0, rest.find('/'));
}

// One STS query-API call: a form POST, signed with `signer` when given; the answer's
// <ACTIONResult><Credentials> as temporary credentials.
Result<Credentials> sts_call(const ChainAccess &sts, const std::string &action, const std::string &role_arn,
                             Params params, const Credentials *signer) {
  std::string what = "STS " + action + " for " + role_arn;
  std::string endpoint = endpoint_of(sts);
  params.insert(params.begin(), {{"Action", action}, {"Version", "2011-06-15"}});
  std::string text = form(params);
  http::StringBody body(text);
  http::Request req;
  req.method = "POST";
  req.url = endpoint + "/";
  req.headers = {{"content-type", "application/x-www-form-urlencoded; charset=utf-8"},
                 {"accept", "text/xml"}};
  if (signer) {
    int64_t now = sts.now_ms ? sts.now_ms() : util::system_clock().now_ms();
    SignInput in;
    in.method = "POST";
    in.raw_path = "/";
    in.payload_hash = crypto::sha256_hex(text);
    in.headers = req.headers;
    in.headers.emplace_back("host", host_of(endpoint));
    in.headers.emplace_back("x-amz-date", amz_date(now));
    in.headers.emplace_back("x-amz-content-sha256", in.payload_hash);
    if (!signer->session_token.empty())
      in.headers.emplace_back("x-amz-security-token", signer->session_token);
    auto s = sign_header(in, *signer, sts.region, "sts", now);
    req.headers = in.headers;
    req.headers.emplace_back("authorization", s.authorization);
  }
  req.body = &body;
  if (!sts.sts_transport) return Error(Errc::config_invalid, what + ": no STS endpoint to call");
  auto transport = sts.sts_transport();
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
  if (doc) creds = doc->document_element().child((action + "Result").c_str()).child("Credentials");
  Credentials c;
  c.access_key_id = util::xml_text(creds, "AccessKeyId");
  c.secret_access_key = util::xml_text(creds, "SecretAccessKey");
  c.session_token = util::xml_text(creds, "SessionToken");
  auto expires = parse_iso8601_ms(util::xml_text(creds, "Expiration"));
  if (c.access_key_id.empty() || c.secret_access_key.empty() || c.session_token.empty() || !expires)
    return Error(Errc::storage_error, what + " at " + endpoint + ": an answer without complete credentials");
  c.expires_ms = *expires;
  return c;
}
} // namespace

std::optional<int64_t> parse_iso8601_ms(const std::string &s) {
  std::tm tm{};
  const char *end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  if (*end == '.') { // fractions of a second: ignored (expiry is never that tight)
    ++end;
    while (*end >= '0' && *end <= '9')
      ++end;
  }
  if (*end == 'Z' || *end == 'z') return *end == 0 || end[1] == 0 ? std::optional(ms) : std::nullopt;
  if (*end == 0) return ms; // no zone: UTC, as the services write it
  if ((*end == '+' || *end == '-') && std::strlen(end) >= 5) {
    int sign = *end == '+' ? 1 : -1;
    int hh = 0, mm = 0;
    if (std::sscanf(end + 1, "%2d:%2d", &hh, &mm) != 2 && std::sscanf(end + 1, "%2d%2d", &hh, &mm) != 2)
      return std::nullopt;
    return ms - static_cast<int64_t>(sign) * (hh * 3600 + mm * 60) * 1000;
  }
  return std::nullopt;
}

Result<Credentials> assume_role_with_web_identity(const ChainAccess &sts, const std::string &role_arn,
                                                  const std::string &session_name, const std::string &token) {
  // Unsigned: the token is the proof
  // (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html).
  auto r = sts_call(sts, "AssumeRoleWithWebIdentity", role_arn,
                    {{"RoleArn", role_arn}, {"RoleSessionName", session_name}, {"WebIdentityToken", token}},
                    nullptr);
  if (r) r->source = "web identity (" + role_arn + ")";
  return r;
}

Result<Credentials> assume_role(const ChainAccess &sts, const Credentials &source,
                                const AssumeRoleInput &in) {
  // https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html
  Params p{{"RoleArn", in.role_arn}, {"RoleSessionName", in.session_name}};
  if (in.duration_seconds > 0) p.emplace_back("DurationSeconds", std::to_string(in.duration_seconds));
  if (!in.external_id.empty()) p.emplace_back("ExternalId", in.external_id);
  auto r = sts_call(sts, "AssumeRole", in.role_arn, p, &source);
  if (r) r->source = "assume role (" + in.role_arn + ", from " + source.source + ")";
  return r;
}

} // namespace lodge::aws
