// lodge sweep, repair, reconcile, delete, tasks, retry: the options mapped to the ops call,
// its report rendered (text or --json), and the exit status ops decided returned.
#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/settings.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <utility>

namespace lodge::cli {

std::string default_worker() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

bool speak(const Context &ctx) {
  return !ctx.g.quiet && (ctx.stdout_tty || ctx.g.verbose > 0);
}

Command recorded_job(const char *job, Command c) {
  auto *app = c.app;
  c.run = [job, app, run = std::move(c.run)](Context &ctx) {
    auto *dry = app->get_option_no_throw("--dry-run");
    if (dry && dry->count() > 0) return run(ctx); // a dry run records nothing
    return ops::run_recorded(
        ctx, job, default_worker(), util::system_clock(), [&] { return run(ctx); },
        [job](const std::string &why) {
          std::fprintf(stderr, "lodge: warning: could not record the failed %s run: %s\n", job,
                       util::escape_for_terminal(why).c_str());
        });
  };
  return c;
}

namespace {

// A job's text line: "JOB: NAME N, NAME N, ...".
void say_counts(const char *job, std::initializer_list<const char *> names,
                std::initializer_list<int64_t> counts) {
  std::string line = job + std::string(":");
  const auto *n = counts.begin();
  for (const char *name : names) {
    line += (n == counts.begin() ? " " : ", ") + std::string(name) + " " + std::to_string(*n);
    ++n;
  }
  std::printf("%s\n", line.c_str());
}

struct SweepCli {
  ops::SweepOptions opts; // --limit, --worker-id, --dry-run
  int jobs = 0;
  std::string lease, max_runtime;
};

} // namespace

Command add_sweep(CLI::App &app) {
  auto o = std::make_shared<SweepCli>();
  auto *sub =
      app.add_subcommand("sweep", "Run due cleanup tasks: delete what failed uploads and deletions left");
  sub->add_option("--limit", o->opts.limit, "Most tasks to run (default 1000)")
      ->check(CLI::Range(1, 1000000));
  sub->add_option("--lease", o->lease, "Lease per task (default: sweep.lease, 2m)");
  sub->add_option("--worker-id", o->opts.worker_id, "Name in lease_owner (default host:pid)");
  sub->add_option("--max-runtime", o->max_runtime, "Stop claiming after this long");
  sub->add_flag("--dry-run", o->opts.dry_run, "Only count the tasks that are due");
  sub->add_option("-j,--jobs", o->jobs, "Store connections deleting at once (default: config jobs, 8)")
      ->check(CLI::Range(1, 256));
  return {sub, [o](Context &ctx) {
            auto so = ops::sweep_options(ctx.cfg(), o->opts);
            if (o->jobs > 0) so.jobs = o->jobs;
            so.lease_ms = flags::duration(o->lease, "--lease", so.lease_ms, {}); // as sweep.lease
            so.max_runtime_ms = flags::duration(o->max_runtime, "--max-runtime", 0);
            if (so.worker_id.empty()) so.worker_id = default_worker();
            so.open_store = [&ctx] { return ctx.open_store(); };
            auto &l = ctx.ledger();
            auto st = ctx.open_store();
            auto r = ops::sweep(l, l, *st, so, util::system_clock());
            // Each task's error was said once already, as it happened (the log).
            if (ctx.g.json)
              ctx.print_json(ops::job_counts(r));
            else if (so.dry_run)
              std::printf("sweep: %s due\n", util::plural(r.would_claim, "task").c_str());
            else if (speak(ctx))
              say_counts("sweep",
                         {"claimed", "deleted", "ignored", "postponed", "retried", "dead-lettered",
                          "lease lost", "verify passes scheduled", "verified", "kept"},
                         {r.claimed, r.deleted, r.ignored, r.postponed, r.retried, r.dead_lettered,
                          r.lease_lost, r.verify_scheduled, r.verified, r.kept});
            return ops::exit_status(r);
          }};
}

Command add_repair(CLI::App &app) {
  auto o = std::make_shared<ops::RepairOptions>();
  auto *sub = app.add_subcommand("repair", "Fail uploads past their deadline and schedule their cleanup");
  sub->add_option("--limit", o->limit, "Most records to examine (default 1000)")
      ->check(CLI::Range(1, 1000000));
  sub->add_flag("--dry-run", o->dry_run, "Only count overdue uploads");
  return {sub, [o](Context &ctx) {
            auto ro = ops::repair_options(ctx.cfg(), *o);
            ro.worker_id = default_worker();
            ro.open_store = [&ctx] { return ctx.open_store(); };
            ro.marker_unread = [](const Error &e) {
              std::fprintf(stderr, "lodge: warning: repair: could not read the store's id marker: %s\n",
                           util::escape_for_terminal(e.message).c_str());
            };
            auto &l = ctx.ledger();
            auto r = ops::repair(l, l, l, ro, util::system_clock());
            if (ctx.g.json)
              ctx.print_json(ops::job_counts(r));
            else if (speak(ctx) || ro.dry_run)
              say_counts("repair", {ro.dry_run ? "overdue" : "examined", "repaired", "skipped"},
                         {r.examined, r.repaired, r.skipped});
            return ops::exit_status(r);
          }};
}

namespace {
struct ReconcileCli {
  ops::ReconcileOptions opts; // --apply, --verify, --roll-forward, --strict
  std::string older;
};

// A finding as its text line says it, with what --apply did to it.
void print_finding(const ops::Finding &f) {
  const char *done = !f.applied                           ? ""
                     : f.kind == "confirmed_after_backup" ? " (made ACTIVE)"
                     : f.kind == "stale_multipart"        ? " (aborted)"
                     : f.kind == "tag_mismatch"           ? " (re-tagged)"
                     : f.kind == "stale_temp"             ? " (removed)"
                                                          : " (queued)";
  std::printf("%-16s %s  %s%s\n", f.kind.c_str(), util::escape_for_terminal(f.key).c_str(),
              util::escape_for_terminal(f.detail).c_str(), done);
  std::fflush(stdout); // what was applied is out even if a later step fails
}

// The text summary: the counts by kind, what was applied, whether a step failed.
void print_reconcile(const ops::ReconcileReport &r, bool apply) {
  std::string line =
      "reconcile: " + util::plural(r.objects, "object") + ", " + util::plural(r.rows, "record");
  for (const auto &[k, v] : r.counts)
    line += ", " + k + " " + std::to_string(v);
  if (apply) line += ", applied " + std::to_string(r.applied);
  if (r.error) line += " (incomplete: a step failed)";
  std::printf("%s\n", line.c_str());
}
} // namespace

Command add_reconcile(CLI::App &app) {
  auto o = std::make_shared<ReconcileCli>();
  auto *sub = app.add_subcommand(
      "reconcile",
      "Compare the store with the ledger: dangling, corrupt, leftovers; others' objects reported");
  sub->add_flag("--apply", o->opts.apply,
                "Queue leftovers of dead rows for sweep; abort their stale multipart uploads; put lodge's "
                "state tag back where another tool changed it; remove stale temporary files");
  sub->add_flag("--verify", o->opts.verify, "Read every ACTIVE object back and compare its SHA-256");
  sub->add_option("--older-than", o->older, "Ignore objects younger than this (default: the longest grace)");
  sub->add_flag("--roll-forward", o->opts.roll_forward,
                "With --apply, in a diverged ledger: make uploads confirmed after the backup ACTIVE");
  sub->add_flag("--strict", o->opts.strict,
                "Count objects other writers own (unmanaged, foreign) as findings: list them, exit 1");
  return {sub, [o](Context &ctx) {
            if (o->opts.roll_forward && !o->opts.apply)
              throw LodgeError(Errc::usage, "reconcile: --roll-forward needs --apply");
            auto ro = ops::reconcile_options(ctx.cfg(), o->opts);
            ro.older_than_ms = flags::duration(o->older, "--older-than", ro.older_than_ms);
            ro.worker_id = default_worker();
            // Others' objects are counted always, listed one by one only when asked (-v) or
            // when they count (--strict): a shared bucket's nightly run stays short.
            const bool list_others = ro.strict || ctx.g.verbose > 0;
            auto st = ctx.open_store();
            nlohmann::json items = nlohmann::json::array();
            auto &l = ctx.ledger();
            auto r = ops::reconcile(l, l, *st, ro, util::system_clock(), [&](const ops::Finding &f) {
              if (!list_others && ops::others_object(f.kind)) return;
              if (!ctx.g.json)
                print_finding(f);
              else if (items.size() < 1000)
                items.push_back(ops::finding_json(f));
            });
            auto j = ops::job_counts(r);
            if (r.error) j["error"] = {{"code", std::string(r.error->name())}, {"message", r.error->message}};
            if (ctx.g.json) {
              j["items"] = items;
              ctx.print_json(j);
            } else if (speak(ctx) || !r.clean()) {
              print_reconcile(r, ro.apply);
            }
            if (r.error)
              std::fprintf(stderr, "lodge: error: reconcile stopped after applying %lld: %s (%s)\n",
                           static_cast<long long>(r.applied),
                           util::escape_for_terminal(r.error->message).c_str(),
                           std::string(r.error->name()).c_str());
            else if (!ctx.g.json && !ctx.g.quiet)
              for (const auto &[kind, why] : r.skipped)
                std::printf("reconcile: %s not checked: %s\n", kind.c_str(),
                            util::escape_for_terminal(why).c_str());
            return ops::exit_status(r);
          }};
}

Command add_delete(CLI::App &app) {
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto *sub = app.add_subcommand(
      "delete", "Delete files by id: quota freed now, objects removed by sweep after the grace");
  sub->add_option("ids", *ids, "File ids")->required();
  return {sub, [ids](Context &ctx) {
            auto o = ops::delete_options(ctx.cfg());
            o.owner = ctx.owner();
            auto &l = ctx.ledger();
            auto r = ops::delete_files(l, l, *ids, o, util::system_clock(), [&](const ops::DeleteItem &d) {
              using ledger::DeleteOutcome;
              const char *outcome = d.outcome == DeleteOutcome::deleted     ? "deleted"
                                    : d.outcome == DeleteOutcome::not_found ? "not_found"
                                                                            : "not_active";
              if (ctx.g.json)
                ctx.print_json(nlohmann::json{{"id", d.id}, {"outcome", outcome}});
              else if (!ctx.g.quiet || d.outcome != DeleteOutcome::deleted)
                std::printf("%-10s #%lld%s\n", outcome, static_cast<long long>(d.id),
                            d.outcome == DeleteOutcome::not_found    ? " (no such file of this owner)"
                            : d.outcome == DeleteOutcome::not_active ? " (not an active file)"
                                                                     : "");
            });
            return ops::exit_status(r);
          }};
}

Command add_tasks(CLI::App &app) {
  auto status = std::make_shared<std::string>("FAILED");
  auto *sub =
      app.add_subcommand("tasks", "List cleanup tasks (dead letters by default) with their last error");
  choices(sub->add_option("--status", *status, "PENDING, PROCESSING, RETRY, SUCCESS, FAILED, IGNORED or all"),
          {"PENDING", "PROCESSING", "RETRY", "SUCCESS", "FAILED", "IGNORED", "all"});
  return {sub, [status](Context &ctx) {
            // choices() admits only the names and "all". Each task is printed as it is read.
            const auto which = *status == "all" ? std::nullopt : ledger::parse_task_status(*status);
            ctx.reader().scan_tasks(which, [&](const ledger::TaskRecord &t) {
              if (ctx.g.json) {
                ctx.print_json(nlohmann::json{
                    {"id", t.id},
                    {"record_id", t.record_id},
                    {"object_key", t.object_key},
                    {"status", ledger::to_string(t.status)},
                    {"retry_count", t.retry_count},
                    {"next_retry_at", util::format_rfc3339_ms(t.next_retry_at)},
                    {"lease_version", t.lease_version},
                    {"verify_pass", t.verify_pass},
                    {"tag_owed", t.tag_owed},
                    {"last_error", t.last_error ? nlohmann::json(*t.last_error) : nlohmann::json(nullptr)}});
              } else {
                std::printf("%-6lld %-10s retries %-3lld %s  %s\n", static_cast<long long>(t.id),
                            ledger::to_string(t.status), static_cast<long long>(t.retry_count),
                            util::escape_for_terminal(t.object_key).c_str(),
                            t.last_error ? util::escape_for_terminal(*t.last_error).c_str() : "");
              }
              return true;
            });
            return exit_status(Errc::ok);
          }};
}

Command add_retry(CLI::App &app) {
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto *sub = app.add_subcommand("retry", "Put dead-lettered tasks back to PENDING, due now");
  sub->add_option("task_ids", *ids, "Task ids (see lodge tasks)")->required();
  return {sub, [ids](Context &ctx) {
            auto r = ops::retry_tasks(ctx.ledger(), *ids, util::system_clock(), [&](const ops::RetryItem &t) {
              if (ctx.g.json)
                ctx.print_json(nlohmann::json{{"task_id", t.task_id},
                                              {"outcome", t.requeued ? "pending" : "not_failed"}});
              else if (!ctx.g.quiet || !t.requeued)
                std::printf("%s task %lld\n", t.requeued ? "requeued" : "not a dead letter:",
                            static_cast<long long>(t.task_id));
            });
            return ops::exit_status(r);
          }};
}

} // namespace lodge::cli
