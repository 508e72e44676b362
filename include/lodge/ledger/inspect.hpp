#pragma once
// What `lodge doctor` reads of a ledger's database without opening it as a ledger, through
// the driver seam (sql::Conn): its schema version and the database's own consistency check
// (Conn::integrity_check), for a ledger of any version (one too new or too old to open too).

#include <cstdint>
#include <lodge/ledger/sql.hpp>
#include <memory>
#include <string>

namespace lodge::ledger {

// A connection to the ledger database at `location`, read-only, never created, migrated or
// version-checked, waiting at most `timeout_ms` for a lock: for schema_version(),
// integrity_check() and health() only. Throws LodgeError when it cannot be opened
// (LEDGER_UNUSABLE for a file that is no database, when first read).
[[nodiscard]] std::unique_ptr<sql::Conn> open_to_inspect(const std::string &location, int64_t timeout_ms);

} // namespace lodge::ledger
