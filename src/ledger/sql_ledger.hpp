#pragma once
// The ledger, written once over the driver seam (ledger/sql.hpp); internal to the ledger
// layer. Every write is one Conn::write transaction; every transition names the state it
// expects and checks that exactly the expected rows changed.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/sql.hpp>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace lodge::ledger {

class GroupCommit;

// The columns every file_upload read selects (a shared row reads as its object's key), in
// the order read_file reads them.
extern const char *const k_file_cols;
// How many columns k_file_cols names (read_file reads them from 0): a column selected after
// them is at this index.
inline constexpr int k_file_col_count = 32;
[[nodiscard]] FileRecord read_file(const sql::Stmt &st);
// The alive rows of the owner with the digest (`owner`, `sha256`: parameters, "?N"), as a
// condition on file_upload ("id IN (...)"): the rows of the unique index on (owner, sha256,
// run_prefix) and those of file_upload_alive_other_digest, which together hold every alive
// row once. Each probe names its index's condition, as SQLite needs to take a partial index.
[[nodiscard]] std::string alive_with_digest(const std::string &owner, const std::string &sha256);
// The same for cleanup_task, in the order read_task reads them.
extern const char *const k_task_cols;
[[nodiscard]] TaskRecord read_task(const sql::Stmt &st);

class SqlLedger final : public Ledger {
public:
  // `conn`: a connection to a migrated ledger (a driver's open_*). With `group`, the upload
  // path's writes (reserve, set_multipart_upload_id, confirm, settle, mark_failed,
  // fail_resumable) go to the group's writer, batched with other threads' (GroupCommit
  // below); everything else runs on `conn`.
  explicit SqlLedger(std::unique_ptr<sql::Conn> conn, std::shared_ptr<GroupCommit> group = nullptr);
  [[nodiscard]] sql::Conn &connection() { return *m_c; }

  [[nodiscard]] const std::string &location() const override { return m_c->display_name(); }
  [[nodiscard]] const std::string &uuid() const override { return m_uuid; }
  [[nodiscard]] int schema_version() override;
  using LedgerReports::status;
  [[nodiscard]] StatusReport status(int64_t now, int64_t failed_since) override;
  void record_job_run(const JobRun &run) override;
  [[nodiscard]] std::optional<StoreBinding> store_binding() override;
  [[nodiscard]] BindResult bind_store(const StoreBinding &b, Rebind rebind) override;

  [[nodiscard]] ReserveResult reserve(const ReserveRequest &req, int64_t now) override;
  [[nodiscard]] std::vector<Result<ReserveResult>> reserve_batch(const std::vector<ReserveRequest> &reqs,
                                                                 int64_t now) override;
  [[nodiscard]] SetUploadIdOutcome set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                           int64_t now) override;
  [[nodiscard]] RenewOutcome renew(int64_t id, const std::string &holder, int64_t new_deadline,
                                   int64_t new_not_before, int64_t now) override;
  [[nodiscard]] ConfirmOutcome confirm(int64_t id, const std::string &etag, const std::string &version_id,
                                       int64_t now, CommitTag tag = CommitTag::none,
                                       std::optional<Retire> retire = std::nullopt) override;
  [[nodiscard]] std::unique_ptr<PendingConfirm> confirm_later(int64_t id, const std::string &etag,
                                                              const std::string &version_id, int64_t now,
                                                              CommitTag tag, std::optional<Retire> retire,
                                                              Durable durable) override;
  [[nodiscard]] std::optional<FileRecord> find_unchanged(const std::string &owner,
                                                         const std::string &run_prefix,
                                                         const std::string &relative_path,
                                                         const FileStat &stat, int64_t size) override;
  bool record_stat(int64_t id, const FileStat &stat, int64_t now) override;
  [[nodiscard]] SettleOutcome settle(int64_t record_id, int64_t now) override;
  [[nodiscard]] MarkFailedOutcome mark_failed(int64_t id, const std::string &reason, bool run_now,
                                              int64_t now) override;
  [[nodiscard]] MarkFailedOutcome fail_resumable(int64_t id, const std::string &reason, int64_t due_at,
                                                 int64_t now) override;
  [[nodiscard]] std::optional<FileRecord> find_file(int64_t id) override;
  void scan_files(const FileQuery &f, const std::function<bool(const FileRecord &)> &visit) override;
  void prefix_summaries(const FileQuery &f, const std::function<bool(const PrefixSummary &)> &visit) override;
  [[nodiscard]] std::vector<std::string> metadata_values(const std::string &owner, const std::string &name,
                                                         const std::string &start, int limit) override;
  [[nodiscard]] std::vector<SharedRow> shared_outside(const std::string &owner, const std::string &run_prefix,
                                                      std::optional<int64_t> unexpired_at) override;
  [[nodiscard]] std::vector<FileRecord> find_by_path(const std::string &owner, const std::string &run_prefix,
                                                     const std::string &relative_path) override;
  [[nodiscard]] std::optional<TaskRecord> find_task_for(int64_t record_id) override;
  [[nodiscard]] std::vector<TaskRecord> claim_due(int64_t now, int limit, const std::string &worker,
                                                  int64_t lease_ms) override;
  [[nodiscard]] std::optional<TaskRecord> claim_task(int64_t task_id, int64_t now, const std::string &worker,
                                                     int64_t lease_ms) override;
  [[nodiscard]] TaskDecision decide(const TaskRecord &t, int64_t now, int64_t grace_ms) override;
  [[nodiscard]] TaskFinish ignore_task(const TaskRecord &t, int64_t now,
                                       const std::string &reason = {}) override;
  [[nodiscard]] TaskFinish end_tag(const TaskRecord &t, int64_t due, int64_t now) override;
  [[nodiscard]] TaskFinish finish(const TaskRecord &t, bool succeeded, const std::string &error,
                                  int64_t next_retry_at, int64_t now) override;
  [[nodiscard]] std::vector<TaskDecision> decide_many(const std::vector<TaskRecord> &tasks, int64_t now,
                                                      int64_t grace_ms) override;
  [[nodiscard]] std::vector<TaskFinish> finish_many(const std::vector<TaskEnd> &ends, int64_t now) override;

  [[nodiscard]] std::vector<TaskRecord> due_tasks(int64_t now, int limit) override;
  void scan_tasks(std::optional<TaskStatus> status,
                  const std::function<bool(const TaskRecord &)> &visit) override;
  [[nodiscard]] RetryOutcome retry_task(int64_t task_id, int64_t now) override;
  [[nodiscard]] std::vector<FileRecord> overdue_uploads(int64_t now, int limit) override;
  [[nodiscard]] RepairOutcome repair_row(int64_t id, int64_t now, int64_t grace_ms, int max_retries) override;
  [[nodiscard]] std::vector<FileRecord> held_uploads(const std::string &holder_prefix, int limit) override;
  [[nodiscard]] RepairOutcome fail_abandoned(int64_t id, const std::string &holder, const std::string &reason,
                                             int64_t now, int64_t grace_ms, int max_retries) override;
  [[nodiscard]] DeleteOutcome soft_delete(int64_t id, const std::string &owner, int64_t now, int64_t grace_ms,
                                          int max_retries) override;
  [[nodiscard]] MissingOutcome mark_missing(int64_t id, const std::string &reason, int64_t now,
                                            int64_t grace_ms, int max_retries) override;
  [[nodiscard]] PruneOutcome prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                            int64_t created_until, const std::vector<int64_t> &keep_ids,
                                            int64_t now, int64_t grace_ms, int max_retries) override;
  [[nodiscard]] PruneOutcome soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries,
                                                 int limit) override;
  void rows_by_key(const std::string &prefix, const std::string &after,
                   const std::function<bool(const FileRecord &)> &visit) override;
  [[nodiscard]] int64_t max_record_id() override;
  [[nodiscard]] QueueOutcome requeue_task_for(int64_t record_id, int64_t now, int max_retries) override;
  [[nodiscard]] DeadLetterOutcome dead_letter(const TaskRecord &t, const std::string &error,
                                              int64_t now) override;
  [[nodiscard]] IdBlockState id_blocks() override;
  [[nodiscard]] BlockOutcome begin_id_block(int64_t expected_intent, int64_t new_intent,
                                            int64_t now) override;
  void end_id_block(int64_t end, int64_t now) override;
  [[nodiscard]] bool record_divergence(int64_t store_mark, int64_t now) override;
  void note_reconciled(int64_t now) override;
  [[nodiscard]] AcceptOutcome accept_divergence(int64_t now) override;

  // The outbox (sql_outbox.cpp).
  [[nodiscard]] OutboxSettings outbox_settings() override;
  [[nodiscard]] SetOutboxOutcome set_outbox_settings(const OutboxSettings &s) override;
  [[nodiscard]] std::vector<TaskRecord> unsent_due_tasks(int64_t now, int limit) override;
  int64_t mark_tasks_sent(const std::vector<SentMark> &marks, int64_t now) override;
  [[nodiscard]] EventClaim claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                           int64_t lease_ms) override;
  [[nodiscard]] std::vector<UploadEvent> unsent_events(int limit) override;
  int64_t mark_events_sent(const std::vector<SentMark> &marks, int64_t now) override;
  [[nodiscard]] OutboxCounts outbox_counts(int64_t now) override;
  [[nodiscard]] std::vector<TaskRecord>
  claim_due_not_queued(int64_t now, int limit, const std::string &worker, int64_t lease_ms) override;

private:
  using Stmt = sql::Stmt;
  [[nodiscard]] Stmt q(std::string_view sql) { return Stmt(m_c->prepare(sql)); }

  // Makes the row's task PENDING due at `due` (inserting it when missing), unless a
  // worker holds it (held); resets a finished one. `verify`: the task owes a verify pass.
  // Inside the caller's write transaction, after it read (and locked) the row.
  // claim_due's transaction, the due tasks narrowed by `only` ("" or " AND ...").
  std::vector<TaskRecord> claim_due_where(int64_t now, int limit, const std::string &worker, int64_t lease_ms,
                                          const char *only);
  QueueOutcome ensure_pending_task(int64_t record_id, const std::string &key, int64_t due, int max_retries,
                                   bool verify, int64_t now);
  // UPLOADING (alive, overdue) -> UPLOAD_FAILED + deleted: repair's transition, also taken
  // by decide(). False when the row was not there any more.
  bool fail_overdue_row(int64_t id, int64_t now, std::string_view by);
  // Inside a batch's transaction, after an item: throws when the database ended it.
  void still_in_batch(const char *what);
  // The first row matching `where`; `lock`: m_c->for_update() inside a write transaction
  // that then changes the row, "" otherwise.
  std::optional<FileRecord> file_where(const std::string &where, const std::function<void(Stmt &)> &bind,
                                       const char *lock = "");
  std::optional<FileRecord> file_for_update(int64_t id);
  // reserve's pieces, inside its transaction. Idempotency replay: an answer, or nullopt to
  // go on. The de-dup answer (duplicate, shareable, in_progress, share_gone), or nullopt.
  std::optional<ReserveResult> replay_by_key(const ReserveRequest &req, int64_t now);
  std::optional<ReserveResult> dedup_answer(const ReserveRequest &req, std::optional<FileRecord> &share);
  // ReserveRequest::resume: the newest resumable row revived with its task (outcome
  // resumed), or nullopt when there is none (the caller inserts).
  std::optional<ReserveResult> revive_resumable(const ReserveRequest &req, int64_t now);
  // reserve_batch's reserves, inside its transaction (a batch of the group, or its own).
  std::vector<Result<ReserveResult>> reserve_each(const std::vector<ReserveRequest> &reqs, int64_t now);
  // Inserts the new row (UPLOADING, or ACTIVE sharing `share`'s object) and its task.
  ReserveResult insert_reserved(const ReserveRequest &req, const std::optional<FileRecord> &share,
                                int64_t now);
  // file_attr: the metadata and tags of a new row's object_options (its search index),
  // inside reserve's transaction.
  void record_attrs(int64_t id, const std::string &object_options);
  // A prune's soft delete of one alive ACTIVE row read (and locked) in the caller's
  // transaction: as soft_delete's. False when the row was no longer alive and ACTIVE.
  bool soft_delete_row(const FileRecord &row, int64_t now, int64_t grace_ms, int max_retries);
  // upload --replace: every other alive ACTIVE row at row `id`'s path is soft-deleted, its
  // object's task due after the grace.
  void retire_others(int64_t id, const Retire &retire, int64_t now);
  // Whether an alive row other than `except_id` uses the object at `key` (its own, or shared).
  bool key_in_use(const std::string &key, int64_t except_id);
  std::optional<TaskRecord> task_by_id(int64_t id, const char *lock = "");
  std::optional<TaskRecord> task_for_record(int64_t record_id, const char *lock = "");
  // ledger_meta reads and writes (the writes inside the caller's transaction, which took
  // lock_meta() first: a key may not have a row to lock yet).
  void lock_meta();
  std::optional<std::string> meta_text(const char *key);
  std::optional<int64_t> meta_int(const char *key);
  void set_meta(const char *key, const std::string &value);
  void clear_meta(const char *key);
  std::optional<Divergence> divergence();

  std::unique_ptr<sql::Conn> m_c;
  std::string m_uuid;
  std::shared_ptr<GroupCommit> m_group;
};

// Group commit: one writer connection shared by the worker threads of a process. A thread
// that calls run() queues its request; the first one that finds no batch running becomes
// the leader, takes every queued request (at most max_batch), runs them in one write
// transaction, each in its own savepoint (one request's rollback or exception never touches
// another's), commits once, and hands each its own result or exception. Nobody waits for
// partners: a batch is whatever queued while the one before committed. When SQLite rolls
// the whole transaction back under a request (SQLITE_FULL, IOERR, ...), the requests that
// ran get that error and the ones that did not run are queued again.
//
// An upload's confirm carries a Durable (its object must be durable before its row says
// so): the leader runs it once per batch and domain before BEGIN, so a batch of file://
// objects costs one syncfs. Confirms are deferred (enqueue's `defer`) so that such batches
// are big. (Measured: a flusher thread running syncfs beside the commits, so reserves never
// wait for one, made more and smaller commits and was slower at --jobs 8.)
class GroupCommit {
public:
  GroupCommit(std::unique_ptr<sql::Conn> conn, size_t max_batch);
  GroupCommit(const GroupCommit &) = delete;
  GroupCommit &operator=(const GroupCommit &) = delete;
  ~GroupCommit();

  // Runs f(writer) in a batch; returns what it returned once the batch committed, or throws
  // what f threw, or what the batch's commit threw.
  template <class F> auto run(F &&f) {
    using R = std::invoke_result_t<F &, SqlLedger &>;
    std::optional<R> out;
    submit([&](SqlLedger &w) { out.emplace(f(w)); });
    return std::move(*out);
  }

  struct Stats {
    int64_t requests = 0, commits = 0, largest = 0, flushes = 0;
    int64_t flush_us = 0, batch_us = 0; // time in store flushes, and in the batches' transactions
  };
  [[nodiscard]] Stats stats();

  struct Request {
    std::function<void(SqlLedger &)> fn;
    Durable durable; // made before the batch begins, once per domain; its error skips fn
    std::exception_ptr error;
    bool done = false;
    bool deferred = false;  // in m_deferred (enqueue's `defer`), not taken by a batch yet
    bool abandoned = false; // its enqueuer will never wait for it (abandon)
    std::string what;       // what it is, for the warning an abandoned request's failure gets
    std::chrono::steady_clock::time_point queued{};
    // Its enqueuer waits on this (wait()): woken when it is done, or to lead the next batch.
    std::condition_variable cv;
    bool waiting = false;
  };
  // Queues f for the next batch without waiting: whoever leads next runs it. wait(me)
  // returns once it ran and its batch committed (leading a batch itself if none is
  // running), then me.error holds what it threw, if anything. A request its enqueuer will
  // not wait for is abandon()ed. With `durable`, the batch's leader runs
  // durable.make after taking the batch and before beginning it, once for all of the
  // batch's requests of that domain (its failure is each one's NotDurable, and their f do
  // not run).
  //
  // With `defer` (an upload's confirm), it may wait for a later batch: the deferred requests
  // all go with the next batch once k_defer_max of them wait, the oldest waited
  // k_defer_ms, or somebody waits for one of them. So a batch of confirms shares one
  // store flush and one commit, and a reserve (which a PUT waits for) never waits for a
  // flush it does not need.
  [[nodiscard]] std::shared_ptr<Request> enqueue(std::function<void(SqlLedger &)> f, Durable durable = {},
                                                 bool defer = false);
  static constexpr size_t k_defer_max = 64;
  static constexpr int k_defer_ms = 50;
  void wait(Request &me);
  // Says that nobody will wait for `r` (`what` names it in warnings), and returns at once:
  // never leads, never waits. A request not run yet stays queued and goes with the next batch
  // anyone leads (f and durable.make must not refer to what its enqueuer destroys); its
  // error, if it ends with one, is logged as a warning. One still queued when the group
  // closes never runs, and a warning says so (a confirm's row then stays UPLOADING, for
  // repair and sweep, as a killed run's).
  void abandon(const std::shared_ptr<Request> &r, std::string what);

private:
  void submit(std::function<void(SqlLedger &)> fn);
  // Runs one batch (no lock held); returns the requests that did not run.
  std::vector<std::shared_ptr<Request>> lead(const std::vector<std::shared_ptr<Request>> &batch);
  // Runs each domain's durable.make once for the batch; returns how many it ran.
  static int64_t make_durable(const std::vector<std::shared_ptr<Request>> &batch);

  std::unique_ptr<SqlLedger> m_writer;
  size_t m_max;
  std::mutex m_mu;
  // Owned here too: an abandoned request outlives its enqueuer's handle until it ran.
  std::deque<std::shared_ptr<Request>> m_queue;
  std::vector<std::shared_ptr<Request>> m_deferred; // enqueued with `defer`, in order
  bool m_deferred_wanted = false;                   // somebody waits for one of them
  bool m_leading = false;
  // The requests whose enqueuers are in wait(), in the order they came: a batch's end wakes
  // its own and the first one still to run (the next leader), never every thread.
  std::vector<Request *> m_waiters;
  Stats m_stats;
};

} // namespace lodge::ledger
