// The ledger contract: every transition's preconditions and outcomes, on whichever backend
// LODGE_TEST_LEDGER names (tests/ledger/backend.hpp). Time is the `now` each call is given.
#include "support.hpp"

#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <map>
#include <vector>

using namespace lodge;
using ledger::ReserveOutcome;
using test::LedgerFixture;
using test::request;
using test::sha;

namespace {
// Every field of a task, for "changed nothing" checks.
void check_same_task(const ledger::TaskRecord &a, const ledger::TaskRecord &b) {
  CHECK(a.id == b.id);
  CHECK(a.record_id == b.record_id);
  CHECK(a.status == b.status);
  CHECK(a.next_retry_at == b.next_retry_at);
  CHECK(a.retry_count == b.retry_count);
  CHECK(a.max_retries == b.max_retries);
  CHECK(a.lease_owner == b.lease_owner);
  CHECK(a.lease_until == b.lease_until);
  CHECK(a.lease_version == b.lease_version);
  CHECK(a.last_error == b.last_error);
  CHECK(a.updated_at == b.updated_at);
  CHECK(a.verify_pass == b.verify_pass);
}

void check_same_row(const ledger::FileRecord &a, const ledger::FileRecord &b) {
  CHECK(a.id == b.id);
  CHECK(a.upload_status == b.upload_status);
  CHECK(a.is_deleted == b.is_deleted);
  CHECK(a.failure_reason == b.failure_reason);
  CHECK(a.idempotency_key == b.idempotency_key);
  CHECK(a.etag == b.etag);
  CHECK(a.version_id == b.version_id);
  CHECK(a.multipart_upload_id == b.multipart_upload_id);
  CHECK(a.updated_at == b.updated_at);
  CHECK(a.activated_at == b.activated_at);
  CHECK(a.deleted_at == b.deleted_at);
}

size_t row_count(ledger::Ledger &l) {
  ledger::FileQuery f;
  f.owner = "*";
  f.include_dead = true;
  return l.list_files(f).size();
}

// Claims the task of `record_id` at its due time (or `at`), for worker w.
ledger::TaskRecord claim(LedgerFixture &e, int64_t record_id, int64_t at, const std::string &w = "w",
                         int64_t lease_ms = 60'000) {
  auto t = e.task_of(record_id);
  auto c = e.l->claim_task(t.id, at, w, lease_ms);
  REQUIRE(c.has_value());
  return *c;
}
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("reserve: a new UPLOADING row under the key format, and its task due at deadline + grace") {
  LedgerFixture e;
  auto r = request("alice", "a1");
  r.key_prefix = "root/";
  r.run_prefix = "nightly";
  r.relative_path = "src/main.c";
  r.original_name = "main.c";
  r.dedup = ledger::DedupScope::prefix;
  r.size = 42;
  auto res = e.l->reserve(r, e.now());
  REQUIRE(res.outcome == ReserveOutcome::reserved);
  const auto &row = res.record;
  CHECK(row.id >= 1);
  CHECK(row.owner_id == "alice");
  CHECK(row.original_name == "main.c");
  CHECK(row.relative_path == "src/main.c");
  CHECK(row.run_prefix == "nightly");
  CHECK(row.dedup_scope == ledger::DedupScope::prefix);
  CHECK(row.upload_status == ledger::FileStatus::uploading);
  CHECK_FALSE(row.is_deleted);
  CHECK(row.sha256 == sha("a1"));
  CHECK(row.size == 42);
  CHECK(row.created_at == e.now());
  CHECK(row.upload_deadline_at == e.now() + 10'000);
  CHECK_FALSE(row.activated_at.has_value());
  CHECK_FALSE(row.idempotency_key.has_value());
  // <root><owner>/<run prefix>/<uuid>/<relative path>
  const std::string head = "root/alice/nightly/", tail = "/src/main.c";
  REQUIRE(row.object_key.size() == head.size() + 36 + tail.size());
  CHECK(row.object_key.substr(0, head.size()) == head);
  CHECK(row.object_key.substr(head.size() + 36) == tail);
  std::string uuid = row.object_key.substr(head.size(), 36);
  CHECK(row.object_key == ledger::object_key_for("root/", "alice", "nightly", uuid, "src/main.c"));
  auto stored = e.row(row.id);
  CHECK(stored.object_key == row.object_key);
  check_same_row(stored, row);
  auto t = e.task_of(row.id);
  CHECK(t.task_type == "DELETE_OBJECT");
  CHECK(t.object_key == row.object_key);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == e.now() + 11'000);
  CHECK(t.retry_count == 0);
  CHECK(t.max_retries == 2);
  CHECK(t.lease_version == 0);
  CHECK_FALSE(t.lease_owner.has_value());
  CHECK(t.verify_pass == ledger::k_verify_none);
  // No relative path: the original name ends the key; no run prefix: no segment for it.
  auto plain = e.l->reserve(request("alice", "b2"), e.now());
  REQUIRE(plain.outcome == ReserveOutcome::reserved);
  CHECK(plain.record.relative_path == "f.txt");
  CHECK(plain.record.object_key.rfind("alice/", 0) == 0);
  CHECK(plain.record.object_key.size() == std::string("alice/").size() + 36 + std::string("/f.txt").size());
  CHECK(plain.record.id > row.id);
}

TEST_CASE("reserve: duplicate per de-dup scope (owner, prefix, none); in_progress for an UPLOADING one") {
  LedgerFixture e;
  auto in = [&](const std::string &owner, const std::string &prefix, ledger::DedupScope scope) {
    auto r = request(owner, "d0");
    r.run_prefix = prefix;
    r.dedup = scope;
    return e.l->reserve(r, e.now());
  };
  auto a = in("o", "p1", ledger::DedupScope::prefix);
  REQUIRE(a.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->confirm(a.record.id, "etag-a", "", e.now()) == test::confirm_outcome::confirmed);
  // owner: any alive row of the owner, whatever its prefix.
  auto d = in("o", "p2", ledger::DedupScope::owner);
  CHECK(d.outcome == ReserveOutcome::shareable);
  CHECK(d.record.id == a.record.id);
  // prefix: only a row under the same run prefix.
  CHECK(in("o", "p1", ledger::DedupScope::prefix).outcome == ReserveOutcome::duplicate);
  auto b = in("o", "p2", ledger::DedupScope::prefix);
  REQUIRE(b.outcome == ReserveOutcome::reserved);
  CHECK(b.record.id != a.record.id);
  // An UPLOADING row of the same content: in_progress, with that row.
  auto p = in("o", "p2", ledger::DedupScope::prefix);
  CHECK(p.outcome == ReserveOutcome::in_progress);
  CHECK(p.record.id == b.record.id);
  // owner scope with rows in two prefixes: the one in the request's prefix first ...
  auto own = in("o", "p2", ledger::DedupScope::owner);
  CHECK(own.outcome == ReserveOutcome::in_progress);
  CHECK(own.record.id == b.record.id);
  // ... else an ACTIVE one.
  auto other = in("o", "p3", ledger::DedupScope::owner);
  CHECK(other.outcome == ReserveOutcome::shareable);
  CHECK(other.record.id == a.record.id);
  // A dead row makes no duplicate.
  REQUIRE(e.l->soft_delete(a.record.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto after_delete = in("o", "p1", ledger::DedupScope::prefix);
  CHECK(after_delete.outcome == ReserveOutcome::reserved);
  // none: every upload is its own row, whatever is alive.
  auto n1 = in("o", "p1", ledger::DedupScope::none);
  auto n2 = in("o", "p1", ledger::DedupScope::none);
  CHECK(n1.outcome == ReserveOutcome::reserved);
  CHECK(n2.outcome == ReserveOutcome::reserved);
  CHECK(n1.record.id != n2.record.id);
  // Another owner's rows never make a duplicate.
  CHECK(in("someone", "p1", ledger::DedupScope::owner).outcome == ReserveOutcome::reserved);
  CHECK(row_count(*e.l) == 6);
}

TEST_CASE("reserve with an idempotency key: in_progress, replayed, key_reused; keys are per owner") {
  LedgerFixture e;
  auto r = request("o", "e1");
  r.idempotency_key = "run-1/file-1";
  auto first = e.l->reserve(r, e.now());
  REQUIRE(first.outcome == ReserveOutcome::reserved);
  CHECK(first.record.idempotency_key == "run-1/file-1");
  auto again = e.l->reserve(r, e.now());
  CHECK(again.outcome == ReserveOutcome::in_progress);
  CHECK(again.record.id == first.record.id);
  REQUIRE(e.l->confirm(first.record.id, "etag", "v1", e.now()) == test::confirm_outcome::confirmed);
  auto replay = e.l->reserve(r, e.now());
  CHECK(replay.outcome == ReserveOutcome::replayed);
  CHECK(replay.record.id == first.record.id);
  CHECK(replay.record.etag == "etag");
  // The key with other content is refused whatever the de-dup scope; nothing is written.
  auto other = r;
  other.sha256 = sha("e2");
  other.dedup = ledger::DedupScope::none;
  auto reused = e.l->reserve(other, e.now());
  CHECK(reused.outcome == ReserveOutcome::key_reused);
  CHECK(reused.record.id == first.record.id);
  CHECK(row_count(*e.l) == 1);
  // The same key for another owner is that owner's own.
  auto theirs = r;
  theirs.owner_id = "p";
  CHECK(e.l->reserve(theirs, e.now()).outcome == ReserveOutcome::reserved);
  CHECK(row_count(*e.l) == 2);
}

TEST_CASE("idempotency takeover: the key of a failed or deleted row goes to a new reserve") {
  LedgerFixture e;
  auto with_key = [](const std::string &seed, const std::string &key) {
    auto r = request("o", seed);
    r.idempotency_key = key;
    return r;
  };
  auto failed = e.l->reserve(with_key("f1", "k-failed"), e.now());
  REQUIRE(failed.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->mark_failed(failed.record.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto retry = e.l->reserve(with_key("f1", "k-failed"), e.now());
  REQUIRE(retry.outcome == ReserveOutcome::reserved);
  CHECK(retry.record.id != failed.record.id);
  CHECK(retry.record.idempotency_key == "k-failed");
  CHECK_FALSE(e.row(failed.record.id).idempotency_key.has_value());
  CHECK(e.row(failed.record.id).upload_status == ledger::FileStatus::upload_failed);

  auto deleted = e.l->reserve(with_key("f2", "k-deleted"), e.now());
  REQUIRE(deleted.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->confirm(deleted.record.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  REQUIRE(e.l->soft_delete(deleted.record.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto again = e.l->reserve(with_key("f2", "k-deleted"), e.now());
  REQUIRE(again.outcome == ReserveOutcome::reserved);
  CHECK(again.record.idempotency_key == "k-deleted");
  CHECK_FALSE(e.row(deleted.record.id).idempotency_key.has_value());
  // The new row is the key's now: a replay finds it.
  auto replay = e.l->reserve(with_key("f2", "k-deleted"), e.now());
  CHECK(replay.outcome == ReserveOutcome::in_progress);
  CHECK(replay.record.id == again.record.id);

  // A dead row's key with other content is still refused, and keeps its row.
  auto dead = e.l->reserve(with_key("f3", "k-dead"), e.now());
  REQUIRE(dead.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->mark_failed(dead.record.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto refused = e.l->reserve(with_key("f4", "k-dead"), e.now());
  CHECK(refused.outcome == ReserveOutcome::key_reused);
  CHECK(e.row(dead.record.id).idempotency_key == "k-dead");
  CHECK(row_count(*e.l) == 5);
}

TEST_CASE("reserve: the quota counts the owner's alive rows; dead ones free their slot at once") {
  LedgerFixture e;
  auto a = e.reserve("a", 2);
  e.reserve("b", 2);
  auto third = request("o", "c");
  third.max_files = 2;
  auto q = e.l->reserve(third, e.now());
  CHECK(q.outcome == ReserveOutcome::quota_exceeded);
  CHECK(row_count(*e.l) == 2);
  // A duplicate is reported as such at a full quota (it takes no slot).
  auto dup = request("o", "a");
  dup.max_files = 2;
  CHECK(e.l->reserve(dup, e.now()).outcome == ReserveOutcome::in_progress);
  // Another owner has a quota of its own.
  auto theirs = third;
  theirs.owner_id = "p";
  CHECK(e.l->reserve(theirs, e.now()).outcome == ReserveOutcome::reserved);
  // No max_files: no quota.
  third.max_files.reset();
  CHECK(e.l->reserve(third, e.now()).outcome == ReserveOutcome::reserved);
  third.sha256 = sha("d");
  third.max_files = 3;
  CHECK(e.l->reserve(third, e.now()).outcome == ReserveOutcome::quota_exceeded);
  REQUIRE(e.l->mark_failed(a.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(e.l->reserve(third, e.now()).outcome == ReserveOutcome::reserved);
}

TEST_CASE("reserve: id_limit_reached when the new id would pass the limit; nothing written") {
  LedgerFixture e;
  e.reserve("a");
  int64_t top = e.l->max_record_id();
  CHECK(top >= 1);
  auto r = request("o", "b");
  r.id_limit = top + 1;
  auto ok = e.l->reserve(r, e.now());
  REQUIRE(ok.outcome == ReserveOutcome::reserved);
  CHECK(ok.record.id == top + 1);
  r.sha256 = sha("c");
  CHECK(e.l->reserve(r, e.now()).outcome == ReserveOutcome::id_limit_reached);
  CHECK(row_count(*e.l) == 2); // nothing written
  // SQLite's rollback gives the id back; a PostgreSQL sequence is not transactional, so the
  // refused attempt used one up (a gap, nothing more). Either way no id is issued twice.
  int64_t issued = e.l->max_record_id();
  CHECK(issued >= top + 1);
  CHECK(issued <= top + 2);
  r.id_limit = issued + 1;
  auto next = e.l->reserve(r, e.now());
  REQUIRE(next.outcome == ReserveOutcome::reserved);
  CHECK(next.record.id == issued + 1);
}

TEST_CASE("set_multipart_upload_id: recorded on an UPLOADING row only") {
  LedgerFixture e;
  auto a = e.reserve("a");
  CHECK(e.l->set_multipart_upload_id(a.id, "mpu-1", e.now() + 1) == ledger::SetUploadIdOutcome::recorded);
  CHECK(e.row(a.id).multipart_upload_id == "mpu-1");
  CHECK(e.row(a.id).updated_at == e.now() + 1);
  CHECK(e.l->set_multipart_upload_id(a.id, "mpu-2", e.now() + 2) ==
        ledger::SetUploadIdOutcome::recorded); // a new attempt's id
  CHECK(e.row(a.id).multipart_upload_id == "mpu-2");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->set_multipart_upload_id(a.id, "mpu-3", e.now()) == ledger::SetUploadIdOutcome::not_uploading);
  CHECK(e.row(a.id).multipart_upload_id == "mpu-2");
  auto b = e.reserve("b");
  REQUIRE(e.l->mark_failed(b.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(e.l->set_multipart_upload_id(b.id, "mpu-4", e.now()) == ledger::SetUploadIdOutcome::not_uploading);
  CHECK_FALSE(e.row(b.id).multipart_upload_id.has_value());
  CHECK(e.l->set_multipart_upload_id(9999, "mpu-5", e.now()) == ledger::SetUploadIdOutcome::not_uploading);
}

TEST_CASE(
    "renew: moves an UPLOADING row's deadline and its task's not-before together, for its holder only") {
  LedgerFixture e;
  auto r = request("o", "a");
  r.holder = "host/1/100";
  auto res = e.l->reserve(r, e.now());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  const auto a = res.record;
  const int64_t d0 = a.upload_deadline_at;
  REQUIRE(e.task_of(a.id).next_retry_at == d0 + 1'000);

  // Within the deadline, by its holder: both move, in one transaction.
  const int64_t at = d0 - 1;
  CHECK(e.l->renew(a.id, "host/1/100", at + 10'000, at + 11'000, at) == ledger::RenewOutcome::renewed);
  CHECK(e.row(a.id).upload_deadline_at == at + 10'000);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::uploading);
  CHECK(e.task_of(a.id).next_retry_at == at + 11'000);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::pending);
  const int64_t d1 = at + 10'000;

  // Another sender, or none: nothing changes.
  CHECK(e.l->renew(a.id, "host/1/200", d1 + 5, d1 + 6, at + 1) == ledger::RenewOutcome::not_holder);
  CHECK(e.l->renew(a.id, "", d1 + 5, d1 + 6, at + 1) == ledger::RenewOutcome::not_holder);
  CHECK(e.row(a.id).upload_deadline_at == d1);
  CHECK(e.task_of(a.id).next_retry_at == at + 11'000);

  // At or after the current deadline (repair or sweep may act on it): never revived.
  CHECK(e.l->renew(a.id, "host/1/100", d1 + 10'000, d1 + 11'000, d1) == ledger::RenewOutcome::past_deadline);
  CHECK(e.l->renew(a.id, "host/1/100", d1 + 10'000, d1 + 11'000, d1 + 1) ==
        ledger::RenewOutcome::past_deadline);
  CHECK(e.row(a.id).upload_deadline_at == d1);
  CHECK(e.task_of(a.id).next_retry_at == at + 11'000);

  // A failed row: nothing changes, its task stays due.
  auto r2 = request("o", "b");
  r2.holder = "host/1/100";
  auto b = e.l->reserve(r2, e.now()).record;
  REQUIRE(e.l->mark_failed(b.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  const auto tb = e.task_of(b.id);
  CHECK(e.l->renew(b.id, "host/1/100", e.now() + 50'000, e.now() + 51'000, e.now()) ==
        ledger::RenewOutcome::not_uploading);
  CHECK(e.row(b.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK(e.row(b.id).upload_deadline_at == b.upload_deadline_at);
  CHECK(e.task_of(b.id).next_retry_at == tb.next_retry_at);

  // Confirmed (ACTIVE) or unknown: not_uploading.
  auto r3 = request("o", "c");
  r3.holder = "host/1/100";
  auto c = e.l->reserve(r3, e.now()).record;
  REQUIRE(e.l->confirm(c.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->renew(c.id, "host/1/100", e.now() + 50'000, e.now() + 51'000, e.now()) ==
        ledger::RenewOutcome::not_uploading);
  CHECK(e.task_of(c.id).status == ledger::TaskStatus::ignored);
  CHECK(e.l->renew(9999, "host/1/100", 1, 2, e.now()) == ledger::RenewOutcome::not_uploading);
}

TEST_CASE(
    "renew: a row failed by repair past its deadline stays failed; a sweep's held task is left to decide") {
  LedgerFixture e;
  auto r = request("o", "a");
  r.holder = "host/1/100";
  auto a = e.l->reserve(r, e.now()).record;
  const int64_t past = a.upload_deadline_at + 1;
  REQUIRE(e.l->repair_row(a.id, past, 1'000, 2) == ledger::RepairOutcome::repaired);
  const auto t = e.task_of(a.id);
  CHECK(e.l->renew(a.id, "host/1/100", past + 10'000, past + 11'000, a.upload_deadline_at - 1) ==
        ledger::RenewOutcome::not_uploading);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK(e.row(a.id).upload_deadline_at == a.upload_deadline_at);
  CHECK(e.task_of(a.id).next_retry_at == t.next_retry_at);
}

TEST_CASE("confirm: UPLOADING -> ACTIVE and its task IGNORED, together") {
  LedgerFixture e;
  auto a = e.reserve("a");
  auto b = e.reserve("b");
  REQUIRE(e.l->confirm(a.id, "etag-a", "ver-1", e.now() + 5) == test::confirm_outcome::confirmed);
  auto row = e.row(a.id);
  CHECK(row.upload_status == ledger::FileStatus::active);
  CHECK(row.etag == "etag-a");
  CHECK(row.version_id == "ver-1");
  CHECK(row.activated_at == e.now() + 5);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(a.id).lease_owner.has_value());
  // No version id (an unversioned bucket) is stored as none.
  REQUIRE(e.l->confirm(b.id, "etag-b", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK_FALSE(e.row(b.id).version_id.has_value());
  // Twice: the row moved on.
  CHECK(e.l->confirm(a.id, "etag-x", "", e.now()) == test::confirm_outcome::row_not_uploading);
  CHECK(e.row(a.id).etag == "etag-a");
  CHECK(e.l->confirm(9999, "etag", "", e.now()) == test::confirm_outcome::row_not_uploading);
}

TEST_CASE("confirm: refused when the row moved on (failed, repaired) and when a sweep holds the task") {
  LedgerFixture e;
  // Moved on: failed by the upload itself, or repaired past its deadline.
  auto failed = e.reserve("a");
  REQUIRE(e.l->mark_failed(failed.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto before = e.row(failed.id);
  CHECK(e.l->confirm(failed.id, "etag", "", e.now()) == test::confirm_outcome::row_not_uploading);
  check_same_row(e.row(failed.id), before);
  auto repaired = e.reserve("b");
  REQUIRE(e.l->repair_row(repaired.id, repaired.upload_deadline_at + 1, 1'000, 3) ==
          ledger::RepairOutcome::repaired);
  CHECK(e.l->confirm(repaired.id, "etag", "", e.now()) == test::confirm_outcome::row_not_uploading);
  CHECK(e.row(repaired.id).upload_status == ledger::FileStatus::upload_failed);
  // Held: a sweep claimed the task (its delete may be under way): the row stays
  // UPLOADING and the task the sweep's, as they were.
  auto held = e.reserve("c");
  auto t = claim(e, held.id, held.upload_deadline_at + 1'000);
  auto row_before = e.row(held.id);
  CHECK(e.l->confirm(held.id, "etag", "", e.now()) == test::confirm_outcome::task_held);
  check_same_row(e.row(held.id), row_before);
  check_same_task(e.task_of(held.id), t);
  CHECK(e.task_of(held.id).status == ledger::TaskStatus::processing);
}

TEST_CASE("mark_failed: run_now makes the task due at once; a failure not definite owes a verify pass") {
  LedgerFixture e;
  auto definite = e.reserve("a");
  auto ambiguous = e.reserve("b");
  auto t_amb = e.task_of(ambiguous.id);
  int64_t at = e.now() + 7;
  REQUIRE(e.l->mark_failed(definite.id, "403 refused", true, at) == ledger::MarkFailedOutcome::failed);
  auto row = e.row(definite.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(row.failure_reason == "403 refused");
  CHECK(row.deleted_at == at);
  auto t = e.task_of(definite.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == at);
  CHECK(t.verify_pass == ledger::k_verify_none);
  REQUIRE(e.l->mark_failed(ambiguous.id, "no answer", false, at) == ledger::MarkFailedOutcome::failed);
  auto ta = e.task_of(ambiguous.id);
  CHECK(ta.next_retry_at == t_amb.next_retry_at); // not sooner: the PUT may still land
  CHECK(ta.verify_pass == ledger::k_verify_owed);
  // Only an UPLOADING row fails.
  CHECK(e.l->mark_failed(definite.id, "again", true, at) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.row(definite.id).failure_reason == "403 refused");
  auto active = e.reserve("c");
  REQUIRE(e.l->confirm(active.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->mark_failed(active.id, "late", true, at) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(e.row(active.id).upload_status == ledger::FileStatus::active);
  // A task a worker holds still learns that it owes a verify pass.
  auto held = e.reserve("d");
  auto claimed = claim(e, held.id, held.upload_deadline_at + 1'000);
  REQUIRE(e.l->mark_failed(held.id, "timeout", false, at) == ledger::MarkFailedOutcome::failed);
  auto th = e.task_of(held.id);
  CHECK(th.status == ledger::TaskStatus::processing);
  CHECK(th.lease_version == claimed.lease_version);
  CHECK(th.verify_pass == ledger::k_verify_owed);
}

TEST_CASE("claim_due and claim_task: due or not, expired leases reclaimed, lease_version + 1") {
  LedgerFixture e;
  auto a = e.reserve("a");
  e.clock.t += 10;
  auto b = e.reserve("b");
  int64_t due_a = e.task_of(a.id).next_retry_at, due_b = e.task_of(b.id).next_retry_at;
  REQUIRE(due_b == due_a + 10);
  // Not due yet.
  CHECK(e.l->claim_due(due_a - 1, 10, "A", 1'000).empty());
  CHECK_FALSE(e.l->claim_task(e.task_of(a.id).id, due_a - 1, "A", 1'000).has_value());
  CHECK(e.l->due_tasks(due_a - 1, 10).empty());
  // Due: oldest first, up to the limit; due_tasks lists without claiming.
  auto listed = e.l->due_tasks(due_b, 10);
  REQUIRE(listed.size() == 2);
  CHECK(listed[0].record_id == a.id);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::pending);
  auto first = e.l->claim_due(due_b, 1, "A", 1'000);
  REQUIRE(first.size() == 1);
  CHECK(first[0].record_id == a.id);
  CHECK(first[0].status == ledger::TaskStatus::processing);
  CHECK(first[0].lease_owner == "A");
  CHECK(first[0].lease_until == due_b + 1'000);
  CHECK(first[0].lease_version == 1);
  check_same_task(e.task_of(a.id), first[0]);
  auto rest = e.l->claim_due(due_b, 10, "A", 1'000);
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].record_id == b.id);
  // A live lease is nobody else's to take, by either call, up to and at lease_until.
  int64_t until = due_b + 1'000;
  CHECK(e.l->claim_due(until, 10, "B", 1'000).empty());
  CHECK_FALSE(e.l->claim_task(first[0].id, until, "B", 1'000).has_value());
  CHECK(e.l->due_tasks(until, 10).empty());
  // Expired: reclaimed under the next lease_version.
  auto again = e.l->claim_task(first[0].id, until + 1, "B", 500);
  REQUIRE(again.has_value());
  CHECK(again->lease_owner == "B");
  CHECK(again->lease_until == until + 501);
  CHECK(again->lease_version == 2);
  auto both = e.l->claim_due(until + 1, 10, "C", 1'000);
  REQUIRE(both.size() == 1); // only b's: a's lease (B's) is live
  CHECK(both[0].record_id == b.id);
  CHECK(both[0].lease_version == 2);
  // Finished tasks are never due.
  REQUIRE(e.l->finish(*again, true, "", 0, until + 2) == ledger::TaskFinish::success);
  CHECK(e.l->claim_due(until + 1'000'000, 10, "C", 1'000).size() == 1);
  CHECK_FALSE(e.l->claim_task(first[0].id, until + 1'000'000, "C", 1'000).has_value());
  CHECK_FALSE(e.l->claim_task(9999, until, "C", 1'000).has_value());
}

TEST_CASE("decide: postponed for an UPLOADING row within its deadline, ignored for an ACTIVE one") {
  LedgerFixture e;
  auto a = e.reserve("a");
  // A task put back early while its upload runs (by hand, or a requeue).
  auto t = claim(e, a.id, a.upload_deadline_at + 1'000);
  CHECK(e.l->decide(t, e.now(), 2'000) == ledger::TaskDecision::postponed);
  auto back = e.task_of(a.id);
  CHECK(back.status == ledger::TaskStatus::pending);
  CHECK(back.next_retry_at == a.upload_deadline_at + 2'000); // deadline + the grace given
  CHECK_FALSE(back.lease_owner.has_value());
  CHECK(back.verify_pass == ledger::k_verify_none);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::uploading);
  // Postponed, the lease is gone.
  CHECK(e.l->decide(t, e.now(), 2'000) == ledger::TaskDecision::lease_lost);

  auto b = e.reserve("b");
  REQUIRE(e.l->confirm(b.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  // An ACTIVE row's task made due by hand: the object is in use, the task is ignored.
  e.fresh.set_task_pending(b.id, 0);
  auto tb = claim(e, b.id, e.now());
  CHECK(e.l->decide(tb, e.now(), 1'000) == ledger::TaskDecision::ignored);
  CHECK(e.task_of(b.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(b.id).lease_owner.has_value());
  CHECK(e.row(b.id).upload_status == ledger::FileStatus::active);
}

TEST_CASE("decide: allowed for a dead row; an overdue row is failed and owes a verify pass") {
  LedgerFixture e;
  auto dead = e.reserve("a");
  REQUIRE(e.l->mark_failed(dead.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = claim(e, dead.id, e.now());
  CHECK(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::allowed);
  auto still = e.task_of(dead.id);
  CHECK(still.status == ledger::TaskStatus::processing); // the worker's to finish
  CHECK(still.lease_version == t.lease_version);
  CHECK(still.verify_pass == ledger::k_verify_none);

  // Overdue and past deadline + grace: failed here and allowed, a verify pass owed.
  auto late = e.reserve("b");
  int64_t past = late.upload_deadline_at + 1'000;
  auto tl = claim(e, late.id, past);
  CHECK(e.l->decide(tl, past, 1'000) == ledger::TaskDecision::allowed);
  auto row = e.row(late.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.is_deleted);
  REQUIRE(row.failure_reason.has_value());
  CHECK(row.failure_reason->find("DEADLINE_EXCEEDED") == 0);
  CHECK(e.task_of(late.id).status == ledger::TaskStatus::processing);
  CHECK(e.task_of(late.id).verify_pass == ledger::k_verify_owed);

  // Overdue but within a longer grace: failed here, postponed to deadline + grace, owed.
  auto within = e.reserve("c");
  int64_t soon = within.upload_deadline_at + 1'000;
  auto tw = claim(e, within.id, soon);
  CHECK(e.l->decide(tw, soon, 5'000) == ledger::TaskDecision::postponed);
  CHECK(e.row(within.id).upload_status == ledger::FileStatus::upload_failed);
  auto pw = e.task_of(within.id);
  CHECK(pw.status == ledger::TaskStatus::pending);
  CHECK(pw.next_retry_at == within.upload_deadline_at + 5'000);
  CHECK(pw.verify_pass == ledger::k_verify_owed);
  CHECK(e.l->claim_due(soon, 10, "w", 1'000).empty()); // not due again in the same run
}

TEST_CASE("decide: lease_lost when the task is not ours any more, and nothing changes") {
  LedgerFixture e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = claim(e, a.id, e.now());
  REQUIRE(e.l->finish(t, true, "", 0, e.now()) == ledger::TaskFinish::success);
  auto done = e.task_of(a.id);
  CHECK(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::lease_lost);
  check_same_task(e.task_of(a.id), done);
  auto bogus = t;
  bogus.id = 9999;
  CHECK(e.l->decide(bogus, e.now(), 1'000) == ledger::TaskDecision::lease_lost);
}

TEST_CASE("finish: success, verify_scheduled, retry, dead_letter after max_retries, lease_lost") {
  LedgerFixture e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = claim(e, a.id, e.now());
  CHECK(e.l->finish(t, true, "", 0, e.now() + 1) == ledger::TaskFinish::success);
  auto s = e.task_of(a.id);
  CHECK(s.status == ledger::TaskStatus::success);
  CHECK_FALSE(s.lease_owner.has_value());
  CHECK_FALSE(s.lease_until.has_value());
  CHECK(s.updated_at == e.now() + 1);
  CHECK(e.l->finish(t, true, "", 0, e.now()) == ledger::TaskFinish::lease_lost);

  // Owed a verify pass: the delete is followed by one more, due at next_retry_at.
  auto b = e.reserve("b");
  REQUIRE(e.l->mark_failed(b.id, "no answer", false, e.now()) == ledger::MarkFailedOutcome::failed);
  auto tb = claim(e, b.id, b.upload_deadline_at + 1'000);
  CHECK(e.l->finish(tb, true, "", b.upload_deadline_at + 50'000, e.now()) ==
        ledger::TaskFinish::verify_scheduled);
  auto v = e.task_of(b.id);
  CHECK(v.status == ledger::TaskStatus::pending);
  CHECK(v.next_retry_at == b.upload_deadline_at + 50'000);
  CHECK(v.verify_pass == ledger::k_verify_due);
  auto tv = claim(e, b.id, v.next_retry_at);
  CHECK(tv.lease_version == tb.lease_version + 1);
  CHECK(e.l->finish(tv, true, "", 0, e.now()) == ledger::TaskFinish::success); // the verify pass ends it

  // Failures: RETRY due at next_retry_at until retry_count passes max_retries (2), then FAILED.
  auto c = e.reserve("c");
  REQUIRE(e.l->mark_failed(c.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  int64_t at = e.now();
  for (int i = 1; i <= 2; ++i) {
    auto tc = claim(e, c.id, at);
    CHECK(e.l->finish(tc, false, "outage " + std::to_string(i), at + 100, at) == ledger::TaskFinish::retry);
    auto r = e.task_of(c.id);
    CHECK(r.status == ledger::TaskStatus::retry);
    CHECK(r.retry_count == i);
    CHECK(r.next_retry_at == at + 100);
    CHECK(r.last_error == "outage " + std::to_string(i));
    CHECK_FALSE(r.lease_owner.has_value());
    CHECK(e.l->claim_due(at + 99, 10, "w", 1'000).empty());
    at += 100;
  }
  auto last = claim(e, c.id, at);
  CHECK(e.l->finish(last, false, "outage 3", at + 100, at) == ledger::TaskFinish::dead_letter);
  auto dl = e.task_of(c.id);
  CHECK(dl.status == ledger::TaskStatus::failed);
  CHECK(dl.retry_count == 3);
  CHECK(dl.last_error == "outage 3");
  CHECK(e.l->claim_due(at + 1'000'000, 10, "w", 1'000).empty());
  if (e.fresh.reports_status()) CHECK(e.l->status(at).dead_letters == 1);
  CHECK(e.l->finish(last, false, "again", at, at) == ledger::TaskFinish::lease_lost);
}

TEST_CASE("retry_task: a dead letter is PENDING again, due now, retries reset; nothing else is") {
  LedgerFixture e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = claim(e, a.id, e.now());
  REQUIRE(e.l->dead_letter(t, "foreign object at the key", e.now()) ==
          ledger::DeadLetterOutcome::dead_lettered);
  int64_t later = e.now() + 5'000;
  REQUIRE(e.l->retry_task(t.id, later) == ledger::RetryOutcome::requeued);
  auto r = e.task_of(a.id);
  CHECK(r.status == ledger::TaskStatus::pending);
  CHECK(r.next_retry_at == later);
  CHECK(r.retry_count == 0);
  CHECK_FALSE(r.lease_owner.has_value());
  CHECK(e.l->retry_task(t.id, later) == ledger::RetryOutcome::not_failed); // PENDING, not FAILED
  auto b = e.reserve("b");
  CHECK(e.l->retry_task(e.task_of(b.id).id, later) == ledger::RetryOutcome::not_failed);
  CHECK(e.l->retry_task(9999, later) == ledger::RetryOutcome::not_failed);
  auto claimed = e.l->claim_due(later, 10, "w", 1'000);
  REQUIRE(claimed.size() == 1);
  CHECK(claimed[0].record_id == a.id);
}

TEST_CASE("overdue_uploads and repair_row: only alive UPLOADING rows past their deadline") {
  LedgerFixture e;
  auto a = e.reserve("a");
  e.clock.t += 100;
  auto b = e.reserve("b");
  auto c = e.reserve("c");
  REQUIRE(e.l->confirm(c.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  // At the deadline itself a row is not overdue yet.
  CHECK(e.l->overdue_uploads(a.upload_deadline_at, 10).empty());
  CHECK(e.l->repair_row(a.id, a.upload_deadline_at, 1'000, 3) == ledger::RepairOutcome::not_overdue);
  int64_t late = b.upload_deadline_at + 1;
  auto over = e.l->overdue_uploads(late, 10);
  REQUIRE(over.size() == 2);
  CHECK(over[0].id == a.id); // oldest deadline first
  CHECK(over[1].id == b.id);
  REQUIRE(e.l->overdue_uploads(late, 1).size() == 1);
  // Repaired: failed and dead, the task pending no sooner than deadline + grace, owing a pass.
  REQUIRE(e.l->repair_row(a.id, late, 5'000, 3) == ledger::RepairOutcome::repaired);
  auto row = e.row(a.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(row.deleted_at == late);
  REQUIRE(row.failure_reason.has_value());
  CHECK(row.failure_reason->find("DEADLINE_EXCEEDED") == 0);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == a.upload_deadline_at + 5'000);
  CHECK(t.verify_pass == ledger::k_verify_owed);
  CHECK(e.l->repair_row(a.id, late, 5'000, 3) == ledger::RepairOutcome::not_overdue);           // once
  CHECK(e.l->repair_row(c.id, late + 100'000, 5'000, 3) == ledger::RepairOutcome::not_overdue); // ACTIVE
  CHECK(e.l->repair_row(9999, late, 5'000, 3) == ledger::RepairOutcome::not_overdue);
  over = e.l->overdue_uploads(late, 10);
  REQUIRE(over.size() == 1);
  CHECK(over[0].id == b.id);
  // Past deadline + grace: due at once.
  int64_t much_later = b.upload_deadline_at + 60'000;
  REQUIRE(e.l->repair_row(b.id, much_later, 5'000, 3) == ledger::RepairOutcome::repaired);
  CHECK(e.task_of(b.id).next_retry_at == much_later);
  CHECK(e.l->overdue_uploads(much_later, 10).empty());
}

TEST_CASE("soft_delete: deleted, not_found for another owner or no row, not_active") {
  LedgerFixture e;
  auto a = e.reserve("a", 1);
  CHECK(e.l->soft_delete(a.id, "o", e.now(), 5'000, 3) == ledger::DeleteOutcome::not_active); // UPLOADING
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->soft_delete(a.id, "someone-else", e.now(), 5'000, 3) == ledger::DeleteOutcome::not_found);
  CHECK_FALSE(e.row(a.id).is_deleted);
  CHECK(e.l->soft_delete(9999, "o", e.now(), 5'000, 3) == ledger::DeleteOutcome::not_found);
  CHECK(e.l->soft_delete(a.id, "o", e.now(), 5'000, 4) == ledger::DeleteOutcome::deleted);
  auto row = e.row(a.id);
  CHECK(row.is_deleted);
  CHECK(row.upload_status == ledger::FileStatus::active);
  CHECK(row.deleted_at == e.now());
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == e.now() + 5'000);
  CHECK(t.retry_count == 0);
  CHECK(t.verify_pass == ledger::k_verify_none);
  CHECK(e.l->claim_due(e.now() + 4'999, 10, "w", 1'000).empty());
  CHECK(e.l->soft_delete(a.id, "o", e.now(), 5'000, 3) == ledger::DeleteOutcome::not_active);
  e.reserve("b", 1); // the quota slot is free at once
}

TEST_CASE("mark_missing: an alive ACTIVE row is soft-deleted with the reason and its task queued") {
  LedgerFixture e;
  auto a = e.reserve("a", 1);
  CHECK(e.l->mark_missing(a.id, "gone", e.now(), 1'000, 3) ==
        ledger::MissingOutcome::not_active); // UPLOADING
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  REQUIRE(e.l->mark_missing(a.id, "MISSING: not in the store", e.now(), 2'000, 3) ==
          ledger::MissingOutcome::marked_missing);
  auto row = e.row(a.id);
  CHECK(row.is_deleted);
  CHECK(row.failure_reason == "MISSING: not in the store");
  CHECK(row.deleted_at == e.now());
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == e.now() + 2'000);
  CHECK(e.l->mark_missing(a.id, "gone again", e.now(), 1'000, 3) == ledger::MissingOutcome::not_active);
  CHECK(e.row(a.id).failure_reason == "MISSING: not in the store");
  CHECK(e.l->mark_missing(9999, "gone", e.now(), 1'000, 3) == ledger::MissingOutcome::not_active);
  // Its de-dup slot and quota are free: the same content reserves anew.
  CHECK(e.l->reserve(
               [] {
                 auto r = request("o", "a");
                 r.max_files = 1;
                 return r;
               }(),
               e.now())
            .outcome == ReserveOutcome::reserved);
}

TEST_CASE("requeue_task_for: queued for a dead row's finished task, not_dead, held") {
  LedgerFixture e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto claimed = claim(e, a.id, e.now());
  CHECK(e.l->requeue_task_for(a.id, e.now(), 3) == ledger::QueueOutcome::held);
  check_same_task(e.task_of(a.id), claimed);
  auto alive = e.reserve("b");
  CHECK(e.l->requeue_task_for(alive.id, e.now(), 3) == ledger::QueueOutcome::not_dead);
  auto active = e.reserve("c");
  REQUIRE(e.l->confirm(active.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.l->requeue_task_for(active.id, e.now(), 3) == ledger::QueueOutcome::not_dead);
  CHECK(e.task_of(active.id).status == ledger::TaskStatus::ignored);
  CHECK(e.l->requeue_task_for(9999, e.now(), 3) == ledger::QueueOutcome::not_dead);
  REQUIRE(e.l->finish(claimed, true, "", 0, e.now()) == ledger::TaskFinish::success);
  int64_t later = e.now() + 3'000;
  CHECK(e.l->requeue_task_for(a.id, later, 5) == ledger::QueueOutcome::queued);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == later);
  CHECK(t.retry_count == 0);
  CHECK(t.lease_version == claimed.lease_version); // versions only grow, with claims
  // Already pending: queued, and no sooner.
  CHECK(e.l->requeue_task_for(a.id, later + 10, 5) == ledger::QueueOutcome::queued);
  CHECK(e.task_of(a.id).next_retry_at == later + 10);
  auto again = e.l->claim_due(later + 10, 10, "w", 1'000);
  REQUIRE(again.size() == 1);
  CHECK(again[0].lease_version == claimed.lease_version + 1);
}

TEST_CASE("dead_letter: FAILED at once with the error, only under the caller's lease") {
  LedgerFixture e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = claim(e, a.id, e.now());
  REQUIRE(e.l->dead_letter(t, "the object at the key is not this row's", e.now() + 1) ==
          ledger::DeadLetterOutcome::dead_lettered);
  auto d = e.task_of(a.id);
  CHECK(d.status == ledger::TaskStatus::failed);
  CHECK(d.last_error == "the object at the key is not this row's");
  CHECK_FALSE(d.lease_owner.has_value());
  CHECK(d.updated_at == e.now() + 1);
  CHECK(e.l->dead_letter(t, "twice", e.now()) == ledger::DeadLetterOutcome::lease_lost);
  CHECK(e.task_of(a.id).last_error == "the object at the key is not this row's");
  if (e.fresh.reports_status()) CHECK(e.l->status(e.now()).dead_letters == 1);
}

TEST_CASE("fencing: a stale lease_version changes nothing in decide, finish or dead_letter") {
  LedgerFixture e;
  // Tasks in the states decide acts on: dead row (allowed), ACTIVE row (ignored), UPLOADING
  // row not overdue (postponed), overdue row (fails the row).
  auto dead = e.reserve("a");
  REQUIRE(e.l->mark_failed(dead.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto overdue = e.reserve("b");
  int64_t t0 = overdue.upload_deadline_at + 1'000;
  std::vector<int64_t> rows{dead.id, overdue.id};
  std::vector<ledger::TaskRecord> stale;
  for (auto id : rows)
    stale.push_back(claim(e, id, t0, "A", 1'000));
  // A's leases expire; B re-claims every task.
  int64_t t1 = t0 + 2'000;
  auto fresh = e.l->claim_due(t1, 10, "B", 60'000);
  REQUIRE(fresh.size() == 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    auto task_before = e.task_of(rows[i]);
    auto row_before = e.row(rows[i]);
    CHECK(task_before.lease_version == stale[i].lease_version + 1);
    CHECK(e.l->decide(stale[i], t1, 1'000) == ledger::TaskDecision::lease_lost);
    CHECK(e.l->decide(stale[i], t1, 100'000) == ledger::TaskDecision::lease_lost);
    CHECK(e.l->finish(stale[i], true, "", t1 + 5, t1) == ledger::TaskFinish::lease_lost);
    CHECK(e.l->finish(stale[i], false, "err", t1 + 5, t1) == ledger::TaskFinish::lease_lost);
    CHECK(e.l->dead_letter(stale[i], "stale", t1) == ledger::DeadLetterOutcome::lease_lost);
    check_same_task(e.task_of(rows[i]), task_before);
    check_same_row(e.row(rows[i]), row_before);
    CHECK(e.row(rows[i]).upload_status == row_before.upload_status); // overdue: still UPLOADING
  }
  // B's current leases work.
  for (const auto &t : fresh)
    CHECK(e.l->decide(t, t1, 1'000) == ledger::TaskDecision::allowed);
  // The same lease_version after B's lease expired and C re-claimed: stale again.
  auto c = e.l->claim_due(t1 + 120'000, 10, "C", 1'000);
  REQUIRE(c.size() == 2);
  for (const auto &t : fresh) {
    auto before = e.task_of(t.record_id);
    CHECK(e.l->finish(t, true, "", 0, t1 + 120'000) == ledger::TaskFinish::lease_lost);
    CHECK(e.l->dead_letter(t, "stale", t1 + 120'000) == ledger::DeadLetterOutcome::lease_lost);
    check_same_task(e.task_of(t.record_id), before);
  }
}

TEST_CASE("rows_by_key: byte order of key, bounded by the prefix, after a key") {
  LedgerFixture e;
  // Keys begin with the store root given at reserve: ASCII, '~', and UTF-8 (é = C3 A9,
  // ÿ = C3 BF, ā = C4 81). Byte order: Z < a < ~ < é < ÿ < ā; a locale's collation would say
  // otherwise. Keys and prefixes are whole UTF-8 characters (PostgreSQL stores no other
  // text), so the prefix bound of "…ÿ" (C3 BF, whose last byte + 1 makes no character)
  // must still find "…ÿ…" and nothing past it.
  std::vector<std::string> roots{
      "r/a/",        "r/Z/", "r/~/", "r/\xC3\xA9/", "r/\xC3\xBF/", "r/\xC3\xBF\xC3\xBF/",
      "r/\xC4\x81/", "s/a/", "q/a/", "r/aa/"};
  std::map<std::string, std::string> key_of_root;
  int n = 0;
  for (const auto &root : roots) {
    auto r = request("o", "f" + std::to_string(n++));
    r.key_prefix = root;
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    key_of_root[root] = res.record.object_key;
  }
  auto keys = [&](const std::string &prefix, const std::string &after, size_t stop_after = 1000) {
    std::vector<std::string> out;
    e.l->rows_by_key(prefix, after, [&](const ledger::FileRecord &r) {
      out.push_back(r.object_key);
      return out.size() < stop_after;
    });
    return out;
  };
  auto expect = [&](std::initializer_list<const char *> rs) {
    std::vector<std::string> out;
    for (const char *r : rs)
      out.push_back(key_of_root.at(r));
    return out;
  };
  CHECK(keys("r/", "") == expect({"r/Z/", "r/a/", "r/aa/", "r/~/", "r/\xC3\xA9/", "r/\xC3\xBF/",
                                  "r/\xC3\xBF\xC3\xBF/", "r/\xC4\x81/"}));
  CHECK(keys("", "") == expect({"q/a/", "r/Z/", "r/a/", "r/aa/", "r/~/", "r/\xC3\xA9/", "r/\xC3\xBF/",
                                "r/\xC3\xBF\xC3\xBF/", "r/\xC4\x81/", "s/a/"}));
  CHECK(keys("r/a", "") == expect({"r/a/", "r/aa/"}));
  CHECK(keys("r/a/", "") == expect({"r/a/"}));
  CHECK(keys("r/\xC3\xBF", "") == expect({"r/\xC3\xBF/", "r/\xC3\xBF\xC3\xBF/"}));
  CHECK(keys("r/\xC3\xBF\xC3\xBF", "") == expect({"r/\xC3\xBF\xC3\xBF/"}));
  CHECK(keys("r/~", "") == expect({"r/~/"}));
  CHECK(keys("t/", "").empty());
  // After a key (a listing's continuation): strictly after it.
  CHECK(keys("r/", key_of_root.at("r/~/")) ==
        expect({"r/\xC3\xA9/", "r/\xC3\xBF/", "r/\xC3\xBF\xC3\xBF/", "r/\xC4\x81/"}));
  CHECK(keys("r/", "r/b") ==
        expect({"r/~/", "r/\xC3\xA9/", "r/\xC3\xBF/", "r/\xC3\xBF\xC3\xBF/", "r/\xC4\x81/"}));
  // The visitor stops the walk.
  CHECK(keys("r/", "", 2) == expect({"r/Z/", "r/a/"}));
  // Dead rows are walked too (their objects may be leftovers).
  REQUIRE(e.l->mark_failed(e.l->list_files({.owner = "o", .include_dead = false}).front().id, "x", true,
                           e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(keys("", "").size() == roots.size());
}

TEST_CASE("max_record_id: the highest id ever issued, 0 for a new ledger") {
  LedgerFixture e;
  CHECK(e.l->max_record_id() == 0);
  auto a = e.reserve("a");
  auto b = e.reserve("b");
  CHECK(e.l->max_record_id() == b.id);
  CHECK(b.id > a.id);
  REQUIRE(e.l->mark_failed(b.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(e.l->max_record_id() == b.id);
  CHECK(e.l->id_blocks().sequence == b.id);
}

TEST_CASE("id blocks: begin_id_block only from the expected intent and forward; end_id_block only grows") {
  LedgerFixture e;
  auto s = e.l->id_blocks();
  CHECK(s.sequence == 0);
  CHECK(s.block_end == 0);
  CHECK(s.block_intent == 0);
  CHECK_FALSE(s.diverged.has_value());
  CHECK(e.l->begin_id_block(0, 100, e.now()) == ledger::BlockOutcome::begun);
  s = e.l->id_blocks();
  CHECK(s.block_intent == 100);
  CHECK(s.block_end == 0);
  CHECK(e.l->begin_id_block(0, 200, e.now()) == ledger::BlockOutcome::moved);   // another process moved it
  CHECK(e.l->begin_id_block(100, 100, e.now()) == ledger::BlockOutcome::moved); // not forward
  CHECK(e.l->begin_id_block(100, 50, e.now()) == ledger::BlockOutcome::moved);
  CHECK(e.l->id_blocks().block_intent == 100);
  e.l->end_id_block(100, e.now());
  s = e.l->id_blocks();
  CHECK(s.block_end == 100);
  CHECK(s.block_intent == 100);
  e.l->end_id_block(50, e.now());
  CHECK(e.l->id_blocks().block_end == 100);
  CHECK(e.l->begin_id_block(100, 200, e.now()) == ledger::BlockOutcome::begun);
  e.l->end_id_block(200, e.now());
  s = e.l->id_blocks();
  CHECK(s.block_end == 200);
  CHECK(s.block_intent == 200);
  // Another connection sees the same state.
  auto other = e.connect();
  CHECK(other->id_blocks().block_end == 200);
  CHECK(other->begin_id_block(100, 300, e.now()) == ledger::BlockOutcome::moved);
}

TEST_CASE("divergence: recorded once, raises the sequence past the mark; reconciled, then accepted") {
  LedgerFixture e;
  e.reserve("a");
  auto b = e.reserve("b");
  CHECK(e.l->accept_divergence(e.now()) == ledger::AcceptOutcome::not_diverged);
  e.l->note_reconciled(e.now()); // nothing to note
  CHECK_FALSE(e.l->id_blocks().diverged.has_value());
  int64_t t0 = e.now();
  CHECK(e.l->record_divergence(1'000, t0));
  auto s = e.l->id_blocks();
  REQUIRE(s.diverged.has_value());
  CHECK(s.diverged->detected_at == t0);
  CHECK(s.diverged->store_mark == 1'000);
  CHECK(s.diverged->sequence_before == b.id);
  CHECK_FALSE(s.diverged->reconciled_at.has_value());
  CHECK(s.block_end == 1'000);
  CHECK(s.block_intent == 1'000);
  CHECK(s.sequence >= 1'000);
  CHECK(e.l->max_record_id() >= 1'000);
  auto next = e.reserve("c");
  CHECK(next.id > 1'000); // new ids pass the mark
  if (e.fresh.reports_status()) CHECK(e.l->status(e.now()).diverged.has_value());
  CHECK(e.l->accept_divergence(e.now()) == ledger::AcceptOutcome::not_reconciled);
  e.l->note_reconciled(t0 + 10);
  CHECK(e.l->id_blocks().diverged->reconciled_at == t0 + 10);
  // A higher mark found later: not new, but what was reconciled before it does not count.
  CHECK_FALSE(e.l->record_divergence(2'000, t0 + 20));
  s = e.l->id_blocks();
  CHECK(s.diverged->detected_at == t0);
  CHECK(s.diverged->store_mark == 2'000);
  CHECK(s.diverged->sequence_before == b.id);
  CHECK_FALSE(s.diverged->reconciled_at.has_value());
  CHECK(e.reserve("d").id > 2'000);
  CHECK(e.l->accept_divergence(e.now()) == ledger::AcceptOutcome::not_reconciled);
  e.l->note_reconciled(t0 + 30);
  CHECK(e.l->accept_divergence(e.now()) == ledger::AcceptOutcome::accepted);
  CHECK_FALSE(e.l->id_blocks().diverged.has_value());
  if (e.fresh.reports_status()) CHECK_FALSE(e.l->status(e.now()).diverged.has_value());
  CHECK(e.l->accept_divergence(e.now()) == ledger::AcceptOutcome::not_diverged);
  // A mark below the sequence leaves the sequence alone.
  int64_t seq = e.l->max_record_id();
  CHECK(e.l->record_divergence(5, t0 + 40));
  CHECK(e.l->max_record_id() == seq);
}

TEST_CASE("bind_store: the first binding is recorded; another replaces it only on rebind") {
  LedgerFixture e;
  CHECK_FALSE(e.l->store_binding().has_value());
  ledger::StoreBinding s3{"s3", "http://127.0.0.1:9000", "bucket", "root/", "state"};
  auto first = e.l->bind_store(s3, ledger::Rebind::no);
  CHECK_FALSE(first.previous.has_value());
  CHECK(first.written);
  CHECK(e.l->store_binding() == s3);
  auto same = e.l->bind_store(s3, ledger::Rebind::yes);
  CHECK(same.previous == s3);
  CHECK_FALSE(same.written);
  ledger::StoreBinding file{"file", "", "/srv/archive", "", "none"};
  auto refused = e.l->bind_store(file, ledger::Rebind::no);
  CHECK(refused.previous == s3);
  CHECK_FALSE(refused.written);
  CHECK(e.l->store_binding() == s3);
  auto moved = e.l->bind_store(file, ledger::Rebind::yes);
  CHECK(moved.previous == s3);
  CHECK(moved.written);
  CHECK(e.l->store_binding() == file); // empty fields are kept as empty
  CHECK(e.connect()->store_binding() == file);
}

TEST_CASE("bind_store: a binding without a tagging mode gets one for its own store only, once") {
  LedgerFixture e;
  ledger::StoreBinding old{"s3", "http://127.0.0.1:9000", "bucket", "root", ""}; // bound before modes
  REQUIRE(e.l->bind_store(old, ledger::Rebind::no).written);
  CHECK(e.l->store_binding()->tagging.empty());
  ledger::StoreBinding other = old;
  other.location = "other";
  other.tagging = "none";
  auto refused = e.l->bind_store(other, ledger::Rebind::no); // another store: never filled in
  CHECK_FALSE(refused.written);
  CHECK(e.l->store_binding() == old);
  ledger::StoreBinding tagged = old;
  tagged.tagging = "state";
  auto filled = e.l->bind_store(tagged, ledger::Rebind::no);
  CHECK(filled.written);
  CHECK(filled.previous == old);
  CHECK(e.connect()->store_binding() == tagged);
  ledger::StoreBinding untagged = old;
  untagged.tagging = "none";
  auto kept = e.l->bind_store(untagged, ledger::Rebind::no); // recorded now: never changed silently
  CHECK_FALSE(kept.written);
  CHECK(kept.previous == tagged);
  CHECK(e.l->store_binding() == tagged);
  CHECK(e.l->bind_store(untagged, ledger::Rebind::yes).written); // init --rebind-store
  CHECK(e.l->store_binding() == untagged);
}

TEST_CASE("list_files and find_by_path read what reserve and confirm wrote") {
  LedgerFixture e;
  auto in = [&](const std::string &owner, const std::string &seed, const std::string &prefix,
                const std::string &path) {
    auto r = request(owner, seed);
    r.run_prefix = prefix;
    r.relative_path = path;
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    return res.record;
  };
  auto a = in("o", "a", "p", "src/x.c");
  auto b = in("o", "b", "p", "src/lib/y.c");
  auto c = in("o", "c", "", "src/x.c");
  auto d = in("q", "d", "p", "src/x.c");
  REQUIRE(e.l->confirm(a.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  e.clock.t += 1;
  auto a2 = in("o", "a2", "p", "src/x.c");
  REQUIRE(e.l->confirm(a2.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  REQUIRE(e.l->mark_failed(b.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  ledger::FileQuery f;
  f.owner = "o";
  auto ids = [&](const ledger::FileQuery &flt) {
    std::vector<int64_t> out;
    for (const auto &r : e.l->list_files(flt))
      out.push_back(r.id);
    return out;
  };
  CHECK(ids(f) == std::vector<int64_t>{a.id, c.id, a2.id});
  f.include_dead = true;
  CHECK(ids(f) == std::vector<int64_t>{a.id, b.id, c.id, a2.id});
  f.run_prefix = "p";
  CHECK(ids(f) == std::vector<int64_t>{a.id, b.id, a2.id});
  f.path_prefix = "src/";
  CHECK(ids(f) == std::vector<int64_t>{a.id, b.id, a2.id});
  f.path_prefix = "src/x";
  CHECK(ids(f) == std::vector<int64_t>{a.id, a2.id});
  f.owner = "*";
  CHECK(ids(f) == std::vector<int64_t>{a.id, d.id, a2.id});
  auto found = e.l->find_by_path("o", "p", "src/x.c");
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == a2.id); // newest first
  CHECK(found[1].id == a.id);
  CHECK(e.l->find_by_path("o", "", "src/x.c").empty()); // c is still UPLOADING
  CHECK(e.l->find_by_path("o", "p", "src/lib/y.c").empty());
}

TEST_CASE("the stat cache: reserve records the stat; find_unchanged matches all of it; record_stat updates") {
  LedgerFixture e;
  auto req = request("o", "a");
  req.relative_path = "dir/f.txt";
  req.run_prefix = "b/1";
  req.stat = ledger::FileStat{7, 99, 1'000, 2'000};
  req.content_type = "text/css";
  req.object_options = R"({"tags":{"t":"1"}})";
  auto a = e.l->reserve(req, e.now());
  REQUIRE(a.outcome == ledger::ReserveOutcome::reserved);
  CHECK(a.record.stat == req.stat);
  CHECK(a.record.object_content_type() == "text/css");
  CHECK(a.record.object_options == req.object_options);
  const ledger::FileStat same{7, 99, 1'000, 2'000};
  // Not ACTIVE yet: no answer from the cache.
  CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/f.txt", same, 1).has_value());
  REQUIRE(e.l->confirm(a.record.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  auto hit = e.l->find_unchanged("o", "b/1", "dir/f.txt", same, 1);
  REQUIRE(hit.has_value());
  CHECK(hit->id == a.record.id);
  // Any one thing different is a miss: size, each stat field, owner, prefix, path.
  CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/f.txt", same, 2).has_value());
  for (auto other : {ledger::FileStat{8, 99, 1'000, 2'000}, ledger::FileStat{7, 98, 1'000, 2'000},
                     ledger::FileStat{7, 99, 1'001, 2'000}, ledger::FileStat{7, 99, 1'000, 2'001}})
    CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/f.txt", other, 1).has_value());
  CHECK_FALSE(e.l->find_unchanged("p", "b/1", "dir/f.txt", same, 1).has_value());
  CHECK_FALSE(e.l->find_unchanged("o", "b/2", "dir/f.txt", same, 1).has_value());
  CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/g.txt", same, 1).has_value());
  const ledger::FileStat touched{7, 99, 5'000, 6'000};
  CHECK(e.l->record_stat(a.record.id, touched, e.now()));
  CHECK(e.l->find_unchanged("o", "b/1", "dir/f.txt", touched, 1).has_value());
  CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/f.txt", same, 1).has_value());
  // A deleted row answers nothing and takes no stat.
  REQUIRE(e.l->soft_delete(a.record.id, "o", e.now(), 1'000, 2) == ledger::DeleteOutcome::deleted);
  CHECK_FALSE(e.l->find_unchanged("o", "b/1", "dir/f.txt", touched, 1).has_value());
  CHECK_FALSE(e.l->record_stat(a.record.id, same, e.now()));
}

TEST_CASE("a dry-run reserve decides as a reserve does and writes nothing") {
  LedgerFixture e;
  auto dry = request("o", "a");
  dry.dry_run = true;
  auto planned = e.l->reserve(dry, e.now());
  CHECK(planned.outcome == ledger::ReserveOutcome::reserved);
  CHECK(planned.record.id == 0);
  ledger::FileQuery none_yet;
  none_yet.owner = "o";
  none_yet.include_dead = true;
  CHECK(e.l->list_files(none_yet).empty());
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  auto dup = e.l->reserve(dry, e.now());
  CHECK(dup.outcome == ledger::ReserveOutcome::duplicate);
  CHECK(dup.record.id == a.id);
  auto quota = request("o", "b");
  quota.dry_run = true;
  quota.max_files = 1;
  CHECK(e.l->reserve(quota, e.now()).outcome == ledger::ReserveOutcome::quota_exceeded);
  ledger::FileQuery all;
  all.owner = "o";
  all.include_dead = true;
  CHECK(e.l->list_files(all).size() == 1);
  // And the next real reserve takes the next id: nothing of the dry ones was kept.
  auto b = e.reserve("b");
  CHECK(b.id == a.id + 1);
}

TEST_CASE("confirm with retire: the path's older ACTIVE rows are soft-deleted in the same transaction") {
  LedgerFixture e;
  auto at = [&](const std::string &seed, const std::string &path, const std::string &prefix) {
    auto r = request("o", seed);
    r.relative_path = path;
    r.run_prefix = prefix;
    r.dedup = ledger::DedupScope::prefix;
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    return res.record;
  };
  auto old = at("v1", "p.txt", "");
  REQUIRE(e.l->confirm(old.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  auto elsewhere = at("v1", "p.txt", "other"); // another prefix: not the same file
  REQUIRE(e.l->confirm(elsewhere.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  auto other_path = at("v9", "q.txt", "");
  REQUIRE(e.l->confirm(other_path.id, "e", "", e.now()) == test::confirm_outcome::confirmed);
  auto fresh = at("v2", "p.txt", "");
  e.clock.t += 10;
  REQUIRE(e.l->confirm(fresh.id, "e", "", e.now(), ledger::CommitTag::none, ledger::Retire{4'000, 5}) ==
          test::confirm_outcome::confirmed);
  auto gone = e.row(old.id);
  CHECK(gone.is_deleted);
  CHECK(gone.upload_status == ledger::FileStatus::active);
  CHECK(gone.deleted_at == e.now());
  auto t = e.task_of(old.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == e.now() + 4'000);
  CHECK_FALSE(e.row(fresh.id).is_deleted);
  CHECK_FALSE(e.row(elsewhere.id).is_deleted);
  CHECK_FALSE(e.row(other_path.id).is_deleted);
  // A confirm that does not happen retires nothing.
  auto late = at("v3", "q.txt", "");
  REQUIRE(e.l->mark_failed(late.id, "x", false, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(e.l->confirm(late.id, "e", "", e.now(), ledger::CommitTag::none, ledger::Retire{1, 1}) ==
        test::confirm_outcome::row_not_uploading);
  CHECK_FALSE(e.row(other_path.id).is_deleted);
}

TEST_SUITE_END(); // contract

// status(): the figures SqlLedger's queries compute (on both databases; the fake does not
// model status).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("record_job_run and status: counts by state, due and dead tasks, the last runs") {
  LedgerFixture e;
  auto st = e.l->status(e.now());
  CHECK(st.ledger_uuid == e.l->uuid());
  CHECK(e.l->uuid().size() == 36);
  CHECK(st.schema_version == e.l->schema_version());
  CHECK(st.files_uploading == 0);
  CHECK(st.files_active == 0);
  CHECK(st.tasks_due == 0);
  CHECK_FALSE(st.oldest_uploading_age_ms.has_value());
  for (const char *job : {"sweep", "repair", "reconcile"}) {
    REQUIRE(st.last_runs.count(job) == 1);
    CHECK_FALSE(st.last_runs.at(job).has_value());
  }
  auto up = e.reserve("a");
  auto active = e.reserve("b");
  REQUIRE(e.l->confirm(active.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  auto deleted = e.reserve("c");
  REQUIRE(e.l->confirm(deleted.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  REQUIRE(e.l->soft_delete(deleted.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto failed = e.reserve("d");
  REQUIRE(e.l->mark_failed(failed.id, "x", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto held = e.l->claim_task(e.task_of(failed.id).id, e.now(), "w", 1'000);
  REQUIRE(held.has_value());
  int64_t later = up.upload_deadline_at + 1; // up is overdue, held's lease expired
  st = e.l->status(later);
  CHECK(st.now == later);
  CHECK(st.files_uploading == 1);
  CHECK(st.files_active == 1);
  CHECK(st.files_failed == 1);
  CHECK(st.files_deleted == 1);
  CHECK(st.overdue_uploading == 1);
  CHECK(st.expired_leases == 1);
  CHECK(st.tasks_due == 1); // deleted's task (due after a grace of 0); up's is due at deadline + grace
  CHECK(st.tasks.at("PENDING") == 2);
  CHECK(st.tasks.at("PROCESSING") == 1);
  CHECK(st.tasks.at("IGNORED") == 1);
  CHECK(st.tasks.at("FAILED") == 0);
  CHECK(st.oldest_uploading_age_ms == later - up.created_at);
  e.l->record_job_run({"sweep", "host-1", 10, 20, "ok", R"({"deleted":1})"});
  e.l->record_job_run({"sweep", "host-2", 30, 40, "failed", R"({"deleted":2})"});
  e.l->record_job_run({"repair", "host-1", 15, 25, "ok", "{}"});
  st = e.connect()->status(later);
  REQUIRE(st.last_runs.at("sweep").has_value());
  const auto &sweep = *st.last_runs.at("sweep");
  CHECK(sweep.worker_id == "host-2");
  CHECK(sweep.started_at == 30);
  CHECK(sweep.finished_at == 40);
  CHECK(sweep.outcome == "failed");
  CHECK(sweep.counts_json == R"({"deleted":2})");
  REQUIRE(st.last_runs.at("repair").has_value());
  CHECK(st.last_runs.at("repair")->worker_id == "host-1");
  CHECK_FALSE(st.last_runs.at("reconcile").has_value());
}

TEST_SUITE_END(); // sqlonly

// In the contract like every case above: outside a suite no CTest entry ran it.
TEST_SUITE_BEGIN("contract");

TEST_CASE(
    "fail_abandoned: only an alive UPLOADING row still held by that holder; its task due after the grace") {
  LedgerFixture e;
  auto req = request("o", "a");
  req.holder = "boot=b pidns=1 pid=42 start=7 host=h";
  auto a = e.l->reserve(req, e.now());
  REQUIRE(a.outcome == ledger::ReserveOutcome::reserved);
  CHECK(e.row(a.record.id).holder == req.holder);
  auto other = request("o", "b");
  other.holder = "boot=c pidns=1 pid=42 start=7 host=h";
  auto b = e.l->reserve(other, e.now());
  REQUIRE(b.outcome == ledger::ReserveOutcome::reserved);
  auto unheld = e.reserve("c"); // no holder recorded
  CHECK_FALSE(unheld.holder.has_value());

  auto held = e.l->held_uploads("boot=b pidns=1 ", 10);
  REQUIRE(held.size() == 1);
  CHECK(held[0].id == a.record.id);
  // Another holder (the pid was reused, the row re-held): nothing changes.
  CHECK(e.l->fail_abandoned(a.record.id, "boot=b pidns=1 pid=42 start=8 host=h", "gone", e.now(), 1'000, 3) ==
        ledger::RepairOutcome::not_overdue);
  CHECK(e.row(a.record.id).upload_status == ledger::FileStatus::uploading);
  // Before its deadline, and its task due the grace from now (not at deadline + grace).
  REQUIRE(e.now() < a.record.upload_deadline_at);
  REQUIRE(e.l->fail_abandoned(a.record.id, *req.holder, "INTERRUPTED: gone", e.now(), 1'000, 3) ==
          ledger::RepairOutcome::repaired);
  auto row = e.row(a.record.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(row.failure_reason == "INTERRUPTED: gone");
  auto t = e.task_of(a.record.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == e.now() + 1'000);
  // Twice: the row moved on.
  CHECK(e.l->fail_abandoned(a.record.id, *req.holder, "again", e.now(), 1'000, 3) ==
        ledger::RepairOutcome::not_overdue);
  CHECK(e.l->held_uploads("boot=b pidns=1 ", 10).empty());
  CHECK(e.l->held_uploads("boot=c pidns=1 ", 10).size() == 1);
}

TEST_SUITE_END(); // contract
