// The ledger fake's outbox follows SqlLedger's (tests/ledger/test_ledger_outbox.cpp is the
// contract on SQLite and PostgreSQL): the upload events its transitions write as the schema's
// triggers do, the sent marks a PENDING clears, the consumer's claim, sweep's queue-mode
// claim, the settings and the counts; so that relay and consumer tests on the fake can trust it.
#include "fake_ledger.hpp"

#include <doctest/doctest.h>
#include <lodge/ledger/ledger.hpp>
#include <string>
#include <vector>

using namespace lodge;
using ledger::CleanupVia;
using ledger::EventClaimKind;
using ledger::EventType;
using ledger::TaskStatus;
using Strings = std::vector<std::string>;

namespace {
struct Env {
  test::FakeLedger l;
  int64_t t = 1'700'000'000'000;
  ledger::FileRecord put(const std::string &seed, bool confirm = true) {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = "f";
    r.relative_path = "p" + seed;
    r.media_type = "text/plain";
    r.sha256 = std::string(64 - seed.size(), '0') + seed;
    r.size = 1;
    r.policy = "default";
    r.deadline_ms = 10'000;
    r.grace_ms = 1'000;
    r.max_retries = 2;
    auto res = l.reserve(r, t);
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    if (confirm) REQUIRE(l.confirm(res.record.id, "e", "", t) == ledger::ConfirmOutcome::confirmed);
    return l.row(res.record.id);
  }
  // The unsent events as "file.active #3", then marked sent.
  Strings take() {
    Strings out;
    std::vector<ledger::SentMark> marks;
    for (const auto &e : l.unsent_events(100)) {
      out.push_back(std::string(to_string(e.type)) + " #" + std::to_string(e.row.id));
      marks.push_back({e.id, "m"});
    }
    CHECK(l.mark_events_sent(marks, t) == static_cast<int64_t>(marks.size()));
    return out;
  }
  ledger::TaskRecord claim(int64_t record_id) {
    auto c = l.claim_sent_task(l.task_of(record_id).id, t, "w", 60'000);
    REQUIRE(c.kind == EventClaimKind::claimed);
    return *c.task;
  }
};
std::string ev(EventType type, int64_t id) {
  return std::string(to_string(type)) + " #" + std::to_string(id);
}
} // namespace

TEST_CASE("fake ledger outbox: one event per transition, of the recorded types only") {
  Env e;
  auto quiet = e.put("0");
  CHECK(e.take().empty()); // no types recorded
  REQUIRE(e.l.set_outbox_settings({CleanupVia::tasks,
                                   {EventType::file_active, EventType::file_deleted,
                                    EventType::file_failed}}) == ledger::SetOutboxOutcome::set);
  auto a = e.put("1");
  auto b = e.put("2", false);
  REQUIRE(e.l.mark_failed(b.id, "refused", true, e.t) == ledger::MarkFailedOutcome::failed);
  REQUIRE(e.l.soft_delete(a.id, "o", e.t, 1000, 2) == ledger::DeleteOutcome::deleted);
  REQUIRE(e.l.mark_missing(quiet.id, "gone", e.t, 1000, 2) == ledger::MissingOutcome::marked_missing);
  CHECK(e.take() == Strings{ev(EventType::file_active, a.id), ev(EventType::file_failed, b.id),
                            ev(EventType::file_deleted, a.id), ev(EventType::file_deleted, quiet.id)});
  auto c = e.put("3", false);
  e.t = c.upload_deadline_at + 1;
  REQUIRE(e.l.repair_row(c.id, e.t, 1000, 2) == ledger::RepairOutcome::repaired);
  CHECK(e.take() == Strings{ev(EventType::file_failed, c.id)});
  REQUIRE(e.l.set_outbox_settings({CleanupVia::tasks, {EventType::file_active}}) ==
          ledger::SetOutboxOutcome::set);
  auto d = e.put("4", false);
  REQUIRE(e.l.mark_failed(d.id, "refused", true, e.t) == ledger::MarkFailedOutcome::failed);
  CHECK(e.take().empty());
  CHECK(e.l.events().size() == 5);
}

TEST_CASE("fake ledger outbox: the relay's batch, PENDING clears the mark, RETRY keeps it; claim answers") {
  Env e;
  auto a = e.put("1", false);
  auto early = e.l.claim_sent_task(e.l.task_of(a.id).id, e.t, "w", 60'000);
  CHECK(early.kind == EventClaimKind::done); // unsent, not due
  e.t = e.l.task_of(a.id).next_retry_at;
  REQUIRE(e.l.unsent_due_tasks(e.t, 10).size() == 1);
  CHECK(e.l.mark_tasks_sent({{e.l.task_of(a.id).id, "m1"}}, e.t) == 1);
  CHECK(e.l.unsent_due_tasks(e.t, 10).empty());
  CHECK(e.l.outbox_counts(e.t).cleanup_in_flight == 1);
  REQUIRE(e.l.set_outbox_settings({CleanupVia::queue, {}}) == ledger::SetOutboxOutcome::in_flight);
  auto t = e.claim(a.id);
  CHECK(e.l.claim_sent_task(t.id, e.t, "w2", 60'000).kind == EventClaimKind::held);
  REQUIRE(e.l.decide(t, e.t, 1000) == ledger::TaskDecision::allowed); // overdue: failed, verify owed
  REQUIRE(e.l.finish(t, false, "refused", e.t + 500, e.t) == ledger::TaskFinish::retry);
  CHECK(e.l.task_of(a.id).message_id == "m1");
  auto nd = e.l.claim_sent_task(t.id, e.t, "w", 60'000);
  CHECK(nd.kind == EventClaimKind::not_due);
  CHECK(nd.retry_at == e.t + 500);
  e.t += 500;
  t = e.claim(a.id);
  REQUIRE(e.l.finish(t, true, "", e.t + 500, e.t) == ledger::TaskFinish::verify_scheduled);
  CHECK_FALSE(e.l.task_of(a.id).sent_at);
  CHECK_FALSE(e.l.task_of(a.id).message_id);
  CHECK(e.l.outbox_counts(e.t).cleanup_in_flight == 0);
  REQUIRE(e.l.set_outbox_settings({CleanupVia::queue, {}}) == ledger::SetOutboxOutcome::set);
  // The verify pass is sweep's, even on a queue-mode ledger.
  e.t += 500;
  CHECK(e.l.unsent_due_tasks(e.t, 10).empty());
  auto b = e.put("2", false); // a first delete, due later: not sweep's
  (void)b;
  auto swept = e.l.claim_due_not_queued(e.t + 100'000, 10, "sweep", 60'000);
  REQUIRE(swept.size() == 1);
  CHECK(swept[0].record_id == a.id);
  CHECK(e.l.history(a.id).back() == "claim #" + std::to_string(a.id) + " task PENDING -> PROCESSING");
}
