#pragma once
// `lodge prune`: retention over snapshots, in restic's vocabulary (`restic forget`). A
// snapshot is one (owner, run prefix) with alive rows: one build uploaded under its own
// `--prefix`. Snapshots are put in groups (always per owner; then by a part of the run
// prefix or by a metadata value), and each group's snapshots are kept or removed by the
// policy, as restic's ApplyPolicy decides (the planner is pure: `plan_group`,
// `plan_snapshots`). Removing a snapshot soft-deletes its alive ACTIVE rows in one
// transaction (quota freed at once; the objects go by sweep after the grace, I5/I8
// unchanged), except the rows whose object a snapshot not removed shares (de-dup under
// "owner"). A run (not a dry run) is recorded in the job log (ops/jobs/job_run.hpp).

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/util/clock.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lodge::ops {

// How snapshots are grouped: always per owner (owners are separate tenants and quotas),
// then, when set, by the run prefix's first `segments` '/'-separated segments
// (`segment:2` groups builds/<branch>/<run> by branch) or by the value of metadata
// `meta_key` on the snapshot's newest alive ACTIVE row ("" when it has none).
struct GroupBy {
  int segments = 0;
  std::string meta_key;
};

// --group-by: "owner", "segment:N" (N >= 1) or "meta:KEY". LodgeError(USAGE) naming the
// option otherwise.
[[nodiscard]] GroupBy parse_group_by(std::string_view text);

// A count rule's "keep all" (`--keep-daily unlimited`), as restic's -1.
inline constexpr int k_keep_unlimited = -1;

// --keep-last and the calendar counts: a positive integer or "unlimited" (k_keep_unlimited).
// LodgeError(USAGE) naming `flag` otherwise.
[[nodiscard]] int parse_keep_count(std::string_view text, std::string_view flag);

// The rules, OR'ed: a snapshot any rule keeps is kept. 0 (or nullopt, empty) leaves a
// rule out.
struct PrunePolicy {
  int keep_last = 0;
  int keep_hourly = 0, keep_daily = 0, keep_weekly = 0, keep_monthly = 0, keep_yearly = 0;
  // Snapshots newer than the group's newest snapshot's time minus this (ms).
  std::optional<int64_t> keep_within_ms;
  // A snapshot holding an alive ACTIVE file with this tag / metadata (name and value exact).
  std::vector<std::pair<std::string, std::string>> keep_tags;
  std::vector<std::pair<std::string, std::string>> keep_metadata;
  // No rule at all: refused (an empty policy would remove everything).
  [[nodiscard]] bool empty() const;
};

// The policy as its flags give it: each count's and --keep-within's text ("" when not
// given), each --keep-tag and --keep-metadata NAME=VALUE.
struct PolicyText {
  std::string last, hourly, daily, weekly, monthly, yearly, within;
  std::vector<std::string> tags, metadata;
};

// The policy those flags say (metadata names lowercase, as upload records them); USAGE
// naming the flag for a value that is none.
[[nodiscard]] PrunePolicy parse_policy(const PolicyText &t);

// One snapshot as the planner sees it.
struct Snapshot {
  std::string owner_id;
  std::string run_prefix;
  std::string group;     // the group within the owner (GroupBy): "" for the owner alone
  int64_t time = 0;      // the newest created_at of its alive ACTIVE rows (wall ms)
  int64_t files = 0;     // alive ACTIVE rows
  int64_t bytes = 0;     // and their sizes
  int64_t uploading = 0; // alive UPLOADING rows: a build still in progress is never removed
  // The keep rules its files match, as they are named in reasons ("tag keep=yes",
  // "metadata release=1"); filled by the caller from the ledger.
  std::vector<std::string> holds;
};

// A row of a removed snapshot that stays, because a snapshot not removed shares its object.
struct KeptShared {
  int64_t id = 0;
  int64_t size = 0;
  std::string sharer_owner, sharer_prefix; // one snapshot sharing it
};

struct SnapshotDecision {
  Snapshot snapshot;
  bool keep = false;
  // Why it is kept, in restic's order: tag and metadata rules, "within D", then "last",
  // "hourly", "daily", "weekly", "monthly", "yearly"; or "in progress" alone.
  std::vector<std::string> reasons;
  // Removed: its rows that stay (KeptShared), by id.
  std::vector<KeptShared> kept_shared;
  // Removed: what the removal deletes (the snapshot's files and bytes less kept_shared).
  [[nodiscard]] int64_t removed_files() const;
  [[nodiscard]] int64_t removed_bytes() const;
};

struct GroupPlan {
  std::string owner_id;
  std::string group;
  std::vector<SnapshotDecision> snapshots; // newest first
};

// restic's ApplyPolicy over one group: newest first (ties by run prefix, descending); the
// count rules keep the newest snapshot of each hour/day/ISO week/month/year (UTC; `last`:
// every snapshot) until their count is spent, and the group's oldest snapshot too while a
// count is left; `keep_within_ms` keeps snapshots strictly newer than the group's newest
// snapshot (the newest not after `now`) minus the duration, so a pipeline that stops keeps
// its last builds; `holds` keep without counting. A snapshot with UPLOADING rows takes no
// part: kept, "in progress". Returns the decisions, newest first.
[[nodiscard]] std::vector<SnapshotDecision> plan_group(std::vector<Snapshot> snapshots, const PrunePolicy &p,
                                                       int64_t now);

// Groups the snapshots by (owner, group) and plans each; groups ordered by owner, group.
[[nodiscard]] std::vector<GroupPlan> plan_snapshots(std::vector<Snapshot> snapshots, const PrunePolicy &p,
                                                    int64_t now);

struct PruneOptions {
  PrunePolicy policy;
  GroupBy group_by;
  std::string owner = "*";                // "*": every owner
  std::optional<std::string> prefix_glob; // run prefixes matching it (anchored at the start); none: all
  bool expired = false;                   // also soft-delete the alive ACTIVE rows past their expires_at
  bool dry_run = false;
  int64_t grace_ms = 300'000; // the removed rows' objects stay this long (sweep deletes them after)
  int max_retries = 8;
  int expired_batch = 500; // rows per soft_delete_expired transaction
  std::string worker_id;   // in the job log
};

struct PruneReport {
  std::vector<GroupPlan> groups;
  int64_t removed_snapshots = 0;                // snapshots planned for removal (and, unless dry, removed)
  int64_t deleted_files = 0, deleted_bytes = 0; // what the removals soft-deleted (dry: would)
  int64_t expired_files = 0, expired_bytes = 0; // --expired (dry: rows past their expiry now)
  bool dry_run = false, expired = false;        // as the run was asked
};

// Plans (reads only) and, unless dry_run, applies: first the expired rows (when asked),
// then one prune_snapshot per removed snapshot, newest first, each bounded by the time the
// plan saw (a row created after it is never removed). With an empty policy only --expired
// runs (the caller refuses a policy that is empty without it). Then records the run in `log`
// (not a dry run).
[[nodiscard]] PruneReport prune(ledger::PruneLedger &l, ledger::LedgerMeta &log, const PruneOptions &o,
                                const util::Clock &clock);
// What a run records in the job log: what it removed and expired.
[[nodiscard]] nlohmann::json job_counts(const PruneReport &r);
// The plan as `--json` shows it: each group's snapshots (kept with their reasons, removed with
// what stays shared), what was removed, and what expired (null unless asked).
[[nodiscard]] nlohmann::json plan_json(const PruneReport &r);
// A prune that returns has done what it planned: 0.
[[nodiscard]] int exit_status(const PruneReport &r);

} // namespace lodge::ops
