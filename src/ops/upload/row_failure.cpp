// A reserved row's failure (see lodge/ops/upload/row_failure.hpp).
#include <lodge/failpoint.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/upload/row_failure.hpp>
#include <lodge/util/log.hpp>
#include <string>

namespace lodge::ops {

RowFailure::RowFailure(ledger::UploaderLedger &ledger, store::ObjectStore &store,
                       const UploadSettings &settings, const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(settings), m_clock(clock) {}

void RowFailure::fail(FileResult &r, const ledger::FileRecord &rec, const Error &e, bool definite,
                      std::optional<int64_t> kept_until) {
  r.outcome = UploadOutcome::failed;
  r.error = e;
  if (failpoint::hit("upload.mark_failed")) {
    util::log::error("could not mark file #" + std::to_string(rec.id) + " failed (injected); repair will");
    return;
  }
  bool marked = false;
  try {
    const std::string reason = std::string(e.name()) + ": " + e.message;
    const int64_t now = m_clock.now_ms();
    if (kept_until) {
      // Its staged upload stays for the next upload of the same content to resume; the
      // cleanup (which aborts it) waits until then.
      (void)m_ledger.fail_resumable(rec.id, reason, *kept_until, now);
      return;
    }
    marked = m_ledger.mark_failed(rec.id, reason, definite, now) == ledger::MarkFailedOutcome::failed;
  } catch (const LodgeError &le) {
    util::log::error("could not mark file #" + std::to_string(rec.id) + " failed: " + le.error().message +
                     "; repair will");
    return;
  }
  if (!marked || !definite) return;
  // A definite failure: nothing more can land, so compensate now, through sweep's path.
  clean_up_now(rec);
}

void RowFailure::clean_up_now(const ledger::FileRecord &rec) {
  auto task = m_ledger.find_task_for(rec.id);
  if (!task) return;
  auto claimed = m_ledger.claim_task(task->id, m_clock.now_ms(), m_s.worker_id, m_s.lease_ms);
  if (!claimed) return;
  auto cleanup = m_s.cleanup;
  cleanup.voice = CleanupSettings::Voice::upload;
  (void)run_claimed_task(m_ledger, m_store, *claimed, cleanup, m_clock);
}

} // namespace lodge::ops
