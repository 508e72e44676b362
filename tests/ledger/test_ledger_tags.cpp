// The committed tag on a store that tags objects (Azure; S3 with tag_state): the task of a
// confirmed row outlives the confirm until its object is tagged committed, recorded on the
// task (tag_owed) so that whoever finishes it tags the object, and a failed upload's delete
// is guarded. Part of the ledger contract (every backend), through the cleanup path
// (ops/cleanup) and the recording fake store.
#include "../unit/fake_store.hpp"
#include "support.hpp"

#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/ops/cleanup.hpp>

using namespace lodge;

namespace {
struct Env : test::LedgerFixture {
  test::FakeStore store;
  ops::CleanupSettings cs{1000, 100, 1000};
  Env() { store.enable_state_tags(); }
  // An object at the row's key, as its upload left it (stamped, tagged pending), or as
  // another tool wrote it (`meta`: its metadata).
  void place(const ledger::FileRecord &r, std::optional<store::Metadata> meta = std::nullopt) {
    store::PutRequest req;
    req.key = r.object_key;
    req.metadata =
        meta ? *meta
             : store::Metadata{{store::meta::ledger, l->uuid()}, {store::meta::record, std::to_string(r.id)}};
    REQUIRE(store.put(req).ok());
  }
  // Claims the row's task at its due time.
  ledger::TaskRecord claim_at_due(int64_t record_id) {
    auto t = task_of(record_id);
    clock.t = std::max(clock.t.load(), t.next_retry_at);
    auto c = l->claim_task(t.id, clock.t, "w", 60'000);
    REQUIRE(c.has_value());
    return *c;
  }
};
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("confirm owing the committed tag keeps the task pending with the tag owed; settle ends it") {
  Env e;
  auto a = e.reserve("a");
  auto due = e.task_of(a.id).next_retry_at;
  CHECK_FALSE(e.task_of(a.id).tag_owed); // an UPLOADING row owes nothing yet
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::active);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.tag_owed);
  CHECK(t.next_retry_at == due); // still due at deadline + grace: a sweep finishes the tag
  CHECK(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::settled);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(a.id).tag_owed);
  CHECK(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::not_pending); // once
}

TEST_CASE("confirm owing no tag ends the task IGNORED at once, nothing owed") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::none) ==
          test::confirm_outcome::confirmed);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::ignored);
  CHECK_FALSE(t.tag_owed);
  CHECK(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::not_pending);
}

TEST_CASE("decide reads the tag owed from the task: `tag`, then end_tag ignores it and clears the debt") {
  Env e;
  auto owed = e.reserve("a");
  auto plain = e.reserve("b");
  REQUIRE(e.l->confirm(owed.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  REQUIRE(e.l->confirm(plain.id, "etag", "", e.now(), ledger::CommitTag::none) ==
          test::confirm_outcome::confirmed);
  // The plain row's task as if a sweep still found it pending: nothing recorded, nothing to tag.
  e.fresh.set_task_pending(plain.id);
  auto t = e.claim_at_due(owed.id);
  auto u = e.claim_at_due(plain.id);
  // No store and no configuration is asked: the task's record decides.
  CHECK(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::tag);
  CHECK(e.l->decide(u, e.now(), 1'000) == ledger::TaskDecision::ignored);
  auto held = e.task_of(owed.id);
  CHECK(held.status == ledger::TaskStatus::processing); // held under the lease while it tags
  CHECK(held.tag_owed);
  CHECK(e.l->end_tag(t, e.now() + 5'000, e.now()) == ledger::TaskFinish::success);
  CHECK(e.task_of(owed.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(owed.id).tag_owed);
  CHECK(e.l->end_tag(t, e.now() + 5'000, e.now()) == ledger::TaskFinish::lease_lost); // once
}

TEST_CASE("end_tag: a row deleted while its tag was being set is due again for its delete") {
  Env e;
  auto a = e.reserve("a");
  e.place(a);
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  auto t = e.claim_at_due(a.id);
  REQUIRE(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::tag);
  // The user deletes the file meanwhile: the delete finds the task held and leaves it.
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::processing);
  REQUIRE(e.store.mark_committed(a.object_key, {}).ok());
  CHECK(e.l->end_tag(t, e.now() + 5'000, e.now()) == ledger::TaskFinish::success);
  auto back = e.task_of(a.id);
  CHECK(back.status == ledger::TaskStatus::pending); // not IGNORED: the object must still go
  CHECK(back.next_retry_at == e.now() + 5'000);
  CHECK_FALSE(back.tag_owed);
  auto again = e.claim_at_due(a.id);
  CHECK(ops::run_claimed_task(*e.l, e.store, again, e.cs, e.clock).outcome == ops::CleanupOutcome::deleted);
  CHECK_FALSE(e.store.has(a.object_key));
}

TEST_CASE("a deleted row's task owes no tag: the delete clears the debt") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK_FALSE(t.tag_owed);
}

TEST_CASE("settle leaves the task of a row deleted after its confirm: the delete needs it") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  CHECK(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::not_pending);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::pending);
}

TEST_CASE("settle does not touch a task a sweep holds") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  auto held = e.claim_at_due(a.id);
  CHECK(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::not_pending);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::processing);
  CHECK(e.task_of(a.id).lease_version == held.lease_version);
}

TEST_CASE("a sweep tags an ACTIVE row's object committed when its upload could not, then ignores the task") {
  Env e;
  auto a = e.reserve("a");
  e.place(a);
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  // The upload's own tagging failed (or its process died): the task is still due.
  auto t = e.claim_at_due(a.id);
  e.store.fail("mark_committed", Error(Errc::storage_unavailable, "PUT ?comp=tags: reset"), 1);
  auto first = ops::run_claimed_task(*e.l, e.store, t, e.cs, e.clock);
  CHECK(first.outcome == ops::CleanupOutcome::retried);
  CHECK(e.store.state_tag(a.object_key) == "pending");
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::retry);
  CHECK(e.task_of(a.id).tag_owed); // still owed: the retry tags it
  auto again = e.claim_at_due(a.id);
  auto second = ops::run_claimed_task(*e.l, e.store, again, e.cs, e.clock);
  CHECK(second.outcome == ops::CleanupOutcome::ignored);
  CHECK(e.store.state_tag(a.object_key) == "committed");
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(a.id).tag_owed);
  CHECK(e.store.removed().empty()); // never a delete of an ACTIVE row's object
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::active);
}

TEST_CASE("a stale lease can neither end a tag nor ignore a task") {
  Env e;
  auto a = e.reserve("a");
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  auto t = e.claim_at_due(a.id);
  CHECK(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::tag);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::processing); // held meanwhile
  // Another worker takes the task over once the lease expires.
  e.clock.t += 61'000;
  auto newer = e.l->claim_task(t.id, e.now(), "w2", 60'000);
  REQUIRE(newer.has_value());
  CHECK(e.l->end_tag(t, e.now(), e.now()) == ledger::TaskFinish::lease_lost);
  CHECK(e.l->ignore_task(t, e.now()) == ledger::TaskFinish::lease_lost);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::processing);
  CHECK(e.task_of(a.id).tag_owed);
  CHECK(e.l->end_tag(*newer, e.now(), e.now()) == ledger::TaskFinish::success);
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
}

TEST_CASE("a failed upload's pending object is deleted; one tagged committed is refused and kept") {
  Env e;
  auto pending = e.reserve("p");
  e.place(pending);
  REQUIRE(e.l->mark_failed(pending.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto t = e.claim_at_due(pending.id);
  CHECK(ops::run_claimed_task(*e.l, e.store, t, e.cs, e.clock).outcome == ops::CleanupOutcome::deleted);
  CHECK_FALSE(e.store.has(pending.object_key));

  auto committed = e.reserve("c");
  e.place(committed);
  e.store.set_state_tag(committed.object_key, "committed"); // not the failed upload's own object
  REQUIRE(e.l->mark_failed(committed.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  auto tc = e.claim_at_due(committed.id);
  auto r = ops::run_claimed_task(*e.l, e.store, tc, e.cs, e.clock);
  CHECK(r.outcome == ops::CleanupOutcome::kept);
  CHECK(e.store.has(committed.object_key));
  auto task = e.task_of(committed.id);
  CHECK(task.status == ledger::TaskStatus::ignored);
  REQUIRE(task.last_error.has_value());
  CHECK(task.last_error->find("not tagged pending") != std::string::npos); // said, not silent
}

TEST_CASE("another writer's object at a dead row's key is left, the task IGNORED saying why (I8)") {
  Env e;
  struct Case {
    const char *name;
    std::function<store::Metadata(const ledger::FileRecord &)> meta;
    const char *why;
  };
  for (const auto &c : {
           Case{"unstamped", [](const ledger::FileRecord &) { return store::Metadata{}; }, "no lodge stamp"},
           Case{"another ledger",
                [](const ledger::FileRecord &r) {
                  return store::Metadata{{store::meta::ledger, "0000-other"},
                                         {store::meta::record, std::to_string(r.id)}};
                },
                "0000-other"},
           Case{"another record",
                [&e](const ledger::FileRecord &r) {
                  return store::Metadata{{store::meta::ledger, e.l->uuid()},
                                         {store::meta::record, std::to_string(r.id + 1000)}};
                },
                "#"},
       }) {
    CAPTURE(c.name);
    auto row = e.reserve(c.name);
    e.place(row, c.meta(row)); // tagged pending, as another tool may tag it too
    REQUIRE(e.l->mark_failed(row.id, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
    auto t = e.claim_at_due(row.id);
    auto r = ops::run_claimed_task(*e.l, e.store, t, e.cs, e.clock);
    CHECK(r.outcome == ops::CleanupOutcome::kept);
    CHECK(e.store.has(row.object_key));
    auto task = e.task_of(row.id);
    CHECK(task.status == ledger::TaskStatus::ignored);
    REQUIRE(task.last_error.has_value());
    CHECK_MESSAGE(task.last_error->find(c.why) != std::string::npos, *task.last_error);
    CHECK(task.last_error->find("not record #" + std::to_string(row.id)) != std::string::npos);
  }
}

TEST_CASE("a user-deleted ACTIVE row's committed object is deleted without the guard") {
  Env e;
  auto a = e.reserve("a");
  e.place(a);
  REQUIRE(e.l->confirm(a.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
          test::confirm_outcome::confirmed);
  REQUIRE(e.store.mark_committed(a.object_key, {}).ok());
  REQUIRE(e.l->settle(a.id, e.now()) == ledger::SettleOutcome::settled);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto t = e.claim_at_due(a.id);
  CHECK(ops::run_claimed_task(*e.l, e.store, t, e.cs, e.clock).outcome == ops::CleanupOutcome::deleted);
  CHECK_FALSE(e.store.has(a.object_key));
}

TEST_SUITE_END(); // contract

// The migration of a database (on both; the fake has no schema).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("migration to tag_owed: an ACTIVE row whose task is still live is owed the tag, nothing else") {
  Env e;
  // One row for every shape the ledger had before the step (version 8 -> 9) that adds
  // tag_owed; only the first three looked owed then.
  constexpr int before = 8;
  auto confirmed = [&](const char *seed) {
    auto r = e.reserve(seed);
    REQUIRE(e.l->confirm(r.id, "etag", "", e.now(), ledger::CommitTag::owed) ==
            test::confirm_outcome::confirmed);
    return r.id;
  };
  const int64_t pending = confirmed("1");
  const int64_t retry = confirmed("2");
  const int64_t held = confirmed("3");
  const int64_t settled = confirmed("4");
  const int64_t deleted = confirmed("5");
  const int64_t uploading = e.reserve("6").id;
  const int64_t failed = e.reserve("7").id;
  REQUIRE(e.l->settle(settled, e.now()) == ledger::SettleOutcome::settled);
  REQUIRE(e.l->soft_delete(deleted, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  REQUIRE(e.l->mark_failed(failed, "refused", true, e.now()) == ledger::MarkFailedOutcome::failed);
  (void)e.claim_at_due(held);
  e.l.reset();
  auto id = [](int64_t v) { return std::to_string(v); };
  // As that version left it: no tag_owed column, the RETRY task as a failed tag left it.
  e.fresh.exec_raw("UPDATE cleanup_task SET status = 'RETRY', retry_count = 1 WHERE record_id = " +
                   id(retry));
  as_schema_v9(e.fresh);
  e.fresh.exec_raw("ALTER TABLE cleanup_task DROP COLUMN tag_owed");
  e.fresh.set_schema_version(before);
  e.l = e.fresh.open(&e.clock, false); // migrates
  CHECK(e.l->schema_version() == ledger::k_schema_version);
  CHECK(e.task_of(pending).tag_owed);
  CHECK(e.task_of(retry).tag_owed);
  CHECK(e.task_of(held).tag_owed);
  for (int64_t none : {settled, deleted, uploading, failed}) {
    INFO("record ", none);
    CHECK_FALSE(e.task_of(none).tag_owed);
  }
  // And the migrated debt is finished as any other: the sweep's decide says tag.
  auto t = e.claim_at_due(pending);
  CHECK(e.l->decide(t, e.now(), 1'000) == ledger::TaskDecision::tag);
}

TEST_SUITE_END(); // sqlonly
