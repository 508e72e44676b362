#pragma once
// AWS Signature Version 4, one pure function per step of the spec, time passed in.
// https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html
// S3 rules: the path is URI-encoded once (never normalized, '/' kept); the payload
// hash is the real SHA-256 when known, UNSIGNED-PAYLOAD only for presigned URLs.

#include <cstdint>
#include <lodge/aws/credentials.hpp>
#include <lodge/crypto/sha256.hpp>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lodge::aws {

using Params = std::vector<std::pair<std::string, std::string>>;

inline constexpr std::string_view k_unsigned_payload = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view k_empty_sha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// RFC 3986 percent-encoding of every byte but the unreserved ones (and '/' when kept).
[[nodiscard]] std::string uri_encode(std::string_view s, bool keep_slash);

[[nodiscard]] std::string canonical_uri(std::string_view raw_path);
// Params are raw (decoded) names and values; sorted by encoded name, then value.
[[nodiscard]] std::string canonical_query(const Params &raw_query);

struct CanonicalHeaders {
  std::string text;           // "name:value\n" lines, sorted
  std::string signed_headers; // "a;b;c"
};
// Lowercases names, trims values and folds inner runs of whitespace; repeated names
// are joined with ','.
[[nodiscard]] CanonicalHeaders canonical_headers(const Params &headers);

struct SignInput {
  std::string method;
  std::string raw_path; // unencoded path, starting with '/'
  Params raw_query;     // unencoded
  Params headers;       // every header to sign, host included
  std::string payload_hash;
};

[[nodiscard]] std::string canonical_request(const SignInput &in);
// "20150830T123600Z" for the given Unix time in ms.
[[nodiscard]] std::string amz_date(int64_t epoch_ms);
[[nodiscard]] std::string credential_scope(std::string_view date8, std::string_view region,
                                           std::string_view service);
[[nodiscard]] std::string string_to_sign(std::string_view date, std::string_view scope,
                                         std::string_view creq);
[[nodiscard]] crypto::Digest signing_key(std::string_view secret, std::string_view date8,
                                         std::string_view region, std::string_view service);
[[nodiscard]] std::string signature(const crypto::Digest &key, std::string_view sts);

// Derives signing keys once per (secret, day, region, service); thread-safe.
class SigningKeyCache {
public:
  [[nodiscard]] crypto::Digest get(std::string_view secret, std::string_view date8, std::string_view region,
                                   std::string_view service);
  // How many keys get() has derived so far (each derivation is four HMACs).
  [[nodiscard]] uint64_t derivations() const;

private:
  mutable std::mutex m_mutex;
  std::string m_id;
  crypto::Digest m_key{};
  uint64_t m_derivations = 0;
};

struct Signed {
  std::string authorization;
  std::string canonical_request;
  std::string string_to_sign;
};

// Signs in the Authorization header. `in.headers` must already hold host, x-amz-date
// (amz_date(now)) and, when used, x-amz-content-sha256 and x-amz-security-token.
[[nodiscard]] Signed sign_header(const SignInput &in, const Credentials &c, std::string_view region,
                                 std::string_view service, int64_t now_ms, SigningKeyCache *cache = nullptr);

// A presigned URL's query string (sorted, encoded, X-Amz-Signature last). `in.headers`
// holds host only (and any header the URL must be used with).
[[nodiscard]] std::string presign_query(SignInput in, const Credentials &c, std::string_view region,
                                        std::string_view service, int64_t now_ms, int64_t expires_s,
                                        bool sign_token = true, Signed *debug = nullptr);

} // namespace lodge::aws
