#pragma once
// Time as a parameter: code that decides by time (leases, deadlines, signing) takes a
// Clock so tests control it.

#include <cstdint>
#include <string>

namespace lodge::util {

class Clock {
public:
  virtual ~Clock() = default;
  // Wall-clock milliseconds since the Unix epoch (UTC).
  [[nodiscard]] virtual int64_t now_ms() const = 0;
};

class SystemClock final : public Clock {
public:
  [[nodiscard]] int64_t now_ms() const override;
};

// The process-wide system clock.
[[nodiscard]] const Clock &system_clock();

// Epoch milliseconds as UTC through strftime's `format` (seconds resolution).
[[nodiscard]] std::string format_utc(int64_t epoch_ms, const char *format);

// Monotonic milliseconds, for measuring elapsed time only.
[[nodiscard]] int64_t steady_ms();

} // namespace lodge::util
