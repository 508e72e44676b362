// The outbox (the contract, on every backend): the settings and the refusal to switch with
// events in flight; upload events, exactly one per transition of a row, of the recorded
// types only, written in the transition's own transaction by the schema's triggers; the
// cleanup task as the outbox event (every PENDING makes it a new, unsent event, RETRY and the
// ended states keep what was sent); the relay's batch and its marks; the consumer's claim and
// its four answers; sweep's queue-mode claim; the counts; the migration from version 10.
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/ledger/schema.hpp>
#include <string>
#include <vector>

using namespace lodge;
using ledger::CleanupVia;
using ledger::EventClaimKind;
using ledger::EventType;
using ledger::OutboxSettings;
using ledger::SentMark;
using ledger::SetOutboxOutcome;
using ledger::TaskStatus;
using Strings = std::vector<std::string>;

namespace {
constexpr EventType k_active = EventType::file_active;
constexpr EventType k_deleted = EventType::file_deleted;
constexpr EventType k_failed = EventType::file_failed;
constexpr int64_t k_lease = 60'000;

struct Env : test::LedgerFixture {
  // A row at its own path "p<seed>", reserved now (and confirmed unless not).
  ledger::FileRecord put(const std::string &seed, bool confirm = true,
                         const std::function<void(ledger::ReserveRequest &)> &tweak = {}) {
    auto r = test::request("o", seed);
    r.relative_path = "p" + seed;
    if (tweak) tweak(r);
    auto res = l->reserve(r, now());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    if (confirm) REQUIRE(l->confirm(res.record.id, "etag", "", now()) == test::confirm_outcome::confirmed);
    return res.record;
  }
  void settings(std::vector<EventType> types, CleanupVia via = CleanupVia::queue) {
    REQUIRE(l->set_outbox_settings({via, std::move(types)}) == SetOutboxOutcome::set);
  }
  // The upload events not sent yet, as "file.active #3", oldest first; then marks them sent,
  // so that the next call says only what happened since.
  Strings take() {
    Strings out;
    std::vector<SentMark> marks;
    for (const auto &e : l->unsent_events(1000)) {
      out.push_back(std::string(to_string(e.type)) + " #" + std::to_string(e.row.id));
      marks.push_back({e.id, "m" + std::to_string(e.id)});
    }
    CHECK(l->mark_events_sent(marks, now()) == static_cast<int64_t>(marks.size()));
    return out;
  }
  static std::string ev(EventType t, int64_t id) {
    return std::string(to_string(t)) + " #" + std::to_string(id);
  }
  // The row's task past its due time, recorded as sent with message `msg`.
  void sent(int64_t record_id, const std::string &msg = "msg") {
    auto t = task_of(record_id);
    clock.t = std::max(clock.t.load(), t.next_retry_at);
    REQUIRE(l->mark_tasks_sent({{t.id, msg}}, now()) == 1);
  }
  // The consumer's claim of the row's task now; the test fails unless claimed.
  ledger::TaskRecord claim(int64_t record_id, const std::string &worker = "w") {
    auto c = l->claim_sent_task(task_of(record_id).id, now(), worker, k_lease);
    REQUIRE(c.kind == EventClaimKind::claimed);
    REQUIRE(c.task.has_value());
    return *c.task;
  }
  // Sweep's claim (queue mode) of the row's task now; the test fails unless claimed.
  ledger::TaskRecord sweep_claim(int64_t record_id) {
    const int64_t id = task_of(record_id).id;
    for (const auto &t : l->claim_due_not_queued(now(), 1000, "sweep", k_lease))
      if (t.id == id) return t;
    FAIL("sweep did not claim the task of row " << record_id);
    return {};
  }
  bool is_sent(int64_t record_id) {
    auto t = task_of(record_id);
    CHECK(t.sent_at.has_value() == t.message_id.has_value());
    return t.sent_at.has_value();
  }
};

} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE(
    "outbox settings: absent is tasks and no events; a switch of cleanup_via waits for events in flight") {
  Env e;
  CHECK(e.l->outbox_settings() == OutboxSettings{});
  const OutboxSettings queue{CleanupVia::queue, {k_active, k_failed}};
  REQUIRE(e.l->set_outbox_settings(queue) == SetOutboxOutcome::set);
  CHECK(e.l->outbox_settings() == queue);
  CHECK(e.connect()->outbox_settings() == queue); // recorded, not cached
  // Read back in k_event_types' order, each type once, however the caller listed them.
  REQUIRE(e.l->set_outbox_settings({CleanupVia::queue, {k_failed, k_active, k_failed}}) ==
          SetOutboxOutcome::set);
  CHECK(e.l->outbox_settings() == queue);

  auto a = e.put("1", false);
  e.sent(a.id);
  // A sent event whose task has not ended: the switch is refused, nothing written.
  CHECK(e.l->set_outbox_settings({CleanupVia::tasks, {}}) == SetOutboxOutcome::in_flight);
  CHECK(e.l->outbox_settings() == queue);
  // The event types alone may change meanwhile.
  const OutboxSettings fewer{CleanupVia::queue, {k_deleted}};
  REQUIRE(e.l->set_outbox_settings(fewer) == SetOutboxOutcome::set);
  CHECK(e.l->outbox_settings() == fewer);
  // Claimed (PROCESSING), still in flight; then retried (RETRY keeps it sent), still in flight.
  auto t = e.claim(a.id);
  CHECK(e.l->set_outbox_settings({CleanupVia::tasks, {}}) == SetOutboxOutcome::in_flight);
  REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->finish(t, false, "refused", e.now() + 1000, e.now()) == ledger::TaskFinish::retry);
  CHECK(e.l->set_outbox_settings({CleanupVia::tasks, {}}) == SetOutboxOutcome::in_flight);
  // Ended: the switch goes through.
  e.clock.t += 1000;
  t = e.claim(a.id);
  REQUIRE(e.l->finish(t, true, "", e.now(), e.now()) == ledger::TaskFinish::verify_scheduled);
  // The verify pass is a new, unsent PENDING event: nothing is in flight any more.
  CHECK_FALSE(e.is_sent(a.id));
  REQUIRE(e.l->set_outbox_settings({CleanupVia::tasks, {}}) == SetOutboxOutcome::set);
  CHECK(e.l->outbox_settings() == OutboxSettings{});
}

TEST_CASE("upload events: each transition of a row writes exactly one event of its type") {
  Env e;
  e.settings({k_active, k_deleted, k_failed});
  // confirm: file.active, at the transition's time, with the row as it is.
  auto a = e.put("1", false);
  CHECK(e.take().empty()); // an UPLOADING row reports nothing
  e.clock.t += 7;
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  {
    auto evs = e.l->unsent_events(10);
    REQUIRE(evs.size() == 1);
    CHECK(evs[0].type == k_active);
    CHECK(evs[0].occurred_at == e.now());
    CHECK(evs[0].row.id == a.id);
    CHECK(evs[0].row.upload_status == ledger::FileStatus::active);
    CHECK(evs[0].row.etag == "etag");
    CHECK(evs[0].row.object_key == a.object_key);
  }
  CHECK(e.take() == Strings{Env::ev(k_active, a.id)});
  // settle and a stat change the task or the row, not its state: nothing.
  auto owed = e.put("2", false);
  REQUIRE(e.l->confirm(owed.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  REQUIRE(e.l->settle(owed.id, e.now()) == ledger::SettleOutcome::settled);
  CHECK(e.take() == Strings{Env::ev(k_active, owed.id)});
  // soft delete and mark_missing: file.deleted.
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  REQUIRE(e.l->mark_missing(owed.id, "gone", e.now(), 1000, 2) == ledger::MissingOutcome::marked_missing);
  CHECK(e.take() == Strings{Env::ev(k_deleted, a.id), Env::ev(k_deleted, owed.id)});
  // mark_failed: file.failed (and a failed row deleted reports no file.deleted).
  auto f = e.put("3", false);
  REQUIRE(e.l->mark_failed(f.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(e.take() == Strings{Env::ev(k_failed, f.id)});
  // A reserve sharing another row's object is ACTIVE at once: file.active.
  auto s = e.put("4");
  auto req = test::request("o", "4");
  req.relative_path = "elsewhere";
  REQUIRE(e.l->reserve(req, e.now()).outcome == ledger::ReserveOutcome::shareable);
  req.share_with = s.id;
  auto shared = e.l->reserve(req, e.now());
  REQUIRE(shared.outcome == ledger::ReserveOutcome::shared);
  CHECK(e.take() == Strings{Env::ev(k_active, s.id), Env::ev(k_active, shared.record.id)});
  // upload --replace: the new row's file.active and the retired row's file.deleted, together.
  auto next = e.put("5", false, [](auto &r) { r.relative_path = "p4"; });
  REQUIRE(e.l->confirm(next.id, "etag", "", e.now(), ledger::CommitTag::none, ledger::Retire{1000, 2}) ==
          test::confirm_outcome::confirmed);
  CHECK(e.take() == Strings{Env::ev(k_active, next.id), Env::ev(k_deleted, s.id)});
  // repair, a holder gone, a sweep's decide, a staged upload's failure: file.failed.
  auto r1 = e.put("6", false);
  auto r2 = e.put("7", false, [](auto &r) { r.holder = "h1"; });
  auto r3 = e.put("8", false);
  auto r4 = e.put("9", false);
  REQUIRE(e.l->set_multipart_upload_id(r4.id, "up", e.now()) == ledger::SetUploadIdOutcome::recorded);
  REQUIRE(e.l->fail_resumable(r4.id, "part failed", e.now() + 1000, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  REQUIRE(e.l->fail_abandoned(r2.id, "h1", "gone", e.now(), 1000, 2) == ledger::RepairOutcome::repaired);
  e.clock.t = r1.upload_deadline_at + 5000;
  REQUIRE(e.l->repair_row(r1.id, e.now(), 1000, 2) == ledger::RepairOutcome::repaired);
  auto t3 = e.l->claim_task(e.task_of(r3.id).id, e.now(), "w", k_lease);
  REQUIRE(t3);
  REQUIRE(e.l->decide(*t3, e.now(), 1000) == ledger::TaskDecision::allowed);
  CHECK(e.take() == Strings{Env::ev(k_failed, r4.id), Env::ev(k_failed, r2.id), Env::ev(k_failed, r1.id),
                            Env::ev(k_failed, r3.id)});
  // A resumed row (UPLOAD_FAILED -> UPLOADING) reports nothing until it is confirmed.
  auto again = test::request("o", "9");
  again.relative_path = "p9";
  again.resume = true;
  auto resumed = e.l->reserve(again, e.now());
  REQUIRE(resumed.outcome == ledger::ReserveOutcome::resumed);
  CHECK(e.take().empty());
  REQUIRE(e.l->confirm(r4.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  CHECK(e.take() == Strings{Env::ev(k_active, r4.id)});
  // prune and expiry: file.deleted for each row.
  auto x = e.put("a", true, [&](auto &r) { r.expires_at = e.now(); });
  auto y = e.put("b", true, [](auto &r) { r.run_prefix = "snap"; });
  CHECK(e.take() == Strings{Env::ev(k_active, x.id), Env::ev(k_active, y.id)});
  REQUIRE(e.l->soft_delete_expired(e.now(), 1000, 2, 10).deleted == 1);
  REQUIRE(e.l->prune_snapshot("o", "snap", e.now(), {}, e.now(), 1000, 2).deleted == 1);
  CHECK(e.take() == Strings{Env::ev(k_deleted, x.id), Env::ev(k_deleted, y.id)});
}

TEST_CASE("upload events: a type not recorded writes nothing; the recorded types take effect at once") {
  Env e;
  auto a = e.put("1"); // nothing recorded: the default
  CHECK(e.take().empty());
  e.settings({k_active});
  auto b = e.put("2", false);
  REQUIRE(e.l->mark_failed(b.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  auto c = e.put("3");
  CHECK(e.take() == Strings{Env::ev(k_active, c.id)});
  e.settings({k_deleted, k_failed}, CleanupVia::tasks);
  auto d = e.put("4");
  REQUIRE(e.l->soft_delete(c.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  CHECK(e.take() == Strings{Env::ev(k_deleted, c.id)});
  e.settings({});
  REQUIRE(e.l->soft_delete(d.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  CHECK(e.take().empty());
  CHECK(e.l->outbox_counts(e.now()).events_unsent == 0);
}

TEST_CASE("upload events: a pooled worker's group-committed confirm writes its event in its batch") {
  Env e;
  e.settings({k_active});
  auto pool = e.pool();
  auto w = pool->worker();
  auto req = test::request("o", "1");
  auto res = w->reserve(req, e.now());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  auto pending = w->confirm_later(res.record.id, "etag", "", e.now(), ledger::CommitTag::none, std::nullopt);
  REQUIRE(pending->wait() == test::confirm_outcome::confirmed);
  CHECK(e.take() == Strings{Env::ev(k_active, res.record.id)});
}

TEST_CASE("upload events: oldest first, limited; marked sent once, conditionally") {
  Env e;
  e.settings({k_active});
  std::vector<int64_t> rows;
  for (const char *seed : {"1", "2", "3"}) {
    rows.push_back(e.put(seed).id);
    e.clock.t += 10;
  }
  auto evs = e.l->unsent_events(2);
  REQUIRE(evs.size() == 2);
  CHECK(evs[0].row.id == rows[0]);
  CHECK(evs[1].row.id == rows[1]);
  CHECK(evs[0].id < evs[1].id);
  CHECK(e.l->outbox_counts(e.now()).events_unsent == 3);
  CHECK(e.l->outbox_counts(e.now()).oldest_unsent_at == evs[0].occurred_at);
  // Marked: only an unsent event, once (a second relay's mark changes nothing).
  CHECK(e.l->mark_events_sent({{evs[0].id, "m1"}, {evs[1].id, ""}, {999'999, "x"}}, e.now()) == 2);
  CHECK(e.l->mark_events_sent({{evs[0].id, "m2"}}, e.now()) == 0);
  CHECK(e.l->mark_events_sent({}, e.now()) == 0);
  auto rest = e.l->unsent_events(10);
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].row.id == rows[2]);
  CHECK(e.l->outbox_counts(e.now()).events_unsent == 1);
  CHECK(e.l->outbox_counts(e.now()).oldest_unsent_at == rest[0].occurred_at);
}

TEST_CASE("the relay's batch: due, unsent first deletes by id; marks only what is still waiting unsent") {
  Env e;
  auto a = e.put("1", false);
  auto b = e.put("2", false);
  auto later = e.put("3", false, [](auto &r) { r.deadline_ms = 100'000; });
  auto owed = e.put("4", false);
  REQUIRE(e.l->confirm(owed.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  auto done = e.put("5"); // IGNORED
  // A verify pass due: the first delete done, the pass scheduled.
  auto v = e.put("6", false);
  REQUIRE(e.l->mark_failed(v.id, "ambiguous", false, e.now()) == ledger::MarkFailedOutcome::failed);
  e.clock.t = a.upload_deadline_at + 1000; // every 10 s deadline + 1 s grace is due
  auto tv = e.claim(v.id);
  REQUIRE(e.l->decide(tv, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->finish(tv, true, "", e.now(), e.now()) == ledger::TaskFinish::verify_scheduled);
  REQUIRE(e.task_of(v.id).verify_pass == ledger::k_verify_due);

  auto ids = [&](int limit) {
    std::vector<int64_t> out;
    for (const auto &t : e.l->unsent_due_tasks(e.now(), limit))
      out.push_back(t.record_id);
    return out;
  };
  CHECK(ids(10) == std::vector<int64_t>{a.id, b.id});
  CHECK(ids(1) == std::vector<int64_t>{a.id});
  (void)later;
  (void)done;
  // b is claimed by a consumer before the relay marks it: left as it is.
  auto tb = e.claim(b.id);
  CHECK(e.l->mark_tasks_sent({{e.task_of(a.id).id, "m-a"}, {tb.id, "m-b"}, {999'999, "x"}}, e.now()) == 1);
  CHECK(e.task_of(a.id).sent_at == e.now());
  CHECK(e.task_of(a.id).message_id == "m-a");
  CHECK_FALSE(e.is_sent(b.id));
  // Once sent, never again: neither listed nor marked a second time.
  CHECK(ids(10).empty());
  e.clock.t += 5;
  CHECK(e.l->mark_tasks_sent({{e.task_of(a.id).id, "m-again"}}, e.now()) == 0);
  CHECK(e.task_of(a.id).message_id == "m-a");
  CHECK(e.task_of(a.id).sent_at == e.now() - 5);
}

TEST_CASE("a task made PENDING is a new, unsent event; RETRY and the ended states keep what was sent") {
  Env e;
  SUBCASE("finish: RETRY keeps it, a scheduled verify pass clears it, FAILED keeps it, retry clears it") {
    auto a = e.put("1", false);
    REQUIRE(e.l->mark_failed(a.id, "ambiguous", false, e.now()) == ledger::MarkFailedOutcome::failed);
    e.sent(a.id, "m1");
    auto t = e.claim(a.id);
    CHECK(t.message_id == "m1"); // the claim keeps it
    REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::allowed);
    REQUIRE(e.l->finish(t, false, "refused", e.now() + 100, e.now()) == ledger::TaskFinish::retry);
    CHECK(e.task_of(a.id).status == TaskStatus::retry);
    CHECK(e.task_of(a.id).message_id == "m1");
    e.clock.t += 100;
    t = e.claim(a.id);
    REQUIRE(e.l->finish(t, true, "", e.now() + 100, e.now()) == ledger::TaskFinish::verify_scheduled);
    CHECK(e.task_of(a.id).status == TaskStatus::pending);
    CHECK_FALSE(e.is_sent(a.id));
    // The verify pass, sent anyway (a relay does not, but a mark is a mark), run by sweep
    // (a message never claims a verify pass), then dead-lettered.
    e.sent(a.id, "m2");
    // One retry was spent on the first delete: one more RETRY, then FAILED.
    e.clock.t = std::max(e.now(), e.task_of(a.id).next_retry_at);
    t = e.sweep_claim(a.id);
    REQUIRE(e.l->finish(t, false, "refused", e.now() + 100, e.now()) == ledger::TaskFinish::retry);
    CHECK(e.task_of(a.id).message_id == "m2");
    e.clock.t = e.task_of(a.id).next_retry_at;
    t = e.sweep_claim(a.id);
    REQUIRE(e.l->finish(t, false, "refused", e.now() + 100, e.now()) == ledger::TaskFinish::dead_letter);
    CHECK(e.task_of(a.id).status == TaskStatus::failed);
    CHECK(e.task_of(a.id).message_id == "m2");
    CHECK(e.l->outbox_counts(e.now()).cleanup_dead == 1);
    REQUIRE(e.l->retry_task(e.task_of(a.id).id, e.now()) == ledger::RetryOutcome::requeued);
    CHECK_FALSE(e.is_sent(a.id));
    CHECK(e.l->outbox_counts(e.now()).cleanup_dead == 0);
  }
  SUBCASE("decide's postponement clears it") {
    auto a = e.put("1", false, [](auto &r) { r.holder = "h"; });
    // Its not-before moved to now while the row is still within its deadline (a renewal may).
    REQUIRE(e.l->renew(a.id, "h", a.upload_deadline_at, e.now(), e.now()) == ledger::RenewOutcome::renewed);
    e.sent(a.id);
    auto t = e.claim(a.id);
    REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::postponed);
    CHECK(e.task_of(a.id).status == TaskStatus::pending);
    CHECK_FALSE(e.is_sent(a.id));
  }
  SUBCASE("confirm's IGNORED keeps it; a soft delete then clears it; SUCCESS keeps it; requeue clears it") {
    auto a = e.put("1", false);
    e.sent(a.id, "m1"); // due and sent, not consumed yet
    REQUIRE(e.l->confirm(a.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
    CHECK(e.task_of(a.id).status == TaskStatus::ignored);
    CHECK(e.task_of(a.id).message_id == "m1");
    REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
    CHECK(e.task_of(a.id).status == TaskStatus::pending);
    CHECK_FALSE(e.is_sent(a.id));
    e.sent(a.id, "m2");
    auto t = e.claim(a.id);
    REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::allowed);
    REQUIRE(e.l->finish(t, true, "", e.now(), e.now()) == ledger::TaskFinish::success);
    CHECK(e.task_of(a.id).message_id == "m2");
    REQUIRE(e.l->requeue_task_for(a.id, e.now(), 2) == ledger::QueueOutcome::queued);
    CHECK(e.task_of(a.id).status == TaskStatus::pending);
    CHECK_FALSE(e.is_sent(a.id));
  }
  SUBCASE("end_tag: a row deleted while its tag was set makes the task PENDING, unsent") {
    auto a = e.put("1", false);
    REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
            test::confirm_outcome::confirmed);
    e.sent(a.id);
    auto t = e.claim(a.id);
    REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::tag);
    REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
    REQUIRE(e.l->end_tag(t, e.now() + 1000, e.now()) == ledger::TaskFinish::success);
    CHECK(e.task_of(a.id).status == TaskStatus::pending);
    CHECK_FALSE(e.is_sent(a.id));
  }
  SUBCASE("repair of a sent task's row keeps the message in flight (the task stays PENDING)") {
    auto a = e.put("1", false);
    e.sent(a.id, "m1");
    REQUIRE(e.l->repair_row(a.id, e.now(), 1000, 2) == ledger::RepairOutcome::repaired);
    CHECK(e.task_of(a.id).message_id == "m1");
    CHECK(e.claim(a.id).verify_pass == ledger::k_verify_owed);
  }
}

TEST_CASE("claim_sent_task: claimed, held, not_due or done") {
  Env e;
  auto a = e.put("1", false);
  const int64_t task = e.task_of(a.id).id;
  // done: no such task.
  auto none = e.l->claim_sent_task(999'999, e.now(), "w", k_lease);
  CHECK(none.kind == EventClaimKind::done);
  CHECK_FALSE(none.task);
  // done: PENDING, unsent, not due (a new event the relay publishes when due).
  auto early = e.l->claim_sent_task(task, e.now(), "w", k_lease);
  CHECK(early.kind == EventClaimKind::done);
  REQUIRE(early.task);
  CHECK(early.task->status == TaskStatus::pending);
  // claimed: due, whether or not the relay lived to mark it sent.
  e.clock.t = e.task_of(a.id).next_retry_at;
  auto c1 = e.l->claim_sent_task(task, e.now(), "w1", k_lease);
  REQUIRE(c1.kind == EventClaimKind::claimed);
  REQUIRE(c1.task);
  CHECK(c1.task->status == TaskStatus::processing);
  CHECK(c1.task->lease_owner == "w1");
  CHECK(c1.task->lease_until == e.now() + k_lease);
  CHECK(c1.task->lease_version == 1);
  // held: another worker's lease is live; deliver again at its end.
  auto h = e.l->claim_sent_task(task, e.now() + 10, "w2", k_lease);
  CHECK(h.kind == EventClaimKind::held);
  CHECK(h.retry_at == e.now() + k_lease);
  // claimed again once the lease expired: a new lease_version fences the first worker.
  e.clock.t += k_lease + 1;
  auto c2 = e.l->claim_sent_task(task, e.now(), "w2", k_lease);
  REQUIRE(c2.kind == EventClaimKind::claimed);
  CHECK(c2.task->lease_version == 2);
  CHECK(e.l->finish(*c1.task, false, "stale", e.now(), e.now()) == ledger::TaskFinish::lease_lost);
  // not_due: a retry's back-off, its event sent (the broker holds the delayed message).
  REQUIRE(e.l->decide(*c2.task, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->mark_tasks_sent({{task, "m"}}, e.now()) == 0); // PROCESSING: not marked
  auto b = e.put("2", false);
  e.sent(b.id);
  auto tb = e.claim(b.id);
  REQUIRE(e.l->decide(tb, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->finish(tb, false, "refused", e.now() + 5000, e.now()) == ledger::TaskFinish::retry);
  auto nd = e.l->claim_sent_task(tb.id, e.now(), "w", k_lease);
  CHECK(nd.kind == EventClaimKind::not_due);
  CHECK(nd.retry_at == e.now() + 5000);
  CHECK(e.task_of(b.id).status == TaskStatus::retry);
  // done: the task ended (the row was confirmed, or the delete succeeded).
  REQUIRE(e.l->finish(*c2.task, true, "", e.now(), e.now()) != ledger::TaskFinish::lease_lost);
  auto c = e.put("3", false);
  e.sent(c.id);
  e.clock.t -= 1; // not due again yet: the confirm comes first
  REQUIRE(e.l->confirm(c.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  auto dn = e.l->claim_sent_task(e.task_of(c.id).id, e.now() + 1, "w", k_lease);
  CHECK(dn.kind == EventClaimKind::done);
  REQUIRE(dn.task);
  CHECK(dn.task->status == TaskStatus::ignored);
  CHECK(e.task_of(c.id).lease_version == 0);
}

TEST_CASE("claim_sent_task: a redelivery after the delete finds the verify pass sweep's, done") {
  Env e;
  auto a = e.put("1", false);
  REQUIRE(e.l->mark_failed(a.id, "ambiguous", false, e.now()) == ledger::MarkFailedOutcome::failed);
  e.sent(a.id);
  auto t = e.claim(a.id);
  REQUIRE(e.l->decide(t, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->finish(t, true, "", e.now(), e.now()) == ledger::TaskFinish::verify_scheduled);
  REQUIRE(e.task_of(a.id).verify_pass == ledger::k_verify_due);
  // The consumer died before its ack: the message comes back, due or not, and claims nothing.
  for (int64_t at : {e.now(), e.now() + 10 * k_lease}) {
    auto again = e.l->claim_sent_task(t.id, at, "w2", k_lease);
    CHECK(again.kind == EventClaimKind::done);
    REQUIRE(again.task);
    CHECK(again.task->status == TaskStatus::pending);
  }
  CHECK(e.task_of(a.id).lease_version == t.lease_version);
}

TEST_CASE("claim_due_not_queued: sweep in queue mode claims verify passes and owed tags only") {
  Env e;
  auto first = e.put("1", false);
  auto owed = e.put("2", false);
  REQUIRE(e.l->confirm(owed.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  auto v = e.put("3", false);
  REQUIRE(e.l->mark_failed(v.id, "ambiguous", false, e.now()) == ledger::MarkFailedOutcome::failed);
  e.clock.t = first.upload_deadline_at + 1000;
  auto tv = e.claim(v.id);
  REQUIRE(e.l->decide(tv, e.now(), 1000) == ledger::TaskDecision::allowed);
  REQUIRE(e.l->finish(tv, true, "", e.now(), e.now()) == ledger::TaskFinish::verify_scheduled);
  auto claimed = e.l->claim_due_not_queued(e.now(), 10, "sweep", k_lease);
  std::vector<int64_t> rows;
  for (const auto &t : claimed) {
    CHECK(t.status == TaskStatus::processing);
    CHECK(t.lease_owner == "sweep");
    rows.push_back(t.record_id);
  }
  std::sort(rows.begin(), rows.end());
  CHECK(rows == std::vector<int64_t>{owed.id, v.id});
  CHECK(e.task_of(first.id).status == TaskStatus::pending); // the queue's
  CHECK(e.l->claim_due_not_queued(e.now(), 10, "sweep", k_lease).empty());
  CHECK(e.l->claim_due(e.now(), 10, "sweep", k_lease).size() == 1); // tasks mode takes it
}

TEST_CASE("outbox_counts: the relay's backlog, in flight, dead letters, unsent upload events") {
  Env e;
  e.settings({k_failed});
  CHECK(e.l->outbox_counts(e.now()).cleanup_due_unsent == 0);
  CHECK_FALSE(e.l->outbox_counts(e.now()).oldest_unsent_at);
  auto a = e.put("1", false);
  auto b = e.put("2", false);
  auto c = e.put("3", false);
  e.clock.t += 3;
  auto d = e.put("4", false); // due 3 ms later than the others
  const int64_t due = e.task_of(a.id).next_retry_at;
  CHECK(e.l->outbox_counts(due - 1).cleanup_due_unsent == 0);
  e.clock.t = due;
  auto n = e.l->outbox_counts(e.now());
  CHECK(n.cleanup_due_unsent == 3);
  CHECK(n.oldest_unsent_at == due);
  CHECK(n.cleanup_in_flight == 0);
  e.sent(a.id);
  e.sent(b.id);
  auto tb = e.claim(b.id);
  // c dead-lettered after it was sent: FAILED with sent_at.
  e.sent(c.id);
  auto tc = e.claim(c.id);
  REQUIRE(e.l->dead_letter(tc, "not ours", e.now()) == ledger::DeadLetterOutcome::dead_lettered);
  // d's row failed: file.failed (unsent), and its task stays unsent, not yet due.
  REQUIRE(e.l->mark_failed(d.id, "refused", false, e.now()) == ledger::MarkFailedOutcome::failed);
  n = e.l->outbox_counts(e.now());
  CHECK(n.cleanup_due_unsent == 0);
  CHECK(n.cleanup_in_flight == 2); // a PENDING sent, b PROCESSING
  CHECK(n.cleanup_dead == 1);
  CHECK(n.events_unsent == 1);
  CHECK(n.oldest_unsent_at == e.now()); // the event's time
  REQUIRE(e.l->finish(tb, true, "", e.now(), e.now()) == ledger::TaskFinish::success);
  CHECK(e.l->outbox_counts(e.now()).cleanup_in_flight == 1);
}

TEST_SUITE_END(); // contract

// The migration of a database (on both; the fake has no schema).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("migration 10 -> 11: tasks unsent, no events until recorded, jobs relay and consume") {
  Env e;
  auto a = e.put("1");
  auto b = e.put("2", false);
  e.l->record_job_run({"sweep", "w1", 10, 20, "ok", "{}"});
  e.l.reset();
  test::as_schema_v10(e.fresh);
  e.l = e.fresh.open(&e.clock, false); // migrates
  CHECK(e.l->schema_version() == ledger::k_schema_version);
  CHECK(e.l->outbox_settings() == OutboxSettings{});
  CHECK_FALSE(e.is_sent(a.id));
  CHECK_FALSE(e.is_sent(b.id));
  CHECK(e.task_of(a.id).status == TaskStatus::ignored);
  CHECK(e.l->status(30).last_runs.at("sweep")->worker_id == "w1");
  e.l->record_job_run({"relay", "w2", 30, 40, "ok", "{}"});
  e.l->record_job_run({"consume", "w3", 30, 40, "ok", "{}"});
  // The triggers are there: recorded types write events from now on.
  CHECK(e.take().empty());
  e.settings({k_active, k_deleted});
  REQUIRE(e.l->confirm(b.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  CHECK(e.take() == Strings{Env::ev(k_active, b.id), Env::ev(k_deleted, a.id)});
  e.sent(a.id);
  CHECK(e.task_of(a.id).message_id == "msg");
}

TEST_SUITE_END(); // sqlonly
