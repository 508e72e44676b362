// The uploader on the ledger fake and the fake store: parts go up in parallel over separate
// connections, and every outcome, the ledger's failures and lost answers included, leaves
// the ledger in the state the protocol promises. (Its confirms on a group-committing SQLite
// ledger: test_ledger_group_commit.cpp.)
#include "fake_store.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <algorithm>
#include <condition_variable>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload/upload.hpp>
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

// The ledger fake and the fake store, and files in a temporary directory.
struct Run {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  ops::UploadSettings s = multipart_settings(store, 1);

  // The file `name` in dir (written with `content` unless empty), as the walk hands it over.
  [[nodiscard]] ops::InputFile input(const std::string &name, const std::string &content = "") const {
    if (!content.empty()) test::write_file(dir.file(name), content);
    ops::InputFile f;
    f.path = dir.file(name);
    f.name = f.path;
    return f;
  }
  // One upload of `name` with `content`, to the end.
  ops::FileResult upload(const std::string &name, const std::string &content) {
    ops::Uploader up(l, store, s, util::system_clock());
    return up.upload(input(name, content).path);
  }
};
} // namespace

TEST_CASE("a multipart upload sends parts in parallel and completes them in order") {
  test::TempDir dir;
  auto l = std::make_unique<test::FakeLedger>();
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
  auto l = std::make_unique<test::FakeLedger>();
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
  auto l = std::make_unique<test::FakeLedger>();
  // The completion is refused, and so is the abort that follows: the upload id must not
  // vanish silently. (A part that fails keeps the staged upload for a resume: no abort.)
  test::FakeStore main_store;
  main_store.fail("complete_staged", Error(Errc::storage_error, "COMPLETE: refused"));
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
  auto l = std::make_unique<test::FakeLedger>();
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
  auto l = std::make_unique<test::FakeLedger>();
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
  Run p;
  p.l.defer_confirms(); // each confirm commits when waited for, as a group commit's batch
  auto *l = &p.l;
  ops::Uploader up(p.l, p.store, p.s, util::system_clock());
  auto a = p.input("a.txt", "first file");
  auto b = p.input("b.txt", "second file");
  auto c = p.input("c.txt", "third file");
  auto &dir = p.dir;
  auto &store = p.store;

  // a's bytes are stored; nothing is reported yet (its confirm is pending).
  CHECK(up.upload_next(a).empty());
  auto rows = l->list_files({.owner = "o", .include_dead = true});
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
  Run p;
  p.l.defer_confirms(); // each confirm commits when waited for, as a group commit's batch
  auto *l = &p.l;
  auto &dir = p.dir;
  ops::Uploader up(p.l, p.store, p.s, util::system_clock());
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
  Run p;
  p.l.defer_confirms(); // each confirm commits when waited for, as a group commit's batch
  auto *l = &p.l;
  ops::Uploader up(p.l, p.store, p.s, util::system_clock());
  CHECK(up.upload_next(p.input("a.txt", "first file")).empty());
  auto rows = l->list_files({.owner = "o", .include_dead = true});
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

TEST_CASE("an upload's transitions: the reserve's row and task, then the confirm's") {
  Run p;
  auto r = p.upload("a.txt", "some bytes");
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  CHECK(p.l.history(*r.id) == std::vector<std::string>{
                                  "reserve #" + std::to_string(*r.id) + " row none -> UPLOADING",
                                  "reserve #" + std::to_string(*r.id) + " task none -> PENDING",
                                  "confirm #" + std::to_string(*r.id) + " row UPLOADING -> ACTIVE",
                                  "confirm #" + std::to_string(*r.id) + " task PENDING -> IGNORED",
                              });
  CHECK(p.store.has(p.l.row(*r.id).object_key));
}

TEST_CASE("the ledger fails the reserve: nothing is sent, nothing recorded") {
  Run p;
  p.l.fail_next("reserve");
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::ledger_unavailable);
  CHECK_FALSE(r.id);
  CHECK(p.store.count("put") == 0);
  CHECK(p.l.transitions().empty());
}

TEST_CASE("the reserve's answer is lost: nothing is sent; the row it wrote waits for repair and sweep") {
  Run p;
  p.l.lose_answer("reserve");
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::ledger_unavailable);
  CHECK(p.store.count("put") == 0);
  auto rows = p.l.list_files({.owner = "o", .include_dead = true});
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].upload_status == ledger::FileStatus::uploading);
  auto task = p.l.task_of(rows[0].id);
  CHECK(task.status == ledger::TaskStatus::pending);
  CHECK(task.next_retry_at == rows[0].upload_deadline_at + p.s.cleanup.grace_ms);
}

TEST_CASE("the ledger loses the confirm's answer: reported failed, never deleted; the row is ACTIVE") {
  Run p;
  p.l.lose_answer("confirm");
  auto r = p.upload("a.txt", "some bytes");
  // The caller never heard: it may not say the file is stored, and it must not compensate
  // either (the confirm did commit: the object is an ACTIVE row's).
  CHECK(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::ledger_unavailable);
  REQUIRE(r.id);
  auto row = p.l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::active);
  CHECK(p.l.task_of(*r.id).status == ledger::TaskStatus::ignored);
  CHECK(p.store.has(row.object_key));
  CHECK(p.store.count("remove_owned") == 0);
  CHECK(p.l.count("mark_failed") == 0);
  // A second run finds it stored.
  auto again = p.upload("a.txt", "some bytes");
  CHECK(again.outcome == ops::UploadOutcome::duplicate);
  CHECK(again.id == r.id);
}

TEST_CASE("the ledger fails the confirm: reported failed; the row stays UPLOADING with its task, the "
          "object kept for repair and sweep") {
  Run p;
  p.l.fail_next("confirm");
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::ledger_unavailable);
  auto row = p.l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::uploading);
  auto task = p.l.task_of(*r.id);
  CHECK(task.status == ledger::TaskStatus::pending);
  CHECK(task.next_retry_at == row.upload_deadline_at + p.s.cleanup.grace_ms);
  CHECK(p.store.has(row.object_key));
  CHECK(p.store.count("remove_owned") == 0);
}

TEST_CASE("a definite failure is compensated at once, through sweep's path") {
  Run p;
  p.store.fail("put", Error(Errc::storage_error, "PUT: 403 AccessDenied"));
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_error);
  const std::string id = std::to_string(*r.id);
  CHECK(p.l.history(*r.id) == std::vector<std::string>{
                                  "reserve #" + id + " row none -> UPLOADING",
                                  "reserve #" + id + " task none -> PENDING",
                                  "mark_failed #" + id + " row UPLOADING -> UPLOAD_FAILED",
                                  "claim #" + id + " task PENDING -> PROCESSING",
                                  "finish #" + id + " task PROCESSING -> SUCCESS",
                              });
  CHECK(p.store.removed() == std::vector<std::string>{p.l.row(*r.id).object_key});
}

TEST_CASE("the ledger fails mark_failed: nothing is lost, the row stays UPLOADING with its task") {
  Run p;
  p.store.fail("put", Error(Errc::storage_error, "PUT: 403 AccessDenied"));
  p.l.fail_next("mark_failed");
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_error); // the upload's own error, not the ledger's
  auto row = p.l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::uploading);
  CHECK_FALSE(row.is_deleted);
  auto task = p.l.task_of(*r.id);
  CHECK(task.status == ledger::TaskStatus::pending); // repair fails it by its deadline, sweep cleans up
  CHECK(task.next_retry_at == row.upload_deadline_at + p.s.cleanup.grace_ms);
  CHECK(p.l.count("claim_task") == 0);
  CHECK(p.store.count("remove_owned") == 0);
}

TEST_CASE("an ambiguous failure is not compensated now: the task owes a verify pass after the grace") {
  Run p;
  ErrorDetails lost;
  lost.ambiguous = true;
  p.store.fail("put", Error(Errc::storage_unavailable, "PUT: no answer", lost));
  auto r = p.upload("a.txt", "some bytes");
  CHECK(r.outcome == ops::UploadOutcome::failed);
  auto row = p.l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  auto task = p.l.task_of(*r.id);
  CHECK(task.status == ledger::TaskStatus::pending);
  CHECK(task.verify_pass == ledger::k_verify_owed);
  CHECK(task.next_retry_at == row.upload_deadline_at + p.s.cleanup.grace_ms);
  CHECK(p.store.count("remove_owned") == 0);
}

TEST_CASE("de-dup: the same path and content again is a duplicate; another path shares the object") {
  Run p;
  auto a = p.upload("a.txt", "same bytes");
  REQUIRE(a.outcome == ops::UploadOutcome::active);
  auto again = p.upload("a.txt", "same bytes");
  CHECK(again.outcome == ops::UploadOutcome::duplicate);
  CHECK(again.id == a.id);
  auto b = p.upload("b.txt", "same bytes");
  CHECK(b.outcome == ops::UploadOutcome::duplicate);
  REQUIRE(b.id);
  CHECK(b.id != a.id);
  CHECK(b.shares == a.id);
  auto row = p.l.row(*b.id);
  CHECK(row.upload_status == ledger::FileStatus::active);
  CHECK(row.object_key == p.l.row(*a.id).object_key);
  CHECK(p.l.task_of(*b.id).status == ledger::TaskStatus::ignored);
  CHECK(p.store.count("put") == 1);
}

TEST_CASE("de-dup: a copy missing from the store is retired and the file uploaded anew") {
  Run p;
  auto a = p.upload("a.txt", "same bytes");
  REQUIRE(a.outcome == ops::UploadOutcome::active);
  p.store.forget(p.l.row(*a.id).object_key);
  auto again = p.upload("a.txt", "same bytes");
  CHECK(again.outcome == ops::UploadOutcome::active);
  CHECK(again.id != a.id);
  auto old = p.l.row(*a.id);
  CHECK(old.is_deleted);
  CHECK(old.failure_reason == "object missing from the store");
  CHECK(p.l.task_of(*a.id).status == ledger::TaskStatus::pending);
}

TEST_CASE("quota: past the policy's max_files an upload is rejected before anything is sent") {
  Run p;
  p.s.policy.max_files = 1;
  REQUIRE(p.upload("a.txt", "first").outcome == ops::UploadOutcome::active);
  auto b = p.upload("b.txt", "second");
  CHECK(b.outcome == ops::UploadOutcome::rejected);
  CHECK(b.error->code == Errc::quota_exceeded);
  CHECK(p.store.count("put") == 1);
  CHECK(p.l.list_files({.owner = "o", .include_dead = true}).size() == 1);
}

TEST_CASE(
    "a failed store flush: the confirm never runs, the row is failed and its object left to the grace") {
  Run p;
  SUBCASE("confirms deferred") {
    p.l.defer_confirms();
  }
  SUBCASE("confirms at once") {}
  p.store.fail("flush", Error(Errc::storage_unavailable, "syncfs: I/O error"), 1);
  ops::Uploader up(p.l, p.store, p.s, util::system_clock());
  auto got = up.upload_next(p.input("a.txt", "first file"));
  for (auto &last : up.finish())
    got.push_back(last);
  REQUIRE(got.size() == 1);
  CHECK(got[0].outcome == ops::UploadOutcome::failed);
  CHECK(got[0].error->message.find("syncfs: I/O error") != std::string::npos);
  CHECK(p.l.count("confirm") == 0);
  auto row = p.l.row(*got[0].id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(p.store.has(row.object_key)); // perhaps durable: removed by sweep after the grace, not now
  CHECK(p.l.task_of(row.id).verify_pass == ledger::k_verify_owed);
}
