#pragma once
// Human sizes ("10MiB") and durations ("15m", "500ms"). Knows nothing of lodge.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::util {

// Accepts an integer with an optional unit B, KiB, MiB, GiB, TiB (powers of 1024; SI units
// such as GB are refused). nullopt on anything else or on overflow.
[[nodiscard]] std::optional<uint64_t> parse_size(std::string_view text);
// For a size parse_size refused because of its unit ("1GB", "10m", "5kib"): what to write
// instead. nullopt when the unit is not a near miss.
[[nodiscard]] std::optional<std::string> size_unit_hint(std::string_view text);
// Accepts an integer with a unit ms, s, m, h or d; a bare "0" is zero. Returns ms.
[[nodiscard]] std::optional<int64_t> parse_duration_ms(std::string_view text);
// For people: rounded ("10.0 MiB", "1m30s"); parse_* does not read these back.
[[nodiscard]] std::string format_size(uint64_t bytes);
[[nodiscard]] std::string format_duration_ms(int64_t ms);
// Exact, in the largest unit that divides the value ("10MiB", "1500B", "90s", "1500ms"):
// what parse_size / parse_duration_ms read back as the same value.
[[nodiscard]] std::string format_size_exact(uint64_t bytes);
[[nodiscard]] std::string format_duration_exact(int64_t ms);

} // namespace lodge::util
