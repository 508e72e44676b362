// How much work the ledger's key-ordered scan does per page (SQLite): reconcile reads the
// ledger in pages by key, so a page resumed after key N must not step over the N rows
// before it (that made reconcile quadratic in ledger rows).
//
// The ledger runs over a connection that records the SQL text and parameters of every
// statement it prepares (recording.hpp); the scan's statement is then run again, exactly so, on a raw
// sqlite3 connection to the same file, where sqlite3_stmt_status counts the virtual
// machine steps it takes to its first row.
#include "recording.hpp"
#include "support.hpp"

#include <ledger/drivers.hpp>
#include <ledger/sql_ledger.hpp>
#include <lodge/ledger/sql.hpp>
#include <map>
#include <sqlite3.h>
#include <string>
#include <vector>

using namespace lodge;
using test::prepare_bound;
using test::Prepared;
using test::RecordingConn;

namespace {

// `n` valid rows (ACTIVE, each with its IGNORED task) with keys root/o/<uuid>/f<i>, in
// key order of i; one transaction.
void fill(const test::FreshLedger &fresh, int n) {
  fresh.exec_raw(
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < " + std::to_string(n) +
      ")"
      " INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size,"
      " policy, upload_status, created_at, updated_at, activated_at, upload_deadline_at,"
      " relative_path)"
      " SELECT 'o', 'f', printf('root/o/%08x-0000-4000-8000-000000000000/f%d', i, i), 'text/plain',"
      " printf('%064d', i), 1, 'default', 'ACTIVE', 1, 1, 2, 10, printf('f%d', i) FROM c;"
      " INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at,"
      " max_retries, created_at, updated_at)"
      " SELECT id, 'DELETE_OBJECT', object_key, 'IGNORED', 11, 3, 1, 1 FROM file_upload;");
}

std::string key_of(int i) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "root/o/%08x-0000-4000-8000-000000000000/f%d", i, i);
  return buf;
}

// The VM steps the statement `p` takes, run on a raw connection to `path`: to its first row
// (which it must have), or to its end.
int vm_steps(const std::string &path, const Prepared &p, bool to_end) {
  sqlite3 *raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::unique_ptr<sqlite3, int (*)(sqlite3 *)> db(raw, sqlite3_close);
  auto st = prepare_bound(raw, p);
  int rc = sqlite3_step(st.get());
  while (to_end && rc == SQLITE_ROW)
    rc = sqlite3_step(st.get());
  REQUIRE(rc == (to_end ? SQLITE_DONE : SQLITE_ROW));
  return sqlite3_stmt_status(st.get(), SQLITE_STMTSTATUS_VM_STEP, 0);
}

// A fresh SQLite ledger of k_rows ACTIVE rows (fill), and a SqlLedger on it whose
// connection records every statement it prepares.
struct Filled {
  static constexpr int k_rows = 4000;
  test::FreshLedger fresh;
  test::ManualClock clock;
  RecordingConn *rec = nullptr;
  std::unique_ptr<ledger::SqlLedger> l;
  Filled() {
    REQUIRE(fresh.kind() == test::Backend::sqlite);
    (void)fresh.open(&clock, true); // creates the schema
    fill(fresh, k_rows);
    ledger::OpenOptions o;
    o.location = fresh.location();
    o.clock = &clock;
    auto conn = std::make_unique<RecordingConn>(ledger::open_sqlite(o));
    rec = conn.get();
    l = std::make_unique<ledger::SqlLedger>(std::move(conn));
  }
};
} // namespace

TEST_SUITE_BEGIN("sqliteonly");

TEST_CASE("reserve: its reads cost the same whatever the number of the owner's rows") {
  Filled f; // owner o, digests printf('%064d', i)
  auto &l = *f.l;
  auto &clock = f.clock;
  const int n = Filled::k_rows;

  // Every SELECT one reserve prepared, with the VM steps each takes to its end.
  auto reserve_reads = [&](ledger::ReserveRequest r, ledger::ReserveOutcome want) {
    size_t before = f.rec->prepared.size();
    CHECK(l.reserve(r, clock.now_ms()).outcome == want);
    std::vector<std::pair<std::string, int>> out;
    for (size_t i = before; i < f.rec->prepared.size(); ++i)
      if (f.rec->prepared[i]->sql.rfind("SELECT", 0) == 0)
        out.emplace_back(f.rec->prepared[i]->sql, vm_steps(f.fresh.location(), *f.rec->prepared[i], true));
    return out;
  };
  auto req = test::request("o", "abc1");
  req.max_files = n + 10; // the quota is read
  for (auto dedup : {ledger::DedupScope::prefix, ledger::DedupScope::owner}) {
    req.dedup = dedup;
    auto reads = reserve_reads(req, ledger::ReserveOutcome::reserved);
    CHECK(reads.size() >= 2); // the duplicate lookup and the quota
    // A duplicate of a row in the middle of the owner's rows.
    auto dup = req;
    dup.sha256 = std::string(60, '0') + "2000";
    auto dup_reads = reserve_reads(dup, ledger::ReserveOutcome::shareable);
    CHECK(dup_reads.size() == 2); // the path's current row, then the copy that holds the content
    reads.insert(reads.end(), dup_reads.begin(), dup_reads.end());
    for (const auto &read : reads) {
      INFO(read.first);
      // Reading the owner's 4,000 rows takes more than 4 VM steps each.
      CHECK(read.second < 200);
    }
    req.sha256 = test::sha("abc2");
  }
}

TEST_CASE("rows_by_key: a page resumed after key N does not step over the N rows before it") {
  Filled f;
  auto &l = *f.l;
  auto *rec = f.rec;
  const int n = Filled::k_rows;

  // Reads one row of a page from `after` on and returns the VM steps its statement took.
  auto page_cost = [&](const std::string &prefix, const std::string &after, const std::string &expect_first) {
    size_t before = rec->prepared.size();
    std::string first;
    l.rows_by_key(prefix, after, [&](const ledger::FileRecord &r) {
      first = r.object_key;
      return false;
    });
    CHECK(first == expect_first);
    REQUIRE(rec->prepared.size() == before + 1);
    return vm_steps(f.fresh.location(), *rec->prepared.back(), false);
  };
  const int at_start = page_cost("root/", "", key_of(1));
  const int near_start = page_cost("root/", key_of(10), key_of(11));
  const int near_end = page_cost("root/", key_of(n - 10), key_of(n - 9));
  MESSAGE("VM steps to the first row: from the start ", at_start, ", after key 10 ", near_start,
          ", after key ", n - 10, " ", near_end);
  // The same work wherever the page starts (a scan bound by both the prefix and the key it
  // resumes after stepped over each row before it: 4 VM steps a row, ~16,000 here).
  CHECK(near_end < 200);
  CHECK(near_end <= near_start + 10);
  // The scan stops at the first key without the prefix: a prefix that sorts before every
  // row finds nothing at once.
  std::string none;
  l.rows_by_key("root/a", "", [&](const ledger::FileRecord &r) {
    none = r.object_key;
    return true;
  });
  CHECK(none.empty());
}

TEST_CASE("held_uploads: reads the few UPLOADING rows, not every row (every upload starts with it)") {
  Filled f;
  for (const char *name : {"held1", "held2"}) {
    auto req = test::request("o", name);
    req.holder = "host 1 100";
    REQUIRE(f.l->reserve(req, f.clock.now_ms()).outcome == ledger::ReserveOutcome::reserved);
  }
  size_t before = f.rec->prepared.size();
  auto held = f.l->held_uploads("host 1 ", 10);
  CHECK(held.size() == 2);
  REQUIRE(f.rec->prepared.size() == before + 1);
  const int steps = vm_steps(f.fresh.location(), *f.rec->prepared.back(), true);
  MESSAGE("VM steps of held_uploads over ", Filled::k_rows, " ACTIVE rows: ", steps);
  // Ordered by plain id, SQLite walked the whole table (4 VM steps a row, ~16,000 here).
  CHECK(steps < 200);
}

TEST_SUITE_END(); // sqliteonly
