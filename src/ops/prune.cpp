// lodge prune: the planner (restic's ApplyPolicy over snapshot summaries) and its apply.
#include <algorithm>
#include <chrono>
#include <lodge/error.hpp>
#include <lodge/ops/filter.hpp>
#include <lodge/ops/prune.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <map>
#include <set>

namespace lodge::ops {
namespace {

// restic's buckets, in its order: `last` counts every snapshot, the others the newest of
// each calendar period.
enum class Period { last, hour, day, week, month, year };

// The period of a time (wall ms, UTC) as one number, distinct per period: YYYYMMDDHH,
// YYYYMMDD, ISO YYYYWW, YYYYMM, YYYY (restic's ymdh, ymd, yw, ym, y).
int64_t period_of(Period p, int64_t ms) {
  using namespace std::chrono;
  const sys_time<milliseconds> tp{milliseconds(ms)};
  const auto day = floor<days>(tp);
  const year_month_day ymd{day};
  const int64_t y = static_cast<int>(ymd.year());
  const int64_t m = static_cast<unsigned>(ymd.month());
  const int64_t d = static_cast<unsigned>(ymd.day());
  switch (p) {
  case Period::hour:
    return ((y * 100 + m) * 100 + d) * 100 + floor<hours>(tp - day).count();
  case Period::day:
    return (y * 100 + m) * 100 + d;
  case Period::week: {
    // ISO 8601: the week belongs to the year of its Thursday; week 1 holds January 4th.
    const auto thursday = day + days(4 - static_cast<int>(weekday{day}.iso_encoding()));
    const year iso_year = year_month_day{thursday}.year();
    const auto week = (thursday - sys_days{iso_year / January / 1}).count() / 7 + 1;
    return static_cast<int64_t>(static_cast<int>(iso_year)) * 100 + week;
  }
  case Period::month:
    return y * 100 + m;
  case Period::year:
    return y;
  case Period::last:
    break;
  }
  return 0;
}

struct Bucket {
  Period period;
  int count;
  const char *reason;
  std::optional<int64_t> last{};
};

bool newer_first(const Snapshot &a, const Snapshot &b) {
  if (a.time != b.time) return a.time > b.time;
  if (a.run_prefix != b.run_prefix) return a.run_prefix > b.run_prefix;
  return a.owner_id > b.owner_id;
}

} // namespace

GroupBy parse_group_by(std::string_view text) {
  GroupBy g;
  if (text == "owner") return g;
  auto bad = [&] {
    return LodgeError(Errc::usage, "--group-by: expected owner, segment:N or meta:KEY, got '" +
                                       util::escape_for_terminal(text) + "'");
  };
  if (text.starts_with("segment:")) {
    auto n = util::parse_int(text.substr(8));
    if (!n || *n < 1 || *n > 64) throw bad();
    g.segments = static_cast<int>(*n);
    return g;
  }
  if (text.starts_with("meta:") && text.size() > 5) {
    g.meta_key = util::to_lower(text.substr(5));
    return g;
  }
  throw bad();
}

int parse_keep_count(std::string_view text, std::string_view flag) {
  if (text == "unlimited") return k_keep_unlimited;
  auto n = util::parse_int(text);
  if (!n || *n < 1 || *n > 1'000'000)
    throw LodgeError(Errc::usage, std::string(flag) +
                                      ": expected a count from 1 to 1000000 or 'unlimited', got '" +
                                      util::escape_for_terminal(text) + "'");
  return static_cast<int>(*n);
}

bool PrunePolicy::empty() const {
  return keep_last == 0 && keep_hourly == 0 && keep_daily == 0 && keep_weekly == 0 && keep_monthly == 0 &&
         keep_yearly == 0 && !keep_within_ms && keep_tags.empty() && keep_metadata.empty();
}

int64_t SnapshotDecision::removed_files() const {
  if (keep) return 0;
  return snapshot.files - static_cast<int64_t>(kept_shared.size());
}

int64_t SnapshotDecision::removed_bytes() const {
  if (keep) return 0;
  int64_t b = snapshot.bytes;
  for (const auto &k : kept_shared)
    b -= k.size;
  return b;
}

std::vector<SnapshotDecision> plan_group(std::vector<Snapshot> snapshots, const PrunePolicy &p, int64_t now) {
  std::sort(snapshots.begin(), snapshots.end(), newer_first);
  std::vector<SnapshotDecision> out;
  out.reserve(snapshots.size());
  std::vector<size_t> planned; // the snapshots the rules see (not in progress), newest first
  for (auto &s : snapshots) {
    SnapshotDecision d;
    d.snapshot = std::move(s);
    if (d.snapshot.uploading > 0) {
      // A build still uploading is not a snapshot yet: never removed, never counted.
      d.keep = true;
      d.reasons = {"in progress"};
    } else if (p.empty()) {
      d.keep = true; // restic keeps everything under an empty policy; callers refuse one
      d.reasons = {"policy is empty"};
    } else {
      planned.push_back(out.size());
    }
    out.push_back(std::move(d));
  }
  if (planned.empty()) return out;

  // The group's newest snapshot not in the future (restic's findLatestTimestamp); durations
  // count back from it, not from now, so a pipeline that stopped keeps its last builds.
  std::optional<int64_t> latest;
  for (auto i : planned)
    if (out[i].snapshot.time <= now) {
      latest = out[i].snapshot.time;
      break;
    }
  if (!latest) latest = out[planned.front()].snapshot.time;

  std::vector<Bucket> buckets{
      {Period::last, p.keep_last, "last"},        {Period::hour, p.keep_hourly, "hourly"},
      {Period::day, p.keep_daily, "daily"},       {Period::week, p.keep_weekly, "weekly"},
      {Period::month, p.keep_monthly, "monthly"}, {Period::year, p.keep_yearly, "yearly"}};
  for (size_t nr = 0; nr < planned.size(); ++nr) {
    auto &d = out[planned[nr]];
    const int64_t t = d.snapshot.time;
    // Tag and metadata rules keep without counting.
    d.reasons = d.snapshot.holds;
    if (p.keep_within_ms && t > *latest - *p.keep_within_ms)
      d.reasons.push_back("within " + util::format_duration_exact(*p.keep_within_ms));
    for (auto &b : buckets) {
      if (b.count == 0) continue; // unset, or spent
      const int64_t val = b.period == Period::last ? static_cast<int64_t>(nr) : period_of(b.period, t);
      // A new period keeps its newest snapshot; the group's oldest is kept too while a count
      // is left (restic: the longest history the counts allow).
      if (b.last != val || nr + 1 == planned.size()) {
        b.last = val;
        if (b.count > 0) --b.count;
        d.reasons.emplace_back(b.reason);
      }
    }
    d.keep = !d.reasons.empty();
  }
  return out;
}

std::vector<GroupPlan> plan_snapshots(std::vector<Snapshot> snapshots, const PrunePolicy &p, int64_t now) {
  std::map<std::pair<std::string, std::string>, std::vector<Snapshot>> groups;
  for (auto &s : snapshots) {
    auto key = std::make_pair(s.owner_id, s.group);
    groups[key].push_back(std::move(s));
  }
  std::vector<GroupPlan> out;
  out.reserve(groups.size());
  for (auto &[key, members] : groups)
    out.push_back({key.first, key.second, plan_group(std::move(members), p, now)});
  return out;
}

} // namespace lodge::ops
