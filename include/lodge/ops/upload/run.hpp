#pragma once
// An upload run, end to end: the input (paths, a --files-from list), the walk, a bounded queue, N
// workers each with its own ledger, store connection and Uploader (a batch of small files taken at
// once: Uploader::upload_batch), the in-progress policy (what another sender holds), cancellation,
// the tally, and the exit status. It reports through a RunObserver and never writes to a terminal
// itself: the observer gets fields (FileResult) and periodic snapshots (RunProgress), and renders them.

#include <atomic>
#include <cstdint>
#include <functional>
#include <istream>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload/concurrency.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <lodge/ops/upload/walk.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/backpressure.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <string>
#include <vector>

namespace lodge::ops {

// How a run is told to stop, and what it has in flight. A file is in flight from when a
// worker takes it up (begin_file) until its result is reported (end_file), whether being
// read, sent, or stored and waiting for its confirm. Once stopped, begin_file is false: no
// file begins, the ones in flight finish.
class RunCancel {
public:
  virtual ~RunCancel() = default;
  [[nodiscard]] virtual bool begin_file() = 0;
  virtual void end_file() = 0;
  [[nodiscard]] virtual bool stopped() const = 0;
  // Why the run stopped, as the caller knows it (for the report only).
  [[nodiscard]] virtual bool broken_pipe() const { return false; }
  [[nodiscard]] virtual bool aborted() const { return false; }
};

// The count and the stop as one atomic word (twice the files in flight, plus 1 once
// stopped), so a file's begin and the stop are ordered: the stop's count is exactly the
// files begun before it, and none begins after it. Lock-free, so stop() may be called from
// a signal handler.
class StopWord : public RunCancel {
public:
  [[nodiscard]] bool begin_file() override;
  void end_file() override;
  [[nodiscard]] bool stopped() const override;
  // Async-signal-safe. Returns the files in flight at the stop.
  int64_t stop() noexcept;

private:
  std::atomic<int64_t> m_word{0};
  static_assert(std::atomic<int64_t>::is_always_lock_free);
};

struct RunSpec {
  std::vector<std::string> paths;
  // --files-from: a stream the caller opened (stdin: the core never opens it), or a file
  // the run opens; paths one per line, or NUL-separated.
  std::istream *files_from_stream = nullptr;
  std::string files_from_file;
  bool null_separated = false;
  // Workers (requests in flight), or with !jobs_fixed where the level starts.
  int jobs = k_start_level;
  // false: nobody fixed the level (--jobs, config `jobs`, the AWS profile's
  // max_concurrent_requests), so the run adapts it (ConcurrencyController) from `jobs` up to
  // `max_jobs` (the open-file limit fitted, see open_files.hpp): a small file is one request,
  // a large one as many as the parts it sends at once.
  bool jobs_fixed = true;
  int max_jobs = k_max_level;
  UploadSettings settings;
  WalkSkips skips;
  // Files waiting for a worker at most (each holds its directory open).
  size_t queue_capacity = 256;
  // Killed runs' rows of this host failed first (ops::recover_abandoned); not in a dry run.
  bool recover = true;
  // How long a file whose content another sender holds is waited for at most before it is
  // reported in_progress (a direct reservation is never waited for).
  int64_t in_progress_wait_ms = 30'000;
  // Snapshots to the observer: after every result and every interval while nothing
  // finishes. 0: none (and no progress counters kept).
  int64_t progress_interval_ms = 0;
  // The walk's filter hook: false leaves the file out of the run, unreported.
  std::function<bool(const InputFile &)> include;
  // --include, --exclude, ... (match::Filter): what it leaves out is never opened, counted
  // (RunTally::excluded) and told to on_excluded. Null: everything is taken. Ages are
  // measured from the run's clock as the run starts.
  std::shared_ptr<const match::Filter> filter;
};

struct RunDeps {
  ledger::UploaderLedger &ledger; // this thread's connection: recovery, the in-progress retries
  // A ledger per worker (thread-safe to call): a ledger::LedgerPool's worker() (its calls
  // share the pool's connections), or a test's handle onto its one fake.
  std::function<std::shared_ptr<ledger::Ledger>()> worker_ledger;
  store::ObjectStore &store;
  std::function<std::unique_ptr<store::ObjectStore>()> open_store; // one per worker
  const config::Config &cfg;                                       // fail_killed_runs, graces
  const util::Clock &clock;
  RunCancel &cancel;
  // How the in-progress wait pauses between looks at the ledger (tests: advance a clock).
  std::function<void(int64_t ms)> pause;
  // What the stores' connections heard that says "fewer at once" (StoreOptions::backpressure):
  // an adaptive run backs off on it. Null: only the files' own failures say so.
  std::shared_ptr<const util::Backpressure> backpressure;
};

struct RunTally {
  int64_t files = 0, active = 0, duplicate = 0, replayed = 0, rejected = 0, failed = 0, skipped = 0;
  int64_t planned = 0;          // --dry-run: would be uploaded
  int64_t in_progress = 0;      // another sender holds the content
  int64_t storage_failures = 0; // failed: the store unreachable
  int64_t ledger_failures = 0;  // failed: the ledger locked past the timeout, or unusable
  uint64_t bytes = 0;
  int64_t excluded = 0; // left out by the filter (a directory pruned counts once); not in `files`
};

struct RunProgress {
  int64_t files_done = 0;   // results reported
  int64_t files_total = 0;  // files known so far
  bool total_final = false; // the walk has ended: files_total and bytes_total are final
  int64_t queued_done = 0;  // results of files that went through the queue
  int64_t files_left = 0;   // queued, not yet reported
  int64_t in_flight = 0;    // taken up by a worker, not yet reported
  uint64_t bytes_total = 0; // of the queued files, as the walk saw them
  uint64_t bytes_sent = 0;
  int hashing = 0;     // files being hashed now
  uint64_t hashed = 0; // bytes hashed so far of those
  uint64_t hashing_size = 0;
  int64_t elapsed_ms = 0;
};

// The requests an adaptive run kept in flight (a fixed run: its jobs, never moved).
struct RunConcurrency {
  bool adaptive = false;
  int level = 0; // at the end
  int peak = 0;
  int changes = 0;
};

struct RunReport {
  RunTally tally;
  RunConcurrency concurrency;
  int64_t elapsed_ms = 0;
  bool dry_run = false;
  bool interrupted = false; // the cancellation source stopped the run
  bool broken_pipe = false; // as the cancellation source says
  bool aborted = false;
};

// Every call comes from one thread at a time (the run serializes them), in order: at most
// one on_recovered, then on_result for each file (each followed by an on_progress when
// progress is on, and on_progress between them), on_excluded for each entry the filter
// leaves out and on_concurrency for each change of an adaptive run's level, then on_finish.
class RunObserver {
public:
  virtual ~RunObserver() = default;
  virtual void on_recovered(int64_t /*failed_rows*/) {}
  virtual void on_result(const FileResult & /*r*/) {}
  virtual void on_progress(const RunProgress & /*p*/) {}
  // `file.excluded` says why; a directory's path ends in '/'.
  virtual void on_excluded(const InputFile & /*file*/) {}
  virtual void on_concurrency(const LevelChange & /*c*/) {}
  virtual void on_finish(const RunReport & /*r*/) {}
};

// Runs the upload. Throws LodgeError for what stops the whole run before any file (a worker
// that cannot open its ledger or store, an unreadable --files-from file).
[[nodiscard]] RunReport run_upload(const RunSpec &spec, RunDeps &deps, RunObserver &obs);

// How a run ended, for its exit status (man/lodge.1 EXIT STATUS).
enum class RunExit {
  ok,
  items_failed,        // some file was rejected, failed, or in progress elsewhere
  ledger_unusable,     // nothing done, and every failure was the ledger's
  storage_unavailable, // every failure was the store being unreachable, nothing stored
  interrupted,         // a signal
  broken_pipe,         // stdout's reader went away
};
[[nodiscard]] RunExit run_exit(const RunReport &r);
// 141 is how a shell reports a process killed by SIGPIPE (128 + 13): a reader that went away.
inline constexpr int k_exit_broken_pipe = 141;
// The exit status of a run: from the Errc table for every RunExit but broken_pipe.
[[nodiscard]] int exit_status(const RunReport &r);

// Whether a failure is the ledger's (LEDGER_*), or the store's being unreachable.
[[nodiscard]] bool is_ledger_failure(const Error &e);

} // namespace lodge::ops
