// The uploader on a group-committing SQLite ledger: what the pool's shared writer does with
// the confirms it defers (one store flush per batch and domain, abandoned confirms, a pool
// closed with one queued). The uploader's own logic is tested on the ledger fake
// (test_ops_upload.cpp); these are the pool's semantics, which only SQL has.
#include "fake_store.hpp"
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <lodge/util/log.hpp>
#include <mutex>

using namespace lodge;

namespace {
// The fake store's settings: 1 KiB parts, one at a time.
ops::UploadSettings settings_for(test::FakeStore &store) {
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = 1;
  s.open_store = [&store]() -> std::unique_ptr<store::ObjectStore> { return store.connection(); };
  return s;
}

std::unique_ptr<ledger::Ledger> ledger_in(test::TempDir &dir) {
  ledger::OpenOptions o;
  o.location = dir.file("l.db");
  o.create = true;
  return ledger::open_ledger(o);
}

// A group-committing ledger's worker, as `lodge upload` runs it, and the fake store; `l`
// reads what committed.
struct Pipelined {
  test::TempDir dir;
  std::unique_ptr<ledger::Ledger> l = ledger_in(dir);
  std::shared_ptr<ledger::LedgerPool> pool = ledger::open_ledger_pool(at(dir));
  std::unique_ptr<ledger::Ledger> worker = pool->worker();
  test::FakeStore store;
  ops::UploadSettings s = settings_for(store);

  static ledger::OpenOptions at(test::TempDir &d) {
    ledger::OpenOptions o;
    o.location = d.file("l.db");
    return o;
  }
  // The file `name` in dir (written with `content` unless empty), as the walk hands it over.
  [[nodiscard]] ops::InputFile input(const std::string &name, const std::string &content = "") const {
    if (!content.empty()) test::write_file(dir.file(name), content);
    ops::InputFile f;
    f.path = dir.file(name);
    f.name = f.path;
    return f;
  }
};
} // namespace

namespace {
// A reserved UPLOADING row of its own content (`n` makes each one distinct).
int64_t reserved_row(ledger::Ledger &l, int n) {
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.original_name = "f" + std::to_string(n) + ".txt";
  r.relative_path = r.original_name;
  r.sha256 = std::string(63, 'a') + std::to_string(n % 10);
  r.size = 1;
  r.policy = "default";
  r.deadline_ms = 60'000;
  r.grace_ms = 1'000;
  auto res = l.reserve(r, util::system_clock().now_ms());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  return res.record.id;
}
} // namespace

TEST_CASE("group commit: the confirms of one batch wait behind one store flush per domain") {
  Pipelined p;
  auto &l = p.l;
  auto &worker = p.worker;
  std::vector<int64_t> ids;
  ids.reserve(3);
  for (int i = 0; i < 3; ++i)
    ids.push_back(reserved_row(*worker, i));
  int a_runs = 0;
  int b_runs = 0;
  int domain_a = 0;
  int domain_b = 0;
  auto durable = [](int &domain, int &runs) {
    return ledger::Durable{&domain, [&runs] {
                             ++runs;
                             return ok_status();
                           }};
  };
  const int64_t now = util::system_clock().now_ms();
  // Nobody leads until a wait: the three confirms (two of one domain) make one batch.
  auto c0 = worker->confirm_later(ids[0], "e0", "", now, ledger::CommitTag::none, std::nullopt,
                                  durable(domain_a, a_runs));
  auto c1 = worker->confirm_later(ids[1], "e1", "", now, ledger::CommitTag::none, std::nullopt,
                                  durable(domain_a, a_runs));
  auto c2 = worker->confirm_later(ids[2], "e2", "", now, ledger::CommitTag::none, std::nullopt,
                                  durable(domain_b, b_runs));
  CHECK(a_runs == 0); // nothing runs before a batch does
  CHECK(c0->wait() == ledger::ConfirmOutcome::confirmed);
  CHECK(c1->wait() == ledger::ConfirmOutcome::confirmed);
  CHECK(c2->wait() == ledger::ConfirmOutcome::confirmed);
  CHECK(a_runs == 1);
  CHECK(b_runs == 1);
  for (auto id : ids)
    CHECK(l->find_file(id)->upload_status == ledger::FileStatus::active);
}

TEST_CASE(
    "a failed store flush: the confirm never runs, the row is failed and its object left to the grace") {
  Pipelined p; // its worker group-commits
  auto &l = p.l;
  auto &store = p.store;
  std::unique_ptr<ledger::Ledger> at_once;
  SUBCASE("group commit") {}
  SUBCASE("a ledger that confirms at once") {
    at_once = ledger::open_ledger(Pipelined::at(p.dir));
  }
  store.fail("flush", Error(Errc::storage_unavailable, "syncfs: I/O error"), 1);
  ops::Uploader up(at_once ? *at_once : *p.worker, store, p.s, util::system_clock());
  auto f = p.input("a.txt", "first file");
  auto got = up.upload_next(f);
  for (auto &last : up.finish())
    got.push_back(last);
  REQUIRE(got.size() == 1);
  CHECK(got[0].outcome == ops::UploadOutcome::failed);
  REQUIRE(got[0].error);
  CHECK(got[0].error->message.find("syncfs: I/O error") != std::string::npos);
  REQUIRE(got[0].id);
  auto row = l->find_file(*got[0].id);
  CHECK(row->upload_status == ledger::FileStatus::upload_failed);
  CHECK(store.has(row->object_key)); // perhaps durable: removed by sweep after the grace, not now
  auto task = l->find_task_for(row->id);
  REQUIRE(task);
  CHECK(task->status != ledger::TaskStatus::ignored);
}

namespace {
// The warnings logged while it lives.
struct Warnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  Warnings() {
    util::log::set_level(util::log::Level::warn);
    util::log::set_sink([this](util::log::Level lvl, std::string_view line) {
      std::lock_guard lock(mutex);
      if (lvl == util::log::Level::warn) lines.emplace_back(line);
    });
  }
  ~Warnings() { util::log::set_sink(nullptr); }
  Warnings(const Warnings &) = delete;
  Warnings &operator=(const Warnings &) = delete;
  [[nodiscard]] bool said(const std::string &a, const std::string &b) {
    std::lock_guard lock(mutex);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string &l) {
      return l.find(a) != std::string::npos && l.find(b) != std::string::npos;
    });
  }
};

// Destroys `pending` on another thread; false if that did not end within 5 s (then it is
// left to end once whatever holds it lets go: the caller's gate).
bool destroyed_at_once(std::unique_ptr<ledger::Ledger::PendingConfirm> &pending, std::future<void> &done) {
  done = std::async(std::launch::async, [&pending] { pending.reset(); });
  return done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
}
} // namespace

TEST_CASE("a pending confirm destroyed unwaited neither waits nor throws; the next batch commits it") {
  Pipelined p;
  const int64_t id = reserved_row(*p.worker, 0);
  // The confirm's store flush is held until the gate opens: a destructor that led the
  // batch itself would block on it.
  std::promise<void> gate;
  auto open = gate.get_future().share();
  auto runs = std::make_shared<std::atomic<int>>(0);
  int domain = 0;
  ledger::Durable durable{&domain, [open, runs] {
                            open.wait();
                            ++*runs;
                            return ok_status();
                          }};
  auto pending = p.worker->confirm_later(id, "e0", "", util::system_clock().now_ms(), ledger::CommitTag::none,
                                         std::nullopt, std::move(durable));
  std::future<void> done;
  const bool at_once = destroyed_at_once(pending, done);
  gate.set_value();
  done.get(); // rethrows what the destructor threw (a destructor that throws ends the process)
  CHECK(at_once);
  CHECK(*runs == 0); // abandoned, not run: nobody led a batch yet
  CHECK(p.l->find_file(id)->upload_status == ledger::FileStatus::uploading);
  // Another worker's next write leads the next batch, which takes the abandoned confirm.
  auto other = p.pool->worker();
  (void)reserved_row(*other, 1);
  CHECK(*runs == 1);
  CHECK(p.l->find_file(id)->upload_status == ledger::FileStatus::active);
}

TEST_CASE("an abandoned confirm that fails is reported in a warning naming its file") {
  Pipelined p;
  Warnings w;
  const int64_t id = reserved_row(*p.worker, 0);
  int domain = 0;
  ledger::Durable durable{&domain,
                          [] { return Status(Error(Errc::storage_unavailable, "syncfs: I/O error")); }};
  auto pending = p.worker->confirm_later(id, "e0", "", util::system_clock().now_ms(), ledger::CommitTag::none,
                                         std::nullopt, std::move(durable));
  pending.reset();
  (void)reserved_row(*p.worker, 1); // the next batch
  CHECK(w.said("the confirm of file #" + std::to_string(id), "syncfs: I/O error"));
  CHECK(p.l->find_file(id)->upload_status == ledger::FileStatus::uploading); // recovered by repair/sweep
}

TEST_CASE("an abandoned confirm whose batch never comes is reported when the ledger closes") {
  Pipelined p;
  Warnings w;
  const int64_t id = reserved_row(*p.worker, 0);
  bool ran = false;
  int domain = 0;
  ledger::Durable durable{&domain, [&ran] {
                            ran = true;
                            return ok_status();
                          }};
  auto pending = p.worker->confirm_later(id, "e0", "", util::system_clock().now_ms(), ledger::CommitTag::none,
                                         std::nullopt, std::move(durable));
  pending.reset();
  p.worker.reset();
  p.pool.reset(); // the group commit closes with the confirm still queued
  CHECK_FALSE(ran);
  CHECK(w.said("the confirm of file #" + std::to_string(id), "never ran"));
  CHECK(p.l->find_file(id)->upload_status == ledger::FileStatus::uploading);
}

TEST_CASE(
    "an uploader ended with a confirm pending: its store connection may close before the confirm runs") {
  Pipelined p;
  std::optional<int64_t> id;
  {
    auto conn = p.store.connection();
    ops::Uploader up(*p.worker, *conn, p.s, util::system_clock());
    auto got = up.upload_next(p.input("a.txt", "first file"));
    CHECK(got.empty()); // pending
    auto rows = p.l->list_files({.owner = "o", .include_dead = false});
    REQUIRE(rows.size() == 1);
    id = rows[0].id;
  } // no finish(): the Uploader and its connection end with the confirm abandoned
  auto other = p.pool->worker();
  (void)reserved_row(*other, 1); // leads the batch: the flush runs without the closed connection
  CHECK(p.l->find_file(*id)->upload_status == ledger::FileStatus::active);
  CHECK(p.store.count("flush") >= 1);
}
