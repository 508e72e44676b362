#pragma once
// Plain records read from and written to the ledger.

#include <cstdint>
#include <lodge/ledger/sql.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::ledger {

// file_upload.upload_status. Stored (and shown) as its name: UPLOADING, ACTIVE, UPLOAD_FAILED.
enum class FileStatus { uploading, active, upload_failed };
inline constexpr FileStatus k_file_statuses[] = {FileStatus::uploading, FileStatus::active,
                                                 FileStatus::upload_failed};
[[nodiscard]] const char *to_string(FileStatus s);
// nullopt for anything but the stored names.
[[nodiscard]] std::optional<FileStatus> parse_file_status(std::string_view s);

// cleanup_task.status. Stored (and shown) as its name: PENDING, PROCESSING, RETRY,
// SUCCESS, FAILED (a dead letter), IGNORED.
enum class TaskStatus { pending, processing, retry, success, failed, ignored };
inline constexpr TaskStatus k_task_statuses[] = {TaskStatus::pending, TaskStatus::processing,
                                                 TaskStatus::retry,   TaskStatus::success,
                                                 TaskStatus::failed,  TaskStatus::ignored};
[[nodiscard]] const char *to_string(TaskStatus s);
// nullopt for anything but the stored names.
[[nodiscard]] std::optional<TaskStatus> parse_task_status(std::string_view s);

// The de-dup scope a row was reserved under (file_upload.dedup_scope), from the policy's
// "dedup": which alive rows make a new upload of the same content a duplicate (I4,
// ARCHITECTURE.md). owner: any alive row of the owner; prefix: an alive row of the owner
// under the same run prefix; none: no row, every upload is its own row and object.
enum class DedupScope { owner, prefix, none };
[[nodiscard]] const char *to_string(DedupScope s);
// nullopt for anything but "owner", "prefix" and "none".
[[nodiscard]] std::optional<DedupScope> parse_dedup_scope(std::string_view s);

// A file as an upload opened it, for the stat cache (file_upload.stat_*; its size is the
// row's). st_dev and st_ino are stored as the signed 64-bit integers of their bits.
struct FileStat {
  int64_t dev = 0;
  int64_t ino = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  friend bool operator==(const FileStat &, const FileStat &) = default;
};

struct FileRecord {
  int64_t id = 0;
  std::string owner_id;
  std::string original_name;
  std::string relative_path; // as the upload found it (sanitized); the key ends with it
  std::string run_prefix;    // the run's --prefix, "" when none
  DedupScope dedup_scope = DedupScope::owner;
  // The key of the object holding the file's bytes: the row's own, or (a row sharing another
  // row's object, content_of set) that object's.
  std::string object_key;
  // De-duplication at another path: the row whose object this row shares (its stamp names
  // that row). nullopt: the row wrote its own object.
  std::optional<int64_t> content_of;
  // Filled by rows_by_key only: how many alive rows share this row's object (its key stays
  // in use while any does, whatever this row's own state).
  int64_t alive_sharers = 0;
  // Filled by rows_by_key only: how many rows sharing this row's object have a live cleanup
  // task (PENDING, RETRY, PROCESSING): a deleted path whose grace still runs; that task, not
  // this row's, removes the object.
  int64_t live_sharer_tasks = 0;
  std::string media_type;
  std::string sha256;
  int64_t size = 0;
  std::string policy;
  FileStatus upload_status = FileStatus::uploading;
  std::optional<std::string> failure_reason;
  bool is_deleted = false;
  std::optional<std::string> idempotency_key;
  std::optional<std::string> etag;
  std::optional<std::string> version_id;
  std::optional<std::string> multipart_upload_id;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  std::optional<int64_t> activated_at;
  std::optional<int64_t> deleted_at;
  int64_t upload_deadline_at = 0;
  // Who sends the bytes of an UPLOADING row ("boot=... pid=..."); see schema.sql.
  std::optional<std::string> holder;
  std::optional<std::string> content_type; // the object's; nullopt: media_type (older rows)
  std::string object_options;              // canonical JSON (store::to_json), "" for none
  std::optional<FileStat> stat;            // the stat cache; nullopt: not known
  std::optional<int64_t> expires_at;       // wall ms (upload --expire-after); nullopt: never
  [[nodiscard]] const std::string &object_content_type() const {
    return content_type ? *content_type : media_type;
  }
  // The record id the object's stamp names (the row that wrote it).
  [[nodiscard]] int64_t stamp_id() const { return content_of.value_or(id); }
};

struct TaskRecord {
  int64_t id = 0;
  int64_t record_id = 0;
  std::string task_type;
  std::string object_key;
  TaskStatus status = TaskStatus::pending;
  int64_t next_retry_at = 0;
  int64_t retry_count = 0;
  int64_t max_retries = 0;
  std::optional<std::string> lease_owner;
  std::optional<int64_t> lease_until;
  int64_t lease_version = 0;
  std::optional<std::string> last_error;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  int64_t verify_pass = 0; // k_verify_none, k_verify_owed or k_verify_due
  // The row is ACTIVE and its object is still owed the committed tag (recorded by confirm,
  // cleared once the tag is set): whoever holds the task tags it (DecisionKind::tag).
  bool tag_owed = false;
  // The outbox (cleanup.via = queue): when the relay recorded the broker's confirmation of
  // this task's event, and the broker's message id. Every transition that makes the task
  // PENDING clears both (a new event); RETRY keeps them (the broker holds the delayed
  // message); SUCCESS, IGNORED and FAILED keep them (history).
  std::optional<int64_t> sent_at;
  std::optional<std::string> message_id;
};

// cleanup_task.verify_pass: whether a second, cheap pass must follow the delete because
// the upload's failure was not definite (ambiguous, or its deadline passed).
inline constexpr int64_t k_verify_none = 0; // the delete finishes the task
inline constexpr int64_t k_verify_owed = 1; // after the delete: one more pass, later
inline constexpr int64_t k_verify_due = 2;  // this run is that pass; then SUCCESS

struct JobRun {
  std::string job;
  std::string worker_id;
  int64_t started_at = 0;
  int64_t finished_at = 0;
  std::string outcome;
  std::string counts_json;
};

// The ledger's side of the id marker (a copy kept in the store at <root>/.lodge/<uuid>):
// the ledger issues record ids up to block_end only; block_intent >= block_end is the end
// an advance under way (or interrupted) is writing to the store. Kept in ledger_meta.
struct Divergence {
  int64_t detected_at = 0;
  int64_t store_mark = 0;               // the store's marker when it was found above this ledger's
  int64_t sequence_before = 0;          // this ledger's last record id then
  std::optional<int64_t> reconciled_at; // a reconcile that ran after the detection
};

struct IdBlockState {
  int64_t sequence = 0; // the highest record id issued
  int64_t block_end = 0;
  int64_t block_intent = 0;
  std::optional<Divergence> diverged;
};

enum class AcceptOutcome { accepted, not_diverged, not_reconciled };

struct StatusReport {
  std::string ledger_uuid;
  int schema_version = 0;
  std::string backend_kind; // "sqlite" or "postgres"
  // The backend's own facts (SQLite: path, journal_mode "wal", synchronous "FULL": a
  // reservation is durable before its PUT starts).
  sql::Health backend;
  int64_t ledger_created_at = 0;
  int64_t now = 0;
  int64_t files_uploading = 0;          // alive UPLOADING
  int64_t files_active = 0;             // alive ACTIVE
  int64_t files_failed = 0;             // UPLOAD_FAILED
  int64_t files_deleted = 0;            // ACTIVE and deleted by the user
  std::map<std::string, int64_t> tasks; // by status, every status present (0 when none)
  int64_t overdue_uploading = 0;
  int64_t expired_leases = 0;
  int64_t dead_letters = 0;
  int64_t tasks_due = 0;
  std::optional<int64_t> oldest_uploading_age_ms;
  std::map<std::string, std::optional<JobRun>> last_runs; // sweep, repair, reconcile
  std::map<std::string, int64_t> last_success_at;         // finished_at of each job's last ok run
  int64_t files_failed_since = 0;                         // UPLOAD_FAILED since the status query's time
  int64_t failed_since = 0;                               // that time (ms)
  std::optional<Divergence> diverged;                     // set while the ledger's history is diverged
  // The outbox (filled by the caller from OutboxLedger::outbox_settings and outbox_counts).
  std::string cleanup_via = "tasks";
  std::vector<std::string> event_types;
  int64_t outbox_due_unsent = 0; // cleanup events due and not yet published
  int64_t outbox_in_flight = 0;  // published, their task not ended
  int64_t outbox_dead = 0;       // published and dead-lettered
  int64_t events_unsent = 0;     // upload events not yet published
};

} // namespace lodge::ledger
