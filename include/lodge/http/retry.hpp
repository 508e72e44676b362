#pragma once
// What every HTTP store backend shares about failing requests: which failures are worth
// another attempt, how long to wait before it (exponential backoff, full jitter, a
// server's Retry-After believed within the cap), the retry loop itself, and the errors an
// HTTP status alone implies. A backend adds only its own error codes on top (its
// ServiceError parsing and by_code), and its signing in the Attempt it hands the loop.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/util/backpressure.hpp>
#include <memory>
#include <optional>
#include <string>

namespace lodge::http {

struct RetryPolicy {
  int max_attempts = 4;
  int64_t base_delay_ms = 200;
  int64_t max_delay_ms = 10'000;
  // Full jitter: uniform in [0, min(max, base * 2^(attempt-1))]; `attempt` counts
  // failures so far (1 after the first); `random` is any uniform 64-bit value.
  [[nodiscard]] int64_t delay_ms(int attempt, uint64_t random) const;
  // Where with_retries counts every throttling answer and other transient failure it
  // sees (null: nowhere).
  std::shared_ptr<util::Backpressure> backpressure;
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

// One attempt of a request, built and signed afresh each time (the clock, the credentials
// may have moved on), with the backend's own error answer already turned into an Error.
using Attempt = std::function<Result<Response>()>;

// The retry loop of every HTTP store backend: runs `attempt` until it succeeds or
// retry_after says no more (attempts are counted from 1). The error returned is the last
// one, ambiguous when any attempt was: the server may have acted on an earlier one.
[[nodiscard]] Result<Response> with_retries(const RetryPolicy &policy, Sleeper &sleeper,
                                            const std::string &what, int64_t deadline_steady_ms,
                                            const Attempt &attempt);

// What a service's error answer says beyond its status, parsed by the backend.
struct ServiceError {
  std::string code;       // the service's error code ("NoSuchKey", "BlobAlreadyExists"); "" when none
  std::string message;    // its message, as it is to be shown; "" when none
  std::string request_id; // "" when none
};

// The Error of a failed answer (status >= 300) to `what`: the class errc_for_status gives,
// unless the service's code names one (`by_code`: nullopt when it names none; a 404 or 412
// is always NOT_FOUND / PRECONDITION_FAILED); the details (status, code, request id,
// Retry-After); the message "WHAT: HTTP 503 SlowDown: text (request id R)".
[[nodiscard]] Error error_for_answer(const Response &r, const std::string &what, const ServiceError &said,
                                     std::optional<Errc> by_code);

// The error class an HTTP status implies on its own: 404 not_found, 412 precondition_failed,
// 401/403 access_denied, 429 throttled, 405/501 unsupported, 5xx storage_unavailable, any
// other failure storage_error.
[[nodiscard]] Errc errc_for_status(long status);

// The Retry-After header of an answer in milliseconds (seconds form only), 0 when absent.
[[nodiscard]] int64_t retry_after_ms(const Response &r);

} // namespace lodge::http
