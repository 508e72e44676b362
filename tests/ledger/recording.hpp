#pragma once
// A ledger connection that records what SqlLedger asks of it: every statement it prepares,
// with the parameters bound to it, each call going on to the real connection. A test then
// runs a recorded statement again on a raw connection of its own (its cost, its plan).

#include <doctest/doctest.h>
#include <lodge/ledger/sql.hpp>
#include <map>
#include <memory>
#include <sqlite3.h>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lodge::test {

struct Prepared {
  std::string sql;
  std::map<int, std::variant<int64_t, std::string, std::monostate>> binds;
};

class RecordingStmt final : public ledger::sql::StmtImpl {
public:
  RecordingStmt(std::unique_ptr<ledger::sql::StmtImpl> inner, Prepared &rec)
      : m_in(std::move(inner)), m_rec(rec) {}
  void bind_int(int i, int64_t v) override {
    m_rec.binds[i] = v;
    m_in->bind_int(i, v);
  }
  void bind_text(int i, std::string_view v) override {
    m_rec.binds[i] = std::string(v);
    m_in->bind_text(i, v);
  }
  void bind_null(int i) override {
    m_rec.binds[i] = std::monostate{};
    m_in->bind_null(i);
  }
  bool step() override { return m_in->step(); }
  int64_t exec() override { return m_in->exec(); }
  void reset() override { m_in->reset(); }
  [[nodiscard]] bool is_null(int col) const override { return m_in->is_null(col); }
  [[nodiscard]] int64_t col_int(int col) const override { return m_in->col_int(col); }
  [[nodiscard]] std::string col_text(int col) const override { return m_in->col_text(col); }

private:
  std::unique_ptr<ledger::sql::StmtImpl> m_in;
  Prepared &m_rec;
};

// Every call goes to the real SQLite connection; prepare() also records the statement.
class RecordingConn final : public ledger::sql::Conn {
public:
  explicit RecordingConn(std::unique_ptr<ledger::sql::Conn> inner) : m_in(std::move(inner)) {}
  std::vector<std::unique_ptr<Prepared>> prepared;

  [[nodiscard]] ledger::sql::Dialect dialect() const override { return m_in->dialect(); }
  [[nodiscard]] const std::string &display_name() const override { return m_in->display_name(); }
  [[nodiscard]] std::unique_ptr<ledger::sql::StmtImpl> prepare(std::string_view sql) override {
    prepared.push_back(std::make_unique<Prepared>(Prepared{std::string(sql), {}}));
    return std::make_unique<RecordingStmt>(m_in->prepare(sql), *prepared.back());
  }
  void begin_write() override { m_in->begin_write(); }
  void begin_read() override { m_in->begin_read(); }
  void commit() override { m_in->commit(); }
  void rollback() noexcept override { m_in->rollback(); }
  void exec_plain(std::string_view sql) override { m_in->exec_plain(sql); }
  [[nodiscard]] bool in_transaction() const override { return m_in->in_transaction(); }
  void lock_key(std::string_view key) override { m_in->lock_key(key); }
  [[nodiscard]] const char *for_update() const override { return m_in->for_update(); }
  [[nodiscard]] const char *skip_locked() const override { return m_in->skip_locked(); }
  [[nodiscard]] int64_t max_record_id() override { return m_in->max_record_id(); }
  void raise_record_id(int64_t id) override { m_in->raise_record_id(id); }
  [[nodiscard]] int schema_version() override { return m_in->schema_version(); }
  [[nodiscard]] ledger::sql::Health health() override { return m_in->health(); }
  [[nodiscard]] std::string integrity_check() override { return m_in->integrity_check(); }

private:
  std::unique_ptr<ledger::sql::Conn> m_in;
};

// The statement `p` (after `prefix`: "EXPLAIN QUERY PLAN "), prepared with its recorded
// parameters on `raw`.
inline std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt *)> prepare_bound(sqlite3 *raw, const Prepared &p,
                                                                            const std::string &prefix = "") {
  sqlite3_stmt *st = nullptr;
  const std::string sql = prefix + p.sql;
  REQUIRE_MESSAGE(sqlite3_prepare_v2(raw, sql.c_str(), -1, &st, nullptr) == SQLITE_OK, sqlite3_errmsg(raw));
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt *)> stmt(st, sqlite3_finalize);
  for (const auto &[i, v] : p.binds) {
    if (const auto *n = std::get_if<int64_t>(&v))
      sqlite3_bind_int64(st, i, *n);
    else if (const auto *s = std::get_if<std::string>(&v))
      sqlite3_bind_text(st, i, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    else
      sqlite3_bind_null(st, i);
  }
  return stmt;
}

} // namespace lodge::test
