#pragma once
// Randomness from OpenSSL's CSPRNG.

#include <cstdint>
#include <string>

namespace lodge::crypto {

// A random RFC 4122 version-4 uuid, lowercase with dashes. Throws on RNG failure.
[[nodiscard]] std::string random_uuid();
// A uniformly random integer in [0, bound); bound > 0.
[[nodiscard]] uint64_t random_below(uint64_t bound);

} // namespace lodge::crypto
