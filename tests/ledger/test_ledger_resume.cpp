// The ledger contract for resume (ReserveRequest::resume, UploadLedger::fail_resumable): a
// staged upload's row failed with its parts intact is revived by the next reserve of the same
// content, on whichever backend LODGE_TEST_LEDGER names. Time is the `now` each call is given.
#include "support.hpp"

#include <algorithm>
#include <functional>
#include <latch>
#include <lodge/ledger/ledger.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace lodge;
using ledger::FileStatus;
using ledger::ReserveOutcome;
using ledger::TaskStatus;
using test::LedgerFixture;
using test::request;
using test::sha;

namespace {
constexpr int64_t k_grace = 1'000; // request()'s grace_ms
constexpr const char *k_holder = "host/1/100";
constexpr const char *k_next_holder = "host/2/200";

// A large file's request: sent as a staged upload, under a store root.
ledger::ReserveRequest staged(const std::string &owner, const std::string &seed,
                              const std::string &holder = k_next_holder) {
  auto r = request(owner, seed);
  r.resume = true;
  r.key_prefix = "root/";
  r.relative_path = "big/f.bin";
  r.size = 64 << 20;
  r.holder = holder;
  r.object_options = R"({"storage_class":"STANDARD_IA"})";
  return r;
}

// A staged upload's row that began (its upload handle recorded) and then failed in a
// resumable way: its task due one grace after the failure.
ledger::FileRecord failed_staged(LedgerFixture &e, ledger::ReserveRequest r,
                                 const std::string &handle = "mpu-1") {
  r.holder = k_holder;
  r.resume = false;
  auto res = e.l->reserve(r, e.now());
  REQUIRE(res.outcome == ReserveOutcome::reserved);
  const int64_t id = res.record.id;
  if (!handle.empty())
    REQUIRE(e.l->set_multipart_upload_id(id, handle, e.now()) == ledger::SetUploadIdOutcome::recorded);
  e.clock.t += 100;
  REQUIRE(e.l->fail_resumable(id, "STORAGE_ERROR: part 3 failed", e.now() + k_grace, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  return e.row(id);
}

size_t row_count(ledger::Ledger &l, const std::string &owner) {
  return l.list_files({.owner = owner, .include_dead = true}).size();
}

// The row and its task exactly as they were (a refused or dry resume writes nothing).
void check_untouched(LedgerFixture &e, const ledger::FileRecord &was, const ledger::TaskRecord &task_was) {
  const auto now = e.row(was.id);
  CHECK(now.upload_status == FileStatus::upload_failed);
  CHECK(now.is_deleted);
  CHECK(now.holder == was.holder);
  CHECK(now.failure_reason == was.failure_reason);
  CHECK(now.deleted_at == was.deleted_at);
  CHECK(now.upload_deadline_at == was.upload_deadline_at);
  CHECK(now.updated_at == was.updated_at);
  const auto t = e.task_of(was.id);
  CHECK(t.status == task_was.status);
  CHECK(t.next_retry_at == task_was.next_retry_at);
  CHECK(t.retry_count == task_was.retry_count);
  CHECK(t.lease_version == task_was.lease_version);
  CHECK(t.lease_owner == task_was.lease_owner);
  CHECK(t.updated_at == task_was.updated_at);
  CHECK(t.verify_pass == task_was.verify_pass);
}

template <class F> void on_threads(int n, F fn, std::vector<std::string> &errors) {
  std::latch ready(n);
  std::mutex mu;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        ready.arrive_and_wait();
        fn(i);
      } catch (const std::exception &x) {
        std::lock_guard g(mu);
        errors.emplace_back(x.what());
      }
    });
  for (auto &t : threads)
    t.join();
}
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("resume: the revive says when the row's cleanup was due before it, for a re-failure to keep") {
  LedgerFixture e;
  auto a = failed_staged(e, staged("o", "due"));
  const int64_t due = e.task_of(a.id).next_retry_at;
  e.clock.t += 300;
  auto res = e.l->reserve(staged("o", "due"), e.now());
  REQUIRE(res.outcome == ReserveOutcome::resumed);
  CHECK(res.cleanup_due_before == due);
  CHECK(e.task_of(a.id).next_retry_at > due); // postponed while this attempt runs
  // Failing again with the earlier time: the cleanup is where it was.
  REQUIRE(e.l->fail_resumable(a.id, "ACCESS_DENIED: listing parts", *res.cleanup_due_before, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  CHECK(e.task_of(a.id).next_retry_at == due);
  // A fresh reserve says nothing of it.
  CHECK_FALSE(e.l->reserve(request("o", "fresh"), e.now()).cleanup_due_before.has_value());
}

TEST_CASE("fail_resumable: UPLOAD_FAILED + deleted, its task due at the time given, no verify pass") {
  LedgerFixture e;
  auto r = staged("o", "a");
  r.holder = k_holder;
  auto a = e.l->reserve(r, e.now()).record;
  REQUIRE(e.l->set_multipart_upload_id(a.id, "mpu-1", e.now()) == ledger::SetUploadIdOutcome::recorded);
  const int64_t at = e.now() + 500;
  CHECK(e.l->fail_resumable(a.id, "STALLED: no progress", at + 7'000, at) ==
        ledger::MarkFailedOutcome::failed);
  const auto row = e.row(a.id);
  CHECK(row.upload_status == FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(row.failure_reason == "STALLED: no progress");
  CHECK(row.deleted_at == at);
  CHECK(row.updated_at == at);
  CHECK(row.multipart_upload_id == "mpu-1"); // the staged upload stays recorded
  auto t = e.task_of(a.id);
  CHECK(t.status == TaskStatus::pending);
  CHECK(t.next_retry_at == at + 7'000);
  CHECK(t.verify_pass == ledger::k_verify_none);
  // Not due before that; then one delete finishes it (no second pass).
  CHECK(e.l->claim_task(t.id, at + 6'999, "w", 60'000) == std::nullopt);
  auto c = e.l->claim_task(t.id, at + 7'000, "w", 60'000);
  REQUIRE(c.has_value());
  CHECK(e.l->decide(*c, at + 7'000, k_grace) == ledger::TaskDecision::allowed);
  CHECK(e.l->finish(*c, true, "", at + 99'000, at + 7'001) == ledger::TaskFinish::success);

  // Only an alive UPLOADING row: a failed one, an ACTIVE one, none.
  CHECK(e.l->fail_resumable(a.id, "again", at + 9'000, at + 1) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.row(a.id).failure_reason == "STALLED: no progress");
  auto b = e.l->reserve(staged("o", "b", k_holder), e.now()).record;
  REQUIRE(e.l->confirm(b.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->fail_resumable(b.id, "late", at + 9'000, at + 1) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.row(b.id).upload_status == FileStatus::active);
  CHECK_FALSE(e.row(b.id).is_deleted);
  CHECK(e.task_of(b.id).status == TaskStatus::ignored);
  CHECK(e.l->fail_resumable(9999, "none", at, at) == ledger::MarkFailedOutcome::not_uploading);
}

TEST_CASE("fail_resumable leaves a task a sweep holds to its decide, which finds the row dead") {
  LedgerFixture e;
  auto a = e.l->reserve(staged("o", "a", k_holder), e.now()).record;
  const int64_t due = e.task_of(a.id).next_retry_at;
  auto c = e.l->claim_task(e.task_of(a.id).id, due, "w", 60'000);
  REQUIRE(c.has_value());
  CHECK(e.l->fail_resumable(a.id, "deadline", due + 5'000, due) == ledger::MarkFailedOutcome::failed);
  auto t = e.task_of(a.id);
  CHECK(t.status == TaskStatus::processing);
  CHECK(t.next_retry_at == due);
  CHECK(t.lease_version == c->lease_version);
  CHECK(e.l->decide(*c, due, k_grace) == ledger::TaskDecision::allowed);
}

TEST_CASE("resume: a failed staged upload's row is revived in place of the insert, with its task") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto failed = failed_staged(e, req);
  const auto task_was = e.task_of(failed.id);
  const auto rows_before = row_count(*e.l, "o");

  // Past the failed row's due time: no sweep has claimed the task yet.
  e.clock.t = task_was.next_retry_at + 2;
  req.stat = ledger::FileStat{7, 8, 9, 10};
  req.idempotency_key = "k-1";
  req.original_name = "f-renamed.bin";
  req.max_retries = 5;
  auto res = e.l->reserve(req, e.now());
  REQUIRE(res.outcome == ReserveOutcome::resumed);
  // The same row: its id, key and staged upload kept (its object's stamp names this row).
  CHECK(res.record.id == failed.id);
  CHECK(res.record.object_key == failed.object_key);
  CHECK(res.record.multipart_upload_id == "mpu-1");
  CHECK(res.record.upload_status == FileStatus::uploading);
  CHECK_FALSE(res.record.is_deleted);
  CHECK_FALSE(res.record.deleted_at.has_value());
  CHECK_FALSE(res.record.failure_reason.has_value());
  CHECK(res.record.holder == k_next_holder);
  CHECK(res.record.upload_deadline_at == e.now() + req.deadline_ms);
  CHECK(res.record.updated_at == e.now());
  CHECK(res.record.created_at == failed.created_at);
  CHECK(res.record.stat == ledger::FileStat{7, 8, 9, 10});
  CHECK(res.record.idempotency_key == "k-1");
  CHECK(res.record.original_name == "f-renamed.bin");
  CHECK(res.record.object_options == req.object_options);
  // As stored, the same.
  const auto row = e.row(failed.id);
  CHECK(row.upload_status == FileStatus::uploading);
  CHECK_FALSE(row.is_deleted);
  CHECK(row.holder == k_next_holder);
  CHECK(row.upload_deadline_at == res.record.upload_deadline_at);
  CHECK(row.stat == res.record.stat);
  CHECK(row_count(*e.l, "o") == rows_before); // no new row
  // Its task: PENDING, due at the new deadline + grace, every trace of the sweep cleared.
  const auto t = e.task_of(failed.id);
  CHECK(t.id == task_was.id);
  CHECK(t.status == TaskStatus::pending);
  CHECK(t.next_retry_at == res.record.upload_deadline_at + k_grace);
  CHECK_FALSE(t.lease_owner.has_value());
  CHECK(t.lease_version == 0);
  CHECK(t.retry_count == 0);
  CHECK(t.max_retries == 5);
  CHECK(t.verify_pass == ledger::k_verify_none);
  CHECK_FALSE(t.tag_owed);
  CHECK_FALSE(t.last_error.has_value());
  CHECK(t.updated_at == e.now());
  CHECK(t.object_key == failed.object_key);

  // It is an UPLOADING row like any: another reserve of it is in_progress, its idempotency
  // key replays in_progress, renew and confirm work for it.
  CHECK(e.l->reserve(req, e.now()).outcome == ReserveOutcome::in_progress);
  auto plain = req;
  plain.resume = false;
  plain.dedup = ledger::DedupScope::none;
  CHECK(e.l->reserve(plain, e.now()).outcome == ReserveOutcome::in_progress); // by its key
  CHECK(e.l->renew(failed.id, k_next_holder, e.now() + 20'000, e.now() + 21'000, e.now() + 1) ==
        ledger::RenewOutcome::renewed);
  CHECK(e.l->confirm(failed.id, "etag-1", "", e.now() + 2) == test::confirm_outcome::confirmed);
  CHECK(e.row(failed.id).upload_status == FileStatus::active);
  CHECK(e.task_of(failed.id).status == TaskStatus::ignored);
}

TEST_CASE("resume: a row failed by repair past its deadline is resumable; its owed verify pass stays owed") {
  LedgerFixture e;
  auto r = staged("o", "a", k_holder);
  r.resume = false;
  auto a = e.l->reserve(r, e.now()).record;
  REQUIRE(e.l->set_multipart_upload_id(a.id, "mpu-1", e.now()) == ledger::SetUploadIdOutcome::recorded);
  REQUIRE(e.l->repair_row(a.id, a.upload_deadline_at + 1, k_grace, 2) == ledger::RepairOutcome::repaired);
  REQUIRE(e.task_of(a.id).verify_pass == ledger::k_verify_owed);
  e.clock.t = a.upload_deadline_at + 2;
  auto res = e.l->reserve(staged("o", "a"), e.now());
  CHECK(res.outcome == ReserveOutcome::resumed);
  CHECK(res.record.id == a.id);
  // The earlier sender's completion may still land: only that pass would remove it should
  // this row fail again after its own delete.
  CHECK(e.task_of(a.id).verify_pass == ledger::k_verify_owed);
  CHECK(e.task_of(a.id).next_retry_at == e.now() + r.deadline_ms + k_grace);
}

TEST_CASE("resume: none of these rows is resumable, so the reserve inserts a new row") {
  LedgerFixture e;
  // Each case: a failed staged row of owner o-N, something about it or the request that
  // differs, then a reserve with resume: a new row, and the failed one untouched.
  struct Case {
    const char *name;
    std::function<void(ledger::ReserveRequest &)> request; // the resuming request's difference
    std::function<void(LedgerFixture &, const ledger::FileRecord &)> after_failure;
    std::string handle;
  };
  const auto claim_it = [](LedgerFixture &f, const ledger::FileRecord &row) {
    const auto t = f.task_of(row.id);
    auto c = f.l->claim_task(t.id, t.next_retry_at, "sweep", 60'000);
    REQUIRE(c.has_value());
    return *c;
  };
  const std::vector<Case> cases = {
      {"no upload handle", nullptr, nullptr, ""},
      {"other content", [](auto &r) { r.sha256 = sha("b"); }, nullptr, "mpu-1"},
      {"other size", [](auto &r) { r.size += 1; }, nullptr, "mpu-1"},
      {"other path", [](auto &r) { r.relative_path = "big/g.bin"; }, nullptr, "mpu-1"},
      {"other run prefix", [](auto &r) { r.run_prefix = "builds/2"; }, nullptr, "mpu-1"},
      {"other store root", [](auto &r) { r.key_prefix = "other/"; }, nullptr, "mpu-1"},
      {"other owner", [](auto &r) { r.owner_id += "-b"; }, nullptr, "mpu-1"},
      {"other content type", [](auto &r) { r.content_type = "application/x-tar"; }, nullptr, "mpu-1"},
      {"other media type, none given", [](auto &r) { r.media_type = "application/gzip"; }, nullptr, "mpu-1"},
      {"other object options", [](auto &r) { r.object_options = ""; }, nullptr, "mpu-1"},
      {"no resume asked", [](auto &r) { r.resume = false; }, nullptr, "mpu-1"},
      {"task PROCESSING (a sweep claimed it)", nullptr,
       [&](LedgerFixture &f, const ledger::FileRecord &row) { (void)claim_it(f, row); }, "mpu-1"},
      {"task RETRY (a sweep's abort failed; another may still hold it under a lost lease)", nullptr,
       [&](LedgerFixture &f, const ledger::FileRecord &row) {
         auto c = claim_it(f, row);
         REQUIRE(f.l->decide(c, c.next_retry_at, k_grace) == ledger::TaskDecision::allowed);
         REQUIRE(f.l->finish(c, false, "STORAGE_UNAVAILABLE: abort", c.next_retry_at + 30'000,
                             c.next_retry_at + 1) == ledger::TaskFinish::retry);
       },
       "mpu-1"},
      {"task SUCCESS (the staged upload was aborted)", nullptr,
       [&](LedgerFixture &f, const ledger::FileRecord &row) {
         auto c = claim_it(f, row);
         REQUIRE(f.l->decide(c, c.next_retry_at, k_grace) == ledger::TaskDecision::allowed);
         REQUIRE(f.l->finish(c, true, "", 0, c.next_retry_at) == ledger::TaskFinish::success);
       },
       "mpu-1"},
      {"task IGNORED", nullptr,
       [&](LedgerFixture &f, const ledger::FileRecord &row) {
         auto c = claim_it(f, row);
         REQUIRE(f.l->ignore_task(c, c.next_retry_at, "not ours") == ledger::TaskFinish::success);
       },
       "mpu-1"},
      {"task FAILED (a dead letter)", nullptr,
       [&](LedgerFixture &f, const ledger::FileRecord &row) {
         auto c = claim_it(f, row);
         REQUIRE(f.l->dead_letter(c, "gave up", c.next_retry_at) == ledger::DeadLetterOutcome::dead_lettered);
       },
       "mpu-1"},
  };
  int n = 0;
  for (const auto &k : cases) {
    CAPTURE(k.name);
    const std::string owner = "o-" + std::to_string(n++);
    auto req = staged(owner, "a");
    const auto failed = failed_staged(e, req, k.handle);
    if (k.after_failure) k.after_failure(e, failed);
    const auto row_was = e.row(failed.id);
    const auto task_was = e.task_of(failed.id);
    if (k.request) k.request(req);
    e.clock.t += 10;
    auto res = e.l->reserve(req, e.now());
    CHECK(res.outcome == ReserveOutcome::reserved);
    CHECK(res.record.id != failed.id);
    CHECK(res.record.object_key != failed.object_key);
    CHECK(res.record.upload_status == FileStatus::uploading);
    check_untouched(e, row_was, task_was);
  }
}

TEST_CASE("resume: a direct reservation's failed staged upload is never resumed (its parts came from URL "
          "holders)") {
  LedgerFixture e;
  auto r = staged("o", "a", "direct until=99999999999999 parts=8388608");
  r.resume = false;
  auto a = e.l->reserve(r, e.now()).record;
  REQUIRE(e.l->set_multipart_upload_id(a.id, "mpu-1", e.now()) == ledger::SetUploadIdOutcome::recorded);
  REQUIRE(e.l->fail_resumable(a.id, "a part failed", e.now() + k_grace, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  const auto row_was = e.row(a.id);
  const auto task_was = e.task_of(a.id);
  auto res = e.l->reserve(staged("o", "a"), e.now());
  CHECK(res.outcome == ReserveOutcome::reserved);
  CHECK(res.record.id != a.id);
  check_untouched(e, row_was, task_was);
}

TEST_CASE("resume: the quota refuses it exactly as it would an insert, and then counts the row") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto failed = failed_staged(e, req);
  auto other = e.l->reserve(staged("o", "b", k_holder), e.now());
  REQUIRE(other.outcome == ReserveOutcome::reserved);
  const auto row_was = e.row(failed.id);
  const auto task_was = e.task_of(failed.id);
  // One alive row, a quota of one: refused, nothing written.
  req.max_files = 1;
  CHECK(e.l->reserve(req, e.now()).outcome == ReserveOutcome::quota_exceeded);
  check_untouched(e, row_was, task_was);
  // A quota of two: resumed; the revived row holds the second slot.
  req.max_files = 2;
  CHECK(e.l->reserve(req, e.now()).outcome == ReserveOutcome::resumed);
  auto third = staged("o", "c");
  third.max_files = 2;
  CHECK(e.l->reserve(third, e.now()).outcome == ReserveOutcome::quota_exceeded);
  third.max_files = 3;
  CHECK(e.l->reserve(third, e.now()).outcome == ReserveOutcome::reserved);
  // Failed again, the slot is free again (the counter went up and down once each).
  REQUIRE(e.l->fail_resumable(failed.id, "again", e.now() + k_grace, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  auto fourth = staged("o", "d");
  fourth.max_files = 3;
  CHECK(e.l->reserve(fourth, e.now()).outcome == ReserveOutcome::reserved);
  fourth = staged("o", "e");
  fourth.max_files = 3;
  CHECK(e.l->reserve(fourth, e.now()).outcome == ReserveOutcome::quota_exceeded);
}

TEST_CASE("resume: an alive duplicate answers first (in_progress, duplicate, an idempotent replay)") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto failed = failed_staged(e, req);
  const auto row_was = e.row(failed.id);
  const auto task_was = e.task_of(failed.id);
  // A plain reserve of the same content meanwhile (another path, same run prefix).
  auto plain = staged("o", "a", "host/3/300");
  plain.resume = false;
  plain.relative_path = "elsewhere/f.bin";
  plain.idempotency_key = "k-9";
  auto b = e.l->reserve(plain, e.now());
  REQUIRE(b.outcome == ReserveOutcome::reserved);
  auto res = e.l->reserve(req, e.now());
  CHECK(res.outcome == ReserveOutcome::in_progress);
  CHECK(res.record.id == b.record.id);
  check_untouched(e, row_was, task_was);
  // Its idempotency key replays first.
  auto keyed = req;
  keyed.idempotency_key = "k-9";
  CHECK(e.l->reserve(keyed, e.now()).outcome == ReserveOutcome::in_progress);
  // Once that row is ACTIVE at the resuming request's path: duplicate.
  REQUIRE(e.l->mark_failed(b.record.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto at_path = staged("o", "a", "host/3/300");
  at_path.resume = false;
  at_path.dedup = ledger::DedupScope::none;
  auto c = e.l->reserve(at_path, e.now());
  REQUIRE(c.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->confirm(c.record.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  res = e.l->reserve(req, e.now());
  CHECK(res.outcome == ReserveOutcome::duplicate);
  CHECK(res.record.id == c.record.id);
  check_untouched(e, row_was, task_was);
}

TEST_CASE("resume: of two resumable rows the newest is revived") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto older = failed_staged(e, req, "mpu-old");
  const auto newer = failed_staged(e, req, "mpu-new"); // reserved without resume: a row of its own
  REQUIRE(newer.id > older.id);
  const auto older_task = e.task_of(older.id);
  auto res = e.l->reserve(req, e.now());
  CHECK(res.outcome == ReserveOutcome::resumed);
  CHECK(res.record.id == newer.id);
  CHECK(res.record.multipart_upload_id == "mpu-new");
  check_untouched(e, older, older_task);
}

TEST_CASE("resume: a dry run answers resumed with the row as it would be, and writes nothing") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto failed = failed_staged(e, req);
  const auto task_was = e.task_of(failed.id);
  const auto rows_before = row_count(*e.l, "o");
  req.dry_run = true;
  auto res = e.l->reserve(req, e.now());
  CHECK(res.outcome == ReserveOutcome::resumed);
  CHECK(res.record.id == failed.id);
  CHECK(res.record.upload_status == FileStatus::uploading);
  CHECK(res.record.multipart_upload_id == "mpu-1");
  check_untouched(e, failed, task_was);
  CHECK(row_count(*e.l, "o") == rows_before);
  // The same through the workers' pool (on SQLite: group-committed, each request in its own
  // savepoint): the dry run rolls back, the real one commits.
  auto pool = e.pool();
  auto w = pool->worker();
  CHECK(w->reserve(req, e.now()).outcome == ReserveOutcome::resumed);
  check_untouched(e, failed, task_was);
  req.dry_run = false;
  auto real = w->reserve(req, e.now());
  CHECK(real.outcome == ReserveOutcome::resumed);
  CHECK(real.record.id == failed.id);
  auto seen = e.connect()->find_file(failed.id);
  REQUIRE(seen.has_value());
  CHECK(seen->upload_status == FileStatus::uploading);
  CHECK(e.task_of(failed.id).next_retry_at == real.record.upload_deadline_at + k_grace);
  // Failed again through the pool, resumable again.
  REQUIRE(w->fail_resumable(failed.id, "again", e.now() + k_grace, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  CHECK(e.row(failed.id).upload_status == FileStatus::upload_failed);
  CHECK(w->reserve(req, e.now()).outcome == ReserveOutcome::resumed);
}

TEST_CASE("resume: the old due time no longer claims the task; a sweep's decide postpones it") {
  LedgerFixture e;
  auto req = staged("o", "a");
  const auto failed = failed_staged(e, req);
  const int64_t old_due = e.task_of(failed.id).next_retry_at;
  e.clock.t = old_due - 10;
  auto res = e.l->reserve(req, e.now());
  REQUIRE(res.outcome == ReserveOutcome::resumed);
  const int64_t new_due = res.record.upload_deadline_at + k_grace;
  for (const auto &t : e.l->claim_due(old_due, 100, "sweep", 60'000))
    CHECK(t.record_id != failed.id);
  CHECK(e.task_of(failed.id).status == TaskStatus::pending);
  // A sweep whose clock is behind the one that claimed it: the row is UPLOADING within its
  // deadline, so the task is postponed to deadline + grace and nothing is deleted.
  auto c = e.l->claim_task(e.task_of(failed.id).id, new_due, "sweep", 60'000);
  REQUIRE(c.has_value());
  CHECK(e.l->decide(*c, old_due, k_grace) == ledger::TaskDecision::postponed);
  const auto t = e.task_of(failed.id);
  CHECK(t.status == TaskStatus::pending);
  CHECK(t.next_retry_at == new_due);
  CHECK(e.row(failed.id).upload_status == FileStatus::uploading);
  CHECK_FALSE(e.row(failed.id).is_deleted);
}

// Real concurrency: each thread on its own connection (on PostgreSQL its own session, as
// several processes would be), or the workers of one process group-committed.
TEST_CASE(
    "resume race: concurrent reserves of one failed staged upload: one resumed, the others in_progress") {
  LedgerFixture e;
  constexpr int k_threads = 6;
  for (int round = 0; round < 8; ++round) {
    const bool pooled = round % 4 == 3;
    CAPTURE(round);
    CAPTURE(pooled);
    const std::string owner = "race-" + std::to_string(round);
    const auto failed = failed_staged(e, staged(owner, "a"));
    std::vector<std::unique_ptr<ledger::Ledger>> conns;
    conns.reserve(k_threads);
    auto pool = pooled ? e.pool() : nullptr;
    for (int i = 0; i < k_threads; ++i)
      conns.push_back(pooled ? pool->worker() : e.connect());
    std::vector<ledger::ReserveResult> got(k_threads);
    std::vector<std::string> errors;
    on_threads(
        k_threads,
        [&](int i) {
          auto r = staged(owner, "a", "host/9/" + std::to_string(i));
          r.dedup = i % 2 == 0 ? ledger::DedupScope::prefix : ledger::DedupScope::owner;
          got[static_cast<size_t>(i)] = conns[static_cast<size_t>(i)]->reserve(r, e.now());
        },
        errors);
    REQUIRE_MESSAGE(errors.empty(), errors.front());
    int resumed = 0, in_progress = 0;
    std::string winner;
    for (int i = 0; i < k_threads; ++i) {
      const auto &g = got[static_cast<size_t>(i)];
      CHECK(g.record.id == failed.id);
      if (g.outcome == ReserveOutcome::resumed) {
        ++resumed;
        winner = "host/9/" + std::to_string(i);
      }
      if (g.outcome == ReserveOutcome::in_progress) ++in_progress;
    }
    CHECK(resumed == 1);
    CHECK(in_progress == k_threads - 1);
    CHECK(row_count(*e.l, owner) == 1);
    CHECK(e.row(failed.id).holder == winner);
    CHECK(e.task_of(failed.id).status == TaskStatus::pending);
  }
}

TEST_CASE("resume race with a sweep: the row is revived or its task claimed, never both") {
  LedgerFixture e;
  int revived = 0, claimed = 0;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    const std::string owner = "sweep-" + std::to_string(round);
    const auto failed = failed_staged(e, staged(owner, "a"));
    const int64_t due = e.task_of(failed.id).next_retry_at;
    auto uploader = e.connect();
    auto sweeper = e.connect();
    ledger::ReserveResult res;
    std::vector<ledger::TaskRecord> got;
    std::vector<std::string> errors;
    on_threads(
        2,
        [&](int i) {
          if (i == 0)
            res = uploader->reserve(staged(owner, "a"), due);
          else
            got = sweeper->claim_due(due, 1000, "sweep", 60'000);
        },
        errors);
    REQUIRE_MESSAGE(errors.empty(), errors.front());
    const bool task_claimed =
        std::any_of(got.begin(), got.end(), [&](const auto &t) { return t.record_id == failed.id; });
    if (res.outcome == ReserveOutcome::resumed) {
      ++revived;
      CHECK_FALSE(task_claimed);
      CHECK(e.task_of(failed.id).status == TaskStatus::pending);
      CHECK(e.row(failed.id).upload_status == FileStatus::uploading);
    } else {
      ++claimed;
      CHECK(res.outcome == ReserveOutcome::reserved);
      CHECK(res.record.id != failed.id);
      CHECK(task_claimed);
      CHECK(e.row(failed.id).upload_status == FileStatus::upload_failed);
    }
  }
  MESSAGE("revived ", revived, ", claimed first ", claimed);
  CHECK(revived + claimed == 12);
}

TEST_SUITE_END(); // contract
