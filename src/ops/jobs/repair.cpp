// repair: the uploads past their deadline (and those of gone senders on this host) failed,
// their cleanup scheduled.
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/util/log.hpp>

namespace lodge::ops {

RepairReport repair(ledger::RepairLedger &l, ledger::MarkLedger &marks, ledger::LedgerMeta &log,
                    const RepairOptions &o, const util::Clock &clock) {
  RepairReport sum;
  sum.dry_run = o.dry_run;
  const int64_t started = clock.now_ms();
  if (!o.dry_run && o.open_store) {
    // A restored ledger would fail uploads its other copy confirmed: look at the store's id
    // marker first. Without it, the ledger's own record decides.
    auto st = o.open_store();
    auto d = check_divergence(marks, *st, clock);
    if (!d && o.marker_unread) o.marker_unread(d.error());
  }
  if (!o.dry_run) refuse_if_diverged(l.id_blocks().diverged, "repair");
  if (!o.dry_run && !o.config)
    throw LodgeError(Errc::internal, "repair: no configuration to take the grace from");
  if (!o.dry_run) {
    // Rows of killed runs on this host first: they need not wait for their deadline.
    auto a = recover_abandoned(l, *o.config, o.max_retries, clock);
    sum.examined += a.examined;
    sum.repaired += a.failed;
    sum.abandoned = a.failed;
    sum.skipped += a.examined - a.failed;
  }
  while (sum.examined < o.limit) {
    int n = static_cast<int>(std::min<int64_t>(o.batch, o.limit - sum.examined));
    auto rows = l.overdue_uploads(clock.now_ms(), n);
    if (rows.empty()) break;
    for (const auto &r : rows) {
      ++sum.examined;
      if (o.dry_run) continue;
      int64_t grace = grace_for(*o.config, r.policy);
      if (l.repair_row(r.id, clock.now_ms(), grace, o.max_retries) == ledger::RepairOutcome::repaired) {
        ++sum.repaired;
        util::log::info("repaired file #" + std::to_string(r.id) + " (" + r.object_key + ")");
      } else {
        ++sum.skipped;
      }
    }
    if (o.dry_run) break;
  }
  if (!o.dry_run) record_run(log, "repair", o.worker_id, started, true, job_counts(sum), clock);
  return sum;
}

nlohmann::json job_counts(const RepairReport &r) {
  if (r.dry_run) return {{"overdue", r.examined}, {"dry_run", true}};
  return {
      {"examined", r.examined}, {"repaired", r.repaired}, {"abandoned", r.abandoned}, {"skipped", r.skipped}};
}

int exit_status(const RepairReport & /*r*/) {
  return errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
