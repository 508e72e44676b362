#pragma once
// The flag parsers every command shares: one function per kind of value, over the one grammar
// the configuration keys use (config::size_value, config::duration_value), so a flag and its
// key accept and refuse the same text. Each takes the flag's text as given ('' when it was not
// given), names the flag in its USAGE error and never reads anything else.

#include <cstdint>
#include <lodge/config/config.hpp>
#include <optional>
#include <string>

namespace CLI {
class App;
} // namespace CLI

namespace lodge::cli::flags {

// A size (10M, 64MiB; a bare number is bytes), at least `min`; `fallback` when not given.
[[nodiscard]] uint64_t size(const std::string &text, const char *name, uint64_t fallback, uint64_t min = 0);
// A size bound of a filter (--min-size, --max-size): none when not given or "off"; USAGE past
// what a signed 64-bit size holds (the ledger's sizes are int64).
[[nodiscard]] std::optional<int64_t> size_bound(const std::string &text, const char *name);
// A duration (15m, 1h30m, 2w; 0 alone is zero) within `range`; `fallback` when not given.
[[nodiscard]] int64_t duration(const std::string &text, const char *name, int64_t fallback,
                               config::DurationRange range = config::k_any_duration);
// An --expires value (url, reserve): a duration, 1s to 7 days (SigV4's most); seconds.
[[nodiscard]] int64_t expires_seconds(const std::string &text);
// A count: digits only, from `min` to `max`; USAGE "NAME: expected WHAT, got 'TEXT'".
[[nodiscard]] int64_t count(const std::string &text, const char *name, int64_t min, int64_t max,
                            const char *what);
// A part size (5MiB to 5GiB), as the configuration's part_size takes it; `fallback` when not
// given.
[[nodiscard]] uint64_t part_size(const std::string &text, uint64_t fallback);
// An upload prefix (--prefix), checked as config::run_prefix_problem says: USAGE
// "NAME 'TEXT': why"; '' passes (no prefix).
void run_prefix(const std::string &text, const std::string &name);
// A --stats interval in ms ("off" or 0: none; else 1s to 1d); `fallback` when not given.
[[nodiscard]] int64_t stats(const std::string &text, int64_t fallback);
// A --bwlimit rate in bytes per second ("off" or 0: none); none when not given.
[[nodiscard]] std::optional<uint64_t> bwlimit(const std::string &text);

// --bwlimit RATE on a command that moves object bytes, bound to `flag` (checked when parsed).
void add_bwlimit_option(CLI::App *sub, std::string &flag, const char *what);

} // namespace lodge::cli::flags
