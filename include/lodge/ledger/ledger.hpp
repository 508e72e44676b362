#pragma once
// The ledger: every upload's intent and every compensation's execution state.
// Ledger is the interface. Its methods are declared once, in method groups (LedgerMeta,
// UploadLedger, TaskLedger, RecoveryLedger, LedgerReports, IdBlockLedger, OutboxLedger); a
// caller takes the group it uses or, when it uses several, its caller role (CleanupLedger,
// SweepLedger, ... below), built from those groups. SqlLedger (src/ledger/sql_ledger*.cpp) is its
// one implementation, over a database driver (ledger/sql.hpp: SQLite, the embedded default, or
// PostgreSQL). Every write is one short transaction; every state change is a conditional UPDATE
// whose changed row count is checked.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/ledger/protocol.hpp>
#include <lodge/ledger/records.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lodge::ledger {

struct OpenOptions {
  // Where the ledger is: a SQLite file path, or a PostgreSQL URL (postgres://...,
  // postgresql://...) or libpq keyword string (is_postgres_location).
  std::string location;
  // Only `lodge init` creates a ledger; every other open of a location with none (or an
  // empty file) throws LEDGER_NOT_FOUND.
  bool create = false;
  // How long to wait for another writer (SQLite's busy timeout, PostgreSQL's lock_timeout).
  int64_t lock_timeout_ms = 10'000;
  // PostgreSQL: the bound on every wait for the server (connect, each answer, keepalives);
  // lock_timeout is at most this. SQLite ignores it.
  int64_t timeout_ms = 30'000;
  bool force_network_fs = false;
  // For commands that only read (status, list, tasks): opened read-only, never created,
  // never migrated (a ledger too old for this lodge says to run `lodge init`), so they
  // work on a read-only mount or a ledger the user may only read.
  bool read_only = false;
  const util::Clock *clock = &util::system_clock();
};

// upload --replace: what confirm gives the rows it retires.
struct Retire {
  int64_t grace_ms = 0;
  int max_retries = 8;
};

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
  std::optional<std::string> holder; // the sending process (ops::this_process_holder())
  std::string content_type;          // the object's Content-Type ("": media_type)
  std::string object_options;        // store::to_json of the upload's options ("" for none)
  std::optional<FileStat> stat;      // the file as opened, for the stat cache
  // When the row expires (wall ms; `upload --expire-after`): `prune --expired` soft-deletes
  // it once past (soft_delete_expired). nullopt: never expires.
  std::optional<int64_t> expires_at;
  // Decides exactly as a reserve would, and writes nothing (the transaction is rolled
  // back): `lodge upload --dry-run`. A reserved outcome's record has no id.
  bool dry_run = false;
  // When set, the row is inserted only if its id is at most this (the end of the id block
  // the store's marker covers); otherwise outcome id_limit_reached and nothing written.
  std::optional<int64_t> id_limit;
  // The answer to `shareable`: the alive ACTIVE row (the one that outcome named) whose object
  // the caller found in the store. The new row shares that object and is ACTIVE at once
  // (outcome shared); share_gone if that row is no longer alive and ACTIVE.
  std::optional<int64_t> share_with;
  // upload --replace, for a shared row: the other alive rows at its path are retired as
  // confirm's `retire` does.
  std::optional<Retire> retire;
  // A file sent as a staged (multipart) upload: where the reserve would insert a new row
  // (after idempotency replay, an alive duplicate and the quota, counted as for an insert),
  // it revives the newest (highest id) resumable row instead, in the same transaction, so
  // that the staged upload that row began (its object's stamp names that row) continues:
  // outcome resumed. Resumable: UPLOAD_FAILED; the same owner_id, run_prefix, relative_path,
  // sha256 and size as the request; its own object (content_of NULL) with a
  // multipart_upload_id; its object_key starts with key_prefix; the same object Content-Type
  // (FileRecord::object_content_type(); the request's content_type, or media_type when "")
  // and object_options (the staged upload was created with them); not a direct reservation's
  // (its parts came from whoever held the URLs); its task PENDING and never claimed
  // (lease_version 0: no sweep ever held it, so none may still be deleting under a lease it
  // lost). None: a new row as usual. The revived row's task is due at its new deadline +
  // grace; a verify pass it owed stays owed. Direct reservations (`lodge reserve`) and
  // reserves with share_with never resume.
  bool resume = false;
};

// duplicate: the path's current row already holds this content (nothing to do).
// shareable: an alive ACTIVE row of the scope, at another path (or not the path's current
// row), holds this content: check its object, then reserve again with share_with.
// resumed (only with ReserveRequest::resume): a resumable row was revived in place of the
// insert: UPLOAD_FAILED -> UPLOADING, alive (deleted_at, failure_reason cleared), with what
// an insert takes from the request (holder, original_name, policy, dedup scope, idempotency
// key, stat), upload_deadline_at = now + deadline_ms, updated_at = now; its task PENDING due
// at that deadline + grace (max_retries the request's), an owed verify_pass kept, tag_owed
// 0, last_error cleared. The record is the row as it now is, its id,
// object_key and multipart_upload_id kept: the caller continues that staged upload. A dry
// run answers resumed with that record and writes nothing (rolled back).
enum class ReserveOutcome {
  reserved,
  resumed,
  duplicate,
  shareable,
  shared,
  share_gone,
  replayed,
  quota_exceeded,
  key_reused,
  in_progress,
  id_limit_reached
};

struct ReserveResult {
  ReserveOutcome outcome = ReserveOutcome::reserved;
  FileRecord record; // the new row, or the existing one for duplicate/replayed/in_progress/resumed
  // resumed: when the row's cleanup was due before the revive postponed it for this attempt.
  // Should the attempt fail again, the cleanup is due no later (a re-failure never postpones it).
  std::optional<int64_t> cleanup_due_before;
};

// What a cleanup worker may do with its task, decided in a transaction under its lease.
// tag: the row is alive and ACTIVE and its task records the committed tag as owed
// (TaskRecord::tag_owed): the worker tags the object, then end_tag (the task stays
// PROCESSING under its lease meanwhile).
enum class TaskDecision { allowed, ignored, postponed, lease_lost, tag };

enum class SettleOutcome { settled, not_pending }; // not_pending: the row or the task moved on

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

// What each transition did; every failure names the precondition that did not hold (and
// then nothing was written).
enum class ConfirmOutcome {
  confirmed,         // UPLOADING -> ACTIVE, its task IGNORED
  row_not_uploading, // the row moved on (failed by repair or a sweep, deleted) or is missing
  task_held,         // the row is UPLOADING but a sweep holds its task (PROCESSING): cleanup may be under way
};
enum class MarkFailedOutcome { failed, not_uploading };

// A barrier a confirm waits behind (Ledger::confirm_later): `make` makes durable what the
// confirm's row describes; every Durable of one non-null `domain` is covered by any one of
// them having run after all of their writes. An empty `make`: nothing to wait for. `make`
// may run on another thread after the confirm's owner is gone (an abandoned confirm), so it
// owns what it uses (store::ObjectStore::flusher).
struct Durable {
  const void *domain = nullptr;
  std::function<Status()> make;
};
// What confirm_later's wait() throws when its Durable failed: the confirm did not run.
class NotDurable : public LodgeError {
public:
  using LodgeError::LodgeError;
};
enum class SetUploadIdOutcome { recorded, not_uploading };
// renew's outcome. not_uploading: the row is no longer alive and UPLOADING (failed by repair,
// sweep or a holder check, or confirmed); not_holder: another process's row (or none's);
// past_deadline: the row's current deadline is not after `now` (repair or sweep may already
// act on it, so it is never extended). Only `renewed` changed anything.
enum class RenewOutcome { renewed, not_uploading, not_holder, past_deadline };
enum class RepairOutcome {
  repaired,
  not_overdue
}; // not_overdue: not (or no longer) an alive, overdue UPLOADING row
enum class RetryOutcome { requeued, not_failed };
enum class MissingOutcome { marked_missing, not_active }; // not_active: not an alive ACTIVE row (any more)
enum class DeadLetterOutcome { dead_lettered, lease_lost };
enum class BlockOutcome { begun, moved }; // moved: another process moved the intent meanwhile

// The store a ledger serves, kept in ledger_meta (store::Binding's fields, canonical), and
// how lodge tags its objects there: "state" (pending at upload, committed once ACTIVE: what
// a lifecycle backstop expires by), "none", or "" when not recorded (a ledger bound before
// tagging modes were; the next bind_store fills it in).
struct StoreBinding {
  std::string scheme, endpoint, location, root;
  std::string tagging;
  // The same store, whatever the tagging mode.
  [[nodiscard]] bool same_store(const StoreBinding &o) const {
    return scheme == o.scheme && endpoint == o.endpoint && location == o.location && root == o.root;
  }
  bool operator==(const StoreBinding &) const = default;
};
inline constexpr const char *k_tagging_state = "state";
inline constexpr const char *k_tagging_none = "none";

enum class Rebind { no, yes };

struct BindResult {
  std::optional<StoreBinding> previous; // the binding before (none: the ledger had none)
  bool written = false;                 // whether this call recorded `b`
};

// How a sweep ends one task it decided (Ledger::finish_many): exactly what finish,
// ignore_task, end_tag or dead_letter does with the same arguments.
struct TaskEnd {
  enum class Kind { finish, ignore, tagged, dead_letter };
  Kind kind = Kind::finish;
  TaskRecord task;           // as claimed: its lease_version is the fencing token
  bool succeeded = false;    // finish
  std::string error;         // finish (failed), dead_letter; ignore: why the object was left
  int64_t next_retry_at = 0; // finish; tagged: when a row deleted meanwhile is due for its delete
};

// How scan_files orders its rows. time: created_at; path: (run_prefix, relative_path);
// each then by id, so an order is total.
enum class FileSort { id, time, path, size };

// Which rows scan_files visits (every field narrows; all of them hold at once). Every value
// is bound, never spliced into SQL. Every member has an initializer, so a designated
// initializer may name only the ones it sets.
struct FileQuery {
  std::string owner = "*";                 // "*": every owner
  std::optional<std::string> run_prefix{}; // exactly this run prefix ("" = none)
  std::vector<std::string> run_prefixes{}; // non-empty: run_prefix is one of these
  // run_prefix starts with these bytes, literally (no wildcards; case counts).
  std::optional<std::string> prefix_start{};
  // relative_path starts with these bytes, literally (what a path glob's literal start
  // narrows to; ops applies the glob itself).
  std::optional<std::string> path_prefix{};
  std::optional<std::string> path{}; // relative_path is exactly this
  bool include_dead = false;         // also failed and deleted rows
  // The row's object_options metadata / tags hold every one of these (exact name and value).
  std::vector<std::pair<std::string, std::string>> metadata{};
  std::vector<std::pair<std::string, std::string>> tags{};
  std::optional<int64_t> since{}, until{};       // created_at in [since, until] (wall ms)
  std::optional<std::string> sha256{};           // lowercase hex
  std::optional<int64_t> min_size{}, max_size{}; // inclusive
  std::optional<int64_t> expired_by{};           // alive rows with expires_at <= this
  std::optional<int64_t> unexpired_at{};         // rows with no expires_at, or one after this
  // Among the rows matching every other field: the newest alive ACTIVE row per (owner,
  // relative_path), newest by (activated_at, id) as find_by_path orders. Implies alive ACTIVE.
  bool latest = false;
  FileSort sort = FileSort::id;
  bool descending = false;
  std::optional<int64_t> limit{};
  // Only the rows after this one in the query's order (its sort columns and id): keyset
  // paging for a caller that reads a page, lets go of the ledger, then asks for the next.
  std::optional<FileRecord> after{};
};

// One snapshot (an owner's run prefix) as prefix_summaries sees it: files, bytes and
// newest_at (max created_at) over its alive ACTIVE rows; uploading counts its alive
// UPLOADING rows (a snapshot still being written).
struct PrefixSummary {
  std::string owner_id, run_prefix;
  int64_t files = 0, bytes = 0, newest_at = 0, uploading = 0;
};

// A row of a snapshot whose object an alive row of another (owner, prefix) shares: who.
struct SharedRow {
  int64_t id = 0;
  std::string sharer_owner, sharer_prefix;
};

// What prune_snapshot and soft_delete_expired soft-deleted: how many rows, their bytes.
struct PruneOutcome {
  int64_t deleted = 0, bytes = 0;
};

// The ledger's interface, in method groups: every method is declared in exactly one group.
// An operation takes the one group it uses, or its caller role (below: the groups it uses,
// inherited virtually), so its signature says which part of the ledger it touches, and a fake
// for its tests needs to behave only there. Ledger is every group and every caller role;
// SqlLedger implements Ledger.

// The ledger's own records: its schema, the store it is bound to, the job log (the cli's
// init, store binding checks, doctor, and the job commands' run records).
class LedgerMeta {
public:
  virtual ~LedgerMeta() = default;
  [[nodiscard]] virtual int schema_version() = 0;
  virtual void record_job_run(const JobRun &run) = 0;
  // The store this ledger serves; nullopt for a ledger made before bindings existed.
  [[nodiscard]] virtual std::optional<StoreBinding> store_binding() = 0;
  // One transaction: records `b` when the ledger has no binding yet, or fills in `b`'s
  // tagging mode when the binding is b's store with none recorded, or replaces another
  // binding when rebind is yes; otherwise writes nothing. Says what was there before.
  [[nodiscard]] virtual BindResult bind_store(const StoreBinding &b, Rebind rebind) = 0;
};

// An upload's own transitions: reserve, the multipart id, confirm and settle, its failure,
// the stat cache (ops::Uploader, ops::activate; IdBlocks::reserve).
class UploadLedger {
public:
  virtual ~UploadLedger() = default;
  // One transaction: idempotency replay, alive duplicate, quota, then the UPLOADING row
  // and its cleanup task (due at deadline + grace). The key is made here. With
  // ReserveRequest::resume, a resumable failed row is revived instead of the insert.
  [[nodiscard]] virtual ReserveResult reserve(const ReserveRequest &req, int64_t now) = 0;
  // Several reserves in one transaction, one commit: each as reserve() makes it, in order, in a
  // savepoint of its own; an element is its result or the error it threw (the transaction's own
  // error is every element's). Not for a dry run. The default reserves them one by one.
  [[nodiscard]] virtual std::vector<Result<ReserveResult>>
  reserve_batch(const std::vector<ReserveRequest> &reqs, int64_t now);
  // Records the multipart upload id on an UPLOADING row; not_uploading if the row moved on.
  [[nodiscard]] virtual SetUploadIdOutcome set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                                   int64_t now) = 0;
  // A transfer's progress renews its row: one transaction moves the alive UPLOADING row's
  // upload_deadline_at to new_deadline and its cleanup task's not-before (a PENDING or RETRY
  // task's next_retry_at) to new_not_before, only while the row is held by `holder` and its
  // current deadline is still after `now`, the fencing repair and sweep decide by: a row they
  // may have judged overdue is never revived. The uploader moves its own monotonic bound only
  // after `renewed` committed.
  [[nodiscard]] virtual RenewOutcome renew(int64_t id, const std::string &holder, int64_t new_deadline,
                                           int64_t new_not_before, int64_t now) = 0;
  // UPLOADING -> ACTIVE and its task -> IGNORED, together; nothing changed when the row
  // (row_not_uploading) or the task (task_held) is no longer where an upload in progress
  // leaves them. Called through ops::activate (ops/activate.hpp), which decides the tag.
  // With CommitTag::owed the task stays PENDING (its due time unchanged) with tag_owed
  // set: settle ends it once the object is tagged committed, or a sweep tags it.
  // With `retire` (upload --replace), the same transaction soft-deletes every other alive
  // ACTIVE row of the owner at the same run prefix and relative path, each one's task due
  // at now + retire->grace_ms (the old object stays readable until sweep removes it).
  [[nodiscard]] virtual ConfirmOutcome confirm(int64_t id, const std::string &etag,
                                               const std::string &version_id, int64_t now,
                                               CommitTag tag = CommitTag::none,
                                               std::optional<Retire> retire = std::nullopt) = 0;
  // A confirm whose commit may land later: wait() returns what confirm() would have returned
  // (or throws what it would have thrown) once its commit landed. Until then nothing may
  // be reported of it. A ledger that group-commits defers it to a later batch, so that
  // many confirms commit together (GroupCommit::enqueue's `defer`); any other ledger
  // confirms at once. Its owner waits for it (the uploader, before it ends: finish()).
  // Destroying one not waited for never waits and never throws: it is abandoned, and a
  // group-committing ledger still commits it with the next batch anyone leads (a failure
  // then is logged as a warning), or, if the ledger closes first, logs that it never ran
  // (its row stays UPLOADING, recovered by repair and sweep as a killed run's).
  //
  // `durable`, when set, is what must hold before the confirm may commit: the object's store
  // flush. A group-committing ledger runs it once per batch for every confirm of the batch
  // with the same `durable.domain` (one syncfs for a batch of file:// objects); any other
  // ledger runs it before the confirm. Its error is thrown by wait() as NotDurable, and then
  // nothing was written.
  class PendingConfirm {
  public:
    virtual ~PendingConfirm() = default;
    [[nodiscard]] virtual ConfirmOutcome wait() = 0;
  };
  [[nodiscard]] virtual std::unique_ptr<PendingConfirm>
  confirm_later(int64_t id, const std::string &etag, const std::string &version_id, int64_t now,
                CommitTag tag, std::optional<Retire> retire, Durable durable = {});
  // The stat cache: the alive ACTIVE row of this owner, run prefix and relative path whose
  // recorded stat and size are exactly these (the newest, if several), or nullopt.
  [[nodiscard]] virtual std::optional<FileRecord> find_unchanged(const std::string &owner,
                                                                 const std::string &run_prefix,
                                                                 const std::string &relative_path,
                                                                 const FileStat &stat, int64_t size) = 0;
  // Records the stat of an alive ACTIVE row (a file found a duplicate of its own row by its
  // digest, whose stat was not known or has changed without its content); false when the
  // row is no longer alive and ACTIVE.
  virtual bool record_stat(int64_t id, const FileStat &stat, int64_t now) = 0;
  // After the object of a confirmed row was tagged committed: its task (PENDING or RETRY,
  // not held by a worker) becomes IGNORED with tag_owed cleared, if the row is still alive
  // and ACTIVE.
  [[nodiscard]] virtual SettleOutcome settle(int64_t record_id, int64_t now) = 0;
  // UPLOADING -> UPLOAD_FAILED (+ deleted); when run_now, the task becomes due at once.
  // not_uploading when the row was not UPLOADING any more.
  [[nodiscard]] virtual MarkFailedOutcome mark_failed(int64_t id, const std::string &reason, bool run_now,
                                                      int64_t now) = 0;
  // A staged (multipart) transfer failed with its staged upload intact (a part failed, the
  // stall, the deadline, an abort): one transaction makes the alive UPLOADING row
  // UPLOAD_FAILED + deleted (failure_reason = reason, deleted_at = now) and moves its task,
  // when PENDING or RETRY (its status kept), to next_retry_at = due_at, owing no verify pass
  // (none is set: the failure is definite, a part never becomes an object by itself). So a
  // reserve with `resume` before due_at revives the row and continues its parts, and a
  // sweep after it aborts the staged upload. A task a sweep holds (PROCESSING) is left to
  // its decide, which finds the row dead. not_uploading (nothing written) when the row was
  // not alive and UPLOADING.
  [[nodiscard]] virtual MarkFailedOutcome fail_resumable(int64_t id, const std::string &reason,
                                                         int64_t due_at, int64_t now) = 0;
};

// Cleanup tasks under leases: claim, decide, end, requeue, dead-letter, retry (ops::cleanup,
// sweep and reconcile, an upload's own compensation; `lodge tasks retry`).
class TaskLedger {
public:
  virtual ~TaskLedger() = default;
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
  // ahead, allowed otherwise. A dead row: allowed. An alive ACTIVE row: ignored, or `tag`
  // when the task records its object as owed the committed tag (tag_owed): what confirm
  // recorded decides, never the caller's store or configuration.
  [[nodiscard]] virtual TaskDecision decide(const TaskRecord &t, int64_t now, int64_t grace_ms) = 0;
  // The task (still ours: PROCESSING, the same lease_version) becomes IGNORED when the object
  // at its key was left (not this row's by its stamp, or kept by the guard): then `reason`
  // becomes its last_error (empty: unchanged). success or lease_lost.
  [[nodiscard]] virtual TaskFinish ignore_task(const TaskRecord &t, int64_t now,
                                               const std::string &reason = {}) = 0;
  // After a `tag` decision's tag was set: the task (still ours) becomes IGNORED, tag_owed
  // cleared, if its row is still alive and ACTIVE; a row deleted meanwhile (its delete found
  // the task held) makes it PENDING again, due at `due`, so that the delete happens.
  // success (either way) or lease_lost.
  [[nodiscard]] virtual TaskFinish end_tag(const TaskRecord &t, int64_t due, int64_t now) = 0;
  // Finishes a task only if its lease is still ours (status PROCESSING, same version).
  // Failed: RETRY (or FAILED past max_retries) due at next_retry_at. Succeeded: SUCCESS,
  // or, when the task owes a verify pass, PENDING again due at next_retry_at.
  [[nodiscard]] virtual TaskFinish finish(const TaskRecord &t, bool succeeded, const std::string &error,
                                          int64_t next_retry_at, int64_t now) = 0;
  // A claimed batch in one transaction: each task decided exactly as decide() would, under
  // its own lease, each in its own savepoint (one task's lost lease or rollback never
  // touches another's). The decisions, in the order of `tasks`. An error rolls the whole
  // batch back (the tasks stay PROCESSING under their leases, as after a crash).
  [[nodiscard]] virtual std::vector<TaskDecision> decide_many(const std::vector<TaskRecord> &tasks,
                                                              int64_t now, int64_t grace_ms) = 0;
  // The batch's ends in one transaction, each exactly its single call under its own lease
  // and savepoint: finish's outcome; ignore_task's and end_tag's success or lease_lost;
  // dead_letter's dead_lettered as TaskFinish::dead_letter, or lease_lost. In the order of
  // `ends`.
  [[nodiscard]] virtual std::vector<TaskFinish> finish_many(const std::vector<TaskEnd> &ends,
                                                            int64_t now) = 0;
  // Tasks that would be claimed now (for --dry-run), oldest first.
  [[nodiscard]] virtual std::vector<TaskRecord> due_tasks(int64_t now, int limit) = 0;
  // FAILED (dead letter) -> PENDING, due now, retry count reset. not_failed if not FAILED.
  [[nodiscard]] virtual RetryOutcome retry_task(int64_t task_id, int64_t now) = 0;
  // Makes a dead row's finished task pending again, due now (a leftover object): queued,
  // not_dead (no such row, or alive), or held (a worker has the task right now).
  [[nodiscard]] virtual QueueOutcome requeue_task_for(int64_t record_id, int64_t now, int max_retries) = 0;
  // The dead-letter path for a task whose delete must not happen (the object at its key
  // is not its row's): FAILED at once with `error`, only under the caller's lease.
  [[nodiscard]] virtual DeadLetterOutcome dead_letter(const TaskRecord &t, const std::string &error,
                                                      int64_t now) = 0;
};

// Rows taken out of the upload path by someone other than their sender: repair of overdue
// and abandoned uploads, `lodge delete`, an object found missing (ops::repair,
// ops::recover_abandoned, direct uploads' confirm --all-due, the uploader's de-dup check).
class RecoveryLedger {
public:
  virtual ~RecoveryLedger() = default;
  // Alive UPLOADING rows past their deadline, oldest deadline first.
  [[nodiscard]] virtual std::vector<FileRecord> overdue_uploads(int64_t now, int limit) = 0;
  // One transaction: re-checks the row is alive, UPLOADING and overdue; marks it
  // UPLOAD_FAILED + deleted; makes sure its task is pending, due no sooner than
  // deadline + grace. not_overdue when the row had moved on.
  [[nodiscard]] virtual RepairOutcome repair_row(int64_t id, int64_t now, int64_t grace_ms,
                                                 int max_retries) = 0;
  // Alive UPLOADING rows whose holder starts with `holder_prefix` (this host's), by id.
  [[nodiscard]] virtual std::vector<FileRecord> held_uploads(const std::string &holder_prefix, int limit) = 0;
  // One transaction: re-checks the row is alive, UPLOADING and still held by `holder` (a
  // process the caller proved gone); fails it as repair_row does, before its deadline,
  // with `reason`. Its task is made pending, owing a verify pass (a PUT that was wholly
  // sent may still land), due at the earlier of now + grace and (deadline + grace, or now
  // when that has passed). not_overdue when it moved on.
  [[nodiscard]] virtual RepairOutcome fail_abandoned(int64_t id, const std::string &holder,
                                                     const std::string &reason, int64_t now, int64_t grace_ms,
                                                     int max_retries) = 0;
  // Soft-deletes an alive ACTIVE row of the owner (quota freed at once) and makes its
  // task pending, due after the grace.
  [[nodiscard]] virtual DeleteOutcome soft_delete(int64_t id, const std::string &owner, int64_t now,
                                                  int64_t grace_ms, int max_retries) = 0;
  // An alive ACTIVE row whose object the store no longer has: soft-deleted with `reason` as
  // its failure_reason (its quota and de-dup slot freed at once) and its task made pending,
  // due after the grace (deleting a missing key is harmless). not_active when the row was
  // not alive and ACTIVE any more (nothing changed). Deciding that the object is missing
  // is the caller's.
  [[nodiscard]] virtual MissingOutcome mark_missing(int64_t id, const std::string &reason, int64_t now,
                                                    int64_t grace_ms, int max_retries) = 0;
  // `lodge prune`, one snapshot: ONE transaction soft-deletes (exactly as soft_delete: quota
  // freed, task PENDING due at now + grace_ms) every alive ACTIVE row of (owner, run_prefix)
  // with created_at <= created_until (what the plan saw; a row uploaded since is kept),
  // except keep_ids (rows a kept snapshot shares). Returns how many and their bytes.
  [[nodiscard]] virtual PruneOutcome prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                                    int64_t created_until,
                                                    const std::vector<int64_t> &keep_ids, int64_t now,
                                                    int64_t grace_ms, int max_retries) = 0;
  // `lodge prune --expired`: one transaction soft-deletes (as above) up to `limit` alive
  // ACTIVE rows with expires_at <= now, lowest id first. Callers loop until it returns 0.
  [[nodiscard]] virtual PruneOutcome soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries,
                                                         int limit) = 0;
};

// Reads that change nothing: which ledger this is (the uuid objects are stamped with, the
// location messages name), status, rows and tasks by id, path or key (the cli's status,
// list, show, get and tasks; ops::retrieve; every stamp check; reconcile's walk).
class LedgerReports {
public:
  virtual ~LedgerReports() = default;
  // Where the ledger is, as people see it in messages: the SQLite path, or the PostgreSQL
  // URL without its password.
  [[nodiscard]] virtual const std::string &location() const = 0;
  // The uuid made when the ledger was created; stamped into every object's metadata.
  [[nodiscard]] virtual const std::string &uuid() const = 0;
  // The figures status reports at `now`; files_failed_since counts the rows that became
  // UPLOAD_FAILED at or after `failed_since` (ms).
  [[nodiscard]] virtual StatusReport status(int64_t now, int64_t failed_since) = 0;
  [[nodiscard]] StatusReport status(int64_t now) { return status(now, now); }
  [[nodiscard]] virtual std::optional<FileRecord> find_file(int64_t id) = 0;
  // The rows q selects, streamed in q's order (visit returning false stops the scan); the
  // result is never held. A row's expires_at is read as every read reads it.
  virtual void scan_files(const FileQuery &q, const std::function<bool(const FileRecord &)> &visit) = 0;
  // The rows q selects, collected: for a caller that wants a handful (tests, a path's rows).
  [[nodiscard]] std::vector<FileRecord> list_files(const FileQuery &q) {
    std::vector<FileRecord> out;
    scan_files(q, [&](const FileRecord &r) {
      out.push_back(r);
      return true;
    });
    return out;
  }
  // One entry per (owner, run_prefix) with an alive row matching q (q's include_dead,
  // latest, sort and limit are ignored), ordered by owner, run_prefix: the snapshots prune
  // plans over and `list --prefix-glob` matches.
  virtual void prefix_summaries(const FileQuery &q,
                                const std::function<bool(const PrefixSummary &)> &visit) = 0;
  // The distinct values of metadata `name` recorded on the rows (any state) of `owner` ("*":
  // every owner) that start with `start` (bytes, case counts), in byte order, at most `limit`:
  // what a short commit (`--metadata cicommit=3f2a9c1`) may name.
  [[nodiscard]] virtual std::vector<std::string>
  metadata_values(const std::string &owner, const std::string &name, const std::string &start, int limit) = 0;
  // The alive rows of the snapshot (owner, run_prefix) whose object an alive row of another
  // (owner, prefix) shares (content_of either way: the snapshot's row wrote it and another
  // shares it, or both share a third row's object), each with that sharer's owner and
  // prefix (one entry per row and sharer prefix), by id. With `unexpired_at`, rows (of the
  // snapshot and sharers) whose expires_at is at or before it count as gone (prune --expired
  // deletes them first; its dry run plans as if it had).
  [[nodiscard]] virtual std::vector<SharedRow> shared_outside(const std::string &owner,
                                                              const std::string &run_prefix,
                                                              std::optional<int64_t> unexpired_at) = 0;
  // The alive ACTIVE rows of (owner, run prefix, relative path), newest first (activated_at,
  // then id). More than one only under the "none" de-dup scope, or for different content.
  [[nodiscard]] virtual std::vector<FileRecord>
  find_by_path(const std::string &owner, const std::string &run_prefix, const std::string &relative_path) = 0;
  [[nodiscard]] virtual std::optional<TaskRecord> find_task_for(int64_t record_id) = 0;
  // Tasks in one status (all when nullopt), streamed by id (visit returning false stops
  // the scan); the result is never held (PostgreSQL reads it in pages).
  virtual void scan_tasks(std::optional<TaskStatus> status,
                          const std::function<bool(const TaskRecord &)> &visit) = 0;
  // The same, collected: for a caller that wants a handful (tests).
  [[nodiscard]] std::vector<TaskRecord> list_tasks(std::optional<TaskStatus> status) {
    std::vector<TaskRecord> out;
    scan_tasks(status, [&](const TaskRecord &t) {
      out.push_back(t);
      return true;
    });
    return out;
  }
  // Rows whose key starts with prefix (and sorts after `after`, when not empty), in byte
  // order of key (the store's listing order).
  virtual void rows_by_key(const std::string &prefix, const std::string &after,
                           const std::function<bool(const FileRecord &)> &visit) = 0;
  // The highest record id this ledger ever issued.
  [[nodiscard]] virtual int64_t max_record_id() = 0;
};

// Id blocks and divergence: the numbers ops/id_blocks keeps its rule with (the rule is
// there; these only store it), and the diverged state every job checks before it acts.
class IdBlockLedger {
public:
  virtual ~IdBlockLedger() = default;
  [[nodiscard]] virtual IdBlockState id_blocks() = 0;
  // One transaction: when the recorded intent is still `expected_intent`, records
  // `new_intent` as the block end being advanced to. moved when another process moved it.
  [[nodiscard]] virtual BlockOutcome begin_id_block(int64_t expected_intent, int64_t new_intent,
                                                    int64_t now) = 0;
  // The store's marker now covers `end`: block_end = max(block_end, end).
  virtual void end_id_block(int64_t end, int64_t now) = 0;
  // The store's mark is above everything this ledger reserved. One transaction: the
  // file_upload sequence moves past store_mark, block end and intent become store_mark, and
  // the divergence is recorded (a later reconcile is asked for again). True when the ledger
  // was not already diverged.
  [[nodiscard]] virtual bool record_divergence(int64_t store_mark, int64_t now) = 0;
  // A reconcile read the whole store after the divergence was detected.
  virtual void note_reconciled(int64_t now) = 0;
  // `lodge init --accept-diverged`: clears the divergence, only after a reconcile.
  [[nodiscard]] virtual AcceptOutcome accept_divergence(int64_t now) = 0;
};

// Caller roles: what each operation that uses more than one method group takes. Each declares
// nothing: it inherits its groups virtually (a method reached along two paths is one method),
// through the roles of the operations it calls in turn, so a caller passes its own role on.
// They are here, not in outbox.hpp, because this header includes that one. A Ledger converts
// implicitly to every one.

// ops::run_claimed_task and ops::run_claimed_batch (sweep, consume, an upload's compensation).
class CleanupLedger : public virtual TaskLedger, public virtual LedgerReports {};
// ops::IdBlocks::advance and ops::check_divergence (the store's id marker).
class MarkLedger : public virtual LedgerReports, public virtual IdBlockLedger {};
// ops::IdBlocks::reserve.
class ReserveLedger : public virtual MarkLedger, public virtual UploadLedger {};
// ops::recover_abandoned and ops::repair.
class RepairLedger : public virtual IdBlockLedger, public virtual RecoveryLedger {};
// ops::wait_for_upload and ops::wait_for_holder.
class WaitLedger : public virtual RepairLedger, public virtual LedgerReports {};
// ops::sweep.
class SweepLedger : public virtual CleanupLedger, public virtual MarkLedger, public virtual OutboxLedger {};
// ops::reconcile.
class ReconcileLedger : public virtual MarkLedger, public virtual UploadLedger, public virtual TaskLedger {};
// ops::consume.
class ConsumeLedger : public virtual CleanupLedger, public virtual OutboxLedger {};
// ops::prune.
class PruneLedger : public virtual RecoveryLedger, public virtual LedgerReports {};
// ops::Uploader and ops::run_upload (every group but LedgerMeta).
class UploaderLedger : public virtual ReserveLedger,
                       public virtual CleanupLedger,
                       public virtual WaitLedger {};

// The whole ledger: every method group and every caller role. What open_ledger and
// LedgerPool::worker give (the cli holds one and passes it where a role is asked for) and
// what SqlLedger (and a test's fake) implement.
class Ledger : public virtual LedgerMeta,
               public virtual UploadLedger,
               public virtual TaskLedger,
               public virtual RecoveryLedger,
               public virtual LedgerReports,
               public virtual IdBlockLedger,
               public virtual OutboxLedger,
               public virtual CleanupLedger,
               public virtual MarkLedger,
               public virtual ReserveLedger,
               public virtual RepairLedger,
               public virtual WaitLedger,
               public virtual SweepLedger,
               public virtual ReconcileLedger,
               public virtual ConsumeLedger,
               public virtual PruneLedger,
               public virtual UploaderLedger {};

// Ledgers for the worker threads of one process, one worker() per thread, sharing one set of
// connections: each call borrows one for itself (every method is its own transaction), opened
// only when none is free, up to a bound. On SQLite the upload path's writes (reserve,
// reserve_batch, renew, confirm, settle, mark_failed, ...) go to the pool's one writer, which
// commits whatever is queued in one transaction, each request in its own savepoint (group
// commit: one fsync for many; each reserve sees every earlier one, so quota and de-duplication
// hold; a result is returned only once committed). PostgreSQL commits them in parallel.
class LedgerPool {
public:
  virtual ~LedgerPool() = default;
  // A ledger for one thread (thread-safe to call).
  [[nodiscard]] virtual std::unique_ptr<Ledger> worker() = 0;
};

struct PoolOptions {
  bool group_commit = true; // false: every worker commits on its own (for comparison)
  size_t max_batch = 64;    // requests per transaction at most
  // The pool's bound (SQLite's group writer is one more). 0: SQLite max(4, 2 x hardware threads);
  // PostgreSQL 32, and at most what the server's max_connections leaves as the pool opens.
  size_t max_connections = 0;
};

// Opens the pool's shared writer (when it has one) and its first connection at once, so a
// bad location fails here.
[[nodiscard]] std::shared_ptr<LedgerPool> open_ledger_pool(const OpenOptions &opts,
                                                           const PoolOptions &pool = {});

// Whether a ledger location names a PostgreSQL database (postgres:... or postgresql:..., or
// a libpq keyword string: one holding a '=' that does not start with '/' or '.') rather than
// a SQLite file: nothing may treat it as a path then.
[[nodiscard]] bool is_postgres_location(std::string_view location);
// A ledger location as people may see it (messages, `lodge config`): a SQLite path as it
// is; a PostgreSQL location as postgres://user@host:port/dbname, never its password.
[[nodiscard]] std::string shown_location(const std::string &location);

// Opens (creating when missing and opts.create: a SQLite file with mode 0600) and migrates
// the ledger at opts.location. Throws LodgeError: LEDGER_NOT_FOUND, LEDGER_UNUSABLE
// (corrupt, not a database, a symlink, not a lodge ledger), LEDGER_TOO_NEW,
// LEDGER_ON_NETWORK_FS, LEDGER_LOCKED, LEDGER_UNAVAILABLE (a server not reached).
[[nodiscard]] std::unique_ptr<Ledger> open_ledger(const OpenOptions &opts);

} // namespace lodge::ledger
