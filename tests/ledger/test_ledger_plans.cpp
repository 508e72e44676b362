// Schema 12's leaner indexes, on SQLite and PostgreSQL: a version-11 ledger migrates to
// exactly the indexes of a new one, and on that migrated ledger every statement of the hot
// queries (claim and the due tasks, reserve's duplicate lookups and quota, the stat cache,
// the search, the relay's reads) reads file_upload and cleanup_task through an index: a
// search on one, or a walk of a partial one (whose rows are the few it is about), never the
// whole table nor the whole of a full index.
//
// The ledger runs over a connection that records each statement it prepares with its
// parameters (recording.hpp); each is then explained on a raw connection: SQLite's EXPLAIN
// QUERY PLAN, PostgreSQL's EXPLAIN (FORMAT JSON) with sequential scans disabled, so that a
// Seq Scan in the plan means no index could serve the statement. A partial index serves a
// query only when the query's condition implies the index's (SQLite: names it term by term).
#include "recording.hpp"
#include "support.hpp"

#include <algorithm>
#include <functional>
#include <ledger/drivers.hpp>
#include <ledger/sql_ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/ledger/schema.hpp>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

using namespace lodge;

namespace {

const std::set<std::string> k_tables{"file_upload", "cleanup_task"};

// The ledger's indexes as its database states them, by name (SQLite: the CREATE INDEX text
// with its white space folded; PostgreSQL: pg_indexes.indexdef).
std::map<std::string, std::string> index_definitions(const test::FreshLedger &f) {
  std::map<std::string, std::string> out;
  if (f.kind() == test::Backend::sqlite) {
    sqlite3 *raw = nullptr;
    REQUIRE(sqlite3_open_v2(f.location().c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    std::unique_ptr<sqlite3, int (*)(sqlite3 *)> db(raw, sqlite3_close);
    sqlite3_stmt *st = nullptr;
    REQUIRE(sqlite3_prepare_v2(raw,
                               "SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND sql NOT NULL",
                               -1, &st, nullptr) == SQLITE_OK);
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt *)> stmt(st, sqlite3_finalize);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string sql = reinterpret_cast<const char *>(sqlite3_column_text(st, 1));
      out[reinterpret_cast<const char *>(sqlite3_column_text(st, 0))] =
          std::regex_replace(sql, std::regex("\\s+"), " ");
    }
    return out;
  }
  auto c = test::detail::pg_connect(f.location());
  test::detail::PgResultPtr r(PQexec(c.get(), "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = "
                                              "current_schema()"));
  REQUIRE(PQresultStatus(r.get()) == PGRES_TUPLES_OK);
  for (int i = 0; i < PQntuples(r.get()); ++i)
    out[PQgetvalue(r.get(), i, 0)] = PQgetvalue(r.get(), i, 1);
  return out;
}

// The names of the partial indexes among `defs`.
std::set<std::string> partial(const std::map<std::string, std::string> &defs) {
  std::set<std::string> out;
  for (const auto &[name, sql] : defs)
    if (sql.find(" WHERE ") != std::string::npos) out.insert(name);
  return out;
}

// What a SQLite plan reads without an index: each "SCAN" of a table that names no index, or
// names a full one (a walk of all of it). Subqueries' own scans are theirs.
std::vector<std::string> sqlite_full_reads(sqlite3 *raw, const test::Prepared &p,
                                           const std::set<std::string> &partial_indexes, std::string &plan) {
  auto st = test::prepare_bound(raw, p, "EXPLAIN QUERY PLAN ");
  std::vector<std::string> bad;
  std::set<std::string> subqueries;
  static const std::regex scan(R"(^SCAN (\S+)(?: USING (?:COVERING )?INDEX (\S+))?)");
  static const std::regex sub(R"(^(?:CO-ROUTINE|MATERIALIZE) (\S+))");
  while (sqlite3_step(st.get()) == SQLITE_ROW) {
    const std::string detail = reinterpret_cast<const char *>(sqlite3_column_text(st.get(), 3));
    plan += detail + "\n";
    std::smatch m;
    if (std::regex_search(detail, m, sub)) subqueries.insert(m[1]);
    if (!std::regex_search(detail, m, scan) || subqueries.contains(m[1])) continue;
    if (!m[2].matched || !partial_indexes.contains(m[2])) bad.push_back(detail);
  }
  return bad;
}

// PostgreSQL: every node of `plan` that reads one of the ledger's tables whole: a Seq Scan,
// or an index scan with no Index Cond on an index that is not partial.
void pg_full_reads(const nlohmann::json &node, const std::set<std::string> &partial_indexes,
                   std::vector<std::string> &bad) {
  const std::string type = node.value("Node Type", "");
  const std::string rel = node.value("Relation Name", "");
  const std::string index = node.value("Index Name", "");
  if (type == "Seq Scan" && k_tables.contains(rel)) bad.push_back("Seq Scan on " + rel);
  if (!index.empty() && !node.contains("Index Cond") && !partial_indexes.contains(index))
    bad.push_back(type + " of all of " + index);
  if (node.contains("Plans"))
    for (const auto &child : node["Plans"])
      pg_full_reads(child, partial_indexes, bad);
}

std::vector<std::string> pg_full_reads(PGconn *c, const test::Prepared &p,
                                       const std::set<std::string> &partial_indexes, std::string &plan) {
  // The driver's translation (pg_stmt.cpp): ?N is $N; the server infers each parameter's type.
  const std::string sql =
      "EXPLAIN (FORMAT JSON) " + std::regex_replace(p.sql, std::regex(R"(\?(\d+))"), "$$$1");
  int n = p.binds.empty() ? 0 : p.binds.rbegin()->first;
  std::vector<std::string> text(static_cast<size_t>(n));
  std::vector<const char *> values(static_cast<size_t>(n), nullptr);
  for (const auto &[i, v] : p.binds) {
    const auto at = static_cast<size_t>(i - 1);
    if (const auto *num = std::get_if<int64_t>(&v))
      text[at] = std::to_string(*num);
    else if (const auto *s = std::get_if<std::string>(&v))
      text[at] = *s;
    else
      continue; // NULL
    values[at] = text[at].c_str();
  }
  test::detail::PgResultPtr r(PQexecParams(c, sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0));
  REQUIRE_MESSAGE(PQresultStatus(r.get()) == PGRES_TUPLES_OK, std::string(PQerrorMessage(c)), " in ", sql);
  plan = PQgetvalue(r.get(), 0, 0);
  std::vector<std::string> bad;
  pg_full_reads(nlohmann::json::parse(plan).at(0).at("Plan"), partial_indexes, bad);
  return bad;
}

// A ledger of schema 11 with rows of every kind the hot queries look for, migrated to the
// current schema on open, and a SqlLedger on it over a recording connection.
struct Migrated {
  test::FreshLedger fresh;
  test::ManualClock clock;
  test::RecordingConn *rec = nullptr;
  std::unique_ptr<ledger::SqlLedger> l;

  Migrated() {
    {
      auto l0 = fresh.open(&clock, true);
      const int64_t now = clock.now_ms();
      auto add = [&](const std::string &seed, const std::string &prefix, const std::string &path,
                     ledger::DedupScope scope, bool confirm) {
        auto r = test::request("o", seed);
        r.run_prefix = prefix;
        r.relative_path = path;
        r.dedup = scope;
        r.stat = ledger::FileStat{1, std::stoll(seed, nullptr, 16), 3, 4};
        auto res = l0->reserve(r, now);
        REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
        if (confirm) REQUIRE(l0->confirm(res.record.id, "etag", "", now) == test::confirm_outcome::confirmed);
        return res.record.id;
      };
      (void)add("a1", "b/1", "x/a", ledger::DedupScope::prefix, true);
      (void)add("a2", "b/1", "x/b", ledger::DedupScope::owner, true);
      (void)add("a3", "b/2", "x/a", ledger::DedupScope::none, true);
      (void)add("a4", "b/2", "x/c", ledger::DedupScope::prefix, false); // UPLOADING
      const auto failed = add("a5", "b/2", "x/d", ledger::DedupScope::prefix, false);
      REQUIRE(l0->mark_failed(failed, "refused", true, now) == ledger::MarkFailedOutcome::failed); // due now
    }
    // Another owner's 5,000 settled files: enough rows that PostgreSQL's planner, which plans
    // by its statistics, prefers an index to a walk of a whole one for owner o's few.
    const bool lite = fresh.kind() == test::Backend::sqlite;
    const std::string rows =
        lite
            ? "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000) SELECT i FROM c"
            : "SELECT generate_series(1, 5000) AS i";
    const std::string digest = lite ? "printf('%064d', i)" : "lpad(i::text, 64, '0')";
    fresh.exec_raw(
        "INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
        " upload_status, created_at, updated_at, activated_at, upload_deadline_at, relative_path, run_prefix)"
        " SELECT 'z', 'f', 'z/' || i, 't', " +
        digest + ", 1, 'p', 'ACTIVE', 1, 1, 2, 10, 'f' || i, 'z' FROM (" + rows +
        ") AS c;"
        " INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,"
        " created_at, updated_at) SELECT id, 'DELETE_OBJECT', object_key, 'IGNORED', 11, 3, 1, 1"
        " FROM file_upload WHERE owner_id = 'z'");
    test::as_schema_v11(fresh);
    REQUIRE(fresh.open(&clock, false)->schema_version() == ledger::k_schema_version); // migrates
    if (fresh.kind() == test::Backend::postgres) fresh.exec_raw("ANALYZE");
    ledger::OpenOptions o;
    o.location = fresh.location();
    o.clock = &clock;
    auto conn = std::make_unique<test::RecordingConn>(
        fresh.kind() == test::Backend::sqlite ? ledger::open_sqlite(o) : ledger::open_postgres(o));
    rec = conn.get();
    l = std::make_unique<ledger::SqlLedger>(std::move(conn));
  }

  // The SELECT and UPDATE statements `run` prepared, each with what its plan reads whole
  // (nothing, when every read is through an index) and the plan.
  struct Checked {
    std::string sql, plan;
    std::vector<std::string> full_reads;
  };
  std::vector<Checked> check(const std::function<void()> &run) const {
    const size_t before = rec->prepared.size();
    run();
    const auto partial_indexes = partial(index_definitions(fresh));
    std::vector<Checked> out;
    sqlite3 *raw = nullptr;
    std::unique_ptr<sqlite3, int (*)(sqlite3 *)> lite(nullptr, sqlite3_close);
    test::detail::PgConnPtr pg;
    if (fresh.kind() == test::Backend::sqlite) {
      REQUIRE(sqlite3_open_v2(fresh.location().c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
      lite.reset(raw);
    } else {
      pg = test::detail::pg_connect(fresh.location());
      test::detail::PgResultPtr r(PQexec(pg.get(), "SET enable_seqscan = off"));
      REQUIRE(PQresultStatus(r.get()) == PGRES_COMMAND_OK);
    }
    for (size_t i = before; i < rec->prepared.size(); ++i) {
      const auto &p = *rec->prepared[i];
      if (p.sql.rfind("SELECT", 0) != 0 && p.sql.rfind("UPDATE", 0) != 0) continue;
      if (p.binds.empty() && p.sql.find('?') != std::string::npos) continue; // prepared, never run
      Checked c{p.sql, "", {}};
      c.full_reads = raw ? sqlite_full_reads(raw, p, partial_indexes, c.plan)
                         : pg_full_reads(pg.get(), p, partial_indexes, c.plan);
      out.push_back(std::move(c));
    }
    return out;
  }
};

void require_indexed(const std::vector<Migrated::Checked> &statements) {
  REQUIRE_FALSE(statements.empty());
  for (const auto &s : statements) {
    INFO(s.sql, "\n", s.plan);
    CHECK(s.full_reads.empty());
  }
}

// Whether some statement's plan reads `index`.
bool reads_index(const std::vector<Migrated::Checked> &statements, const std::string &index) {
  return std::any_of(statements.begin(), statements.end(),
                     [&](const Migrated::Checked &s) { return s.plan.find(index) != std::string::npos; });
}

// The duplicate lookup by digest reads both digest indexes (not, say, every row of the owner
// through the path index).
void require_digest_lookup(const std::vector<Migrated::Checked> &statements) {
  CHECK(reads_index(statements, "file_upload_alive_prefix_digest"));
  CHECK(reads_index(statements, "file_upload_alive_other_digest"));
}

} // namespace

TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("migration 11 -> 12: the indexes of a new ledger, the ended tasks out of the due index") {
  Migrated m;
  test::FreshLedger fresh;
  test::ManualClock clock;
  (void)fresh.open(&clock, true);
  auto want = index_definitions(fresh);
  auto got = index_definitions(m.fresh);
  // PostgreSQL names the database in no definition; each ledger's are its own otherwise.
  CHECK(got == want);
  CHECK(got.contains("file_upload_alive_other_digest"));
  CHECK_FALSE(got.contains("file_upload_alive_digest"));
  CHECK(partial(got).contains("cleanup_task_due"));
  // I4 still holds on the migrated ledger: a second alive 'prefix' row of a content in its
  // prefix is refused by the unique index itself, whatever reserve would have answered.
  CHECK_THROWS(m.fresh.exec_raw(
      "INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
      " upload_status, created_at, updated_at, upload_deadline_at, relative_path, run_prefix, dedup_scope)"
      " SELECT owner_id, 'y', 'other-key', media_type, sha256, size, policy, 'UPLOADING', 1, 1, 1, 'y',"
      " run_prefix, 'prefix' FROM file_upload WHERE relative_path = 'x/a' AND run_prefix = 'b/1'"));
}

TEST_CASE("on the migrated schema the hot queries read through indexes, never a whole table") {
  Migrated m;
  auto &l = *m.l;
  const int64_t now = m.clock.now_ms() + 60'000;

  SUBCASE("claim, the due tasks, the relay's due tasks") {
    require_indexed(m.check([&] {
      CHECK(l.due_tasks(now, 10).size() == 2); // the failed row's, the UPLOADING one's (past its deadline)
      CHECK(l.claim_due(now, 10, "w", 60'000).size() == 2);
      (void)l.claim_due_not_queued(now, 10, "w", 60'000);
      (void)l.unsent_due_tasks(now, 10);
    }));
  }
  SUBCASE("reserve: the path's current row, the duplicate lookups under each scope, the quota") {
    auto statements = m.check([&] {
      auto at = [](const char *seed, const char *prefix, const char *path, ledger::DedupScope scope) {
        auto r = test::request("o", seed);
        r.run_prefix = prefix;
        r.relative_path = path;
        r.dedup = scope;
        r.max_files = 100;
        return r;
      };
      using ledger::DedupScope;
      using ledger::ReserveOutcome;
      // a1 is stored at b/1 x/a by a 'prefix' row: found in its prefix, and from any under "owner".
      CHECK(l.reserve(at("a1", "b/1", "y/new", DedupScope::prefix), now).outcome ==
            ReserveOutcome::shareable);
      CHECK(l.reserve(at("a1", "b/9", "y/new", DedupScope::owner), now).outcome == ReserveOutcome::shareable);
      // a3 is stored at b/2 x/a by a 'none' row (in the other digest index): found under "owner";
      // under "prefix" it is not b/9's, and the file is reserved.
      CHECK(l.reserve(at("a3", "b/9", "y/other", DedupScope::owner), now).outcome ==
            ReserveOutcome::shareable);
      CHECK(l.reserve(at("a3", "b/9", "y/other", DedupScope::prefix), now).outcome ==
            ReserveOutcome::reserved);
    });
    require_indexed(statements);
    require_digest_lookup(statements);
  }
  SUBCASE("the stat cache") {
    require_indexed(m.check([&] {
      CHECK(l.find_unchanged("o", "b/1", "x/a", ledger::FileStat{1, 0xa1, 3, 4}, 1).has_value());
    }));
  }
  SUBCASE("the search: an owner's files, by digest, by prefix and path, by time") {
    const auto by_digest =
        m.check([&] { CHECK(l.list_files({.owner = "o", .sha256 = test::sha("a1")}).size() == 1); });
    require_indexed(by_digest);
    require_digest_lookup(by_digest);
    require_indexed(m.check([&] {
      CHECK(l.list_files({.owner = "o"}).size() == 4);
      CHECK(l.list_files({.owner = "o", .sha256 = test::sha("a2")}).size() == 1);
      CHECK(l.list_files({.owner = "o", .sha256 = test::sha("a3"), .sort = ledger::FileSort::path}).size() ==
            1);
      CHECK(l.list_files({.owner = "o", .run_prefix = "b/1", .sort = ledger::FileSort::path}).size() == 2);
      CHECK(l.list_files({.owner = "o", .run_prefix = "b/2", .path = "x/a"}).size() == 1);
      CHECK(l.list_files({.owner = "o", .since = 0, .until = now}).size() == 4);
      CHECK(l.list_files({.owner = "o", .since = 0, .sort = ledger::FileSort::time}).size() == 4);
    }));
  }
  SUBCASE("the outbox's switch, which counts the sent tasks not ended") {
    require_indexed(m.check([&] {
      ledger::OutboxSettings s;
      s.cleanup_via = ledger::CleanupVia::queue;
      CHECK(l.set_outbox_settings(s) == ledger::SetOutboxOutcome::set);
    }));
  }
  SUBCASE("repair's reads: the overdue and the held rows") {
    require_indexed(m.check([&] {
      (void)l.overdue_uploads(now + 3'600'000, 10);
      (void)l.held_uploads("host ", 10);
    }));
  }
}

TEST_SUITE_END(); // sqlonly
