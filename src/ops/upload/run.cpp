// An upload run (see lodge/ops/upload/run.hpp): the walk feeds a bounded queue, N workers take
// files from it, and what another sender holds is tried again after them. The queue and the
// adaptive gate are in run_queue.hpp; how a run is stopped and its exit status, run_exit.cpp.
#include "run_queue.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <lodge/failpoint.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/threads.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace lodge::ops {
namespace {

// The most bytes a --files-from list may hold between two paths (a path is at most
// PATH_MAX): an endless line or run of empty entries (/dev/zero) stops there.
constexpr size_t k_max_list_gap = 4096;

// Reads newline- or NUL-separated paths; `source` names the list in errors.
void read_list(std::istream &in, bool nul, const std::string &source,
               const std::function<bool(const std::string &)> &each) {
  std::streambuf *buf = in.rdbuf();
  const int sep = std::char_traits<char>::to_int_type(nul ? '\0' : '\n');
  std::string item;
  size_t gap = 0; // bytes since the last path
  int64_t entry = 1;
  while (true) {
    int c = buf->sbumpc();
    if (c != std::char_traits<char>::eof() && c != sep) {
      item.push_back(static_cast<char>(c));
    } else {
      if (!nul && !item.empty() && item.back() == '\r') item.pop_back();
      if (!item.empty() && !each(item)) return;
      if (!item.empty()) gap = 0;
      if (c == std::char_traits<char>::eof()) return;
      item.clear();
      ++entry;
    }
    if (++gap > k_max_list_gap)
      throw LodgeError(Errc::usage, "--files-from '" + source + "': more than " +
                                        std::to_string(k_max_list_gap) + " bytes without a path, at entry " +
                                        std::to_string(entry) + ": not a list of paths");
  }
}

void count(RunTally &t, const FileResult &r) {
  ++t.files;
  switch (r.outcome) {
  case UploadOutcome::active:
    ++t.active;
    t.bytes += r.size;
    break;
  case UploadOutcome::duplicate:
    ++t.duplicate;
    break;
  case UploadOutcome::replayed:
    ++t.replayed;
    break;
  case UploadOutcome::rejected:
    ++t.rejected;
    break;
  case UploadOutcome::failed:
    ++t.failed;
    if (r.error && store::is_unreachable(*r.error)) ++t.storage_failures;
    if (r.error && is_ledger_failure(*r.error)) ++t.ledger_failures;
    break;
  case UploadOutcome::skipped:
    ++t.skipped;
    break;
  case UploadOutcome::planned:
    ++t.planned;
    t.bytes += r.size;
    break;
  case UploadOutcome::in_progress:
    ++t.in_progress;
    break;
  }
}

// An IN_PROGRESS answer: the content is held by another sender.
bool held_elsewhere(const FileResult &r) {
  return r.error && r.error->code == Errc::in_progress;
}

// A failed file that says the store or the ledger had too much at once (what an adaptive run
// backs off on), rather than something about the file.
bool overload_failure(const Error &e) {
  switch (e.code) {
  case Errc::storage_unavailable:
  case Errc::storage_error:
  case Errc::deadline_exceeded:
  case Errc::ledger_locked:
  case Errc::ledger_unavailable:
    return true;
  default:
    return false;
  }
}

class Run {
public:
  Run(const RunSpec &spec, RunDeps &deps, RunObserver &obs)
      : m_spec(spec), m_deps(deps), m_obs(obs), m_settings(spec.settings), m_queue(spec.queue_capacity),
        m_started(util::steady_ms()), m_skips(spec.skips),
        m_control({spec.jobs, spec.max_jobs, spec.jobs_fixed, ConcurrencyLimits{}.window_ms}) {
    m_skips.filter = {spec.filter.get(), deps.clock.now_ms()}; // ages from the run's start
    // An adaptive run counts the bytes sent for its throughput, watched or not.
    if (m_spec.progress_interval_ms > 0 || !spec.jobs_fixed)
      m_settings.progress = std::make_shared<Progress>();
    if (!spec.jobs_fixed) m_gate = std::make_unique<Gate>(m_control.level());
    if (!m_settings.id_blocks) m_settings.id_blocks = std::make_shared<IdBlocks>();
    // Each worker's next file is hashed and reserved while its PUT is in flight; that PUT's
    // bytes renew its row through a ledger of the sender's own.
    m_settings.send_ahead = true;
    m_settings.open_ledger = [open = deps.worker_ledger]() -> std::shared_ptr<ledger::UploadLedger> {
      return open();
    };
  }

  RunReport run() {
    walk_and_work();
    retry_held();
    stop_ticker();
    RunReport rep;
    rep.tally = m_tally;
    rep.elapsed_ms = util::steady_ms() - m_started;
    rep.dry_run = m_settings.dry_run;
    rep.interrupted = m_deps.cancel.stopped();
    rep.broken_pipe = rep.interrupted && m_deps.cancel.broken_pipe();
    rep.aborted = rep.interrupted && m_deps.cancel.aborted();
    {
      std::lock_guard lock(m_out);
      rep.concurrency = {!m_control.fixed(), m_control.level(), m_control.peak(), m_level_changes};
    }
    m_obs.on_finish(rep);
    return rep;
  }

  ~Run() { stop_ticker(); }
  Run(const Run &) = delete;
  Run &operator=(const Run &) = delete;

private:
  void walk_and_work();
  // Fired once the walk of the paths given has listed them (or filled the queue), before
  // any file is opened; then the workers start.
  void start_workers_once() {
    if (m_queue.started()) return;
    (void)failpoint::hit("upload.after_walk");
    m_queue.start();
  }
  void work(int i);
  // A worker's connections and uploader, opened once it is first needed.
  struct WorkerKit {
    std::shared_ptr<ledger::Ledger> ledger;
    std::unique_ptr<store::ObjectStore> store;
    std::unique_ptr<Uploader> up;
  };
  // nullopt when they could not be opened: the run stops (a fixed run, or fewer workers than
  // it starts with), or this worker ends and the adaptive bound comes down to those open.
  std::optional<WorkerKit> open_worker(int i);
  // Takes `files` up (one, or a batch: Uploader::upload_batch) and reports their results (and
  // earlier files' that finished meanwhile). false: the run is stopped, and nothing new begins.
  bool send(Uploader &up, std::vector<InputFile> &files);
  // The slots a file takes in an adaptive run: 1, or the parts a large file sends at once.
  [[nodiscard]] int weight(const InputFile &file) const;
  // Feeds the controller (m_out held) and applies a change of level.
  void adapt();
  void apply(const LevelChange &c);
  bool feed(const std::string &path);
  void retry_held();
  [[nodiscard]] FileResult retry_one(Uploader &up, const InputFile &file, int64_t until_ms);
  void report(const FileResult &r, bool from_queue);
  void report_excluded(const InputFile &file);
  [[nodiscard]] RunProgress snapshot() const;
  void start_ticker();
  void stop_ticker();

  const RunSpec &m_spec;
  RunDeps &m_deps;
  RunObserver &m_obs;
  UploadSettings m_settings;
  WorkQueue m_queue;
  int64_t m_started;
  WalkSkips m_skips; // the spec's, with its filter

  std::mutex m_out; // the tally and every observer call
  RunTally m_tally;
  int64_t m_queued_done = 0;
  std::atomic<int64_t> m_queued{0};
  std::atomic<uint64_t> m_queued_bytes{0};
  std::atomic<int64_t> m_in_flight{0};
  std::atomic<bool> m_walked{false};

  std::mutex m_setup_mutex;
  std::optional<LodgeError> m_setup_error;
  std::mutex m_retry_mutex;
  std::vector<InputFile> m_retry_later;

  // An adaptive run's level (under m_out) and the slots it gates (null: fixed).
  ConcurrencyController m_control;
  std::unique_ptr<Gate> m_gate;
  int m_level_changes = 0;
  uint64_t m_files_throttled = 0, m_files_failed = 0; // what the files' own failures said
  uint64_t m_ended_unstored = 0;                      // files reported, other than active
  std::atomic<int> m_workers_open{0};
  // The workers sending at once (a fixed run's jobs, an adaptive run's level): what a batch
  // leaves of the queue for the others is their share.
  std::atomic<int> m_share_among{1};

  std::mutex m_tick_mutex;
  std::condition_variable m_tick_cv;
  bool m_tick_stop = false;
  std::thread m_ticker;
};

RunProgress Run::snapshot() const {
  RunProgress p;
  p.files_done = m_tally.files;
  // Known inputs: every file reported that never went through the queue (refused by the
  // walk) plus every queued one. While the walk runs that is a lower bound.
  p.files_total = m_queued.load() + (m_tally.files - m_queued_done);
  p.total_final = m_walked.load();
  p.queued_done = m_queued_done;
  p.files_left = m_queued.load() - m_queued_done;
  p.in_flight = m_in_flight.load();
  p.bytes_total = m_queued_bytes.load();
  p.elapsed_ms = util::steady_ms() - m_started;
  if (const auto &pg = m_settings.progress) {
    p.bytes_sent = pg->sent.load(std::memory_order_relaxed);
    p.hashing = pg->hashing.load(std::memory_order_relaxed);
    p.hashed = pg->hashed.load(std::memory_order_relaxed);
    p.hashing_size = pg->hashing_size.load(std::memory_order_relaxed);
  }
  return p;
}

void Run::report(const FileResult &r, bool from_queue) {
  std::lock_guard lock(m_out);
  count(m_tally, r);
  if (from_queue) {
    ++m_queued_done;
    --m_in_flight;
    m_deps.cancel.end_file();
  }
  if (from_queue && r.outcome != UploadOutcome::active) ++m_ended_unstored;
  if (r.outcome == UploadOutcome::failed && r.error) {
    if (r.error->code == Errc::throttled)
      ++m_files_throttled;
    else if (overload_failure(*r.error))
      ++m_files_failed;
  }
  m_obs.on_result(r);
  if (m_spec.progress_interval_ms > 0) m_obs.on_progress(snapshot());
  adapt();
}

void Run::adapt() {
  if (!m_gate) return;
  ConcurrencySample s;
  s.now_ms = util::steady_ms();
  // A stored file counts as it is stored (its result waits for its confirm's batch); every
  // other one as it is reported.
  s.files = m_settings.progress->stored.load(std::memory_order_relaxed) + m_ended_unstored;
  s.bytes = m_settings.progress->sent.load(std::memory_order_relaxed);
  s.throttled = m_files_throttled;
  s.errors = m_files_failed;
  s.busy = m_gate->take_peak();
  if (const auto &bp = m_deps.backpressure) {
    s.throttled += bp->throttled.load(std::memory_order_relaxed);
    s.errors += bp->failed.load(std::memory_order_relaxed);
  }
  if (auto c = m_control.observe(s)) apply(*c);
}

void Run::apply(const LevelChange &c) {
  ++m_level_changes;
  m_share_among = c.to;
  m_gate->set_level(c.to);
  m_obs.on_concurrency(c);
}

int Run::weight(const InputFile &file) const {
  if (file.size <= m_settings.multipart_threshold || m_settings.part_size == 0) return 1;
  const uint64_t parts = (file.size + m_settings.part_size - 1) / m_settings.part_size;
  return static_cast<int>(
      std::clamp<uint64_t>(parts, 1, static_cast<uint64_t>(std::max(m_settings.part_concurrency, 1))));
}

void Run::report_excluded(const InputFile &file) {
  std::lock_guard lock(m_out);
  ++m_tally.excluded;
  m_obs.on_excluded(file);
}

// Redraws while nothing finishes (a big file being hashed or sent).
void Run::start_ticker() {
  if (m_spec.progress_interval_ms <= 0) return;
  m_ticker = std::thread([this] {
    std::unique_lock lock(m_tick_mutex);
    while (!m_tick_cv.wait_for(lock, std::chrono::milliseconds(m_spec.progress_interval_ms),
                               [&] { return m_tick_stop; })) {
      lock.unlock();
      {
        std::lock_guard out(m_out);
        m_obs.on_progress(snapshot());
      }
      lock.lock();
    }
  });
}

void Run::stop_ticker() {
  if (!m_ticker.joinable()) return;
  {
    std::lock_guard lock(m_tick_mutex);
    m_tick_stop = true;
  }
  m_tick_cv.notify_all();
  m_ticker.join();
}

std::optional<Run::WorkerKit> Run::open_worker(int i) {
  WorkerKit k;
  try {
    k.ledger = m_deps.worker_ledger();
    k.store = m_deps.open_store();
    auto ws = m_settings;
    ws.worker_id += "-" + std::to_string(i);
    k.up = std::make_unique<Uploader>(*k.ledger, *k.store, ws, m_deps.clock);
  } catch (const LodgeError &e) {
    if (const int open = m_workers_open.load(); !m_spec.jobs_fixed && open > 0) {
      // One worker more than the ledger or the store lets this process connect (a server's
      // connection limit): the run goes on with the workers it has.
      std::lock_guard lock(m_out);
      if (auto c = m_control.lower_max(open, "a worker could not connect: " + e.error().message)) apply(*c);
      return std::nullopt;
    }
    std::lock_guard lock(m_setup_mutex);
    if (!m_setup_error) m_setup_error = e;
    m_queue.close();
    m_queue.clear();
    if (m_gate) m_gate->close();
    return std::nullopt;
  }
  ++m_workers_open;
  util::log::debug("upload: worker " + std::to_string(i) + " connected to the ledger and the store");
  return k;
}

bool Run::send(Uploader &up, std::vector<InputFile> &files) {
  // In flight from here until reported (a pending confirm included); none begins once
  // the run is stopped.
  size_t began = 0;
  while (began < files.size() && m_deps.cancel.begin_file()) {
    ++m_in_flight;
    ++began;
  }
  const bool stopped = began < files.size();
  if (stopped) {
    m_queue.clear();
    files.resize(began);
    if (files.empty()) return false;
  }
  auto results = files.size() == 1 ? up.upload_next(files.front()) : up.upload_batch(files);
  for (auto &r : results) {
    if (!m_settings.idempotency_key && held_elsewhere(r)) {
      // The content of a file another worker or process is sending (empty files, copies
      // in one tree): tried again once the workers are done. Only a reserve answers so:
      // one of these files', never a pending one's. Not in flight while it waits: a stop
      // meanwhile means it is not tried again.
      auto it =
          std::find_if(files.begin(), files.end(), [&](const InputFile &f) { return f.path == r.file; });
      std::lock_guard lock(m_retry_mutex);
      m_retry_later.push_back(it != files.end() ? *it : files.front());
      --m_in_flight;
      m_deps.cancel.end_file();
      continue;
    }
    if (held_elsewhere(r)) r.outcome = UploadOutcome::in_progress; // its idempotency key's upload
    report(r, true);
  }
  return !stopped;
}

void Run::work(int i) {
  std::optional<WorkerKit> kit;
  int held = 0, busy = 0; // this worker's slots, and those busy with a file (adaptive)
  struct GiveBack {
    Gate *gate;
    int &held, &busy;
    ~GiveBack() {
      if (!gate) return;
      gate->set_busy(busy, 0);
      gate->release(held);
    }
  } give_back{m_gate.get(), held, busy};
  // Pipelined: a file's confirm commits later, with other files' transitions, and the file
  // is reported once it has (finish() ends the pending ones).
  auto settle = [&] {
    if (m_gate) m_gate->set_busy(busy, 0); // waiting for work from here
    if (!kit) return;
    for (auto &r : kit->up->finish())
      report(r, true);
  };
  for (;;) {
    // Adaptive: a slot before a file, so a worker over the level waits holding no file, and
    // with nothing of its own in flight (its PUT landed, its confirms settled).
    if (m_gate && !m_gate->try_hold(held, 1)) {
      settle();
      if (!m_gate->hold(held, 1, true)) break;
    }
    auto file = m_queue.pop(settle);
    if (!file) {
      if (m_gate) m_gate->close(); // drained: the workers waiting for a slot end
      break;
    }
    // Opened once it has a file: a run connects only the workers its level and its files
    // use (--jobs 256 for 8 files opens 8 ledger connections and 8 to the store, not 256).
    if (!kit && !(kit = open_worker(i))) {
      m_queue.put_back(std::move(*file));
      return;
    }
    if (m_gate) {
      // A large file takes a slot per part it sends at once.
      if (const int w = weight(*file); w > 1 && !m_gate->try_hold(held, w)) {
        settle();
        (void)m_gate->hold(held, w, false);
      }
      m_gate->set_busy(busy, held);
    }
    std::vector<InputFile> batch{std::move(*file)};
    // Small files waiting behind it go with it, their reserves asked together: a fair share
    // of what is queued, so the other workers still get theirs.
    if (const size_t limit = kit->up->batch_limit(); limit > 1 && kit->up->batch_fits(batch.front(), 0)) {
      uint64_t bytes = batch.front().size;
      m_queue.pop_more(batch, limit, m_share_among.load(), [&](const InputFile &f) {
        if (!kit->up->batch_fits(f, bytes)) return false;
        bytes += f.size;
        return true;
      });
    }
    if (!send(*kit->up, batch)) break;
  }
  settle();
}

bool Run::feed(const std::string &p) {
  if (m_deps.cancel.stopped()) return false;
  bool go_on = true;
  auto start_workers = [this] { start_workers_once(); };
  walk_inputs({p}, m_settings.follow_symlinks, m_skips,
              [&](const InputFile &file, const std::optional<Error> &err) {
                if (m_deps.cancel.stopped()) return go_on = false;
                if (!file.excluded.empty()) {
                  report_excluded(file);
                  return true;
                }
                if (!file.skipped.empty() || err) {
                  FileResult r;
                  r.file = file.path;
                  r.outcome = err ? UploadOutcome::rejected : UploadOutcome::skipped;
                  if (err)
                    r.error = *err;
                  else
                    r.reason = file.skipped;
                  report(r, false);
                  return true;
                }
                if (m_spec.include && !m_spec.include(file)) return true;
                ++m_queued;
                m_queued_bytes += file.size;
                return go_on = m_queue.push(file, start_workers);
              });
  return go_on;
}

void Run::walk_and_work() {
  // The --files-from file is opened before anything is sent: one that cannot be read stops
  // the run at once (a directory, which would read as an empty list, too).
  std::ifstream list_file;
  if (!m_spec.files_from_stream && !m_spec.files_from_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(m_spec.files_from_file, ec))
      throw LodgeError(Errc::usage,
                       "--files-from '" + m_spec.files_from_file + "': is a directory, not a list");
    list_file.open(m_spec.files_from_file, std::ios::binary);
    if (!list_file)
      throw LodgeError(Errc::usage,
                       "--files-from '" + m_spec.files_from_file + "': cannot read: " + std::strerror(errno));
  }
  // A worker that throws stops the run (nothing new starts); join() rethrows it.
  util::ThreadGroup workers([this] {
    m_queue.close();
    m_queue.clear();
    if (m_gate) m_gate->close();
  });
  // Runs before the group's destructor on every way out, so no worker is left waiting on
  // the queue (or for a slot) while the group joins it.
  struct CloseOnExit {
    WorkQueue &q;
    Gate *gate;
    ~CloseOnExit() {
      q.close();
      if (gate) gate->close();
    }
  } close_on_exit{m_queue, m_gate.get()};
  start_ticker();
  // Adaptive: a thread for every slot the level may reach, each waiting for a slot before it
  // opens its connections.
  const int threads = m_spec.jobs_fixed ? m_spec.jobs : m_control.max();
  m_share_among = m_spec.jobs_fixed ? m_spec.jobs : m_control.level();
  for (int i = 0; i < threads; ++i)
    workers.spawn([this, i] { work(i); });
  bool fed = true;
  for (const auto &p : m_spec.paths)
    if (!(fed = feed(p))) break;
  start_workers_once();
  auto each = [this](const std::string &p) { return feed(p); };
  // A list that fails part way (too long an entry) stops the feed; what was fed goes on.
  if (fed && m_spec.files_from_stream)
    read_list(*m_spec.files_from_stream, m_spec.null_separated, "-", each);
  else if (fed && list_file.is_open())
    read_list(list_file, m_spec.null_separated, m_spec.files_from_file, each);
  m_walked = true;
  m_queue.close();
  workers.join();
  if (m_setup_error) throw *m_setup_error;
}

// The files whose content another sender held when a worker asked: asked again one by one,
// each waiting for a live sender (a duplicate once it is ACTIVE, a new upload if it failed)
// but never past the run's in-progress bound, and never for a direct reservation.
void Run::retry_held() {
  if (m_retry_later.empty()) return;
  Uploader up(m_deps.ledger, m_deps.store, m_settings, m_deps.clock);
  const int64_t until_ms = m_deps.clock.now_ms() + m_spec.in_progress_wait_ms;
  for (const auto &file : m_retry_later) {
    if (!m_deps.cancel.begin_file()) break;
    ++m_in_flight;
    report(retry_one(up, file, until_ms), true);
  }
}

FileResult Run::retry_one(Uploader &up, const InputFile &file, int64_t until_ms) {
  auto r = up.upload(file);
  for (int round = 0;
       round < 5 && !m_settings.dry_run && held_elsewhere(r) && r.id && !m_deps.cancel.stopped(); ++round) {
    auto w = wait_for_holder(
        m_deps.ledger, *r.id, m_deps.cfg, m_settings.max_retries, m_deps.clock, until_ms,
        [this] { return m_deps.cancel.stopped(); }, m_deps.pause);
    if (!w.settled) {
      r.error = Error(Errc::in_progress, w.held_by);
      break;
    }
    r = up.upload(file);
  }
  if (held_elsewhere(r)) r.outcome = UploadOutcome::in_progress;
  return r;
}

} // namespace

RunReport run_upload(const RunSpec &spec, RunDeps &deps, RunObserver &obs) {
  if (spec.recover && !spec.settings.dry_run) {
    // A re-run after a killed run on this host: that run's rows fail now (as repair would
    // at their deadline), so its files go again at once instead of IN_PROGRESS. Only when
    // the store's id marker shows this ledger's history is the store's (as repair checks
    // first): a restored ledger's UPLOADING rows may be ACTIVE in the other.
    auto store_agrees = [&] {
      auto d = check_divergence(deps.ledger, deps.store, deps.clock);
      return d && !d.value();
    };
    auto a = recover_abandoned(deps.ledger, deps.cfg, spec.settings.max_retries, deps.clock, store_agrees);
    if (a.failed > 0) obs.on_recovered(a.failed);
  }
  Run run(spec, deps, obs);
  return run.run();
}

} // namespace lodge::ops
