#include <algorithm>
#include <array>
#include <chrono>
#include <curl/curl.h>
#include <lodge/crypto/random.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <thread>

namespace lodge::http {

int64_t RetryPolicy::delay_ms(int attempt, uint64_t random) const {
  int64_t cap = base_delay_ms;
  for (int i = 1; i < attempt && cap < max_delay_ms; ++i)
    cap *= 2;
  cap = std::min(cap, max_delay_ms);
  return cap <= 0 ? 0 : static_cast<int64_t>(random % static_cast<uint64_t>(cap + 1));
}

bool is_transient(const Error &e) {
  if (e.code == Errc::throttled) return true;
  if (e.code != Errc::storage_unavailable) return false;
  // TLS set-up and verification failures will not heal by retrying.
  static constexpr std::array<int, 12> k_tls{
      CURLE_SSL_CONNECT_ERROR,    CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_ENGINE_NOTFOUND,
      CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_CERTPROBLEM,          CURLE_SSL_CIPHER,
      CURLE_SSL_CACERT_BADFILE,   CURLE_USE_SSL_FAILED,           CURLE_SSL_CRL_BADFILE,
      CURLE_SSL_ISSUER_ERROR,     CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS};
  return std::find(k_tls.begin(), k_tls.end(), e.details.curl_code) == k_tls.end();
}

namespace {
class RealSleeper final : public Sleeper {
public:
  void sleep_ms(int64_t ms) override { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
};
} // namespace

Sleeper &real_sleeper() {
  static RealSleeper s;
  return s;
}

bool retry_after(const RetryPolicy &policy, Sleeper &sleeper, const std::string &what, int attempt,
                 const Error &e, int64_t deadline_steady_ms) {
  if (!is_transient(e) || attempt >= policy.max_attempts) return false;
  int64_t delay = policy.delay_ms(attempt, crypto::random_below(UINT64_MAX));
  // A server that says when to come back is believed, within the backoff cap.
  if (e.details.retry_after_ms > delay) delay = std::min(e.details.retry_after_ms, policy.max_delay_ms);
  if (deadline_steady_ms > 0 && util::steady_ms() + delay >= deadline_steady_ms) return false;
  util::log::info("retrying " + what + " after " + std::to_string(delay) + "ms: " + e.message);
  sleeper.sleep_ms(delay);
  return true;
}

Result<Response> with_retries(const RetryPolicy &policy, Sleeper &sleeper, const std::string &what,
                              int64_t deadline_steady_ms, const Attempt &attempt) {
  bool ambiguous = false;
  for (int n = 1;; ++n) {
    auto r = attempt();
    if (r) return r;
    Error e = r.error();
    if (policy.backpressure) {
      if (e.code == Errc::throttled)
        policy.backpressure->throttled.fetch_add(1, std::memory_order_relaxed);
      else if (is_transient(e))
        policy.backpressure->failed.fetch_add(1, std::memory_order_relaxed);
    }
    ambiguous = ambiguous || e.details.ambiguous;
    e.details.ambiguous = ambiguous;
    if (!retry_after(policy, sleeper, what, n, e, deadline_steady_ms)) return e;
  }
}

Error error_for_answer(const Response &r, const std::string &what, const ServiceError &said,
                       std::optional<Errc> by_code) {
  ErrorDetails d;
  d.http_status = r.status;
  d.s3_code = said.code;
  d.request_id = said.request_id;
  d.retry_after_ms = retry_after_ms(r);
  const bool status_decides = !by_code || r.status == 404 || r.status == 412;
  const Errc code = status_decides ? errc_for_status(r.status) : *by_code;
  std::string text = what + ": HTTP " + std::to_string(r.status);
  if (!said.code.empty()) text += " " + said.code;
  if (!said.message.empty()) text += ": " + said.message;
  if (!said.request_id.empty()) text += " (request id " + said.request_id + ")";
  return Error(code, text, d);
}

Errc errc_for_status(long status) {
  if (status == 404) return Errc::not_found;
  if (status == 412) return Errc::precondition_failed;
  if (status == 401 || status == 403) return Errc::access_denied;
  if (status == 429) return Errc::throttled;
  if (status == 405 || status == 501) return Errc::unsupported; // it cannot, and never will
  if (status >= 500) return Errc::storage_unavailable;
  return Errc::storage_error;
}

int64_t retry_after_ms(const Response &r) {
  auto ra = util::parse_int(r.header("retry-after"));
  return ra && *ra >= 0 ? *ra * 1000 : 0;
}

} // namespace lodge::http
