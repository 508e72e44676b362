#pragma once
// A reserved file's bytes on their way to the store: one PUT, or a staged upload's parts (sent
// up to the part concurrency at once over extra connections, a resumed row's stored parts
// proven against the file and kept), every request bounded by the row's deadline, which the
// transfer's progress renews (Renewal). The uploader sends each file through its Transfer; the
// confirm pipeline's sender thread sends a single PUT made here.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/transfer_watch.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// The monotonic bound of one file's transfer and its renewal by progress. The row's deadline
// is `policy.deadline` after the reserve; progress is bytes sent (the store tells of them as
// they leave: util::TransferWatch) and parts finished, and progress at least a quarter
// deadline after the last renewal renews the row (UploadLedger::renew, fenced: only while the
// row is still this sender's and its deadline ahead): its deadline becomes `policy.deadline`
// from now and its task's not-before that + grace. The steady bound moves only once a renewal
// committed, to the same length from a steady time taken before the renewal's wall time, less
// the margin: no request may end after the deadline the row shows (measured by this host's
// monotonic clock). A transfer must also move a byte within `policy.stall` of the last
// progress. Renewal is judged by the wall clock (its `now` is the ledger's), the bound by the
// monotonic one. Thread-safe: the part threads share one; one renewal runs at a time, outside
// the lock, so the other parts' bytes never wait for it.
class Renewal final : public util::TransferWatch {
public:
  Renewal(ledger::UploadLedger &l, const util::Clock &clock, const ledger::FileRecord &rec,
          const config::Policy &policy, int64_t grace_ms, int64_t steady_deadline, int64_t margin);

  // A PUT sent on the sender thread renews through the ledger `via` gives there (the worker's
  // own is busy with the next file); null from it: not renewed. Set before the PUT begins.
  void renew_through(std::function<ledger::UploadLedger *()> via) { m_via = std::move(via); }
  // The transfer begins now: the stall counts from here (a PUT queued behind another waited).
  void begin();

  // The steady time a request begun now must end by (checked again as it goes when its body
  // is watched): the row's bound, or the stall's from the last progress; past once stopped.
  [[nodiscard]] int64_t bound() const;
  [[nodiscard]] int64_t bound_ms() const override { return bound(); }
  // Bytes left: progress. A refused renewal stops the transfer (bound() passes at once).
  void on_bytes(uint64_t /*n*/) override { (void)progress(); }

  // Progress (bytes sent, a part finished). An error stops the transfer: the row is no longer
  // this sender's to send (failed by repair or sweep, or held by another sender).
  Status progress();
  // A transfer's error as the bound that ended it says it: the renewal refused (the row is not
  // this sender's any more), the stall (no byte for policy.stall) or the row's deadline.
  [[nodiscard]] Error explain(Error e) const;
  [[nodiscard]] Result<store::PutResult> explain(Result<store::PutResult> put) const {
    if (!put) return explain(put.error());
    return put;
  }
  [[nodiscard]] bool taken_over() const;

private:
  // One renewal asked of the ledger (outside the lock); nullopt when it could not be asked.
  std::optional<ledger::RenewOutcome> ask(int64_t now);

  ledger::UploadLedger &m_ledger;
  const util::Clock &m_clock;
  const int64_t m_id;
  const std::optional<std::string> m_holder;
  const int64_t m_deadline_ms;
  const int64_t m_stall_ms;
  const int64_t m_grace_ms;
  const int64_t m_margin_ms;
  const int64_t m_every_ms;
  std::function<ledger::UploadLedger *()> m_via; // set before the transfer, read-only during it
  mutable std::mutex m_mutex;
  int64_t m_steady_deadline;
  int64_t m_last_progress;
  int64_t m_last_renewal;
  bool m_renewing = false;     // a renewal is being asked, outside the lock
  std::optional<Error> m_stop; // a renewal was refused: the transfer stops with this
  bool m_taken_over = false;
};

// What a transfer learned besides its result.
struct TransferNote {
  bool resume = false; // in: the row was resumed (its staged upload may hold parts)
  // in: a resumed row's cleanup due time before the revive (ledger::ReserveResult)
  std::optional<int64_t> cleanup_due_before;
  uint64_t resumed_bytes = 0; // out: the bytes of parts already stored, not sent again
  bool staged_kept = false;   // out: failed, its staged upload kept for a later resume
};

// The object's metadata: the user's (`options`), with lodge's stamp for the row over it (this
// ledger's uuid, the record id, digest, owner, path and prefix).
[[nodiscard]] store::Metadata object_metadata(const store::ObjectOptions &options,
                                              const ledger::FileRecord &rec, const std::string &ledger_uuid);

class Transfer {
public:
  Transfer(ledger::UploaderLedger &ledger, store::ObjectStore &store, const UploadSettings &settings,
           const util::Clock &clock);

  // The bound of a transfer of the row `rec` reserved at `wall_at_reserve` (the wall clock)
  // and `steady_at_reserve` (the monotonic one), renewed through this worker's ledger.
  [[nodiscard]] std::unique_ptr<Renewal> renewal(const ledger::FileRecord &rec, int64_t wall_at_reserve,
                                                 int64_t steady_at_reserve) const;
  // The PUT (single or multipart); returns its etag and version id.
  Result<store::PutResult> send(int fd, const ledger::FileRecord &rec, const Digests &d, Renewal &renewal,
                                TransferNote &note);
  // One PUT's request (made on the worker: the stamp reads the ledger's uuid).
  [[nodiscard]] store::PutRequest single_request(int fd, const ledger::FileRecord &rec,
                                                 Renewal &renewal) const;
  // A PUT (or completion) through `via`, a refused create-only one checked for our own earlier
  // attempt (thread-safe for the sender: it touches `via` alone).
  static Result<store::PutResult> ours_if_landed(store::ObjectStore &via, const ledger::FileRecord &rec,
                                                 Result<store::PutResult> put);

private:
  // A multipart transfer: begins the staged upload (or resumes the row's), sends the parts
  // not already stored, completes it.
  Result<store::PutResult> send_staged(int fd, const ledger::FileRecord &rec, const Digests &d,
                                       const store::StagedRequest &staged, Renewal &renewal,
                                       TransferNote &note);
  // The parts of a resumed row's staged upload `handle` already stored with the file's bytes,
  // by part number (index + 1), their size in `bytes`; nullopt when the staged upload cannot
  // be resumed (gone, parts of another size or beyond the file) and is to be begun afresh.
  struct Resumable {
    std::vector<std::optional<store::Part>> parts;
    uint64_t bytes = 0;
  };
  Result<std::optional<Resumable>> stored_parts(int fd, const ledger::FileRecord &rec, const Digests &d,
                                                const std::string &handle);
  // Sends every part not already in `done`, up to part_concurrency at once; the first failure
  // stops the rest. Each finished part is progress: it may renew the row's deadline
  // (Renewal::progress).
  Result<std::vector<store::Part>> put_parts(int fd, const ledger::FileRecord &rec, const Digests &d,
                                             const std::string &upload_id, Renewal &renewal,
                                             std::vector<std::optional<store::Part>> done);
  [[nodiscard]] std::atomic<uint64_t> *sent_counter() const {
    return m_s.progress ? &m_s.progress->sent : nullptr;
  }

  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  const UploadSettings &m_s;
  const util::Clock &m_clock;
  std::vector<char> m_buf;                                        // reads a stored part's bytes again
  std::vector<std::unique_ptr<store::ObjectStore>> m_part_stores; // extra connections, kept
};

} // namespace lodge::ops
