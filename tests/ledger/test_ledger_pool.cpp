// The workers' ledger pool (open_ledger_pool): one set of connections per run, each call of a
// worker's ledger on one borrowed for it. Many workers open no more than the pool's maximum,
// every answer is what the ledger holds, and a worker's ledger is SqlLedger's in every method.
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ledger/ledger_pool.hpp>
#include <lodge/util/log.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace lodge;
using test::LedgerFixture;
using test::request;

namespace {
std::shared_ptr<ledger::ConnectionPool> pool_of(const LedgerFixture &e, size_t max_connections = 0) {
  ledger::OpenOptions o;
  o.location = e.fresh.location();
  o.clock = &e.clock;
  ledger::PoolOptions p;
  p.max_connections = max_connections;
  auto pool = std::dynamic_pointer_cast<ledger::ConnectionPool>(ledger::open_ledger_pool(o, p));
  REQUIRE(pool != nullptr);
  return pool;
}

// The debug lines logged while it lives.
class DebugLines {
public:
  DebugLines() {
    util::log::set_level(util::log::Level::debug);
    util::log::set_sink([this](util::log::Level lvl, std::string_view line) {
      std::lock_guard lock(m_mu);
      if (lvl == util::log::Level::debug) m_lines.emplace_back(line);
    });
  }
  DebugLines(const DebugLines &) = delete;
  DebugLines &operator=(const DebugLines &) = delete;
  ~DebugLines() {
    util::log::set_sink(nullptr);
    util::log::set_level(util::log::Level::warn);
  }
  [[nodiscard]] std::vector<std::string> starting(const std::string &start) {
    std::lock_guard lock(m_mu);
    std::vector<std::string> out;
    for (const auto &l : m_lines)
      if (l.rfind(start, 0) == 0) out.push_back(l);
    return out;
  }

private:
  std::mutex m_mu;
  std::vector<std::string> m_lines;
};

constexpr int k_threads = 64, k_files = 4;

// k_threads threads, each with a worker ledger of its own: k_files distinct files each
// reserved, read back, confirmed and read back again. Returns how many answers were wrong.
int reserve_and_confirm(ledger::LedgerPool &pool, const LedgerFixture &e) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&, t] {
      auto w = pool.worker();
      for (int i = 0; i < k_files; ++i) {
        auto r = request("o" + std::to_string(t % 4), std::to_string(t) + "c" + std::to_string(i));
        r.original_name = "f" + std::to_string(t) + "_" + std::to_string(i) + ".txt";
        auto res = w->reserve(r, e.now());
        if (res.outcome != ledger::ReserveOutcome::reserved) {
          ++wrong;
          continue;
        }
        auto row = w->find_file(res.record.id);
        if (!row || row->upload_status != ledger::FileStatus::uploading || row->sha256 != r.sha256 ||
            row->original_name != r.original_name)
          ++wrong;
        if (w->confirm(res.record.id, "etag" + std::to_string(i), "", e.now()) !=
            ledger::ConfirmOutcome::confirmed)
          ++wrong;
        row = w->find_file(res.record.id);
        if (!row || row->upload_status != ledger::FileStatus::active ||
            row->etag != "etag" + std::to_string(i))
          ++wrong;
        auto task = w->find_task_for(res.record.id);
        if (!task || task->status != ledger::TaskStatus::ignored) ++wrong;
      }
    });
  for (auto &t : threads)
    t.join();
  return wrong.load();
}

// Every row the threads made is there, ACTIVE.
void check_rows(const LedgerFixture &e) {
  auto rows = e.l->list_files({.owner = "*", .include_dead = true});
  CHECK(rows.size() == static_cast<size_t>(k_threads * k_files));
  CHECK(std::all_of(rows.begin(), rows.end(), [](const ledger::FileRecord &r) {
    return r.upload_status == ledger::FileStatus::active;
  }));
}
} // namespace

// Both databases' pools (the fake has none of its own).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("pooled workers: 64 threads share the pool's connections, never more than its maximum") {
  LedgerFixture e;
  auto pool = pool_of(e);
  // SQLite: the group's writer and WAL readers; PostgreSQL: 32 at most, fewer when the
  // server allows fewer.
  const size_t most =
      e.fresh.kind() == test::Backend::sqlite
          ? std::max<size_t>(4, 2 * static_cast<size_t>(std::thread::hardware_concurrency())) + 1
          : 32;
  CHECK(pool->max_connections() <= most);
  CHECK(pool->max_connections() >= 1);
  CHECK(reserve_and_confirm(*pool, e) == 0);
  check_rows(e);
  CHECK(pool->connections_opened() >= 1);
  CHECK(pool->connections_opened() <= pool->max_connections());
}

TEST_CASE("a pool of two connections: 64 workers take turns on them; its end says how many it opened") {
  DebugLines debug;
  LedgerFixture e;
  auto pool = pool_of(e, 2);
  const size_t max = e.fresh.kind() == test::Backend::sqlite ? 3 : 2; // SQLite's writer is one more
  CHECK(pool->max_connections() == max);
  CHECK(reserve_and_confirm(*pool, e) == 0);
  check_rows(e);
  const size_t opened = pool->connections_opened();
  CHECK(opened <= max);
  pool.reset();
  auto lines = debug.starting("ledger: " + std::to_string(opened) + " connections for " +
                              std::to_string(k_threads) + " workers (");
  CHECK(lines.size() == 1);
}

TEST_CASE(
    "a call from inside a scan's visit runs on the connection the scan holds, never waits for another") {
  LedgerFixture e;
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(e.reserve("5c" + std::to_string(i)).id);
  auto pool = pool_of(e, 1);
  auto w = pool->worker();
  std::vector<int64_t> read;
  w->scan_files({.owner = "*"}, [&](const ledger::FileRecord &r) {
    auto again = w->find_file(r.id); // would wait forever for the one connection the scan holds
    if (again) read.push_back(again->id);
    return true;
  });
  CHECK(read == ids);
  CHECK(pool->connections_opened() <= pool->max_connections());
}

TEST_SUITE_END(); // sqlonly

// The group commit behind SQLite's pool.
TEST_SUITE_BEGIN("sqliteonly");

TEST_CASE("group-committed writes borrow no connection: reserves and confirms go on while a scan holds the "
          "only one") {
  LedgerFixture e;
  (void)e.reserve("5d0");
  auto pool = pool_of(e, 1);
  auto scanner = pool->worker();
  auto writer = pool->worker();
  std::mutex mu;
  std::condition_variable cv;
  bool holding = false, written = false, saw_written = false;
  std::thread scan([&] {
    scanner->scan_files({.owner = "*"}, [&](const ledger::FileRecord &) {
      std::unique_lock lock(mu);
      holding = true;
      cv.notify_all();
      // A borrowing write would wait for this scan, which waits for it: bounded, so the case
      // fails rather than hangs.
      saw_written = cv.wait_for(lock, std::chrono::seconds(20), [&] { return written; });
      return false;
    });
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return holding; });
  }
  auto res = writer->reserve(request("o", "5d1"), e.now());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  CHECK(writer->set_multipart_upload_id(res.record.id, "up-1", e.now()) ==
        ledger::SetUploadIdOutcome::recorded);
  auto later =
      writer->confirm_later(res.record.id, "etag", "", e.now(), ledger::CommitTag::none, std::nullopt);
  CHECK(later->wait() == ledger::ConfirmOutcome::confirmed);
  {
    std::lock_guard lock(mu);
    written = true;
  }
  cv.notify_all();
  scan.join();
  CHECK(saw_written);
  CHECK(e.row(res.record.id).upload_status == ledger::FileStatus::active);
  CHECK(pool->connections_opened() == 2); // the writer and the one reader
}

TEST_CASE("a pooled worker's reserve_batch is SqlLedger's: the whole batch one group-commit request") {
  DebugLines debug;
  LedgerFixture e;
  auto pool = pool_of(e);
  auto w = pool->worker();
  std::vector<ledger::ReserveRequest> reqs;
  for (int i = 0; i < 5; ++i)
    reqs.push_back(request("o", "5e" + std::to_string(i)));
  auto out = w->reserve_batch(reqs, e.now());
  REQUIRE(out.size() == reqs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    REQUIRE(out[i].ok());
    CHECK(out[i]->outcome == ledger::ReserveOutcome::reserved);
    CHECK(e.row(out[i]->record.id).sha256 == reqs[i].sha256);
  }
  w.reset();
  pool.reset(); // the group logs what it ran as it closes
  // UploadLedger's own reserve_batch would make five requests, one reserve each.
  CHECK(debug.starting("ledger: 1 upload transitions in 1 commits").size() == 1);
}

TEST_SUITE_END(); // sqliteonly
