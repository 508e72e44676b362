#include <libpq-fe.h>
#include <lodge/ledger/version.hpp>
#include <sqlite3.h>

namespace lodge::ledger {

std::string sqlite_version() {
  return sqlite3_libversion();
}

std::string libpq_version() {
  // PQlibVersion encodes major * 10000 + minor from PostgreSQL 10 on (before: major,
  // minor and patch in two digits each; lodge needs a newer libpq than those).
  const int v = PQlibVersion();
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000);
}

} // namespace lodge::ledger
