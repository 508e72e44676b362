#pragma once
// One error type for all of lodge: a stable code, a message for people, and details
// for programs. One table (error.cpp) maps each code to its UPPER_SNAKE name and exit code.

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace lodge {

// Persisted and printed by name: never renumber meaning, only append.
enum class Errc {
  ok,
  usage,
  config_invalid,
  ledger_unusable,
  ledger_locked,
  ledger_too_new,
  ledger_on_network_fs,
  storage_unavailable,
  access_denied,
  not_found,
  precondition_failed,
  bad_digest,
  throttled,
  storage_error,
  quota_exceeded,
  duplicate,
  type_mismatch,
  type_not_allowed,
  extension_not_allowed,
  too_large,
  empty_file,
  bad_name,
  not_regular_file,
  unreadable,
  file_changed,
  state_changed,
  idempotency_key_reused,
  in_progress,
  deadline_exceeded,
  interrupted,
  unhealthy,
  internal,
  unsupported,
  metadata_corrupt,
  io_error,
  store_mismatch,
  ledger_not_found,
  ledger_diverged,
  not_active,
  content_mismatch,
  output_exists,
  ledger_unavailable,
};

struct ErrcInfo {
  Errc code;
  std::string_view name;        // UPPER_SNAKE, stable
  int exit_code;                // the process's exit status (man/lodge.1 EXIT STATUS)
  std::string_view description; // one line for the man page
};

// The table of every code, in enum order.
[[nodiscard]] std::span<const ErrcInfo> all_errcs();
[[nodiscard]] const ErrcInfo &errc_info(Errc code);
[[nodiscard]] inline std::string_view errc_name(Errc code) {
  return errc_info(code).name;
}

struct ErrorDetails {
  long http_status = 0;
  std::string s3_code;
  std::string request_id;
  int sqlite_code = 0;  // extended result code
  std::string sqlstate; // PostgreSQL's SQLSTATE (PG_DIAG_SQLSTATE), "" when none
  int curl_code = 0;
  // A transfer whose whole body left but whose answer never came: the server may
  // still store it. Decides whether compensation may run at once.
  bool ambiguous = false;
  int64_t retry_after_ms = 0; // a server's Retry-After, when it sent one
};

struct Error {
  Errc code = Errc::internal;
  std::string message;
  ErrorDetails details;

  Error() = default;
  Error(Errc c, std::string msg, ErrorDetails d = {})
      : code(c), message(std::move(msg)), details(std::move(d)) {}
  [[nodiscard]] std::string_view name() const { return errc_name(code); }
  [[nodiscard]] int exit_code() const { return errc_info(code).exit_code; }
};

// Thrown where unwinding is the point (ledger unusable, bad configuration); caught once
// in main, which prints "lodge: error: ..." and exits with the code's exit status.
class LodgeError : public std::exception {
public:
  explicit LodgeError(Error e) : m_error(std::move(e)) {}
  LodgeError(Errc c, std::string msg, ErrorDetails d = {}) : m_error(c, std::move(msg), std::move(d)) {}
  [[nodiscard]] const char *what() const noexcept override { return m_error.message.c_str(); }
  [[nodiscard]] const Error &error() const noexcept { return m_error; }

private:
  Error m_error;
};

struct Unit {};

// The result of an operation whose failure is expected: a value or an Error.
template <class T> class [[nodiscard]] Result {
public:
  Result(T value) : m_v(std::move(value)) {}     // NOLINT(google-explicit-constructor)
  Result(Error error) : m_v(std::move(error)) {} // NOLINT(google-explicit-constructor)
  [[nodiscard]] bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] T &value() & { return std::get<0>(m_v); }
  [[nodiscard]] const T &value() const & { return std::get<0>(m_v); }
  [[nodiscard]] T &&value() && { return std::get<0>(std::move(m_v)); }
  [[nodiscard]] const Error &error() const { return std::get<1>(m_v); }
  [[nodiscard]] T *operator->() { return &value(); }
  [[nodiscard]] const T *operator->() const { return &value(); }
  // The value, or throws LodgeError.
  T take() && {
    if (!ok()) throw LodgeError(std::get<1>(m_v));
    return std::get<0>(std::move(m_v));
  }

private:
  std::variant<T, Error> m_v;
};

using Status = Result<Unit>;
inline Status ok_status() {
  return Unit{};
}

} // namespace lodge
