// Writes inside writes (savepoints) and the group commit of a pool's workers: one request's
// rollback or failure never touches another's, and what a caller is told committed is
// exactly what the ledger holds.
#include "support.hpp"

#include <atomic>
#include <ledger/drivers.hpp>
#include <ledger/sql_ledger.hpp>
#include <lodge/error.hpp>
#include <lodge/ledger/sql.hpp>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace lodge;
using ledger::ReserveOutcome;
using test::LedgerFixture;
using test::request;

namespace {
std::unique_ptr<ledger::sql::Conn> raw_conn(const test::FreshLedger &fresh, const util::Clock *clock) {
  ledger::OpenOptions o;
  o.location = fresh.location();
  o.clock = clock;
  return fresh.kind() == test::Backend::sqlite ? ledger::open_sqlite(o) : ledger::open_postgres(o);
}

void put_meta(ledger::sql::Conn &c, const std::string &key) {
  ledger::sql::Stmt st(c.prepare("INSERT INTO ledger_meta (key, value) VALUES (?1, 'x')"));
  st.bind(1, key).exec();
}

// owner_usage (the quota's counter, kept by triggers) against a count of the alive rows.
void check_usage_counts(ledger::sql::Conn &c) {
  ledger::sql::Stmt counted(c.prepare("SELECT owner_id, count(*) FROM file_upload WHERE is_deleted = 0"
                                      " GROUP BY owner_id ORDER BY owner_id"));
  std::vector<std::pair<std::string, int64_t>> want, got;
  while (counted.step())
    want.emplace_back(counted.col_text(0), counted.col_int(1));
  ledger::sql::Stmt kept(
      c.prepare("SELECT owner_id, alive_files FROM owner_usage WHERE alive_files > 0 ORDER BY owner_id"));
  while (kept.step())
    got.emplace_back(kept.col_text(0), kept.col_int(1));
  CHECK(got == want);
}

std::set<std::string> test_keys(ledger::sql::Conn &c) {
  ledger::sql::Stmt st(c.prepare("SELECT key FROM ledger_meta WHERE key LIKE 't\\_%' ESCAPE '\\'"));
  std::set<std::string> out;
  while (st.step())
    out.insert(st.col_text(0));
  return out;
}

// A name long enough that the key for it is refused (BAD_NAME, thrown inside reserve).
std::string too_long_name() {
  return std::string(ledger::k_max_key_bytes, 'n') + ".txt";
}
} // namespace

// SQL itself, on both databases: savepoints and the quota's counter read on a raw connection.
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE(
    "a write inside a write is a savepoint: a body that rolls back or throws undoes only its own work") {
  LedgerFixture e;
  auto c = raw_conn(e.fresh, &e.clock);
  using ledger::sql::Tx;
  c->write([&](Tx &tx) {
    c->write([&](Tx &t) {
      put_meta(*c, "t_committed");
      t.commit();
    });
    CHECK_THROWS_AS(c->write([&](Tx &t) {
      put_meta(*c, "t_threw");
      t.commit(); // asked, but the body threw: undone
      throw LodgeError(Errc::internal, "injected");
    }),
                    LodgeError);
    c->write([&](Tx &) { put_meta(*c, "t_no_commit"); });
    c->write([&](Tx &t) {
      put_meta(*c, "t_outer_nested");
      c->write([&](Tx &) { put_meta(*c, "t_inner_rolled_back"); });
      c->write([&](Tx &t2) {
        put_meta(*c, "t_inner_kept");
        t2.commit();
      });
      t.commit();
    });
    CHECK(c->in_transaction());
    tx.commit();
  });
  CHECK_FALSE(c->in_transaction());
  CHECK(test_keys(*c) == std::set<std::string>{"t_committed", "t_outer_nested", "t_inner_kept"});

  // The outer transaction rolling back takes every savepoint released into it along.
  c->write([&](Tx &) {
    c->write([&](Tx &t) {
      put_meta(*c, "t_gone");
      t.commit();
    });
  });
  CHECK(test_keys(*c).count("t_gone") == 0);
}

TEST_CASE("pooled workers: each reserve's answer is what committed, whatever the others in its batch did") {
  LedgerFixture e;
  auto pool = e.pool();
  constexpr int k_workers = 8, k_each = 40;
  std::vector<std::unique_ptr<ledger::Ledger>> workers;
  for (int i = 0; i < k_workers; ++i)
    workers.push_back(pool->worker());
  std::mutex mu;
  std::vector<ledger::FileRecord> reserved;
  int quota = 0, duplicates = 0, refused = 0, other = 0;
  std::vector<std::thread> threads;
  for (int w = 0; w < k_workers; ++w)
    threads.emplace_back([&, w] {
      auto &l = *workers[static_cast<size_t>(w)];
      for (int i = 0; i < k_each; ++i) {
        auto r = request("o" + std::to_string(i % 3), std::to_string(w) + "a" + std::to_string(i));
        if (i % 3 == 1) r.max_files = 5; // owner o1: most of its requests meet the quota
        if (i % 5 == 0)
          r.sha256 = test::sha("d0" + std::to_string(i % 3)); // the same content again and again
        if (i % 7 == 3) r.original_name = too_long_name();    // throws BAD_NAME
        try {
          auto res = l.reserve(r, e.now());
          std::lock_guard g(mu);
          if (res.outcome == ReserveOutcome::reserved)
            reserved.push_back(res.record);
          else if (res.outcome == ReserveOutcome::quota_exceeded)
            ++quota;
          else if (res.outcome == ReserveOutcome::in_progress || res.outcome == ReserveOutcome::duplicate)
            ++duplicates;
          else
            ++other;
        } catch (const LodgeError &err) {
          std::lock_guard g(mu);
          if (err.error().code == Errc::bad_name)
            ++refused;
          else
            ++other;
        }
      }
    });
  for (auto &t : threads)
    t.join();
  CHECK(other == 0);
  CHECK(refused > 0);
  CHECK(quota > 0);
  CHECK(duplicates > 0);
  // I3 under batching: owner o1 never passes its quota of 5.
  CHECK(e.l->list_files({.owner = "o1", .include_dead = true}).size() == 5);
  // Exactly the rows reported reserved exist, each with its task; none for a refused name.
  auto rows = e.l->list_files({.owner = "*", .include_dead = true});
  CHECK(rows.size() == reserved.size());
  std::set<std::string> digests;
  for (const auto &r : rows) {
    CHECK(r.original_name != too_long_name());
    CHECK(e.l->find_task_for(r.id).has_value());
    digests.insert(r.owner_id + ":" + r.sha256);
  }
  CHECK(digests.size() == rows.size()); // I4 under batching: one alive row per owner and content
  // Confirms through the pool: every one committed, its task ignored.
  for (size_t i = 0; i < reserved.size(); ++i) {
    auto &l = *workers[i % workers.size()];
    CHECK(l.confirm(reserved[i].id, "etag", "", e.now()) == ledger::ConfirmOutcome::confirmed);
  }
  for (const auto &r : reserved) {
    CHECK(e.row(r.id).upload_status == ledger::FileStatus::active);
    CHECK(e.task_of(r.id).status == ledger::TaskStatus::ignored);
  }
  // The quota's counter followed every reserve that committed and none that rolled back;
  // and every row that dies.
  auto c = raw_conn(e.fresh, &e.clock);
  check_usage_counts(*c);
  for (size_t i = 0; i < reserved.size(); i += 2)
    CHECK(e.l->soft_delete(reserved[i].id, reserved[i].owner_id, e.now(), 1'000, 3) ==
          ledger::DeleteOutcome::deleted);
  check_usage_counts(*c);
}

TEST_SUITE_END(); // sqlonly

TEST_SUITE_BEGIN("sqliteonly");

TEST_CASE("a batch on a ledger that fills up: no request is told it committed unless it did") {
  LedgerFixture e;
  auto writer = raw_conn(e.fresh, &e.clock);
  int64_t pages = 0;
  {
    ledger::sql::Stmt st(writer->prepare("PRAGMA page_count"));
    REQUIRE(st.step());
    pages = st.col_int(0);
  }
  // SQLITE_FULL once the file would grow by a few pages: some batches fail part-way.
  writer->exec_plain("PRAGMA max_page_count = " + std::to_string(pages + 12));
  auto group = std::make_shared<ledger::GroupCommit>(std::move(writer), 64);
  constexpr int k_workers = 8, k_each = 30;
  std::vector<std::unique_ptr<ledger::Ledger>> workers;
  for (int i = 0; i < k_workers; ++i) {
    ledger::OpenOptions o;
    o.location = e.fresh.location();
    o.clock = &e.clock;
    workers.push_back(std::make_unique<ledger::SqlLedger>(ledger::open_sqlite(o), group));
  }
  std::mutex mu;
  std::set<int64_t> told_reserved;
  int full = 0, other = 0;
  std::vector<std::thread> threads;
  for (int w = 0; w < k_workers; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < k_each; ++i) {
        auto r = request("o", std::to_string(w) + "b" + std::to_string(i));
        r.original_name = std::string(900, static_cast<char>('a' + w)) + std::to_string(i) + ".txt";
        try {
          auto res = workers[static_cast<size_t>(w)]->reserve(r, e.now());
          std::lock_guard g(mu);
          if (res.outcome == ReserveOutcome::reserved)
            told_reserved.insert(res.record.id);
          else
            ++other;
        } catch (const LodgeError &err) {
          std::lock_guard g(mu);
          if (err.error().code == Errc::ledger_unusable)
            ++full;
          else
            ++other;
        }
      }
    });
  for (auto &t : threads)
    t.join();
  CHECK(other == 0);
  CHECK(full > 0);               // the ledger did fill up
  CHECK(!told_reserved.empty()); // and some made it before
  std::set<int64_t> held;
  for (const auto &r : e.l->list_files({.owner = "*", .include_dead = true})) {
    held.insert(r.id);
    CHECK(e.l->find_task_for(r.id).has_value());
  }
  CHECK(held == told_reserved);
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("sqliteonly");

TEST_CASE("a batch whose transaction SQLite rolls back under one request: the ones that ran fail, the rest "
          "run again") {
  LedgerFixture e;
  ledger::OpenOptions o;
  o.location = e.fresh.location();
  o.clock = &e.clock;
  auto group = std::make_shared<ledger::GroupCommit>(ledger::open_sqlite(o), 64);
  constexpr int k_workers = 6, k_each = 60;
  std::vector<std::unique_ptr<ledger::Ledger>> workers;
  for (int i = 0; i < k_workers; ++i)
    workers.push_back(std::make_unique<ledger::SqlLedger>(ledger::open_sqlite(o), group));
  std::mutex mu;
  std::set<int64_t> told_reserved;
  int failed = 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  // What SQLite does on its own after SQLITE_FULL, IOERR or NOMEM mid-transaction.
  threads.emplace_back([&] {
    while (!stop.load()) {
      try {
        (void)group->run([](ledger::SqlLedger &w) {
          w.connection().rollback();
          return 0;
        });
      } catch (const LodgeError &) { // told its batch was lost: right
      }
    }
  });
  std::vector<std::thread> reservers;
  for (int w = 0; w < k_workers; ++w)
    reservers.emplace_back([&, w] {
      for (int i = 0; i < k_each; ++i) {
        auto r = request("o", std::to_string(w) + "c" + std::to_string(i));
        try {
          auto res = workers[static_cast<size_t>(w)]->reserve(r, e.now());
          std::lock_guard g(mu);
          if (res.outcome == ReserveOutcome::reserved) told_reserved.insert(res.record.id);
        } catch (const LodgeError &) {
          std::lock_guard g(mu);
          ++failed;
        }
      }
    });
  for (auto &t : reservers)
    t.join();
  stop = true;
  for (auto &t : threads)
    t.join();
  std::set<int64_t> held;
  for (const auto &r : e.l->list_files({.owner = "*", .include_dead = true}))
    held.insert(r.id);
  CHECK(held == told_reserved);
  CHECK(static_cast<int>(told_reserved.size()) + failed == k_workers * k_each);
}

TEST_SUITE_END();
