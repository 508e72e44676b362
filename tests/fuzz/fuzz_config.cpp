// libFuzzer: the configuration parser either accepts a document or throws LodgeError
// with CONFIG_INVALID; nothing else may escape.
#include <cstdint>
#include <cstdlib>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string in(reinterpret_cast<const char *>(data), size);
  try {
    (void)lodge::config::parse_json(in, "fuzz", lodge::config::Config{});
  } catch (const lodge::LodgeError &e) {
    if (e.error().code != lodge::Errc::config_invalid) std::abort();
  }
  return 0;
}
