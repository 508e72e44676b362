// sweep: the due cleanup tasks claimed in batches under leases and run, spread over the store
// connections it is given.
#include <lodge/failpoint.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/sweep.hpp>
#include <lodge/util/clock.hpp>

namespace lodge::ops {

namespace {

// The work: the tasks claimed and run, batch by batch, until none is due, the limit or the
// run time.
void run_due(ledger::SweepLedger &l, store::ObjectStore &s, const SweepOptions &o, const util::Clock &clock,
             SweepReport &sum) {
  // A restored ledger would delete objects confirmed after its backup: look first.
  auto diverged = check_divergence(l, s, clock);
  if (!diverged) throw LodgeError(diverged.error());
  refuse_if_diverged(diverged.value(), "sweep");
  std::vector<std::unique_ptr<store::ObjectStore>> extra;
  std::vector<store::ObjectStore *> stores{&s};
  for (int i = 1; i < o.jobs && o.open_store; ++i) {
    extra.push_back(o.open_store());
    stores.push_back(extra.back().get());
  }
  // Cleanup through a queue: the first deletes go relay -> consume; sweep keeps the verify
  // passes and the owed tags, which no message carries.
  const bool queued = l.outbox_settings().cleanup_via == ledger::CleanupVia::queue;
  int64_t started = util::steady_ms();
  while (sum.claimed < o.limit) {
    if (o.max_runtime_ms > 0 && util::steady_ms() - started >= o.max_runtime_ms) break;
    int n = static_cast<int>(std::min<int64_t>(o.batch, o.limit - sum.claimed));
    auto tasks = queued ? l.claim_due_not_queued(clock.now_ms(), n, o.worker_id, o.lease_ms)
                        : l.claim_due(clock.now_ms(), n, o.worker_id, o.lease_ms);
    if (tasks.empty()) break;
    sum.claimed += static_cast<int64_t>(tasks.size());
    if (failpoint::hit("sweep.after_claim"))
      throw LodgeError(Errc::internal,
                       "injected failure after claiming " + std::to_string(tasks.size()) + " tasks");
    auto results = run_claimed_batch(l, stores, tasks, o.cleanup, clock);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const auto &t = tasks[i];
      const auto &r = results[i];
      sum.add(r);
      if (r.outcome == CleanupOutcome::deleted && t.verify_pass == ledger::k_verify_due) ++sum.verified;
      if (!r.error.empty()) sum.errors.push_back("task " + std::to_string(t.id) + ": " + r.error);
    }
  }
}

} // namespace

SweepReport sweep(ledger::SweepLedger &l, ledger::LedgerMeta &log, store::ObjectStore &s,
                  const SweepOptions &o, const util::Clock &clock) {
  SweepReport sum;
  sum.dry_run = o.dry_run;
  if (o.dry_run) {
    sum.would_claim = static_cast<int64_t>(l.due_tasks(clock.now_ms(), o.limit).size());
    return sum;
  }
  const int64_t started = clock.now_ms();
  run_due(l, s, o, clock, sum);
  // A retried task is a failure too, though the run goes on: the job log says it failed.
  record_run(log, "sweep", o.worker_id, started, sum.dead_lettered == 0 && sum.retried == 0, job_counts(sum),
             clock);
  return sum;
}

nlohmann::json job_counts(const SweepReport &r) {
  if (r.dry_run) return {{"due", r.would_claim}, {"dry_run", true}};
  nlohmann::json j{
      {"claimed", r.claimed},       {"deleted", r.deleted},         {"ignored", r.ignored},
      {"postponed", r.postponed},   {"retried", r.retried},         {"dead_lettered", r.dead_lettered},
      {"lease_lost", r.lease_lost}, {"unreachable", r.unreachable}, {"kept", r.kept}};
  j["verify_scheduled"] = r.verify_scheduled; // of the deleted: a verify pass follows
  j["verified"] = r.verified;                 // of the deleted: this was the verify pass
  return j;
}

int exit_status(const SweepReport &r) {
  if (r.claimed > 0 && r.deleted + r.ignored + r.postponed + r.kept == 0 && r.unreachable > 0 &&
      r.unreachable == r.retried + r.dead_lettered)
    return errc_info(Errc::storage_unavailable).exit_code;
  return r.dead_lettered > 0 ? items_failed_status() : errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
