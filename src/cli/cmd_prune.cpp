// lodge prune: retention over the builds a CI uploads under their own prefixes. The options
// mapped to ops::prune, its plan rendered (text or --json).
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/match/filter.hpp>
#include <lodge/ops/jobs/settings.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>

namespace lodge::cli {
namespace {

struct PruneCli {
  ops::PruneOptions opts; // --expired, --dry-run
  std::string prefix_glob, group_by = "owner";
  ops::PolicyText keep;
  bool every_owner = false; // --owner '*'
};

// A snapshot's time; a build in progress with no file ACTIVE yet has none ("-").
std::string utc(int64_t ms) {
  return ms > 0 ? util::format_utc(ms, "%Y-%m-%dT%H:%M:%SZ") : "-";
}

std::string joined(const std::vector<std::string> &v) {
  std::string out;
  for (const auto &s : v)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

void print_plan(const ops::PruneReport &r) {
  for (const auto &g : r.groups) {
    std::printf("group %s%s%s\n", util::escape_for_terminal(g.owner_id).c_str(), g.group.empty() ? "" : " ",
                util::escape_for_terminal(g.group).c_str());
    for (const auto &d : g.snapshots) {
      std::string line = "  " + std::string(d.keep ? "keep  " : "remove") + "  " +
                         util::escape_for_terminal(d.snapshot.run_prefix) + "  " + utc(d.snapshot.time) +
                         "  " + util::plural(d.snapshot.files, "file") + "  " +
                         util::format_size(static_cast<uint64_t>(d.snapshot.bytes));
      if (d.keep) line += "  " + joined(d.reasons);
      if (!d.kept_shared.empty())
        line += "  (" + util::plural(static_cast<int64_t>(d.kept_shared.size()), "file") +
                " kept: shared by " + util::escape_for_terminal(d.kept_shared.front().sharer_prefix) + ")";
      std::printf("%s\n", line.c_str());
    }
  }
  std::printf("prune: %s %s, %s, %s\n", r.dry_run ? "would remove" : "removed",
              util::plural(r.removed_snapshots, "snapshot").c_str(),
              util::plural(r.deleted_files, "file").c_str(),
              util::format_size(static_cast<uint64_t>(r.deleted_bytes)).c_str());
  if (r.expired)
    std::printf("prune: %s %s, %s\n", r.dry_run ? "would expire" : "expired",
                util::plural(r.expired_files, "file").c_str(),
                util::format_size(static_cast<uint64_t>(r.expired_bytes)).c_str());
}

} // namespace

Command add_prune(CLI::App &app) {
  auto o = std::make_shared<PruneCli>();
  auto *sub = app.add_subcommand(
      "prune", "Remove old builds by a retention policy (restic's --keep-*), and files past their expiry");
  sub->add_option("--prefix-glob", o->prefix_glob,
                  "Snapshots (run prefixes) to consider, matched from the start: 'builds/*/*' (default: all)")
      ->type_name("G");
  sub->add_option("--group-by", o->group_by,
                  "Groups the policy applies to, within each owner: owner, segment:N (the prefix's first N "
                  "segments) or meta:KEY (default owner)")
      ->type_name("BY");
  auto &k = o->keep;
  sub->add_option("--keep-last", k.last, "Keep the newest N snapshots of each group (or 'unlimited')")
      ->type_name("N");
  sub->add_option("--keep-within", k.within,
                  "Keep snapshots newer than this before the group's newest one (7d, 36h)")
      ->type_name("D");
  sub->add_option("--keep-hourly", k.hourly, "Keep the newest snapshot of each of the last N hours (UTC)")
      ->type_name("N");
  sub->add_option("--keep-daily", k.daily, "Keep the newest snapshot of each of the last N days (UTC)")
      ->type_name("N");
  sub->add_option("--keep-weekly", k.weekly, "Keep the newest snapshot of each of the last N ISO weeks")
      ->type_name("N");
  sub->add_option("--keep-monthly", k.monthly, "Keep the newest snapshot of each of the last N months")
      ->type_name("N");
  sub->add_option("--keep-yearly", k.yearly, "Keep the newest snapshot of each of the last N years")
      ->type_name("N");
  sub->add_option("--keep-tag", k.tags, "Keep snapshots holding a file with tag NAME=VALUE (repeatable)")
      ->type_name("K=V");
  sub->add_option("--keep-metadata", k.metadata,
                  "Keep snapshots holding a file with metadata NAME=VALUE (repeatable)")
      ->type_name("K=V");
  sub->add_flag("--expired", o->opts.expired,
                "Also delete files past the expiry upload --expire-after gave them");
  sub->add_flag("--dry-run", o->opts.dry_run,
                "Print the plan (kept with the rules that keep them, removed); change nothing");
  Action body = [o](Context &ctx) {
    auto policy = ops::parse_policy(o->keep);
    if (policy.empty() && !o->opts.expired)
      throw LodgeError(Errc::usage, "prune: no policy: give at least one --keep-* option, or --expired "
                                    "(an empty policy would remove every build)");
    auto group_by = ops::parse_group_by(o->group_by);
    if (!o->prefix_glob.empty()) (void)match::Glob::compile(o->prefix_glob); // a usage error before any work
    // As list: the owner's snapshots; --owner '*' every owner's. --expired alone needs
    // no owner: an expiry is what each upload asked for, whoever's it is.
    std::string owner = policy.empty() || o->every_owner ? std::string("*") : ctx.owner();
    auto po = ops::prune_options(ctx.cfg(), o->opts);
    po.policy = std::move(policy);
    po.group_by = std::move(group_by);
    if (!o->prefix_glob.empty()) po.prefix_glob = o->prefix_glob;
    po.owner = owner;
    po.worker_id = default_worker();
    auto &l = po.dry_run ? ctx.reader() : ctx.ledger();
    auto r = ops::prune(l, l, po, util::system_clock());
    if (ctx.g.json)
      ctx.print_json(ops::plan_json(r));
    else if (speak(ctx) || po.dry_run)
      print_plan(r);
    return ops::exit_status(r);
  };
  // '*' is no owner id: taken out before anything loads the configuration, which the job's
  // record (opening the ledger first, unless --dry-run) does before the command runs, so
  // that a run and its dry run take the same arguments.
  Action recorded = recorded_job("prune", {sub, std::move(body)}).run;
  return {sub, [o, recorded](Context &ctx) {
            o->every_owner = ctx.g.owner == "*";
            if (o->every_owner) ctx.g.owner.clear();
            return recorded(ctx);
          }};
}

} // namespace lodge::cli
