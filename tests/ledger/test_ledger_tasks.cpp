// The cleanup path (ops/cleanup over the ledger under test) with the recording fake store:
// part of the ledger contract, on every backend.
#include "../unit/fake_store.hpp"
#include "support.hpp"

#include <algorithm>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/jobs/sweep.hpp>

using namespace lodge;

namespace {
struct Env : test::LedgerFixture {
  test::FakeStore store;
  ops::CleanupSettings cs{1000, 100, 1000};
};
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("cleanup makes its deletes durable (one flush a batch) before it finishes their tasks") {
  Env e;
  std::vector<ledger::FileRecord> rows;
  for (const char *seed : {"a", "b", "c"}) {
    rows.push_back(e.reserve(seed));
    REQUIRE(e.l->mark_failed(rows.back().id, "refused", true, e.clock.t) ==
            ledger::MarkFailedOutcome::failed);
  }
  // A flush that fails: the store may still hold every object, so no task is finished.
  e.store.fail("flush", Error(Errc::storage_error, "syncfs: I/O error"), 1);
  auto claimed = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(claimed.size() == 3);
  for (const auto &r : ops::run_claimed_batch(*e.l, e.store, claimed, e.cs, e.clock)) {
    CHECK(r.outcome == ops::CleanupOutcome::retried);
    CHECK(r.error.find("syncfs") != std::string::npos);
  }
  CHECK(e.store.removed().size() == 3); // removed, but not known durable
  for (const auto &row : rows)
    CHECK(e.task_of(row.id).status == ledger::TaskStatus::retry);
  // Then one flush for the whole batch, before its tasks end.
  e.clock.t += 60'000;
  claimed = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(claimed.size() == 3);
  const size_t flushes = e.store.count("flush");
  for (const auto &r : ops::run_claimed_batch(*e.l, e.store, claimed, e.cs, e.clock))
    CHECK(r.outcome == ops::CleanupOutcome::deleted);
  CHECK(e.store.count("flush") == flushes + 1);
  // And the single-task path flushes too.
  auto d = e.reserve("d");
  REQUIRE(e.l->mark_failed(d.id, "refused", true, e.clock.t) == ledger::MarkFailedOutcome::failed);
  auto one = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(one.size() == 1);
  e.store.fail("flush", Error(Errc::storage_error, "syncfs: I/O error"), 1);
  CHECK(ops::run_claimed_task(*e.l, e.store, one[0], e.cs, e.clock).outcome == ops::CleanupOutcome::retried);
  CHECK(e.task_of(d.id).status == ledger::TaskStatus::retry);
}

TEST_CASE("a task is never deleted while its row is UPLOADING; then it is, once") {
  Env e;
  auto a = e.reserve("a");
  // A sweep's grace longer than the policy's: the task (due at deadline + 1s) is claimed
  // while the row is overdue but still within the sweep's grace.
  ops::CleanupSettings long_grace{5'000, 100, 1000};
  e.clock.t += 12'000;
  auto claimed = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(claimed.size() == 1);
  auto r = ops::run_claimed_task(*e.l, e.store, claimed[0], long_grace, e.clock);
  CHECK(r.outcome == ops::CleanupOutcome::postponed);
  CHECK(e.store.removed().empty());
  // The decision failed the overdue row itself (as repair would) and owes a verify pass.
  CHECK(e.l->find_file(a.id)->upload_status == ledger::FileStatus::upload_failed);
  auto t = e.l->find_task_for(a.id);
  CHECK(t->status == ledger::TaskStatus::pending);
  CHECK(t->next_retry_at == a.upload_deadline_at + 5'000);
  CHECK(t->verify_pass == ledger::k_verify_owed);
  CHECK(e.l->repair_row(a.id, e.clock.t, 1'000, 3) ==
        ledger::RepairOutcome::not_overdue);                // nothing left for repair
  CHECK(e.l->claim_due(e.clock.t, 10, "w", 5'000).empty()); // not due again at once
  e.clock.t = t->next_retry_at;
  auto again = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(again.size() == 1);
  CHECK(again[0].lease_version == 2);
  auto d = ops::run_claimed_task(*e.l, e.store, again[0], long_grace, e.clock);
  CHECK(d.outcome == ops::CleanupOutcome::deleted);
  CHECK(d.verify_scheduled);
  CHECK(e.store.removed() == std::vector<std::string>{a.object_key});
  t = e.l->find_task_for(a.id);
  CHECK(t->status == ledger::TaskStatus::pending);
  CHECK(t->verify_pass == ledger::k_verify_due);
  // Due after the row's whole deadline length and one more grace.
  CHECK(t->next_retry_at == e.clock.t + 10'000 + 5'000);
  CHECK(e.l->claim_due(t->next_retry_at - 1, 10, "w", 5'000).empty());
  e.clock.t = t->next_retry_at;
  auto verify = e.l->claim_due(e.clock.t, 10, "w", 5'000);
  REQUIRE(verify.size() == 1);
  CHECK(ops::run_claimed_task(*e.l, e.store, verify[0], long_grace, e.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK(e.store.removed() == std::vector<std::string>{a.object_key, a.object_key});
  CHECK(e.l->find_task_for(a.id)->status == ledger::TaskStatus::success);
  CHECK(e.l->claim_due(e.clock.t + 100'000, 10, "w", 5'000).empty());
}

TEST_CASE("sweep over several store connections: each task's store work done once, each lane flushed") {
  Env e;
  std::vector<ledger::FileRecord> rows;
  for (int i = 0; i < 20; ++i) {
    rows.push_back(e.reserve("a" + std::to_string(i)));
    REQUIRE(e.l->mark_failed(rows.back().id, "refused", true, e.clock.t) ==
            ledger::MarkFailedOutcome::failed);
  }
  ops::SweepOptions o{100, 8, 1'000, 0, "w", false, e.cs, 4, {}};
  int opened = 0;
  o.open_store = [&]() -> std::unique_ptr<store::ObjectStore> {
    ++opened;
    return e.store.connection();
  };
  auto s = ops::sweep(*e.l, *e.l, e.store, o, e.clock);
  CHECK(opened == 3); // the one given, and three more, opened once for the run
  CHECK(s.claimed == 20);
  CHECK(s.deleted == 20);
  auto removed = e.store.removed();
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> want;
  for (const auto &r : rows)
    want.push_back(r.object_key);
  std::sort(want.begin(), want.end());
  CHECK(removed == want); // every key once
  // Batches of 8, 8 and 4 tasks, each spread over 4 connections: every lane flushed.
  CHECK(e.store.count("flush") == 12);
  for (const auto &r : rows) // definite failures: no verify pass owed
    CHECK(e.task_of(r.id).status == ledger::TaskStatus::success);
}

TEST_CASE("sweep does not re-claim a task it postponed or decided in the same run") {
  Env e;
  auto a = e.reserve("a");
  auto b = e.reserve("b");
  e.clock.t += 12'000; // both overdue past deadline + grace, repair has not run
  auto s = ops::sweep(*e.l, *e.l, e.store, {50'000, 16, 1'000, 0, "w", false, e.cs, 1, {}}, e.clock);
  // It used to postpone each task to "now" and claim it again, up to --limit times.
  CHECK(s.claimed == 2);
  CHECK(s.postponed == 0);
  CHECK(s.deleted == 2);
  CHECK(s.verify_scheduled == 2);
  for (const auto &r : {a, b}) {
    auto t = e.l->find_task_for(r.id);
    CHECK(t->lease_version == 1);
    CHECK(t->status == ledger::TaskStatus::pending);
    CHECK(t->next_retry_at > e.clock.t);
    CHECK(e.l->find_file(r.id)->upload_status == ledger::FileStatus::upload_failed);
  }
  e.clock.t += 11'000;
  s = ops::sweep(*e.l, *e.l, e.store, {50'000, 16, 1'000, 0, "w", false, e.cs, 1, {}}, e.clock);
  CHECK(s.claimed == 2);
  CHECK(s.verified == 2);
  CHECK(e.l->find_task_for(a.id)->status == ledger::TaskStatus::success);
  CHECK(e.l->find_task_for(b.id)->status == ledger::TaskStatus::success);
}

TEST_CASE("verify passes: owed after ambiguous and deadline failures, not after definite ones") {
  Env e;
  auto definite = e.reserve("a");
  auto ambiguous = e.reserve("b");
  auto repaired = e.reserve("c");
  auto deleted = e.reserve("d");
  REQUIRE(e.l->mark_failed(definite.id, "refused", true, e.clock.t) == ledger::MarkFailedOutcome::failed);
  REQUIRE(e.l->mark_failed(ambiguous.id, "no answer", false, e.clock.t) == ledger::MarkFailedOutcome::failed);
  REQUIRE(e.l->confirm(deleted.id, "e", "", e.clock.t) == test::confirm_outcome::confirmed);
  e.clock.t += 20'000;
  REQUIRE(e.l->repair_row(repaired.id, e.clock.t, 1'000, 3) == ledger::RepairOutcome::repaired);
  REQUIRE(e.l->soft_delete(deleted.id, "o", e.clock.t, 0, 3) == ledger::DeleteOutcome::deleted);
  CHECK(e.l->find_task_for(definite.id)->verify_pass == ledger::k_verify_none);
  CHECK(e.l->find_task_for(ambiguous.id)->verify_pass == ledger::k_verify_owed);
  CHECK(e.l->find_task_for(repaired.id)->verify_pass == ledger::k_verify_owed);
  CHECK(e.l->find_task_for(deleted.id)->verify_pass == ledger::k_verify_none);
  auto s = ops::sweep(*e.l, *e.l, e.store, {100, 16, 1'000, 0, "w", false, e.cs, 1, {}}, e.clock);
  CHECK(s.deleted == 4);
  CHECK(s.verify_scheduled == 2);
  CHECK(e.l->find_task_for(definite.id)->status == ledger::TaskStatus::success);
  CHECK(e.l->find_task_for(deleted.id)->status == ledger::TaskStatus::success);
  CHECK(e.l->find_task_for(ambiguous.id)->status == ledger::TaskStatus::pending);
  CHECK(e.l->find_task_for(repaired.id)->status == ledger::TaskStatus::pending);
}

TEST_CASE("I6: the cleanup path with a stale lease deletes nothing; the current lease deletes") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.clock.t) == ledger::MarkFailedOutcome::failed);
  auto first = e.l->claim_due(e.clock.t, 1, "A", 1'000);
  REQUIRE(first.size() == 1);
  e.clock.t += 5'000; // A's lease expired
  auto second = e.l->claim_due(e.clock.t, 1, "B", 1'000);
  REQUIRE(second.size() == 1);
  CHECK(second[0].lease_version == first[0].lease_version + 1);
  CHECK(ops::run_claimed_task(*e.l, e.store, first[0], e.cs, e.clock).outcome ==
        ops::CleanupOutcome::lease_lost);
  CHECK(e.store.removed().empty());
  CHECK(ops::run_claimed_task(*e.l, e.store, second[0], e.cs, e.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK(e.l->find_task_for(a.id)->status == ledger::TaskStatus::success);
}

TEST_CASE("failures back off and dead-letter past max_retries; retry revives") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.clock.t) == ledger::MarkFailedOutcome::failed);
  e.store.fail("remove_owned", Error(Errc::storage_unavailable, "fake outage"));
  std::vector<ops::CleanupOutcome> seen;
  for (int i = 0; i < 3; ++i) {
    auto s = ops::sweep(*e.l, *e.l, e.store, {10, 4, 1'000, 0, "w", false, e.cs, 1, {}}, e.clock);
    seen.push_back(s.dead_lettered ? ops::CleanupOutcome::dead_lettered : ops::CleanupOutcome::retried);
    auto t = e.l->find_task_for(a.id);
    if (t->status == ledger::TaskStatus::retry) {
      CHECK(t->next_retry_at >= e.clock.t + 50); // at least half the base
      e.clock.t = t->next_retry_at;
    }
  }
  CHECK(seen == std::vector<ops::CleanupOutcome>{ops::CleanupOutcome::retried, ops::CleanupOutcome::retried,
                                                 ops::CleanupOutcome::dead_lettered});
  auto t = e.l->find_task_for(a.id);
  CHECK(t->status == ledger::TaskStatus::failed);
  CHECK(t->last_error == "fake outage");
  if (e.fresh.reports_status()) CHECK(e.l->status(e.clock.t).dead_letters == 1);
  REQUIRE(e.l->retry_task(t->id, e.clock.t) == ledger::RetryOutcome::requeued);
  CHECK(e.l->retry_task(t->id, e.clock.t) == ledger::RetryOutcome::not_failed);
  e.store.clear_failures();
  CHECK(ops::sweep(*e.l, *e.l, e.store, {10, 4, 1'000, 0, "w", false, e.cs, 1, {}}, e.clock).deleted == 1);
}

TEST_SUITE_END(); // contract
