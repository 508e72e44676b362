#pragma once
// Each job's settings from the configuration, in one place: the cleanup settings every
// cleanup runs with (ops::cleanup_settings, ops/grace.hpp: upload's too), and each job's
// options: `given` (what the caller's flags set) with the configuration's values in
// the fields the configuration decides. A flag that overrides a configured value (--lease,
// --jobs, --older-than) is set over what they return, the value here being its default.

#include <lodge/config/config.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/by_id.hpp>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/ops/jobs/prune.hpp>
#include <lodge/ops/jobs/reconcile.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/ops/jobs/sweep.hpp>

namespace lodge::ops {

// sweep: the lease, the store connections (jobs) and the cleanup settings.
[[nodiscard]] SweepOptions sweep_options(const config::Config &c, SweepOptions given = {});
// repair: the retries a repaired row's task gets, and the configuration its graces come from.
[[nodiscard]] RepairOptions repair_options(const config::Config &c, RepairOptions given = {});
// reconcile: objects younger than the longest grace left alone, the retries of a requeued
// task, the age past which a store's temporary file is a killed process's.
[[nodiscard]] ReconcileOptions reconcile_options(const config::Config &c, ReconcileOptions given = {});
// consume: the lease and the cleanup settings.
[[nodiscard]] ConsumeOptions consume_options(const config::Config &c, ConsumeOptions given = {});
// prune: the removed rows' grace (the longest: rows do not choose it here, as sweep's) and
// their tasks' retries.
[[nodiscard]] PruneOptions prune_options(const config::Config &c, PruneOptions given = {});
// delete: the retries of a deleted row's task, and the configuration its grace comes from.
[[nodiscard]] DeleteOptions delete_options(const config::Config &c, DeleteOptions given = {});

} // namespace lodge::ops
