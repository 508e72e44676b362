#pragma once
// The database libraries lodge runs with (`lodge --version`): read at run time, since the
// shared libraries loaded may be newer than the headers lodge was built against.

#include <string>

namespace lodge::ledger {

// sqlite3_libversion(): "3.40.1".
[[nodiscard]] std::string sqlite_version();
// PQlibVersion() as PostgreSQL writes its versions: "15.14" (from 10 on, major.minor).
[[nodiscard]] std::string libpq_version();

} // namespace lodge::ledger
