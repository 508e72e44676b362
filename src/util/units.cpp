#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <string>
#include <utility>

namespace lodge::util {
namespace {
// Splits "123unit" into the number and the unit; nullopt when no digits lead.
std::optional<std::pair<uint64_t, std::string_view>> number_and_unit(std::string_view text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p == text.data()) return std::nullopt;
  return std::pair{v, text.substr(static_cast<size_t>(p - text.data()))};
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (b != 0 && a > std::numeric_limits<uint64_t>::max() / b) return std::nullopt;
  return a * b;
}

// The multiplier a unit names, or 0 when it names none. "" is KiB (rclone's default unit).
double unit_multiplier(std::string_view unit) {
  if (unit.empty()) return 1024.0;
  // "Mi" and "MiB" are the same unit as "M"; a lone "iB" or "i" is not a unit.
  const std::string u = to_lower(unit);
  std::string_view letter = u;
  if (letter.size() == 3 && letter.substr(1) == "ib") letter = letter.substr(0, 1);
  if (letter.size() == 2 && letter[1] == 'i') letter = letter.substr(0, 1);
  if (letter.size() != 1) return 0;
  static constexpr std::string_view k_units = "bkmgtp";
  auto pos = k_units.find(letter[0]);
  if (pos == std::string_view::npos) return 0;
  return std::ldexp(1.0, static_cast<int>(pos) * 10);
}
} // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  auto nu = number_and_unit(text);
  if (!nu) return std::nullopt;
  // Binary units only: "1GB" means 10^9 to a disk vendor and 2^30 to many admins, so it
  // is refused (size_unit_hint says what to write) rather than guessed.
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 6> k_units{{{"", 1},
                                                                                 {"B", 1},
                                                                                 {"KiB", 1ULL << 10},
                                                                                 {"MiB", 1ULL << 20},
                                                                                 {"GiB", 1ULL << 30},
                                                                                 {"TiB", 1ULL << 40}}};
  for (const auto &[unit, mult] : k_units)
    if (nu->second == unit) return checked_mul(nu->first, mult);
  return std::nullopt;
}

std::optional<std::string> size_unit_hint(std::string_view text) {
  auto nu = number_and_unit(text);
  if (!nu) return std::nullopt;
  std::string unit;
  for (char c : nu->second)
    unit.push_back(static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c));
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 12> k_near{{{"K", "KiB"},
                                                                                         {"KB", "KiB"},
                                                                                         {"KIB", "KiB"},
                                                                                         {"M", "MiB"},
                                                                                         {"MB", "MiB"},
                                                                                         {"MIB", "MiB"},
                                                                                         {"G", "GiB"},
                                                                                         {"GB", "GiB"},
                                                                                         {"GIB", "GiB"},
                                                                                         {"T", "TiB"},
                                                                                         {"TB", "TiB"},
                                                                                         {"TIB", "TiB"}}};
  for (const auto &[near, binary] : k_near)
    if (unit == near)
      return "sizes are binary: write " + std::to_string(nu->first) + std::string(binary) +
             " (KiB, MiB, GiB, TiB are powers of 1024), or the exact number of bytes with B";
  return std::nullopt;
}

std::optional<int64_t> parse_duration_ms(std::string_view text) {
  auto nu = number_and_unit(text);
  if (!nu) return std::nullopt;
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 5> k_units{
      {{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}}};
  if (nu->second.empty() && nu->first == 0) return 0;
  for (const auto &[unit, mult] : k_units) {
    if (nu->second == unit) {
      auto v = checked_mul(nu->first, mult);
      if (!v || *v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(*v);
    }
  }
  return std::nullopt;
}

std::string format_size(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> k_units{"B", "KiB", "MiB", "GiB", "TiB"};
  auto v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < k_units.size()) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, k_units[u].data());
  return buf;
}

std::string format_duration_ms(int64_t ms) {
  char buf[32];
  if (ms < 1000)
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
  else if (ms < 60'000)
    std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000);
  else if (ms < 3'600'000)
    std::snprintf(buf, sizeof buf, "%lldm%llds", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms % 60'000 / 1000));
  else
    std::snprintf(buf, sizeof buf, "%lldh%lldm", static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms % 3'600'000 / 60'000));
  return buf;
}

std::string format_size_exact(uint64_t bytes) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 4> k_units{
      {{"TiB", 1ULL << 40}, {"GiB", 1ULL << 30}, {"MiB", 1ULL << 20}, {"KiB", 1ULL << 10}}};
  for (const auto &[unit, mult] : k_units)
    if (bytes != 0 && bytes % mult == 0) return std::to_string(bytes / mult) + std::string(unit);
  return std::to_string(bytes) + "B";
}

std::string format_duration_exact(int64_t ms) {
  static constexpr std::array<std::pair<std::string_view, int64_t>, 4> k_units{
      {{"d", 86'400'000}, {"h", 3'600'000}, {"m", 60'000}, {"s", 1000}}};
  for (const auto &[unit, mult] : k_units)
    if (ms != 0 && ms % mult == 0) return std::to_string(ms / mult) + std::string(unit);
  return std::to_string(ms) + "ms";
}

std::optional<uint64_t> parse_size_suffix(std::string_view text) {
  // A plain decimal number: from_chars would also take "inf", "nan" and exponents.
  size_t end = 0;
  bool digits = false, point = false;
  for (; end < text.size(); ++end) {
    char c = text[end];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !point) {
      point = true;
    } else {
      break;
    }
  }
  if (!digits) return std::nullopt;
  double value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + end, value);
  if (ec != std::errc() || p != text.data() + end) return std::nullopt;
  double mult = unit_multiplier(text.substr(end));
  if (mult == 0) return std::nullopt;
  double bytes = value * mult;
  // 2^64 itself does not fit; every double below it does.
  if (!(bytes < std::ldexp(1.0, 64))) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

std::optional<uint64_t> parse_bwlimit(std::string_view text) {
  if (to_lower(text) == "off") return 0;
  return parse_size_suffix(text);
}

std::string format_bwlimit(uint64_t bytes_per_second) {
  if (bytes_per_second == 0) return "off";
  static constexpr std::array<std::string_view, 6> k_suffix{"", "Ki", "Mi", "Gi", "Ti", "Pi"};
  size_t i = 0;
  auto scaled = static_cast<double>(bytes_per_second);
  while (i + 1 < k_suffix.size() && scaled >= 1024.0) {
    scaled /= 1024.0;
    ++i;
  }
  std::array<char, 32> buf{};
  if (std::floor(scaled) == scaled)
    std::snprintf(buf.data(), buf.size(), "%.0f", scaled);
  else
    std::snprintf(buf.data(), buf.size(), "%.3f", scaled);
  // A bare number would read back as KiB: say bytes.
  return std::string(buf.data()) + std::string(i == 0 ? "B" : k_suffix[i]);
}

} // namespace lodge::util
