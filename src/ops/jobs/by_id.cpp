#include <lodge/error.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/by_id.hpp>
#include <lodge/ops/jobs/job_run.hpp>

namespace lodge::ops {

DeleteReport delete_files(ledger::RecoveryLedger &rows, ledger::LedgerReports &reads,
                          const std::vector<int64_t> &ids, const DeleteOptions &o, const util::Clock &clock,
                          const std::function<void(const DeleteItem &)> &each) {
  if (!o.config) throw LodgeError(Errc::internal, "delete: no configuration to take the grace from");
  DeleteReport rep;
  for (auto id : ids) {
    // The row's own policy gives its grace; a row that is not there gets the longest.
    auto rec = reads.find_file(id);
    int64_t grace = grace_for(*o.config, rec ? std::optional<std::string>(rec->policy) : std::nullopt);
    DeleteItem item{id, rows.soft_delete(id, o.owner, clock.now_ms(), grace, o.max_retries)};
    if (item.outcome != ledger::DeleteOutcome::deleted) ++rep.failed;
    rep.items.push_back(item);
    if (each) each(item);
  }
  return rep;
}

int exit_status(const DeleteReport &r) {
  return r.failed > 0 ? items_failed_status() : errc_info(Errc::ok).exit_code;
}

RetryReport retry_tasks(ledger::TaskLedger &l, const std::vector<int64_t> &task_ids, const util::Clock &clock,
                        const std::function<void(const RetryItem &)> &each) {
  RetryReport rep;
  for (auto id : task_ids) {
    RetryItem item{id, l.retry_task(id, clock.now_ms()) == ledger::RetryOutcome::requeued};
    if (!item.requeued) ++rep.failed;
    rep.items.push_back(item);
    if (each) each(item);
  }
  return rep;
}

int exit_status(const RetryReport &r) {
  return r.failed > 0 ? items_failed_status() : errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
