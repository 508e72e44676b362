// The ledger contract under concurrency and across schema versions: several threads, each
// with its own Ledger (its own connection) on one ledger, as several hosts would be.
#include "support.hpp"

#include <algorithm>
#include <fstream>
#include <latch>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

using namespace lodge;
using ledger::ReserveOutcome;
using test::LedgerFixture;
using test::request;

namespace {
// What worker threads saw go wrong (an exception), for the main thread to assert on.
class ThreadErrors {
public:
  template <class F> void run(F &&fn) {
    try {
      fn();
    } catch (const std::exception &e) {
      std::lock_guard<std::mutex> g(m_mu);
      m_errors.emplace_back(e.what());
    }
  }
  [[nodiscard]] std::string all() {
    std::lock_guard<std::mutex> g(m_mu);
    std::string out;
    for (const auto &e : m_errors)
      out += e + "\n";
    return out;
  }

private:
  std::mutex m_mu;
  std::vector<std::string> m_errors;
};

constexpr int k_threads = 8;

// Runs fn(i) on n threads at once (each starts when all are ready); waits for all.
template <class F> void on_threads(int n, ThreadErrors &errors, F fn) {
  std::latch ready(n);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      errors.run([&] {
        ready.arrive_and_wait();
        fn(i);
      });
    });
  for (auto &t : threads)
    t.join();
}
} // namespace

TEST_SUITE_BEGIN("contract");

// Each case runs twice: threads on their own connections (as several processes would be),
// and threads whose reserves a pool group-commits in shared transactions (as the workers
// of one `lodge upload --jobs N` are).
namespace {
std::vector<std::unique_ptr<ledger::Ledger>> connections(const LedgerFixture &e, bool pooled) {
  std::vector<std::unique_ptr<ledger::Ledger>> conns;
  auto pool = pooled ? e.pool() : nullptr;
  for (int i = 0; i < k_threads; ++i)
    conns.push_back(pooled ? pool->worker() : e.connect());
  return conns;
}
} // namespace

TEST_CASE("I3: N concurrent reservers on their own connections never pass the quota") {
  LedgerFixture e;
  for (int round = 0; round < 6; ++round) {
    const bool pooled = round % 2 == 1;
    CAPTURE(round);
    CAPTURE(pooled);
    const std::string owner = "owner-" + std::to_string(round);
    auto conns = connections(e, pooled);
    std::vector<ReserveOutcome> got(k_threads);
    ThreadErrors errors;
    on_threads(k_threads, errors, [&](int i) {
      auto r = request(owner, "c" + std::to_string(round) + std::to_string(i));
      r.max_files = 3;
      got[static_cast<size_t>(i)] = conns[static_cast<size_t>(i)]->reserve(r, e.now()).outcome;
    });
    REQUIRE_MESSAGE(errors.all().empty(), errors.all());
    CHECK(std::count(got.begin(), got.end(), ReserveOutcome::reserved) == 3);
    CHECK(std::count(got.begin(), got.end(), ReserveOutcome::quota_exceeded) == k_threads - 3);
    CHECK(e.l->list_files({.owner = owner, .include_dead = true}).size() == 3);
  }
}

TEST_CASE("I4: N concurrent reservers of the same content: one row, the others find it") {
  LedgerFixture e;
  for (int run = 0; run < 4; ++run) {
    const auto scope = run % 2 == 0 ? ledger::DedupScope::owner : ledger::DedupScope::prefix;
    const bool pooled = run >= 2;
    CAPTURE(ledger::to_string(scope));
    CAPTURE(pooled);
    const std::string owner = std::string("owner-") + ledger::to_string(scope) + (pooled ? "-pooled" : "");
    auto conns = connections(e, pooled);
    std::vector<ledger::ReserveResult> got(k_threads);
    ThreadErrors errors;
    on_threads(k_threads, errors, [&](int i) {
      auto r = request(owner, "5a3e");
      r.dedup = scope;
      r.max_files = 100;
      got[static_cast<size_t>(i)] = conns[static_cast<size_t>(i)]->reserve(r, e.now());
    });
    REQUIRE_MESSAGE(errors.all().empty(), errors.all());
    std::set<int64_t> ids;
    int reserved = 0, found = 0;
    for (const auto &g : got) {
      ids.insert(g.record.id);
      if (g.outcome == ReserveOutcome::reserved) ++reserved;
      if (g.outcome == ReserveOutcome::in_progress || g.outcome == ReserveOutcome::duplicate) ++found;
    }
    CHECK(reserved == 1);
    CHECK(found == k_threads - 1);
    CHECK(ids.size() == 1); // every one names the same row
    CHECK(e.l->list_files({.owner = owner, .include_dead = true}).size() == 1);
  }
}

TEST_CASE("claims never hand one task to two workers whose leases overlap") {
  LedgerFixture e;
  constexpr int k_tasks = 40, k_workers = 4;
  std::vector<int64_t> task_ids;
  for (int i = 0; i < k_tasks; ++i) {
    auto r = e.reserve("7" + std::to_string(i));
    REQUIRE(e.l->mark_failed(r.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
    task_ids.push_back(e.task_of(r.id).id);
  }
  std::vector<std::unique_ptr<ledger::Ledger>> conns;
  for (int i = 0; i < k_workers; ++i)
    conns.push_back(e.connect());
  constexpr int64_t k_lease = 60'000;
  // Each round every lease of the round before has expired; within a round every lease is
  // live, so each task must be claimed exactly once, under the next lease_version.
  for (int round = 1; round <= 3; ++round) {
    CAPTURE(round);
    const int64_t now = e.now() + (round - 1) * (k_lease + 1);
    std::mutex mu;
    std::vector<std::tuple<int64_t, int64_t, std::string>> claims; // task, lease_version, worker
    ThreadErrors errors;
    on_threads(k_workers, errors, [&](int w) {
      auto &l = *conns[static_cast<size_t>(w)];
      const std::string me = "worker-" + std::to_string(w);
      auto record = [&](const ledger::TaskRecord &t) {
        std::lock_guard<std::mutex> g(mu);
        claims.emplace_back(t.id, t.lease_version, me);
      };
      if (w % 2 == 0) { // a sweep: batches of due tasks
        for (;;) {
          auto got = l.claim_due(now, 3, me, k_lease);
          if (got.empty()) break;
          for (const auto &t : got) {
            if (t.lease_owner != me) throw std::runtime_error("a claim returned another worker's lease");
            record(t);
          }
        }
      } else { // a worker claiming by id (as upload does), in its own order
        for (size_t k = 0; k < task_ids.size(); ++k) {
          size_t j = (w / 2) % 2 == 1 ? task_ids.size() - 1 - k : k;
          if (auto t = l.claim_task(task_ids[j], now, me, k_lease)) record(*t);
        }
      }
    });
    REQUIRE_MESSAGE(errors.all().empty(), errors.all());
    std::map<int64_t, int> per_task;
    for (const auto &c : claims) {
      ++per_task[std::get<0>(c)];
      CHECK(std::get<1>(c) == round);
    }
    CHECK(claims.size() == static_cast<size_t>(k_tasks));
    CHECK(per_task.size() == static_cast<size_t>(k_tasks));
    for (const auto &pt : per_task) {
      CAPTURE(pt.first);
      CHECK(pt.second == 1);
    }
    for (auto id : task_ids) {
      auto t =
          std::find_if(claims.begin(), claims.end(), [id](const auto &c) { return std::get<0>(c) == id; });
      REQUIRE(t != claims.end());
    }
  }
}

TEST_SUITE_END(); // contract

// Opening a database: its schema version, none there yet, a migration under way (on both
// databases; the fake has no database to open).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("a ledger whose schema is newer than this lodge is refused with LEDGER_TOO_NEW") {
  test::FreshLedger fresh;
  test::ManualClock clock;
  int version = 0;
  {
    auto l = fresh.open(&clock, true);
    version = l->schema_version();
    CHECK(version >= 1);
  }
  fresh.set_schema_version(version + 1);
  for (bool create : {false, true}) {
    CAPTURE(create);
    try {
      (void)fresh.open(&clock, create);
      FAIL("a ledger of a newer schema opened");
    } catch (const LodgeError &err) {
      CHECK(err.error().code == Errc::ledger_too_new);
      CHECK(err.error().message.find(std::to_string(version + 1)) != std::string::npos);
    }
  }
  // Nothing was changed by the refusals.
  fresh.set_schema_version(version);
  CHECK(fresh.open(&clock, false)->schema_version() == version);
}

TEST_CASE("opening a ledger that does not exist, without create, is LEDGER_NOT_FOUND") {
  test::FreshLedger fresh;
  test::ManualClock clock;
  // No file (SQLite) or an empty database (PostgreSQL): no ledger yet, and none made.
  try {
    (void)fresh.open(&clock, false);
    FAIL("a missing ledger opened");
  } catch (const LodgeError &err) {
    CHECK(err.error().code == Errc::ledger_not_found);
  }
  CHECK(fresh.open(&clock, true)->schema_version() >= 1);
}

// Creating and migrating one ledger from several processes at once: on PostgreSQL the
// migration holds an advisory lock; on SQLite the switch to WAL on a new file meets
// SQLITE_BUSY without the busy handler waiting, so the driver waits there itself.

TEST_CASE("migration: several processes creating one ledger at once all succeed with one schema") {
  test::ManualClock clock;
  for (int attempt = 0; attempt < 3; ++attempt) {
    CAPTURE(attempt);
    test::FreshLedger location;
    constexpr int n = 4;
    std::vector<std::string> uuids(n);
    std::vector<int> versions(n);
    ThreadErrors errors;
    on_threads(n, errors, [&](int i) {
      auto l = location.open(&clock, true);
      uuids[static_cast<size_t>(i)] = l->uuid();
      versions[static_cast<size_t>(i)] = l->schema_version();
      // Each can write and read through its own connection at once.
      auto res = l->reserve(request("o", "b" + std::to_string(i)), clock.t);
      if (res.outcome != ReserveOutcome::reserved) throw std::runtime_error("not reserved");
    });
    REQUIRE_MESSAGE(errors.all().empty(), errors.all());
    auto l = location.open(&clock, false);
    for (int i = 0; i < n; ++i) {
      CHECK(uuids[static_cast<size_t>(i)] == l->uuid());
      CHECK(versions[static_cast<size_t>(i)] == l->schema_version());
    }
    CHECK(l->list_files({.owner = "o", .include_dead = true}).size() == static_cast<size_t>(n));
  }
}

TEST_SUITE_END(); // sqlonly

// The SQLite ledger's own history: ledgers made by older lodges, from the frozen schemas
// in tests/data/ledger. (PostgreSQL ledgers start at today's schema.)
TEST_SUITE_BEGIN("sqliteonly");

TEST_CASE("migration: a version-3 ledger is migrated on open and its rows go on through the transitions") {
  test::FreshLedger fresh;
  REQUIRE(fresh.kind() == test::Backend::sqlite);
  test::ManualClock clock;
  std::ifstream in(std::string(LODGE_TEST_DATA) + "/ledger/schema_v3.sql");
  std::stringstream v3;
  v3 << in.rdbuf();
  REQUIRE(!v3.str().empty());
  { std::ofstream touch(fresh.location()); } // an empty file is an empty database
  fresh.exec_raw(v3.str());
  fresh.exec_raw(R"sql(
    INSERT INTO ledger_meta (key, value) VALUES ('uuid', '00000000-0000-4000-8000-000000000003'),
      ('created_at', '1');
    INSERT INTO file_upload (id, owner_id, original_name, object_key, media_type, sha256, size, policy,
      upload_status, is_deleted, created_at, updated_at, activated_at, upload_deadline_at) VALUES
      (1, 'o', 'a.txt', 'o/u1/a.txt', 't', printf('%064d', 1), 1, 'default', 'ACTIVE', 0, 1, 1, 2, 10),
      (2, 'o', 'b.txt', 'o/u2/b.txt', 't', printf('%064d', 2), 1, 'default', 'UPLOADING', 0, 1, 1, NULL,
       2000000);
    INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,
      created_at, updated_at) VALUES
      (1, 'DELETE_OBJECT', 'o/u1/a.txt', 'IGNORED', 11, 3, 1, 1),
      (2, 'DELETE_OBJECT', 'o/u2/b.txt', 'PENDING', 2001000, 3, 1, 1);
    PRAGMA user_version = 3;
  )sql");
  auto l = fresh.open(&clock, true);
  CHECK(l->uuid() == "00000000-0000-4000-8000-000000000003");
  CHECK(l->schema_version() > 3);
  auto a = l->find_file(1);
  REQUIRE(a);
  CHECK(a->relative_path == "a.txt");
  CHECK(a->run_prefix.empty());
  CHECK(a->dedup_scope == ledger::DedupScope::owner);
  // The migrated rows go on: the upload confirms, a duplicate finds the old row, a new
  // row gets the next id, the old ACTIVE row deletes.
  REQUIRE(l->confirm(2, "etag", "", clock.t) == test::confirm_outcome::confirmed);
  CHECK(l->find_task_for(2)->status == ledger::TaskStatus::ignored);
  auto dup = request("o", "1");
  auto d = l->reserve(dup, clock.t);
  CHECK(d.outcome == ReserveOutcome::shareable);
  CHECK(d.record.id == 1);
  auto fresh_row = l->reserve(request("o", "3"), clock.t);
  REQUIRE(fresh_row.outcome == ReserveOutcome::reserved);
  CHECK(fresh_row.record.id == 3);
  REQUIRE(l->soft_delete(1, "o", clock.t, 0, 3) == ledger::DeleteOutcome::deleted);
  auto claimed = l->claim_due(clock.t, 10, "w", 1'000);
  REQUIRE(claimed.size() == 1);
  CHECK(claimed[0].record_id == 1);
  CHECK(claimed[0].lease_version == 1);
}

TEST_CASE("rows_by_key: a prefix ending in 0xFF bytes is bounded by the next prefix that is not") {
  // SQLite keeps any bytes as text (PostgreSQL only UTF-8, where no 0xFF byte occurs).
  LedgerFixture e;
  std::map<std::string, std::string> key_of_root;
  int n = 0;
  for (const char *root : {"p/", "p\xFF/", "p\xFF\xFF/", "p\xFE/", "q/"}) {
    auto r = request("o", "f" + std::to_string(n++));
    r.key_prefix = root;
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    key_of_root[root] = res.record.object_key;
  }
  auto keys = [&](const std::string &prefix) {
    std::vector<std::string> out;
    e.l->rows_by_key(prefix, "", [&](const ledger::FileRecord &r) {
      out.push_back(r.object_key);
      return true;
    });
    return out;
  };
  CHECK(keys("p\xFF") == std::vector<std::string>{key_of_root["p\xFF/"], key_of_root["p\xFF\xFF/"]});
  CHECK(keys("p\xFF\xFF") == std::vector<std::string>{key_of_root["p\xFF\xFF/"]});
  CHECK(keys("p") == std::vector<std::string>{key_of_root["p/"], key_of_root["p\xFE/"], key_of_root["p\xFF/"],
                                              key_of_root["p\xFF\xFF/"]});
  CHECK(keys("\xFF").empty());
}

TEST_SUITE_END(); // sqliteonly
