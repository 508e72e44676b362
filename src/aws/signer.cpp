#include <algorithm>
#include <cctype>
#include <ctime>
#include <lodge/aws/signer.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <map>

namespace lodge::aws {

std::string uri_encode(std::string_view s, bool keep_slash) {
  static constexpr char k_hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() * 3);
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(k_hex[c >> 4]);
      out.push_back(k_hex[c & 0xF]);
    }
  }
  return out;
}

std::string canonical_uri(std::string_view raw_path) {
  if (raw_path.empty()) return "/";
  return uri_encode(raw_path, true);
}

std::string canonical_query(const Params &raw_query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(raw_query.size());
  for (const auto &[k, v] : raw_query)
    enc.emplace_back(uri_encode(k, false), uri_encode(v, false));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto &[k, v] : enc) {
    if (!out.empty()) out.push_back('&');
    out += k;
    out.push_back('=');
    out += v;
  }
  return out;
}

namespace {
std::string fold_whitespace(std::string_view v) {
  std::string t = util::trim(v);
  std::string out;
  out.reserve(t.size());
  bool space = false;
  for (char c : t) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}
} // namespace

CanonicalHeaders canonical_headers(const Params &headers) {
  std::map<std::string, std::string> merged;
  for (const auto &[name, value] : headers) {
    auto key = util::to_lower(util::trim(name));
    auto val = fold_whitespace(value);
    auto [it, inserted] = merged.emplace(key, val);
    if (!inserted) it->second += "," + val;
  }
  CanonicalHeaders out;
  for (const auto &[k, v] : merged) {
    out.text += k + ":" + v + "\n";
    if (!out.signed_headers.empty()) out.signed_headers.push_back(';');
    out.signed_headers += k;
  }
  return out;
}

std::string canonical_request(const SignInput &in) {
  auto h = canonical_headers(in.headers);
  return in.method + "\n" + canonical_uri(in.raw_path) + "\n" + canonical_query(in.raw_query) + "\n" +
         h.text + "\n" + h.signed_headers + "\n" + in.payload_hash;
}

std::string amz_date(int64_t epoch_ms) {
  return util::format_utc(epoch_ms, "%Y%m%dT%H%M%SZ");
}

std::string credential_scope(std::string_view date8, std::string_view region, std::string_view service) {
  return std::string(date8) + "/" + std::string(region) + "/" + std::string(service) + "/aws4_request";
}

std::string string_to_sign(std::string_view date, std::string_view scope, std::string_view creq) {
  return "AWS4-HMAC-SHA256\n" + std::string(date) + "\n" + std::string(scope) + "\n" +
         crypto::sha256_hex(creq);
}

crypto::Digest signing_key(std::string_view secret, std::string_view date8, std::string_view region,
                           std::string_view service) {
  auto as_view = [](const crypto::Digest &d) {
    return std::string_view(reinterpret_cast<const char *>(d.data()), d.size());
  };
  auto k_date = crypto::hmac_sha256("AWS4" + std::string(secret), date8);
  auto k_region = crypto::hmac_sha256(as_view(k_date), region);
  auto k_service = crypto::hmac_sha256(as_view(k_region), service);
  return crypto::hmac_sha256(as_view(k_service), "aws4_request");
}

std::string signature(const crypto::Digest &key, std::string_view sts) {
  return crypto::to_hex(
      crypto::hmac_sha256(std::string_view(reinterpret_cast<const char *>(key.data()), key.size()), sts));
}

crypto::Digest SigningKeyCache::get(std::string_view secret, std::string_view date8, std::string_view region,
                                    std::string_view service) {
  // The id holds a digest of the secret, never the secret itself.
  std::string id = crypto::sha256_hex(secret) + "/" + credential_scope(date8, region, service);
  std::lock_guard lock(m_mutex);
  if (id != m_id) {
    m_key = signing_key(secret, date8, region, service);
    m_id = id;
    ++m_derivations;
  }
  return m_key;
}

uint64_t SigningKeyCache::derivations() const {
  std::lock_guard lock(m_mutex);
  return m_derivations;
}

Signed sign_header(const SignInput &in, const Credentials &c, std::string_view region,
                   std::string_view service, int64_t now_ms, SigningKeyCache *cache) {
  Signed s;
  std::string date = amz_date(now_ms);
  std::string date8 = date.substr(0, 8);
  std::string scope = credential_scope(date8, region, service);
  s.canonical_request = canonical_request(in);
  s.string_to_sign = string_to_sign(date, scope, s.canonical_request);
  auto key = cache ? cache->get(c.secret_access_key, date8, region, service)
                   : signing_key(c.secret_access_key, date8, region, service);
  s.authorization = "AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" + scope +
                    ", SignedHeaders=" + canonical_headers(in.headers).signed_headers +
                    ", Signature=" + signature(key, s.string_to_sign);
  return s;
}

std::string presign_query(SignInput in, const Credentials &c, std::string_view region,
                          std::string_view service, int64_t now_ms, int64_t expires_s, bool sign_token,
                          Signed *debug) {
  std::string date = amz_date(now_ms);
  std::string date8 = date.substr(0, 8);
  std::string scope = credential_scope(date8, region, service);
  in.raw_query.emplace_back("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
  in.raw_query.emplace_back("X-Amz-Credential", c.access_key_id + "/" + scope);
  in.raw_query.emplace_back("X-Amz-Date", date);
  in.raw_query.emplace_back("X-Amz-Expires", std::to_string(expires_s));
  in.raw_query.emplace_back("X-Amz-SignedHeaders", canonical_headers(in.headers).signed_headers);
  if (!c.session_token.empty() && sign_token)
    in.raw_query.emplace_back("X-Amz-Security-Token", c.session_token);
  Signed s;
  s.canonical_request = canonical_request(in);
  s.string_to_sign = string_to_sign(date, scope, s.canonical_request);
  std::string sig = signature(signing_key(c.secret_access_key, date8, region, service), s.string_to_sign);
  std::string q = canonical_query(in.raw_query);
  if (!c.session_token.empty() && !sign_token)
    q += "&X-Amz-Security-Token=" + uri_encode(c.session_token, false);
  q += "&X-Amz-Signature=" + sig;
  if (debug) *debug = s;
  return q;
}

} // namespace lodge::aws
