#pragma once
// A token bucket for --bwlimit: one budget of bytes per second shared by every thread that
// sends. The clock and the sleeper are parameters so tests check the arithmetic without
// waiting. Knows nothing of lodge.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::util {

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
