// sweep: the due cleanup tasks claimed in batches under leases and run, spread over the store
// connections it is given.
#include <lodge/failpoint.hpp>
#include <lodge/ops/jobs/sweep.hpp>
#include <lodge/util/clock.hpp>

namespace lodge::ops {

SweepSummary sweep(SweepLedger l, store::ObjectStore &s, const SweepOptions &o, const util::Clock &clock) {
  SweepSummary sum;
  if (o.dry_run) {
    sum.would_claim = static_cast<int64_t>(l.tasks.due_tasks(clock.now_ms(), o.limit).size());
    return sum;
  }
  // A restored ledger would delete objects confirmed after its backup: look first.
  auto diverged = check_divergence({l.reads, l.blocks}, s, clock);
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
  const bool queued = l.outbox.outbox_settings().cleanup_via == ledger::CleanupVia::queue;
  int64_t started = util::steady_ms();
  while (sum.claimed < o.limit) {
    if (o.max_runtime_ms > 0 && util::steady_ms() - started >= o.max_runtime_ms) break;
    int n = static_cast<int>(std::min<int64_t>(o.batch, o.limit - sum.claimed));
    auto tasks = queued ? l.outbox.claim_due_not_queued(clock.now_ms(), n, o.worker_id, o.lease_ms)
                        : l.tasks.claim_due(clock.now_ms(), n, o.worker_id, o.lease_ms);
    if (tasks.empty()) break;
    sum.claimed += static_cast<int64_t>(tasks.size());
    if (failpoint::hit("sweep.after_claim"))
      throw LodgeError(Errc::internal,
                       "injected failure after claiming " + std::to_string(tasks.size()) + " tasks");
    auto results = run_claimed_batch({l.tasks, l.reads}, stores, tasks, o.cleanup, clock);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const auto &t = tasks[i];
      const auto &r = results[i];
      sum.add(r);
      if (r.outcome == CleanupOutcome::deleted && t.verify_pass == ledger::k_verify_due) ++sum.verified;
      if (!r.error.empty()) sum.errors.push_back("task " + std::to_string(t.id) + ": " + r.error);
    }
  }
  return sum;
}

} // namespace lodge::ops
