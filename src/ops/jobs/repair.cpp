// repair: the uploads past their deadline (and those of gone senders on this host) failed,
// their cleanup scheduled.
#include <lodge/ops/grace.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/util/log.hpp>

namespace lodge::ops {

RepairSummary repair(RepairLedger l, const RepairOptions &o, const util::Clock &clock) {
  RepairSummary sum;
  if (!o.dry_run) refuse_if_diverged(l.blocks.id_blocks().diverged, "repair");
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
    auto rows = l.recovery.overdue_uploads(clock.now_ms(), n);
    if (rows.empty()) break;
    for (const auto &r : rows) {
      ++sum.examined;
      if (o.dry_run) continue;
      int64_t grace = grace_for(*o.config, r.policy);
      if (l.recovery.repair_row(r.id, clock.now_ms(), grace, o.max_retries) ==
          ledger::RepairOutcome::repaired) {
        ++sum.repaired;
        util::log::info("repaired file #" + std::to_string(r.id) + " (" + r.object_key + ")");
      } else {
        ++sum.skipped;
      }
    }
    if (o.dry_run) break;
  }
  return sum;
}

} // namespace lodge::ops
