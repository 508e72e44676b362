// lodge sweep, repair, reconcile, delete, tasks, retry.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/reconcile.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/ops/jobs/sweep.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace lodge::cli {
namespace {

// A duration flag's value (the one grammar and range check, config::duration_value), or
// `fallback` when it was not given.
int64_t duration_option(const std::string &text, const char *name, int64_t fallback,
                        config::DurationRange range = config::k_any_duration) {
  return text.empty() ? fallback : config::duration_value(text, name, Errc::usage, range);
}

void record(Context &ctx, const char *job, const std::string &worker, int64_t started, bool ok,
            const nlohmann::json &counts) {
  ctx.ledger().record_job_run(
      {job, worker, started, util::system_clock().now_ms(), ok ? "ok" : "failed", counts.dump()});
}

} // namespace

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
    int64_t started = util::system_clock().now_ms();
    try {
      (void)ctx.ledger(); // opened first, so a failure anywhere later can be recorded in it
      return run(ctx);
    } catch (const std::exception &e) {
      const auto *le = dynamic_cast<const LodgeError *>(&e);
      nlohmann::json counts{{"error", le ? le->error().message : std::string(e.what())}};
      if (le) counts["code"] = std::string(le->error().name());
      try {
        // A ledger that could not be opened cannot take the record either.
        if (ctx.ledger_opened()) record(ctx, job, default_worker(), started, false, counts);
      } catch (const std::exception &again) {
        std::fprintf(stderr, "lodge: warning: could not record the failed %s run: %s\n", job,
                     util::escape_for_terminal(again.what()).c_str());
      }
      throw;
    }
  };
  return c;
}

namespace {
struct SweepCli {
  int limit = 1000;
  int jobs = 0;
  std::string lease, max_runtime, worker_id;
  bool dry_run = false;
};
} // namespace

Command add_sweep(CLI::App &app) {
  auto o = std::make_shared<SweepCli>();
  auto *sub =
      app.add_subcommand("sweep", "Run due cleanup tasks: delete what failed uploads and deletions left");
  sub->add_option("--limit", o->limit, "Most tasks to run (default 1000)")->check(CLI::Range(1, 1000000));
  sub->add_option("--lease", o->lease, "Lease per task (default: sweep.lease, 2m)");
  sub->add_option("--worker-id", o->worker_id, "Name in lease_owner (default host:pid)");
  sub->add_option("--max-runtime", o->max_runtime, "Stop claiming after this long");
  sub->add_flag("--dry-run", o->dry_run, "Only count the tasks that are due");
  sub->add_option("-j,--jobs", o->jobs, "Store connections deleting at once (default: config jobs, 8)")
      ->check(CLI::Range(1, 256));
  return {sub, [o](Context &ctx) {
            const auto &c = ctx.cfg();
            ops::SweepOptions so;
            so.limit = o->limit;
            so.jobs = o->jobs > 0 ? o->jobs : c.jobs;
            so.open_store = [&ctx] { return ctx.open_store(); };
            so.lease_ms = duration_option(o->lease, "--lease", c.sweep.lease_ms, {}); // as sweep.lease
            so.max_runtime_ms = duration_option(o->max_runtime, "--max-runtime", 0);
            so.worker_id = o->worker_id.empty() ? default_worker() : o->worker_id;
            so.dry_run = o->dry_run;
            // Tasks do not record their policy: the longest grace.
            so.cleanup = {ops::grace_for(c, std::nullopt), c.sweep.backoff_base_ms, c.sweep.backoff_max_ms};
            int64_t started = util::system_clock().now_ms();
            auto &l = ctx.ledger();
            auto st = ctx.open_store();
            auto sum = ops::sweep(l, *st, so, util::system_clock());
            nlohmann::json j{{"claimed", sum.claimed},
                             {"deleted", sum.deleted},
                             {"ignored", sum.ignored},
                             {"postponed", sum.postponed},
                             {"retried", sum.retried},
                             {"dead_lettered", sum.dead_lettered},
                             {"lease_lost", sum.lease_lost},
                             {"unreachable", sum.unreachable},
                             {"kept", sum.kept}};
            j["verify_scheduled"] = sum.verify_scheduled; // of the deleted: a verify pass follows
            j["verified"] = sum.verified;                 // of the deleted: this was the verify pass
            if (o->dry_run) j = {{"due", sum.would_claim}, {"dry_run", true}};
            bool ok = sum.dead_lettered == 0 && sum.retried == 0;
            if (!o->dry_run) record(ctx, "sweep", so.worker_id, started, ok, j);
            // Each task's error was said once already, as it happened (the log).
            if (ctx.g.json)
              ctx.print_json(j);
            else if (speak(ctx) || o->dry_run) {
              if (o->dry_run)
                std::printf("sweep: %s due\n", util::plural(sum.would_claim, "task").c_str());
              else
                std::printf(
                    "sweep: claimed %lld, deleted %lld, ignored %lld, postponed %lld, retried %lld, "
                    "dead-lettered %lld, lease lost %lld, verify passes scheduled %lld, verified %lld, "
                    "kept %lld\n",
                    static_cast<long long>(sum.claimed), static_cast<long long>(sum.deleted),
                    static_cast<long long>(sum.ignored), static_cast<long long>(sum.postponed),
                    static_cast<long long>(sum.retried), static_cast<long long>(sum.dead_lettered),
                    static_cast<long long>(sum.lease_lost), static_cast<long long>(sum.verify_scheduled),
                    static_cast<long long>(sum.verified), static_cast<long long>(sum.kept));
            }
            if (sum.claimed > 0 && sum.deleted + sum.ignored + sum.postponed + sum.kept == 0 &&
                sum.unreachable > 0 && sum.unreachable == sum.retried + sum.dead_lettered)
              return exit_status(Errc::storage_unavailable);
            return sum.dead_lettered > 0 ? exit_items_failed() : exit_status(Errc::ok);
          }};
}

Command add_repair(CLI::App &app) {
  auto limit = std::make_shared<int>(1000);
  auto dry = std::make_shared<bool>(false);
  auto *sub = app.add_subcommand("repair", "Fail uploads past their deadline and schedule their cleanup");
  sub->add_option("--limit", *limit, "Most records to examine (default 1000)")->check(CLI::Range(1, 1000000));
  sub->add_flag("--dry-run", *dry, "Only count overdue uploads");
  return {sub, [limit, dry](Context &ctx) {
            const auto &c = ctx.cfg();
            ops::RepairOptions ro;
            ro.limit = *limit;
            ro.dry_run = *dry;
            ro.max_retries = c.sweep.max_retries;
            ro.config = &c;
            int64_t started = util::system_clock().now_ms();
            if (!*dry) {
              // A restored ledger would fail uploads its other copy confirmed: look at the
              // store's id marker first. Without it, the ledger's own record decides.
              auto st = ctx.open_store();
              auto d = ops::check_divergence(ctx.ledger(), *st, util::system_clock());
              if (!d)
                std::fprintf(stderr, "lodge: warning: repair: could not read the store's id marker: %s\n",
                             util::escape_for_terminal(d.error().message).c_str());
            }
            auto sum = ops::repair(ctx.ledger(), ro, util::system_clock());
            nlohmann::json j{{"examined", sum.examined},
                             {"repaired", sum.repaired},
                             {"abandoned", sum.abandoned},
                             {"skipped", sum.skipped}};
            if (*dry)
              j = {{"overdue", sum.examined}, {"dry_run", true}};
            else
              record(ctx, "repair", default_worker(), started, true, j);
            if (ctx.g.json)
              ctx.print_json(j);
            else if (speak(ctx) || *dry)
              std::printf("repair: %s %lld, repaired %lld, skipped %lld\n", *dry ? "overdue" : "examined",
                          static_cast<long long>(sum.examined), static_cast<long long>(sum.repaired),
                          static_cast<long long>(sum.skipped));
            return exit_status(Errc::ok);
          }};
}

Command add_reconcile(CLI::App &app) {
  auto apply = std::make_shared<bool>(false);
  auto verify = std::make_shared<bool>(false);
  auto older = std::make_shared<std::string>();
  auto *sub = app.add_subcommand(
      "reconcile",
      "Compare the store with the ledger: dangling, corrupt, leftovers; others' objects reported");
  sub->add_flag("--apply", *apply,
                "Queue leftovers of dead rows for sweep; abort their stale multipart uploads; put lodge's "
                "state tag back where another tool changed it; remove stale temporary files");
  sub->add_flag("--verify", *verify, "Read every ACTIVE object back and compare its SHA-256");
  sub->add_option("--older-than", *older, "Ignore objects younger than this (default: the longest grace)");
  auto roll = std::make_shared<bool>(false);
  sub->add_flag("--roll-forward", *roll,
                "With --apply, in a diverged ledger: make uploads confirmed after the backup ACTIVE");
  auto strict = std::make_shared<bool>(false);
  sub->add_flag("--strict", *strict,
                "Count objects other writers own (unmanaged, foreign) as findings: list them, exit 1");
  return {sub, [apply, verify, older, roll, strict](Context &ctx) {
            if (*roll && !*apply) throw LodgeError(Errc::usage, "reconcile: --roll-forward needs --apply");
            const auto &c = ctx.cfg();
            ops::ReconcileOptions ro;
            ro.apply = *apply;
            ro.verify = *verify;
            ro.older_than_ms = duration_option(*older, "--older-than", ops::grace_for(c, std::nullopt));
            ro.max_retries = c.sweep.max_retries;
            ro.roll_forward = *roll;
            ro.strict = *strict;
            ro.temp_dead_after_ms = ops::temp_dead_after(c);
            // Others' objects are counted always, listed one by one only when asked (-v) or
            // when they count (--strict): a shared bucket's nightly run stays short.
            const bool list_others = *strict || ctx.g.verbose > 0;
            int64_t started = util::system_clock().now_ms();
            auto st = ctx.open_store();
            nlohmann::json items = nlohmann::json::array();
            auto sum =
                ops::reconcile(ctx.ledger(), *st, ro, util::system_clock(), [&](const ops::Finding &f) {
                  if (!list_others && ops::others_object(f.kind)) return;
                  if (ctx.g.json) {
                    if (items.size() < 1000)
                      items.push_back({{"kind", f.kind},
                                       {"key", f.key},
                                       {"record_id",
                                        f.record_id ? nlohmann::json(*f.record_id) : nlohmann::json(nullptr)},
                                       {"detail", f.detail},
                                       {"applied", f.applied}});
                  } else {
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
                });
            nlohmann::json counts(sum.counts);
            nlohmann::json j{{"objects", sum.objects}, {"rows", sum.rows},
                             {"found", counts},        {"skipped", nlohmann::json(sum.skipped)},
                             {"applied", sum.applied}, {"clean", sum.clean() && !sum.error}};
            j["diverged"] = sum.diverged;
            if (sum.error) { // recorded as every failed run is: the message, and the code apart
              j["error"] = sum.error->message;
              j["code"] = std::string(sum.error->name());
            }
            record(ctx, "reconcile", default_worker(), started, sum.clean() && !sum.error, j);
            if (sum.error)
              j["error"] = {{"code", std::string(sum.error->name())}, {"message", sum.error->message}};
            if (ctx.g.json) {
              j["items"] = items;
              ctx.print_json(j);
            } else if (speak(ctx) || !sum.clean()) {
              std::string line = "reconcile: " + util::plural(sum.objects, "object") + ", " +
                                 util::plural(sum.rows, "record");
              for (const auto &[k, v] : sum.counts)
                line += ", " + k + " " + std::to_string(v);
              if (*apply) line += ", applied " + std::to_string(sum.applied);
              if (sum.error) line += " (incomplete: a step failed)";
              std::printf("%s\n", line.c_str());
            }
            if (sum.error) {
              std::fprintf(stderr, "lodge: error: reconcile stopped after applying %lld: %s (%s)\n",
                           static_cast<long long>(sum.applied),
                           util::escape_for_terminal(sum.error->message).c_str(),
                           std::string(sum.error->name()).c_str());
              return exit_status(sum.error->code);
            }
            if (!ctx.g.json && !ctx.g.quiet)
              for (const auto &[kind, why] : sum.skipped)
                std::printf("reconcile: %s not checked: %s\n", kind.c_str(),
                            util::escape_for_terminal(why).c_str());
            return sum.clean() ? exit_status(Errc::ok) : exit_items_failed();
          }};
}

Command add_delete(CLI::App &app) {
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto *sub = app.add_subcommand(
      "delete", "Delete files by id: quota freed now, objects removed by sweep after the grace");
  sub->add_option("ids", *ids, "File ids")->required();
  return {sub, [ids](Context &ctx) {
            const auto &c = ctx.cfg();
            auto owner = ctx.owner();
            int bad = 0;
            for (auto id : *ids) {
              auto rec = ctx.ledger().find_file(id);
              int64_t grace = ops::grace_for(c, rec ? std::optional<std::string>(rec->policy) : std::nullopt);
              auto r = ctx.ledger().soft_delete(id, owner, util::system_clock().now_ms(), grace,
                                                c.sweep.max_retries);
              const char *outcome = r == ledger::DeleteOutcome::deleted     ? "deleted"
                                    : r == ledger::DeleteOutcome::not_found ? "not_found"
                                                                            : "not_active";
              if (r != ledger::DeleteOutcome::deleted) ++bad;
              if (ctx.g.json)
                ctx.print_json(nlohmann::json{{"id", id}, {"outcome", outcome}});
              else if (!ctx.g.quiet || r != ledger::DeleteOutcome::deleted)
                std::printf("%-10s #%lld%s\n", outcome, static_cast<long long>(id),
                            r == ledger::DeleteOutcome::not_found    ? " (no such file of this owner)"
                            : r == ledger::DeleteOutcome::not_active ? " (not an active file)"
                                                                     : "");
            }
            return bad > 0 ? exit_items_failed() : exit_status(Errc::ok);
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
            int bad = 0;
            for (auto id : *ids) {
              bool ok = ctx.ledger().retry_task(id, util::system_clock().now_ms()) ==
                        ledger::RetryOutcome::requeued;
              if (!ok) ++bad;
              if (ctx.g.json)
                ctx.print_json(nlohmann::json{{"task_id", id}, {"outcome", ok ? "pending" : "not_failed"}});
              else if (!ctx.g.quiet || !ok)
                std::printf("%s task %lld\n",
                            ok ? "requeued" : "not a dead letter:", static_cast<long long>(id));
            }
            return bad > 0 ? exit_items_failed() : exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
