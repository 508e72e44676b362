// lodge prune: the planner (restic's ApplyPolicy over snapshot summaries) and its apply.
#include <algorithm>
#include <chrono>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/prune.hpp>
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

PrunePolicy parse_policy(const PolicyText &t) {
  PrunePolicy p;
  auto count = [](const std::string &text, const char *flag) {
    return text.empty() ? 0 : parse_keep_count(text, flag);
  };
  p.keep_last = count(t.last, "--keep-last");
  p.keep_hourly = count(t.hourly, "--keep-hourly");
  p.keep_daily = count(t.daily, "--keep-daily");
  p.keep_weekly = count(t.weekly, "--keep-weekly");
  p.keep_monthly = count(t.monthly, "--keep-monthly");
  p.keep_yearly = count(t.yearly, "--keep-yearly");
  if (!t.within.empty()) p.keep_within_ms = config::duration_value(t.within, "--keep-within", Errc::usage);
  for (const auto &tag : t.tags) {
    auto kv = store::parse_assignment(tag, "--keep-tag");
    if (!kv) throw LodgeError(kv.error());
    p.keep_tags.emplace_back(kv->first, kv->second);
  }
  for (const auto &m : t.metadata) {
    auto kv = store::parse_assignment(m, "--keep-metadata");
    if (!kv) throw LodgeError(kv.error());
    // Metadata names are recorded lowercase, as upload's --metadata records them.
    p.keep_metadata.emplace_back(util::to_lower(kv->first), kv->second);
  }
  return p;
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

namespace {

// What --prefix-glob's pattern fixes of every prefix it matches: the bytes before its first
// special character (the ledger narrows the summaries to them).
std::string literal_start(std::string_view pattern) {
  std::string out;
  for (char c : pattern) {
    if (c == '*' || c == '?' || c == '[' || c == '{' || c == '\\') break;
    out.push_back(c);
  }
  return out;
}

std::string hold_name(const char *kind, const std::pair<std::string, std::string> &kv) {
  return std::string(kind) + " " + kv.first + "=" + kv.second;
}

using SnapshotKey = std::pair<std::string, std::string>; // owner, run prefix

// The group of a snapshot within its owner (GroupBy).
std::string group_of(ledger::LedgerReports &reads, const GroupBy &g, const ledger::FileQuery &selected,
                     const std::string &owner, const std::string &prefix) {
  if (g.segments > 0) {
    // The first N segments; a prefix with no more than N is a group of its own.
    size_t end = 0, from = 0;
    for (int i = 0; i < g.segments; ++i) {
      end = prefix.find('/', from);
      if (end == std::string::npos) return prefix;
      from = end + 1;
    }
    return prefix.substr(0, end);
  }
  if (g.meta_key.empty()) return {};
  // The newest alive ACTIVE row's value: one build's rows carry the same (--ci-metadata).
  std::string value;
  ledger::FileQuery q;
  q.owner = owner;
  q.run_prefix = prefix;
  q.unexpired_at = selected.unexpired_at;
  q.sort = ledger::FileSort::time;
  q.descending = true;
  reads.scan_files(q, [&](const ledger::FileRecord &r) {
    if (r.upload_status != ledger::FileStatus::active) return true;
    if (!r.object_options.empty()) {
      try {
        auto opts = store::from_json(r.object_options);
        if (auto it = opts.metadata.find(g.meta_key); it != opts.metadata.end()) value = it->second;
      } catch (const LodgeError &) {
        // A row's options the store cannot read: no value, as a row without metadata.
      }
    }
    return false;
  });
  return value;
}

// The snapshots the options select, with their group and the keep rules their files hold.
// With --expired, as they stay once the rows expired at `expired_at` are gone: a dry run,
// which deletes none, plans what its run would.
std::vector<Snapshot> collect_snapshots(ledger::LedgerReports &reads, const PruneOptions &o,
                                        int64_t expired_at) {
  ledger::FileQuery q;
  q.owner = o.owner;
  if (o.expired) q.unexpired_at = expired_at;
  std::optional<match::Glob> glob;
  if (o.prefix_glob) {
    // Anchored: 'builds/*' selects builds/1, never old/builds/1 (a prune must not reach
    // further than the user wrote).
    glob = match::Glob::compile(o.prefix_glob->starts_with('/') ? *o.prefix_glob : "/" + *o.prefix_glob);
    auto start = literal_start(o.prefix_glob->starts_with('/') ? o.prefix_glob->substr(1) : *o.prefix_glob);
    if (!start.empty()) q.prefix_start = start;
  }
  auto selected = [&](const std::string &prefix) { return !glob || glob->matches(prefix); };

  std::map<SnapshotKey, std::vector<std::string>> holds;
  auto holding = [&](const char *kind, const std::pair<std::string, std::string> &kv, bool tag) {
    auto hq = q;
    if (tag)
      hq.tags = {kv};
    else
      hq.metadata = {kv};
    reads.prefix_summaries(hq, [&](const ledger::PrefixSummary &s) {
      if (s.files > 0 && selected(s.run_prefix))
        holds[{s.owner_id, s.run_prefix}].push_back(hold_name(kind, kv));
      return true;
    });
  };
  for (const auto &kv : o.policy.keep_tags)
    holding("tag", kv, true);
  for (const auto &kv : o.policy.keep_metadata)
    holding("metadata", kv, false);

  std::vector<Snapshot> out;
  reads.prefix_summaries(q, [&](const ledger::PrefixSummary &s) {
    if ((s.files == 0 && s.uploading == 0) || !selected(s.run_prefix)) return true;
    Snapshot snap;
    snap.owner_id = s.owner_id;
    snap.run_prefix = s.run_prefix;
    snap.time = s.newest_at;
    snap.files = s.files;
    snap.bytes = s.bytes;
    snap.uploading = s.uploading;
    if (auto it = holds.find({s.owner_id, s.run_prefix}); it != holds.end()) snap.holds = it->second;
    out.push_back(std::move(snap));
    return true;
  });
  // Read after the summaries' scan: a meta group needs one more read per snapshot.
  for (auto &s : out)
    s.group = group_of(reads, o.group_by, q, s.owner_id, s.run_prefix);
  return out;
}

// The rows of each removed snapshot that a snapshot not removed shares (a kept build's
// de-duplicated file points at them): they stay, and the plan says so.
// With --expired, the rows expired at `unexpired_at` count as gone, as the run deletes them first.
void find_kept_shared(ledger::LedgerReports &reads, std::vector<GroupPlan> &groups,
                      std::optional<int64_t> unexpired_at) {
  std::set<SnapshotKey> removed;
  for (const auto &g : groups)
    for (const auto &d : g.snapshots)
      if (!d.keep) removed.insert({d.snapshot.owner_id, d.snapshot.run_prefix});
  for (auto &g : groups)
    for (auto &d : g.snapshots) {
      if (d.keep) continue;
      std::set<int64_t> seen;
      for (const auto &row : reads.shared_outside(d.snapshot.owner_id, d.snapshot.run_prefix, unexpired_at)) {
        if (removed.contains({row.sharer_owner, row.sharer_prefix}) || seen.contains(row.id)) continue;
        // Only the row whose object the sharer points to (it wrote it) is kept: a row that
        // itself shares another's object holds nothing up, and goes.
        auto rec = reads.find_file(row.id);
        if (!rec || rec->content_of) continue;
        seen.insert(row.id);
        d.kept_shared.push_back({row.id, rec->size, row.sharer_owner, row.sharer_prefix});
      }
      std::sort(d.kept_shared.begin(), d.kept_shared.end(),
                [](const KeptShared &a, const KeptShared &b) { return a.id < b.id; });
    }
}

void prune_expired(ledger::PruneLedger &l, const PruneOptions &o, int64_t now, PruneReport &rep) {
  if (o.dry_run) {
    ledger::FileQuery q;
    q.expired_by = now;
    l.scan_files(q, [&](const ledger::FileRecord &r) {
      if (r.upload_status == ledger::FileStatus::active && !r.is_deleted) {
        ++rep.expired_files;
        rep.expired_bytes += r.size;
      }
      return true;
    });
    return;
  }
  for (;;) {
    auto out = l.soft_delete_expired(now, o.grace_ms, o.max_retries, o.expired_batch);
    rep.expired_files += out.deleted;
    rep.expired_bytes += out.bytes;
    if (out.deleted == 0) break;
  }
}

// The plan, and unless dry_run its removals.
PruneReport plan_and_apply(ledger::PruneLedger &l, const PruneOptions &o, const util::Clock &clock) {
  PruneReport rep;
  // Expired rows go first, so the plan below sees the snapshots as they stay.
  const int64_t expired_at = clock.now_ms();
  if (o.expired) prune_expired(l, o, expired_at, rep);
  if (o.policy.empty()) return rep;

  rep.groups = plan_snapshots(collect_snapshots(l, o, expired_at), o.policy, clock.now_ms());
  find_kept_shared(l, rep.groups, o.expired ? std::optional<int64_t>(expired_at) : std::nullopt);

  std::vector<const SnapshotDecision *> removals;
  for (const auto &g : rep.groups)
    for (const auto &d : g.snapshots)
      if (!d.keep) removals.push_back(&d);
  std::sort(removals.begin(), removals.end(), [](const SnapshotDecision *a, const SnapshotDecision *b) {
    return newer_first(a->snapshot, b->snapshot);
  });
  rep.removed_snapshots = static_cast<int64_t>(removals.size());
  for (const auto *d : removals) {
    if (o.dry_run) {
      rep.deleted_files += d->removed_files();
      rep.deleted_bytes += d->removed_bytes();
      continue;
    }
    std::vector<int64_t> keep_ids;
    keep_ids.reserve(d->kept_shared.size());
    for (const auto &k : d->kept_shared)
      keep_ids.push_back(k.id);
    // Bounded by the time the plan saw: a file uploaded under the prefix since (a re-run of
    // the build) is not part of what was planned, and stays.
    auto out = l.prune_snapshot(d->snapshot.owner_id, d->snapshot.run_prefix, d->snapshot.time, keep_ids,
                                clock.now_ms(), o.grace_ms, o.max_retries);
    rep.deleted_files += out.deleted;
    rep.deleted_bytes += out.bytes;
  }
  return rep;
}

} // namespace

PruneReport prune(ledger::PruneLedger &l, ledger::LedgerMeta &log, const PruneOptions &o,
                  const util::Clock &clock) {
  const int64_t started = clock.now_ms();
  auto rep = plan_and_apply(l, o, clock);
  rep.dry_run = o.dry_run;
  rep.expired = o.expired;
  if (!o.dry_run) record_run(log, "prune", o.worker_id, started, true, job_counts(rep), clock);
  return rep;
}

nlohmann::json job_counts(const PruneReport &r) {
  return {{"removed_snapshots", r.removed_snapshots},
          {"deleted_files", r.deleted_files},
          {"deleted_bytes", r.deleted_bytes},
          {"expired_files", r.expired_files},
          {"expired_bytes", r.expired_bytes}};
}

nlohmann::json plan_json(const PruneReport &r) {
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
      {"dry_run", r.dry_run},
      {"groups", groups},
      {"removed",
       {{"snapshots", r.removed_snapshots}, {"files", r.deleted_files}, {"bytes", r.deleted_bytes}}}};
  j["expired"] = r.expired ? nlohmann::json{{"files", r.expired_files}, {"bytes", r.expired_bytes}}
                           : nlohmann::json(nullptr);
  return j;
}

int exit_status(const PruneReport & /*r*/) {
  return errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
