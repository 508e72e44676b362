// The PostgreSQL driver against a real server: run by CTest (pg_driver) through
// `tests/harness/pgserver.py run --`, which starts a throwaway PostgreSQL 15 and exports
// LODGE_TEST_PG_URL (a fresh database) and LODGE_TEST_PG_ADMIN_URL (its `postgres`
// database, for creating more and for terminating backends). Nothing here is skipped: with
// no server the suite fails.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "../unit/support.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <doctest/doctest.h>
#include <ledger/pg.hpp>
#include <lodge/ledger/inspect.hpp>
#include <lodge/ledger/schema.hpp>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace lodge;
using namespace lodge::ledger;

namespace {

std::string env(const char *name) {
  const char *v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set: run through tests/harness/pgserver.py run --");
  return v;
}

using test::thrown_error;

// A libpq connection to the server's `postgres` database, for what the tests do around
// the driver (create databases, terminate backends, look at rows).
class Admin {
public:
  explicit Admin(const std::string &url = env("LODGE_TEST_PG_ADMIN_URL")) : m_url(url) {
    m_conn.reset(PQconnectdb(url.c_str()));
    REQUIRE(PQstatus(m_conn.get()) == CONNECTION_OK);
    PQsetNoticeProcessor(
        m_conn.get(), [](void *, const char *) {}, nullptr);
  }
  std::vector<std::vector<std::string>> sql(const std::string &q) {
    pg::PgResultHandle r(PQexec(m_conn.get(), q.c_str()));
    auto st = PQresultStatus(r.get());
    INFO(q << ": " << PQresultErrorMessage(r.get()));
    REQUIRE((st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK));
    std::vector<std::vector<std::string>> rows;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      rows.emplace_back();
      for (int j = 0; j < PQnfields(r.get()); ++j)
        rows.back().emplace_back(PQgetvalue(r.get(), i, j));
    }
    return rows;
  }
  std::string one(const std::string &q) {
    auto rows = sql(q);
    REQUIRE(rows.size() == 1);
    return rows[0].at(0);
  }
  // A fresh, empty database; its URL.
  std::string fresh_db(const std::string &name) {
    sql("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    sql("CREATE DATABASE " + name);
    return m_url.substr(0, m_url.rfind('/') + 1) + name;
  }

private:
  std::string m_url;
  pg::PgConnHandle m_conn;
};

std::unique_ptr<sql::Conn> open(const std::string &url, bool create = false, bool read_only = false,
                                int64_t lock_timeout_ms = 10'000) {
  pg::PgOpen o;
  o.location = url;
  o.create = create;
  o.read_only = read_only;
  o.lock_timeout_ms = lock_timeout_ms;
  o.now_ms = 1'700'000'000'000;
  return pg::open_pg_conn(o);
}

std::unique_ptr<sql::Conn> open_bounded(const std::string &url, int64_t timeout_ms, int64_t lock_timeout_ms) {
  pg::PgOpen o;
  o.location = url;
  o.timeout_ms = timeout_ms;
  o.lock_timeout_ms = lock_timeout_ms;
  return pg::open_pg_conn(o);
}

// A variable of libpq's set for the guard's life (libpq reads them at each connect).
class EnvVar {
public:
  EnvVar(const char *name, const char *value) : m_name(name) { REQUIRE(::setenv(name, value, 1) == 0); }
  ~EnvVar() { ::unsetenv(m_name); }
  EnvVar(const EnvVar &) = delete;
  EnvVar &operator=(const EnvVar &) = delete;

private:
  const char *m_name;
};

std::string setting(sql::Conn &c, const std::string &name) {
  sql::Stmt st(c.prepare("SELECT current_setting('" + name + "')"));
  REQUIRE(st.step());
  return st.col_text(0);
}

std::string health_text(sql::Conn &c, const std::string &key) {
  for (auto &[k, v] : c.health())
    if (k == key) return std::get<std::string>(v);
  return "(none)";
}

// The server process of a connection stopped (SIGSTOP) as a stopped or hung server is: its
// kernel still accepts and acknowledges what is sent, nothing answers. Continued on exit.
class StoppedBackend {
public:
  explicit StoppedBackend(sql::Conn &c) {
    sql::Stmt st(c.prepare("SELECT pg_backend_pid()"));
    REQUIRE(st.step());
    m_pid = static_cast<pid_t>(st.col_int(0));
    REQUIRE(::kill(m_pid, SIGSTOP) == 0);
  }
  ~StoppedBackend() { resume(); }
  StoppedBackend(const StoppedBackend &) = delete;
  StoppedBackend &operator=(const StoppedBackend &) = delete;
  void resume() {
    if (m_pid > 0) ::kill(m_pid, SIGCONT);
  }
  [[nodiscard]] pid_t pid() const { return m_pid; }

private:
  pid_t m_pid = 0;
};

int64_t elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since)
      .count();
}

// A minimal alive row; its id.
int64_t insert_row(sql::Conn &c, const std::string &key) {
  sql::Stmt st(
      c.prepare("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, "
                "policy, upload_status, created_at, updated_at, upload_deadline_at, dedup_scope) "
                "VALUES (?1, ?2, ?2, 'text/plain', ?3, 1, 'p', 'UPLOADING', ?4, ?4, ?4, 'none') "
                "RETURNING id"));
  st.bind(1, "alice").bind(2, key).bind(3, std::string(64, 'a')).bind(4, int64_t{1000});
  bool row = st.step(); // may throw: some tests expect it to
  REQUIRE(row);
  return st.col_int(0);
}

int64_t count_rows(sql::Conn &c, const std::string &table) {
  sql::Stmt st(c.prepare("SELECT count(*) FROM " + table));
  REQUIRE(st.step());
  return st.col_int(0);
}

} // namespace

TEST_CASE(
    "pg: init creates the schema at the current version; a plain open of an empty database is not found") {
  Admin admin;
  auto url = admin.fresh_db("t_init");
  for (bool ro : {false, true}) {
    CAPTURE(ro);
    auto e = thrown_error([&] { (void)open(url, false, ro); });
    REQUIRE(e);
    CHECK(e->code == Errc::ledger_not_found);
    CHECK(e->message.find("lodge init") != std::string::npos);
  }
  auto c = open(url, true);
  CHECK(c->dialect() == sql::Dialect::postgres);
  CHECK(c->schema_version() == k_schema_version);
  CHECK(admin.sql("SELECT 1 FROM pg_tables WHERE tablename = 'file_upload'").size() == 0); // other database
  Admin in_db(url);
  CHECK(in_db.one("SELECT value FROM ledger_meta WHERE key = 'schema_version'") ==
        std::to_string(k_schema_version));
  CHECK(in_db.one("SELECT value FROM ledger_meta WHERE key = 'created_at'") == "1700000000000");
  CHECK(in_db.one("SELECT length(value) FROM ledger_meta WHERE key = 'uuid'") == "36");
  // Opening again neither creates nor changes anything; a reader opens it too.
  auto again = open(url);
  CHECK(again->schema_version() == k_schema_version);
  auto reader = open(url, false, true);
  CHECK(reader->schema_version() == k_schema_version);
  // A reader's transactions never write.
  auto e = thrown_error([&] {
    reader->write([&](sql::Tx &tx) {
      insert_row(*reader, "k1");
      tx.commit();
    });
  });
  REQUIRE(e);
  CHECK(e->details.sqlstate == "25006");
  CHECK(count_rows(*again, "file_upload") == 0);
}

TEST_CASE("pg: lodge's tables may share a database with others; a missing database says so") {
  Admin admin;
  auto url = admin.fresh_db("t_shared");
  Admin(url).sql("CREATE TABLE someone_elses (x int)");
  auto e = thrown_error([&] { (void)open(url); });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_not_found);
  CHECK(open(url, true)->schema_version() == k_schema_version);

  auto missing = url.substr(0, url.rfind('/') + 1) + "no_such_db";
  e = thrown_error([&] { (void)open(missing, true); });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_not_found);
  CHECK(e->message.find("no_such_db") != std::string::npos);
}

TEST_CASE("pg: a ledger newer than this lodge is refused; a connect failure is LEDGER_UNAVAILABLE") {
  Admin admin;
  auto url = admin.fresh_db("t_new");
  (void)open(url, true);
  Admin(url).sql("UPDATE ledger_meta SET value = '" + std::to_string(k_schema_version + 1) +
                 "' WHERE key = 'schema_version'");
  for (bool create : {false, true}) {
    auto e = thrown_error([&] { (void)open(url, create); });
    REQUIRE(e);
    CHECK(e->code == Errc::ledger_too_new);
  }
  // Nothing listens on port 1.
  auto e = thrown_error([&] { (void)open("postgres://lodge:secretpw@127.0.0.1:1/x"); });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_unavailable);
  CHECK(e->message.find("127.0.0.1:1") != std::string::npos);
  CHECK(e->message.find("secretpw") == std::string::npos);
  CHECK(e->message.find('\n') == std::string::npos); // libpq's lines joined: one line per error
  CHECK(errc_info(e->code).exit_code == 3);
}

TEST_CASE("pg: a version-4 ledger is migrated: the (owner, sha256) index and the quota's counter") {
  Admin admin;
  auto url = admin.fresh_db("t_v4");
  (void)open(url, true);
  Admin db(url);
  // What a fresh ledger has, then the same ledger as version 4 had it (undone by hand).
  auto shape = [&db] {
    return db.sql("SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                  " WHERE n.nspname = 'public' ORDER BY 1");
  };
  auto indexes = [&db] {
    return db.sql("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1");
  };
  auto want = shape();
  auto want_indexes = indexes();
  db.sql(
      // version 12's indexes (dropping content_of below drops file_upload_alive_other_digest)
      "DROP INDEX cleanup_task_due; CREATE INDEX cleanup_task_due ON cleanup_task (status, next_retry_at);"
      " DROP TRIGGER file_upload_usage ON file_upload; DROP FUNCTION file_upload_usage();"
      " DROP TABLE owner_usage;"
      " CREATE INDEX file_upload_owner_alive ON file_upload (owner_id) WHERE is_deleted = 0;"
      " ALTER TABLE file_upload DROP COLUMN holder;"
      " ALTER TABLE file_upload DROP COLUMN content_type, DROP COLUMN object_options,"
      " DROP COLUMN stat_dev, DROP COLUMN stat_ino, DROP COLUMN stat_mtime_ns, DROP COLUMN stat_ctime_ns;"
      // version 8's shared rows (dropping content_of drops the indexes that name it)
      " ALTER TABLE file_upload DROP COLUMN content_of, DROP COLUMN content_key;"
      " CREATE UNIQUE INDEX file_upload_alive_owner_digest ON file_upload (owner_id, sha256)"
      " WHERE is_deleted = 0 AND dedup_scope = 'owner';"
      " CREATE UNIQUE INDEX file_upload_alive_prefix_digest ON file_upload (owner_id, run_prefix, sha256)"
      " WHERE is_deleted = 0 AND dedup_scope <> 'none';"
      " ALTER TABLE cleanup_task DROP COLUMN tag_owed;"
      // version 10's search index, expiry (its index goes with the column) and job 'prune'
      " DROP TABLE file_attr; DROP INDEX file_upload_created; ALTER TABLE file_upload DROP COLUMN expires_at;"
      " ALTER TABLE job_run DROP CONSTRAINT job_run_job_check;"
      " ALTER TABLE job_run ADD CONSTRAINT job_run_job_check CHECK (job IN ('sweep', 'repair', 'reconcile'));"
      // version 11's outbox
      " DROP TRIGGER file_upload_event ON file_upload; DROP FUNCTION file_upload_event();"
      " DROP TABLE outbox_event; ALTER TABLE cleanup_task DROP COLUMN sent_at, DROP COLUMN message_id;"
      " UPDATE ledger_meta SET value = '4' WHERE key = 'schema_version'");
  db.sql("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
         " upload_status, is_deleted, created_at, updated_at, upload_deadline_at, dedup_scope) VALUES"
         " ('alice', 'a', 'k1', 't', repeat('a', 64), 1, 'p', 'ACTIVE', 0, 1, 1, 1, 'none'),"
         " ('alice', 'b', 'k2', 't', repeat('b', 64), 1, 'p', 'UPLOAD_FAILED', 1, 1, 1, 1, 'none')");
  auto c = open(url, false); // migrates
  CHECK(c->schema_version() == k_schema_version);
  CHECK(shape() == want);
  CHECK(indexes() == want_indexes); // each as a new ledger defines it (version 12's among them)
  CHECK(db.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'file_upload'"
               " AND column_name = 'holder'") == "1"); // version 6's
  CHECK(db.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'file_upload'"
               " AND column_name IN ('content_type', 'object_options', 'stat_dev', 'stat_ino',"
               " 'stat_mtime_ns', 'stat_ctime_ns')") == "6"); // version 7's
  CHECK(db.one("SELECT count(*) FROM pg_indexes WHERE indexname IN ('file_upload_alive_owner_digest',"
               " 'file_upload_alive_prefix_digest') AND indexdef LIKE '%content_of IS NULL%'") == "2"); // 8's
  CHECK(db.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'cleanup_task'"
               " AND column_name = 'tag_owed'") == "1"); // version 9's
  CHECK(db.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'file_upload'"
               " AND column_name = 'expires_at'") == "1"); // version 10's
  CHECK(db.one("SELECT count(*) FROM information_schema.columns WHERE table_name = 'cleanup_task'"
               " AND column_name IN ('sent_at', 'message_id')") == "2"); // version 11's
  db.sql("INSERT INTO job_run (job, worker_id, started_at, finished_at, outcome) VALUES ('prune', 'w', 1, 2, "
         "'ok'), ('relay', 'w', 1, 2, 'ok'), ('consume', 'w', 1, 2, 'ok')");
  CHECK(db.one("SELECT alive_files FROM owner_usage WHERE owner_id = 'alice'") == "1");
  insert_row(*c, "k3"); // the trigger counts from then on
  CHECK(db.one("SELECT alive_files FROM owner_usage WHERE owner_id = 'alice'") == "2");
}

TEST_CASE("pg: two inits at once: one creates the schema, the other finds it") {
  Admin admin;
  for (int round = 0; round < 3; ++round) {
    auto url = admin.fresh_db("t_race");
    std::atomic<int> ready{0};
    std::vector<std::optional<Error>> errors(4);
    std::vector<std::thread> ts;
    for (size_t i = 0; i < errors.size(); ++i)
      ts.emplace_back([&, i] {
        ++ready;
        while (ready.load() < static_cast<int>(errors.size()))
          std::this_thread::yield();
        errors[i] = thrown_error([&] { (void)open(url, true); });
      });
    for (auto &t : ts)
      t.join();
    for (auto &e : errors) {
      CHECK_MESSAGE(!e, (e ? e->message : std::string()));
    }
    Admin in_db(url);
    CHECK(in_db.one("SELECT count(*) FROM ledger_meta WHERE key = 'uuid'") == "1");
    CHECK(in_db.one("SELECT value FROM ledger_meta WHERE key = 'schema_version'") ==
          std::to_string(k_schema_version));
  }
}

TEST_CASE("pg: statements: ?10 is the tenth parameter, NULLs, booleans, row counts, prepared once") {
  Admin admin;
  auto url = admin.fresh_db("t_stmt");
  auto c = open(url, true);
  c->read([&] {
    sql::Stmt st(c->prepare("SELECT CAST(?1 AS BIGINT), CAST(?10 AS TEXT), CAST(?2 AS TEXT) IS NULL, "
                            "CAST(?3 AS BIGINT) + ?4 + ?5 + ?6 + ?7 + ?8 + ?9"));
    st.bind(1, int64_t{-9'000'000'000'000}).bind(10, "ten").bind_null(2);
    for (int i = 3; i <= 9; ++i)
      st.bind(i, i);
    REQUIRE(st.step());
    CHECK(st.col_int(0) == -9'000'000'000'000);
    CHECK(st.col_text(1) == "ten");
    CHECK(st.col_int(2) == 1);
    CHECK(st.col_int(3) == 42);
    CHECK_FALSE(st.step());
    // reset keeps the bindings; run again with one changed.
    st.reset();
    st.bind(10, "TEN");
    REQUIRE(st.step());
    CHECK(st.col_text(1) == "TEN");
    sql::Stmt n(c->prepare("SELECT CAST(?1 AS TEXT)"));
    n.bind_null(1);
    REQUIRE(n.step());
    CHECK(n.col_opt_text(0) == std::nullopt);
    CHECK(n.col_text(0).empty());
    CHECK(n.col_int(0) == 0);
  });
  c->write([&](sql::Tx &tx) {
    insert_row(*c, "a");
    insert_row(*c, "b");
    insert_row(*c, "c");
    sql::Stmt up(c->prepare("UPDATE file_upload SET size = ?1 WHERE object_key <> ?2"));
    CHECK(up.bind(1, int64_t{7}).bind(2, "b").exec() == 2);
    CHECK(up.bind(2, "zzz").exec() == 3);
    tx.commit();
  });
  // Prepared once per connection: the same text again is the same server statement.
  auto prepared = [&] {
    sql::Stmt n(c->prepare("SELECT count(*) FROM pg_prepared_statements"));
    REQUIRE(n.step());
    return n.col_int(0);
  };
  int64_t before = prepared();
  sql::Stmt q1(c->prepare("SELECT count(*) FROM file_upload WHERE size = ?1"));
  sql::Stmt q2(c->prepare("SELECT count(*) FROM file_upload WHERE size = ?1"));
  CHECK(prepared() == before + 1);
  q1.bind(1, int64_t{7});
  q2.bind(1, int64_t{7});
  REQUIRE(q1.step());
  REQUIRE(q2.step());
  CHECK(q1.col_int(0) == 3);
  CHECK(q2.col_int(0) == 3);
  // Text columns sort in byte order.
  sql::Stmt order(
      c->prepare("SELECT object_key FROM file_upload WHERE object_key >= ?1 ORDER BY object_key"));
  order.bind(1, "B");
  std::vector<std::string> keys;
  while (order.step())
    keys.push_back(order.col_text(0));
  CHECK(keys == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("pg: text that is not UTF-8 (or holds NUL) is BAD_NAME; an unknown table is LEDGER_NOT_FOUND") {
  Admin admin;
  auto url = admin.fresh_db("t_text");
  auto c = open(url, true);
  for (std::string bad : {std::string("caf\xe9"), std::string("a\0b", 3)}) {
    auto e = thrown_error([&] {
      c->write([&](sql::Tx &tx) {
        insert_row(*c, bad);
        tx.commit();
      });
    });
    REQUIRE(e);
    CHECK(e->code == Errc::bad_name);
    CHECK(e->message.find("UTF-8") != std::string::npos);
  }
  CHECK(count_rows(*c, "file_upload") == 0);
  auto e = thrown_error([&] { (void)c->prepare("SELECT * FROM no_such_table"); });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_not_found);
  CHECK(e->details.sqlstate == "42P01");
  // The connection is still usable after an error.
  CHECK(count_rows(*c, "file_upload") == 0);
  e = thrown_error([&] { (void)c->prepare("SELEC 1"); });
  REQUIRE(e);
  CHECK(e->code == Errc::internal);
  CHECK(e->details.sqlstate == "42601");
}

TEST_CASE("pg: the backend killed mid-transaction: LEDGER_UNAVAILABLE, nothing written, no reconnect") {
  Admin admin;
  auto url = admin.fresh_db("t_lost");
  auto c = open(url, true);
  std::string pid;
  auto e = thrown_error([&] {
    c->write([&](sql::Tx &tx) {
      insert_row(*c, "half");
      sql::Stmt p(c->prepare("SELECT pg_backend_pid()"));
      REQUIRE(p.step());
      pid = p.col_text(0);
      CHECK(admin.one("SELECT pg_terminate_backend(" + pid + ", 10000)") == "t");
      insert_row(*c, "written after the loss");
      tx.commit();
    });
  });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_unavailable);
  CHECK(e->message.find(c->display_name()) != std::string::npos);
  CHECK(errc_info(e->code).exit_code == 3);
  // Every later call fails the same way; none reconnects.
  for (int i = 0; i < 3; ++i) {
    auto later = thrown_error([&] {
      switch (i) {
      case 0:
        (void)c->prepare("SELECT 1");
        break;
      case 1:
        c->begin_write();
        break;
      default:
        (void)c->health();
        break;
      }
    });
    REQUIRE(later);
    CHECK(later->code == Errc::ledger_unavailable);
  }
  CHECK(admin.one("SELECT count(*) FROM pg_stat_activity WHERE pid = " + pid) == "0");
  CHECK(Admin(url).one("SELECT count(*) FROM file_upload") == "0");
}

TEST_CASE("pg: a deadlock is a TransientConflict, and Conn::write runs the body again") {
  Admin admin;
  auto url = admin.fresh_db("t_deadlock");
  auto a = open(url, true);
  auto b = open(url);
  int64_t r1 = 0, r2 = 0;
  a->write([&](sql::Tx &tx) {
    r1 = insert_row(*a, "r1");
    r2 = insert_row(*a, "r2");
    tx.commit();
  });
  std::mutex mu;
  std::condition_variable cv;
  int holding = 0;
  std::atomic<int> attempts{0};
  auto worker = [&](sql::Conn &c, int64_t first, int64_t second) {
    int mine = 0;
    c.write([&](sql::Tx &tx) {
      ++attempts;
      ++mine;
      sql::Stmt up(c.prepare("UPDATE file_upload SET size = size + 1 WHERE id = ?1"));
      up.bind(1, first).exec();
      if (mine == 1) { // the first attempts: both hold their first row before taking the other's
        std::unique_lock<std::mutex> lk(mu);
        ++holding;
        cv.notify_all();
        cv.wait(lk, [&] { return holding == 2; });
      }
      up.bind(1, second).exec();
      tx.commit();
    });
  };
  std::thread ta([&] { worker(*a, r1, r2); });
  std::thread tb([&] { worker(*b, r2, r1); });
  ta.join();
  tb.join();
  CHECK(attempts.load() >= 3); // the deadlock's victim ran again (and both committed)
  sql::Stmt st(a->prepare("SELECT size FROM file_upload ORDER BY id"));
  std::vector<int64_t> sizes;
  while (st.step())
    sizes.push_back(st.col_int(0));
  CHECK(sizes == std::vector<int64_t>{3, 3});
}

TEST_CASE("pg: lock_key serializes one key, a wait past lock_timeout is LEDGER_LOCKED, SKIP LOCKED skips") {
  Admin admin;
  auto url = admin.fresh_db("t_locks");
  auto a = open(url, true);
  auto b = open(url, false, false, 200);
  a->write([&](sql::Tx &tx) {
    insert_row(*a, "row");
    tx.commit();
  });
  a->begin_write();
  a->lock_key("owner-1");
  auto e = thrown_error([&] {
    b->write([&](sql::Tx &tx) {
      b->lock_key("owner-1");
      tx.commit();
    });
  });
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_locked);
  CHECK(e->details.sqlstate == "55P03");
  // Another key is not held.
  b->write([&](sql::Tx &tx) {
    b->lock_key("owner-2");
    tx.commit();
  });
  // A row a holds FOR UPDATE is skipped by b's claim.
  sql::Stmt held(a->prepare(std::string("SELECT id FROM file_upload") + a->for_update()));
  REQUIRE(held.step());
  b->write([&](sql::Tx &tx) {
    sql::Stmt claim(
        b->prepare(std::string("SELECT id FROM file_upload ORDER BY id LIMIT 1") + b->skip_locked()));
    CHECK_FALSE(claim.step());
    tx.commit();
  });
  a->rollback();
  b->write([&](sql::Tx &tx) {
    sql::Stmt claim(
        b->prepare(std::string("SELECT id FROM file_upload ORDER BY id LIMIT 1") + b->skip_locked()));
    CHECK(claim.step());
    tx.commit();
  });
}

TEST_CASE("pg: record ids: max_record_id counts rolled-back inserts, raise_record_id never lowers") {
  Admin admin;
  auto url = admin.fresh_db("t_ids");
  auto c = open(url, true);
  CHECK(c->max_record_id() == 0);
  c->write([&](sql::Tx &tx) {
    CHECK(insert_row(*c, "a") == 1);
    tx.commit();
  });
  c->write([&](sql::Tx &) { CHECK(insert_row(*c, "rolled back") == 2); });
  CHECK(c->max_record_id() == 2);
  c->write([&](sql::Tx &tx) {
    c->raise_record_id(100);
    tx.commit();
  });
  CHECK(c->max_record_id() == 100);
  c->write([&](sql::Tx &tx) {
    c->raise_record_id(50);
    CHECK(insert_row(*c, "b") == 101);
    tx.commit();
  });
  CHECK(c->max_record_id() == 101);
}

TEST_CASE("pg: display name and health never show the password") {
  Admin admin;
  auto url = admin.fresh_db("t_health");
  (void)open(url, true);
  auto with_pw = url;
  with_pw.replace(with_pw.find("lodge@"), 6, "lodge:topsecret@");
  auto c = open(with_pw);
  CHECK(c->display_name().find("topsecret") == std::string::npos);
  CHECK(c->display_name() == url);
  auto h = c->health();
  std::set<std::string> names;
  for (auto &field : h) {
    names.insert(field.first);
    if (auto *s = std::get_if<std::string>(&field.second)) CHECK(s->find("topsecret") == std::string::npos);
  }
  CHECK(names == std::set<std::string>{"server_version", "host", "port", "database", "user", "connected",
                                       "schema_version", "statement_timeout", "lock_timeout",
                                       "connect_timeout", "answer_timeout"});
  for (auto &field : h) {
    const auto &k = field.first;
    const auto &v = field.second;
    if (k == "connected") CHECK(std::get<bool>(v));
    if (k == "schema_version") CHECK(std::get<int64_t>(v) == k_schema_version);
    if (k == "database") CHECK(std::get<std::string>(v) == "t_health");
    if (k == "server_version") CHECK(std::get<std::string>(v).rfind("15.", 0) == 0);
  }
}

TEST_CASE(
    "pg: doctor's inspection: the schema version, and an integrity check that reads the ledger's tables") {
  Admin admin;
  auto url = admin.fresh_db("t_inspect");
  (void)open(url, true);
  auto c = ledger::open_to_inspect(url, 2000);
  CHECK(c->schema_version() == k_schema_version);
  CHECK(c->integrity_check() == "ok");
  open(url)->exec_plain("DROP TABLE cleanup_task");
  CHECK(
      lodge::test::throws_errc([&] { (void)c->integrity_check(); }, Errc::ledger_not_found, "cleanup_task"));
}

TEST_CASE("pg: ledger_timeout sets the session's bounds; the location, PGOPTIONS and PGCONNECT_TIMEOUT win") {
  Admin admin;
  auto url = admin.fresh_db("t_bounds");
  (void)open(url, true);
  {
    auto c = open_bounded(url, 3'000, 200);
    CHECK(setting(*c, "statement_timeout") == "3s");
    CHECK(setting(*c, "lock_timeout") == "200ms");
    CHECK(health_text(*c, "connect_timeout") == "3s");
    CHECK(health_text(*c, "answer_timeout") == "5s"); // 3 s plus the margin
    CHECK(health_text(*c, "statement_timeout") == "3s");
  }
  // A lock wait never outlasts the bound.
  CHECK(setting(*open_bounded(url, 3'000, 60'000), "lock_timeout") == "3s");
  // A role's setting is the server's default: ledger_timeout is lodge's own, set over it.
  Admin(url).sql("ALTER ROLE lodge IN DATABASE t_bounds SET statement_timeout = '1h'");
  CHECK(setting(*open_bounded(url, 3'000, 200), "statement_timeout") == "3s");
  {
    // libpq's own variables win: -c options (source "client") and PGCONNECT_TIMEOUT. The
    // client then waits as long as the session's statement_timeout allows, plus the margin.
    EnvVar options("PGOPTIONS", "-c statement_timeout=7s -c lock_timeout=1500ms");
    EnvVar connect("PGCONNECT_TIMEOUT", "9");
    auto c = open_bounded(url, 3'000, 200);
    CHECK(setting(*c, "statement_timeout") == "7s");
    CHECK(setting(*c, "lock_timeout") == "1500ms");
    CHECK(health_text(*c, "connect_timeout") == "9s");
    CHECK(health_text(*c, "answer_timeout") == "9s");
  }
  // So does the location, over lodge's keywords.
  auto c = open_bounded(url + "?connect_timeout=4&keepalives_idle=7", 3'000, 200);
  CHECK(health_text(*c, "connect_timeout") == "4s");
  CHECK(setting(*c, "statement_timeout") == "3s");
}

TEST_CASE("pg: a server that stops answering: each wait ends at the bound, LEDGER_UNAVAILABLE; a COMMIT is "
          "ambiguous") {
  Admin admin;
  auto url = admin.fresh_db("t_stopped");
  (void)open(url, true);
  const int64_t bound = 1'000 + pg::k_answer_margin_ms; // ledger_timeout 1s
  {
    auto c = open_bounded(url, 1'000, 1'000);
    StoppedBackend stopped(*c);
    auto t0 = std::chrono::steady_clock::now();
    auto e = thrown_error([&] { (void)count_rows(*c, "file_upload"); });
    auto waited = elapsed_ms(t0);
    REQUIRE(e);
    CHECK(e->code == Errc::ledger_unavailable);
    CHECK(e->message.find("postgres://lodge@") == 0);
    CHECK(e->message.find("did not answer (no answer within 3s: ledger_timeout 1s plus 2s") !=
          std::string::npos);
    CHECK(waited >= bound);
    CHECK(waited < bound + 10'000); // a bound, not a timing test
    // The connection is closed and never used again.
    auto again = thrown_error([&] { (void)count_rows(*c, "file_upload"); });
    REQUIRE(again);
    CHECK(again->code == Errc::ledger_unavailable);
    CHECK(again->message.find("lodge does not reconnect") != std::string::npos);
  }
  // Stopped with its COMMIT on the way: whether it committed is not known, and said so.
  auto c = open_bounded(url, 1'000, 1'000);
  c->begin_write();
  (void)insert_row(*c, "maybe");
  std::optional<Error> e;
  pid_t backend = 0;
  {
    StoppedBackend stopped(*c);
    backend = stopped.pid();
    auto t0 = std::chrono::steady_clock::now();
    e = thrown_error([&] { c->commit(); });
    CHECK(elapsed_ms(t0) < bound + 10'000);
  }
  REQUIRE(e);
  CHECK(e->code == Errc::ledger_unavailable);
  CHECK(e->details.ambiguous);
  CHECK(e->message.find("during COMMIT (no answer within 3s") != std::string::npos);
  CHECK(e->message.find("either committed whole or not at all") != std::string::npos);
  c->rollback(); // nothing to do: the connection is gone
  // Continued, the backend reads the COMMIT it was sent, then the close: here it committed.
  Admin in_db(url);
  for (int i = 0;
       i < 500 && !in_db.sql("SELECT 1 FROM pg_stat_activity WHERE pid = " + std::to_string(backend)).empty();
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(in_db.one("SELECT count(*) FROM file_upload WHERE object_key = 'maybe'") == "1");
}
