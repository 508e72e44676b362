// ops/jobs: what each job reports and records, over the ledger fake and the fake store: the
// job log's run (and none for a dry run), the exit status each report decides, delete and
// retry by id, the settings the configuration gives, and the outbox's decisions (the queues a
// run opens, the configuration's drift, what `lodge init` records).
#include "ops_fixture.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <lodge/error.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/settings.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {

int code(Errc c) {
  return errc_info(c).exit_code;
}

config::Config two_policies() {
  config::Config c;
  c.policies["default"].grace_ms = 1'000;
  c.policies["long"].grace_ms = 9'000;
  c.sweep.max_retries = 3;
  c.sweep.lease_ms = 7'000;
  c.sweep.backoff_base_ms = 11;
  c.sweep.backoff_max_ms = 22;
  c.jobs = 5;
  return c;
}

} // namespace

TEST_CASE("sweep records its run in the job log with its counts; a dry run records nothing") {
  test::OpsWorld w;
  w.failed("a.txt", "a");
  ops::SweepOptions o;
  o.worker_id = "w1";
  o.dry_run = true;
  auto dry = ops::sweep(w.l, w.l, w.store, o, w.clock);
  CHECK(dry.would_claim == 1);
  CHECK(ops::job_counts(dry) == nlohmann::json{{"due", 1}, {"dry_run", true}});
  CHECK(w.l.job_runs().empty());
  o.dry_run = false;
  auto r = ops::sweep(w.l, w.l, w.store, o, w.clock);
  CHECK(r.deleted == 1);
  CHECK(ops::exit_status(r) == 0);
  auto runs = w.l.job_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].job == "sweep");
  CHECK(runs[0].worker_id == "w1");
  CHECK(runs[0].outcome == "ok");
  CHECK(nlohmann::json::parse(runs[0].counts_json) == ops::job_counts(r));
}

TEST_CASE("a sweep's exit status: every claimed task unreachable is STORAGE_UNAVAILABLE, a dead letter "
          "some items failed") {
  ops::SweepReport r;
  CHECK(ops::exit_status(r) == 0);
  r.claimed = 2;
  r.unreachable = 2;
  r.retried = 2;
  CHECK(ops::exit_status(r) == code(Errc::storage_unavailable));
  r.deleted = 1; // something was done: the failures are items
  CHECK(ops::exit_status(r) == 0);
  r.dead_lettered = 1;
  CHECK(ops::exit_status(r) == ops::items_failed_status());
}

TEST_CASE("relay, consume and reconcile decide their exit status from their reports") {
  ops::RelayReport relay;
  relay.failed = 1;
  CHECK(ops::exit_status(relay) == code(Errc::storage_unavailable));
  relay.events_published = 1;
  CHECK(ops::exit_status(relay) == ops::items_failed_status());

  ops::ConsumeReport consume;
  consume.received = 1;
  consume.unreachable = 1;
  consume.retried = 1;
  CHECK(ops::exit_status(consume) == code(Errc::storage_unavailable));
  consume = {};
  consume.rejected = 1;
  CHECK(ops::exit_status(consume) == ops::items_failed_status());

  ops::ReconcileReport rec;
  rec.counts["unmanaged"] = 1;
  CHECK(ops::exit_status(rec) == 0); // others' objects count only when strict
  rec.strict = true;
  CHECK(ops::exit_status(rec) == ops::items_failed_status());
  rec.error = Error(Errc::storage_unavailable, "listing failed");
  CHECK(ops::exit_status(rec) == code(Errc::storage_unavailable));
  auto j = ops::job_counts(rec);
  CHECK(j["error"] == "listing failed");
  CHECK(j["code"] == "STORAGE_UNAVAILABLE");
  CHECK(j["clean"] == false);
}

TEST_CASE("a failed run is recorded with its error and, for a LodgeError, its code") {
  test::OpsWorld w;
  ops::record_failed_run(w.l, "repair", "w", w.now(), LodgeError(Errc::ledger_diverged, "diverged"), w.clock);
  auto runs = w.l.job_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].outcome == "failed");
  CHECK(nlohmann::json::parse(runs[0].counts_json) ==
        nlohmann::json{{"error", "diverged"}, {"code", "LEDGER_DIVERGED"}});
}

TEST_CASE("delete by id: each outcome told as it is known; not found and not active are failed items") {
  test::OpsWorld w;
  auto a = w.active("a.txt", "a");
  auto b = w.reserve("b.txt", "b");
  auto c = two_policies();
  auto o = ops::delete_options(c);
  o.owner = "o";
  std::vector<ledger::DeleteOutcome> told;
  auto r = ops::delete_files(w.l, w.l, {a.id, b.id, 999}, o, w.clock,
                             [&](const ops::DeleteItem &d) { told.push_back(d.outcome); });
  CHECK(told == std::vector<ledger::DeleteOutcome>{ledger::DeleteOutcome::deleted,
                                                   ledger::DeleteOutcome::not_active,
                                                   ledger::DeleteOutcome::not_found});
  CHECK(r.failed == 2);
  CHECK(ops::exit_status(r) == ops::items_failed_status());
  // The row's own policy gives its grace.
  CHECK(w.l.task_of(a.id).next_retry_at == w.now() + 1'000);
}

TEST_CASE("retry by id: a dead letter goes back to PENDING; anything else is a failed item") {
  test::OpsWorld w;
  auto a = w.failed("a.txt", "a");
  auto t = w.claim(a.id);
  REQUIRE(w.l.dead_letter(t, "kept", w.now()) == ledger::DeadLetterOutcome::dead_lettered);
  auto r = ops::retry_tasks(w.l, {t.id, t.id}, w.clock);
  REQUIRE(r.items.size() == 2);
  CHECK(r.items[0].requeued);
  CHECK_FALSE(r.items[1].requeued); // PENDING now, no dead letter
  CHECK(ops::exit_status(r) == ops::items_failed_status());
  CHECK(w.l.task_of(a.id).status == ledger::TaskStatus::pending);
}

TEST_CASE("the settings: the configuration's values in each job's options, the flags' values kept") {
  auto c = two_policies();
  auto cs = ops::cleanup_settings(c, std::string("default"));
  CHECK(cs.grace_ms == 1'000);
  CHECK(cs.backoff_base_ms == 11);
  CHECK(cs.backoff_max_ms == 22);
  CHECK(ops::cleanup_settings(c).grace_ms == 9'000); // no policy known: the longest
  CHECK(ops::cleanup_settings(c, std::string("gone")).grace_ms == 9'000);
  ops::SweepOptions given;
  given.limit = 5;
  given.dry_run = true;
  auto so = ops::sweep_options(c, given);
  CHECK(so.limit == 5);
  CHECK(so.dry_run);
  CHECK(so.lease_ms == 7'000);
  CHECK(so.jobs == 5);
  CHECK(so.cleanup.grace_ms == 9'000);
  auto ro = ops::reconcile_options(c);
  CHECK(ro.older_than_ms == 9'000);
  CHECK(ro.max_retries == 3);
  CHECK(ops::prune_options(c).grace_ms == 9'000);
  CHECK(ops::consume_options(c).lease_ms == 7'000);
  CHECK(ops::repair_options(c).config == &c);
}

TEST_CASE("the outbox: the queues a run opens, the configuration's drift, what init records") {
  ledger::OutboxSettings tasks;
  config::OutboxConfig c;
  CHECK(ops::relay_queue(tasks, c, ops::OutboxQueue::cleanup).empty());
  CHECK(ops::relay_queue(tasks, c, ops::OutboxQueue::events).empty());
  CHECK(test::throws_errc([&] { (void)ops::consume_queue(tasks, c, "L"); }, Errc::usage, "task table"));
  ledger::OutboxSettings queued;
  queued.cleanup_via = ledger::CleanupVia::queue;
  CHECK(test::throws_errc([&] { (void)ops::consume_queue(queued, c, "L"); }, Errc::config_invalid,
                          "cleanup.queue"));
  c.cleanup_queue = "sqs://q";
  CHECK(ops::consume_queue(queued, c, "L") == "sqs://q");
  CHECK(ops::outbox_drift(queued, c, "L").empty());
  c.cleanup_given = true; // the file says tasks
  auto drift = ops::outbox_drift(queued, c, "L");
  REQUIRE(drift.size() == 1);
  CHECK(drift[0].find("ledger L runs its cleanup through a queue") != std::string::npos);

  test::OpsWorld w;
  std::vector<std::string> ensured;
  auto ensure = [&](const std::string &url, const char *key) { ensured.push_back(url + " " + key); };
  c.events_queue = "sqs://e";
  auto set = ops::init_outbox(w.l, c, "queue", "file.failed,file.active", ensure, w.clock);
  CHECK(set.cleanup_via == ledger::CleanupVia::queue);
  CHECK(set.event_types ==
        std::vector<ledger::EventType>{ledger::EventType::file_active, ledger::EventType::file_failed});
  CHECK(ensured == std::vector<std::string>{"sqs://q cleanup.queue", "sqs://e events.queue"});
  CHECK(w.l.outbox_settings() == set);
  CHECK(test::throws_errc([&] { (void)ops::init_outbox(w.l, c, "sideways", "", ensure, w.clock); },
                          Errc::usage, "--cleanup-via"));
}
