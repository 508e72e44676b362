#include <array>
#include <cstdio>
#include <lodge/ops/version.hpp>
#include <magic.h>

namespace lodge::ops {

std::string libmagic_version() {
  // magic_version() is major * 100 + minor: 544 for 5.44.
  const int v = magic_version();
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%d.%02d", v / 100, v % 100);
  return buf.data();
}

} // namespace lodge::ops
