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

// rclone's size suffixes, as --bwlimit, --min-size and --max-size read them: a decimal
// number ("10", "1.5") and an optional unit B, K, M, G, T or P (any case, optionally
// followed by "i" or "iB": "10Mi", "10MiB"), all powers of 1024. No unit means KiB, as in
// rclone. nullopt on anything else, a negative number or overflow. "off" is not a size:
// callers that accept it check for it first.
[[nodiscard]] std::optional<uint64_t> parse_size_suffix(std::string_view text);

// --bwlimit's value in bytes per second: a size suffix ("10M" is 10 MiB/s, "512" is
// 512 KiB/s), or "off" / "0" for no limit, which is 0. nullopt when unreadable (rclone's
// timetables and "upload:download" pairs included: lodge only sends).
[[nodiscard]] std::optional<uint64_t> parse_bwlimit(std::string_view text);

// The inverse for messages: "10Mi", "1.5Mi", "off" (rclone's spelling).
[[nodiscard]] std::string format_bwlimit(uint64_t bytes_per_second);

} // namespace lodge::util
