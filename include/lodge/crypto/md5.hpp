#pragma once
// MD5 over OpenSSL 3 EVP, only for integrity against accidents: transport headers (Azure's
// Content-MD5) and the digest an Azure block id carries (checked by the service as the block
// was staged); never for identity or security.

#include <array>
#include <cstddef>
#include <lodge/crypto/sha256.hpp>
#include <memory>
#include <string>
#include <string_view>

namespace lodge::crypto {

using Md5Digest = std::array<unsigned char, 16>;

// Streaming MD5. Move-only.
class Md5 {
public:
  Md5();
  void update(const void *data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finishes and returns the digest; the object is reset for reuse.
  [[nodiscard]] Md5Digest finish();
  void reset();

private:
  std::unique_ptr<evp_md_ctx_st, EvpMdCtxFree> m_ctx;
};

// The base64 of the digest, as Content-MD5 carries it.
[[nodiscard]] std::string md5_base64(std::string_view data);
[[nodiscard]] std::string to_base64(const Md5Digest &d);

} // namespace lodge::crypto
