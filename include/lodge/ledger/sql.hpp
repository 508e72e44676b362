#pragma once
// The seam between the ledger and a database. The ledger is one class (SqlLedger,
// src/ledger/sql_ledger*.cpp): every transition's SQL, written once in the subset SQLite
// and PostgreSQL both speak, with the protocol's decisions taken from ledger/protocol.hpp.
// A driver (sqlite_driver.cpp, pg_driver.cpp) only connects, runs statements, keeps the
// schema, and says how its transactions and locks behave.
//
// SQL text given to a driver uses ?1..?N for parameters (the PostgreSQL driver sends them
// as $1..$N); no '?' may appear anywhere else in it (string literals included). The subset:
// no scalar max(), booleans compared explicitly, INSERT ... RETURNING, no PRAGMA.

#include <cstdint>
#include <lodge/error.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace lodge::ledger::sql {

// A statement of one connection. Parameters are 1-based; every parameter is bound
// before step() or exec(). After the last row (step() false) or exec(), reset() makes it
// ready to bind and run again.
class StmtImpl {
public:
  virtual ~StmtImpl() = default;
  virtual void bind_int(int i, int64_t v) = 0;
  virtual void bind_text(int i, std::string_view v) = 0;
  virtual void bind_null(int i) = 0;
  // True when a row is available, false when done. Throws LodgeError.
  virtual bool step() = 0;
  // Runs to completion; the number of rows the statement inserted, updated or deleted.
  virtual int64_t exec() = 0;
  virtual void reset() = 0;
  [[nodiscard]] virtual bool is_null(int col) const = 0;
  [[nodiscard]] virtual int64_t col_int(int col) const = 0;      // NULL reads as 0
  [[nodiscard]] virtual std::string col_text(int col) const = 0; // NULL reads as ""
};

// The value type every caller uses: `Stmt st(conn, "SELECT ... WHERE id = ?1"); st.bind(1, id);`
class Stmt {
public:
  explicit Stmt(std::unique_ptr<StmtImpl> impl) : m(std::move(impl)) {}
  Stmt &bind(int i, int64_t v) { return m->bind_int(i, v), *this; }
  Stmt &bind(int i, int v) { return m->bind_int(i, v), *this; }
  Stmt &bind(int i, bool v) { return m->bind_int(i, v ? 1 : 0), *this; }
  Stmt &bind(int i, std::string_view v) { return m->bind_text(i, v), *this; }
  Stmt &bind(int i, const std::string &v) { return m->bind_text(i, v), *this; }
  Stmt &bind(int i, const char *v) { return m->bind_text(i, v), *this; }
  Stmt &bind(int i, const std::optional<std::string> &v) { return v ? bind(i, *v) : bind_null(i); }
  Stmt &bind(int i, const std::optional<int64_t> &v) { return v ? bind(i, *v) : bind_null(i); }
  Stmt &bind_null(int i) { return m->bind_null(i), *this; }
  bool step() { return m->step(); }
  int64_t exec() { return m->exec(); }
  void reset() { m->reset(); }
  [[nodiscard]] int64_t col_int(int c) const { return m->col_int(c); }
  [[nodiscard]] std::string col_text(int c) const { return m->col_text(c); }
  [[nodiscard]] std::optional<int64_t> col_opt_int(int c) const {
    return m->is_null(c) ? std::nullopt : std::optional<int64_t>(m->col_int(c));
  }
  [[nodiscard]] std::optional<std::string> col_opt_text(int c) const {
    return m->is_null(c) ? std::nullopt : std::optional<std::string>(m->col_text(c));
  }

private:
  std::unique_ptr<StmtImpl> m;
};

// One field of a backend's health, for `status --json` under "backend".
using HealthValue = std::variant<std::string, int64_t, bool>;
using Health = std::vector<std::pair<std::string, HealthValue>>;

// A driver throws this (a LodgeError with code ledger_locked) for a failure that a fresh
// attempt of the whole transaction may not meet: PostgreSQL's serialization_failure
// (40001) and deadlock_detected (40P01). Conn::write retries on it.
class TransientConflict : public LodgeError {
public:
  using LodgeError::LodgeError;
};

enum class Dialect { sqlite, postgres };

// One open connection to a migrated ledger database.
class Conn {
public:
  virtual ~Conn() = default;
  [[nodiscard]] virtual Dialect dialect() const = 0;
  // How people see this ledger in messages: the SQLite path, or the PostgreSQL URL
  // without its password.
  [[nodiscard]] virtual const std::string &display_name() const = 0;
  [[nodiscard]] virtual std::unique_ptr<StmtImpl> prepare(std::string_view sql) = 0;

  // Transactions. begin_write: SQLite BEGIN IMMEDIATE (every writer serialized);
  // PostgreSQL BEGIN ISOLATION LEVEL READ COMMITTED, enough (and cheaper than SERIALIZABLE's
  // retries) because no write decides on rows it does not lock: lock_key, for_update,
  // skip_locked below. begin_read: a consistent snapshot that never writes. rollback never
  // throws.
  virtual void begin_write() = 0;
  virtual void begin_read() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  // Runs one statement without parameters or results (SAVEPOINT, RELEASE, ROLLBACK TO).
  virtual void exec_plain(std::string_view sql) = 0;
  // Whether the connection is inside a transaction. SQLite may roll a whole transaction back
  // on its own (SQLITE_FULL, IOERR, BUSY, NOMEM): whoever runs several bodies in one
  // transaction checks this before going on.
  [[nodiscard]] virtual bool in_transaction() const = 0;

  // Serializes the rest of this write transaction with every other one that locks the same
  // key (an owner: reserve's check-then-insert). PostgreSQL:
  // pg_advisory_xact_lock(k_lock_namespace, <stable 32-bit hash of key>) — a collision only
  // serializes two keys. SQLite: nothing (BEGIN IMMEDIATE already serializes every writer).
  virtual void lock_key(std::string_view key) = 0;
  // Appended to a SELECT inside a write transaction whose rows the transaction then
  // changes: " FOR UPDATE" (PostgreSQL, READ COMMITTED re-reads the latest version and
  // holds it), "" (SQLite). Lock order everywhere: file_upload row, then its cleanup_task.
  [[nodiscard]] virtual const char *for_update() const = 0;
  // Appended to the claim's SELECT: " FOR UPDATE SKIP LOCKED" (PostgreSQL), "" (SQLite).
  [[nodiscard]] virtual const char *skip_locked() const = 0;

  // The highest file_upload id ever issued (rolled-back inserts included), 0 for none.
  [[nodiscard]] virtual int64_t max_record_id() = 0;
  // Inside a write transaction: no file_upload id at or below `id` is ever issued again.
  virtual void raise_record_id(int64_t id) = 0;

  [[nodiscard]] virtual int schema_version() = 0;
  // Backend facts for `status --json` "backend" (SQLite: path, journal_mode, synchronous;
  // PostgreSQL: server_version, host, database, user, connected).
  [[nodiscard]] virtual Health health() = 0;
  // The database's own consistency check, for `lodge doctor`: "ok", or what it found.
  // SQLite: PRAGMA quick_check. PostgreSQL keeps its pages consistent itself: the check is
  // that the ledger's tables answer a read.
  [[nodiscard]] virtual std::string integrity_check() = 0;

  // Runs `body(tx)` in a write transaction, with `tx` a Tx: the transaction commits when
  // body called tx.commit() and returned, and rolls back otherwise (body returned without
  // it, or threw). A TransientConflict rolls back and runs the body again, at most
  // k_write_attempts times, then propagates. Returns what body returned.
  //   return conn.write([&](sql::Tx &tx) { ...; if (changed != 1) return false; tx.commit(); return true; });
  // Called inside another write (or a batch), the body runs in a savepoint instead: its
  // "commit" releases the savepoint into the enclosing transaction, anything else rolls back
  // to it, so one body's rollback never touches what the others wrote. A TransientConflict
  // then propagates to the outermost write, which runs everything again.
  template <class Body> auto write(Body &&body);

  // A batch: one write transaction that the caller fills with write() calls (each one a
  // savepoint) and then ends. begin_batch waits for the write lock like begin_write;
  // end_batch(true) commits (throws what COMMIT throws), end_batch(false) rolls back.
  void begin_batch() {
    begin_write();
    m_depth = 1;
  }
  void end_batch(bool commit_it) {
    m_depth = 0;
    if (commit_it)
      commit();
    else
      rollback();
  }
  // Runs `body()` in a read transaction (one snapshot) and ends it. Returns what body returned.
  template <class Body> auto read(Body &&body);

  static constexpr int k_write_attempts = 8;

private:
  template <class Body> auto nested_write(Body &&body);
  // How many write() bodies (or a batch) this connection is inside.
  int m_depth = 0;
};

// Handed to a write transaction's body: commit() asks for the commit (made after the body
// returns, so a body may still read after asking).
class Tx {
public:
  void commit() { m_commit = true; }
  [[nodiscard]] bool committing() const { return m_commit; }

private:
  bool m_commit = false;
};

// The advisory-lock namespace lodge's PostgreSQL locks live in (the first int4 key).
inline constexpr int32_t k_lock_namespace = 0x6c6f6467; // "lodg"
// The second key of the schema lock (creation and migration).
inline constexpr int32_t k_schema_lock = 0;

// Backs off briefly between attempts (jittered, a few ms growing to ~100 ms).
void conflict_backoff(int attempt);

template <class Body> auto Conn::nested_write(Body &&body) {
  const std::string name = "lodge_w" + std::to_string(m_depth);
  exec_plain("SAVEPOINT " + name);
  struct Depth {
    int &d;
    explicit Depth(int &x) : d(x) { ++d; }
    ~Depth() { --d; }
    Depth(const Depth &) = delete;
    Depth &operator=(const Depth &) = delete;
  };
  // Undoes the body's work and forgets the savepoint. When the transaction itself is gone
  // (SQLite rolled it back), there is nothing to undo: the enclosing writer sees that.
  auto undo = [&]() noexcept {
    if (!in_transaction()) return;
    try {
      exec_plain("ROLLBACK TO " + name);
      exec_plain("RELEASE " + name);
    } catch (...) { // NOLINT(bugprone-empty-catch): the enclosing transaction fails on its own
    }
  };
  Tx tx;
  try {
    if constexpr (std::is_void_v<decltype(body(tx))>) {
      {
        Depth d(m_depth);
        body(tx);
      }
      if (tx.committing())
        exec_plain("RELEASE " + name);
      else
        undo();
      return;
    } else {
      auto r = [&] {
        Depth d(m_depth);
        return body(tx);
      }();
      if (tx.committing())
        exec_plain("RELEASE " + name);
      else
        undo();
      return r;
    }
  } catch (...) {
    undo();
    throw;
  }
}

template <class Body> auto Conn::write(Body &&body) {
  if (m_depth > 0) return nested_write(std::forward<Body>(body));
  for (int attempt = 1;; ++attempt) {
    begin_write();
    m_depth = 1;
    try {
      Tx tx;
      auto end = [&] {
        m_depth = 0;
        if (tx.committing())
          commit();
        else
          rollback();
      };
      if constexpr (std::is_void_v<decltype(body(tx))>) {
        body(tx);
        end();
        return;
      } else {
        auto r = body(tx);
        end();
        return r;
      }
    } catch (const TransientConflict &) {
      m_depth = 0;
      rollback();
      if (attempt >= k_write_attempts) throw;
      conflict_backoff(attempt);
    } catch (...) {
      m_depth = 0;
      rollback();
      throw;
    }
  }
}

template <class Body> auto Conn::read(Body &&body) {
  begin_read();
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      rollback();
      return;
    } else {
      auto r = body();
      rollback();
      return r;
    }
  } catch (...) {
    rollback();
    throw;
  }
}

} // namespace lodge::ledger::sql
