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
// A plain decimal number at the start of `text` ("64", "1.5"): its digits before and after
// the point. from_chars alone would also take "inf", "nan", exponents and a leading sign.
struct Number {
  std::string_view whole, fraction;
  size_t length = 0;
};

std::optional<Number> leading_number(std::string_view text) {
  Number n;
  size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9')
    ++i;
  n.whole = text.substr(0, i);
  if (n.whole.empty()) return std::nullopt;
  if (i < text.size() && text[i] == '.') {
    size_t begin = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
      ++i;
    n.fraction = text.substr(begin, i - begin);
    if (n.fraction.empty()) return std::nullopt; // "1." is no number
  }
  n.length = i;
  return n;
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  if (b != 0 && a > std::numeric_limits<uint64_t>::max() / b) return std::nullopt;
  return a * b;
}

std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  if (a > std::numeric_limits<uint64_t>::max() - b) return std::nullopt;
  return a + b;
}

// n x mult, exactly for a whole number; a fraction's share rounded down (to whole bytes or
// milliseconds). nullopt on overflow.
std::optional<uint64_t> scaled(const Number &n, uint64_t mult) {
  uint64_t whole = 0;
  auto [p, ec] = std::from_chars(n.whole.data(), n.whole.data() + n.whole.size(), whole);
  if (ec != std::errc()) return std::nullopt;
  auto total = checked_mul(whole, mult);
  if (!total || n.fraction.empty()) return total;
  // The fraction's digits, at most 18 of them (beyond that no unit here can tell them apart).
  std::string_view digits = n.fraction.substr(0, 18);
  uint64_t num = 0, den = 1;
  for (char c : digits) {
    num = num * 10 + static_cast<uint64_t>(c - '0');
    den *= 10;
  }
  // num / den x mult without overflow: mult is at most 2^50 or 365 days of ms here.
  const auto part = static_cast<uint64_t>(static_cast<long double>(num) * static_cast<long double>(mult) /
                                          static_cast<long double>(den));
  return checked_add(*total, part);
}

// The multiplier a size unit names, or 0 when it names none: "" and "B" are bytes; K, M, G,
// T, P alone or followed by "i" or "iB", in any case, are powers of 1024.
uint64_t size_unit(std::string_view unit) {
  const std::string u = to_lower(unit);
  if (u.empty() || u == "b") return 1;
  std::string_view letter = u;
  if (letter.size() == 3 && letter.substr(1) == "ib") letter = letter.substr(0, 1);
  if (letter.size() == 2 && letter[1] == 'i') letter = letter.substr(0, 1);
  if (letter.size() != 1) return 0;
  static constexpr std::string_view k_units = "kmgtp";
  auto pos = k_units.find(letter[0]);
  if (pos == std::string_view::npos) return 0;
  return uint64_t{1} << ((pos + 1) * 10);
}
} // namespace

std::optional<uint64_t> parse_size(std::string_view text) {
  auto n = leading_number(text);
  if (!n) return std::nullopt;
  const uint64_t mult = size_unit(text.substr(n->length));
  if (mult == 0) return std::nullopt;
  return scaled(*n, mult);
}

std::optional<std::string> size_unit_hint(std::string_view text) {
  auto n = leading_number(text);
  if (!n) return std::nullopt;
  const std::string unit = to_lower(text.substr(n->length));
  // SI spellings: 1GB is 10^9 to a disk vendor and 2^30 to many admins, so it is refused
  // rather than guessed.
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 5> k_near{
      {{"kb", "KiB"}, {"mb", "MiB"}, {"gb", "GiB"}, {"tb", "TiB"}, {"pb", "PiB"}}};
  for (const auto &[near, binary] : k_near)
    if (unit == near)
      return "sizes are binary: write " + std::string(text.substr(0, n->length)) + std::string(binary) +
             " (KiB, MiB, GiB, TiB are powers of 1024), or the exact number of bytes";
  return std::nullopt;
}

std::optional<int64_t> parse_duration_ms(std::string_view text) {
  if (text == "0") return 0;
  // Longest unit first: "ms" before "m". M (a month) and y (a year) as rclone counts them.
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 8> k_units{{{"ms", 1},
                                                                                 {"s", 1000},
                                                                                 {"m", 60'000},
                                                                                 {"h", 3'600'000},
                                                                                 {"d", 86'400'000},
                                                                                 {"w", 7 * 86'400'000ULL},
                                                                                 {"M", 30 * 86'400'000ULL},
                                                                                 {"y", 365 * 86'400'000ULL}}};
  if (text.empty()) return std::nullopt;
  uint64_t total = 0;
  while (!text.empty()) {
    auto n = leading_number(text);
    if (!n) return std::nullopt;
    text.remove_prefix(n->length);
    uint64_t mult = 0;
    for (const auto &[unit, m] : k_units) {
      if (text.substr(0, unit.size()) == unit) {
        text.remove_prefix(unit.size());
        mult = m;
        break;
      }
    }
    if (mult == 0) return std::nullopt; // a number without its unit
    auto part = scaled(*n, mult);
    auto sum = part ? checked_add(total, *part) : std::nullopt;
    if (!sum || *sum > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    total = *sum;
  }
  return static_cast<int64_t>(total);
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

std::optional<uint64_t> parse_bwlimit(std::string_view text) {
  if (to_lower(text) == "off") return 0;
  return parse_size(text);
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
  return std::string(buf.data()) + std::string(i == 0 ? "B" : k_suffix[i]);
}

} // namespace lodge::util
