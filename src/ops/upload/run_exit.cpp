// How an upload run is stopped (StopWord) and what its end means for the exit status (see
// lodge/ops/upload/run.hpp).
#include <csignal>
#include <lodge/ops/upload/run.hpp>

namespace lodge::ops {

static_assert(k_exit_broken_pipe == 128 + SIGPIPE);

bool StopWord::begin_file() {
  int64_t v = m_word.load();
  do {
    if ((v & 1) != 0) return false;
  } while (!m_word.compare_exchange_weak(v, v + 2));
  return true;
}

void StopWord::end_file() {
  m_word.fetch_sub(2);
}

bool StopWord::stopped() const {
  return (m_word.load() & 1) != 0;
}

int64_t StopWord::stop() noexcept {
  return m_word.fetch_or(1) >> 1;
}

bool is_ledger_failure(const Error &e) {
  switch (e.code) {
  case Errc::ledger_unusable:
  case Errc::ledger_locked:
  case Errc::ledger_too_new:
  case Errc::ledger_on_network_fs:
  case Errc::ledger_not_found:
  case Errc::ledger_diverged:
  case Errc::ledger_unavailable:
    return true;
  default:
    return false;
  }
}

RunExit run_exit(const RunReport &r) {
  if (r.interrupted) return r.broken_pipe ? RunExit::broken_pipe : RunExit::interrupted;
  const RunTally &t = r.tally;
  // Whole-run failures get their own status: every failure the ledger's, with nothing
  // done; every one the store being unreachable, with nothing stored.
  const bool none_done = t.active + t.replayed + t.duplicate + t.planned == 0 && t.rejected == 0;
  if (none_done && t.ledger_failures > 0 && t.ledger_failures == t.failed && t.in_progress == 0)
    return RunExit::ledger_unusable;
  if (t.storage_failures > 0 && t.storage_failures == t.failed && t.active + t.replayed == 0 &&
      t.rejected == 0 && t.in_progress == 0)
    return RunExit::storage_unavailable;
  return t.rejected + t.failed + t.in_progress > 0 ? RunExit::items_failed : RunExit::ok;
}

int exit_status(const RunReport &r) {
  switch (run_exit(r)) {
  case RunExit::ok:
    return errc_info(Errc::ok).exit_code;
  case RunExit::items_failed:
    // The status every per-item code has (a rejection, STATE_CHANGED, IN_PROGRESS).
    return errc_info(Errc::storage_error).exit_code;
  case RunExit::ledger_unusable:
    return errc_info(Errc::ledger_unusable).exit_code;
  case RunExit::storage_unavailable:
    return errc_info(Errc::storage_unavailable).exit_code;
  case RunExit::interrupted:
    return errc_info(Errc::interrupted).exit_code;
  case RunExit::broken_pipe:
    return k_exit_broken_pipe;
  }
  return errc_info(Errc::internal).exit_code;
}

} // namespace lodge::ops
