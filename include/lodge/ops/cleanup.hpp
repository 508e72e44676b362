#pragma once
// Running one claimed cleanup task: the path sweep takes for every task and upload takes
// for an immediate compensation. Deletes only under the current lease, after the ledger
// said (in a transaction) that the row is dead; finishes only if the lease is still ours.

#include <cstdint>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

struct CleanupSettings {
  int64_t grace_ms = 300'000; // 5m
  int64_t backoff_base_ms = 30'000;
  int64_t backoff_max_ms = 3'600'000;
  // Who speaks in the log: sweep names its tasks; an upload's own compensation speaks of
  // the file and its object only (its user never met a task).
  enum class Voice { job, upload } voice = Voice::job;
};

// kept: the object at the task's key was left in place, the task IGNORED with the reason in
// its last_error: its stamp is not the row's (another writer's object), or the store's
// guard kept it (its state tag is not pending).
enum class CleanupOutcome { deleted, ignored, postponed, retried, dead_lettered, lease_lost, kept };

[[nodiscard]] const char *to_string(CleanupOutcome o);

struct CleanupResult {
  CleanupOutcome outcome = CleanupOutcome::deleted;
  std::string error;        // the store's error, when it failed
  bool unreachable = false; // the store gave no answer at all, or refused our credentials
  // deleted, and the task is PENDING again for its verify pass (a late PUT may still land)
  bool verify_scheduled = false;
};

// What cleanup results came to, as sweep and consume report them: one count per outcome.
struct CleanupTally {
  int64_t deleted = 0, ignored = 0, postponed = 0, retried = 0, dead_lettered = 0, lease_lost = 0;
  int64_t kept = 0;             // tasks ended IGNORED leaving the object at their key (not the row's; a tag)
  int64_t verify_scheduled = 0; // of the deleted: a verify pass follows later
  int64_t unreachable = 0;      // failures where the store gave no answer or refused us
  void add(const CleanupResult &r);
};

// When the verify pass of a task whose delete ran at `now` is due: after the longest a
// PUT of that row could still be in flight (its deadline length, measured by the
// uploader on the monotonic clock) plus one grace. Wall-clock steps forward before the
// delete cannot make this too early; see ARCHITECTURE.md, "Clocks".
[[nodiscard]] int64_t verify_pass_due(const ledger::FileRecord *row, int64_t now, int64_t grace_ms);

// The delay before retry number `retry_count + 1`: full jitter under
// min(max, base * 2^retry_count).
[[nodiscard]] int64_t cleanup_backoff_ms(const CleanupSettings &s, int64_t retry_count, uint64_t random);

// Decides under the lease, then removes what at the key carries the row's stamp
// (ObjectStore::remove_owned, store::stamp_mismatch: I8). Anything else at the key (no
// stamp, another ledger's or another record's) is never deleted: the task ends IGNORED
// with the reason as its last_error (kept), and a warning says so. A failed store call
// retries the task.
// The ledger (ledger::CleanupLedger): the task's decision and end, and the row and the
// ledger's uuid the object's stamp is checked against.
[[nodiscard]] CleanupResult run_claimed_task(ledger::CleanupLedger &l, store::ObjectStore &store,
                                             const ledger::TaskRecord &task, const CleanupSettings &s,
                                             const util::Clock &clock);

// A claimed batch, as sweep runs it: every task decided in one transaction
// (TaskLedger::decide_many), the store work per task, then every end in one transaction
// (TaskLedger::finish_many). Each task's decision, store work, fencing and result are exactly
// run_claimed_task's; the results are in the order of `tasks`.
[[nodiscard]] std::vector<CleanupResult> run_claimed_batch(ledger::CleanupLedger &l,
                                                           store::ObjectStore &store,
                                                           const std::vector<ledger::TaskRecord> &tasks,
                                                           const CleanupSettings &s,
                                                           const util::Clock &clock);
// The same, the store work spread over `stores` (connections to one store, one thread
// each): a batch's deletes overlap their waits.
[[nodiscard]] std::vector<CleanupResult> run_claimed_batch(ledger::CleanupLedger &l,
                                                           const std::vector<store::ObjectStore *> &stores,
                                                           const std::vector<ledger::TaskRecord> &tasks,
                                                           const CleanupSettings &s,
                                                           const util::Clock &clock);

} // namespace lodge::ops
