// The flag parsers every command shares (flags.hpp).
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::cli::flags {

uint64_t size(const std::string &text, const char *name, uint64_t fallback, uint64_t min) {
  return text.empty() ? fallback : config::size_value(text, name, Errc::usage, min);
}

std::optional<int64_t> size_bound(const std::string &text, const char *name) {
  if (text.empty()) return std::nullopt;
  auto v = match::parse_filter_size(text, name);
  if (!v) return std::nullopt;
  if (*v > static_cast<uint64_t>(INT64_MAX)) throw LodgeError(Errc::usage, std::string(name) + ": too large");
  return static_cast<int64_t>(*v);
}

int64_t duration(const std::string &text, const char *name, int64_t fallback, config::DurationRange range) {
  return text.empty() ? fallback : config::duration_value(text, name, Errc::usage, range);
}

int64_t expires_seconds(const std::string &text) {
  return config::duration_value(text, "--expires", Errc::usage,
                                {1'000, 7 * 86'400'000LL, "a presigned URL lasts at most 7d"}) /
         1000;
}

int64_t count(const std::string &text, const char *name, int64_t min, int64_t max, const char *what) {
  // Digits only: no sign, no space, and few enough that they fit.
  const bool digits =
      !text.empty() && text.size() <= 18 && text.find_first_not_of("0123456789") == std::string::npos;
  const auto v = digits ? util::parse_int(text) : std::nullopt;
  if (!v || *v < min || *v > max)
    throw LodgeError(Errc::usage, std::string(name) + ": expected " + what + ", got '" +
                                      util::escape_for_terminal(text) + "'");
  return *v;
}

uint64_t part_size(const std::string &text, uint64_t fallback) {
  return text.empty() ? fallback : config::parse_part_size(text, "--part-size");
}

void run_prefix(const std::string &text, const std::string &name) {
  if (text.empty()) return;
  if (auto why = config::run_prefix_problem(text))
    throw LodgeError(Errc::usage, name + " '" + util::escape_for_terminal(text) + "': " + *why);
}

int64_t stats(const std::string &text, int64_t fallback) {
  return text.empty() ? fallback : config::stats_value(text, "--stats", Errc::usage);
}

std::optional<uint64_t> bwlimit(const std::string &text) {
  if (text.empty()) return std::nullopt;
  return config::bwlimit_value(text, "--bwlimit", Errc::usage);
}

void add_bwlimit_option(CLI::App *sub, std::string &flag, const char *what) {
  sub->add_option(
         "--bwlimit", flag,
         std::string("Limit the bytes ") + what +
             " per second, shared by every transfer of the process: a SIZE (10M, 512K; see VALUES in "
             "lodge.conf(5)), or off (default: config bwlimit, env LODGE_BWLIMIT)")
      ->check([](const std::string &v) -> std::string {
        return util::parse_bwlimit(v) ? "" : "expected a size per second like 10M or 512K, or off";
      })
      ->type_name("RATE");
}

} // namespace lodge::cli::flags
