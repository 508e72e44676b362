// The ledger fake's resume (ReserveRequest::resume, fail_resumable) follows SqlLedger's
// rules (tests/ledger/test_ledger_resume.cpp is the contract on SQLite and PostgreSQL), and
// its transitions record the revive, so that uploader tests on the fake can trust both.
#include "fake_ledger.hpp"

#include <doctest/doctest.h>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <string>
#include <vector>

using namespace lodge;
using ledger::FileStatus;
using ledger::ReserveOutcome;
using ledger::TaskStatus;

namespace {
constexpr int64_t k_grace = 1'000;

ledger::ReserveRequest staged(const std::string &owner, const std::string &seed,
                              const std::string &holder = "host/2/200") {
  ledger::ReserveRequest r;
  r.owner_id = owner;
  r.original_name = "f.bin";
  r.relative_path = "big/f.bin";
  r.media_type = "application/octet-stream";
  r.sha256 = std::string(64 - seed.size(), '0') + seed;
  r.size = 64 << 20;
  r.policy = "default";
  r.deadline_ms = 10'000;
  r.grace_ms = k_grace;
  r.max_retries = 2;
  r.key_prefix = "root/";
  r.holder = holder;
  r.object_options = R"({"storage_class":"STANDARD_IA"})";
  r.resume = true;
  return r;
}

struct Env {
  test::FakeLedger l;
  int64_t t = 1'700'000'000'000;
  // A staged upload's row, begun and then failed in a resumable way (task due a grace later).
  ledger::FileRecord failed(ledger::ReserveRequest r, const std::string &handle = "mpu-1") {
    r.resume = false;
    r.holder = "host/1/100";
    auto res = l.reserve(r, t);
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    if (!handle.empty())
      REQUIRE(l.set_multipart_upload_id(res.record.id, handle, t) == ledger::SetUploadIdOutcome::recorded);
    t += 100;
    REQUIRE(l.fail_resumable(res.record.id, "STORAGE_ERROR: part failed", t + k_grace, t) ==
            ledger::MarkFailedOutcome::failed);
    return l.row(res.record.id);
  }
  size_t rows(const std::string &owner) {
    return l.list_files({.owner = owner, .include_dead = true}).size();
  }
};
} // namespace

TEST_CASE("fake ledger: fail_resumable fails the row, its task due at the time given, no verify pass") {
  Env e;
  auto a = e.l.reserve(staged("o", "a"), e.t).record;
  CHECK(e.l.fail_resumable(a.id, "STALLED", e.t + 5'000, e.t + 1) == ledger::MarkFailedOutcome::failed);
  const auto row = e.l.row(a.id);
  CHECK(row.upload_status == FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(row.failure_reason == "STALLED");
  CHECK(row.deleted_at == e.t + 1);
  const auto t = e.l.task_of(a.id);
  CHECK(t.status == TaskStatus::pending);
  CHECK(t.next_retry_at == e.t + 5'000);
  CHECK(t.verify_pass == ledger::k_verify_none);
  CHECK(e.l.history(a.id) == std::vector<std::string>{"reserve #1 row none -> UPLOADING",
                                                      "reserve #1 task none -> PENDING",
                                                      "fail_resumable #1 row UPLOADING -> UPLOAD_FAILED",
                                                      "fail_resumable #1 task PENDING -> PENDING"});
  CHECK(e.l.fail_resumable(a.id, "again", e.t, e.t) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.l.fail_resumable(99, "none", e.t, e.t) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.l.row(a.id).failure_reason == "STALLED");
}

TEST_CASE("fake ledger: resume revives the failed row and its task, recorded as reserve's transitions") {
  Env e;
  auto req = staged("o", "a");
  const auto f = e.failed(req);
  const auto before = e.rows("o");
  const int64_t old_due = e.l.task_of(f.id).next_retry_at;
  e.t += 50;
  req.stat = ledger::FileStat{1, 2, 3, 4};
  auto res = e.l.reserve(req, e.t);
  REQUIRE(res.outcome == ReserveOutcome::resumed);
  CHECK(res.record.id == f.id);
  CHECK(res.record.object_key == f.object_key);
  CHECK(res.record.multipart_upload_id == "mpu-1");
  CHECK(res.record.upload_status == FileStatus::uploading);
  CHECK_FALSE(res.record.is_deleted);
  CHECK_FALSE(res.record.deleted_at.has_value());
  CHECK_FALSE(res.record.failure_reason.has_value());
  CHECK(res.record.holder == "host/2/200");
  CHECK(res.record.upload_deadline_at == e.t + 10'000);
  CHECK(res.record.stat == ledger::FileStat{1, 2, 3, 4});
  CHECK(e.rows("o") == before);
  const auto t = e.l.task_of(f.id);
  CHECK(t.status == TaskStatus::pending);
  CHECK(t.next_retry_at == e.t + 10'000 + k_grace);
  CHECK_FALSE(t.lease_owner.has_value());
  CHECK(t.retry_count == 0);
  CHECK(t.verify_pass == ledger::k_verify_none);
  auto h = e.l.history(f.id);
  REQUIRE(h.size() >= 2);
  CHECK(h[h.size() - 2] == "reserve #1 row UPLOAD_FAILED -> UPLOADING");
  CHECK(h.back() == "reserve #1 task PENDING -> PENDING");
  // An alive UPLOADING row now: the next reserve of it is in_progress; the old due time
  // claims nothing; a sweep's decide postpones it.
  CHECK(e.l.reserve(req, e.t).outcome == ReserveOutcome::in_progress);
  CHECK(e.l.claim_due(old_due, 10, "w", 60'000).empty());
  auto c = e.l.claim_task(t.id, t.next_retry_at, "w", 60'000);
  REQUIRE(c.has_value());
  CHECK(e.l.decide(*c, e.t, k_grace) == ledger::TaskDecision::postponed);
  CHECK(e.l.task_of(f.id).next_retry_at == t.next_retry_at);
}

TEST_CASE("fake ledger: no resumable row, a new row: the rules SqlLedger keeps") {
  Env e;
  struct Case {
    const char *name;
    std::function<void(ledger::ReserveRequest &)> request;
    std::function<void(Env &, int64_t)> after_failure;
    std::string handle;
  };
  const auto claim = [](Env &env, int64_t id) {
    const auto t = env.l.task_of(id);
    auto c = env.l.claim_task(t.id, t.next_retry_at, "sweep", 60'000);
    REQUIRE(c.has_value());
    return *c;
  };
  const std::vector<Case> cases = {
      {"no upload handle", nullptr, nullptr, ""},
      {"other size", [](auto &r) { r.size += 1; }, nullptr, "mpu-1"},
      {"other path", [](auto &r) { r.relative_path = "big/g.bin"; }, nullptr, "mpu-1"},
      {"other run prefix", [](auto &r) { r.run_prefix = "p"; }, nullptr, "mpu-1"},
      {"other store root", [](auto &r) { r.key_prefix = "x/"; }, nullptr, "mpu-1"},
      {"other content type", [](auto &r) { r.content_type = "application/x-tar"; }, nullptr, "mpu-1"},
      {"other object options", [](auto &r) { r.object_options = ""; }, nullptr, "mpu-1"},
      {"task PROCESSING", nullptr, [&](Env &env, int64_t id) { (void)claim(env, id); }, "mpu-1"},
      {"task SUCCESS", nullptr,
       [&](Env &env, int64_t id) {
         auto c = claim(env, id);
         REQUIRE(env.l.decide(c, c.next_retry_at, k_grace) == ledger::TaskDecision::allowed);
         REQUIRE(env.l.finish(c, true, "", 0, c.next_retry_at) == ledger::TaskFinish::success);
       },
       "mpu-1"},
      {"task IGNORED", nullptr,
       [&](Env &env, int64_t id) {
         auto c = claim(env, id);
         REQUIRE(env.l.ignore_task(c, c.next_retry_at, "not ours") == ledger::TaskFinish::success);
       },
       "mpu-1"},
  };
  int n = 0;
  for (const auto &k : cases) {
    CAPTURE(k.name);
    const std::string owner = "o-" + std::to_string(n++);
    auto req = staged(owner, "a");
    const auto f = e.failed(req, k.handle);
    if (k.after_failure) k.after_failure(e, f.id);
    const auto task_was = e.l.task_of(f.id);
    if (k.request) k.request(req);
    auto res = e.l.reserve(req, e.t);
    CHECK(res.outcome == ReserveOutcome::reserved);
    CHECK(res.record.id != f.id);
    CHECK(e.l.row(f.id).upload_status == FileStatus::upload_failed);
    CHECK(e.l.task_of(f.id).status == task_was.status);
    CHECK(e.l.task_of(f.id).next_retry_at == task_was.next_retry_at);
  }
}

TEST_CASE("fake ledger: resume after the quota and an alive duplicate; the newest row; a dry run") {
  Env e;
  auto req = staged("o", "a");
  const auto older = e.failed(req, "mpu-old");
  const auto newer = e.failed(req, "mpu-new");
  REQUIRE(e.l.reserve(staged("o", "b"), e.t).outcome == ReserveOutcome::reserved);
  // Quota: one alive row, a quota of one: refused as an insert would be.
  req.max_files = 1;
  CHECK(e.l.reserve(req, e.t).outcome == ReserveOutcome::quota_exceeded);
  CHECK(e.l.row(newer.id).upload_status == FileStatus::upload_failed);
  // A dry run: resumed, the newest row, nothing written.
  req.max_files = 2;
  req.dry_run = true;
  const auto transitions = e.l.transitions().size();
  auto dry = e.l.reserve(req, e.t);
  CHECK(dry.outcome == ReserveOutcome::resumed);
  CHECK(dry.record.id == newer.id);
  CHECK(dry.record.upload_status == FileStatus::uploading);
  CHECK(e.l.transitions().size() == transitions);
  CHECK(e.l.row(newer.id).upload_status == FileStatus::upload_failed);
  // For real: the newest is revived, the older left, and the quota now counts it.
  req.dry_run = false;
  auto res = e.l.reserve(req, e.t);
  CHECK(res.outcome == ReserveOutcome::resumed);
  CHECK(res.record.id == newer.id);
  CHECK(e.l.row(older.id).upload_status == FileStatus::upload_failed);
  auto third = staged("o", "c");
  third.max_files = 2;
  CHECK(e.l.reserve(third, e.t).outcome == ReserveOutcome::quota_exceeded);
  // An alive duplicate answers first: the revived row is in progress.
  CHECK(e.l.reserve(req, e.t).outcome == ReserveOutcome::in_progress);
}
