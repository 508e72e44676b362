// The one way a row becomes ACTIVE (ops/activate), on the ledger fake and the fake store:
// the confirm records whether the object is owed the committed tag, the tag is set, the
// task settled; every failure in between leaves a task that finishes the job.
#include "ops_fixture.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/cleanup.hpp>

using namespace lodge;

namespace {
std::string at(const char *op, int64_t id, const char *rest) {
  return std::string(op) + " #" + std::to_string(id) + " " + rest;
}
// A sweep's run of the row's task once it is due.
ops::CleanupResult sweep(test::OpsWorld &w, int64_t record_id) {
  w.clock.t = std::max(w.now(), w.l.task_of(record_id).next_retry_at);
  return ops::run_claimed_task(w.l, w.store, w.claim(record_id),
                               ops::CleanupSettings{test::OpsWorld::k_grace_ms, 1'000, 8'000}, w.clock);
}
} // namespace

TEST_CASE("activate: a store that tags objects owes the committed tag; one that does not, none") {
  test::FakeStore plain;
  test::FakeStore tagging;
  tagging.enable_state_tags();
  CHECK(ops::commit_tag_for(plain) == ledger::CommitTag::none);
  CHECK(ops::commit_tag_for(tagging) == ledger::CommitTag::owed);
}

TEST_CASE("activate: on a plain store the confirm ends the task at once; nothing is tagged") {
  test::OpsWorld w;
  auto rec = w.reserve("a.txt", "a");
  auto put = w.put(rec);
  auto a = ops::activate(w.l, w.store, rec, put, w.clock);
  CHECK(a.active());
  CHECK_FALSE(a.tag_owed);
  CHECK(w.l.row(rec.id).etag == put.etag);
  CHECK(w.l.history(rec.id).back() == at("confirm", rec.id, "task PENDING -> IGNORED"));
  CHECK(w.l.count("settle") == 0);
  CHECK(w.store.count("mark_committed") == 0);
}

TEST_CASE("activate: on a tagging store the confirm owes the tag, the object is tagged, then settled") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  auto a = ops::activate(w.l, w.store, rec, w.put(rec), w.clock);
  CHECK(a.active());
  CHECK(a.tag_owed);
  CHECK(a.settled);
  CHECK_FALSE(a.tag_error);
  CHECK(w.store.state_tag(rec.object_key) == "committed");
  auto h = w.l.history(rec.id);
  REQUIRE(h.size() == 5);
  CHECK(h[2] == at("confirm", rec.id, "row UPLOADING -> ACTIVE"));
  CHECK(h[3] == at("confirm", rec.id, "task PENDING -> PENDING+tag_owed"));
  CHECK(h[4] == at("settle", rec.id, "task PENDING+tag_owed -> IGNORED"));
  // The tag was set between the confirm and the settle, never before the confirm.
  auto calls = w.l.calls();
  CHECK(std::find(calls.begin(), calls.end(), "settle") > std::find(calls.begin(), calls.end(), "confirm"));
}

TEST_CASE("activate: a failed tag keeps the debt on the task; a sweep tags the object later") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  w.store.fail("mark_committed", Error(Errc::storage_unavailable, "PUT ?tagging: reset"), 1);
  auto a = ops::activate(w.l, w.store, rec, w.put(rec), w.clock);
  CHECK(a.active());
  REQUIRE(a.tag_error);
  CHECK_FALSE(a.settled);
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::active);
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.tag_owed);
  CHECK(sweep(w, rec.id).outcome == ops::CleanupOutcome::ignored);
  CHECK(w.store.state_tag(rec.object_key) == "committed");
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::ignored);
  CHECK(w.store.has(rec.object_key));
}

TEST_CASE("activate: the ledger fails the settle: the object is tagged and ACTIVE, a sweep ends the task") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  auto put = w.put(rec);
  w.l.fail_next("settle");
  CHECK(test::throws_errc([&] { (void)ops::activate(w.l, w.store, rec, put, w.clock); },
                          Errc::ledger_unavailable, "settle"));
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::active);
  CHECK(w.store.state_tag(rec.object_key) == "committed");
  CHECK(w.l.task_of(rec.id).tag_owed);
  CHECK(sweep(w, rec.id).outcome == ops::CleanupOutcome::ignored); // tags again, harmlessly
  auto t = w.l.task_of(rec.id);
  CHECK(t.status == ledger::TaskStatus::ignored);
  CHECK_FALSE(t.tag_owed);
  CHECK(w.store.has(rec.object_key));
}

TEST_CASE("activate: the confirm's answer lost on a tagging store: the object is left pending-tagged for a "
          "sweep, never deleted") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  auto put = w.put(rec);
  w.l.lose_answer("confirm");
  CHECK(test::throws_errc([&] { (void)ops::activate(w.l, w.store, rec, put, w.clock); },
                          Errc::ledger_unavailable, "confirm"));
  CHECK(w.store.state_tag(rec.object_key) == "pending");
  CHECK(w.l.task_of(rec.id).tag_owed); // the confirm committed the debt
  CHECK(sweep(w, rec.id).outcome == ops::CleanupOutcome::ignored);
  CHECK(w.store.state_tag(rec.object_key) == "committed");
  CHECK(w.store.count("remove_owned") == 0);
}

TEST_CASE("activate: a row failed meanwhile is not activated and its object not tagged") {
  test::OpsWorld w;
  w.store.enable_state_tags();
  auto rec = w.reserve("a.txt", "a");
  auto put = w.put(rec);
  REQUIRE(w.l.mark_failed(rec.id, "overdue", false, w.now()) == ledger::MarkFailedOutcome::failed);
  auto a = ops::activate(w.l, w.store, rec, put, w.clock);
  CHECK(a.confirm == ledger::ConfirmOutcome::row_not_uploading);
  CHECK_FALSE(a.active());
  CHECK(w.store.count("mark_committed") == 0);
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::upload_failed);
}

TEST_CASE("activate: a sweep holding the task refuses the confirm; the row stays UPLOADING") {
  test::OpsWorld w;
  auto rec = w.reserve("a.txt", "a");
  auto put = w.put(rec);
  w.clock.t = w.l.task_of(rec.id).next_retry_at;
  auto held = w.claim(rec.id, "sweeper");
  auto a = ops::activate(w.l, w.store, rec, put, w.clock);
  CHECK(a.confirm == ledger::ConfirmOutcome::task_held);
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::uploading);
  CHECK(w.l.task_of(rec.id).lease_version == held.lease_version);
}

TEST_CASE(
    "activate --replace: the confirm retires the path's older rows, their objects due after the grace") {
  test::OpsWorld w;
  auto old = w.active("a.txt", "1");
  auto rec = w.reserve("a.txt", "2");
  auto a = ops::activate(w.l, w.store, rec, w.put(rec), w.clock, ledger::Retire{5'000, 3});
  CHECK(a.active());
  auto o = w.l.row(old.id);
  CHECK(o.is_deleted);
  CHECK(o.upload_status == ledger::FileStatus::active);
  auto t = w.l.task_of(old.id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == w.now() + 5'000);
  CHECK(w.l.history(old.id).back() == at("confirm", old.id, "task IGNORED -> PENDING"));
  CHECK(w.store.has(old.object_key));
}
