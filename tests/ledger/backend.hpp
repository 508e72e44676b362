#pragma once
// The ledger under test, named by the environment:
//   LODGE_TEST_LEDGER=sqlite                          a fresh ledger file per test case
//   LODGE_TEST_LEDGER=postgres LODGE_TEST_PG_URL=...  a fresh database per test case, made
//     on a connection to that URL (CREATE DATABASE lodge_c_<pid>_<n>) and dropped after
//   LODGE_TEST_LEDGER=fake                            the unit tests' ledger fake
//     (tests/support/fake_ledger.hpp), a fresh one per test case, in this process's memory
// Every ledger a test opens comes from open_ledger() below: the one place that knows how
// this build's lodge opens a ledger at a location. The raw connections (sqlite3, libpq)
// are test-only: they change what no Ledger call may, such as the schema version. The fake
// has none: the cases that need them are the sqlonly suite's, which the fake's run leaves out.

#include "support/fake_ledger.hpp"

#include <atomic>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <ledger/pg.hpp>
#include <libpq-fe.h>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sqlite3.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace lodge::test {

enum class Backend { sqlite, postgres, fake };

inline std::string env_or_empty(const char *k) {
  const char *v = std::getenv(k);
  return v ? v : "";
}

// The backend LODGE_TEST_LEDGER names; anything else is a setup error, never a pass.
inline Backend backend() {
  auto b = env_or_empty("LODGE_TEST_LEDGER");
  if (b == "sqlite") return Backend::sqlite;
  if (b == "fake") return Backend::fake;
  if (b == "postgres") {
    if (env_or_empty("LODGE_TEST_PG_URL").empty())
      throw std::runtime_error("LODGE_TEST_LEDGER=postgres needs LODGE_TEST_PG_URL");
    return Backend::postgres;
  }
  throw std::runtime_error("LODGE_TEST_LEDGER must be sqlite, postgres or fake, not '" + b + "'");
}

namespace detail {
// The fake backend's ledgers, by location: each open of a location is another connection to
// its one FakeLedger (FakeLedger::connect), as each open of a SQLite file or a PostgreSQL
// database is another connection to that ledger. A fake needs no clock: it reads `now` from
// each call's arguments, and the clock SqlLedger reads only dates a new ledger's creation.
class FakeLedgers {
public:
  static FakeLedgers &all() {
    static FakeLedgers ledgers;
    return ledgers;
  }
  std::unique_ptr<ledger::Ledger> open(const std::string &location, bool create) {
    std::lock_guard lock(m_mutex);
    auto it = m_at.find(location);
    if (it == m_at.end()) {
      if (!create) throw LodgeError(Errc::ledger_not_found, "no fake ledger at " + location);
      it = m_at.emplace(location, std::make_unique<FakeLedger>(location)).first;
    }
    return it->second->connect();
  }
  // The ledger at `location`, to change behind its back (it must exist).
  FakeLedger &at(const std::string &location) {
    std::lock_guard lock(m_mutex);
    auto it = m_at.find(location);
    if (it == m_at.end()) throw std::logic_error("no fake ledger at " + location);
    return *it->second;
  }
  // Gone once its last connection closes.
  void remove(const std::string &location) {
    std::lock_guard lock(m_mutex);
    m_at.erase(location);
  }

private:
  std::mutex m_mutex;
  std::map<std::string, std::unique_ptr<FakeLedger>> m_at;
};

// The workers of one process on the fake: more connections to the one ledger.
class FakePool final : public ledger::LedgerPool {
public:
  explicit FakePool(std::string location) : m_location(std::move(location)) {}
  [[nodiscard]] std::unique_ptr<ledger::Ledger> worker() override {
    return FakeLedgers::all().open(m_location, false);
  }

private:
  std::string m_location;
};
} // namespace detail

// Opens the ledger at `location` (a SQLite path, a PostgreSQL URL, or a fake's name), creating
// it when `create`. The one factory every test uses.
inline std::unique_ptr<ledger::Ledger> open_ledger(const std::string &location, const util::Clock *clock,
                                                   bool create = true) {
  if (backend() == Backend::fake) return detail::FakeLedgers::all().open(location, create);
  ledger::OpenOptions o;
  o.location = location;
  o.create = create;
  o.clock = clock;
  return ledger::open_ledger(o);
}

// The workers' ledgers of one process at `location`, as `lodge upload --jobs N` gets them: on
// SQLite their upload writes are group-committed through one shared writer.
inline std::shared_ptr<ledger::LedgerPool> open_ledger_pool(const std::string &location,
                                                            const util::Clock *clock) {
  if (backend() == Backend::fake) return std::make_shared<detail::FakePool>(location);
  ledger::OpenOptions o;
  o.location = location;
  o.clock = clock;
  return ledger::open_ledger_pool(o);
}

namespace detail {
// The driver's own RAII owners (src/ledger/pg.hpp).
using PgConnPtr = ledger::pg::PgConnHandle;
using PgResultPtr = ledger::pg::PgResultHandle;

inline PgConnPtr pg_connect(const std::string &url) {
  PgConnPtr c(PQconnectdb(url.c_str()));
  if (!c || PQstatus(c.get()) != CONNECTION_OK)
    throw std::runtime_error("cannot connect to " + url + ": " +
                             (c ? PQerrorMessage(c.get()) : "out of memory"));
  return c;
}

inline void pg_exec(const std::string &url, const std::string &sql) {
  auto c = pg_connect(url);
  PgResultPtr r(PQexec(c.get(), sql.c_str()));
  auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    throw std::runtime_error("on " + url + ": " + sql + ": " + PQerrorMessage(c.get()));
}

// `url` with its database replaced by `db` (postgres://auth@host:port/DB?query).
inline std::string with_database(const std::string &url, const std::string &db) {
  auto scheme = url.find("://");
  if (scheme == std::string::npos) throw std::runtime_error("LODGE_TEST_PG_URL is not a URL: " + url);
  auto query = url.find('?', scheme + 3);
  std::string head = url.substr(0, query), tail = query == std::string::npos ? "" : url.substr(query);
  auto slash = head.find('/', scheme + 3);
  if (slash != std::string::npos) head.resize(slash);
  return head + "/" + db + tail;
}

inline void sqlite_exec(const std::string &path, const std::string &sql) {
  sqlite3 *raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  std::unique_ptr<sqlite3, int (*)(sqlite3 *)> db(raw, sqlite3_close);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot open " + path + ": " + sqlite3_errstr(rc));
  sqlite3_busy_timeout(raw, 10'000);
  char *err = nullptr;
  if (sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(path + ": " + sql + ": " + msg);
  }
}
} // namespace detail

// One test case's ledger location, fresh and empty (nothing there yet), removed at the end.
class FreshLedger {
public:
  FreshLedger() : m_backend(backend()) {
    static std::atomic<int> n{0};
    int i = n++;
    if (m_backend == Backend::fake) {
      m_location = "fake:" + std::to_string(::getpid()) + "_" + std::to_string(i);
    } else if (m_backend == Backend::sqlite) {
      char tmpl[] = "/tmp/lodge-ledger-XXXXXX";
      if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
      m_dir = tmpl;
      m_location = m_dir + "/ledger.db";
    } else {
      m_admin_url = env_or_empty("LODGE_TEST_PG_URL");
      m_db = "lodge_c_" + std::to_string(::getpid()) + "_" + std::to_string(i);
      detail::pg_exec(m_admin_url, "DROP DATABASE IF EXISTS " + m_db + " WITH (FORCE)");
      detail::pg_exec(m_admin_url, "CREATE DATABASE " + m_db);
      m_location = detail::with_database(m_admin_url, m_db);
    }
  }
  ~FreshLedger() {
    try {
      if (m_backend == Backend::fake) {
        detail::FakeLedgers::all().remove(m_location);
      } else if (m_backend == Backend::sqlite) {
        std::error_code ec;
        std::filesystem::remove_all(m_dir, ec);
      } else {
        detail::pg_exec(m_admin_url, "DROP DATABASE IF EXISTS " + m_db + " WITH (FORCE)");
      }
    } catch (const std::exception &e) {
      MESSAGE("could not remove the test ledger ", m_location, ": ", e.what());
    }
  }
  FreshLedger(const FreshLedger &) = delete;
  FreshLedger &operator=(const FreshLedger &) = delete;

  [[nodiscard]] const std::string &location() const { return m_location; }
  [[nodiscard]] Backend kind() const { return m_backend; }
  // Whether the ledger computes status() (SqlLedger; the fake does not model its figures): a
  // case whose subject is something else checks a figure of status only then.
  [[nodiscard]] bool reports_status() const { return m_backend != Backend::fake; }
  [[nodiscard]] std::unique_ptr<ledger::Ledger> open(const util::Clock *clock, bool create = true) const {
    return open_ledger(m_location, clock, create);
  }
  // SQL on a raw connection of the ledger's own database, behind lodge's back (a sqlonly case's).
  void exec_raw(const std::string &sql) const {
    if (m_backend == Backend::fake)
      throw std::logic_error("SQL on the fake ledger (a sqlonly case?): " + sql);
    if (m_backend == Backend::sqlite)
      detail::sqlite_exec(m_location, sql);
    else
      detail::pg_exec(m_location, sql);
  }
  // The task of `record_id` made PENDING (and due at `due`, when given) behind lodge's back, as
  // no ledger call would: a task put back by hand, its lease and the rest as they were.
  void set_task_pending(int64_t record_id, std::optional<int64_t> due = std::nullopt) const {
    if (m_backend == Backend::fake) {
      detail::FakeLedgers::all().at(m_location).edit_task(record_id, [&](ledger::TaskRecord &t) {
        t.status = ledger::TaskStatus::pending;
        if (due) t.next_retry_at = *due;
      });
      return;
    }
    exec_raw("UPDATE cleanup_task SET status = 'PENDING'" +
             (due ? ", next_retry_at = " + std::to_string(*due) : std::string()) +
             " WHERE record_id = " + std::to_string(record_id));
  }
  // Makes the ledger say it is at schema version `v` (where each backend keeps it).
  void set_schema_version(int v) const {
    if (m_backend == Backend::sqlite)
      exec_raw("PRAGMA user_version = " + std::to_string(v));
    else
      exec_raw("UPDATE ledger_meta SET value = '" + std::to_string(v) + "' WHERE key = 'schema_version'");
  }

private:
  Backend m_backend;
  std::string m_dir, m_location, m_admin_url, m_db;
};

} // namespace lodge::test
