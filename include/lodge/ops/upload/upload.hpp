#pragma once
// `lodge upload`, per file: validate, digest, reserve, PUT (single or multipart) before the
// deadline, confirm — or mark failed and compensate. One Uploader per worker thread,
// each with its own ledger connection, store connection and type detector.

#include <atomic>
#include <deque>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/listing_cache.hpp>
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

// skipped: the walk passed over it on purpose (a symlink not followed); not a failure.
// planned: --dry-run found nothing against it, and would upload it.
// in_progress: another sender holds the same content (a direct reservation, or another
// process past the run's wait for it); nothing was sent. Counts as a failure.
enum class UploadOutcome { active, duplicate, replayed, rejected, failed, skipped, planned, in_progress };
[[nodiscard]] const char *to_string(UploadOutcome o);

// What a run's progress line shows besides finished files, shared by its workers: the
// bytes sent so far (parts included, counted as they leave; a retried attempt's are taken
// back) and the hashing pass of files still being read before their reservation.
struct Progress {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> hashed{0};       // bytes hashed so far of the files being hashed now
  std::atomic<uint64_t> hashing_size{0}; // the sizes of those files
  std::atomic<int> hashing{0};           // how many files are being hashed now
  // Files whose bytes are stored and checked, counted then (their confirms may still be
  // pending): an adaptive run's throughput, not held back by confirms settled in batches.
  std::atomic<uint64_t> stored{0};
};

struct UploadSettings {
  config::Policy policy;
  std::string owner;
  std::optional<std::string> idempotency_key;
  // The run's --prefix (checked with config::run_prefix_problem), "" for none: keys are
  // <root>/<owner>/[<run_prefix>/]<uuid>/<relative path>.
  std::string run_prefix;
  uint64_t multipart_threshold = 64ULL << 20;
  uint64_t part_size = 16ULL << 20;
  int part_concurrency = 1;
  // Opens another connection to the same store, for parts sent in parallel.
  std::function<std::unique_ptr<store::ObjectStore>()> open_store;
  // Opens another connection to the same ledger, for the sender thread (send_ahead): a PUT in
  // flight there renews its row through it as its bytes flow. Null: such a PUT is not renewed.
  std::function<std::shared_ptr<ledger::UploadLedger>()> open_ledger;
  int max_retries = 8;
  int64_t lease_ms = 120'000;
  CleanupSettings cleanup;
  bool follow_symlinks = false;
  std::string worker_id;
  // The run's id blocks, shared by its workers (one is made per Uploader when unset).
  std::shared_ptr<IdBlocks> id_blocks;
  // The run's listings, shared by its workers: a would-be duplicate's object proven there by
  // a listing is not HEADed (ListingCache). Null: each one is HEADed.
  std::shared_ptr<ListingCache> listings;
  // What the objects carry: the policy's options with the flags over them, validated and
  // accepted by the store before the run starts.
  store::ObjectOptions options;
  // Each row reserved expires this long after its reserve (ReserveRequest::expires_at);
  // nullopt: never.
  std::optional<int64_t> expire_after_ms;
  bool checksum = false; // --checksum: every file read and hashed; the stat cache not asked
  bool replace = false;  // --replace: a new file at a path retires the path's older rows once ACTIVE
  bool dry_run = false;  // --dry-run: decide, write nothing (neither ledger nor store)
  std::shared_ptr<Progress> progress; // null: nobody is watching
  // Pipelined (upload_next): a file's single PUT goes out on a sender thread over its own
  // connection (open_store) while the worker opens, hashes and reserves the next file, so
  // the ledger's commit and the hash hide behind the request's wait. At most one file per
  // Uploader is reserved and not yet sent (its deadline runs from its reserve: it waits for
  // one PUT at most); its PUT begins only after its reserve committed (I2). Parts stay on
  // the worker.
  bool send_ahead = false;
};

// git's "racy clean": a stat taken when the file's mtime or ctime was within the filesystem's
// timestamp granularity of that moment (`taken_ms`, the wall clock) cannot tell a rewrite
// of the same size in that same timestamp from the file it read. Such a stat is never
// recorded for the stat cache; the next run reads the file again.
[[nodiscard]] bool racily_clean(const ledger::FileStat &stat, int64_t taken_ms);

struct FileResult {
  std::string file;
  std::string relative_path; // what the row records, once it is known
  UploadOutcome outcome = UploadOutcome::failed;
  std::optional<int64_t> id;
  std::string object_key;
  std::string sha256;
  uint64_t size = 0;
  std::string media_type;   // detected from the content (what the policy checks)
  std::string content_type; // what the object is stored with
  bool unchanged = false;   // a duplicate the stat cache found: the file was not read
  // A duplicate whose row shares another row's object (de-duplication at another path):
  // that row's id. The path is restorable by its own row (`id`).
  std::optional<int64_t> shares;
  // A staged upload resumed from an earlier, interrupted upload of the same content: the
  // bytes of the parts already stored and found equal to the file's, not sent again.
  uint64_t resumed_bytes = 0;
  std::optional<Error> error;
  std::string reason; // why it was skipped (outcome skipped)
};

// Why an object is not the one a row recorded: its size, or a stamp (ledger, record, and
// with `full` the digest) that differs; a stamp the store did not return is a difference
// only with `full` (a direct upload's object must carry it). nullopt: it is.
[[nodiscard]] std::optional<std::string> object_differs(const store::ObjectInfo &h,
                                                        const ledger::FileRecord &rec,
                                                        const std::string &ledger_uuid, bool full);

// The ledger roles an upload takes (the Uploader, and ops::run_upload's RunDeps): its own
// transitions (uploads), the reserve's id block and the divergence check (blocks), the
// compensation it runs for a failed file (tasks), the rows it reads and the uuid its
// objects are stamped with (reads), a missing duplicate's row, a gone sender's rows and
// direct uploads' failures (recovery). Everything but the ledger's own records (meta).
// Made from the whole ledger implicitly.
struct UploaderLedger {
  ledger::UploadLedger &uploads;
  ledger::TaskLedger &tasks;
  ledger::RecoveryLedger &recovery;
  ledger::LedgerReports &reads;
  ledger::IdBlockLedger &blocks;
  UploaderLedger(ledger::Ledger &l) // NOLINT(google-explicit-constructor)
      : uploads(l), tasks(l), recovery(l), reads(l), blocks(l) {}
};

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

  // lodge reserve: the checks an upload makes without the bytes (name, extension, size,
  // quota, de-dup by the given digest, idempotency) and the same reserve transaction; the
  // row's holder is "direct until=<ms>" (the URL's expiry) and its deadline that expiry plus
  // the policy's deadline. A reserved row comes with a presigned PUT pinning the object.
  struct DirectRequest {
    std::string name; // the relative path the row records
    uint64_t size = 0;
    std::string sha256;
    int64_t expires_s = 3600;
    // reserve --parts: a staged upload of parts this size (the last one shorter), one
    // presigned URL each; its handle is on the row and the holder says
    // "direct until=<ms> parts=<part_size>". 0: one presigned PUT.
    uint64_t part_size = 0;
  };
  struct DirectPart {
    int number = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    store::PresignedPut put;
  };
  struct DirectReservation {
    FileResult r;          // outcome: active (reserved, not yet sent), duplicate, replayed, rejected, failed
    bool reserved = false; // a new reservation (r.outcome is then planned: the client sends)
    std::optional<store::PresignedPut> put;
    std::vector<DirectPart> parts; // reserve --parts: one URL per part, instead of put
    int64_t url_expires_at = 0;
  };
  [[nodiscard]] DirectReservation reserve_direct(const DirectRequest &d);
  // lodge confirm: a reservation with parts first has its staged upload's parts listed
  // (numbers 1..n, each of the reserved part size, the last the rest) and completed,
  // create-only; missing parts while the URLs are valid: NOT_FOUND, nothing changed; parts
  // of another number or size fail the row as bytes that differ do. Then, as for one PUT:
  // the object of a direct reservation must be exactly the reserved size,
  // carry lodge's stamp for this ledger and row, and hash to the reserved digest (the
  // server's verified checksum, or the bytes read back); then the upload's confirm. Bytes
  // that differ fail the row; their object stays until the URL's expiry plus the grace
  // (while it takes the key, the create-only URL cannot put another there), then goes with a
  // verify pass; past the expiry it is cleaned now. Already ACTIVE: the same answer again.
  // outcome active, or failed with the reason; NOT_FOUND while nothing was sent and the URL
  // is still valid.
  [[nodiscard]] FileResult confirm_direct(int64_t id);
  // lodge confirm --all-due: every direct reservation whose URL has expired, confirmed or
  // failed (nothing sent: failed, its cleanup after the grace as repair would).
  [[nodiscard]] std::vector<FileResult> confirm_due(int limit);

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
  // A file opened for upload and past every check made before its bytes are read.
  struct OpenedFile {
    util::Fd fd;
    struct stat st {};
    int64_t stat_taken_ms = 0; // when st was taken (a stat as recent as that is racily clean)
    std::string name;          // the display name the row records
    std::string ext;
    ledger::FileStat file_stat; // st as the stat cache records it
  };
  // Opens the file and checks what it is, its size, name, key and extension (r gets its size
  // and relative path); the error is the file's rejection.
  Result<OpenedFile> open_checked(const InputFile &file, FileResult &r);
  // The stat cache: r as the unchanged duplicate of this path's row, or nullopt to read the file.
  std::optional<FileResult> unchanged_duplicate(const OpenedFile &f, FileResult &r);
  // Reads and hashes the file and checks its media type (r gets its digest, media and content
  // types); the error is the file's rejection.
  Result<Digests> digest_and_type(const OpenedFile &f, FileResult &r);
  // Reserves the file's row, sends its bytes before the row's deadline and queues its confirm:
  // nullopt once the confirm is pending in m_tails, else r's final result.
  std::optional<FileResult> reserve_and_send(OpenedFile &f, const Digests &digests, FileResult &r);
  // What follows a file's transfer: the file checked unchanged, then its confirm queued (nullopt)
  // or the row failed (r's final result).
  class Renewal;
  struct TransferNote;
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
  // The reserve transaction and what its outcome means, for upload and reserve_direct: a
  // duplicate only once its object is verified in the store (own_duplicate is told of one
  // of this very path); nullopt when the row is reserved (res.record), else r's final result.
  // The run's part of a reserve request, and the file's from r (relative path, digest, size,
  // types); deadline, holder and stat are the caller's.
  [[nodiscard]] ledger::ReserveRequest reserve_request(const std::string &name, const FileResult &r) const;
  std::optional<FileResult> reserve_row(const ledger::ReserveRequest &req, FileResult &r,
                                        ledger::ReserveResult &res, int64_t &wall_at_reserve,
                                        int64_t &steady_at_reserve,
                                        const std::function<void(const ledger::FileRecord &)> &own_duplicate);
  // in_progress by this process's own upload of the same content: true after settling this
  // worker's pending confirms (and a short wait from the second time on), so the caller
  // reserves again; false when another process holds it or its deadline passed.
  bool wait_for_own(const ledger::FileRecord &uploading, int waits);
  // A stored file's confirm queued (behind a store flush that makes its object durable), or
  // t.done when it ended before.
  void begin_tail(Tail &t, const store::PutResult &put);
  // The oldest pending file's result, into m_done, once its activation finished (the confirm
  // committed; on a store that tags objects, the tag set and the task settled).
  void settle_front();
  // Settles the oldest pending files until at most `keep` are left.
  void settle_tails(size_t keep);
  // What a transfer learned besides its result. (Renewal: a transfer's monotonic bound,
  // renewed by its progress, defined in upload.cpp.)
  struct TransferNote {
    bool resume = false; // in: the row was resumed (its staged upload may hold parts)
    // in: a resumed row's cleanup due time before the revive (ledger::ReserveResult)
    std::optional<int64_t> cleanup_due_before;
    uint64_t resumed_bytes = 0; // out: the bytes of parts already stored, not sent again
    bool staged_kept = false;   // out: failed, its staged upload kept for a later resume
  };
  // The PUT (single or multipart); returns its etag and version id.
  Result<store::PutResult> transfer(int fd, const ledger::FileRecord &rec, const Digests &d, Renewal &renewal,
                                    TransferNote &note);
  // One PUT's request (made on the worker: the stamp reads the ledger's uuid).
  [[nodiscard]] store::PutRequest single_request(int fd, const ledger::FileRecord &rec,
                                                 Renewal &renewal) const;
  // A PUT (or completion) through `via`, a refused create-only one checked for our own earlier
  // attempt (thread-safe for the sender: it touches `via` alone).
  static Result<store::PutResult> ours_if_landed(store::ObjectStore &via, const ledger::FileRecord &rec,
                                                 Result<store::PutResult> put);
  // A multipart transfer: begins the staged upload (or resumes the row's), sends the parts
  // not already stored, completes it.
  Result<store::PutResult> transfer_staged(int fd, const ledger::FileRecord &rec, const Digests &d,
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
  // Marks the row failed (definite: nothing more can land; then compensates at once unless
  // `kept_until` is set: the staged upload stays for a later run to resume, its cleanup due
  // then).
  void fail(FileResult &r, const ledger::FileRecord &rec, const Error &e, bool definite,
            std::optional<int64_t> kept_until = std::nullopt);
  // The object's metadata: the user's, with lodge's stamp for the row over it.
  [[nodiscard]] store::Metadata object_metadata(const ledger::FileRecord &rec) const;
  // The presigned PUT of a reserved row's object, with the run's options.
  [[nodiscard]] Result<store::PresignedPut> presign(const ledger::FileRecord &rec, int64_t expires_s);
  // A direct staged upload's request (as begin_staged and complete_staged are given it).
  [[nodiscard]] store::StagedRequest direct_staged(const ledger::FileRecord &rec) const;
  // reserve --parts: the staged upload begun and its handle on the row (then a URL per part),
  // or the URLs of the one a replayed reservation began.
  [[nodiscard]] Result<std::vector<DirectPart>>
  presign_parts(const ledger::FileRecord &rec, uint64_t part_size, int64_t expires_s, bool begin);
  // confirm of a reservation with parts: lists and completes its staged upload. nullopt when
  // completed (the object is then checked as one PUT's), else r's final result.
  std::optional<FileResult> complete_parts(FileResult &r, const ledger::FileRecord &rec, uint64_t part_size,
                                           int64_t url_until);
  // digest_file through m_buf, the hashing pass shown on the run's Progress.
  Result<Digests> hash_file(int fd, uint64_t size, bool multipart);
  [[nodiscard]] std::atomic<uint64_t> *sent_counter() const {
    return m_s.progress ? &m_s.progress->sent : nullptr;
  }
  // Whether a would-be duplicate's object is in the store as its row says (the run's
  // listing, else HEAD: size, and the stamp where the store returns one): ok; NOT_FOUND (a missing object);
  // or the error that makes this file's outcome `failed` (the HEAD failed, or the object is another one).
  Status check_duplicate(const ledger::FileRecord &existing);

  UploaderLedger m_ledger;
  store::ObjectStore &m_store;
  UploadSettings m_s;
  const util::Clock &m_clock;
  MediaTypeDetector m_detector;
  std::string m_options_json; // m_s.options as the row records them (without the content type)
  std::vector<char> m_buf;    // the read buffer, reused for every file
  std::vector<std::unique_ptr<store::ObjectStore>> m_part_stores; // extra connections, kept
  std::deque<Tail> m_tails;                                       // the files whose confirms are pending
  std::vector<FileResult> m_done;                                 // what upload_next returns
  std::unique_ptr<store::ObjectStore> m_send_store;               // send_ahead's connection
  bool m_send_store_failed = false;                               // could not be opened: PUTs on the worker
  std::shared_ptr<ledger::UploadLedger> m_send_ledger; // the sender's renewals (sender thread only)
  bool m_send_ledger_failed = false;                   // none: a PUT in flight is not renewed
  std::unique_ptr<util::TaskThread> m_sender;          // runs the flights' PUTs, one at a time
  // The PUTs on the sender, oldest first: the one in the air and at most one queued behind it
  // (declared last: waited for first).
  std::deque<std::unique_ptr<Flight>> m_flights;
};

} // namespace lodge::ops
