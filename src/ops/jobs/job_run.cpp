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

int run_recorded(Session &s, const std::string &job, const std::string &worker, const util::Clock &clock,
                 const std::function<int()> &run,
                 const std::function<void(const std::string &)> &unrecorded) {
  const int64_t started = clock.now_ms();
  try {
    (void)s.ledger();
    return run();
  } catch (const std::exception &e) {
    try {
      // A ledger that could not be opened cannot take the record either.
      if (s.ledger_opened()) record_failed_run(s.ledger(), job, worker, started, e, clock);
    } catch (const std::exception &again) {
      unrecorded(again.what());
    }
    throw;
  }
}

int items_failed_status() {
  return errc_info(Errc::storage_error).exit_code;
}

} // namespace lodge::ops
