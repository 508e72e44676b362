// ops::activate, the one way a row becomes ACTIVE (the uploader, `lodge confirm`,
// `reconcile --apply --roll-forward`): the confirm records whether the object is owed the
// committed tag, the tag is set, the task settled; a failed tag leaves the debt to a sweep.
// Part of the ledger contract (every backend), with the recording fake store.
#include "../unit/fake_store.hpp"
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/jobs/reconcile.hpp>
#include <lodge/store/object_options.hpp>

using namespace lodge;

namespace {
struct Env : test::LedgerFixture {
  test::FakeStore store;
  ops::CleanupSettings cs{1000, 100, 1000};
  explicit Env(bool tags = true) {
    if (tags) store.enable_state_tags();
  }
  // A row reserved with user tags, and its object as its upload left it (tagged pending),
  // stamped for the row.
  ledger::FileRecord stored(const std::string &seed) {
    auto req = test::request("o", seed);
    store::ObjectOptions o;
    o.tags = {{"team", "archive"}};
    req.object_options = store::to_json(o);
    auto res = l->reserve(req, now());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    store::PutRequest put;
    put.key = res.record.object_key;
    put.body.size = static_cast<uint64_t>(res.record.size);
    put.metadata = {{store::meta::ledger, l->uuid()},
                    {store::meta::record, std::to_string(res.record.id)},
                    {store::meta::sha256, res.record.sha256}};
    REQUIRE(store.put(put).ok());
    return res.record;
  }
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

TEST_CASE(
    "activate on a store that tags: confirmed owing the tag, tagged committed with the row's tags, settled") {
  Env e;
  auto a = e.stored("a");
  CHECK(ops::commit_tag_for(e.store) == ledger::CommitTag::owed);
  auto act = ops::activate(*e.l, e.store, a, {"etag", ""}, e.clock);
  CHECK(act.active());
  CHECK(act.tag_owed);
  CHECK_FALSE(act.tag_error.has_value());
  CHECK(act.settled);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::active);
  CHECK(e.store.state_tag(a.object_key) == "committed");
  CHECK(e.store.committed_tags(a.object_key) == std::map<std::string, std::string>{{"team", "archive"}});
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::ignored);
  CHECK_FALSE(t.tag_owed);
}

TEST_CASE("activate on a store that does not tag: the task is IGNORED by the confirm, nothing tagged") {
  Env e(false);
  auto a = e.stored("a");
  CHECK(ops::commit_tag_for(e.store) == ledger::CommitTag::none);
  auto act = ops::activate(*e.l, e.store, a, {"etag", ""}, e.clock);
  CHECK(act.active());
  CHECK_FALSE(act.tag_owed);
  CHECK_FALSE(act.settled);
  CHECK(e.store.count("mark_committed") == 0);
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::ignored);
  CHECK_FALSE(t.tag_owed);
}

TEST_CASE("a failed tag leaves the row ACTIVE and the tag owed; the sweep that claims the task sets it") {
  Env e;
  auto a = e.stored("a");
  e.store.fail("mark_committed", Error(Errc::storage_unavailable, "PUT ?tagging: 503"), 1);
  auto act = ops::activate(*e.l, e.store, a, {"etag", ""}, e.clock);
  CHECK(act.active());
  REQUIRE(act.tag_error.has_value());
  CHECK(act.tag_error->code == Errc::storage_unavailable);
  CHECK_FALSE(act.settled);
  CHECK(e.row(a.id).upload_status == ledger::FileStatus::active);
  CHECK(e.store.state_tag(a.object_key) == "pending");
  auto t = e.task_of(a.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.tag_owed);
  // Another connection (another host's sweep): the record decides, and it tags.
  auto other = e.store.connection();
  auto claimed = e.claim_at_due(a.id);
  CHECK(ops::run_claimed_task(*e.l, *other, claimed, e.cs, e.clock).outcome == ops::CleanupOutcome::ignored);
  CHECK(e.store.state_tag(a.object_key) == "committed");
  CHECK(e.store.committed_tags(a.object_key) == std::map<std::string, std::string>{{"team", "archive"}});
  CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
  CHECK_FALSE(e.task_of(a.id).tag_owed);
  CHECK(e.store.removed().empty());
}

TEST_CASE("a confirm refused is no activation: nothing is tagged") {
  Env e;
  auto failed = e.stored("a");
  REQUIRE(e.l->mark_failed(failed.id, "refused", false, e.now()) == ledger::MarkFailedOutcome::failed);
  CHECK(ops::activate(*e.l, e.store, failed, {"etag", ""}, e.clock).confirm ==
        ledger::ConfirmOutcome::row_not_uploading);
  auto held = e.stored("b");
  (void)e.claim_at_due(held.id); // a sweep holds its task: its cleanup may be under way
  auto act = ops::activate(*e.l, e.store, held, {"etag", ""}, e.clock);
  CHECK(act.confirm == ledger::ConfirmOutcome::task_held);
  CHECK_FALSE(act.tag_owed);
  CHECK(e.store.count("mark_committed") == 0);
  CHECK(e.store.state_tag(held.object_key) == "pending");
  CHECK_FALSE(e.task_of(held.id).tag_owed);
}

TEST_CASE("activate_later: confirms queued on the workers' pool, each tagged and settled once finished") {
  Env e;
  auto pool = e.pool();
  auto w = pool->worker();
  std::vector<ledger::FileRecord> rows{e.stored("a"), e.stored("b"), e.stored("c")};
  std::vector<ops::PendingActivation> pending;
  for (const auto &r : rows)
    pending.push_back(ops::activate_later(*w, e.store, r, {"etag", ""}, std::nullopt, {}, e.clock));
  CHECK(e.store.count("mark_committed") == 0); // nothing is tagged before its confirm committed
  for (auto &p : pending) {
    auto act = p.finish();
    CHECK(act.active());
    CHECK(act.settled);
  }
  for (const auto &r : rows) {
    CHECK(e.store.state_tag(r.object_key) == "committed");
    CHECK(e.task_of(r.id).status == ledger::TaskStatus::ignored);
    CHECK_FALSE(e.task_of(r.id).tag_owed);
  }
  CHECK_THROWS_AS((void)pending[0].finish(), LodgeError); // once
}

TEST_CASE(
    "reconcile --apply --roll-forward activates an UPLOADING row of a restored ledger, tagged committed") {
  for (bool tag_fails : {false, true}) {
    INFO("the tag fails: ", tag_fails);
    Env e;
    auto a = e.stored("a");
    // A restored ledger: the store's id marker was above it, so it records the divergence.
    REQUIRE(e.l->record_divergence(a.id + 10, e.now()));
    if (tag_fails) e.store.fail("mark_committed", Error(Errc::storage_unavailable, "PUT ?tagging: 503"), 1);
    ops::ReconcileOptions o;
    o.apply = true;
    o.roll_forward = true;
    std::vector<ops::Finding> found;
    auto sum =
        ops::reconcile(*e.l, *e.l, e.store, o, e.clock, [&](const ops::Finding &f) { found.push_back(f); });
    REQUIRE_FALSE(sum.error.has_value());
    CHECK(sum.applied == 1);
    CHECK(e.row(a.id).upload_status == ledger::FileStatus::active);
    auto t = e.task_of(a.id);
    if (!tag_fails) {
      CHECK(e.store.state_tag(a.object_key) == "committed");
      CHECK(t.status == ledger::TaskStatus::ignored);
      CHECK_FALSE(t.tag_owed);
      continue;
    }
    // The debt is recorded: the next sweep, whatever its host, sets the tag.
    CHECK(e.store.state_tag(a.object_key) == "pending");
    CHECK(t.status == ledger::TaskStatus::pending);
    CHECK(t.tag_owed);
    auto claimed = e.claim_at_due(a.id);
    CHECK(ops::run_claimed_task(*e.l, e.store, claimed, e.cs, e.clock).outcome ==
          ops::CleanupOutcome::ignored);
    CHECK(e.store.state_tag(a.object_key) == "committed");
    CHECK(e.task_of(a.id).status == ledger::TaskStatus::ignored);
  }
}

TEST_SUITE_END();
