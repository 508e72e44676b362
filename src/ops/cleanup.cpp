#include <algorithm>
#include <lodge/crypto/random.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/util/log.hpp>

namespace lodge::ops {

const char *to_string(CleanupOutcome o) {
  switch (o) {
  case CleanupOutcome::deleted:
    return "deleted";
  case CleanupOutcome::ignored:
    return "ignored";
  case CleanupOutcome::postponed:
    return "postponed";
  case CleanupOutcome::retried:
    return "retried";
  case CleanupOutcome::dead_lettered:
    return "dead_lettered";
  case CleanupOutcome::lease_lost:
    return "lease_lost";
  }
  return "?";
}

int64_t cleanup_backoff_ms(const CleanupSettings &s, int64_t retry_count, uint64_t random) {
  int64_t cap = std::max<int64_t>(s.backoff_base_ms, 1);
  for (int64_t i = 0; i < retry_count && cap < s.backoff_max_ms; ++i)
    cap *= 2;
  cap = std::min(cap, s.backoff_max_ms);
  // Full jitter, but never less than half the base: a retry "at once" would only hammer
  // a store that just failed.
  int64_t floor = std::min(cap, s.backoff_base_ms / 2);
  return floor + static_cast<int64_t>(random % static_cast<uint64_t>(cap - floor + 1));
}

namespace {
CleanupResult failed_attempt(ledger::Ledger &ledger, const ledger::TaskRecord &task, const CleanupSettings &s,
                             const util::Clock &clock, const Error &error);

// The row is alive and ACTIVE and its object owed the committed tag (the upload's own
// tagging failed, or its process died first): tag it, then the task is done.
CleanupResult finish_commit_tag(ledger::Ledger &ledger, store::ObjectStore &store,
                                const ledger::TaskRecord &task, const CleanupSettings &s,
                                const util::Clock &clock) {
  auto t = store.mark_committed(task.object_key);
  if (!t) return failed_attempt(ledger, task, s, clock, t.error());
  if (ledger.ignore_task(task, clock.now_ms()) == ledger::TaskFinish::lease_lost)
    return {CleanupOutcome::lease_lost, {}};
  util::log::info("tagged " + task.object_key + " committed (task " + std::to_string(task.id) + ")");
  return {CleanupOutcome::ignored, {}};
}

// The store refused a guarded delete: the object is tagged committed, so it is not the
// failed upload's own pending object. Nothing is deleted; the row is re-checked (it is
// dead: UPLOAD_FAILED never comes back) and the task ends IGNORED, said loudly.
CleanupResult refused_by_guard(ledger::Ledger &ledger, const ledger::TaskRecord &task,
                               const util::Clock &clock, const Error &error) {
  auto row = ledger.find_file(task.record_id);
  if (!row || row->upload_status != ledger::FileStatus::upload_failed)
    return {CleanupOutcome::lease_lost, {}}; // cannot happen: the next sweep decides again
  if (ledger.ignore_task(task, clock.now_ms()) == ledger::TaskFinish::lease_lost)
    return {CleanupOutcome::lease_lost, {}};
  util::log::warn("not deleted: " + task.object_key + " (record #" + std::to_string(task.record_id) +
                  ", a failed upload) is tagged committed, so the store refused the guarded delete (" +
                  error.message + "); left in place, task " + std::to_string(task.id) + " ignored");
  return {CleanupOutcome::ignored, error.message};
}
} // namespace

int64_t verify_pass_due(const ledger::FileRecord *row, int64_t now, int64_t grace_ms) {
  int64_t deadline_len = row ? std::max<int64_t>(0, row->upload_deadline_at - row->created_at) : 0;
  return now + deadline_len + grace_ms;
}

CleanupResult run_claimed_task(ledger::Ledger &ledger, store::ObjectStore &store,
                               const ledger::TaskRecord &task, const CleanupSettings &s,
                               const util::Clock &clock) {
  const bool tags = store.capabilities().state_tags;
  switch (ledger.decide(task, clock.now_ms(), s.grace_ms,
                        tags ? ledger::CommitTag::owed : ledger::CommitTag::none)) {
  case ledger::TaskDecision::lease_lost:
    return {CleanupOutcome::lease_lost, {}};
  case ledger::TaskDecision::ignored:
    return {CleanupOutcome::ignored, {}};
  case ledger::TaskDecision::postponed:
    return {CleanupOutcome::postponed, {}};
  case ledger::TaskDecision::tag:
    return finish_commit_tag(ledger, store, task, s, clock);
  case ledger::TaskDecision::allowed:
    break;
  }
  // I8: the key is this row's, but the object now there is only ours to delete if its
  // stamp (where the store returns one) names this ledger and this row. A failed HEAD
  // proves nothing: the task is retried. A missing object still goes through remove_all,
  // which clears what a HEAD cannot see (older versions, an incomplete multipart upload
  // of this very key) and is a no-op otherwise.
  auto seen = store.head(task.object_key);
  if (!seen && seen.error().code != Errc::not_found)
    return failed_attempt(ledger, task, s, clock, seen.error());
  if (seen) {
    if (auto whose = foreign_stamp(seen->metadata, ledger.uuid(), task.record_id)) {
      std::string err = "not deleted: the object at " + task.object_key + " is stamped " + *whose +
                        ", not record #" + std::to_string(task.record_id) + " of this ledger (" +
                        ledger.uuid() + ")";
      if (ledger.dead_letter(task, err, clock.now_ms()) == ledger::DeadLetterOutcome::lease_lost)
        return {CleanupOutcome::lease_lost, {}};
      util::log::error("task " + std::to_string(task.id) + " dead-lettered: " + err);
      return {CleanupOutcome::dead_lettered, err};
    }
  }
  // A failed upload's object was never tagged committed: its delete is guarded, so a
  // committed object (a confirmed upload) can never be deleted by it, even by mistake.
  // A user-deleted ACTIVE row's object is committed: its delete is not guarded.
  auto row = ledger.find_file(task.record_id);
  const bool failed_row = row && row->upload_status == ledger::FileStatus::upload_failed;
  auto removed = store.remove_all(task.object_key,
                                  failed_row ? store::DeleteGuard::pending_only : store::DeleteGuard::none);
  if (!removed && removed.error().code == Errc::precondition_failed && failed_row)
    return refused_by_guard(ledger, task, clock, removed.error());
  if (failpoint::hit("sweep.after_delete") && removed) {
    // The delete happened but its answer was lost (a timeout): the task is retried, and
    // the retry finds nothing left to delete.
    ErrorDetails lost;
    lost.curl_code = 28; // CURLE_OPERATION_TIMEDOUT
    removed = Error(Errc::storage_unavailable, "DELETE " + task.object_key + ": no answer (injected)", lost);
  }
  int64_t now = clock.now_ms();
  if (removed) {
    row = ledger.find_file(task.record_id);
    auto f = ledger.finish(task, true, {}, verify_pass_due(row ? &*row : nullptr, now, s.grace_ms), now);
    if (f == ledger::TaskFinish::lease_lost) return {CleanupOutcome::lease_lost, {}};
    CleanupResult r{CleanupOutcome::deleted, {}};
    if (f == ledger::TaskFinish::verify_scheduled) {
      r.verify_scheduled = true;
      util::log::info("deleted " + task.object_key + " (task " + std::to_string(task.id) +
                      "); a verify pass follows, in case a late upload still lands");
    } else {
      util::log::info((task.verify_pass == ledger::k_verify_due ? "verified " : "deleted ") +
                      task.object_key + " (task " + std::to_string(task.id) + ")");
    }
    return r;
  }
  return failed_attempt(ledger, task, s, clock, removed.error());
}

std::optional<std::string> foreign_stamp(const store::Metadata &meta, const std::string &ledger_uuid,
                                         int64_t record_id) {
  auto l = meta.find(store::meta::ledger);
  auto r = meta.find(store::meta::record);
  if (l == meta.end() && r == meta.end()) return std::nullopt; // unstamped: the exact key decides
  std::string named_ledger = l == meta.end() ? "(none)" : l->second;
  std::string named_record = r == meta.end() ? "(none)" : r->second;
  if (named_ledger == ledger_uuid && named_record == std::to_string(record_id)) return std::nullopt;
  return "by ledger " + named_ledger + " as record #" + named_record;
}

namespace {
CleanupResult failed_attempt(ledger::Ledger &ledger, const ledger::TaskRecord &task, const CleanupSettings &s,
                             const util::Clock &clock, const Error &error) {
  int64_t now = clock.now_ms();
  std::string err = error.message;
  bool unreachable = store::is_unreachable(error);
  int64_t next = now + cleanup_backoff_ms(s, task.retry_count, crypto::random_below(UINT64_MAX));
  switch (ledger.finish(task, false, err, next, now)) {
  case ledger::TaskFinish::lease_lost:
    return {CleanupOutcome::lease_lost, err, unreachable};
  case ledger::TaskFinish::dead_letter:
    util::log::error("task " + std::to_string(task.id) + " (" + task.object_key + ") dead-lettered: " + err);
    return {CleanupOutcome::dead_lettered, err, unreachable};
  default:
    util::log::warn("task " + std::to_string(task.id) + " (" + task.object_key + ") will be retried: " + err);
    return {CleanupOutcome::retried, err, unreachable};
  }
}

} // namespace

} // namespace lodge::ops
