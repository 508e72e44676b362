#pragma once
// The effective configuration: defaults < JSON file < LODGE_* environment < flags.
// Core code never reads the environment itself; the CLI hands it in as ConfigInputs.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/store/store.hpp>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::config {

struct Policy {
  std::string name;
  uint64_t max_size = 5ULL << 30;
  std::vector<std::string> extensions;  // lowercase, no dot; empty: any
  std::vector<std::string> media_types; // empty: any
  std::optional<int64_t> max_files;     // alive files per owner; nullopt: unlimited
  int64_t deadline_ms = 900'000;        // 15m: the time an upload is allowed without progress
  int64_t stall_ms = 120'000;           // 2m: no part finished for this long aborts the transfer
  int64_t grace_ms = 300'000;           // 5m
  bool allow_empty = true;              // false: an empty file is rejected (EMPTY_FILE)
  // De-dup scope: "owner" (one alive copy per owner), "prefix" (one per owner and run
  // --prefix) or "none" (every upload its own row); I4 in ARCHITECTURE.md.
  std::string dedup = "prefix";
  // Every row reserved under it expires this long after its reserve (file_upload.expires_at;
  // `lodge prune --expired` deletes the alive rows past it); nullopt: never. upload's
  // --expire-after overrides it.
  std::optional<int64_t> expire_after_ms;
  // What every object uploaded under it carries: the keys content_type, metadata, tags,
  // storage_class, sse, sse_kms_key_id and cache_control (upload's flags override them).
  store::ObjectOptions object;
};

struct SweepSettings {
  int64_t lease_ms = 120'000; // 2m
  int max_retries = 8;
  int64_t backoff_base_ms = 30'000;
  int64_t backoff_max_ms = 3'600'000;
};

// Outbox + MQ ("cleanup" and "events" of a configuration file). The queue URLs stay text
// here (the CLI opens them: mq::parse_queue_url); which cleanup mode and which event types a
// ledger records is the ledger's own (`lodge init` writes these into it).
struct OutboxConfig {
  std::string cleanup_via = "tasks";                // tasks or queue
  std::string cleanup_queue;                        // sqs://... or amqp://...; required with queue
  std::string events_queue;                         // where upload events go; "" = none
  std::vector<std::string> event_types;             // file.active, file.deleted, file.failed
  bool cleanup_given = false, events_given = false; // the file set them
};

// A URL with its password (scheme://user:PASSWORD@host) shown as ***, for output and logs.
[[nodiscard]] std::string without_password(const std::string &url);

// status --check: what makes a ledger unhealthy (docs/operations.md, "What makes `status --check`
// unhealthy").
struct StatusSettings {
  // Each job must have run within its interval; a job that never ran counts as overdue only
  // when it is required (and the ledger is older than its interval).
  std::map<std::string, int64_t> max_age_ms{
      {"sweep", 3'600'000},        {"repair", 3'600'000}, {"reconcile", 8 * 86'400'000LL},
      {"prune", 2 * 86'400'000LL}, {"relay", 3'600'000},  {"consume", 3'600'000}};
  std::vector<std::string> required_jobs{"sweep"};
  // More than upload_failed_max rows that became UPLOAD_FAILED within the window: unhealthy.
  int64_t upload_failed_max = 10;
  int64_t upload_failed_window_ms = 3'600'000;
  unsigned prometheus_file_mode = 0644; // --prometheus FILE: no secrets in it; node_exporter reads it
};

// Every LODGE_* environment variable lodge reads; any other is warned about (a misspelled
// one would otherwise be ignored without a word). A new variable is added here.
inline constexpr const char *k_lodge_environment[] = {
    "LODGE_CONFIG",         "LODGE_DB",      "LODGE_STORE",     "LODGE_OWNER",      "LODGE_ENDPOINT",
    "LODGE_REGION",         "LODGE_JOBS",    "LODGE_CA_BUNDLE", "LODGE_FAILPOINTS", "LODGE_FAILPOINTS_LOG",
    "LODGE_LEDGER_TIMEOUT", "LODGE_BWLIMIT", "LODGE_STATS"};

// The jobs status watches, in the order it reports them.
inline constexpr const char *k_jobs[] = {"sweep", "repair", "reconcile", "prune", "relay", "consume"};

struct Config {
  std::string config_file; // the file read, or empty
  std::string ledger;
  std::string store;
  // The store's keys (store::setting_keys(): endpoint, region, ca_bundle, profile,
  // tag_state) as the file and the flags gave them, each with its source; the store's scheme
  // interprets them, with the environment (store::resolve_settings).
  store::Settings store_settings;
  // What load() resolved of them: the endpoint, the backend's own settings. Set by load().
  std::shared_ptr<const store::StoreConfig> store_config;
  std::string default_owner;
  bool verify_tls = true;
  bool force_network_fs = false;
  // upload and repair fail at once the UPLOADING rows whose sender, on this boot and in
  // this PID namespace, is provably gone (false: every row waits for its deadline).
  bool fail_killed_runs = true;
  int64_t busy_timeout_ms = 10'000;
  // A PostgreSQL ledger's bound on every wait for the server: connecting, each statement's
  // answer (statement_timeout, and the client's own wait), lock waits (lock_timeout, at
  // most this), dead connections (TCP keepalives, tcp_user_timeout). Key ledger_timeout,
  // LODGE_LEDGER_TIMEOUT, --ledger-timeout.
  int64_t ledger_timeout_ms = 30'000;
  // How long upload waits for another process sending the same content before it reports
  // the file in_progress (a direct reservation is never waited for). Key in_progress_wait,
  // --in-progress-wait.
  int64_t in_progress_wait_ms = 30'000;
  uint64_t multipart_threshold = 64ULL << 20;
  uint64_t part_size = 16ULL << 20;
  int part_concurrency = 4; // parts of one file in flight at once
  // The byte budget per second of a process that sends or receives objects (0: off); nullopt
  // when neither the file (key bwlimit) nor LODGE_BWLIMIT sets it. --bwlimit wins over it:
  // the CLI resolves the process's limit in one place (cli::Context::bwlimit).
  std::optional<uint64_t> bwlimit;
  // upload's stats line every this often off a terminal (0: off). Key stats, LODGE_STATS,
  // --stats.
  int64_t stats_ms = 0;
  int jobs = 8;
  // Where jobs, part_size, part_concurrency and multipart_threshold came from: "default",
  // "file PATH", "env LODGE_JOBS", or the store's own defaults below lodge's configuration
  // (S3: "file ~/.aws/config [profile ci] s3.multipart_chunksize"); upload's flags win over all.
  std::map<std::string, std::string> sources;
  // The store's own rate limit in bytes per second (S3: the profile's s3.max_bandwidth), for
  // when no lodge flag or key sets one; 0: none. Its source is sources["bandwidth"].
  uint64_t store_bandwidth = 0;
  StatusSettings status;
  std::map<std::string, Policy> policies;
  SweepSettings sweep;
  OutboxConfig outbox;

  // The named policy; throws LodgeError(config_invalid) naming the known ones.
  [[nodiscard]] const Policy &policy(const std::string &name) const;
};

struct ConfigInputs {
  std::optional<std::string> config_flag; // --config
  std::map<std::string, std::string> env; // the process environment
  // keys: ledger store endpoint region owner ca_bundle profile ledger_timeout
  std::map<std::string, std::string> flags;
  bool no_verify_ssl = false;
  bool force_network_fs = false;
};

// Why `prefix` cannot be a run prefix (--prefix): it must be '/'-separated segments of
// 1-128 characters of A-Z a-z 0-9 . _ - (as an owner id), none '.' or '..', at most 512
// bytes in all. nullopt when it is fine.
[[nodiscard]] std::optional<std::string> run_prefix_problem(const std::string &prefix);

// The longest duration anything takes: durations are added to wall-clock times (ms since the
// epoch, int64), and a century keeps every `now + deadline + grace` and every doubled backoff
// far from overflow.
inline constexpr int64_t k_max_duration_ms = 36'500LL * 86'400'000;

// What a duration may be, for a flag and its configuration key alike.
struct DurationRange {
  int64_t min_ms = 1; // 0: zero is allowed
  int64_t max_ms = k_max_duration_ms;
  const char *why = "at most 36500d";
};
inline constexpr DurationRange k_any_duration{0, k_max_duration_ms, "at most 36500d"};
// PostgreSQL takes statement_timeout and lock_timeout as an int of milliseconds.
inline constexpr DurationRange k_ledger_timeout_range{
    1, 2'147'483'647, "PostgreSQL's timeouts are at most 2147483647ms, about 24d20h"};
// An upload's wait for another sender (0: none): a day is already far past any sensible bound.
inline constexpr DurationRange k_in_progress_wait_range{0, 86'400'000, "at most 1d"};
inline constexpr DurationRange k_stats_range{1'000, 86'400'000, "at most 1d"};

// The one check of a size or a duration, whether a flag or a configuration key gives it: the
// grammar (util::parse_size, util::parse_duration_ms), then the range. `name` is what the
// message names (--lease, sweep.lease); `code` is USAGE for a flag, CONFIG_INVALID for a key
// or an environment variable.
[[nodiscard]] uint64_t size_value(const std::string &text, const std::string &name, Errc code,
                                  uint64_t min = 0);
[[nodiscard]] int64_t duration_value(const std::string &text, const std::string &name, Errc code,
                                     DurationRange range = {});

// A bwlimit value in bytes per second: a size ("10M" is 10 MiB/s, "512K"; a bare number is
// bytes/s), "off" or "0" for none (0). Throws LodgeError(code) naming `what`.
[[nodiscard]] uint64_t bwlimit_value(const std::string &text, const std::string &what, Errc code);
// A stats interval in ms: "off" or "0" for none (0), else a duration from 1s to 1d. Throws
// LodgeError(code) naming `what`.
[[nodiscard]] int64_t stats_value(const std::string &text, const std::string &what, Errc code);
// A part size or part concurrency as the part_size / part_concurrency keys take them (5MiB to
// 5GiB; 1 to 64), from a flag's text; throws LodgeError(code) naming `name`.
[[nodiscard]] uint64_t parse_part_size(const std::string &text, const std::string &name,
                                       Errc code = Errc::usage);
[[nodiscard]] int parse_part_concurrency(const std::string &text, const std::string &name,
                                         Errc code = Errc::usage);

// Loads and validates. Throws LodgeError(Errc::config_invalid) naming the key path and
// what was expected, e.g. "policies.resume.max_size: expected a size like 10MiB".
[[nodiscard]] Config load(const ConfigInputs &inputs);

// Parses one JSON document over defaults (exposed for tests and fuzzing).
[[nodiscard]] Config parse_json(const std::string &text, const std::string &source, Config c);

// The effective configuration as JSON (nothing secret is part of it).
[[nodiscard]] nlohmann::json to_json(const Config &c);

} // namespace lodge::config
