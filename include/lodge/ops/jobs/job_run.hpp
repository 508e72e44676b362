#pragma once
// A job's run in the ledger's job log (ledger::LedgerMeta::record_job_run), which `lodge
// status` and its health checks read: the job, who ran it, when, how it ended and its counts.
// Every job (sweep, repair, reconcile, relay, consume, prune) records its own run as it
// returns; a dry run records nothing. A run that ends in an exception is recorded failed by
// whoever ran it (record_failed_run), so the last good run is never taken for the latest.

#include <cstdint>
#include <exception>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/session.hpp>
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

// Runs a job's command (`run`, its exit status returned) so that every way it ends leaves a
// run in the job log: the job records its own outcome when it returns; when `run` throws, a
// failed run of `job` carrying the error is recorded (record_failed_run) before the exception
// goes on, unless the session's ledger could not be opened (the ledger is opened first, so a
// failure anywhere later can be recorded in it). `unrecorded` is told why, when even that
// record failed.
int run_recorded(Session &s, const std::string &job, const std::string &worker, const util::Clock &clock,
                 const std::function<int()> &run, const std::function<void(const std::string &)> &unrecorded);

// The exit status of a run in which some items failed or were found (a dead letter, a
// rejection, a finding): the status every per-item code has (STORAGE_ERROR's).
[[nodiscard]] int items_failed_status();

} // namespace lodge::ops
