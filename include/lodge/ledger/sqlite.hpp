#pragma once
// Thin RAII over sqlite3: one owner per handle, errors that keep SQLite's extended code,
// a BEGIN IMMEDIATE transaction that rolls back in its destructor unless committed.
// The SQLite driver's internals (src/ledger/sqlite_driver.cpp); the ledger itself speaks
// to a database only through ledger/sql.hpp.

#include <cstdint>
#include <lodge/error.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace lodge::ledger {

struct Sqlite3Closer {
  void operator()(sqlite3 *db) const noexcept;
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt *s) const noexcept;
};
using DbHandle = std::unique_ptr<sqlite3, Sqlite3Closer>;
using StmtHandle = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// Builds the LodgeError for a failed SQLite call: busy → LEDGER_LOCKED, corrupt or
// not-a-database → LEDGER_UNUSABLE, anything else INTERNAL; details keep the code.
[[nodiscard]] Error sqlite_error(sqlite3 *db, int rc, std::string_view what, std::string_view path);

class Db;

// A prepared statement bound to its Db. Bind with 1-based indexes.
class Stmt {
public:
  // `persistent`: SQLITE_PREPARE_PERSISTENT, for a statement kept and run many times.
  Stmt(Db &db, std::string_view sql, bool persistent = false);
  // Takes a statement prepared before (reset, no bindings) back into use.
  Stmt(Db &db, StmtHandle prepared) : m_db(&db), m_stmt(std::move(prepared)) {}
  // Resets the statement, clears its bindings and hands it over (to be kept).
  [[nodiscard]] StmtHandle release();
  Stmt &bind(int i, int64_t v);
  Stmt &bind(int i, std::string_view v);
  Stmt &bind(int i, const std::string &v) { return bind(i, std::string_view(v)); }
  Stmt &bind(int i, const char *v) { return bind(i, std::string_view(v)); }
  Stmt &bind(int i, const std::optional<std::string> &v);
  Stmt &bind(int i, const std::optional<int64_t> &v);
  Stmt &bind_null(int i);
  // Steps once: true when a row is available, false when done. Throws on error.
  bool step();
  // Steps to completion and returns sqlite3_changes().
  int exec();
  void reset();
  [[nodiscard]] bool is_null(int i) const;
  [[nodiscard]] int64_t col_int(int i) const;
  [[nodiscard]] std::string col_text(int i) const;
  [[nodiscard]] std::optional<int64_t> col_opt_int(int i) const;
  [[nodiscard]] std::optional<std::string> col_opt_text(int i) const;

private:
  Db *m_db;
  StmtHandle m_stmt;
};

class Db {
public:
  // Opens path with SQLITE_OPEN_NOFOLLOW (read-write, or read-only). Throws
  // LodgeError(LEDGER_UNUSABLE) naming path and, when the OS said why, errno's text.
  // `immutable` (read-only only): SQLite's immutable=1, for a WAL ledger whose -shm cannot
  // be created (a read-only directory or mount); no locks are taken.
  Db(const std::string &path, int64_t busy_timeout_ms, bool read_only = false, bool immutable = false);
  [[nodiscard]] bool read_only() const { return m_read_only; }
  [[nodiscard]] sqlite3 *raw() const { return m_db.get(); }
  [[nodiscard]] const std::string &path() const { return m_path; }
  // Runs SQL without results (several statements allowed). Throws on error.
  void exec(std::string_view sql);
  [[nodiscard]] int64_t query_int(std::string_view sql);
  [[nodiscard]] std::string query_text(std::string_view sql);
  [[nodiscard]] int64_t last_insert_rowid() const;
  [[nodiscard]] Error error(int rc, std::string_view what) const;

private:
  std::string m_path;
  DbHandle m_db;
  bool m_read_only = false;
};

// BEGIN IMMEDIATE on construction (takes the write lock at once, waiting up to the busy
// timeout); ROLLBACK in the destructor unless commit() ran. The only way lodge writes.
class Transaction {
public:
  explicit Transaction(Db &db);
  Transaction(const Transaction &) = delete;
  Transaction &operator=(const Transaction &) = delete;
  ~Transaction();
  void commit();

private:
  Db &m_db;
  bool m_done = false;
};

// A read transaction (BEGIN DEFERRED) for a consistent snapshot; never writes.
class ReadTransaction {
public:
  explicit ReadTransaction(Db &db);
  ReadTransaction(const ReadTransaction &) = delete;
  ReadTransaction &operator=(const ReadTransaction &) = delete;
  ~ReadTransaction();

private:
  Db &m_db;
};

} // namespace lodge::ledger
