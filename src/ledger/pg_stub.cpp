// Stands in for the PostgreSQL driver (pg_driver.cpp) until it is built.
#include "drivers.hpp"

namespace lodge::ledger {

std::unique_ptr<sql::Conn> open_postgres(const OpenOptions &opts) {
  (void)opts;
  throw LodgeError(Errc::unsupported,
                   "the PostgreSQL ledger not built yet: this lodge opens SQLite ledgers only");
}

} // namespace lodge::ledger
