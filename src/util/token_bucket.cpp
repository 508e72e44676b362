#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <lodge/util/token_bucket.hpp>
#include <thread>
#include <utility>

namespace lodge::util {
namespace {
constexpr double k_ns_per_s = 1e9;

char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}

bool equals_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

// The multiplier a unit names, or 0 when it names none. "" is KiB (rclone's default unit).
double unit_multiplier(std::string_view unit) {
  if (unit.empty()) return 1024.0;
  // "Mi" and "MiB" are the same unit as "M"; a lone "iB" or "i" is not a unit.
  if (unit.size() == 3 && equals_nocase(unit.substr(1), "ib")) unit = unit.substr(0, 1);
  if (unit.size() == 2 && lower(unit[1]) == 'i') unit = unit.substr(0, 1);
  if (unit.size() != 1) return 0;
  static constexpr std::string_view k_units = "bkmgtp";
  auto pos = k_units.find(lower(unit[0]));
  if (pos == std::string_view::npos) return 0;
  return std::ldexp(1.0, static_cast<int>(pos) * 10);
}
} // namespace

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
  if (equals_nocase(text, "off")) return 0;
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

TokenBucket::TokenBucket(uint64_t rate_bytes_per_second, uint64_t burst_bytes, NowFn now, SleepFn sleep)
    : m_rate(rate_bytes_per_second),
      m_burst(std::max(burst_bytes == 0 ? rate_bytes_per_second : burst_bytes, k_min_burst)),
      m_now(std::move(now)), m_sleep(std::move(sleep)) {
  if (!m_now)
    m_now = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now().time_since_epoch());
    };
  if (!m_sleep) m_sleep = [](std::chrono::nanoseconds d) { std::this_thread::sleep_for(d); };
  m_tokens = static_cast<double>(m_burst);
  m_last = m_now();
}

std::chrono::nanoseconds TokenBucket::reserve(uint64_t n) {
  if (m_rate == 0 || n == 0) return std::chrono::nanoseconds{0};
  const auto rate = static_cast<double>(m_rate);
  std::lock_guard lock(m_mutex);
  auto now = m_now();
  // A clock that steps back (or a caller with a stale reading) adds nothing.
  if (now > m_last) {
    double elapsed_s = static_cast<double>((now - m_last).count()) / k_ns_per_s;
    m_tokens = std::min(static_cast<double>(m_burst), m_tokens + elapsed_s * rate);
    m_last = now;
  }
  m_tokens -= static_cast<double>(n);
  if (m_tokens >= 0) return std::chrono::nanoseconds{0};
  double wait_ns = std::ceil(-m_tokens / rate * k_ns_per_s);
  if (wait_ns >= static_cast<double>(std::numeric_limits<int64_t>::max()))
    return std::chrono::nanoseconds::max();
  return std::chrono::nanoseconds{static_cast<int64_t>(wait_ns)};
}

uint64_t TokenBucket::max_chunk() const {
  if (m_rate == 0) return std::numeric_limits<uint64_t>::max();
  return std::max<uint64_t>(m_rate / 32, 1024);
}

void TokenBucket::acquire(uint64_t n) {
  auto wait = reserve(n);
  if (wait.count() > 0) m_sleep(wait);
}

} // namespace lodge::util
