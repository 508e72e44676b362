// Sweep's batch forms, decide_many and finish_many: one transaction per batch, each item
// exactly its single call under its own lease (part of the ledger contract, every backend).
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <string>
#include <vector>

using namespace lodge;
using test::LedgerFixture;

namespace {

// One claimed task of every kind decide tells apart, the same on every ledger it is made
// on: an UPLOADING row within its deadline (postponed), an ACTIVE row (ignored, or tag
// when its confirm recorded the committed tag as owed: `tag`), a failed row (allowed), a
// row past its deadline and grace (failed here, allowed, a verify pass owed), and a dead
// row whose lease another worker took after ours expired (lease_lost). Returns them in that
// order; `now` is when they are decided.
std::vector<ledger::TaskRecord> claimed_mix(LedgerFixture &e, int64_t &now, ledger::CommitTag tag) {
  auto claim = [&](int64_t record_id, int64_t at, const std::string &worker, int64_t lease) {
    auto c = e.l->claim_task(e.task_of(record_id).id, at, worker, lease);
    REQUIRE(c.has_value());
    return *c;
  };
  auto overdue = e.reserve("d");
  e.clock.t += 12'000; // past overdue's deadline (10 s) and its grace (1 s)
  now = e.now();
  auto uploading = e.reserve("a");
  auto active = e.reserve("b");
  REQUIRE(e.l->confirm(active.id, "etag", "", now, tag) == test::confirm_outcome::confirmed);
  e.fresh.set_task_pending(active.id, 0);
  auto failed = e.reserve("c");
  REQUIRE(e.l->mark_failed(failed.id, "refused", true, now) == ledger::MarkFailedOutcome::failed);
  auto lost = e.reserve("e");
  REQUIRE(e.l->mark_failed(lost.id, "refused", true, now) == ledger::MarkFailedOutcome::failed);

  std::vector<ledger::TaskRecord> out;
  out.push_back(claim(uploading.id, uploading.upload_deadline_at + 1'000, "w", 60'000));
  out.push_back(claim(active.id, now, "w", 60'000));
  out.push_back(claim(failed.id, now, "w", 60'000));
  out.push_back(claim(overdue.id, now, "w", 60'000));
  out.push_back(claim(lost.id, now, "w", 50));      // ours, expired 50 ms later
  (void)claim(lost.id, now + 100, "other", 60'000); // and then taken by another worker
  return out;
}

struct State {
  std::vector<ledger::TaskRecord> tasks;
  std::vector<ledger::FileRecord> rows;
};

State state_of(ledger::Ledger &l) {
  ledger::FileQuery f;
  f.owner = "*";
  f.include_dead = true;
  return {l.list_tasks(std::nullopt), l.list_files(f)};
}

// The same tasks and rows, field by field (keys differ: each ledger made its own uuids).
void check_same_state(const State &a, const State &b) {
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    const auto &x = a.tasks[i];
    const auto &y = b.tasks[i];
    CHECK(x.id == y.id);
    CHECK(x.status == y.status);
    CHECK(x.next_retry_at == y.next_retry_at);
    CHECK(x.retry_count == y.retry_count);
    CHECK(x.lease_owner == y.lease_owner);
    CHECK(x.lease_until == y.lease_until);
    CHECK(x.lease_version == y.lease_version);
    CHECK(x.last_error == y.last_error);
    CHECK(x.updated_at == y.updated_at);
    CHECK(x.verify_pass == y.verify_pass);
    CHECK(x.tag_owed == y.tag_owed);
  }
  REQUIRE(a.rows.size() == b.rows.size());
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const auto &x = a.rows[i];
    const auto &y = b.rows[i];
    CHECK(x.id == y.id);
    CHECK(x.upload_status == y.upload_status);
    CHECK(x.is_deleted == y.is_deleted);
    CHECK(x.failure_reason == y.failure_reason);
    CHECK(x.updated_at == y.updated_at);
    CHECK(x.deleted_at == y.deleted_at);
  }
}

} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("decide_many: each task's outcome and every write are exactly decide's") {
  for (auto tag : {ledger::CommitTag::none, ledger::CommitTag::owed}) {
    LedgerFixture one, many;
    int64_t now_one = 0, now_many = 0;
    auto tasks_one = claimed_mix(one, now_one, tag);
    auto tasks_many = claimed_mix(many, now_many, tag);
    REQUIRE(now_one == now_many);
    std::vector<ledger::TaskDecision> single;
    for (const auto &t : tasks_one)
      single.push_back(one.l->decide(t, now_one, 1'000));
    auto batch = many.l->decide_many(tasks_many, now_many, 1'000);
    const auto active_kind =
        tag == ledger::CommitTag::owed ? ledger::TaskDecision::tag : ledger::TaskDecision::ignored;
    CHECK(single == std::vector<ledger::TaskDecision>{
                        ledger::TaskDecision::postponed, active_kind, ledger::TaskDecision::allowed,
                        ledger::TaskDecision::allowed, ledger::TaskDecision::lease_lost});
    CHECK(batch == single);
    check_same_state(state_of(*one.l), state_of(*many.l));
    // The overdue row was failed inside the batch, as decide fails it.
    CHECK(many.row(tasks_many[3].record_id).upload_status == ledger::FileStatus::upload_failed);
    CHECK(many.task_of(tasks_many[3].record_id).verify_pass == ledger::k_verify_owed);
  }
  LedgerFixture e;
  CHECK(e.l->decide_many({}, e.now(), 1'000).empty());
  CHECK(e.l->finish_many({}, e.now()).empty());
}

TEST_CASE("finish_many: a task whose lease another worker took is lease_lost alone; the others finish") {
  LedgerFixture e;
  std::vector<ledger::FileRecord> rows;
  for (const char *seed : {"a", "b", "c", "d"}) {
    rows.push_back(e.reserve(seed));
    REQUIRE(e.l->mark_failed(rows.back().id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  }
  auto claimed = e.l->claim_due(e.now(), 10, "A", 1'000);
  REQUIRE(claimed.size() == 4);
  auto decided = e.l->decide_many(claimed, e.now(), 1'000);
  CHECK(decided == std::vector<ledger::TaskDecision>(4, ledger::TaskDecision::allowed));
  // A's lease runs out while it deletes; another worker re-claims one of its tasks.
  e.clock.t += 2'000;
  auto taken = e.l->claim_task(claimed[1].id, e.now(), "B", 60'000);
  REQUIRE(taken.has_value());
  CHECK(taken->lease_version == claimed[1].lease_version + 1);

  std::vector<ledger::TaskEnd> ends(4);
  for (size_t i = 0; i < 4; ++i)
    ends[i].task = claimed[i];
  ends[0].kind = ledger::TaskEnd::Kind::finish;
  ends[0].succeeded = true;
  ends[1].kind = ledger::TaskEnd::Kind::finish;
  ends[1].succeeded = true;
  ends[2].kind = ledger::TaskEnd::Kind::dead_letter;
  ends[2].error = "stamped by another ledger";
  ends[3].kind = ledger::TaskEnd::Kind::finish;
  ends[3].succeeded = false;
  ends[3].error = "503 Slow Down";
  ends[3].next_retry_at = e.now() + 5'000;
  auto fin = e.l->finish_many(ends, e.now());
  CHECK(fin == std::vector<ledger::TaskFinish>{ledger::TaskFinish::success, ledger::TaskFinish::lease_lost,
                                               ledger::TaskFinish::dead_letter, ledger::TaskFinish::retry});
  CHECK(e.task_of(rows[0].id).status == ledger::TaskStatus::success);
  auto held = e.task_of(rows[1].id); // B's, untouched
  CHECK(held.status == ledger::TaskStatus::processing);
  CHECK(held.lease_owner == std::optional<std::string>("B"));
  CHECK(held.lease_version == taken->lease_version);
  CHECK(held.updated_at == taken->updated_at);
  auto dead = e.task_of(rows[2].id);
  CHECK(dead.status == ledger::TaskStatus::failed);
  CHECK(dead.last_error == std::optional<std::string>("stamped by another ledger"));
  auto retry = e.task_of(rows[3].id);
  CHECK(retry.status == ledger::TaskStatus::retry);
  CHECK(retry.next_retry_at == e.now() + 5'000);
  CHECK(retry.retry_count == 1);

  // ignore: B's task ended IGNORED by B, and A's stale end of it still changes nothing.
  ledger::TaskEnd mine;
  mine.kind = ledger::TaskEnd::Kind::ignore;
  mine.task = *taken;
  ledger::TaskEnd stale = mine;
  stale.task = claimed[1];
  CHECK(e.l->finish_many({stale, mine}, e.now()) ==
        std::vector<ledger::TaskFinish>{ledger::TaskFinish::lease_lost, ledger::TaskFinish::success});
  CHECK(e.task_of(rows[1].id).status == ledger::TaskStatus::ignored);
}

TEST_SUITE_END(); // contract
