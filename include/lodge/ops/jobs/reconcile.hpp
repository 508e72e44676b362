#pragma once
// reconcile: the store's listing and the ledger's rows compared in key order, in constant
// memory; each mismatch a finding, reported as found. With --apply what is safe to apply is
// applied (a leftover queued for sweep, a stale multipart aborted, lodge's state tag put
// back, a stale temporary file removed); others' objects are never touched. The run is
// recorded in the job log (ops/jobs/job_run.hpp).

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/store/store.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

struct ReconcileOptions {
  bool apply = false;
  bool verify = false;             // read objects back and compare digests
  int64_t older_than_ms = 300'000; // objects younger than this may be uploads in flight
  int max_retries = 8;
  // With apply, in a diverged ledger: rows found "confirmed after the backup" become ACTIVE
  // (and nothing else is applied until the divergence is accepted).
  bool roll_forward = false;
  // Objects other writers own (unmanaged: no stamp; foreign: another ledger's) are always
  // counted and never touched; they make the run unclean (exit 1) only when strict. A
  // bucket shared with other tools is the normal case, and a nightly run must stay quiet.
  bool strict = false;
  // The store's own temporary files last in use longer ago than this are a killed process's
  // (stale_temp; removed with apply): the longest deadline plus the longest grace
  // (ops::temp_dead_after), past which no upload or delete can still be using one.
  int64_t temp_dead_after_ms = 1'200'000;
  std::string worker_id; // in the job log
};

struct Finding {
  std::string kind; // dangling, corrupt, leftover, stale_multipart, stale_temp, unmanaged, foreign,
                    // diverged, beyond_history, unknown, tag_mismatch; confirmed_after_backup
                    // (only in a diverged ledger)
  std::string key;
  std::optional<int64_t> record_id;
  std::string detail;
  bool applied = false;
};

// A finding as `--json` lists it.
[[nodiscard]] nlohmann::json finding_json(const Finding &f);

// Whether a finding is of an object another writer owns (unmanaged, foreign): reported,
// never touched, and not a finding that needs the operator unless --strict.
[[nodiscard]] bool others_object(const std::string &kind);

struct ReconcileReport {
  int64_t objects = 0, rows = 0;
  std::map<std::string, int64_t> counts; // by kind
  // Kinds not looked for, with the reason (the store cannot list what they need); a
  // skipped kind has no count.
  std::map<std::string, std::string> skipped;
  int64_t applied = 0;
  bool diverged = false;      // the ledger's history diverged (found now or earlier)
  std::optional<Error> error; // a step failed (listing, HEAD of the marker): the rest was not checked
  bool strict = false;        // ReconcileOptions::strict: others' objects count as findings
  // No finding that needs the operator (others' objects only when strict).
  [[nodiscard]] bool clean() const;
};

// Reports each finding to `report` as it is found (so memory stays constant), then records
// the run in `log`. A step that fails once findings may have been applied ends the run with
// `error` set, so what was applied is still reported and recorded. Throws LEDGER_DIVERGED for
// --apply (without --roll-forward) in a diverged ledger; a full run while diverged is what
// lets `init --accept-diverged` clear the state.
[[nodiscard]] ReconcileReport reconcile(ledger::ReconcileLedger &l, ledger::LedgerMeta &log,
                                        store::ObjectStore &s, const ReconcileOptions &o,
                                        const util::Clock &clock,
                                        const std::function<void(const Finding &)> &report);

// What a run records in the job log: the counts by kind, the kinds skipped, what was applied,
// whether it is clean; a failed step's message as "error" and its code's name as "code".
[[nodiscard]] nlohmann::json job_counts(const ReconcileReport &r);
// The run's exit status: a failed step's code's, some items failed when it is not clean, else 0.
[[nodiscard]] int exit_status(const ReconcileReport &r);

} // namespace lodge::ops
