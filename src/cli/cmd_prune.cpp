// lodge prune: retention over the builds a CI uploads under their own prefixes.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/match/filter.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/prune.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>

namespace lodge::cli {
namespace {

struct PruneCli {
  std::string prefix_glob, group_by = "owner", keep_within;
  std::string keep_last, keep_hourly, keep_daily, keep_weekly, keep_monthly, keep_yearly;
  std::vector<std::string> keep_tags, keep_metadata;
  bool expired = false, dry_run = false;
  bool every_owner = false; // --owner '*'
};

ops::PrunePolicy policy_of(const PruneCli &o) {
  ops::PrunePolicy p;
  auto count = [](const std::string &text, const char *flag) {
    return text.empty() ? 0 : ops::parse_keep_count(text, flag);
  };
  p.keep_last = count(o.keep_last, "--keep-last");
  p.keep_hourly = count(o.keep_hourly, "--keep-hourly");
  p.keep_daily = count(o.keep_daily, "--keep-daily");
  p.keep_weekly = count(o.keep_weekly, "--keep-weekly");
  p.keep_monthly = count(o.keep_monthly, "--keep-monthly");
  p.keep_yearly = count(o.keep_yearly, "--keep-yearly");
  if (!o.keep_within.empty()) {
    p.keep_within_ms = config::duration_value(o.keep_within, "--keep-within", Errc::usage);
  }
  for (const auto &t : o.keep_tags) {
    auto kv = store::parse_assignment(t, "--keep-tag");
    if (!kv) throw LodgeError(kv.error());
    p.keep_tags.emplace_back(kv->first, kv->second);
  }
  for (const auto &m : o.keep_metadata) {
    auto kv = store::parse_assignment(m, "--keep-metadata");
    if (!kv) throw LodgeError(kv.error());
    // Metadata names are recorded lowercase, as upload's --metadata records them.
    p.keep_metadata.emplace_back(util::to_lower(kv->first), kv->second);
  }
  return p;
}

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

nlohmann::json plan_json(const ops::PruneReport &r, bool dry_run, bool expired) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto &g : r.groups) {
    nlohmann::json snaps = nlohmann::json::array();
    for (const auto &d : g.snapshots) {
      nlohmann::json shared = nlohmann::json::array();
      for (const auto &k : d.kept_shared)
        shared.push_back({{"id", k.id},
                          {"bytes", k.size},
                          {"shared_by", {{"owner", k.sharer_owner}, {"prefix", k.sharer_prefix}}}});
      snaps.push_back({{"prefix", d.snapshot.run_prefix},
                       {"time", d.snapshot.time > 0 ? nlohmann::json(util::format_rfc3339_ms(d.snapshot.time))
                                                    : nlohmann::json(nullptr)},
                       {"files", d.snapshot.files},
                       {"bytes", d.snapshot.bytes},
                       {"uploading", d.snapshot.uploading},
                       {"action", d.keep ? "keep" : "remove"},
                       {"reasons", d.reasons},
                       {"removed_files", d.removed_files()},
                       {"removed_bytes", d.removed_bytes()},
                       {"kept_shared", shared}});
    }
    groups.push_back({{"owner", g.owner_id}, {"group", g.group}, {"snapshots", snaps}});
  }
  nlohmann::json j{
      {"dry_run", dry_run},
      {"groups", groups},
      {"removed",
       {{"snapshots", r.removed_snapshots}, {"files", r.deleted_files}, {"bytes", r.deleted_bytes}}}};
  j["expired"] = expired ? nlohmann::json{{"files", r.expired_files}, {"bytes", r.expired_bytes}}
                         : nlohmann::json(nullptr);
  return j;
}

void print_plan(const ops::PruneReport &r, bool dry_run, bool expired) {
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
  std::printf("prune: %s %s, %s, %s\n", dry_run ? "would remove" : "removed",
              util::plural(r.removed_snapshots, "snapshot").c_str(),
              util::plural(r.deleted_files, "file").c_str(),
              util::format_size(static_cast<uint64_t>(r.deleted_bytes)).c_str());
  if (expired)
    std::printf("prune: %s %s, %s\n", dry_run ? "would expire" : "expired",
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
  sub->add_option("--keep-last", o->keep_last, "Keep the newest N snapshots of each group (or 'unlimited')")
      ->type_name("N");
  sub->add_option("--keep-within", o->keep_within,
                  "Keep snapshots newer than this before the group's newest one (7d, 36h)")
      ->type_name("D");
  sub->add_option("--keep-hourly", o->keep_hourly,
                  "Keep the newest snapshot of each of the last N hours (UTC)")
      ->type_name("N");
  sub->add_option("--keep-daily", o->keep_daily, "Keep the newest snapshot of each of the last N days (UTC)")
      ->type_name("N");
  sub->add_option("--keep-weekly", o->keep_weekly, "Keep the newest snapshot of each of the last N ISO weeks")
      ->type_name("N");
  sub->add_option("--keep-monthly", o->keep_monthly, "Keep the newest snapshot of each of the last N months")
      ->type_name("N");
  sub->add_option("--keep-yearly", o->keep_yearly, "Keep the newest snapshot of each of the last N years")
      ->type_name("N");
  sub->add_option("--keep-tag", o->keep_tags,
                  "Keep snapshots holding a file with tag NAME=VALUE (repeatable)")
      ->type_name("K=V");
  sub->add_option("--keep-metadata", o->keep_metadata,
                  "Keep snapshots holding a file with metadata NAME=VALUE (repeatable)")
      ->type_name("K=V");
  sub->add_flag("--expired", o->expired, "Also delete files past the expiry upload --expire-after gave them");
  sub->add_flag("--dry-run", o->dry_run,
                "Print the plan (kept with the rules that keep them, removed); change nothing");
  Action body = [o](Context &ctx) {
    ops::PruneOptions po;
    po.policy = policy_of(*o);
    if (po.policy.empty() && !o->expired)
      throw LodgeError(Errc::usage, "prune: no policy: give at least one --keep-* option, or --expired "
                                    "(an empty policy would remove every build)");
    po.group_by = ops::parse_group_by(o->group_by);
    if (!o->prefix_glob.empty()) {
      (void)match::Glob::compile(o->prefix_glob); // a bad pattern is a usage error before any work
      po.prefix_glob = o->prefix_glob;
    }
    // As list: the owner's snapshots; --owner '*' every owner's. --expired alone needs
    // no owner: an expiry is what each upload asked for, whoever's it is.
    if (!po.policy.empty()) po.owner = o->every_owner ? std::string("*") : ctx.owner();
    const auto &c = ctx.cfg();
    po.expired = o->expired;
    po.dry_run = o->dry_run;
    // Rows do not choose the grace they get here: the longest, as sweep's.
    po.grace_ms = ops::grace_for(c, std::nullopt);
    po.max_retries = c.sweep.max_retries;
    int64_t started = util::system_clock().now_ms();
    auto &l = o->dry_run ? ctx.reader() : ctx.ledger();
    auto rep = ops::prune(l, po, util::system_clock());
    if (!o->dry_run)
      ctx.ledger().record_job_run({"prune", default_worker(), started, util::system_clock().now_ms(), "ok",
                                   nlohmann::json{{"removed_snapshots", rep.removed_snapshots},
                                                  {"deleted_files", rep.deleted_files},
                                                  {"deleted_bytes", rep.deleted_bytes},
                                                  {"expired_files", rep.expired_files},
                                                  {"expired_bytes", rep.expired_bytes}}
                                       .dump()});
    if (ctx.g.json)
      ctx.print_json(plan_json(rep, o->dry_run, o->expired));
    else if (speak(ctx) || o->dry_run)
      print_plan(rep, o->dry_run, o->expired);
    return exit_status(Errc::ok);
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
