#pragma once
// Small string helpers. Knows nothing of lodge.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::util {

[[nodiscard]] std::string to_lower(std::string_view s);
[[nodiscard]] std::string trim(std::string_view s);
[[nodiscard]] bool starts_with_ci(std::string_view s, std::string_view prefix);
[[nodiscard]] std::vector<std::string> split(std::string_view s, char sep);
[[nodiscard]] std::string hex_encode(const unsigned char *data, size_t len);
[[nodiscard]] std::string hex_encode(std::string_view bytes);
// Decodes lowercase or uppercase hex; nullopt on odd length or a non-hex digit.
[[nodiscard]] std::optional<std::string> hex_decode(std::string_view hex);
[[nodiscard]] std::string base64_encode(std::string_view bytes);
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);
// Makes any bytes safe to print on a terminal: control characters, bidi overrides
// and invalid UTF-8 become \xNN / \u{NNNN} escapes; printable UTF-8 stays.
[[nodiscard]] std::string escape_for_terminal(std::string_view s);
// Why a '/'-separated path (an object key, a prefix, a directory) is one that a server
// or a URL parser could rewrite: an empty, '.' or '..' segment, a backslash, a '%', a
// control or bidi character, a character that Unicode compatibility folding turns into
// '.', '/' or '\\', or invalid UTF-8. nullopt when every segment is kept byte for byte.
[[nodiscard]] std::optional<std::string> unsafe_path_reason(std::string_view path);
// Whether a '/'-separated path has a '.' or '..' segment (which URL handling resolves).
[[nodiscard]] bool has_dot_segment(std::string_view path);
// Percent-encodes every byte but A-Z a-z 0-9 - . _ ~ (and '/' when keep_slash), so any
// bytes (UTF-8 names included) fit where only printable ASCII may go (S3 metadata values).
[[nodiscard]] std::string percent_encode(std::string_view s, bool keep_slash);
// Parses a decimal integer that must fill the whole string.
[[nodiscard]] std::optional<int64_t> parse_int(std::string_view s);
// "1 file", "2 files": the count and the noun, plural unless n is 1 (`many` when the plural
// is not noun + "s": "1 entry" / "2 entries").
[[nodiscard]] std::string plural(int64_t n, std::string_view one, std::string_view many = {});

} // namespace lodge::util
