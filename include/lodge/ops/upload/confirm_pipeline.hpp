#pragma once
// What follows a file's transfer in a pipelined upload (upload_next): the file checked
// unchanged, then its confirm queued (behind a store flush that makes its object durable; a
// ledger that group-commits commits a batch of them together) and settled later, with at most
// k_pending_confirms others pending, results kept in the files' order; or its row failed. With
// send_ahead, a single PUT goes out on the sender thread (a store connection of its own, and a
// ledger connection of its own for the renewals its bytes make) while the worker opens, hashes
// and reserves the next file; it lands (waited for, then as any transfer's end) behind the
// earlier files. One per Uploader, on its worker thread.

#include <cstddef>
#include <deque>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/row_failure.hpp>
#include <lodge/ops/upload/transfer.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/threads.hpp>
#include <memory>
#include <optional>
#include <vector>

namespace lodge::ops {

class ConfirmPipeline {
public:
  // `transfer` makes a PUT sent ahead; `failure` fails the rows that end before their confirm.
  ConfirmPipeline(ledger::UploaderLedger &ledger, store::ObjectStore &store, const UploadSettings &settings,
                  const util::Clock &clock, Transfer &transfer, RowFailure &failure);
  // Waits for a PUT still in flight (its result is lost: finish() first).
  ~ConfirmPipeline();
  ConfirmPipeline(const ConfirmPipeline &) = delete;
  ConfirmPipeline &operator=(const ConfirmPipeline &) = delete;

  // How many files' confirms are left pending at most.
  static constexpr size_t k_pending_confirms = 16;

  // Whether this file's PUT can go ahead on the sender (its connection opened on first use):
  // send_ahead set, a single PUT, not a dry run.
  bool can_send_ahead(const Digests &d);
  // The file's single PUT queued on the sender behind the previous file's, which then lands:
  // the connection never idles between the two, and one reserved file waits per worker at most
  // (for one PUT), its result landing after the previous one's. The file, its row and its
  // bound move into it.
  void send_ahead(FileResult &r, OpenedFile &f, const ledger::FileRecord &rec,
                  std::unique_ptr<Renewal> renewal);
  // Waits for the PUTs on the sender, oldest first, until `keep` are left, and lands each
  // (its confirm queued, or its final result), behind every earlier file: results keep the
  // files' order.
  void land_flights(size_t keep);
  // What follows a file's transfer: the file checked unchanged, then its confirm queued
  // (nullopt) or the row failed (r's final result).
  std::optional<FileResult> after_transfer(FileResult &r, const OpenedFile &f, const ledger::FileRecord &rec,
                                           Result<store::PutResult> put, const Renewal &renewal,
                                           const TransferNote &note);
  // How long a PUT sent ahead takes, on average of the recent ones (microseconds); 0 before
  // the first landed.
  [[nodiscard]] int64_t put_us() const { return m_put_us; }
  // Every PUT on the sender landed and every pending confirm settled, their results done.
  void settle_all();
  // A file that ended without a pending confirm: every earlier file settled first, then its
  // result done.
  void end(FileResult r);
  // The results done since the last call, in the order of the files.
  [[nodiscard]] std::vector<FileResult> take_done();
  // Every pending file ended: the results not yet taken, in the order of the files.
  [[nodiscard]] std::vector<FileResult> finish();

private:
  // A file whose bytes are stored and checked, waiting for its confirm.
  struct Tail {
    FileResult r;
    ledger::FileRecord rec;
    std::optional<PendingActivation> pending; // the confirm, queued (ops::activate_later)
    std::optional<FileResult> done;           // ended before its confirm
  };
  // send_ahead: a single PUT on the sender thread (the file, its row and its bound move into it).
  struct Flight;
  // The sender thread's own ledger connection (UploadSettings::open_ledger), opened on the
  // first renewal of a PUT in flight; null when there is none. Called on the sender only.
  ledger::UploadLedger *sender_ledger();
  void land(Flight &fl);
  // A stored file's confirm queued (behind a store flush that makes its object durable), or
  // t.done when it ended before.
  void begin_tail(Tail &t, const store::PutResult &put);
  // The oldest pending file's result, into m_done, once its activation finished (the confirm
  // committed; on a store that tags objects, the tag set and the task settled).
  void settle_front();
  // Settles the oldest pending files until at most `keep` are left.
  void settle_tails(size_t keep);

  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  const UploadSettings &m_s;
  const util::Clock &m_clock;
  Transfer &m_transfer;
  RowFailure &m_failure;
  std::deque<Tail> m_tails;                            // the files whose confirms are pending
  std::vector<FileResult> m_done;                      // what take_done returns
  std::unique_ptr<store::ObjectStore> m_send_store;    // send_ahead's connection
  bool m_send_store_failed = false;                    // could not be opened: PUTs on the worker
  std::shared_ptr<ledger::UploadLedger> m_send_ledger; // the sender's renewals (sender thread only)
  bool m_send_ledger_failed = false;                   // none: a PUT in flight is not renewed
  std::unique_ptr<util::TaskThread> m_sender;          // runs the flights' PUTs, one at a time
  // The PUTs on the sender, oldest first: the one in the air and at most one queued behind it
  // (declared last: waited for first).
  std::deque<std::unique_ptr<Flight>> m_flights;
  int64_t m_put_us = 0; // put_us()
};

} // namespace lodge::ops
