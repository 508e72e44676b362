// The cleanup path on the ledger fake and the fake store: what a claimed task comes to, the
// lease's fencing, and the ledger's failures in between. The pure rules too; the ledger's
// side of each transition is the ledger contract's (tests/ledger), on SQLite and PostgreSQL.
#include "ops_fixture.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <lodge/ops/cleanup.hpp>

using namespace lodge;

TEST_CASE("backoff is bounded and grows") {
  ops::CleanupSettings s{0, 1000, 8000};
  CHECK(ops::cleanup_backoff_ms(s, 0, 0) == 500);
  CHECK(ops::cleanup_backoff_ms(s, 0, UINT64_MAX) <= 1000);
  CHECK(ops::cleanup_backoff_ms(s, 10, 7500) == 8000);
  CHECK(ops::cleanup_backoff_ms(s, 2, 3500) == 4000);
}

TEST_CASE(
    "a cleanup tally counts each result under its outcome, a verify pass owed and an unreachable store") {
  ops::CleanupTally t;
  using O = ops::CleanupOutcome;
  for (O o : {O::deleted, O::ignored, O::postponed, O::retried, O::dead_lettered, O::lease_lost, O::kept})
    t.add(ops::CleanupResult{o, "", false, false});
  t.add(ops::CleanupResult{O::deleted, "", false, true});
  t.add(ops::CleanupResult{O::retried, "timed out", true, false});
  CHECK(t.deleted == 2);
  CHECK(t.verify_scheduled == 1);
  CHECK(t.ignored == 1);
  CHECK(t.postponed == 1);
  CHECK(t.retried == 2);
  CHECK(t.dead_lettered == 1);
  CHECK(t.lease_lost == 1);
  CHECK(t.kept == 1);
  CHECK(t.unreachable == 1);
}

namespace {
ops::CleanupSettings settings() {
  return ops::CleanupSettings{test::OpsWorld::k_grace_ms, 1'000, 8'000};
}
std::string at(const char *op, int64_t id, const char *rest) {
  return std::string(op) + " #" + std::to_string(id) + " " + rest;
}
} // namespace

TEST_CASE("cleanup: a failed row's object is deleted under the lease and its task ends SUCCESS") {
  test::OpsWorld w;
  auto rec = w.failed("a.txt", "a");
  auto t = w.claim(rec.id);
  auto r = ops::run_claimed_task(w.l, w.store, t, settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::deleted);
  CHECK_FALSE(w.store.has(rec.object_key));
  CHECK(w.l.history(rec.id) == std::vector<std::string>{
                                   at("reserve", rec.id, "row none -> UPLOADING"),
                                   at("reserve", rec.id, "task none -> PENDING"),
                                   at("mark_failed", rec.id, "row UPLOADING -> UPLOAD_FAILED"),
                                   at("claim", rec.id, "task PENDING -> PROCESSING"),
                                   at("finish", rec.id, "task PROCESSING -> SUCCESS"),
                               });
}

TEST_CASE("cleanup: a finish refused by fencing: a worker whose lease expired meanwhile changes nothing") {
  test::OpsWorld w;
  auto rec = w.failed("a.txt", "a");
  auto mine = w.claim(rec.id, "w1", 1'000);
  // While w1 deletes, its lease runs out and w2 claims the task (a new lease version).
  std::optional<ledger::TaskRecord> theirs;
  w.l.before_next("finish", [&] {
    w.clock.advance(2'000);
    theirs = w.l.claim_task(mine.id, w.now(), "w2", 1'000);
  });
  auto r = ops::run_claimed_task(w.l, w.store, mine, settings(), w.clock);
  REQUIRE(theirs);
  CHECK(r.outcome == ops::CleanupOutcome::lease_lost);
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::processing);
  CHECK(t.lease_owner == "w2");
  CHECK(t.lease_version == theirs->lease_version);
  CHECK(t.lease_version == mine.lease_version + 1);
  // w2 finishes it: the delete again finds nothing, which is success.
  CHECK(ops::run_claimed_task(w.l, w.store, *theirs, settings(), w.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::success);
}

TEST_CASE("cleanup: in a batch, one task's lost lease never touches another's end") {
  test::OpsWorld w;
  auto a = w.failed("a.txt", "a");
  auto b = w.failed("b.txt", "b");
  auto claimed = w.l.claim_due(w.now(), 10, "w1", 1'000);
  REQUIRE(claimed.size() == 2);
  w.l.before_next("finish_many", [&] {
    w.clock.advance(2'000);
    REQUIRE(w.l.claim_task(claimed[0].id, w.now(), "w2", 60'000));
  });
  auto out = ops::run_claimed_batch(w.l, w.store, claimed, settings(), w.clock);
  REQUIRE(out.size() == 2);
  CHECK(out[0].outcome == ops::CleanupOutcome::lease_lost);
  CHECK(out[1].outcome == ops::CleanupOutcome::deleted);
  CHECK(w.l.task_of(a.id).lease_owner == "w2");
  CHECK(w.l.task_of(a.id).status == ledger::TaskStatus::processing);
  CHECK(w.l.task_of(b.id).status == ledger::TaskStatus::success);
}

TEST_CASE("cleanup: the ledger fails decide_many: nothing is deleted and the tasks stay claimed") {
  test::OpsWorld w;
  auto a = w.failed("a.txt", "a");
  auto claimed = w.l.claim_due(w.now(), 10, "w1", 1'000);
  w.l.fail_next("decide_many");
  CHECK(test::throws_errc([&] { (void)ops::run_claimed_batch(w.l, w.store, claimed, settings(), w.clock); },
                          Errc::ledger_unavailable, "decide_many"));
  CHECK(w.store.count("remove_owned") == 0);
  CHECK(w.store.has(a.object_key));
  CHECK(w.l.task_of(a.id).status == ledger::TaskStatus::processing);
}

TEST_CASE("cleanup: the ledger fails the finish after the delete: the task stays under its lease, and the "
          "next claim after it expires finishes it") {
  test::OpsWorld w;
  auto rec = w.failed("a.txt", "a");
  auto t = w.claim(rec.id, "w1", 1'000);
  w.l.fail_next("finish");
  CHECK(test::throws_errc([&] { (void)ops::run_claimed_task(w.l, w.store, t, settings(), w.clock); },
                          Errc::ledger_unavailable, "finish"));
  CHECK_FALSE(w.store.has(rec.object_key));
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::processing);
  CHECK(w.l.claim_due(w.now(), 10, "w2", 1'000).empty()); // the lease still holds
  w.clock.advance(1'001);
  auto again = w.l.claim_due(w.now(), 10, "w2", 1'000);
  REQUIRE(again.size() == 1);
  CHECK(ops::run_claimed_task(w.l, w.store, again[0], settings(), w.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::success);
}

TEST_CASE("cleanup: a failed delete is retried after a backoff, and dead-lettered past max_retries") {
  test::OpsWorld w;
  auto rec = w.failed("a.txt", "a", 1);
  w.store.fail("remove_owned", Error(Errc::storage_unavailable, "DELETE: 503 SlowDown"));
  auto r = ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::retried);
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::retry);
  CHECK(t.retry_count == 1);
  CHECK(t.next_retry_at >= w.now() + 500); // at least half the base
  CHECK(t.last_error == "DELETE: 503 SlowDown");
  w.clock.t = t.next_retry_at;
  r = ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::dead_lettered);
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::failed);
  CHECK(w.store.has(rec.object_key));
}

TEST_CASE("cleanup: an object stamped by another record is kept; the task IGNORED with the reason") {
  test::OpsWorld w;
  auto rec = w.reserve("a.txt", "a");
  w.put(rec, rec.id + 100); // another record's object at this row's key
  REQUIRE(w.l.mark_failed(rec.id, "refused", true, w.now()) == ledger::MarkFailedOutcome::failed);
  auto r = ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::kept);
  CHECK(w.store.has(rec.object_key));
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::ignored);
  REQUIRE(t.last_error);
  CHECK(t.last_error->find("not deleted") != std::string::npos);
}

TEST_CASE("cleanup: a deleted row whose object another alive row shares: the object stays (I5)") {
  test::OpsWorld w;
  auto a = w.active("a.txt", "a");
  ledger::ReserveRequest share;
  share.owner_id = "o";
  share.original_name = share.relative_path = "b.txt";
  share.sha256 = a.sha256;
  share.size = 1;
  share.share_with = a.id;
  auto b = w.l.reserve(share, w.now());
  REQUIRE(b.outcome == ledger::ReserveOutcome::shared);
  REQUIRE(w.l.soft_delete(a.id, "o", w.now(), 0, 8) == ledger::DeleteOutcome::deleted);
  auto r = ops::run_claimed_task(w.l, w.store, w.claim(a.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::ignored);
  CHECK(w.store.has(a.object_key));
  CHECK(w.store.count("remove_owned") == 0);
  CHECK(w.l.task_of(a.id).status == ledger::TaskStatus::ignored);
  // Once the sharer is deleted too, the object goes.
  REQUIRE(w.l.soft_delete(b.record.id, "o", w.now(), 0, 8) == ledger::DeleteOutcome::deleted);
  REQUIRE(w.l.requeue_task_for(a.id, w.now(), 8) == ledger::QueueOutcome::queued);
  CHECK(ops::run_claimed_task(w.l, w.store, w.claim(a.id), settings(), w.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK_FALSE(w.store.has(a.object_key));
}

TEST_CASE("cleanup: an upload past its deadline and grace is failed by the sweep, deleted, then verified") {
  test::OpsWorld w;
  auto rec = w.reserve("a.txt", "a");
  w.put(rec);
  w.clock.t = rec.upload_deadline_at + test::OpsWorld::k_grace_ms; // the task is due now
  auto r = ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::deleted);
  CHECK(r.verify_scheduled);
  auto row = w.l.row(rec.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.failure_reason->find("DEADLINE_EXCEEDED") != std::string::npos);
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.verify_pass == ledger::k_verify_due);
  // A late PUT lands before the verify pass: it goes too.
  w.put(rec);
  w.clock.t = t.next_retry_at;
  CHECK(ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK_FALSE(w.store.has(rec.object_key));
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::success);
}

TEST_CASE("cleanup: a task owing the committed tag: the sweep tags the object and ends the task") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  w.put(rec);
  REQUIRE(w.l.confirm(rec.id, "etag", "", w.now(), ledger::CommitTag::owed) ==
          ledger::ConfirmOutcome::confirmed);
  w.clock.t = w.l.task_of(rec.id).next_retry_at;
  auto r = ops::run_claimed_task(w.l, w.store, w.claim(rec.id), settings(), w.clock);
  CHECK(r.outcome == ops::CleanupOutcome::ignored);
  CHECK(w.store.state_tag(rec.object_key) == "committed");
  CHECK(w.store.has(rec.object_key));
  CHECK(w.l.history(rec.id).back() == at("end_tag", rec.id, "task PROCESSING+tag_owed -> IGNORED"));
}
