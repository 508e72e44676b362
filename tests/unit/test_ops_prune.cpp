// ops/prune: the planner's restic semantics (counts, calendar buckets in UTC, the oldest
// kept while a count is left, durations back from the group's newest snapshot, holds,
// builds in progress), and the apply over the ledger fake.
#include "ops_fixture.hpp"
#include "support.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <lodge/ops/jobs/prune.hpp>
#include <lodge/ops/read/status.hpp>
#include <lodge/store/object_options.hpp>

using namespace lodge;

namespace {

// Wall ms of a UTC time.
int64_t at(int y, unsigned m, unsigned d, int hh = 0, int mm = 0) {
  using namespace std::chrono;
  auto t = sys_days{year{y} / month{m} / day{d}} + hours{hh} + minutes{mm};
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}

ops::Snapshot snap(const std::string &prefix, int64_t time) {
  ops::Snapshot s;
  s.owner_id = "o";
  s.run_prefix = prefix;
  s.time = time;
  s.files = 2;
  s.bytes = 20;
  return s;
}

// "prefix:reason,reason" for each kept snapshot and "prefix:-" for each removed one,
// newest first: the whole plan in one comparable string.
std::string shown(const std::vector<ops::SnapshotDecision> &plan) {
  std::string out;
  for (const auto &d : plan) {
    if (!out.empty()) out += " ";
    out += d.snapshot.run_prefix + ":";
    if (!d.keep) {
      CHECK(d.reasons.empty());
      out += "-";
      continue;
    }
    CHECK(!d.reasons.empty());
    for (size_t i = 0; i < d.reasons.size(); ++i)
      out += (i ? "," : "") + d.reasons[i];
  }
  return out;
}

const int64_t k_now = at(2030, 1, 1);

} // namespace

TEST_CASE("prune plan: keep-last keeps the newest N, whatever order they come in") {
  ops::PrunePolicy p;
  p.keep_last = 2;
  std::vector<ops::Snapshot> s{snap("b/3", at(2026, 5, 3)), snap("b/1", at(2026, 5, 1)),
                               snap("b/5", at(2026, 5, 5)), snap("b/4", at(2026, 5, 4)),
                               snap("b/2", at(2026, 5, 2))};
  CHECK(shown(ops::plan_group(s, p, k_now)) == "b/5:last b/4:last b/3:- b/2:- b/1:-");
  // More counts than snapshots: every one kept (the oldest by restic's "count left" rule too).
  p.keep_last = 10;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "b/5:last b/4:last b/3:last b/2:last b/1:last");
}

TEST_CASE("prune plan: keep-daily keeps each day's newest, and the group's oldest while a count is left") {
  std::vector<ops::Snapshot> s{
      snap("d4", at(2026, 3, 4, 8)), snap("d3b", at(2026, 3, 3, 23)), snap("d3a", at(2026, 3, 3, 12)),
      snap("d2", at(2026, 3, 2, 9)), snap("d1b", at(2026, 3, 1, 20)), snap("d1a", at(2026, 3, 1, 10)),
  };
  ops::PrunePolicy p;
  p.keep_daily = 3;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "d4:daily d3b:daily d3a:- d2:daily d1b:- d1a:-");
  // Four days for five counts: one count is left at the oldest snapshot, which restic keeps.
  p.keep_daily = 5;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "d4:daily d3b:daily d3a:- d2:daily d1b:daily d1a:daily");
  // unlimited: each day's newest, and the oldest (its count never runs out).
  p.keep_daily = ops::k_keep_unlimited;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "d4:daily d3b:daily d3a:- d2:daily d1b:daily d1a:daily");
}

TEST_CASE("prune plan: hours and days are UTC's") {
  // 23:59 and 00:00 UTC are different days and hours; 00:10 and 00:50 one hour.
  std::vector<ops::Snapshot> s{snap("c", at(2026, 6, 2, 0, 50)), snap("b", at(2026, 6, 2, 0, 10)),
                               snap("a", at(2026, 6, 1, 23, 59)), snap("z", at(2026, 5, 1, 12))};
  ops::PrunePolicy p;
  p.keep_hourly = 2;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "c:hourly b:- a:hourly z:-");
  p = {};
  p.keep_daily = 2;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "c:daily b:- a:daily z:-");
}

TEST_CASE("prune plan: weeks are ISO weeks, across the turn of the year") {
  // 2025-12-29 (Monday) and 2026-01-04 (Sunday) are both in ISO week 2026-W01; 2026-01-05
  // begins W02. A week counted by calendar year would split W01 in two.
  std::vector<ops::Snapshot> s{snap("w2", at(2026, 1, 5, 1)), snap("w1-sun", at(2026, 1, 4, 22)),
                               snap("w1-mon", at(2025, 12, 29, 1)), snap("w52", at(2025, 12, 28, 23))};
  ops::PrunePolicy p;
  p.keep_weekly = 3;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "w2:weekly w1-sun:weekly w1-mon:- w52:weekly");
  // 2024-12-30 (Monday) is in 2025-W01 and 2024-12-29 (Sunday) in 2024-W52.
  std::vector<ops::Snapshot> t{snap("a", at(2025, 1, 1)), snap("b", at(2024, 12, 30)),
                               snap("c", at(2024, 12, 29)), snap("d", at(2024, 12, 1))};
  p.keep_weekly = 2;
  CHECK(shown(ops::plan_group(t, p, k_now)) == "a:weekly b:- c:weekly d:-");
}

TEST_CASE("prune plan: months and years, in UTC") {
  std::vector<ops::Snapshot> s{snap("jan26", at(2026, 1, 1, 0, 0)), snap("dec25b", at(2025, 12, 31, 23, 59)),
                               snap("dec25a", at(2025, 12, 2)), snap("nov25", at(2025, 11, 30)),
                               snap("jun24", at(2024, 6, 1))};
  ops::PrunePolicy p;
  p.keep_monthly = 3;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "jan26:monthly dec25b:monthly dec25a:- nov25:monthly jun24:-");
  p = {};
  p.keep_yearly = 2;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "jan26:yearly dec25b:yearly dec25a:- nov25:- jun24:-");
  // Three years for five counts: the oldest kept as well.
  p.keep_yearly = 5;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "jan26:yearly dec25b:yearly dec25a:- nov25:- jun24:yearly");
}

TEST_CASE("prune plan: keep-within counts back from the group's newest snapshot, not from now") {
  const int64_t t = at(2026, 2, 10, 12);
  const int64_t day = 86'400'000;
  std::vector<ops::Snapshot> s{snap("n", t), snap("n-1d", t - day), snap("n-2d", t - 2 * day),
                               snap("n-3d", t - 3 * day)};
  ops::PrunePolicy p;
  p.keep_within_ms = 2 * day;
  // A month after the pipeline stopped, its last two days are still kept; exactly 2d older
  // than the newest is not within (restic: strictly after).
  CHECK(shown(ops::plan_group(s, p, t + 30 * day)) == "n:within 2d n-1d:within 2d n-2d:- n-3d:-");
  // A snapshot from the future (a clock ahead) does not move the window: restic takes the
  // newest snapshot not after now.
  s.push_back(snap("future", t + 100 * day));
  CHECK(shown(ops::plan_group(s, p, t + day)) == "future:within 2d n:within 2d n-1d:within 2d n-2d:- n-3d:-");
}

TEST_CASE("prune plan: rules are OR'ed; each kept snapshot names every rule that kept it") {
  std::vector<ops::Snapshot> s{snap("c", at(2026, 4, 3, 10)), snap("b", at(2026, 4, 3, 9)),
                               snap("a", at(2026, 4, 2, 9))};
  s[2].holds = {"tag keep=yes"};
  ops::PrunePolicy p;
  p.keep_last = 1;
  p.keep_daily = 1;
  p.keep_tags = {{"keep", "yes"}};
  // a is held by its tag (not counted: keep-daily's one count went to c); b by nothing.
  CHECK(shown(ops::plan_group(s, p, k_now)) == "c:last,daily b:- a:tag keep=yes");
  // A held snapshot still takes its place in the counts (restic: tags are not counted, the
  // buckets go on).
  s[0].holds = {"metadata release=1"};
  s[2].holds.clear();
  p.keep_last = 2;
  p.keep_daily = 0;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "c:metadata release=1,last b:last a:-");
}

TEST_CASE("prune plan: a build in progress is kept and takes no part in the counts") {
  std::vector<ops::Snapshot> s{snap("b/3", at(2026, 5, 3)), snap("b/2", at(2026, 5, 2)),
                               snap("b/1", at(2026, 5, 1))};
  s[0].uploading = 1;
  s[2].uploading = 4;
  ops::PrunePolicy p;
  p.keep_last = 1;
  CHECK(shown(ops::plan_group(s, p, k_now)) == "b/3:in progress b/2:last b/1:in progress");
}

TEST_CASE("prune plan: an empty policy removes nothing") {
  std::vector<ops::Snapshot> s{snap("b/2", at(2026, 5, 2)), snap("b/1", at(2026, 5, 1))};
  CHECK(ops::PrunePolicy{}.empty());
  CHECK(shown(ops::plan_group(s, {}, k_now)) == "b/2:policy is empty b/1:policy is empty");
  ops::PrunePolicy p;
  p.keep_metadata = {{"k", "v"}};
  CHECK(!p.empty());
}

TEST_CASE("prune plan: groups per owner and group key, each planned on its own") {
  std::vector<ops::Snapshot> s{snap("builds/main/2", at(2026, 5, 2)), snap("builds/main/1", at(2026, 5, 1)),
                               snap("builds/dev/9", at(2026, 5, 9)), snap("builds/dev/8", at(2026, 5, 8)),
                               snap("builds/main/3", at(2026, 5, 3))};
  for (auto &x : s)
    x.group = x.run_prefix.substr(0, x.run_prefix.rfind('/'));
  s.push_back(snap("builds/main/7", at(2026, 5, 7)));
  s.back().owner_id = "other";
  s.back().group = "builds/main";
  ops::PrunePolicy p;
  p.keep_last = 1;
  auto groups = ops::plan_snapshots(s, p, k_now);
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].owner_id == "o");
  CHECK(groups[0].group == "builds/dev");
  CHECK(shown(groups[0].snapshots) == "builds/dev/9:last builds/dev/8:-");
  CHECK(groups[1].group == "builds/main");
  CHECK(shown(groups[1].snapshots) == "builds/main/3:last builds/main/2:- builds/main/1:-");
  // Another owner's build of the same branch is its own group: owners never share a count.
  CHECK(groups[2].owner_id == "other");
  CHECK(shown(groups[2].snapshots) == "builds/main/7:last");
}

TEST_CASE("prune options: --group-by and the keep counts are checked, naming the option") {
  CHECK(ops::parse_group_by("owner").segments == 0);
  CHECK(ops::parse_group_by("owner").meta_key.empty());
  CHECK(ops::parse_group_by("segment:2").segments == 2);
  CHECK(ops::parse_group_by("meta:CI_REF").meta_key == "ci_ref");
  for (const char *bad : {"", "host", "segment:0", "segment:x", "segment:", "meta:"})
    CHECK(test::throws_errc([&] { (void)ops::parse_group_by(bad); }, Errc::usage,
                            "--group-by: expected owner, segment:N or meta:KEY"));
  CHECK(ops::parse_keep_count("3", "--keep-last") == 3);
  CHECK(ops::parse_keep_count("unlimited", "--keep-daily") == ops::k_keep_unlimited);
  for (const char *bad : {"0", "-1", "x", "", "2.5"})
    CHECK(test::throws_errc([&] { (void)ops::parse_keep_count(bad, "--keep-daily"); }, Errc::usage,
                            "--keep-daily: expected a count from 1 to 1000000 or 'unlimited'"));
}

namespace {

// Builds as a CI uploads them: each under its own prefix, de-duplicated per owner (a file
// already stored by an earlier build is shared, not uploaded again), a minute apart.
struct PruneWorld : test::OpsWorld {
  static constexpr int64_t k_minute = 60'000;
  static constexpr int64_t k_size = 10;

  ledger::ReserveRequest request(const std::string &prefix, const std::string &name, const std::string &seed,
                                 const store::ObjectOptions &opts) {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = name;
    r.relative_path = name;
    r.run_prefix = prefix;
    r.dedup = ledger::DedupScope::owner;
    r.media_type = "text/plain";
    r.sha256 = std::string(64 - seed.size(), '0') + seed;
    r.size = k_size;
    r.policy = "default";
    r.deadline_ms = k_deadline_ms;
    r.grace_ms = k_grace_ms;
    r.object_options = store::to_json(opts);
    return r;
  }

  // An alive ACTIVE row: its own object (stored, confirmed), or sharing the one an earlier
  // build stored with the same content.
  ledger::FileRecord file(const std::string &prefix, const std::string &name, const std::string &seed,
                          const store::ObjectOptions &opts = {}, std::optional<int64_t> expires_at = {}) {
    auto r = request(prefix, name, seed, opts);
    r.expires_at = expires_at;
    auto res = l.reserve(r, now());
    if (res.outcome == ledger::ReserveOutcome::shareable) {
      r.share_with = res.record.id;
      res = l.reserve(r, now());
      REQUIRE(res.outcome == ledger::ReserveOutcome::shared);
      return l.row(res.record.id);
    }
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    put(res.record);
    REQUIRE(l.confirm(res.record.id, "etag", "", now()) == ledger::ConfirmOutcome::confirmed);
    return l.row(res.record.id);
  }

  // A build: its files, then a minute passes.
  std::vector<ledger::FileRecord> build(const std::string &prefix, const std::vector<std::string> &seeds,
                                        const store::ObjectOptions &opts = {}) {
    std::vector<ledger::FileRecord> rows;
    for (size_t i = 0; i < seeds.size(); ++i)
      rows.push_back(file(prefix, "f" + std::to_string(i), seeds[i], opts));
    clock.advance(k_minute);
    return rows;
  }

  [[nodiscard]] bool alive(int64_t id) const { return !l.row(id).is_deleted; }

  ops::PruneReport run(ops::PruneOptions o) {
    o.grace_ms = k_grace_ms;
    return ops::prune(l, l, o, clock);
  }
};

ops::PruneOptions keep_last(int n) {
  ops::PruneOptions o;
  o.policy.keep_last = n;
  return o;
}

// Each group's decisions as shown() makes them, groups joined by " | ".
std::string shown(const std::vector<ops::GroupPlan> &groups) {
  std::string out;
  for (const auto &g : groups)
    out += (out.empty() ? "" : " | ") + g.owner_id + "/" + g.group + "= " + shown(g.snapshots);
  return out;
}

} // namespace

TEST_CASE(
    "prune: each removed snapshot's alive rows are soft-deleted, newest snapshot first; a re-run deletes "
    "nothing") {
  PruneWorld w;
  auto b1 = w.build("builds/1", {"a1", "a2"});
  auto b2 = w.build("builds/2", {"b1", "b2"});
  auto b3 = w.build("builds/3", {"c1", "c2", "c3"});
  auto b4 = w.build("builds/4", {"d1"});
  auto rep = w.run(keep_last(2));
  CHECK(shown(rep.groups) == "o/= builds/4:last builds/3:last builds/2:- builds/1:-");
  CHECK(rep.removed_snapshots == 2);
  CHECK(rep.deleted_files == 4);
  CHECK(rep.deleted_bytes == 4 * PruneWorld::k_size);
  for (const auto &r : b1)
    CHECK(!w.alive(r.id));
  for (const auto &r : b2)
    CHECK(!w.alive(r.id));
  for (const auto &r : b3)
    CHECK(w.alive(r.id));
  CHECK(w.alive(b4[0].id));
  // Each removed row's task is pending, due after the grace: sweep removes the object then.
  for (const auto &r : b1) {
    CHECK(w.l.task_of(r.id).status == ledger::TaskStatus::pending);
    CHECK(w.l.task_of(r.id).next_retry_at == w.now() + PruneWorld::k_grace_ms);
  }
  // One transaction per snapshot, the newest first.
  auto calls = w.l.calls();
  calls.erase(std::remove_if(calls.begin(), calls.end(), [](const auto &c) { return c != "prune_snapshot"; }),
              calls.end());
  CHECK(calls.size() == 2);
  auto deleted = w.l.history();
  auto first_b2 = std::find_if(deleted.begin(), deleted.end(), [&](const std::string &h) {
    return h.find("#" + std::to_string(b2[0].id) + " row ACTIVE -> ACTIVE+deleted") != std::string::npos;
  });
  auto first_b1 = std::find_if(deleted.begin(), deleted.end(), [&](const std::string &h) {
    return h.find("#" + std::to_string(b1[0].id) + " row ACTIVE -> ACTIVE+deleted") != std::string::npos;
  });
  REQUIRE(first_b2 != deleted.end());
  REQUIRE(first_b1 != deleted.end());
  CHECK(first_b2 < first_b1);

  auto again = w.run(keep_last(2));
  CHECK(shown(again.groups) == "o/= builds/4:last builds/3:last");
  CHECK(again.removed_snapshots == 0);
  CHECK(again.deleted_files == 0);
  CHECK(w.l.count("prune_snapshot") == 2);
}

TEST_CASE("prune --dry-run plans the same and changes nothing") {
  PruneWorld w;
  auto b1 = w.build("builds/1", {"a1", "a2"});
  w.build("builds/2", {"b1"});
  auto o = keep_last(1);
  o.dry_run = true;
  auto rep = w.run(o);
  CHECK(shown(rep.groups) == "o/= builds/2:last builds/1:-");
  CHECK(rep.removed_snapshots == 1);
  CHECK(rep.deleted_files == 2);
  CHECK(rep.deleted_bytes == 2 * PruneWorld::k_size);
  CHECK(w.l.count("prune_snapshot") == 0);
  CHECK(w.alive(b1[0].id));
  CHECK(w.alive(b1[1].id));
}

TEST_CASE(
    "prune keeps a removed build's row whose object a kept build shares (de-dup per owner), and says so") {
  PruneWorld w;
  auto b1 = w.build("builds/1", {"lib", "old"}); // lib's object is written by build 1
  auto b2 = w.build("builds/2", {"lib", "mid"}); // shares it: removed too
  auto b3 = w.build("builds/3", {"lib", "new"}); // shares it: kept
  REQUIRE(b3[0].content_of == b1[0].id);
  REQUIRE(b2[0].content_of == b1[0].id);
  auto rep = w.run(keep_last(1));
  REQUIRE(rep.groups.size() == 1);
  const auto &plan = rep.groups[0].snapshots;
  CHECK(shown(plan) == "builds/3:last builds/2:- builds/1:-");
  // Build 2's sharing row does not hold build 1's (build 2 goes too); build 3's does.
  REQUIRE(plan[2].kept_shared.size() == 1);
  CHECK(plan[2].kept_shared[0].id == b1[0].id);
  CHECK(plan[2].kept_shared[0].size == PruneWorld::k_size);
  CHECK(plan[2].kept_shared[0].sharer_prefix == "builds/3");
  CHECK(plan[2].removed_files() == 1);
  CHECK(plan[1].kept_shared.empty());
  CHECK(rep.deleted_files == 3);
  CHECK(w.alive(b1[0].id));
  CHECK(!w.alive(b1[1].id));
  CHECK(!w.alive(b2[0].id));
  CHECK(!w.alive(b2[1].id));
  CHECK(w.alive(b3[0].id));
  // The next run plans build 1 again (its kept row is still a snapshot) and deletes nothing.
  auto again = w.run(keep_last(1));
  CHECK(again.deleted_files == 0);
  CHECK(w.alive(b1[0].id));
}

TEST_CASE("prune never removes a build in progress, and a file uploaded after the plan stays") {
  PruneWorld w;
  // Build 0 is still uploading (its one file UPLOADING): the oldest, and never removed.
  auto in_progress = w.l.reserve(w.request("builds/0", "x", "e0", {}), w.now());
  REQUIRE(in_progress.outcome == ledger::ReserveOutcome::reserved);
  w.clock.advance(PruneWorld::k_minute);
  auto b1 = w.build("builds/1", {"a1"});
  w.build("builds/2", {"b1"});
  w.build("builds/3", {"c1"});
  // Between the plan and build 1's removal, a re-run of build 1 adds a file under its prefix.
  int64_t added = 0;
  w.l.before_next("prune_snapshot", [&] {
    w.clock.advance(1);
    added = w.file("builds/1", "rerun", "e1").id;
  });
  auto o = keep_last(1);
  o.prefix_glob = "builds/*";
  auto rep = w.run(o);
  CHECK(shown(rep.groups) == "o/= builds/3:last builds/2:- builds/1:- builds/0:in progress");
  CHECK(!w.alive(b1[0].id));
  REQUIRE(added != 0);
  CHECK(w.alive(added)); // created after the time the plan saw: not part of the removal
  CHECK(w.alive(in_progress.record.id));
}

TEST_CASE("prune --prefix-glob is anchored at the prefix's start; other prefixes are not touched") {
  PruneWorld w;
  auto other = w.build("old/builds/1", {"o1"});
  auto deeper = w.build("builds/1/x", {"x1"});
  auto none = w.build("", {"n1"});
  w.build("builds/1", {"a1"});
  w.build("builds/2", {"b1"});
  auto o = keep_last(1);
  o.prefix_glob = "builds/*";
  auto rep = w.run(o);
  CHECK(shown(rep.groups) == "o/= builds/2:last builds/1:-");
  CHECK(w.alive(other[0].id));
  CHECK(w.alive(deeper[0].id));
  CHECK(w.alive(none[0].id));
}

TEST_CASE("prune groups by prefix segments or by a metadata value, and keeps by tag or metadata") {
  PruneWorld w;
  store::ObjectOptions main_opts, dev_opts, release;
  main_opts.metadata = {{"ci_ref", "main"}};
  dev_opts.metadata = {{"ci_ref", "dev"}};
  release.metadata = {{"ci_ref", "main"}};
  release.tags = {{"keep", "yes"}};
  w.build("builds/main/1", {"m1"}, release);
  w.build("builds/main/2", {"m2"}, main_opts);
  w.build("builds/dev/3", {"d3"}, dev_opts);
  w.build("builds/main/4", {"m4"}, main_opts);
  w.build("builds/dev/5", {"d5"}, dev_opts);

  auto o = keep_last(1);
  o.dry_run = true;
  o.group_by = ops::parse_group_by("segment:2");
  CHECK(shown(w.run(o).groups) ==
        "o/builds/dev= builds/dev/5:last builds/dev/3:- | o/builds/main= builds/main/4:last builds/main/2:- "
        "builds/main/1:-");
  o.group_by = ops::parse_group_by("meta:ci_ref");
  o.policy.keep_tags = {{"keep", "yes"}};
  CHECK(shown(w.run(o).groups) == "o/dev= builds/dev/5:last builds/dev/3:- | o/main= builds/main/4:last "
                                  "builds/main/2:- builds/main/1:tag keep=yes");
  o.policy.keep_tags.clear();
  o.policy.keep_metadata = {{"ci_ref", "dev"}};
  o.group_by = {};
  CHECK(shown(w.run(o).groups) == "o/= builds/dev/5:metadata ci_ref=dev,last builds/main/4:- "
                                  "builds/dev/3:metadata ci_ref=dev builds/main/2:- builds/main/1:-");
}

TEST_CASE("prune --expired soft-deletes the alive rows past their expiry, in batches, and only those") {
  PruneWorld w;
  std::vector<int64_t> expiring;
  expiring.reserve(5);
  for (int i = 0; i < 5; ++i)
    expiring.push_back(
        w.file("run/1", "e" + std::to_string(i), "e" + std::to_string(i), {}, w.now() + 1'000).id);
  auto later = w.file("run/1", "later", "f1", {}, w.now() + 100'000).id;
  auto never = w.file("run/1", "never", "f2").id;
  w.clock.advance(2'000);
  ops::PruneOptions o;
  o.expired = true;
  o.dry_run = true;
  auto dry = w.run(o);
  CHECK(dry.expired_files == 5);
  CHECK(dry.expired_bytes == 5 * PruneWorld::k_size);
  CHECK(w.l.count("soft_delete_expired") == 0);
  CHECK(w.alive(expiring[0]));
  o.dry_run = false;
  o.expired_batch = 2;
  auto rep = w.run(o);
  CHECK(rep.expired_files == 5);
  CHECK(rep.expired_bytes == 5 * PruneWorld::k_size);
  CHECK(rep.groups.empty());                    // no keep rule: no plan
  CHECK(w.l.count("soft_delete_expired") == 4); // 2 + 2 + 1, then the one that found none
  for (auto id : expiring)
    CHECK(!w.alive(id));
  CHECK(w.alive(later));
  CHECK(w.alive(never));
}

TEST_CASE("status judges the prune job as the others: a failed run, overdue, never run when required") {
  ledger::StatusReport r;
  r.now = 10 * 86'400'000LL;
  r.ledger_created_at = 0;
  config::StatusSettings s;
  s.required_jobs.clear();
  CHECK(ops::evaluate(r, s).healthy); // never ran, not required
  s.required_jobs = {"prune"};
  auto h = ops::evaluate(r, s);
  REQUIRE(h.reasons.size() == 1);
  CHECK(h.reasons[0].code == "job_overdue");
  CHECK(h.reasons[0].message ==
        "prune has never run on this ledger (required by status.required_jobs; is cron "
        "set up?)");
  ledger::JobRun run{"prune",
                     "w",
                     r.now - 3 * 86'400'000LL,
                     r.now - 3 * 86'400'000LL,
                     "failed",
                     R"({"error":"no policy","code":"USAGE"})"};
  r.last_runs["prune"] = run;
  h = ops::evaluate(r, s);
  REQUIRE(h.reasons.size() == 2);
  CHECK(h.reasons[0].code == "job_failed");
  CHECK(h.reasons[0].message.find("the last prune (") == 0);
  CHECK(h.reasons[1].code == "job_overdue"); // the default prune_max_age is 2d
  CHECK(h.reasons[1].message.find("no prune for ") == 0);
  CHECK(h.reasons[1].message.find("(limit 2d;") != std::string::npos);
}
