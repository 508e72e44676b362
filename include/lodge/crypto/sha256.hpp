#pragma once
// SHA-256 and HMAC-SHA256 over OpenSSL 3 EVP, with RAII owners for the contexts.

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace lodge::crypto {

using Digest = std::array<unsigned char, 32>;

struct EvpMdCtxFree {
  void operator()(evp_md_ctx_st *c) const noexcept;
};

// Streaming SHA-256. Move-only.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes and returns the digest; the object is reset for reuse.
  [[nodiscard]] Digest finish();
  void reset();

private:
  std::unique_ptr<evp_md_ctx_st, EvpMdCtxFree> m_ctx;
};

[[nodiscard]] Digest sha256(std::string_view data);
[[nodiscard]] std::string sha256_hex(std::string_view data);
[[nodiscard]] std::string to_hex(const Digest &d);
[[nodiscard]] std::string to_base64(const Digest &d);
[[nodiscard]] Digest hmac_sha256(std::string_view key, std::string_view data);

} // namespace lodge::crypto
