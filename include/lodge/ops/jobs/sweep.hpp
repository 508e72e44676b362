#pragma once
// sweep: the due cleanup tasks claimed in batches under leases and run (ops/cleanup.hpp),
// after a look at the store's id marker (a restored ledger deletes nothing). The run is
// recorded in the job log (ops/jobs/job_run.hpp); a dry run only counts what is due.

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/store/store.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

struct SweepOptions {
  int limit = 1000; // tasks per run
  int batch = 64;   // tasks per claim: a batch shares its commits and its flush; its lease covers its work
  int64_t lease_ms = 120'000;
  int64_t max_runtime_ms = 0; // 0: no limit
  std::string worker_id;
  bool dry_run = false;
  CleanupSettings cleanup;
  // Store connections the work of a batch is spread over (one thread each); the extra ones
  // come from open_store (unset: one connection, the one sweep is given).
  int jobs = 1;
  std::function<std::unique_ptr<store::ObjectStore>()> open_store;
};

struct SweepReport : CleanupTally {
  int64_t claimed = 0;
  int64_t verified = 0;    // of the deleted: this was the verify pass
  int64_t would_claim = 0; // --dry-run
  bool dry_run = false;
  std::vector<std::string> errors;
};

// Runs the due tasks (on a queue-mode ledger only those no message carries: the verify passes
// and the owed tags) and records the run in `log` as worker_id's (not a dry run). Throws
// LEDGER_DIVERGED in a diverged ledger, and what the marker's read or a claim throws.
[[nodiscard]] SweepReport sweep(ledger::SweepLedger &l, ledger::LedgerMeta &log, store::ObjectStore &s,
                                const SweepOptions &o, const util::Clock &clock);

// What a run records in the job log, as `--json` shows it: the counts, or a dry run's due.
[[nodiscard]] nlohmann::json job_counts(const SweepReport &r);
// The run's exit status: STORAGE_UNAVAILABLE's when every task it claimed failed on a store
// that gave no answer (nothing done), some items failed when any task was dead-lettered,
// else 0.
[[nodiscard]] int exit_status(const SweepReport &r);

} // namespace lodge::ops
