#pragma once
// The ledger: every upload's intent and every compensation's execution state.
// Ledger is the interface the operations talk to; SQLite is the embedded backend and the
// only place its SQL lives (ledger/sqlite_ledger.cpp). Every write is one short
// BEGIN IMMEDIATE transaction; every state change is a conditional UPDATE whose changed
// row count is checked.

#include <cstdint>
#include <functional>
#include <lodge/ledger/records.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ledger {

struct OpenOptions {
  std::string path;
  int64_t busy_timeout_ms = 10'000;
  bool force_network_fs = false;
  // For commands that only read (status, list, tasks): SQLITE_OPEN_READONLY, never
  // created, never migrated (a ledger too old for this lodge says to run `lodge init`),
  // so they work on a read-only mount or a ledger the user may only read.
  bool read_only = false;
  const util::Clock *clock = &util::system_clock();
};

// S3's limit on a key's length, in bytes.
inline constexpr size_t k_max_key_bytes = 1024;

// The key reserve() gives a new row: <root><owner>/[<run_prefix>/]<uuid>/<relative_path>
// (root is the store's key prefix, "" or ending in '/').
[[nodiscard]] std::string object_key_for(const std::string &root, const std::string &owner,
                                         const std::string &run_prefix, const std::string &uuid,
                                         const std::string &relative_path);

struct ReserveRequest {
  std::string owner_id;
  std::string original_name;
  // Sanitized, '/'-separated, relative, no '.' or '..' segment; "" means original_name.
  std::string relative_path;
  std::string run_prefix; // the run's --prefix (validated by the caller), "" for none
  DedupScope dedup = DedupScope::prefix;
  std::string key_prefix; // the store's root: "" or "prefix/"
  std::string media_type;
  std::string sha256;
  int64_t size = 0;
  std::string policy;
  std::optional<int64_t> max_files;
  int64_t deadline_ms = 0;
  int64_t grace_ms = 0;
  int max_retries = 8;
  std::optional<std::string> idempotency_key;
};

enum class ReserveOutcome { reserved, duplicate, replayed, quota_exceeded, key_reused, in_progress };

struct ReserveResult {
  ReserveOutcome outcome = ReserveOutcome::reserved;
  FileRecord record; // the new row, or the existing one for duplicate/replayed/in_progress
};

// What a cleanup worker may do with its task, decided in a transaction under its lease.
enum class TaskDecision { allowed, ignored, postponed, lease_lost };

// verify_scheduled: the delete succeeded but the task owes one more pass (its upload
// failed ambiguously or by deadline): it is PENDING again, due at the time given.
enum class TaskFinish { success, verify_scheduled, retry, lease_lost, dead_letter };

// What a write that queues a cleanup task did. Every one is checked to have changed
// exactly the row it meant to.
enum class QueueOutcome {
  queued,     // the task is pending (made so now, or already)
  row_exists, // adopt: a row with that key appeared meanwhile; nothing written
  not_dead,   // requeue: the row is missing or alive; nothing written
  held,       // a worker holds the task (PROCESSING); its own checks decide
};

enum class DeleteOutcome { deleted, not_found, not_active };

// Which rows list_files returns, by id.
struct ListFilter {
  std::string owner;                     // "*": every owner
  std::optional<std::string> run_prefix; // only rows of this run prefix ("" = no prefix)
  // Only rows whose relative_path matches this fnmatch(3) pattern, flags 0: '*' and '?'
  // match '/' too (so "src/*.c" also matches "src/lib/x.c"), '[...]' classes, '\' escapes.
  std::optional<std::string> path_glob;
  bool include_dead = false; // also failed and deleted rows
};

class Ledger {
public:
  virtual ~Ledger() = default;

  [[nodiscard]] virtual const std::string &path() const = 0;
  // The uuid made when the ledger was created; stamped into every object's metadata.
  [[nodiscard]] virtual const std::string &uuid() const = 0;
  [[nodiscard]] virtual int schema_version() = 0;
  [[nodiscard]] virtual StatusReport status(int64_t now) = 0;
  virtual void record_job_run(const JobRun &run) = 0;

  // --- uploads ---
  // One transaction: idempotency replay, alive duplicate, quota, then the UPLOADING row
  // and its cleanup task (due at deadline + grace). The key is made here.
  [[nodiscard]] virtual ReserveResult reserve(const ReserveRequest &req, int64_t now) = 0;
  // Records the multipart upload id on an UPLOADING row; false if the row moved on.
  [[nodiscard]] virtual bool set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                     int64_t now) = 0;
  // UPLOADING -> ACTIVE and its task -> IGNORED, together; false (nothing changed) when
  // the row or the task is no longer where an upload in progress leaves them.
  [[nodiscard]] virtual bool confirm(int64_t id, const std::string &etag, const std::string &version_id,
                                     int64_t now) = 0;
  // UPLOADING -> UPLOAD_FAILED (+ deleted); when run_now, the task becomes due at once.
  // False when the row was not UPLOADING any more.
  [[nodiscard]] virtual bool mark_failed(int64_t id, const std::string &reason, bool run_now,
                                         int64_t now) = 0;
  [[nodiscard]] virtual std::optional<FileRecord> find_file(int64_t id) = 0;
  [[nodiscard]] virtual std::vector<FileRecord> list_files(const ListFilter &filter) = 0;
  // The alive ACTIVE rows of (owner, run prefix, relative path), newest first (activated_at,
  // then id). More than one only under the "none" de-dup scope, or for different content.
  [[nodiscard]] virtual std::vector<FileRecord>
  find_by_path(const std::string &owner, const std::string &run_prefix, const std::string &relative_path) = 0;
  [[nodiscard]] virtual std::optional<TaskRecord> find_task_for(int64_t record_id) = 0;

  // --- cleanup tasks ---
  // Claims up to `limit` due tasks (PENDING/RETRY due, PROCESSING with an expired lease)
  // in one transaction, each under a new lease_version.
  [[nodiscard]] virtual std::vector<TaskRecord> claim_due(int64_t now, int limit, const std::string &worker,
                                                          int64_t lease_ms) = 0;
  // Claims one task by id if it is due (or its lease expired).
  [[nodiscard]] virtual std::optional<TaskRecord> claim_task(int64_t task_id, int64_t now,
                                                             const std::string &worker, int64_t lease_ms) = 0;
  // Re-checks lease and row in a transaction. A row still UPLOADING and not overdue:
  // postponed, the task back to PENDING due at deadline + grace (never due again in the
  // same run). An overdue UPLOADING row is failed right here, as repair_row would, and
  // the task owes a verify pass; it is postponed to deadline + grace when that is still
  // ahead, allowed otherwise. A dead row: allowed. An alive ACTIVE row: ignored.
  [[nodiscard]] virtual TaskDecision decide(const TaskRecord &t, int64_t now, int64_t grace_ms) = 0;
  // Finishes a task only if its lease is still ours (status PROCESSING, same version).
  // Failed: RETRY (or FAILED past max_retries) due at next_retry_at. Succeeded: SUCCESS,
  // or, when the task owes a verify pass, PENDING again due at next_retry_at.
  [[nodiscard]] virtual TaskFinish finish(const TaskRecord &t, bool succeeded, const std::string &error,
                                          int64_t next_retry_at, int64_t now) = 0;
  // Tasks that would be claimed now (for --dry-run), oldest first.
  [[nodiscard]] virtual std::vector<TaskRecord> due_tasks(int64_t now, int limit) = 0;
  // Tasks in one status (all when empty), by id.
  [[nodiscard]] virtual std::vector<TaskRecord> list_tasks(const std::string &status) = 0;
  // FAILED (dead letter) -> PENDING, due now, retry count reset. False if not FAILED.
  [[nodiscard]] virtual bool retry_task(int64_t task_id, int64_t now) = 0;

  // --- repair ---
  // Alive UPLOADING rows past their deadline, oldest deadline first.
  [[nodiscard]] virtual std::vector<FileRecord> overdue_uploads(int64_t now, int limit) = 0;
  // One transaction: re-checks the row is alive, UPLOADING and overdue; marks it
  // UPLOAD_FAILED + deleted; makes sure its task is pending, due no sooner than
  // deadline + grace. False when the row had moved on.
  [[nodiscard]] virtual bool repair_row(int64_t id, int64_t now, int64_t grace_ms, int max_retries) = 0;

  // --- delete ---
  // Soft-deletes an alive ACTIVE row of the owner (quota freed at once) and makes its
  // task pending, due after the grace.
  [[nodiscard]] virtual DeleteOutcome soft_delete(int64_t id, const std::string &owner, int64_t now,
                                                  int64_t grace_ms, int max_retries) = 0;

  // An alive ACTIVE row whose object the store no longer has: soft-deleted with `reason` as
  // its failure_reason (its quota and de-dup slot freed at once) and its task made pending,
  // due after the grace (deleting a missing key is harmless). False when the row was not
  // alive and ACTIVE any more (nothing changed). Deciding that the object is missing is
  // the caller's.
  [[nodiscard]] virtual bool mark_missing(int64_t id, const std::string &reason, int64_t now,
                                          int64_t grace_ms, int max_retries) = 0;

  // --- reconcile ---
  // Rows whose key starts with prefix (and sorts after `after`, when not empty), in byte
  // order of key (the store's listing order).
  virtual void rows_by_key(const std::string &prefix, const std::string &after,
                           const std::function<bool(const FileRecord &)> &visit) = 0;
  // The highest record id this ledger ever issued.
  [[nodiscard]] virtual int64_t max_record_id() = 0;
  // Makes a dead row's finished task pending again, due now (a leftover object): queued,
  // not_dead (no such row, or alive), or held (a worker has the task right now).
  [[nodiscard]] virtual QueueOutcome requeue_task_for(int64_t record_id, int64_t now, int max_retries) = 0;
};

// Opens (creating with mode 0600 when missing) and migrates the SQLite ledger at
// opts.path. Throws LodgeError: LEDGER_UNUSABLE (corrupt, not a database, a symlink,
// not a lodge ledger), LEDGER_TOO_NEW, LEDGER_ON_NETWORK_FS, LEDGER_LOCKED.
[[nodiscard]] std::unique_ptr<Ledger> open_sqlite_ledger(const OpenOptions &opts);

} // namespace lodge::ledger
