// ops/prune: the planner's restic semantics (counts, calendar buckets in UTC, the oldest
// kept while a count is left, durations back from the group's newest snapshot, holds,
// builds in progress), and the apply over the ledger fake.
#include "support.hpp"

#include <chrono>
#include <doctest/doctest.h>
#include <lodge/ops/prune.hpp>

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
