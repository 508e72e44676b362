#pragma once
// The PostgreSQL driver's internals (pg_driver.cpp, pg_stmt.cpp, pg_schema.cpp; its classes are
// in pg_conn.hpp): RAII owners for libpq's handles, and the pure pieces the driver is built
// from, declared here so unit tests can reach them.

#include <cstdint>
#include <libpq-fe.h>
#include <lodge/error.hpp>
#include <lodge/ledger/sql.hpp>
#include <memory>
#include <string>
#include <string_view>

namespace lodge::ledger {
// schema_pg.sql, embedded at build time (CMakeLists.txt).
extern const char *const k_schema_pg_sql;
} // namespace lodge::ledger

namespace lodge::ledger::pg {

struct PgConnCloser {
  void operator()(PGconn *c) const noexcept { PQfinish(c); }
};
struct PgResultClearer {
  void operator()(PGresult *r) const noexcept { PQclear(r); }
};
using PgConnHandle = std::unique_ptr<PGconn, PgConnCloser>;
using PgResultHandle = std::unique_ptr<PGresult, PgResultClearer>;

// ?N → $N (the seam's placeholders to PostgreSQL's). Throws INTERNAL for a '?' that is not
// followed by a parameter number.
[[nodiscard]] std::string translate_placeholders(std::string_view sql);
// The highest parameter number in SQL written with ?N (0 for none).
[[nodiscard]] int max_placeholder(std::string_view sql);

// How a PostgreSQL ledger location (a postgres:// URL or a key=value conninfo string) is
// shown to people: postgres://user@host:port/dbname, never the password (nor any other
// option). A location libpq cannot parse is shown as "postgres (unparsable location)".
[[nodiscard]] std::string display_location(const std::string &location);

// FNV-1a 32 over the bytes of `key`, as the int4 second key of pg_advisory_xact_lock. Two
// keys hashing alike only serialize each other's transactions: never a broken rule.
[[nodiscard]] uint32_t fnv1a32(std::string_view key);
[[nodiscard]] int32_t lock_key_hash(std::string_view key);

// What a failed statement becomes, from its SQLSTATE (`sqlstate` may be empty when libpq
// gave none). `lost` is true when the connection is gone. `where` names the ledger.
// TransientConflict (40001, 40P01) is thrown by the caller when is_transient says so.
[[nodiscard]] Error map_error(std::string_view sqlstate, bool lost, std::string_view message,
                              std::string_view where);
[[nodiscard]] bool is_transient(std::string_view sqlstate);

struct PgOpen {
  std::string location; // URL or conninfo, handed to libpq as is
  bool create = false;  // `lodge init`: create the schema when the database has none
  bool read_only = false;
  int64_t lock_timeout_ms = 10'000;
  int64_t timeout_ms = 30'000; // ledger_timeout: every wait for the server (see Bounds)
  int64_t now_ms = 0;          // the ledger's created_at when it is created here
};

// What ledger_timeout (`timeout_ms`) makes of a connection's bounds. The connection
// keywords go before the location's, so a location that names one wins; connect_timeout
// is given only where libpq has none of its own (PGCONNECT_TIMEOUT, a service file); the
// session's statement_timeout and lock_timeout are set unless the location or PGOPTIONS
// set them (`-c ...`).
struct Bounds {
  int connect_timeout_s = 0; // whole seconds, rounded up; at least 2 (libpq's own minimum)
  // A peer gone quiet (a host down, a path that drops packets) ends an idle connection
  // after about idle + count * interval seconds, and one with unacknowledged data after
  // tcp_user_timeout.
  int keepalives_idle_s = 0;
  int keepalives_interval_s = 0;
  int keepalives_count = 0;
  int64_t tcp_user_timeout_ms = 0;
  int64_t statement_timeout_ms = 0;
  int64_t lock_timeout_ms = 0; // the lock wait asked for, at most timeout_ms
};
[[nodiscard]] Bounds bounds_for(int64_t timeout_ms, int64_t lock_timeout_ms);

// The client's own bound on one answer. A stopped server (SIGSTOP, a hung host) enforces
// no statement_timeout and its kernel still acknowledges every packet and keepalive, so the
// client waits at most this and then closes the connection: the longer of ledger_timeout
// and the session's statement_timeout (0: none), plus k_answer_margin_ms, so that a server
// that can answer says "statement timeout" itself first.
inline constexpr int64_t k_answer_margin_ms = 2'000;
[[nodiscard]] int64_t answer_wait_ms(int64_t timeout_ms, int64_t statement_timeout_ms);

// Connects, then creates or migrates the schema (or, read-only, checks it). Throws
// LodgeError: LEDGER_UNAVAILABLE (no connection), LEDGER_NOT_FOUND, LEDGER_TOO_NEW, ...
[[nodiscard]] std::unique_ptr<sql::Conn> open_pg_conn(const PgOpen &o);

} // namespace lodge::ledger::pg
