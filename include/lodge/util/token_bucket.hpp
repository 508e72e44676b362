#pragma once
// A token bucket for --bwlimit: one budget of bytes per second shared by every thread that
// sends (its rate as people write it: util::parse_bwlimit in units.hpp). The clock and the sleeper are
// parameters so tests check the arithmetic without waiting. Knows nothing of lodge.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::util {

class TokenBucket {
public:
  // Monotonic time since any fixed origin.
  using NowFn = std::function<std::chrono::nanoseconds()>;
  using SleepFn = std::function<void(std::chrono::nanoseconds)>;

  // The smallest burst: below it every read of a worker's buffer would wait on its own.
  static constexpr uint64_t k_min_burst = uint64_t{64} * 1024;

  // rate 0 is unlimited. burst 0 means one second's worth; any burst is at least
  // k_min_burst. The bucket starts full. Default clock: steady_clock; default sleeper:
  // std::this_thread::sleep_for.
  explicit TokenBucket(uint64_t rate_bytes_per_second, uint64_t burst_bytes = 0, NowFn now = {},
                       SleepFn sleep = {});

  // Takes n bytes from the budget now (it may go into debt) and returns how long the caller
  // must wait before sending them: zero while the bucket holds them. Callers that reserve
  // together share the debt, so their sum keeps to the rate. Unlimited: always zero, no lock.
  [[nodiscard]] std::chrono::nanoseconds reserve(uint64_t n);
  // reserve(n), then sleeps that long (outside the lock) with the injected sleeper.
  void acquire(uint64_t n);

  // The most one caller should take at a time: 1/32 of a second's budget, at least 1 KiB.
  // Many callers sharing a small rate then each move bytes every few seconds, instead of
  // one waiting long enough for a transfer with nothing sent to be taken for stalled.
  // Unlimited: any amount.
  [[nodiscard]] uint64_t max_chunk() const;

  [[nodiscard]] bool unlimited() const { return m_rate == 0; }
  [[nodiscard]] uint64_t rate() const { return m_rate; }
  [[nodiscard]] uint64_t burst() const { return m_burst; }

private:
  const uint64_t m_rate;
  const uint64_t m_burst;
  NowFn m_now;
  SleepFn m_sleep;
  std::mutex m_mutex;
  double m_tokens = 0;             // bytes available; negative is debt owed by waiters
  std::chrono::nanoseconds m_last; // when m_tokens was last brought up to date
};

} // namespace lodge::util
