#pragma once
// The libmagic lodge runs with (`lodge --version`; ops links it for the media-type check).

#include <string>

namespace lodge::ops {

// magic_version() as `file --version` writes it: "5.44".
[[nodiscard]] std::string libmagic_version();

} // namespace lodge::ops
