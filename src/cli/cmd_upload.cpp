// lodge upload, lodge reserve, lodge confirm: options mapped to ops inputs, results rendered.
#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <lodge/match/filter.hpp>
#include <lodge/ops/upload/direct_run.hpp>
#include <lodge/ops/upload/report.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/ops/upload/run_text.hpp>
#include <lodge/ops/upload/settings.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace lodge::cli {
namespace {

struct UploadOptions {
  std::vector<std::string> paths;
  std::string files_from;
  bool null_separated = false;
  int jobs = 0;
  bool no_progress = false;
  std::string stats;                // --stats: an interval ("" for the config's)
  std::string bwlimit;              // --bwlimit: a rate ("" for the config's)
  std::string in_progress_wait;     // --in-progress-wait: a duration ("" for the config's)
  bool ci_metadata = false;         // --ci-metadata: the CI job's commit, ref, run, URL as metadata
  std::string if_no_files = "warn"; // --if-no-files: warn, error or ignore
  ops::UploadInputs in;             // the settings' flags, as given
  // --include, --exclude, --filter and the *-from flags as (flag, value), in command-line
  // order: the first matching rule wins, so their order is their meaning.
  ops::FilterInputs filter;
  std::string min_size, max_size, min_age, max_age;
};

// The settings' inputs, with what only the command knows: the environment for --ci-metadata.
ops::UploadInputs inputs_of(const UploadOptions &o, const Context &ctx) {
  ops::UploadInputs in = o.in;
  in.object.ci_metadata = o.ci_metadata;
  in.object.env = &ctx.env;
  return in;
}

// The progress line is redrawn this often while nothing finishes.
constexpr int64_t k_progress_redraw_ms = 250;

std::string result_line(const ops::FileResult &r) {
  std::string name = util::escape_for_terminal(r.file);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-9s ", ops::to_string(r.outcome));
  std::string s = buf;
  switch (r.outcome) {
  case ops::UploadOutcome::active:
  case ops::UploadOutcome::replayed:
    s += "#" + std::to_string(*r.id) + " " + util::escape_for_terminal(r.object_key) + " " + name;
    if (r.resumed_bytes > 0) s += " resumed (" + util::format_size(r.resumed_bytes) + " already stored)";
    break;
  case ops::UploadOutcome::duplicate:
    if (!r.id) { // a dry run's: no row was made
      s += name + " (same content as #" + std::to_string(r.shares.value_or(0)) +
           ": a real run shares its object)";
      break;
    }
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

// --ci-metadata and --expire-after, of upload and reserve.
void add_ci_options(CLI::App *sub, UploadOptions &o) {
  sub->add_flag("--ci-metadata", o.ci_metadata,
                "Record the CI job's commit, ref, run id, URL, CI, repository and ref type (branch or tag) "
                "as metadata cicommit, ciref, cirun, ciurl, cisystem, cirepo, cireftype (GitHub Actions, "
                "GitLab CI, Buildkite, Jenkins; --metadata wins)");
  sub->add_option("--expire-after", o.in.expire_after,
                  "Each file expires this long after its upload (30d, 12h; 'never'), for `lodge prune "
                  "--expired` (default: the policy's expire_after, else never)")
      ->type_name("DURATION");
}

// The filter flags, in one group of `lodge upload --help`. Each rule flag appends to one
// list as it is parsed (trigger_on_parse), which keeps the command line's order across flags.
void add_filter_options(CLI::App *sub, const std::shared_ptr<UploadOptions> &o) {
  const char *group = "Filtering (rclone's dialect, first matching rule wins; see lodge-filters(7))";
  auto rule = [&](const char *flag, const char *type, const char *help) {
    std::string name = std::string(flag).substr(2);
    sub->add_option_function<std::string>(
           flag, [o, name](const std::string &v) { o->filter.rules.emplace_back(name, v); }, help)
        ->trigger_on_parse()
        ->allow_extra_args(false)
        ->type_name(type)
        ->group(group);
  };
  rule("--include", "PATTERN",
       "Upload only files matching PATTERN (repeatable; implies '- /**' after the rules)");
  rule("--exclude", "PATTERN",
       "Leave out files matching PATTERN; 'dir/' or 'dir/**' prunes the directory unopened");
  rule("--filter", "RULE", "A rule '+ PATTERN' or '- PATTERN' ('!' clears the rules before it)");
  rule("--filter-from", "FILE",
       "Read --filter rules from FILE ('-': stdin), one a line; '#' and ';' start comments");
  rule("--include-from", "FILE", "Read --include patterns from FILE ('-': stdin), one a line");
  rule("--exclude-from", "FILE", "Read --exclude patterns from FILE ('-': stdin), one a line");
  sub->add_option("--exclude-if-present", o->filter.exclude_if_present,
                  "Leave out every directory holding a file named NAME (e.g. .nobackup; repeatable)")
      ->allow_extra_args(false)
      ->type_name("NAME")
      ->group(group);
  sub->add_option("--min-size", o->min_size,
                  "Only files of at least SIZE (10M, 512K; see VALUES in lodge.conf(5))")
      ->type_name("SIZE")
      ->group(group);
  sub->add_option("--max-size", o->max_size, "Only files of at most SIZE")->type_name("SIZE")->group(group);
  sub->add_option("--min-age", o->min_age,
                  "Only files modified at least AGE ago (2d, 1h30m; see VALUES in lodge.conf(5))")
      ->type_name("AGE")
      ->group(group);
  sub->add_option("--max-age", o->max_age, "Only files modified at most AGE ago")
      ->type_name("AGE")
      ->group(group);
}

// The run's filter from the flags; null when none was given. A filter file "-" is stdin,
// read here (the core never reads stdin), once, and not when --files-from takes it.
std::shared_ptr<const match::Filter> build_filter(const UploadOptions &o) {
  ops::FilterInputs in = o.filter;
  in.stdin_taken = o.files_from == "-";
  auto &b = in.bounds;
  if (!o.min_size.empty()) b.min_size = match::parse_filter_size(o.min_size, "--min-size");
  if (!o.max_size.empty()) b.max_size = match::parse_filter_size(o.max_size, "--max-size");
  if (!o.min_age.empty()) b.min_age_ms = match::parse_filter_age(o.min_age, "--min-age");
  if (!o.max_age.empty()) b.max_age_ms = match::parse_filter_age(o.max_age, "--max-age");
  return ops::make_filter(in, [] { return match::read_rule_fd(STDIN_FILENO, "-"); });
}

// What the user sees of an upload run: a line (or a JSON object) per file on stdout, the
// progress line on a terminal's stderr, the summary. The run calls one method at a time.
class UploadPrinter final : public ops::RunObserver {
public:
  // stats_ms: a --stats line every this often (0: none).
  UploadPrinter(Context &ctx, bool progress, bool dry_run, int64_t stats_ms)
      : m_ctx(ctx), m_progress(progress), m_dry_run(dry_run), m_stats_ms(stats_ms), m_next_stats_ms(stats_ms),
        m_list_excluded(!ctx.g.quiet && (dry_run || ctx.g.verbose > 0)) {}

  // --if-no-files warn: a run that found no file says so (stderr, and the JSON summary's
  // "warning"), with this message.
  std::function<std::string(const ops::RunTally &)> warn_no_files;

  // Listed on stderr with -v and by --dry-run; counted always.
  void on_excluded(const ops::InputFile &f) override {
    if (!m_list_excluded) return;
    if (m_progress) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "lodge: excluded %s (%s)\n", util::escape_for_terminal(f.path).c_str(),
                 util::escape_for_terminal(f.excluded).c_str());
  }

  // -v: each change of an adaptive run's level.
  void on_concurrency(const ops::LevelChange &c) override {
    if (m_ctx.g.verbose == 0 || m_ctx.g.quiet) return;
    if (m_progress) std::fprintf(stderr, "\r\033[K");
    std::fprintf(stderr, "%s\n", ops::level_change_line(c).c_str());
  }

  void on_recovered(int64_t failed) override {
    if (!m_ctx.g.quiet)
      std::fprintf(stderr, "lodge: %lld upload%s left by a killed run failed, to be sent again\n",
                   static_cast<long long>(failed), failed == 1 ? "" : "s");
  }

  void on_result(const ops::FileResult &r) override {
    if (m_progress) std::fprintf(stderr, "\r\033[K");
    bool skipped = r.outcome == ops::UploadOutcome::skipped;
    if (skipped && !m_ctx.g.quiet)
      std::fprintf(stderr, "lodge: skipped %s: %s\n", util::escape_for_terminal(r.file).c_str(),
                   r.reason.c_str());
    if (skipped && !m_ctx.g.json) {
      // Said on stderr only: stdout lists what was uploaded or refused.
    } else if (m_ctx.g.json) {
      m_ctx.print_json(ops::result_json(r));
    } else {
      bool bad = r.outcome == ops::UploadOutcome::rejected || r.outcome == ops::UploadOutcome::failed ||
                 r.outcome == ops::UploadOutcome::in_progress;
      if (!m_ctx.g.quiet || bad) {
        auto line = result_line(r);
        std::fprintf(stdout, "%s\n", line.c_str());
        std::fflush(stdout);
        check_stdout();
      }
    }
  }

  void on_progress(const ops::RunProgress &p) override {
    m_last = p;
    if (m_stats_ms > 0 && p.elapsed_ms >= m_next_stats_ms) {
      std::fprintf(stderr, "%s\n", ops::stats_line(p, false).c_str());
      std::fflush(stderr);
      m_next_stats_ms = (p.elapsed_ms / m_stats_ms + 1) * m_stats_ms; // on the interval's beat
    }
    if (!m_progress) return;
    const std::string line = ops::progress_line(p);
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
  }

  void on_finish(const ops::RunReport &rep) override {
    if (m_progress) std::fprintf(stderr, "\r\033[K");
    if (m_stats_ms > 0) {
      auto last = m_last;
      last.elapsed_ms = rep.elapsed_ms;
      std::fprintf(stderr, "%s%s\n", ops::stats_line(last, true).c_str(),
                   ops::concurrency_of(rep.concurrency).c_str());
      std::fflush(stderr);
    }
    if (warn_no_files && ops::no_file_found(rep)) {
      m_no_files = warn_no_files(rep.tally);
      if (!m_ctx.g.quiet)
        std::fprintf(stderr, "lodge: warning: %s (%s)\n", m_no_files.c_str(),
                     std::string(errc_name(Errc::not_found)).c_str());
    }
    summary(rep);
    if (!rep.interrupted) return;
    std::string why = rep.broken_pipe ? "stdout was closed" : "interrupted by a signal";
    std::string what = rep.aborted ? "the uploads in flight were aborted and their records failed"
                                   : "the files in flight were finished";
    std::fprintf(stderr, "lodge: error: %s: %s, no new one was started (%s)\n", why.c_str(), what.c_str(),
                 std::string(errc_name(Errc::interrupted)).c_str());
  }

private:
  void summary(const ops::RunReport &rep) {
    const auto &t = rep.tally;
    double secs = static_cast<double>(rep.elapsed_ms) / 1000.0;
    if (m_ctx.g.json) {
      m_ctx.print_json(ops::summary_json(rep, m_dry_run, m_no_files));
      return;
    }
    if (m_ctx.g.quiet) return;
    // In progress elsewhere: said only when some file was (the line stays as it was).
    std::string held = t.in_progress > 0 ? ", " + std::to_string(t.in_progress) + " in progress" : "";
    // Left out by the filter: said only when something was.
    if (t.excluded > 0) held += ", " + std::to_string(t.excluded) + " excluded";
    if (m_dry_run) {
      std::fprintf(stderr,
                   "dry run, nothing written: %s: %lld to upload, %lld duplicate, %lld replayed, %lld "
                   "rejected, %lld failed%s, %lld skipped (%s to send)\n",
                   util::plural(t.files, "file").c_str(), static_cast<long long>(t.planned),
                   static_cast<long long>(t.duplicate), static_cast<long long>(t.replayed),
                   static_cast<long long>(t.rejected), static_cast<long long>(t.failed), held.c_str(),
                   static_cast<long long>(t.skipped), util::format_size(t.bytes).c_str());
      return;
    }
    std::fprintf(stderr,
                 "%s: %lld active, %lld duplicate, %lld replayed, %lld rejected, %lld "
                 "failed%s, %lld skipped (%s in %.1fs)%s\n",
                 util::plural(t.files, "file").c_str(), static_cast<long long>(t.active),
                 static_cast<long long>(t.duplicate), static_cast<long long>(t.replayed),
                 static_cast<long long>(t.rejected), static_cast<long long>(t.failed), held.c_str(),
                 static_cast<long long>(t.skipped), util::format_size(t.bytes).c_str(), secs,
                 !rep.interrupted  ? ""
                 : rep.broken_pipe ? ", interrupted: stdout was closed"
                                   : ", interrupted");
  }

  Context &m_ctx;
  bool m_progress;
  bool m_dry_run;
  int64_t m_stats_ms;
  int64_t m_next_stats_ms;
  ops::RunProgress m_last; // the latest snapshot, for the final stats line
  bool m_list_excluded;
  std::string m_no_files; // the warning said, when the run found no file
};

// Upload's CI options: reserve's (--ci-metadata, --expire-after) and --if-no-files, what a
// run that found no file does (as upload-artifact's if-no-files-found).
void add_upload_ci_options(CLI::App *sub, UploadOptions &o) {
  add_ci_options(sub, o);
  choices(sub->add_option("--if-no-files", o.if_no_files,
                          "When no file is found to upload (an empty directory, everything filtered "
                          "out): warn (say so, exit 0; the default), error (NOT_FOUND, exit 1) or ignore"),
          {"warn", "error", "ignore"})
      ->type_name("MODE");
}

// Runs the upload; --if-no-files decides what a run that found no file does: warn (the
// printer says it), error (as upload-artifact's if-no-files-found: NOT_FOUND, exit 1) or
// ignore. The run's exit status otherwise.
int run_reporting_no_files(const UploadOptions &o, const ops::RunSpec &spec, ops::RunDeps &deps,
                           UploadPrinter printer) {
  if (o.if_no_files == "warn")
    printer.warn_no_files = [&o](const ops::RunTally &t) {
      return ops::no_files_message(o.paths, o.files_from, t);
    };
  auto rep = ops::run_upload(spec, deps, printer);
  if (o.if_no_files == "error" && ops::no_file_found(rep))
    throw LodgeError(Errc::not_found, ops::no_files_message(o.paths, o.files_from, rep.tally));
  return ops::exit_status(rep);
}
} // namespace

Command add_upload(CLI::App &app) {
  auto o = std::make_shared<UploadOptions>();
  auto *sub = app.add_subcommand("upload", "Upload files and directories (recursively) to the store");
  sub->add_option("paths", o->paths, "Files and directories to upload")->type_name("PATH");
  sub->add_option("--files-from", o->files_from, "Read paths from FILE ('-' for stdin), one per line")
      ->type_name("FILE");
  sub->add_flag("-0,--null", o->null_separated, "Paths in --files-from are NUL-separated");
  sub->add_option("--policy", o->in.policy, "Policy to apply (default: default)");
  sub->add_option("-j,--jobs", o->jobs,
                  "Parallel uploads, fixed (default: config jobs, else the AWS profile's s3 "
                  "max_concurrent_requests on an S3 store, else adaptive: from 8 requests in flight, more "
                  "while the throughput grows, fewer on throttling or errors, at most 256; -v shows it)")
      ->check(CLI::Range(1, 256));
  sub->add_option("--part-size", o->in.part_size,
                  "Size of each part of a multipart upload, 5MiB to 5GiB (default: config part_size, else "
                  "the AWS profile's s3 multipart_chunksize, else 16MiB)");
  sub->add_option("--part-concurrency", o->in.part_concurrency,
                  "Parts of one file sent at once, 1 to 64 (default: config part_concurrency, 4); jobs x "
                  "parts is lowered, with a warning, to fit the open-file limit");
  sub->add_option("--idempotency-key", o->in.idempotency_key,
                  "Make a retry of this single upload return the first result");
  sub->add_option("--prefix", o->in.prefix,
                  "Put this run's files under <root>/<owner>/PREFIX/ (segments of A-Z a-z 0-9 . _ -, "
                  "'/' between them), e.g. builds/42");
  sub->add_flag("--follow-symlinks", o->in.follow_symlinks,
                "Follow symbolic links (never by default); a link back up the tree is skipped");
  sub->add_flag("--no-progress", o->no_progress, "Never show a progress line");
  sub->add_option("--stats", o->stats,
                  "Off a terminal (or with --no-progress or --json), print one plain stats line on stderr "
                  "every INTERVAL (1m, 10s) and a final one: files, bytes sent, rate, elapsed, ETA, in "
                  "flight (default: config stats, env LODGE_STATS, off; -q silences it)")
      ->type_name("INTERVAL");
  flags::add_bwlimit_option(sub, o->bwlimit, "sent");
  sub->add_flag("--checksum", o->in.checksum,
                "Read and hash every file, even one the ledger's stat cache knows unchanged");
  sub->add_flag("--replace", o->in.replace,
                "A changed file retires the older file at its path once the new one is active (the old "
                "object is removed by sweep after the grace)");
  sub->add_flag("-n,--dry-run", o->in.dry_run,
                "Validate and hash (or use the stat cache), say what would happen, write nothing");
  sub->add_option(
      "--content-type", o->in.object.content_type,
      "Store every object with this Content-Type (default: from the extension via /etc/mime.types "
      "when the content agrees, else detected)");
  sub->add_option("--metadata", o->in.object.metadata,
                  "User metadata NAME=VALUE on every object (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--tag", o->in.object.tags,
                  "Object tag KEY=VALUE (repeatable; S3 object tagging, Azure blob index tags)")
      ->allow_extra_args(false);
  add_upload_ci_options(sub, *o);
  sub->add_option(
      "--storage-class", o->in.object.storage_class,
      "S3 storage class (STANDARD_IA, GLACIER_IR, ...) or Azure access tier (Hot, Cool, Cold, Archive)");
  choices(sub->add_option("--sse", o->in.object.sse, "S3 server-side encryption: AES256 or aws:kms"),
          {"AES256", "aws:kms"});
  sub->add_option("--sse-kms-key-id", o->in.object.sse_kms_key_id,
                  "The KMS key for --sse aws:kms (id, alias or ARN)");
  sub->add_option("--cache-control", o->in.object.cache_control,
                  "Cache-Control of every object, e.g. 'max-age=3600'");
  sub->add_option("--in-progress-wait", o->in_progress_wait,
                  "How long to wait for another process sending the same content before reporting the "
                  "file in_progress (default: config in_progress_wait, 30s; a direct reservation is "
                  "never waited for)");
  add_filter_options(sub, o);
  return {
      sub, [o](Context &ctx) {
        ctx.g.bwlimit = o->bwlimit;
        const auto &cfg = ctx.cfg();
        if (o->paths.empty() && o->files_from.empty())
          throw LodgeError(Errc::usage, "upload: give files or directories, or --files-from FILE");
        if (!o->in.idempotency_key.empty()) ops::check_one_input(o->paths, o->files_from);
        flags::run_prefix(o->in.prefix, "upload: --prefix");
        ops::RunSpec spec;
        spec.filter = build_filter(*o);
        spec.settings = ops::upload_settings(cfg, inputs_of(*o, ctx), [&ctx] { return ctx.open_store(); });
        spec.paths = o->paths;
        if (o->files_from == "-")
          spec.files_from_stream = &std::cin;
        else
          spec.files_from_file = o->files_from;
        spec.null_separated = o->null_separated;
        if (auto fit = ops::plan_run(spec, cfg, o->jobs, ops::open_file_limit()); fit && !ctx.g.quiet)
          std::fprintf(stderr,
                       "lodge: warning: %d jobs x %d parts in flight would need more files open than the "
                       "limit of %llu (ulimit -n) allows: using %d x %d\n",
                       fit->jobs, fit->part_concurrency, static_cast<unsigned long long>(fit->limit),
                       fit->to_jobs, fit->to_part_concurrency);
        spec.in_progress_wait_ms = flags::duration(o->in_progress_wait, "--in-progress-wait",
                                                   cfg.in_progress_wait_ms, config::k_in_progress_wait_range);
        int64_t stats_ms = flags::stats(o->stats, cfg.stats_ms);
        // The store first: a bad store URL leaves nothing behind, and a file:// root
        // exists before the walk, which must skip it.
        auto store = ctx.open_store();
        if (auto a = store->accepts(spec.settings.options); !a) throw LodgeError(a.error());
        (void)ctx.ledger(); // migrate once, before the workers race to
        auto pool = ctx.ledger_pool();
        bool progress = ctx.stderr_tty && !ctx.g.json && !ctx.g.quiet && !o->no_progress;
        // Stats lines where the progress line is not drawn (a log, --json, --no-progress).
        if (progress || ctx.g.quiet) stats_ms = 0;
        if (stats_ms > 0) spec.progress_interval_ms = stats_ms;
        if (progress) spec.progress_interval_ms = k_progress_redraw_ms;
        install_interrupt_handlers(!ctx.g.quiet);
        ops::RunDeps deps{ctx.ledger(),
                          [pool]() -> std::shared_ptr<ledger::Ledger> { return pool->worker(); },
                          *store,
                          [&ctx] { return ctx.open_store(); },
                          cfg,
                          util::system_clock(),
                          run_cancel(),
                          {},
                          ctx.backpressure()};
        return run_reporting_no_files(*o, spec, deps, UploadPrinter(ctx, progress, o->in.dry_run, stats_ms));
      }};
}

namespace {
std::string utc_text(int64_t ms) {
  return util::format_utc(ms, "%Y-%m-%dT%H:%M:%SZ");
}

void print_direct_result(Context &ctx, const ops::FileResult &r, const char *word) {
  if (ctx.g.json) {
    auto j = ops::result_json(r);
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

} // namespace

// A reservation's URLs: one PUT, or one per part (reserve --parts).
void print_reservation(Context &ctx, const ops::DirectReservation &d, const char *word) {
  const auto &r = d.r;
  if (ctx.g.json) {
    ctx.print_json(ops::reservation_json(d, word));
    return;
  }
  print_direct_result(ctx, r, word);
  // The URLs are credentials: on stdout only, never in a log.
  if (d.put) {
    std::string curl = "curl --fail -X PUT --upload-file FILE";
    for (const auto &[k, val] : d.put->headers)
      curl += " -H " + shell_quote(k + ": " + val);
    curl += " " + shell_quote(d.put->url);
    std::fprintf(stdout, "expires %s\n%s %s\n", utc_text(d.url_expires_at).c_str(), d.put->method.c_str(),
                 d.put->url.c_str());
    for (const auto &[k, val] : d.put->headers)
      std::fprintf(stdout, "%s: %s\n", k.c_str(), val.c_str());
    std::fprintf(stdout, "%s\n", curl.c_str());
  } else if (!d.parts.empty()) {
    // Each URL pins its part's length (Content-Length, which curl -T sets from the file).
    const uint64_t part_size = d.parts.front().size;
    std::fprintf(stdout, "expires %s\nparts %zu of %llu bytes (the last %llu)\n",
                 utc_text(d.url_expires_at).c_str(), d.parts.size(),
                 static_cast<unsigned long long>(part_size),
                 static_cast<unsigned long long>(d.parts.back().size));
    for (const auto &p : d.parts)
      std::fprintf(stdout, "%s %s\n", p.put.method.c_str(), p.put.url.c_str());
    std::fprintf(
        stdout,
        "# n=0; grep '^PUT ' THIS_OUTPUT | while read -r _ url; do dd if=FILE of=FILE.part bs=1M "
        "iflag=skip_bytes,count_bytes skip=$((n * %llu)) count=%llu status=none && curl --fail -sS -T "
        "FILE.part \"$url\" >/dev/null || break; n=$((n + 1)); done\n",
        static_cast<unsigned long long>(part_size), static_cast<unsigned long long>(part_size));
  }
  if ((d.put || !d.parts.empty()) && !ctx.g.quiet)
    std::fprintf(stderr, "lodge: send the bytes with %s, then run `lodge confirm %lld`\n",
                 d.put ? "the URL and every header above" : "each part's URL, in order",
                 static_cast<long long>(r.id.value_or(0)));
}

Command add_reserve(CLI::App &app) {
  auto o = std::make_shared<UploadOptions>();
  auto size = std::make_shared<int64_t>(-1);
  auto sha = std::make_shared<std::string>();
  auto expires = std::make_shared<std::string>("1h");
  auto parts = std::make_shared<bool>(false);
  auto part_size = std::make_shared<std::string>();
  auto *sub = app.add_subcommand(
      "reserve", "Reserve a file's upload and print a presigned PUT for a host without credentials");
  sub->add_option("name", o->paths, "The file's name (its relative path in the ledger)")
      ->required()
      ->expected(1);
  sub->add_option("--size", *size, "The file's exact size in bytes")->required();
  sub->add_option("--sha256", *sha, "The file's SHA-256, 64 hex digits")->required();
  sub->add_option("--expires", *expires, "How long the URL works (default 1h, at most 7d)");
  sub->add_flag("--parts", *parts,
                "Stage the upload in parts: one presigned URL per part (S3, Azure; past one PUT's "
                "5GiB); confirm checks each part's length and the whole SHA-256");
  sub->add_option("--part-size", *part_size,
                  "With --parts: each part's size, 5MiB to 5GiB (default: config part_size, else 16MiB)");
  sub->add_option("--policy", o->in.policy, "Policy to apply (default: default)");
  sub->add_option("--prefix", o->in.prefix, "Put the file under <root>/<owner>/PREFIX/");
  sub->add_option("--idempotency-key", o->in.idempotency_key,
                  "Make a retry of this reservation return the first (and its URL again while it is valid)");
  sub->add_option("--content-type", o->in.object.content_type,
                  "The object's Content-Type (default: from the extension)");
  sub->add_option("--metadata", o->in.object.metadata, "User metadata NAME=VALUE (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--tag", o->in.object.tags, "Object tag KEY=VALUE (repeatable)")->allow_extra_args(false);
  add_ci_options(sub, *o);
  sub->add_option("--storage-class", o->in.object.storage_class, "S3 storage class or Azure access tier");
  choices(sub->add_option("--sse", o->in.object.sse, "S3 server-side encryption: AES256 or aws:kms"),
          {"AES256", "aws:kms"});
  sub->add_option("--sse-kms-key-id", o->in.object.sse_kms_key_id, "The KMS key for --sse aws:kms");
  sub->add_option("--cache-control", o->in.object.cache_control, "Cache-Control of the object");
  return {
      sub, [o, size, sha, expires, parts, part_size](Context &ctx) {
        if (*size < 0) throw LodgeError(Errc::usage, "reserve: --size must be a byte count (0 or more)");
        std::string hex = util::to_lower(*sha);
        if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
          throw LodgeError(Errc::usage, "reserve: --sha256 must be 64 hex digits (sha256sum's first column)");
        const int64_t expires_s = flags::expires_seconds(*expires);
        if (!part_size->empty() && !*parts)
          throw LodgeError(Errc::usage, "reserve: --part-size needs --parts");
        const uint64_t part_bytes = *parts ? flags::part_size(*part_size, ctx.cfg().part_size) : 0;
        flags::run_prefix(o->in.prefix, "--prefix");
        ops::UploadSettings s = ops::direct_settings(ctx.cfg(), inputs_of(*o, ctx), true);
        auto store = ctx.open_store();
        auto d =
            ops::reserve_direct(ctx.ledger(), *store, s, util::system_clock(),
                                {o->paths.front(), static_cast<uint64_t>(*size), hex, expires_s, part_bytes});
        print_reservation(ctx, d, ops::reservation_word(d.reserved, d.r));
        return ops::reservation_exit_status(d.reserved, d.r);
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
            ops::UploadInputs none;
            none.with_owner = false;
            ops::UploadSettings s = ops::direct_settings(ctx.cfg(), none, false);
            auto store = ctx.open_store();
            const auto report =
                ops::confirm_direct(ctx.ledger(), *store, s, util::system_clock(), *ids, *all_due);
            for (const auto &r : report.results)
              print_direct_result(ctx, r, r.outcome == ops::UploadOutcome::active ? "active" : "failed");
            if (*all_due && !ctx.g.json && !ctx.g.quiet)
              std::fprintf(
                  stderr, "lodge: %s whose URL expired\n",
                  util::plural(static_cast<int64_t>(report.results.size()), "direct upload").c_str());
            return report.exit_status();
          }};
}

} // namespace lodge::cli
