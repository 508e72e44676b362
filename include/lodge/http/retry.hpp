#pragma once
// What every HTTP store backend shares about failing requests: which failures are worth
// another attempt, how long to wait before it (exponential backoff, full jitter, a
// server's Retry-After believed within the cap), and the errors an HTTP status alone
// implies. A backend adds only its own error codes on top.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/http/transport.hpp>
#include <string>

namespace lodge::http {

struct RetryPolicy {
  int max_attempts = 4;
  int64_t base_delay_ms = 200;
  int64_t max_delay_ms = 10'000;
  // Full jitter: uniform in [0, min(max, base * 2^(attempt-1))]; `attempt` counts
  // failures so far (1 after the first); `random` is any uniform 64-bit value.
  [[nodiscard]] int64_t delay_ms(int attempt, uint64_t random) const;
};

// Whether an error is worth another attempt (5xx, 429/throttling, resets, refused
// connections, timeouts — never TLS verification, other 4xx answers or deadlines).
[[nodiscard]] bool is_transient(const Error &e);

class Sleeper {
public:
  virtual ~Sleeper() = default;
  virtual void sleep_ms(int64_t ms) = 0;
};
[[nodiscard]] Sleeper &real_sleeper();

// After failed attempt number `attempt` of `what`: false when it is not worth another
// (not transient, attempts used up, or the backoff would pass the deadline), else logs
// and sleeps the backoff and returns true.
[[nodiscard]] bool retry_after(const RetryPolicy &policy, Sleeper &sleeper, const std::string &what,
                               int attempt, const Error &e, int64_t deadline_steady_ms);

// The error class an HTTP status implies on its own: 404 not_found, 412 precondition_failed,
// 401/403 access_denied, 429 throttled, 405/501 unsupported, 5xx storage_unavailable, any
// other failure storage_error.
[[nodiscard]] Errc errc_for_status(long status);

// The Retry-After header of an answer in milliseconds (seconds form only), 0 when absent.
[[nodiscard]] int64_t retry_after_ms(const Response &r);

} // namespace lodge::http
