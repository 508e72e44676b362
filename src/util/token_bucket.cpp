#include <algorithm>
#include <cmath>
#include <limits>
#include <lodge/util/token_bucket.hpp>
#include <thread>
#include <utility>

namespace lodge::util {
namespace {
constexpr double k_ns_per_s = 1e9;
} // namespace

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
