#pragma once
// `lodge upload`, per file: validate, digest, reserve (Reservation), PUT (single or multipart)
// before the deadline (Transfer), confirm — or mark failed and compensate (RowFailure). One Uploader per
// worker thread, each with its own ledger connection, store connection and type detector.

#include <atomic>
#include <deque>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/reservation.hpp>
#include <lodge/ops/upload/row_failure.hpp>
#include <lodge/ops/upload/transfer.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/ops/upload/walk.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/threads.hpp>
#include <memory>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <vector>

namespace lodge::ops {

// git's "racy clean": a stat taken when the file's mtime or ctime was within the filesystem's
// timestamp granularity of that moment (`taken_ms`, the wall clock) cannot tell a rewrite
// of the same size in that same timestamp from the file it read. Such a stat is never
// recorded for the stat cache; the next run reads the file again.
[[nodiscard]] bool racily_clean(const ledger::FileStat &stat, int64_t taken_ms);

class Uploader {
public:
  Uploader(UploaderLedger ledger, store::ObjectStore &store, UploadSettings settings,
           const util::Clock &clock);
  // Waits for a PUT still in flight (its result is lost: finish() first).
  ~Uploader();
  Uploader(const Uploader &) = delete;
  Uploader &operator=(const Uploader &) = delete;
  // Never throws for a per-file problem: every failure is in the result. A path is
  // opened as given (its last component not followed unless follow_symlinks).
  [[nodiscard]] FileResult upload(const std::string &path);
  // A file found by walk_inputs: opened relative to its parent directory and refused
  // unless it is still the regular file the walk saw.
  // (Not to be mixed with upload_next on one Uploader.)
  [[nodiscard]] FileResult upload(const InputFile &file);
  // The same, pipelined: a file whose bytes are stored is left with its confirm pending
  // (queued at once; a ledger that group-commits commits a batch of them together, behind one
  // store flush), up to k_pending_confirms of them. Returns the results this call finished,
  // in the order of the files: earlier pending ones whose confirms committed, then this one's
  // unless it is now pending. finish() ends every pending one.
  [[nodiscard]] std::vector<FileResult> upload_next(const InputFile &file);
  [[nodiscard]] std::vector<FileResult> finish();
  // How many files' confirms one Uploader leaves pending at most.
  static constexpr size_t k_pending_confirms = 16;

private:
  // A file whose bytes are stored and checked, waiting for its confirm.
  struct Tail {
    FileResult r;
    ledger::FileRecord rec;
    std::optional<PendingActivation> pending; // the confirm, queued (ops::activate_later)
    std::optional<FileResult> done;           // ended before its confirm
  };
  // Fills r as it goes (upload() reports what it holds if this throws). nullopt: the
  // file's confirm is pending, in m_tails.
  std::optional<FileResult> upload_unguarded(const InputFile &file, FileResult &r);
  // Opens the file and checks what it is, its size, name, key and extension (r gets its size
  // and relative path); the error is the file's rejection.
  Result<OpenedFile> open_checked(const InputFile &file, FileResult &r);
  // Reads and hashes the file and checks its media type (r gets its digest, media and content
  // types); the error is the file's rejection.
  Result<Digests> digest_and_type(const OpenedFile &f, FileResult &r);
  // Reserves the file's row, sends its bytes before the row's deadline and queues its confirm:
  // nullopt once the confirm is pending in m_tails, else r's final result.
  std::optional<FileResult> reserve_and_send(OpenedFile &f, const Digests &digests, FileResult &r);
  // What follows a file's transfer: the file checked unchanged, then its confirm queued (nullopt)
  // or the row failed (r's final result).
  std::optional<FileResult> after_transfer(FileResult &r, const OpenedFile &f, const ledger::FileRecord &rec,
                                           Result<store::PutResult> put, const Renewal &renewal,
                                           const TransferNote &note);
  // send_ahead: a single PUT on the sender thread (the file, its row and its bound move into it).
  struct Flight;
  // Whether this file's PUT can go ahead on the sender (its connection opened on first use).
  bool can_send_ahead(const Digests &d);
  // The sender thread's own ledger connection (UploadSettings::open_ledger), opened on the
  // first renewal of a PUT in flight; null when there is none. Called on the sender only.
  ledger::UploadLedger *sender_ledger();
  void start_flight(FileResult &r, OpenedFile &f, const ledger::FileRecord &rec,
                    std::unique_ptr<Renewal> renewal);
  // Waits for the PUTs on the sender, oldest first, until `keep` are left, and lands each in
  // m_tails (its confirm queued, or its final result), behind every earlier file: results
  // keep the files' order.
  void land_flights(size_t keep);
  void land(Flight &fl);
  // A stored file's confirm queued (behind a store flush that makes its object durable), or
  // t.done when it ended before.
  void begin_tail(Tail &t, const store::PutResult &put);
  // The oldest pending file's result, into m_done, once its activation finished (the confirm
  // committed; on a store that tags objects, the tag set and the task settled).
  void settle_front();
  // Settles the oldest pending files until at most `keep` are left.
  void settle_tails(size_t keep);
  // digest_file through m_buf, the hashing pass shown on the run's Progress.
  Result<Digests> hash_file(int fd, uint64_t size, bool multipart);

  UploaderLedger m_ledger;
  store::ObjectStore &m_store;
  UploadSettings m_s;
  const util::Clock &m_clock;
  MediaTypeDetector m_detector;
  std::vector<char> m_buf; // the read buffer, reused for every file
  RowFailure m_failure;    // reads m_s: declared after it
  Reservation m_reservation;
  Transfer m_transfer;
  std::deque<Tail> m_tails;                            // the files whose confirms are pending
  std::vector<FileResult> m_done;                      // what upload_next returns
  std::unique_ptr<store::ObjectStore> m_send_store;    // send_ahead's connection
  bool m_send_store_failed = false;                    // could not be opened: PUTs on the worker
  std::shared_ptr<ledger::UploadLedger> m_send_ledger; // the sender's renewals (sender thread only)
  bool m_send_ledger_failed = false;                   // none: a PUT in flight is not renewed
  std::unique_ptr<util::TaskThread> m_sender;          // runs the flights' PUTs, one at a time
  // The PUTs on the sender, oldest first: the one in the air and at most one queued behind it
  // (declared last: waited for first).
  std::deque<std::unique_ptr<Flight>> m_flights;
};

} // namespace lodge::ops
