#pragma once
// How many requests an upload run keeps in flight when the user did not fix it (--jobs,
// config `jobs`, the AWS profile's max_concurrent_requests): a pure controller, fed what the
// run finished and what the store said, that answers the level. No clock, no threads: the
// run hands it samples with their time, so tests drive it without timing.
//
// The rule (AIMD with a throughput probe): start at `start`; after each window, double
// while the throughput (files per second, each MiB sent counting one more) grew by
// k_double_gain (the time after a rise until every new slot is busy, or a window, is not
// judged: the new workers are opening their connections); once a doubling does not pay,
// go back to the level that did and hold it. While holding, every k_probe_after windows
// try a quarter more and keep it only if it paid (k_probe_gain). A throttling answer
// halves the level at once, an error takes a quarter off; either then holds (no doubling
// again) and probes up from there. Never below 1, never above `max` (at most k_max_level:
// the open-file limit fits it, see open_files.hpp).

#include <cstdint>
#include <optional>
#include <string>

namespace lodge::ops {

// The most requests in flight an adaptive run ever has.
inline constexpr int k_max_level = 256;
// Where an adaptive run starts (the old fixed default).
inline constexpr int k_start_level = 8;

struct ConcurrencyLimits {
  int start = k_start_level;
  int max = k_max_level; // clamped to [1, k_max_level]
  bool fixed = false;    // the level is `start`, always
  // A window is at least this long and, unless it passed k_long_window_ms, saw at least
  // `level` units of work (every slot turned over once).
  int64_t window_ms = 100;
};

// What the run has seen so far (counts since it began, never going down) and when.
struct ConcurrencySample {
  int64_t now_ms = 0;     // a monotonic clock
  uint64_t files = 0;     // files finished
  uint64_t bytes = 0;     // bytes sent
  uint64_t throttled = 0; // answers asking to slow down (S3 503 SlowDown, 429, Azure 503 ServerBusy)
  uint64_t errors = 0;    // transient failures and failed files
  // The most slots in use at once since the previous sample. A window in which the level was
  // never all in use (fewer files than slots, a slow walk) says nothing about more of it:
  // no rise, no probe.
  int busy = 0;
};

enum class LevelReason {
  grew,         // the last step paid: one more
  probe,        // the first window, or a probe from a held level
  not_worth_it, // the last step did not pay: back to the level before it
  throttled,    // the store asked to slow down
  errors,       // requests or files failed
  bound,        // the bound came down (a worker could not open its connections)
};
[[nodiscard]] const char *to_string(LevelReason r);

struct LevelChange {
  int from = 0;
  int to = 0;
  LevelReason why = LevelReason::grew;
  // The throughput of the window that decided, relative to the one before it (0.8: up
  // 80%); 0 when no window decided (a throttle, an error, the first window).
  double gain = 0;
  std::string detail; // bound: why (the run's words)
};

class ConcurrencyController {
public:
  explicit ConcurrencyController(ConcurrencyLimits limits);
  // The level to keep, after this sample; a change when it moved.
  [[nodiscard]] std::optional<LevelChange> observe(const ConcurrencySample &s);
  // Lowers the bound (never raises it); the level comes down to it at once.
  [[nodiscard]] std::optional<LevelChange> lower_max(int max, std::string detail);
  [[nodiscard]] int level() const { return m_level; }
  [[nodiscard]] int peak() const { return m_peak; }
  [[nodiscard]] int max() const { return m_max; }
  [[nodiscard]] bool fixed() const { return m_limits.fixed; }
  // The current window follows a rise and will not be judged.
  [[nodiscard]] bool settling() const { return m_settling; }

  static constexpr double k_double_gain = 0.15;
  static constexpr double k_probe_gain = 0.10;
  static constexpr int k_probe_after = 8;           // held windows before a probe
  static constexpr int64_t k_long_window_ms = 2000; // a window ends by then however little finished
  static constexpr double k_bytes_per_unit = 1024.0 * 1024.0;

private:
  enum class Phase { slow_start, holding, probing };
  std::optional<LevelChange> set(int to, LevelReason why, double gain);
  std::optional<LevelChange> back_off(const ConcurrencySample &s, LevelReason why);
  std::optional<LevelChange> end_window(double rate);
  // A growing phase's window: back to the level before the last step when that step's gain
  // fell short of `needed`; else this window is remembered and the level grows to `next`
  // (held once at the most).
  std::optional<LevelChange> grow(double rate, double gain, double needed, int next, LevelReason why);
  void hold();

  ConcurrencyLimits m_limits;
  int m_max;
  int m_level;
  int m_peak;
  Phase m_phase = Phase::slow_start;
  ConcurrencySample m_window; // where the current window began
  bool m_started = false;     // m_window holds a sample
  double m_last_rate = 0;     // the last window's (0: none at this level yet)
  int m_last_level = 0;       // the level of that window
  int m_held_windows = 0;
  bool m_settling = false;
  int m_busy = 0;                         // the most slots in use in the current window
  uint64_t m_throttled = 0, m_errors = 0; // seen so far
  int64_t m_backed_off_at = INT64_MIN / 2;
};

} // namespace lodge::ops
