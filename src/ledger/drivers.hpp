#pragma once
// The ledger's database drivers (internal to the ledger layer): each opens one connection
// to a migrated ledger database, creating it when asked, and hands SqlLedger a sql::Conn.

#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/sql.hpp>
#include <memory>
#include <string>

namespace lodge::ledger {

// The SQLite ledger file at opts.location (sqlite_driver.cpp): created 0600 only when
// opts.create, refused on a network filesystem or through a symbolic link, WAL with
// synchronous=FULL, schema.sql + migrations keyed by PRAGMA user_version; read-only (or
// immutable) when opts.read_only. Throws LodgeError: LEDGER_NOT_FOUND, LEDGER_UNUSABLE,
// LEDGER_TOO_NEW, LEDGER_ON_NETWORK_FS, LEDGER_LOCKED.
[[nodiscard]] std::unique_ptr<sql::Conn> open_sqlite(const OpenOptions &opts);
// The SQLite file at `path` opened read-only as it is (no schema check, no migration, no
// filesystem refusal), for lodge doctor's inspection. Throws LEDGER_UNUSABLE when it cannot
// be opened.
[[nodiscard]] std::unique_ptr<sql::Conn> open_sqlite_to_inspect(const std::string &path,
                                                                int64_t busy_timeout_ms);
// open_sqlite's filesystem check: throws LEDGER_ON_NETWORK_FS for a ledger at `path` whose
// directory's statfs(2) f_type is a network filesystem (util::network_fs_name), unless `force`.
void refuse_network_fs(const std::string &path, unsigned long f_type, bool force);

// The PostgreSQL ledger at opts.location (a postgres:// or postgresql:// URL, or a libpq
// keyword string; pg_driver.cpp). A location libpq cannot read is CONFIG_INVALID.
[[nodiscard]] std::unique_ptr<sql::Conn> open_postgres(const OpenOptions &opts);

class Db;
// SQLite: applies each migration step from `from` up to k_schema_version (inside the
// caller's transaction; migrations.cpp). Throws LodgeError when `from` is outside the
// supported range.
void migrate(Db &db, int from);

} // namespace lodge::ledger
