#pragma once
// repair: the uploads past their deadline failed and their cleanup made sure of; first the
// rows of this host's senders that are gone (ops/holder.hpp), which need not wait for it.
// The run is recorded in the job log (ops/jobs/job_run.hpp); a dry run only counts.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace lodge::ops {

struct RepairOptions {
  int limit = 1000;
  int batch = 100;
  bool dry_run = false;
  int max_retries = 8;
  // Required: the configuration whose policies give each row its grace (ops::grace_for).
  const config::Config *config = nullptr;
  std::string worker_id; // in the job log
  // The store whose id marker is read first (not in a dry run): a restored ledger would fail
  // uploads its other copy confirmed. Unset: the ledger's own record of a divergence decides.
  std::function<std::unique_ptr<store::ObjectStore>()> open_store;
  // Told when the marker could not be read; the ledger's own record decides then.
  std::function<void(const Error &)> marker_unread;
};

struct RepairReport {
  int64_t examined = 0, repaired = 0, skipped = 0;
  int64_t abandoned =
      0; // of the repaired: held by a process of this host that is gone (before their deadline)
  bool dry_run = false;
};

// Fails the overdue rows and records the run in `log` (not a dry run: that counts the overdue
// rows only). LEDGER_DIVERGED in a diverged ledger.
[[nodiscard]] RepairReport repair(ledger::RepairLedger &l, ledger::MarkLedger &marks, ledger::LedgerMeta &log,
                                  const RepairOptions &o, const util::Clock &clock);

// What a run records in the job log, as `--json` shows it; a dry run's overdue rows.
[[nodiscard]] nlohmann::json job_counts(const RepairReport &r);
// A repair that returns has done what it could: 0.
[[nodiscard]] int exit_status(const RepairReport &r);

} // namespace lodge::ops
