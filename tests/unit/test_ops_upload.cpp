// The uploader against a fake store: parts go up in parallel over separate connections,
// and every outcome leaves the ledger in the state the protocol promises.
#include "fake_store.hpp"
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload.hpp>
#include <lodge/util/log.hpp>
#include <mutex>
#include <stdexcept>

using namespace lodge;

namespace {
// Shared by every connection: counts parts in flight and remembers the most at once.
struct PartBoard {
  std::mutex mutex;
  std::condition_variable cv;
  int in_flight = 0;
  int most = 0;
  std::vector<int> numbers;
};

// Multipart settings for the fake store: 1 KiB parts, `concurrency` at a time, extra
// connections to the same fake server.
ops::UploadSettings multipart_settings(test::FakeStore &store, int concurrency) {
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = concurrency;
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
  ops::UploadSettings s = multipart_settings(store, 1);

  static ledger::OpenOptions at(test::TempDir &d) {
    ledger::OpenOptions o;
    o.location = d.file("l.db");
    return o;
  }
  // The file `name` in dir (written with `content` unless empty), as the walk hands it over.
  ops::InputFile input(const std::string &name, const std::string &content = "") {
    if (!content.empty()) test::write_file(dir.file(name), content);
    ops::InputFile f;
    f.path = dir.file(name);
    f.name = f.path;
    return f;
  }
};
} // namespace

TEST_CASE("a multipart upload sends parts in parallel and completes them in order") {
  test::TempDir dir;
  auto l = ledger_in(dir);
  PartBoard board;
  test::FakeStore main_store;
  // Holds each part until a second one is in flight (or gives up after a while, which
  // the test then reports as no parallelism).
  main_store.on_put_part = [&board](int n) {
    std::unique_lock lock(board.mutex);
    ++board.in_flight;
    board.most = std::max(board.most, board.in_flight);
    board.numbers.push_back(n);
    board.cv.notify_all();
    board.cv.wait_for(lock, std::chrono::seconds(2), [&] { return board.most >= 2; });
    --board.in_flight;
  };
  auto s = multipart_settings(main_store, 3);
  std::string content;
  for (int i = 0; i < 5000; ++i)
    content.push_back(static_cast<char>('a' + i % 26));
  test::write_file(dir.file("big.txt"), content);
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  CHECK(board.most >= 2);
  CHECK(board.numbers.size() == 5);
  auto completed = main_store.completed_parts();
  REQUIRE(completed.size() == 5);
  for (int i = 0; i < 5; ++i)
    CHECK(completed[static_cast<size_t>(i)].number == i + 1);
  auto row = l->find_file(*r.id);
  CHECK(row->upload_status == ledger::FileStatus::active);
  CHECK(row->multipart_upload_id == "upload-1");
  CHECK(main_store.count("put_part") == 5);
  CHECK(main_store.has(row->object_key));
  CHECK(l->find_task_for(*r.id)->status == ledger::TaskStatus::ignored);
}

TEST_CASE("an exception in a part thread fails the upload and aborts the multipart upload") {
  test::TempDir dir;
  auto l = ledger_in(dir);
  test::FakeStore main_store;
  // Part uploads throw (a bug or bad_alloc deep in a store), on whichever thread sends them.
  main_store.on_put_part = [](int) { throw std::runtime_error("part store exploded"); };
  auto s = multipart_settings(main_store, 3);
  test::write_file(dir.file("big.txt"), std::string(5000, 'x'));
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::internal);
  CHECK(r.error->message.find("part store exploded") != std::string::npos);
  auto row = l->find_file(*r.id);
  CHECK(main_store.succeeded("abort_staged") == std::vector<std::string>{row->object_key});
  CHECK(row->upload_status == ledger::FileStatus::upload_failed);
}

TEST_CASE("a failed abort of a multipart upload is logged with its key and upload id") {
  test::TempDir dir;
  auto l = ledger_in(dir);
  // Parts fail, and so does the abort that follows: the upload id must not vanish silently.
  test::FakeStore main_store;
  main_store.fail("put_part", Error(Errc::storage_error, "PUT part: refused"));
  main_store.fail("abort_staged", Error(Errc::storage_unavailable, "DELETE: connection reset"));
  auto s = multipart_settings(main_store, 1);
  test::write_file(dir.file("big.txt"), std::string(3000, 'y'));
  std::vector<std::string> warnings;
  util::log::set_level(util::log::Level::warn);
  util::log::set_sink([&](util::log::Level lvl, std::string_view line) {
    if (lvl == util::log::Level::warn) warnings.emplace_back(line);
  });
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  util::log::set_sink(nullptr);
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_error);
  std::string key = l->find_file(*r.id)->object_key;
  bool said = false;
  for (const auto &w : warnings)
    said = said || (w.find("upload-1") != std::string::npos && w.find(key) != std::string::npos &&
                    w.find("connection reset") != std::string::npos);
  CHECK_MESSAGE(said, "warnings: ", warnings.size());
}

TEST_CASE("on a store that tags objects, a stored upload ends tagged committed with its task settled") {
  test::TempDir dir;
  auto l = ledger_in(dir);
  test::FakeStore store;
  store.enable_state_tags();
  auto s = multipart_settings(store, 1);
  test::write_file(dir.file("small.txt"), "tagged bytes");
  ops::Uploader up(*l, store, s, util::system_clock());
  auto r = up.upload(dir.file("small.txt"));
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  auto row = l->find_file(*r.id);
  CHECK(store.state_tag(row->object_key) == "committed");
  CHECK(l->find_task_for(*r.id)->status == ledger::TaskStatus::ignored);
}

TEST_CASE("a failed committed tag never fails the upload: the task stays due so a sweep tags it") {
  test::TempDir dir;
  auto l = ledger_in(dir);
  test::FakeStore store;
  store.enable_state_tags();
  store.fail("mark_committed", Error(Errc::storage_unavailable, "PUT ?comp=tags: connection reset"));
  auto s = multipart_settings(store, 1);
  test::write_file(dir.file("big.txt"), std::string(3000, 'z')); // staged: 3 parts
  ops::Uploader up(*l, store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  auto row = l->find_file(*r.id);
  CHECK(row->upload_status == ledger::FileStatus::active);
  CHECK(store.state_tag(row->object_key) == "pending");
  auto task = l->find_task_for(*r.id);
  CHECK(task->status == ledger::TaskStatus::pending);
  CHECK(task->next_retry_at > row->upload_deadline_at); // due at deadline + grace
}

TEST_CASE("pipelined: files are reported in order, each once its confirm committed") {
  Pipelined p;
  auto &l = p.l;
  ops::Uploader up(*p.worker, p.store, p.s, util::system_clock());
  auto a = p.input("a.txt", "first file");
  auto b = p.input("b.txt", "second file");
  auto c = p.input("c.txt", "third file");
  auto &dir = p.dir;
  auto &store = p.store;

  // a's bytes are stored; nothing is reported yet (its confirm is pending).
  CHECK(up.upload_next(a).empty());
  auto rows = l->list_files({"o", std::nullopt, std::nullopt, true});
  REQUIRE(rows.size() == 1);
  CHECK(store.has(rows[0].object_key));
  const int64_t a_id = rows[0].id;

  // b's too: two pending, none reported.
  CHECK(up.upload_next(b).empty());

  // A file refused before its reserve is reported after the pending ones, which it settles.
  auto got = up.upload_next(p.input("missing.txt"));
  REQUIRE(got.size() == 3);
  CHECK(got[0].file == dir.file("a.txt"));
  CHECK(got[0].outcome == ops::UploadOutcome::active);
  CHECK(got[0].id == a_id);
  CHECK(got[1].file == dir.file("b.txt"));
  CHECK(got[1].outcome == ops::UploadOutcome::active);
  CHECK(got[2].outcome == ops::UploadOutcome::rejected);
  CHECK(l->find_file(a_id)->upload_status == ledger::FileStatus::active);
  CHECK(l->find_file(*got[1].id)->upload_status == ledger::FileStatus::active);

  // The last one is ended by finish(); then there is nothing left.
  CHECK(up.upload_next(c).empty());
  auto last = up.finish();
  REQUIRE(last.size() == 1);
  CHECK(last[0].outcome == ops::UploadOutcome::active);
  CHECK(l->find_file(*last[0].id)->upload_status == ledger::FileStatus::active);
  CHECK(up.finish().empty());
}

TEST_CASE("pipelined: at most k_pending_confirms files wait; the oldest is reported first") {
  Pipelined p;
  auto &l = p.l;
  auto &dir = p.dir;
  ops::Uploader up(*p.worker, p.store, p.s, util::system_clock());
  const size_t n = ops::Uploader::k_pending_confirms;
  std::vector<ops::FileResult> got;
  for (size_t i = 0; i <= n; ++i) {
    auto out = up.upload_next(p.input("f" + std::to_string(i) + ".txt", "content " + std::to_string(i)));
    if (i < n) CHECK(out.empty());
    got.insert(got.end(), out.begin(), out.end());
  }
  REQUIRE(got.size() == 1); // the one past the limit settled the oldest
  CHECK(got[0].file == dir.file("f0.txt"));
  CHECK(got[0].outcome == ops::UploadOutcome::active);
  CHECK(l->find_file(*got[0].id)->upload_status == ledger::FileStatus::active);
  auto rest = up.finish();
  REQUIRE(rest.size() == n);
  for (size_t i = 0; i < n; ++i) {
    CHECK(rest[i].file == dir.file("f" + std::to_string(i + 1) + ".txt"));
    CHECK(rest[i].outcome == ops::UploadOutcome::active);
  }
}

TEST_CASE("pipelined: a pending file whose row was failed meanwhile is reported failed, never active") {
  Pipelined p;
  auto &l = p.l;
  ops::Uploader up(*p.worker, p.store, p.s, util::system_clock());
  CHECK(up.upload_next(p.input("a.txt", "first file")).empty());
  auto rows = l->list_files({"o", std::nullopt, std::nullopt, true});
  REQUIRE(rows.size() == 1);
  // A repair fails the row while its confirm is pending.
  REQUIRE(l->mark_failed(rows[0].id, "overdue", true, util::system_clock().now_ms()) ==
          ledger::MarkFailedOutcome::failed);
  auto last = up.finish();
  REQUIRE(last.size() == 1);
  CHECK(last[0].outcome == ops::UploadOutcome::failed);
  REQUIRE(last[0].error);
  CHECK(last[0].error->code == Errc::state_changed);
  CHECK(l->find_file(rows[0].id)->upload_status == ledger::FileStatus::upload_failed);
}

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

TEST_CASE("racily clean: a stat within its timestamps' granularity of when it was taken is not trusted") {
  constexpr int64_t s = 1'000'000'000;
  const int64_t now_ms = 1'700'000'010'000; // the moment the stat was taken
  const int64_t now_ns = now_ms * 1'000'000;
  // Whole-second timestamps: two seconds.
  CHECK(ops::racily_clean({1, 1, now_ns - 1 * s, now_ns - 1 * s}, now_ms));
  CHECK_FALSE(ops::racily_clean({1, 1, now_ns - 3 * s, now_ns - 3 * s}, now_ms));
  CHECK(ops::racily_clean({1, 1, now_ns - 3 * s, now_ns - 1 * s}, now_ms)); // ctime counts too
  // Nanosecond timestamps: a tenth of a second.
  CHECK(ops::racily_clean({1, 1, now_ns - 50'000'000 + 7, now_ns - 50'000'000 + 7}, now_ms));
  CHECK_FALSE(ops::racily_clean({1, 1, now_ns - 500'000'000 + 7, now_ns - 500'000'000 + 7}, now_ms));
  // A timestamp in the future (another host's clock on a shared filesystem): racy.
  CHECK(ops::racily_clean({1, 1, now_ns + 60 * s + 7, now_ns + 60 * s + 7}, now_ms));
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
    auto rows = p.l->list_files(ledger::ListFilter{"o", std::nullopt, std::nullopt, false});
    REQUIRE(rows.size() == 1);
    id = rows[0].id;
  } // no finish(): the Uploader and its connection end with the confirm abandoned
  auto other = p.pool->worker();
  (void)reserved_row(*other, 1); // leads the batch: the flush runs without the closed connection
  CHECK(p.l->find_file(*id)->upload_status == ledger::FileStatus::active);
  CHECK(p.store.count("flush") >= 1);
}
