#include "drivers.hpp"

#include <lodge/ledger/inspect.hpp>

namespace lodge::ledger {

std::unique_ptr<sql::Conn> open_to_inspect(const std::string &location, int64_t timeout_ms) {
  if (!is_postgres_location(location)) return open_sqlite_to_inspect(location, timeout_ms);
  // PostgreSQL reads without migrating when read-only; a ledger of another version is
  // refused (LEDGER_TOO_NEW, LEDGER_UNUSABLE) with the message every command gives.
  OpenOptions o;
  o.location = location;
  o.read_only = true;
  o.lock_timeout_ms = timeout_ms;
  return open_postgres(o);
}

} // namespace lodge::ledger
