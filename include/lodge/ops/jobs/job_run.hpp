#pragma once
// A job's run in the ledger's job log (ledger::LedgerMeta::record_job_run), which `lodge
// status` and its health checks read: the job, who ran it, when, how it ended and its counts.
// Every job (sweep, repair, reconcile, relay, consume, prune) records its own run as it
// returns; a dry run records nothing. A run that ends in an exception is recorded failed by
// whoever ran it (record_failed_run), so the last good run is never taken for the latest.

#include <cstdint>
#include <exception>
#include <lodge/ledger/ledger.hpp>
#include <lodge/util/clock.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace lodge::ops {

// Records a run of `job` by `worker` from `started_at` until now: "ok" or "failed", with the
// counts it reports.
void record_run(ledger::LedgerMeta &log, const std::string &job, const std::string &worker,
                int64_t started_at, bool ok, const nlohmann::json &counts, const util::Clock &clock);

// Records a failed run of `job` that ended in `e`: its message as "error" and, for a
// LodgeError, its code's name as "code".
void record_failed_run(ledger::LedgerMeta &log, const std::string &job, const std::string &worker,
                       int64_t started_at, const std::exception &e, const util::Clock &clock);

// The exit status of a run in which some items failed or were found (a dead letter, a
// rejection, a finding): the status every per-item code has (STORAGE_ERROR's).
[[nodiscard]] int items_failed_status();

} // namespace lodge::ops
