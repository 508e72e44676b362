#include <lodge/error.hpp>
#include <lodge/ops/jobs/job_run.hpp>

namespace lodge::ops {

void record_run(ledger::LedgerMeta &log, const std::string &job, const std::string &worker,
                int64_t started_at, bool ok, const nlohmann::json &counts, const util::Clock &clock) {
  log.record_job_run({job, worker, started_at, clock.now_ms(), ok ? "ok" : "failed", counts.dump()});
}

void record_failed_run(ledger::LedgerMeta &log, const std::string &job, const std::string &worker,
                       int64_t started_at, const std::exception &e, const util::Clock &clock) {
  const auto *le = dynamic_cast<const LodgeError *>(&e);
  nlohmann::json counts{{"error", le ? le->error().message : std::string(e.what())}};
  if (le) counts["code"] = std::string(le->error().name());
  record_run(log, job, worker, started_at, false, counts, clock);
}

int items_failed_status() {
  return errc_info(Errc::storage_error).exit_code;
}

} // namespace lodge::ops
