#pragma once
// Time as a parameter: code that decides by time (leases, deadlines, signing) takes a
// Clock so tests control it.

#include <cstdint>
#include <optional>
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
// Epoch ms as RFC 3339 in UTC with milliseconds, "2026-12-01T10:00:00.000Z": the one time
// format of every JSON output.
[[nodiscard]] std::string format_rfc3339_ms(int64_t ms);

// An RFC 1123 date ("Tue, 01 Dec 2026 18:02:08 GMT", as HTTP's Date and Last-Modified
// headers carry it) in milliseconds since the epoch; nullopt when it does not parse.
[[nodiscard]] std::optional<int64_t> parse_http_date_ms(const std::string &s);

// Monotonic milliseconds, for measuring elapsed time only.
[[nodiscard]] int64_t steady_ms();

} // namespace lodge::util
