// The ledger's transitions and the cleanup path, with the recording fake store (no
// network, a ledger in a temp dir).
#include "fake_store.hpp"
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/jobs.hpp>

using namespace lodge;

namespace {
class ManualClock final : public util::Clock {
public:
  int64_t t = 1'000'000;
  [[nodiscard]] int64_t now_ms() const override { return t; }
};

struct Env {
  test::TempDir dir;
  ManualClock clock;
  std::unique_ptr<ledger::Ledger> l;
  test::FakeStore store;
  ops::CleanupSettings cs{1000, 100, 1000};
  Env() {
    ledger::OpenOptions o;
    o.location = dir.file("l.db");
    o.create = true;
    o.clock = &clock;
    l = ledger::open_ledger(o);
  }
  ledger::FileRecord reserve(const std::string &sha_seed, std::optional<int64_t> max_files = std::nullopt) {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = "f.txt";
    r.media_type = "text/plain";
    r.sha256 = std::string(64 - sha_seed.size(), '0') + sha_seed;
    r.size = 1;
    r.policy = "default";
    r.max_files = max_files;
    r.deadline_ms = 10'000;
    r.grace_ms = 1'000;
    r.max_retries = 2;
    auto res = l->reserve(r, clock.t);
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    return res.record;
  }
};
} // namespace

TEST_CASE("reserve: duplicate, quota and a task due at deadline + grace") {
  Env e;
  auto a = e.reserve("a", 2);
  CHECK(a.upload_status == "UPLOADING");
  auto t = e.l->find_task_for(a.id);
  REQUIRE(t);
  CHECK(t->status == "PENDING");
  CHECK(t->next_retry_at == e.clock.t + 11'000);
  ledger::ReserveRequest dup;
  dup.owner_id = "o";
  dup.sha256 = a.sha256;
  dup.original_name = "x";
  dup.media_type = "t";
  dup.policy = "default";
  CHECK(e.l->reserve(dup, e.clock.t).outcome == ledger::ReserveOutcome::in_progress);
  REQUIRE(e.l->confirm(a.id, "etag", "", e.clock.t));
  CHECK(e.l->find_task_for(a.id)->status == "IGNORED");
  CHECK(e.l->reserve(dup, e.clock.t).outcome == ledger::ReserveOutcome::duplicate);
  e.reserve("b", 2);
  ledger::ReserveRequest third = dup;
  third.sha256 = std::string(63, '0') + "c";
  third.max_files = 2;
  CHECK(e.l->reserve(third, e.clock.t).outcome == ledger::ReserveOutcome::quota_exceeded);
}

TEST_CASE("confirm after repair changed the row is refused and changes nothing") {
  Env e;
  auto a = e.reserve("a");
  e.clock.t += 20'000;
  REQUIRE(e.l->repair_row(a.id, e.clock.t, 1'000, 3));
  CHECK_FALSE(e.l->repair_row(a.id, e.clock.t, 1'000, 3)); // idempotent
  CHECK_FALSE(e.l->confirm(a.id, "etag", "", e.clock.t));
  auto row = e.l->find_file(a.id);
  CHECK(row->upload_status == "UPLOAD_FAILED");
  CHECK(row->is_deleted);
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
  CHECK(e.l->find_file(a.id)->upload_status == "UPLOAD_FAILED");
  auto t = e.l->find_task_for(a.id);
  CHECK(t->status == "PENDING");
  CHECK(t->next_retry_at == a.upload_deadline_at + 5'000);
  CHECK(t->verify_pass == ledger::k_verify_owed);
  CHECK_FALSE(e.l->repair_row(a.id, e.clock.t, 1'000, 3));  // nothing left for repair
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
  CHECK(t->status == "PENDING");
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
  CHECK(e.l->find_task_for(a.id)->status == "SUCCESS");
  CHECK(e.l->claim_due(e.clock.t + 100'000, 10, "w", 5'000).empty());
}

TEST_CASE("sweep does not re-claim a task it postponed or decided in the same run") {
  Env e;
  auto a = e.reserve("a");
  auto b = e.reserve("b");
  e.clock.t += 12'000; // both overdue past deadline + grace, repair has not run
  auto s = ops::sweep(*e.l, e.store, {50'000, 16, 1'000, 0, "w", false, e.cs}, e.clock);
  // It used to postpone each task to "now" and claim it again, up to --limit times.
  CHECK(s.claimed == 2);
  CHECK(s.postponed == 0);
  CHECK(s.deleted == 2);
  CHECK(s.verify_scheduled == 2);
  for (const auto &r : {a, b}) {
    auto t = e.l->find_task_for(r.id);
    CHECK(t->lease_version == 1);
    CHECK(t->status == "PENDING");
    CHECK(t->next_retry_at > e.clock.t);
    CHECK(e.l->find_file(r.id)->upload_status == "UPLOAD_FAILED");
  }
  e.clock.t += 11'000;
  s = ops::sweep(*e.l, e.store, {50'000, 16, 1'000, 0, "w", false, e.cs}, e.clock);
  CHECK(s.claimed == 2);
  CHECK(s.verified == 2);
  CHECK(e.l->find_task_for(a.id)->status == "SUCCESS");
  CHECK(e.l->find_task_for(b.id)->status == "SUCCESS");
}

TEST_CASE("a not yet overdue UPLOADING row postpones its task to deadline + grace") {
  Env e;
  auto a = e.reserve("a");
  // A finished task put back early (as a requeue by hand would) while the upload runs.
  auto claimed = e.l->claim_due(a.upload_deadline_at + 1'000, 1, "w", 60'000);
  REQUIRE(claimed.size() == 1);
  CHECK(e.l->decide(claimed[0], e.clock.t, 1'000) == ledger::TaskDecision::postponed);
  auto t = e.l->find_task_for(a.id);
  CHECK(t->next_retry_at == a.upload_deadline_at + 1'000);
  CHECK(t->verify_pass == ledger::k_verify_none);
  CHECK(e.l->find_file(a.id)->upload_status == "UPLOADING");
}

TEST_CASE("verify passes: owed after ambiguous and deadline failures, not after definite ones") {
  Env e;
  auto definite = e.reserve("a");
  auto ambiguous = e.reserve("b");
  auto repaired = e.reserve("c");
  auto deleted = e.reserve("d");
  REQUIRE(e.l->mark_failed(definite.id, "refused", true, e.clock.t));
  REQUIRE(e.l->mark_failed(ambiguous.id, "no answer", false, e.clock.t));
  REQUIRE(e.l->confirm(deleted.id, "e", "", e.clock.t));
  e.clock.t += 20'000;
  REQUIRE(e.l->repair_row(repaired.id, e.clock.t, 1'000, 3));
  REQUIRE(e.l->soft_delete(deleted.id, "o", e.clock.t, 0, 3) == ledger::DeleteOutcome::deleted);
  CHECK(e.l->find_task_for(definite.id)->verify_pass == ledger::k_verify_none);
  CHECK(e.l->find_task_for(ambiguous.id)->verify_pass == ledger::k_verify_owed);
  CHECK(e.l->find_task_for(repaired.id)->verify_pass == ledger::k_verify_owed);
  CHECK(e.l->find_task_for(deleted.id)->verify_pass == ledger::k_verify_none);
  auto s = ops::sweep(*e.l, e.store, {100, 16, 1'000, 0, "w", false, e.cs}, e.clock);
  CHECK(s.deleted == 4);
  CHECK(s.verify_scheduled == 2);
  CHECK(e.l->find_task_for(definite.id)->status == "SUCCESS");
  CHECK(e.l->find_task_for(deleted.id)->status == "SUCCESS");
  CHECK(e.l->find_task_for(ambiguous.id)->status == "PENDING");
  CHECK(e.l->find_task_for(repaired.id)->status == "PENDING");
}

TEST_CASE("queueing writes report what they did: a held task is not reported queued") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.clock.t));
  auto claimed = e.l->claim_due(e.clock.t, 1, "w", 60'000);
  REQUIRE(claimed.size() == 1);
  // A worker holds the task: nothing is written, and the caller hears so (it used to
  // hear "true", and reconcile --apply reported the leftover as queued).
  CHECK(e.l->requeue_task_for(a.id, e.clock.t, 3) == ledger::QueueOutcome::held);
  CHECK(e.l->find_task_for(a.id)->status == "PROCESSING");
  auto alive = e.reserve("b");
  CHECK(e.l->requeue_task_for(alive.id, e.clock.t, 3) == ledger::QueueOutcome::not_dead);
  CHECK(e.l->requeue_task_for(9999, e.clock.t, 3) == ledger::QueueOutcome::not_dead);
  REQUIRE(e.l->finish(claimed[0], true, "", 0, e.clock.t) == ledger::TaskFinish::success);
  CHECK(e.l->requeue_task_for(a.id, e.clock.t, 3) == ledger::QueueOutcome::queued);
  CHECK(e.l->find_task_for(a.id)->status == "PENDING");
}

TEST_CASE("I6: a worker with a stale lease_version changes nothing") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.clock.t));
  auto first = e.l->claim_due(e.clock.t, 1, "A", 1'000);
  REQUIRE(first.size() == 1);
  e.clock.t += 5'000; // A's lease expired
  auto second = e.l->claim_due(e.clock.t, 1, "B", 1'000);
  REQUIRE(second.size() == 1);
  CHECK(second[0].lease_version == first[0].lease_version + 1);
  CHECK(e.l->decide(first[0], e.clock.t, 1'000) == ledger::TaskDecision::lease_lost);
  CHECK(e.l->finish(first[0], true, "", 0, e.clock.t) == ledger::TaskFinish::lease_lost);
  CHECK(e.l->finish(first[0], false, "err", 0, e.clock.t) == ledger::TaskFinish::lease_lost);
  CHECK(ops::run_claimed_task(*e.l, e.store, first[0], e.cs, e.clock).outcome ==
        ops::CleanupOutcome::lease_lost);
  CHECK(e.store.removed().empty());
  CHECK(ops::run_claimed_task(*e.l, e.store, second[0], e.cs, e.clock).outcome ==
        ops::CleanupOutcome::deleted);
  CHECK(e.l->find_task_for(a.id)->status == "SUCCESS");
}

TEST_CASE("failures back off and dead-letter past max_retries; retry revives") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->mark_failed(a.id, "x", true, e.clock.t));
  e.store.fail("remove_all", Error(Errc::storage_unavailable, "fake outage"));
  std::vector<ops::CleanupOutcome> seen;
  for (int i = 0; i < 3; ++i) {
    auto s = ops::sweep(*e.l, e.store, {10, 4, 1'000, 0, "w", false, e.cs}, e.clock);
    seen.push_back(s.dead_lettered ? ops::CleanupOutcome::dead_lettered : ops::CleanupOutcome::retried);
    auto t = e.l->find_task_for(a.id);
    if (t->status == "RETRY") {
      CHECK(t->next_retry_at >= e.clock.t + 50); // at least half the base
      e.clock.t = t->next_retry_at;
    }
  }
  CHECK(seen == std::vector<ops::CleanupOutcome>{ops::CleanupOutcome::retried, ops::CleanupOutcome::retried,
                                                 ops::CleanupOutcome::dead_lettered});
  auto t = e.l->find_task_for(a.id);
  CHECK(t->status == "FAILED");
  CHECK(t->last_error == "fake outage");
  CHECK(e.l->status(e.clock.t).dead_letters == 1);
  REQUIRE(e.l->retry_task(t->id, e.clock.t));
  CHECK_FALSE(e.l->retry_task(t->id, e.clock.t));
  e.store.clear_failures();
  CHECK(ops::sweep(*e.l, e.store, {10, 4, 1'000, 0, "w", false, e.cs}, e.clock).deleted == 1);
}

TEST_CASE("user delete frees the quota at once and schedules the object after the grace") {
  Env e;
  auto a = e.reserve("a", 1);
  REQUIRE(e.l->confirm(a.id, "e", "", e.clock.t));
  CHECK(e.l->soft_delete(a.id, "someone-else", e.clock.t, 5'000, 3) == ledger::DeleteOutcome::not_found);
  CHECK(e.l->soft_delete(a.id, "o", e.clock.t, 5'000, 3) == ledger::DeleteOutcome::deleted);
  CHECK(e.l->soft_delete(a.id, "o", e.clock.t, 5'000, 3) == ledger::DeleteOutcome::not_active);
  e.reserve("b", 1); // the slot is free
  auto t = e.l->find_task_for(a.id);
  CHECK(t->status == "PENDING");
  CHECK(t->next_retry_at == e.clock.t + 5'000);
  CHECK(e.l->claim_due(e.clock.t + 4'999, 10, "w", 1'000).empty());
}

TEST_CASE("backoff is bounded and grows") {
  ops::CleanupSettings s{0, 1000, 8000};
  CHECK(ops::cleanup_backoff_ms(s, 0, 0) == 500);
  CHECK(ops::cleanup_backoff_ms(s, 0, UINT64_MAX) <= 1000);
  CHECK(ops::cleanup_backoff_ms(s, 10, 7500) == 8000);
  CHECK(ops::cleanup_backoff_ms(s, 2, 3500) == 4000);
}
