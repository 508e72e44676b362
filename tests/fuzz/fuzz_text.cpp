// libFuzzer: names, units, escaping and failpoint specs on arbitrary bytes.
#include "../support/decode.hpp"

#include <cstdint>
#include <cstdlib>
#include <lodge/aws/signer.hpp>
#include <lodge/error.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string in(reinterpret_cast<const char *>(data), size);
  auto name = lodge::ops::sanitize_display_name(in);
  if (name.ok() && lodge::util::escape_for_terminal(name.value()) != name.value()) std::abort();
  // What upload records, get restores: one rule decides both.
  auto rel = lodge::ops::sanitize_relative_path(in);
  if (rel.ok() && lodge::ops::relative_path_problem(rel.value())) std::abort();
  (void)lodge::ops::extension_of(in);
  (void)lodge::util::parse_size(in);
  (void)lodge::util::parse_duration_ms(in);
  (void)lodge::util::base64_decode(in);
  (void)lodge::util::hex_decode(in);
  if (lodge::test::uri_decode(lodge::aws::uri_encode(in, true)) != in) std::abort();
  try {
    lodge::failpoint::configure(in, "");
  } catch (const lodge::LodgeError &e) {
    if (e.error().code != lodge::Errc::usage) std::abort();
  }
  lodge::failpoint::configure("", "");
  return 0;
}
