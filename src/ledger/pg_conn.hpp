#pragma once
// The PostgreSQL driver's connection and statement classes (internal to the driver's files:
// pg_driver.cpp connects, exchanges and commits; pg_stmt.cpp binds, runs and reads a statement;
// pg_schema.cpp creates and migrates the schema). open_pg_conn (pg.hpp) is how anything else
// gets one.

#include "pg.hpp"

#include <cstdint>
#include <functional>
#include <libpq-fe.h>
#include <lodge/error.hpp>
#include <lodge/ledger/sql.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lodge::ledger::pg {

class PgConn;

class PgStmt final : public sql::StmtImpl {
public:
  PgStmt(PgConn *conn, const std::string *name, int nparams)
      : m_conn(conn), m_name(name), m_values(static_cast<size_t>(nparams)),
        m_state(static_cast<size_t>(nparams), Param::unbound) {}
  void bind_int(int i, int64_t v) override { set(i, std::to_string(v), Param::value); }
  void bind_text(int i, std::string_view v) override;
  void bind_null(int i) override { set(i, std::string(), Param::null); }
  bool step() override;
  int64_t exec() override;
  void reset() override {
    m_result.reset();
    m_row = -1;
    m_rows = 0;
  }
  [[nodiscard]] bool is_null(int col) const override { return PQgetisnull(row_result(col), m_row, col) != 0; }
  [[nodiscard]] int64_t col_int(int col) const override;
  [[nodiscard]] std::string col_text(int col) const override {
    const PGresult *r = row_result(col);
    return {PQgetvalue(r, m_row, col), static_cast<size_t>(PQgetlength(r, m_row, col))};
  }

private:
  enum class Param { unbound, value, null };
  void set(int i, std::string v, Param p) {
    if (i < 1 || static_cast<size_t>(i) > m_values.size())
      throw LodgeError(Errc::internal, "SQL parameter ?" + std::to_string(i) +
                                           " out of range (the statement has " +
                                           std::to_string(m_values.size()) + ")");
    m_values[static_cast<size_t>(i - 1)] = std::move(v);
    m_state[static_cast<size_t>(i - 1)] = p;
  }
  [[nodiscard]] const PGresult *row_result(int col) const {
    if (!m_result || m_row < 0 || m_row >= m_rows || col < 0 || col >= PQnfields(m_result.get()))
      throw LodgeError(Errc::internal,
                       "SQL column " + std::to_string(col) + " read with no row or out of range");
    return m_result.get();
  }
  void run();

  PgConn *m_conn;
  const std::string *m_name;
  std::vector<std::string> m_values;
  std::vector<Param> m_state;
  PgResultHandle m_result;
  int m_row = -1;
  int m_rows = 0;
};

class PgConn final : public sql::Conn {
public:
  explicit PgConn(const PgOpen &o);
  [[nodiscard]] sql::Dialect dialect() const override { return sql::Dialect::postgres; }
  [[nodiscard]] const std::string &display_name() const override { return m_display; }
  [[nodiscard]] std::unique_ptr<sql::StmtImpl> prepare(std::string_view sql) override;
  void begin_write() override { simple("BEGIN ISOLATION LEVEL READ COMMITTED"); }
  void begin_read() override { simple("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); }
  void commit() override;
  void rollback() noexcept override;
  void exec_plain(std::string_view sql) override { simple(std::string(sql)); }
  [[nodiscard]] bool in_transaction() const override {
    auto s = m_conn ? PQtransactionStatus(m_conn.get()) : PQTRANS_UNKNOWN;
    return s == PQTRANS_INTRANS || s == PQTRANS_INERROR || s == PQTRANS_ACTIVE;
  }
  void lock_key(std::string_view key) override;
  [[nodiscard]] const char *for_update() const override { return " FOR UPDATE"; }
  [[nodiscard]] const char *skip_locked() const override { return " FOR UPDATE SKIP LOCKED"; }
  [[nodiscard]] int64_t max_record_id() override;
  void raise_record_id(int64_t id) override;
  [[nodiscard]] int schema_version() override;
  [[nodiscard]] sql::Health health() override;
  [[nodiscard]] std::string integrity_check() override;

  // Runs a prepared statement; the result of a statement that succeeded, else throws.
  PgResultHandle exec_prepared(const std::string &name, const std::vector<const char *> &values);

private:
  void connect(const std::string &location, const Bounds &b);
  void set_session_timeouts(const Bounds &b);
  void ensure_alive() const;
  // Runs SQL (one or more statements, no parameters) and returns its last result.
  PgResultHandle simple(const std::string &sql);
  // Sends a request with `send` (a PQsend* call) and reads its whole answer, waiting at
  // most m_answer_ms in all; the last result (the first error, if any), or null when libpq
  // failed (its error message says why). Past the bound: no_answer().
  PgResultHandle exchange(const std::function<int(PGconn *)> &send);
  // Waits until the socket is ready for `events`; false once `until` (steady ms) passed.
  [[nodiscard]] bool wait_socket(short events, int64_t until) const;
  // No answer in time: the connection is closed (the server rolls back what it ran for us
  // when it sees that, unless a COMMIT had reached it) and LEDGER_UNAVAILABLE thrown. Closed,
  // not cancelled: libpq 15's PQcancel waits for the server without a timeout.
  [[noreturn]] void no_answer();
  PgResultHandle checked(PGresult *r);
  [[noreturn]] void fail(const PGresult *r);
  int read_version();
  void setup_schema(const PgOpen &o);
  int64_t query_int(const std::string &sql);
  // A libpq message as lodge shows it: on one line, without any secret of the location
  // (libpq quotes the piece of a location it could not parse, the password included).
  [[nodiscard]] std::string said(const char *message) const;

  std::string m_location; // as given: only for said()
  std::string m_display;
  PgConnHandle m_conn;
  bool m_lost = false;
  std::string m_lost_message;
  int64_t m_timeout_ms;       // ledger_timeout
  int64_t m_answer_ms;        // answer_wait_ms: the most one exchange waits
  int64_t m_statement_ms = 0; // the session's statement_timeout (0: none)
  // SQL text → its prepared statement's name and parameter count, for this connection.
  struct Prepared {
    std::string name;
    int nparams = 0;
  };
  std::unordered_map<std::string, Prepared> m_prepared;
  std::string m_sequence; // file_upload's id sequence, as a quoted, qualified name
};

} // namespace lodge::ledger::pg
