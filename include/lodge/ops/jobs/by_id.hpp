#pragma once
// What an operator asks for by id: `lodge delete` (files soft-deleted, their quota freed at
// once, their objects removed by sweep after the grace) and `lodge retry` (dead-lettered
// tasks put back to PENDING, due now). Neither is a job: no run is recorded.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/util/clock.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

struct DeleteOptions {
  std::string owner; // only this owner's files
  int max_retries = 8;
  // Required: the configuration whose policies give each row its grace (ops::grace_for).
  const config::Config *config = nullptr;
};

struct DeleteItem {
  int64_t id = 0;
  ledger::DeleteOutcome outcome = ledger::DeleteOutcome::deleted;
};

struct DeleteReport {
  std::vector<DeleteItem> items; // in the order asked
  int64_t failed = 0;            // not deleted: no such file of the owner, or not an active one
};

// Soft-deletes each file, in order, telling `each` of each outcome as it is known.
[[nodiscard]] DeleteReport delete_files(ledger::RecoveryLedger &rows, ledger::LedgerReports &reads,
                                        const std::vector<int64_t> &ids, const DeleteOptions &o,
                                        const util::Clock &clock,
                                        const std::function<void(const DeleteItem &)> &each = {});
// Some items failed when any file was not deleted, else 0.
[[nodiscard]] int exit_status(const DeleteReport &r);

struct RetryItem {
  int64_t task_id = 0;
  bool requeued = false; // false: not a dead letter (no such task, or not FAILED)
};

struct RetryReport {
  std::vector<RetryItem> items; // in the order asked
  int64_t failed = 0;           // not requeued
};

// Puts each dead-lettered task back to PENDING, due now, in order, telling `each` as it goes.
[[nodiscard]] RetryReport retry_tasks(ledger::TaskLedger &l, const std::vector<int64_t> &task_ids,
                                      const util::Clock &clock,
                                      const std::function<void(const RetryItem &)> &each = {});
// Some items failed when any task was not requeued, else 0.
[[nodiscard]] int exit_status(const RetryReport &r);

} // namespace lodge::ops
