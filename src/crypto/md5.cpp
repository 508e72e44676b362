#include <lodge/crypto/md5.hpp>
#include <lodge/error.hpp>
#include <lodge/util/strings.hpp>
#include <openssl/evp.h>

namespace lodge::crypto {

Md5::Md5() : m_ctx(EVP_MD_CTX_new()) {
  if (!m_ctx) throw LodgeError(Errc::internal, "EVP_MD_CTX_new failed");
  reset();
}

void Md5::reset() {
  if (EVP_DigestInit_ex(m_ctx.get(), EVP_md5(), nullptr) != 1)
    throw LodgeError(Errc::internal, "EVP_DigestInit_ex(md5) failed");
}

void Md5::update(const void *data, size_t len) {
  if (len == 0) return;
  if (EVP_DigestUpdate(m_ctx.get(), data, len) != 1)
    throw LodgeError(Errc::internal, "EVP_DigestUpdate failed");
}

Md5Digest Md5::finish() {
  Md5Digest d{};
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(m_ctx.get(), d.data(), &n) != 1 || n != d.size())
    throw LodgeError(Errc::internal, "EVP_DigestFinal_ex failed");
  reset();
  return d;
}

std::string to_base64(const Md5Digest &d) {
  return util::base64_encode(std::string_view(reinterpret_cast<const char *>(d.data()), d.size()));
}

std::string md5_base64(std::string_view data) {
  Md5 h;
  h.update(data);
  return to_base64(h.finish());
}

} // namespace lodge::crypto
