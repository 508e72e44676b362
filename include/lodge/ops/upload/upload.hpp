#pragma once
// `lodge upload`, per file: the sequence. Open and check the file, find it in the stat cache or
// digest it, reserve its row (Reservation), send its bytes before the row's deadline
// (Transfer), confirm it (ConfirmPipeline) — or mark it failed and compensate (RowFailure).
// One Uploader per worker thread, each with its own ledger connection, store connection and
// type detector.

#include <cstdint>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/confirm_pipeline.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/reservation.hpp>
#include <lodge/ops/upload/row_failure.hpp>
#include <lodge/ops/upload/transfer.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/ops/upload/walk.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// git's "racy clean": a stat taken when the file's mtime or ctime was within the filesystem's
// timestamp granularity of that moment (`taken_ms`, the wall clock) cannot tell a rewrite
// of the same size in that same timestamp from the file it read. Such a stat is never
// recorded for the stat cache; the next run reads the file again.
[[nodiscard]] bool racily_clean(const ledger::FileStat &stat, int64_t taken_ms);

// How many small files one batch holds: 1 + the files a worker's PUTs (put_us each) send in
// the time one ask of the ledger takes (wait_us), at most `most`; 1 until both are known.
[[nodiscard]] size_t batch_size_for(int64_t put_us, int64_t wait_us, size_t most);

class Uploader {
public:
  Uploader(ledger::UploaderLedger &ledger, store::ObjectStore &store, UploadSettings settings,
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
  // upload_next of several files, their first reserves asked together: the files are opened
  // and hashed one after another, then reserved in one ledger transaction (one commit and one
  // wait for them all), then sent one after another (each PUT behind the one before it, on
  // the sender) and their confirms queued. Only for files that fit batch_fits; a dry run or a
  // single file goes through upload_next.
  [[nodiscard]] std::vector<FileResult> upload_batch(const std::vector<InputFile> &files);
  // Whether a file may go in a batch with `bytes_before` bytes of files ahead of it: a
  // single PUT, and the batch no bigger than k_batch_bytes.
  [[nodiscard]] bool batch_fits(const InputFile &file, uint64_t bytes_before) const;
  // How many files the next batch holds at most: as many as this worker's PUTs send in the
  // time one ask of the ledger takes (1 + wait / PUT, measured on its recent ones, at most
  // k_batch_files; 1 until both were measured; UploadSettings::batch_files fixes it). So a batch saves asks
  // where the ledger's wait outweighs a PUT (a store on the same machine), the last file of a batch waits for
  // the PUTs ahead of it about as long as one ask would have kept it, and where the store's
  // latency outweighs the ledger (S3) files go one by one, each PUT overlapping the next
  // file's reserve.
  [[nodiscard]] size_t batch_limit() const;
  // The files one batch holds at most, and their bytes at most.
  static constexpr size_t k_batch_files = 16;
  static constexpr uint64_t k_batch_bytes = 1ULL << 20;
  // How many files' confirms one Uploader leaves pending at most.
  static constexpr size_t k_pending_confirms = ConfirmPipeline::k_pending_confirms;

private:
  // Fills r as it goes (upload() reports what it holds if this throws). nullopt: the
  // file's confirm is pending, in the confirm pipeline.
  std::optional<FileResult> upload_unguarded(const InputFile &file, FileResult &r);
  // Opens the file and checks what it is, its size, name, key and extension (r gets its size
  // and relative path); the error is the file's rejection.
  Result<OpenedFile> open_checked(const InputFile &file, FileResult &r);
  // Reads and hashes the file and checks its media type (r gets its digest, media and content
  // types); the error is the file's rejection.
  Result<Digests> digest_and_type(const OpenedFile &f, FileResult &r);
  // Reserves the file's row, sends its bytes before the row's deadline and queues its confirm:
  // nullopt once the confirm is pending in the confirm pipeline, else r's final result.
  std::optional<FileResult> reserve_and_send(OpenedFile &f, const Digests &digests, FileResult &r);
  // reserve_and_send in its two halves: the request (`cacheable`: whether the file's stat
  // may be recorded), and the reserve (with `first`: asked already) with what follows it.
  ledger::ReserveRequest reserve_request(const OpenedFile &f, const Digests &digests, const FileResult &r,
                                         bool &cacheable) const;
  std::optional<FileResult> send_reserved(OpenedFile &f, const Digests &digests, FileResult &r,
                                          const ledger::ReserveRequest &req, bool cacheable,
                                          std::optional<Asked> first);
  // digest_file through m_buf, the hashing pass shown on the run's Progress.
  Result<Digests> hash_file(int fd, uint64_t size, bool multipart);

  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  UploadSettings m_s; // the collaborators below read it: declared before them
  const util::Clock &m_clock;
  MediaTypeDetector m_detector;
  std::vector<char> m_buf; // the read buffer, reused for every file
  RowFailure m_failure;
  Reservation m_reservation;
  Transfer m_transfer;
  ConfirmPipeline m_confirms; // declared last: its PUT in flight is waited for first
};

} // namespace lodge::ops
