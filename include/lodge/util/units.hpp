#pragma once
// Human sizes ("10MiB") and durations ("15m", "500ms"). Knows nothing of lodge.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::util {

// The one size grammar of every flag and configuration key: a number ("64", "1.5") and an
// optional unit B, or K, M, G, T, P alone or followed by "i" or "iB" ("64M", "64Mi", "64MiB",
// any case), all powers of 1024. A bare number is bytes. SI spellings (KB, MB, GB) are
// refused: size_unit_hint says what to write. A fraction of a byte is dropped. nullopt on
// anything else (a sign, an exponent, a space) or on overflow.
[[nodiscard]] std::optional<uint64_t> parse_size(std::string_view text);
// For a size parse_size refused because of its unit ("1GB", "16mb"): what to write
// instead. nullopt when the unit is not a near miss.
[[nodiscard]] std::optional<std::string> size_unit_hint(std::string_view text);
// The one duration grammar of every flag and configuration key: one or more numbers, each
// with its unit ("90s", "1h30m", "1.5h", "2w"): ms, s, m, h, d, w (7d), M (30d), y (365d).
// "0" alone is zero; any other number without a unit is refused. Returns ms (a fraction
// of a millisecond dropped); nullopt on anything else or past INT64_MAX ms.
[[nodiscard]] std::optional<int64_t> parse_duration_ms(std::string_view text);
// For people: rounded ("10.0 MiB", "1m30s"); parse_* does not read these back.
[[nodiscard]] std::string format_size(uint64_t bytes);
[[nodiscard]] std::string format_duration_ms(int64_t ms);
// Exact, in the largest unit that divides the value ("10MiB", "1500B", "90s", "1500ms"):
// what parse_size / parse_duration_ms read back as the same value.
[[nodiscard]] std::string format_size_exact(uint64_t bytes);
[[nodiscard]] std::string format_duration_exact(int64_t ms);

// --bwlimit's value in bytes per second: a size (parse_size: "10M" is 10 MiB/s, "512" is
// 512 bytes/s), or "off" / "0" for no limit, which is 0. nullopt when unreadable (rclone's
// timetables and "upload:download" pairs included: lodge only sends).
[[nodiscard]] std::optional<uint64_t> parse_bwlimit(std::string_view text);

// The inverse for messages: "10Mi", "1.5Mi", "off" (rclone's spelling).
[[nodiscard]] std::string format_bwlimit(uint64_t bytes_per_second);

} // namespace lodge::util
