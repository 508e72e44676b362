// lodge upload, lodge list.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <iostream>
#include <lodge/failpoint.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/upload.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/threads.hpp>
#include <lodge/util/units.hpp>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace lodge::cli {
namespace {

struct UploadOptions {
  std::vector<std::string> paths;
  std::string files_from;
  bool null_separated = false;
  std::string policy = "default";
  int jobs = 0;
  std::string idempotency_key;
  std::string prefix;
  bool follow_symlinks = false;
  bool no_progress = false;
  bool checksum = false;
  bool replace = false;
  bool dry_run = false;
  // The object options, as given (merged over the policy's in the command).
  std::string content_type, storage_class, sse, sse_kms_key_id, cache_control;
  std::vector<std::string> metadata, tags;
};

// The policy's object options with the flags over them, checked before anything is
// recorded: their shape here, what the store can keep by the store.
store::ObjectOptions object_options(const UploadOptions &o, const config::Policy &p) {
  store::ObjectOptions flags;
  flags.content_type = o.content_type;
  flags.storage_class = o.storage_class;
  flags.sse = o.sse;
  flags.sse_kms_key_id = o.sse_kms_key_id;
  flags.cache_control = o.cache_control;
  for (const auto &m : o.metadata) {
    auto kv = store::parse_assignment(m, "--metadata");
    if (!kv) throw LodgeError(kv.error());
    flags.metadata[util::to_lower(kv->first)] = kv->second;
  }
  for (const auto &tag : o.tags) {
    auto kv = store::parse_assignment(tag, "--tag");
    if (!kv) throw LodgeError(kv.error());
    flags.tags[kv->first] = kv->second;
  }
  store::ObjectOptions out = p.object;
  out.merge(flags);
  if (auto v = store::validate(out, "upload"); !v) throw LodgeError(v.error());
  return out;
}

struct Tally {
  int64_t files = 0, active = 0, duplicate = 0, replayed = 0, rejected = 0, failed = 0, skipped = 0;
  int64_t planned = 0; // --dry-run: would be uploaded
  int64_t storage_failures = 0;
  int64_t ledger_failures = 0; // the ledger was locked past the timeout, or unusable
  int64_t queued_done = 0;     // results of files that went through the queue
  uint64_t bytes = 0;
};

// A bounded queue between the input walker and the workers. Workers take nothing until
// start(): the walk of the command line's paths lists first (or fills the queue), so the
// upload.after_walk failpoint sits at one well-defined point.
class WorkQueue {
public:
  explicit WorkQueue(size_t cap) : m_cap(cap) {}
  // Starts the workers if the queue is full and they have not started yet: a walk larger
  // than the queue must not wait for itself.
  bool push(ops::InputFile item, const std::function<void()> &start_when_full) {
    bool start_now = false;
    {
      std::lock_guard lock(m_mutex);
      start_now = !m_started && m_items.size() >= m_cap;
    }
    if (start_now) start_when_full();
    std::unique_lock lock(m_mutex);
    m_not_full.wait(lock, [&] { return m_items.size() < m_cap || m_closed; });
    if (m_closed) return false;
    m_items.push_back(std::move(item));
    m_not_empty.notify_one();
    return true;
  }
  // `idle` runs (unlocked) before a wait for the next item: a worker settles its pending
  // confirm then, instead of holding it until more input comes (`--files-from -` fed
  // slowly: a stored file must not wait past its deadline for a partner).
  std::optional<ops::InputFile> pop(const std::function<void()> &idle = {}) {
    std::unique_lock lock(m_mutex);
    if (idle && !m_closed && !(m_started && !m_items.empty())) {
      lock.unlock();
      idle();
      lock.lock();
    }
    m_not_empty.wait(lock, [&] { return (m_started && !m_items.empty()) || m_closed; });
    if (m_items.empty()) return std::nullopt;
    auto v = std::move(m_items.front());
    m_items.pop_front();
    m_not_full.notify_one();
    return v;
  }
  void start() {
    std::lock_guard lock(m_mutex);
    m_started = true;
    m_not_empty.notify_all();
  }
  [[nodiscard]] bool started() {
    std::lock_guard lock(m_mutex);
    return m_started;
  }
  void close() {
    std::lock_guard lock(m_mutex);
    m_closed = true;
    m_not_empty.notify_all();
    m_not_full.notify_all();
  }
  // Drops what is waiting (after an interrupt: nothing new starts).
  void clear() {
    std::lock_guard lock(m_mutex);
    m_items.clear();
    m_not_full.notify_all();
  }

private:
  size_t m_cap;
  std::mutex m_mutex;
  std::condition_variable m_not_empty, m_not_full;
  std::deque<ops::InputFile> m_items;
  bool m_started = false;
  bool m_closed = false;
};

// Each directory with a file waiting in the queue stays open (files are opened relative to
// it): allow as many descriptors as the hard limit does, and queue at most a quarter of
// them (measured: 1024 queued files in 1024 directories hold 1050 descriptors).
size_t queue_capacity_for_open_files() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 256;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return 1024;
  return std::clamp<size_t>(static_cast<size_t>(rl.rlim_cur / 4), 16, 1024);
}

nlohmann::json result_json(const ops::FileResult &r) {
  nlohmann::json j;
  j["file"] = r.file;
  j["path"] = r.relative_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.relative_path);
  j["outcome"] = ops::to_string(r.outcome);
  j["id"] = r.id ? nlohmann::json(*r.id) : nlohmann::json(nullptr);
  j["object_key"] = r.object_key.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.object_key);
  j["sha256"] = r.sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.sha256);
  j["size"] = r.size;
  j["media_type"] = r.media_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.media_type);
  j["content_type"] = r.content_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.content_type);
  if (r.outcome == ops::UploadOutcome::duplicate) {
    j["unchanged"] = r.unchanged;
    j["shares"] = r.shares ? nlohmann::json(*r.shares) : nlohmann::json(nullptr);
  }
  if (r.error && r.outcome != ops::UploadOutcome::duplicate)
    j["error"] = {{"code", r.error->name()}, {"message", r.error->message}};
  else
    j["error"] = nullptr;
  if (r.outcome == ops::UploadOutcome::skipped) j["reason"] = r.reason;
  return j;
}

std::string result_line(const ops::FileResult &r) {
  std::string name = util::escape_for_terminal(r.file);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-9s ", ops::to_string(r.outcome));
  std::string s = buf;
  switch (r.outcome) {
  case ops::UploadOutcome::active:
  case ops::UploadOutcome::replayed:
    s += "#" + std::to_string(*r.id) + " " + util::escape_for_terminal(r.object_key) + " " + name;
    break;
  case ops::UploadOutcome::duplicate:
    s += "#" + std::to_string(*r.id) + " " + name +
         (r.unchanged ? " (unchanged since it was stored)"
          : r.shares  ? " (same content as #" + std::to_string(*r.shares) + ": stored once, shared)"
                      : " (same content as #" + std::to_string(*r.id) + ")");
    break;
  case ops::UploadOutcome::planned:
    s += name + " (would upload " + util::plural(static_cast<int64_t>(r.size), "byte") + " as " +
         util::escape_for_terminal(r.content_type) + ")";
    break;
  default:
    s += name + ": " + std::string(r.error ? r.error->name() : "?") + ": " +
         (r.error ? util::escape_for_terminal(r.error->message) : "");
  }
  return s;
}

// One idempotency key names one upload: every file of a directory would replay the first.
void check_one_input(const UploadOptions &o) {
  if (o.paths.size() != 1 || !o.files_from.empty())
    throw LodgeError(Errc::usage, "upload: --idempotency-key takes exactly one file (got " +
                                      std::string(o.files_from.empty() ? "several paths" : "--files-from") +
                                      ")");
  struct stat st {};
  if (::stat(o.paths[0].c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw LodgeError(Errc::usage, "upload: --idempotency-key takes exactly one file, and " +
                                      util::escape_for_terminal(o.paths[0]) + " is a directory");
}

bool is_storage_failure(const ops::FileResult &r) {
  return r.outcome == ops::UploadOutcome::failed && r.error && store::is_unreachable(*r.error);
}

// Reads newline- or NUL-separated paths.
void read_list(std::istream &in, bool nul, const std::function<bool(const std::string &)> &each) {
  std::string item;
  while (std::getline(in, item, nul ? '\0' : '\n')) {
    if (!nul && !item.empty() && item.back() == '\r') item.pop_back();
    if (item.empty()) continue;
    if (!each(item)) return;
  }
}
} // namespace

Command add_upload(CLI::App &app) {
  auto o = std::make_shared<UploadOptions>();
  auto *sub = app.add_subcommand("upload", "Upload files and directories (recursively) to the store");
  sub->add_option("paths", o->paths, "Files and directories to upload");
  sub->add_option("--files-from", o->files_from, "Read paths from FILE ('-' for stdin), one per line");
  sub->add_flag("-0,--null", o->null_separated, "Paths in --files-from are NUL-separated");
  sub->add_option("--policy", o->policy, "Policy to apply (default: default)");
  sub->add_option("-j,--jobs", o->jobs, "Parallel uploads (default: config jobs, 8)")
      ->check(CLI::Range(1, 256));
  sub->add_option("--idempotency-key", o->idempotency_key,
                  "Make a retry of this single upload return the first result");
  sub->add_option("--prefix", o->prefix,
                  "Put this run's files under <root>/<owner>/PREFIX/ (segments of A-Z a-z 0-9 . _ -, "
                  "'/' between them), e.g. builds/42");
  sub->add_flag("--follow-symlinks", o->follow_symlinks,
                "Follow symbolic links (never by default); a link back up the tree is skipped");
  sub->add_flag("--no-progress", o->no_progress, "Never show a progress line");
  sub->add_flag("--checksum", o->checksum,
                "Read and hash every file, even one the ledger's stat cache knows unchanged");
  sub->add_flag("--replace", o->replace,
                "A changed file retires the older file at its path once the new one is active (the old "
                "object is removed by sweep after the grace)");
  sub->add_flag("-n,--dry-run", o->dry_run,
                "Validate and hash (or use the stat cache), say what would happen, write nothing");
  sub->add_option(
      "--content-type", o->content_type,
      "Store every object with this Content-Type (default: from the extension via /etc/mime.types "
      "when the content agrees, else detected)");
  sub->add_option("--metadata", o->metadata, "User metadata NAME=VALUE on every object (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--tag", o->tags,
                  "Object tag KEY=VALUE (repeatable; S3 object tagging, Azure blob index tags)")
      ->allow_extra_args(false);
  sub->add_option(
      "--storage-class", o->storage_class,
      "S3 storage class (STANDARD_IA, GLACIER_IR, ...) or Azure access tier (Hot, Cool, Cold, Archive)");
  sub->add_option("--sse", o->sse, "S3 server-side encryption: AES256 or aws:kms");
  sub->add_option("--sse-kms-key-id", o->sse_kms_key_id, "The KMS key for --sse aws:kms (id, alias or ARN)");
  sub->add_option("--cache-control", o->cache_control, "Cache-Control of every object, e.g. 'max-age=3600'");
  return {
      sub, [o](Context &ctx) {
        const auto &cfg = ctx.cfg();
        if (o->paths.empty() && o->files_from.empty())
          throw LodgeError(Errc::usage, "upload: give files or directories, or --files-from FILE");
        if (!o->idempotency_key.empty()) check_one_input(*o);
        if (!o->prefix.empty())
          if (auto why = config::run_prefix_problem(o->prefix))
            throw LodgeError(Errc::usage,
                             "upload: --prefix '" + util::escape_for_terminal(o->prefix) + "': " + *why);
        ops::UploadSettings s;
        s.id_blocks = std::make_shared<ops::IdBlocks>(); // one per run, shared by the workers
        s.policy = cfg.policy(o->policy);
        s.run_prefix = o->prefix;
        s.owner = ctx.owner();
        if (!o->idempotency_key.empty()) s.idempotency_key = o->idempotency_key;
        s.multipart_threshold = cfg.multipart_threshold;
        s.part_size = cfg.part_size;
        s.part_concurrency = cfg.part_concurrency;
        s.open_store = [&ctx] { return ctx.open_store(); };
        s.max_retries = cfg.sweep.max_retries;
        s.lease_ms = cfg.sweep.lease_ms;
        s.cleanup = {ops::grace_for(cfg, o->policy), cfg.sweep.backoff_base_ms, cfg.sweep.backoff_max_ms};
        s.follow_symlinks = o->follow_symlinks;
        s.worker_id = "upload-" + std::to_string(::getpid());
        s.options = object_options(*o, s.policy);
        s.checksum = o->checksum;
        s.replace = o->replace;
        s.dry_run = o->dry_run;
        int jobs = o->jobs > 0 ? o->jobs : cfg.jobs;
        // The store first: a bad store URL leaves nothing behind, and a file:// root
        // exists before the walk, which must skip it.
        auto store = ctx.open_store();
        if (auto a = store->accepts(s.options); !a) throw LodgeError(a.error());
        (void)ctx.ledger(); // migrate once, before the workers race to
        auto pool = ctx.ledger_pool();
        // A re-run after a killed run on this host: that run's rows fail now (as repair
        // would at their deadline), so its files go again at once instead of IN_PROGRESS.
        // Only when the store's id marker shows this ledger's history is the store's (as
        // repair checks first): a restored ledger's UPLOADING rows may be ACTIVE in the other.
        auto store_agrees = [&] {
          auto d = ops::check_divergence(ctx.ledger(), *store, util::system_clock());
          return d && !d.value();
        };
        // (Not in a dry run: it writes.)
        if (auto a = o->dry_run ? ops::RecoverSummary{}
                                : ops::recover_abandoned(ctx.ledger(), cfg, cfg.sweep.max_retries,
                                                         util::system_clock(), store_agrees);
            a.failed > 0 && !ctx.g.quiet)
          std::fprintf(stderr, "lodge: %lld upload%s left by a killed run failed, to be sent again\n",
                       static_cast<long long>(a.failed), a.failed == 1 ? "" : "s");

        install_interrupt_handlers(!ctx.g.quiet);
        bool progress = ctx.stderr_tty && !ctx.g.json && !ctx.g.quiet && !o->no_progress;
        if (progress) s.progress = std::make_shared<ops::Progress>();
        std::mutex out_mutex;
        Tally t;
        int64_t started = util::steady_ms();
        std::atomic<int64_t> queued{0};
        std::atomic<uint64_t> queued_bytes{0};
        std::atomic<bool> walked{false};
        // Called with out_mutex held: by each report, and by the ticker below between them.
        auto show_progress = [&] {
          const ops::Progress &pg = *s.progress;
          int64_t ms = util::steady_ms() - started;
          double secs = static_cast<double>(ms) / 1000.0;
          uint64_t sent = pg.sent.load(std::memory_order_relaxed);
          double rate = secs > 0 ? static_cast<double>(sent) / secs : 0;
          // Known inputs: every file reported so far that never went through the queue
          // (refused by the walk) plus every queued one. While the walk runs that is a
          // lower bound, said with a "+".
          int64_t total = queued.load() + (t.files - t.queued_done);
          std::string line = std::to_string(t.files) + "/" + std::to_string(total) + (walked ? "" : "+") +
                             (total == 1 && walked ? " file" : " files");
          if (queued_bytes > 0)
            line += " (" + util::format_size(queued_bytes.load()) + (walked ? "" : "+") + ")";
          line += ", " + util::format_size(sent) + " sent, " +
                  util::format_size(static_cast<uint64_t>(rate)) + "/s";
          // The hashing pass of big files, which sends nothing for a while.
          if (int n = pg.hashing.load(std::memory_order_relaxed); n > 0) {
            uint64_t size = pg.hashing_size.load(std::memory_order_relaxed);
            if (size >= (8ULL << 20))
              line += ", hashing " + util::format_size(pg.hashed.load(std::memory_order_relaxed)) + " of " +
                      util::format_size(size) + (n > 1 ? " (" + std::to_string(n) + " files)" : "");
          }
          int64_t left = queued.load() - t.queued_done;
          if (walked && left > 0 && t.queued_done > 0)
            line += ", ETA " + util::format_duration_ms(ms * left / t.queued_done);
          std::fprintf(stderr, "\r\033[K%s", line.c_str());
          std::fflush(stderr);
        };
        // Redraws the line while nothing finishes (a big file being hashed or sent).
        std::mutex tick_mutex;
        std::condition_variable tick_cv;
        bool tick_stop = false;
        std::thread ticker;
        if (progress)
          ticker = std::thread([&] {
            std::unique_lock lock(tick_mutex);
            while (!tick_cv.wait_for(lock, std::chrono::milliseconds(250), [&] { return tick_stop; })) {
              lock.unlock();
              {
                std::lock_guard out(out_mutex);
                show_progress();
              }
              lock.lock();
            }
          });
        auto stop_ticker = [&] {
          if (!ticker.joinable()) return;
          {
            std::lock_guard lock(tick_mutex);
            tick_stop = true;
          }
          tick_cv.notify_all();
          ticker.join();
        };
        struct StopTicker {
          std::function<void()> stop;
          ~StopTicker() { stop(); }
        } stop_ticker_on_exit{stop_ticker};
        auto report = [&](const ops::FileResult &r, bool from_queue) {
          std::lock_guard lock(out_mutex);
          ++t.files;
          if (from_queue) {
            ++t.queued_done;
            end_in_flight();
          }
          switch (r.outcome) {
          case ops::UploadOutcome::active:
            ++t.active;
            t.bytes += r.size;
            break;
          case ops::UploadOutcome::duplicate:
            ++t.duplicate;
            break;
          case ops::UploadOutcome::replayed:
            ++t.replayed;
            break;
          case ops::UploadOutcome::rejected:
            ++t.rejected;
            break;
          case ops::UploadOutcome::failed:
            ++t.failed;
            break;
          case ops::UploadOutcome::skipped:
            ++t.skipped;
            break;
          case ops::UploadOutcome::planned:
            ++t.planned;
            t.bytes += r.size;
            break;
          }
          if (is_storage_failure(r)) ++t.storage_failures;
          if (r.outcome == ops::UploadOutcome::failed && r.error &&
              r.error->exit_code() == exit_status(Errc::ledger_unusable))
            ++t.ledger_failures;
          if (progress) std::fprintf(stderr, "\r\033[K");
          bool skipped = r.outcome == ops::UploadOutcome::skipped;
          if (skipped && !ctx.g.quiet)
            std::fprintf(stderr, "lodge: skipped %s: %s\n", util::escape_for_terminal(r.file).c_str(),
                         r.reason.c_str());
          if (skipped && !ctx.g.json) {
            // Said on stderr only: stdout lists what was uploaded or refused.
          } else if (ctx.g.json) {
            ctx.print_json(result_json(r));
          } else {
            bool bad = r.outcome == ops::UploadOutcome::rejected || r.outcome == ops::UploadOutcome::failed;
            if (!ctx.g.quiet || bad) {
              auto line = result_line(r);
              std::fprintf(stdout, "%s\n", line.c_str());
              std::fflush(stdout);
              check_stdout();
            }
          }
          if (progress) show_progress();
        };

        WorkQueue queue(queue_capacity_for_open_files());
        // A worker that throws stops the run (nothing new starts); join() rethrows it.
        util::ThreadGroup workers([&queue] {
          queue.close();
          queue.clear();
        });
        // Runs before the group's destructor on every way out, so no worker is left
        // waiting on the queue while the group joins it.
        struct CloseOnExit {
          WorkQueue &q;
          ~CloseOnExit() { q.close(); }
        } close_on_exit{queue};
        std::mutex setup_mutex;
        std::optional<LodgeError> setup_error;
        std::mutex retry_mutex;
        std::vector<ops::InputFile> retry_later;
        for (int i = 0; i < jobs; ++i) {
          workers.spawn([&, i] {
            std::unique_ptr<ledger::Ledger> l;
            std::unique_ptr<store::ObjectStore> st;
            std::unique_ptr<ops::Uploader> up;
            try {
              l = pool->worker();
              st = ctx.open_store();
              auto ws = s;
              ws.worker_id += "-" + std::to_string(i);
              up = std::make_unique<ops::Uploader>(*l, *st, ws, util::system_clock());
            } catch (const LodgeError &e) {
              std::lock_guard lock(setup_mutex);
              if (!setup_error) setup_error = e;
              queue.close();
              queue.clear();
              return;
            }
            // Pipelined: a file's confirm commits later, with other files' transitions, and
            // the file is reported once it has (finish() ends the pending ones).
            auto settle = [&] {
              for (auto &r : up->finish())
                report(r, true);
            };
            while (auto file = queue.pop(settle)) {
              // In flight from here until reported (a pending confirm included); none
              // begins once a signal came.
              if (!begin_in_flight()) {
                queue.clear();
                break;
              }
              for (auto &r : up->upload_next(*file)) {
                if (!s.idempotency_key && r.error && r.error->code == Errc::in_progress) {
                  // The content of a file another worker is sending (empty files, copies
                  // in one tree): tried again once the workers are done, as a duplicate.
                  // Only a reserve answers so: this file's, never the pending one's. Not
                  // in flight while it waits: a signal meanwhile means it is not retried.
                  std::lock_guard lock(retry_mutex);
                  retry_later.push_back(*file);
                  end_in_flight();
                  continue;
                }
                report(r, true);
              }
            }
            settle();
          });
        }
        // Fired once the walk of the paths given has listed them (or filled the
        // queue), before any file is opened; then the workers start.
        auto start_workers = [&] {
          if (queue.started()) return;
          (void)failpoint::hit("upload.after_walk");
          queue.start();
        };
        // A PostgreSQL ledger has no files here to keep out of the upload.
        const ops::WalkSkips skips{ledger::is_postgres_location(cfg.ledger) ? std::string() : cfg.ledger,
                                   store::file_store_root(cfg.store)};
        auto feed = [&](const std::string &p) {
          if (interrupted()) return false;
          bool go_on = true;
          ops::walk_inputs({p}, o->follow_symlinks, skips,
                           [&](const ops::InputFile &file, const std::optional<Error> &err) {
                             if (interrupted()) return go_on = false;
                             if (!file.skipped.empty()) {
                               ops::FileResult r;
                               r.file = file.path;
                               r.outcome = ops::UploadOutcome::skipped;
                               r.reason = file.skipped;
                               report(r, false);
                               return true;
                             }
                             if (err) {
                               ops::FileResult r;
                               r.file = file.path;
                               r.outcome = ops::UploadOutcome::rejected;
                               r.error = *err;
                               report(r, false);
                               return true;
                             }
                             ++queued;
                             queued_bytes += file.size;
                             return go_on = queue.push(file, start_workers);
                           });
          return go_on;
        };
        bool fed = true;
        for (const auto &p : o->paths)
          if (!(fed = feed(p))) break;
        start_workers();
        if (fed && !o->files_from.empty()) {
          if (o->files_from == "-") {
            read_list(std::cin, o->null_separated, feed);
          } else {
            std::ifstream f(o->files_from, std::ios::binary);
            if (!f) {
              queue.close();
              workers.join();
              throw LodgeError(Errc::usage, "--files-from: cannot read " + o->files_from);
            }
            read_list(f, o->null_separated, feed);
          }
        }
        walked = true;
        queue.close();
        workers.join();
        if (setup_error) throw *setup_error;
        if (!retry_later.empty()) {
          ops::Uploader up(ctx.ledger(), *store, s, util::system_clock());
          for (const auto &file : retry_later) {
            if (!begin_in_flight()) break;
            auto r = up.upload(file);
            // The same content in flight in another process (or a worker of this one): wait
            // for its sender, bounded by its deadline, then ask again: a duplicate once it
            // is ACTIVE, a new upload if it failed, not IN_PROGRESS "failed".
            for (int round = 0; round < 5 && !s.idempotency_key && !s.dry_run && r.error &&
                                r.error->code == Errc::in_progress && r.id && !interrupted();
                 ++round) {
              if (!ops::wait_for_upload(ctx.ledger(), *r.id, cfg, cfg.sweep.max_retries, util::system_clock(),
                                        [] { return interrupted(); }))
                break;
              r = up.upload(file);
            }
            report(r, true);
          }
        }
        stop_ticker();
        if (progress) std::fprintf(stderr, "\r\033[K");

        double secs = static_cast<double>(util::steady_ms() - started) / 1000.0;
        if (ctx.g.json) {
          nlohmann::json sum{{"files", t.files},         {"active", t.active},
                             {"duplicate", t.duplicate}, {"replayed", t.replayed},
                             {"rejected", t.rejected},   {"failed", t.failed},
                             {"skipped", t.skipped},     {"bytes", t.bytes},
                             {"seconds", secs},          {"interrupted", interrupted()},
                             {"aborted", aborted()}};
          if (o->dry_run) {
            sum["dry_run"] = true;
            sum["planned"] = t.planned;
          }
          ctx.print_json(nlohmann::json{{"summary", sum}});
        } else if (!ctx.g.quiet && o->dry_run) {
          std::fprintf(stderr,
                       "dry run, nothing written: %s: %lld to upload, %lld duplicate, %lld replayed, %lld "
                       "rejected, %lld failed, %lld skipped (%s to send)\n",
                       util::plural(t.files, "file").c_str(), static_cast<long long>(t.planned),
                       static_cast<long long>(t.duplicate), static_cast<long long>(t.replayed),
                       static_cast<long long>(t.rejected), static_cast<long long>(t.failed),
                       static_cast<long long>(t.skipped), util::format_size(t.bytes).c_str());
        } else if (!ctx.g.quiet) {
          std::fprintf(stderr,
                       "%s: %lld active, %lld duplicate, %lld replayed, %lld rejected, %lld "
                       "failed, %lld skipped (%s in %.1fs)%s\n",
                       util::plural(t.files, "file").c_str(), static_cast<long long>(t.active),
                       static_cast<long long>(t.duplicate), static_cast<long long>(t.replayed),
                       static_cast<long long>(t.rejected), static_cast<long long>(t.failed),
                       static_cast<long long>(t.skipped), util::format_size(t.bytes).c_str(), secs,
                       !interrupted()  ? ""
                       : broken_pipe() ? ", interrupted: stdout was closed"
                                       : ", interrupted");
        }
        if (interrupted()) {
          std::string why = broken_pipe() ? "stdout was closed" : "interrupted by a signal";
          std::string what = aborted() ? "the uploads in flight were aborted and their records failed"
                                       : "the files in flight were finished";
          std::fprintf(stderr, "lodge: error: %s: %s, no new one was started (%s)\n", why.c_str(),
                       what.c_str(), std::string(errc_name(Errc::interrupted)).c_str());
          // 141 is how a shell reports a process killed by SIGPIPE: a reader that went away.
          return broken_pipe() ? 128 + SIGPIPE : exit_status(Errc::interrupted);
        }
        // Whole-run failures get their own exit status (man/lodge.1 EXIT STATUS): 3 when every
        // failure was the ledger's, 4 when every one was the store being unreachable.
        bool none_done = t.active + t.replayed + t.duplicate + t.planned == 0 && t.rejected == 0;
        if (none_done && t.ledger_failures > 0 && t.ledger_failures == t.failed)
          return exit_status(Errc::ledger_unusable);
        if (t.storage_failures > 0 && t.storage_failures == t.failed && t.active + t.replayed == 0 &&
            t.rejected == 0)
          return exit_status(Errc::storage_unavailable);
        return (t.rejected + t.failed) > 0 ? exit_items_failed() : exit_status(Errc::ok);
      }};
}

namespace {
// A word for the shell: single-quoted, its own quotes closed and escaped.
std::string shell_quote(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string utc_text(int64_t ms) {
  return util::format_utc(ms, "%Y-%m-%dT%H:%M:%SZ");
}

// The settings of a direct upload's reserve or confirm (no walk, no workers).
ops::UploadSettings direct_settings(Context &ctx, const UploadOptions &o, bool with_owner) {
  const auto &cfg = ctx.cfg();
  if (!o.prefix.empty())
    if (auto why = config::run_prefix_problem(o.prefix))
      throw LodgeError(Errc::usage, "--prefix '" + util::escape_for_terminal(o.prefix) + "': " + *why);
  ops::UploadSettings s;
  s.policy = cfg.policy(o.policy);
  s.run_prefix = o.prefix;
  if (with_owner) s.owner = ctx.owner(); // confirm goes by the record's id alone
  if (!o.idempotency_key.empty()) s.idempotency_key = o.idempotency_key;
  s.max_retries = cfg.sweep.max_retries;
  s.lease_ms = cfg.sweep.lease_ms;
  s.cleanup = {ops::grace_for(cfg, o.policy), cfg.sweep.backoff_base_ms, cfg.sweep.backoff_max_ms};
  s.worker_id = "direct-" + std::to_string(::getpid());
  return s;
}

void print_direct_result(Context &ctx, const ops::FileResult &r, const char *word) {
  if (ctx.g.json) {
    auto j = result_json(r);
    j["outcome"] = word;
    ctx.print_json(j);
    return;
  }
  bool bad = r.error.has_value() && r.outcome != ops::UploadOutcome::duplicate;
  if (ctx.g.quiet && !bad) return;
  std::string line = std::string(word) + " " + (r.id ? "#" + std::to_string(*r.id) + " " : "") +
                     util::escape_for_terminal(r.object_key.empty() ? r.file : r.object_key);
  if (r.error) line += ": " + r.error->message + " (" + std::string(r.error->name()) + ")";
  std::fprintf(stdout, "%s\n", line.c_str());
}

// The exit status of one direct result: 0 when it went as asked, the error's own status
// when the whole command could not work (storage, ledger), 1 otherwise.
int direct_status(const ops::FileResult &r) {
  if (!r.error || r.outcome == ops::UploadOutcome::duplicate || r.outcome == ops::UploadOutcome::active)
    return exit_status(Errc::ok);
  int c = r.error->exit_code();
  return c == exit_status(Errc::usage) || c > 1 ? c : exit_items_failed();
}
} // namespace

Command add_reserve(CLI::App &app) {
  auto o = std::make_shared<UploadOptions>();
  auto size = std::make_shared<int64_t>(-1);
  auto sha = std::make_shared<std::string>();
  auto expires = std::make_shared<std::string>("1h");
  auto *sub = app.add_subcommand(
      "reserve", "Reserve a file's upload and print a presigned PUT for a host without credentials");
  sub->add_option("name", o->paths, "The file's name (its relative path in the ledger)")
      ->required()
      ->expected(1);
  sub->add_option("--size", *size, "The file's exact size in bytes")->required();
  sub->add_option("--sha256", *sha, "The file's SHA-256, 64 hex digits")->required();
  sub->add_option("--expires", *expires, "How long the URL works (default 1h, at most 7d)");
  sub->add_option("--policy", o->policy, "Policy to apply (default: default)");
  sub->add_option("--prefix", o->prefix, "Put the file under <root>/<owner>/PREFIX/");
  sub->add_option("--idempotency-key", o->idempotency_key,
                  "Make a retry of this reservation return the first (and its URL again while it is valid)");
  sub->add_option("--content-type", o->content_type,
                  "The object's Content-Type (default: from the extension)");
  sub->add_option("--metadata", o->metadata, "User metadata NAME=VALUE (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--tag", o->tags, "Object tag KEY=VALUE (repeatable)")->allow_extra_args(false);
  sub->add_option("--storage-class", o->storage_class, "S3 storage class or Azure access tier");
  sub->add_option("--sse", o->sse, "S3 server-side encryption: AES256 or aws:kms");
  sub->add_option("--sse-kms-key-id", o->sse_kms_key_id, "The KMS key for --sse aws:kms");
  sub->add_option("--cache-control", o->cache_control, "Cache-Control of the object");
  return {sub, [o, size, sha, expires](Context &ctx) {
            if (*size < 0) throw LodgeError(Errc::usage, "reserve: --size must be a byte count (0 or more)");
            std::string hex = util::to_lower(*sha);
            if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
              throw LodgeError(Errc::usage,
                               "reserve: --sha256 must be 64 hex digits (sha256sum's first column)");
            const int64_t expires_s = expires_seconds(*expires);
            ops::UploadSettings s = direct_settings(ctx, *o, true);
            s.options = object_options(*o, s.policy);
            auto store = ctx.open_store();
            if (!store->capabilities().presign)
              throw LodgeError(Errc::unsupported, "reserve: " + store->describe() +
                                                      " cannot sign an upload URL (direct uploads need an S3 "
                                                      "store, or an Azure store with an account key)");
            if (auto a = store->accepts(s.options); !a) throw LodgeError(a.error());
            ops::Uploader up(ctx.ledger(), *store, s, util::system_clock());
            auto d = up.reserve_direct({o->paths.front(), static_cast<uint64_t>(*size), hex, expires_s});
            const auto &r = d.r;
            const char *word = d.reserved                                   ? "reserved"
                               : r.outcome == ops::UploadOutcome::replayed  ? "replayed"
                               : r.outcome == ops::UploadOutcome::duplicate ? "duplicate"
                               : r.outcome == ops::UploadOutcome::rejected  ? "rejected"
                                                                            : "failed";
            if (ctx.g.json) {
              auto j = result_json(r);
              j["outcome"] = word;
              if (d.put) {
                nlohmann::json h = nlohmann::json::object();
                for (const auto &[k, val] : d.put->headers)
                  h[k] = val;
                j["method"] = d.put->method;
                j["url"] = d.put->url;
                j["headers"] = h;
                j["expires_at"] = utc_text(d.url_expires_at);
              }
              ctx.print_json(j);
            } else {
              print_direct_result(ctx, r, word);
              if (d.put) {
                // The URL is a credential: on stdout only, never in a log.
                std::string curl = "curl --fail -X PUT --upload-file FILE";
                for (const auto &[k, val] : d.put->headers)
                  curl += " -H " + shell_quote(k + ": " + val);
                curl += " " + shell_quote(d.put->url);
                std::fprintf(stdout, "expires %s\n%s %s\n", utc_text(d.url_expires_at).c_str(),
                             d.put->method.c_str(), d.put->url.c_str());
                for (const auto &[k, val] : d.put->headers)
                  std::fprintf(stdout, "%s: %s\n", k.c_str(), val.c_str());
                std::fprintf(stdout, "%s\n", curl.c_str());
                if (!ctx.g.quiet)
                  std::fprintf(stderr,
                               "lodge: send the bytes with the URL and every header above, then run "
                               "`lodge confirm %lld`\n",
                               static_cast<long long>(r.id.value_or(0)));
              }
            }
            return d.reserved || r.outcome == ops::UploadOutcome::replayed ? exit_status(Errc::ok)
                                                                           : direct_status(r);
          }};
}

Command add_confirm(CLI::App &app) {
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto all_due = std::make_shared<bool>(false);
  auto *sub = app.add_subcommand(
      "confirm",
      "Verify a direct upload's object (size, stamp, Content-Type, SHA-256) and make its file active");
  sub->add_option("ids", *ids, "File ids that lodge reserve printed");
  sub->add_flag("--all-due", *all_due,
                "Confirm or fail every direct upload whose URL has expired (for cron)");
  return {sub, [ids, all_due](Context &ctx) {
            if (ids->empty() == !*all_due)
              throw LodgeError(Errc::usage, "confirm: give file ids, or --all-due");
            UploadOptions none;
            ops::UploadSettings s = direct_settings(ctx, none, false);
            auto store = ctx.open_store();
            ops::Uploader up(ctx.ledger(), *store, s, util::system_clock());
            std::vector<ops::FileResult> results;
            if (*all_due) {
              results = up.confirm_due(100'000);
            } else {
              for (auto id : *ids)
                results.push_back(up.confirm_direct(id));
            }
            int status = exit_status(Errc::ok);
            for (const auto &r : results) {
              print_direct_result(ctx, r, r.outcome == ops::UploadOutcome::active ? "active" : "failed");
              status = std::max(status, direct_status(r));
            }
            if (*all_due && !ctx.g.json && !ctx.g.quiet)
              std::fprintf(stderr, "lodge: %s whose URL expired\n",
                           util::plural(static_cast<int64_t>(results.size()), "direct upload").c_str());
            return status;
          }};
}

Command add_list(CLI::App &app) {
  struct ListOptions {
    bool all = false;
    std::string prefix;
    bool prefix_given = false;
    std::string path_glob;
  };
  auto o = std::make_shared<ListOptions>();
  auto *sub = app.add_subcommand(
      "list", "List an owner's files (alive ones; --all adds failed and deleted; --owner '*' every owner's)");
  sub->add_flag("--all", o->all, "Include failed and deleted files, with their reasons");
  sub->add_option("--prefix", o->prefix, "Only files uploaded with this --prefix ('' for those without)")
      ->each([o](const std::string &) { o->prefix_given = true; });
  sub->add_option("--path-glob", o->path_glob,
                  "Only files whose relative path matches this fnmatch pattern ('*' also matches '/')");
  return {sub, [o](Context &ctx) {
            // '*' is no owner id: taken out before the configuration checks the owner.
            bool every_owner = ctx.g.owner == "*";
            if (every_owner) ctx.g.owner.clear();
            if (o->prefix_given && !o->prefix.empty())
              if (auto why = config::run_prefix_problem(o->prefix))
                throw LodgeError(Errc::usage,
                                 "list: --prefix '" + util::escape_for_terminal(o->prefix) + "': " + *why);
            ledger::ListFilter filter;
            filter.owner = every_owner ? std::string("*") : ctx.owner();
            if (o->prefix_given) filter.run_prefix = o->prefix;
            if (!o->path_glob.empty()) filter.path_glob = o->path_glob;
            filter.include_dead = o->all;
            auto files = ctx.reader().list_files(filter);
            for (const auto &f : files) {
              // A soft-deleted ACTIVE row is DELETED, whatever upload_status says.
              std::string state = f.is_deleted && f.upload_status == ledger::FileStatus::active
                                      ? "DELETED"
                                      : ledger::to_string(f.upload_status);
              if (ctx.g.json) {
                nlohmann::json j{
                    {"id", f.id},
                    {"owner", f.owner_id},
                    {"name", f.original_name},
                    {"path", f.relative_path},
                    {"prefix", f.run_prefix},
                    {"dedup", ledger::to_string(f.dedup_scope)},
                    {"object_key", f.object_key},
                    {"shares", f.content_of ? nlohmann::json(*f.content_of) : nlohmann::json(nullptr)},
                    {"status", state},
                    {"upload_status", ledger::to_string(f.upload_status)},
                    {"deleted", f.is_deleted},
                    {"sha256", f.sha256},
                    {"size", f.size},
                    {"media_type", f.media_type},
                    {"content_type", f.object_content_type()},
                    {"object_options", f.object_options.empty() ? nlohmann::json::object()
                                                                : nlohmann::json::parse(f.object_options)},
                    {"created_at", f.created_at},
                    {"failure_reason",
                     f.failure_reason ? nlohmann::json(*f.failure_reason) : nlohmann::json(nullptr)}};
                ctx.print_json(j);
              } else {
                std::string where = f.run_prefix.empty() ? "-" : f.run_prefix;
                std::printf("%-6lld %-13s %10s  %-12s %-40s %s%s%s\n", static_cast<long long>(f.id),
                            state.c_str(), util::format_size(static_cast<uint64_t>(f.size)).c_str(),
                            util::escape_for_terminal(where).c_str(),
                            util::escape_for_terminal(f.relative_path).c_str(),
                            util::escape_for_terminal(f.object_key).c_str(),
                            every_owner ? ("  [" + f.owner_id + "]").c_str() : "",
                            f.failure_reason
                                ? ("  (" + util::escape_for_terminal(*f.failure_reason) + ")").c_str()
                                : "");
              }
            }
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
