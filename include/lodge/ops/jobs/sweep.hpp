#pragma once
// sweep: the due cleanup tasks claimed in batches under leases and run (ops/cleanup.hpp),
// after a look at the store's id marker (a restored ledger deletes nothing).

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/store/store.hpp>
#include <memory>
#include <string>
#include <vector>

namespace lodge::ops {

// The ledger roles sweep takes: the claims (tasks), each task's run (CleanupLedger), the
// divergence check before it (MarkLedger), and where cleanup runs (outbox: on a queue-mode
// ledger sweep claims only what the queue does not carry). Made from the whole ledger
// implicitly.
struct SweepLedger {
  ledger::TaskLedger &tasks;
  ledger::LedgerReports &reads;
  ledger::IdBlockLedger &blocks;
  ledger::OutboxLedger &outbox;
  SweepLedger(ledger::Ledger &l) // NOLINT(google-explicit-constructor)
      : tasks(l), reads(l), blocks(l), outbox(l) {}
};

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

struct SweepSummary : CleanupTally {
  int64_t claimed = 0;
  int64_t verified = 0;    // of the deleted: this was the verify pass
  int64_t would_claim = 0; // --dry-run
  std::vector<std::string> errors;
};

[[nodiscard]] SweepSummary sweep(SweepLedger l, store::ObjectStore &s, const SweepOptions &o,
                                 const util::Clock &clock);

} // namespace lodge::ops
