#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/settings.hpp>

namespace lodge::ops {

SweepOptions sweep_options(const config::Config &c, SweepOptions given) {
  given.lease_ms = c.sweep.lease_ms;
  given.jobs = c.jobs;
  given.cleanup = cleanup_settings(c);
  return given;
}

RepairOptions repair_options(const config::Config &c, RepairOptions given) {
  given.max_retries = c.sweep.max_retries;
  given.config = &c;
  return given;
}

ReconcileOptions reconcile_options(const config::Config &c, ReconcileOptions given) {
  given.older_than_ms = grace_for(c, std::nullopt);
  given.max_retries = c.sweep.max_retries;
  given.temp_dead_after_ms = temp_dead_after(c);
  return given;
}

ConsumeOptions consume_options(const config::Config &c, ConsumeOptions given) {
  given.lease_ms = c.sweep.lease_ms;
  given.cleanup = cleanup_settings(c);
  return given;
}

PruneOptions prune_options(const config::Config &c, PruneOptions given) {
  given.grace_ms = grace_for(c, std::nullopt);
  given.max_retries = c.sweep.max_retries;
  return given;
}

DeleteOptions delete_options(const config::Config &c, DeleteOptions given) {
  given.max_retries = c.sweep.max_retries;
  given.config = &c;
  return given;
}

} // namespace lodge::ops
