#pragma once
// One Ledger fake: rows and tasks in memory, moved by the protocol's own state machine
// (SqlLedger's transitions, deciding by ledger::decide_task), every transition recorded in
// order, and calls failed on script: before their write (the ledger was not reached) or after
// it (the write committed, its answer was lost). One mutex per ledger: the uploader's part
// threads, a sweep's lanes and the connections of connect() call it concurrently.
//
// The outbox (ledger/outbox.hpp) is modelled too: the task's sent_at and message_id (cleared
// by every transition that makes a task PENDING), and the upload events the schema's triggers
// write (file.active, file.deleted, file.failed, for the types set_outbox_settings recorded),
// each written by the transition that reports it (set_row and reserve's insert).
//
// It is the ledger contract's third backend (tests/ledger, LODGE_TEST_LEDGER=fake, beside
// SQLite and PostgreSQL): every contract case but the SQL-only ones (the sqlonly suite) pins
// it to SqlLedger's behaviour, so the ops unit tests (tests/unit) run on a ledger that behaves
// as the real one. Not modelled (std::logic_error): status() only. What needs SQL itself (raw
// connections, schema versions and migrations, group commit, locks between processes) is
// the sqlonly suite's, on SQLite and PostgreSQL.

#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::test {

// One upload event as the ledger holds it (outbox_event's row).
struct FakeEvent {
  int64_t id = 0;
  ledger::EventType type = ledger::EventType::file_active;
  int64_t record_id = 0;
  int64_t occurred_at = 0;
  std::optional<int64_t> sent_at;
  std::optional<std::string> message_id;
};

// One state change of a row or a task, as the ledger call `op` made it. States as shown:
// rows UPLOADING, ACTIVE, ACTIVE+deleted, UPLOAD_FAILED; tasks PENDING, PROCESSING, RETRY,
// SUCCESS, FAILED, IGNORED, with "+tag_owed" while the task records the tag as owed and
// "+sent" while its outbox event is recorded as sent (sent_at); "" before the row or task
// existed. mark_tasks_sent records "PENDING -> PENDING+sent". Claims (claim_due, claim_task) are recorded as
// "claim"; a batch's items under the single call's name (decide, finish, ignore_task, end_tag, dead_letter).
struct LedgerTransition {
  std::string op;
  int64_t record_id = 0;
  std::string subject; // "row" or "task"
  std::string from, to;
  // "confirm #3 row UPLOADING -> ACTIVE", "reserve #3 task none -> PENDING"
  [[nodiscard]] std::string text() const {
    return op + " #" + std::to_string(record_id) + " " + subject + " " + (from.empty() ? "none" : from) +
           " -> " + to;
  }
};

class FakeLedger final : public ledger::Ledger {
public:
  // A new, empty ledger; `location` is what location() says (messages name it).
  explicit FakeLedger(std::string location = "fake-ledger");
  // Another connection to this ledger, as another process opening its location gets: the
  // same rows, tasks, scripts and records, behind the same lock.
  [[nodiscard]] std::unique_ptr<FakeLedger> connect() const;

  // --- scripting ---
  // The next `times` calls of `op` (a method name: "confirm", "mark_failed", "finish_many",
  // ...) throw LodgeError(code) before writing anything, as a ledger that was not reached.
  void fail_next(const std::string &op, Errc code = Errc::ledger_unavailable, int times = 1);
  // The next `times` calls of `op` make their write and then throw
  // LodgeError(ledger_unavailable): committed, but the caller never heard (the answer lost).
  void lose_answer(const std::string &op, int times = 1);
  // Runs `fn` once, just before the next call of `op` takes the ledger's lock: what another
  // process does in between (it may call this ledger).
  void before_next(const std::string &op, std::function<void()> fn);
  // confirm_later's confirm runs when its owner waits for it (as a group commit's batch does),
  // never before; one destroyed unwaited never runs (recorded in abandoned_confirms()).
  // Default: it runs at once, inside confirm_later.
  void defer_confirms(bool on = true);

  // --- what happened ---
  [[nodiscard]] std::vector<LedgerTransition> transitions() const;
  // Each transition's text(), in order; only those of `record_id` when given.
  [[nodiscard]] std::vector<std::string> history(std::optional<int64_t> record_id = std::nullopt) const;
  // Every call, by method name, in order (the failed ones too).
  [[nodiscard]] std::vector<std::string> calls() const;
  [[nodiscard]] size_t count(const std::string &op) const;
  [[nodiscard]] std::vector<int64_t> abandoned_confirms() const;
  [[nodiscard]] std::vector<ledger::JobRun> job_runs() const;
  // The row and the task as they are, without recording a call.
  [[nodiscard]] ledger::FileRecord row(int64_t id) const;
  [[nodiscard]] ledger::TaskRecord task_of(int64_t record_id) const;
  // Every upload event written, by id (sent or not), without recording a call.
  [[nodiscard]] std::vector<FakeEvent> events() const;

  // --- behind the ledger's back ---
  // Changes the task of `record_id` as an UPDATE on a raw connection would (what no ledger
  // call may, for a test's set-up): nothing else moves, nothing is recorded.
  void edit_task(int64_t record_id, const std::function<void(ledger::TaskRecord &)> &change);

  // --- ledger::Ledger ---
  [[nodiscard]] const std::string &location() const override;
  [[nodiscard]] const std::string &uuid() const override;
  [[nodiscard]] int schema_version() override;
  using Ledger::status;
  [[nodiscard]] ledger::StatusReport status(int64_t now, int64_t failed_since) override;
  void record_job_run(const ledger::JobRun &run) override;
  [[nodiscard]] std::optional<ledger::StoreBinding> store_binding() override;
  [[nodiscard]] ledger::BindResult bind_store(const ledger::StoreBinding &b, ledger::Rebind rebind) override;

  [[nodiscard]] ledger::ReserveResult reserve(const ledger::ReserveRequest &req, int64_t now) override;
  // Recorded as "reserve_batch", then each request's reserve as UploadLedger's default makes it.
  [[nodiscard]] std::vector<Result<ledger::ReserveResult>>
  reserve_batch(const std::vector<ledger::ReserveRequest> &reqs, int64_t now) override;
  [[nodiscard]] ledger::SetUploadIdOutcome set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                                   int64_t now) override;
  [[nodiscard]] ledger::RenewOutcome renew(int64_t id, const std::string &holder, int64_t new_deadline,
                                           int64_t new_not_before, int64_t now) override;
  [[nodiscard]] ledger::ConfirmOutcome confirm(int64_t id, const std::string &etag,
                                               const std::string &version_id, int64_t now,
                                               ledger::CommitTag tag = ledger::CommitTag::none,
                                               std::optional<ledger::Retire> retire = std::nullopt) override;
  [[nodiscard]] std::unique_ptr<PendingConfirm> confirm_later(int64_t id, const std::string &etag,
                                                              const std::string &version_id, int64_t now,
                                                              ledger::CommitTag tag,
                                                              std::optional<ledger::Retire> retire,
                                                              ledger::Durable durable = {}) override;
  [[nodiscard]] std::optional<ledger::FileRecord>
  find_unchanged(const std::string &owner, const std::string &run_prefix, const std::string &relative_path,
                 const ledger::FileStat &stat, int64_t size) override;
  bool record_stat(int64_t id, const ledger::FileStat &stat, int64_t now) override;
  [[nodiscard]] ledger::SettleOutcome settle(int64_t record_id, int64_t now) override;
  [[nodiscard]] ledger::MarkFailedOutcome mark_failed(int64_t id, const std::string &reason, bool run_now,
                                                      int64_t now) override;
  [[nodiscard]] ledger::MarkFailedOutcome fail_resumable(int64_t id, const std::string &reason,
                                                         int64_t due_at, int64_t now) override;
  [[nodiscard]] std::optional<ledger::FileRecord> find_file(int64_t id) override;
  void scan_files(const ledger::FileQuery &q,
                  const std::function<bool(const ledger::FileRecord &)> &visit) override;
  void prefix_summaries(const ledger::FileQuery &q,
                        const std::function<bool(const ledger::PrefixSummary &)> &visit) override;
  [[nodiscard]] std::vector<std::string> metadata_values(const std::string &owner, const std::string &name,
                                                         const std::string &start, int limit) override;
  [[nodiscard]] std::vector<ledger::SharedRow> shared_outside(const std::string &owner,
                                                              const std::string &run_prefix,
                                                              std::optional<int64_t> unexpired_at) override;
  [[nodiscard]] std::vector<ledger::FileRecord> find_by_path(const std::string &owner,
                                                             const std::string &run_prefix,
                                                             const std::string &relative_path) override;
  [[nodiscard]] std::optional<ledger::TaskRecord> find_task_for(int64_t record_id) override;

  [[nodiscard]] std::vector<ledger::TaskRecord> claim_due(int64_t now, int limit, const std::string &worker,
                                                          int64_t lease_ms) override;
  [[nodiscard]] std::optional<ledger::TaskRecord>
  claim_task(int64_t task_id, int64_t now, const std::string &worker, int64_t lease_ms) override;
  [[nodiscard]] ledger::TaskDecision decide(const ledger::TaskRecord &t, int64_t now,
                                            int64_t grace_ms) override;
  [[nodiscard]] ledger::TaskFinish ignore_task(const ledger::TaskRecord &t, int64_t now,
                                               const std::string &reason = {}) override;
  [[nodiscard]] ledger::TaskFinish end_tag(const ledger::TaskRecord &t, int64_t due, int64_t now) override;
  [[nodiscard]] ledger::TaskFinish finish(const ledger::TaskRecord &t, bool succeeded,
                                          const std::string &error, int64_t next_retry_at,
                                          int64_t now) override;
  [[nodiscard]] std::vector<ledger::TaskDecision> decide_many(const std::vector<ledger::TaskRecord> &tasks,
                                                              int64_t now, int64_t grace_ms) override;
  [[nodiscard]] std::vector<ledger::TaskFinish> finish_many(const std::vector<ledger::TaskEnd> &ends,
                                                            int64_t now) override;
  [[nodiscard]] std::vector<ledger::TaskRecord> due_tasks(int64_t now, int limit) override;
  void scan_tasks(std::optional<ledger::TaskStatus> status,
                  const std::function<bool(const ledger::TaskRecord &)> &visit) override;
  [[nodiscard]] ledger::RetryOutcome retry_task(int64_t task_id, int64_t now) override;

  [[nodiscard]] std::vector<ledger::FileRecord> overdue_uploads(int64_t now, int limit) override;
  [[nodiscard]] ledger::RepairOutcome repair_row(int64_t id, int64_t now, int64_t grace_ms,
                                                 int max_retries) override;
  [[nodiscard]] std::vector<ledger::FileRecord> held_uploads(const std::string &holder_prefix,
                                                             int limit) override;
  [[nodiscard]] ledger::RepairOutcome fail_abandoned(int64_t id, const std::string &holder,
                                                     const std::string &reason, int64_t now, int64_t grace_ms,
                                                     int max_retries) override;
  [[nodiscard]] ledger::DeleteOutcome soft_delete(int64_t id, const std::string &owner, int64_t now,
                                                  int64_t grace_ms, int max_retries) override;
  [[nodiscard]] ledger::MissingOutcome mark_missing(int64_t id, const std::string &reason, int64_t now,
                                                    int64_t grace_ms, int max_retries) override;
  [[nodiscard]] ledger::PruneOutcome prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                                    int64_t created_until,
                                                    const std::vector<int64_t> &keep_ids, int64_t now,
                                                    int64_t grace_ms, int max_retries) override;
  [[nodiscard]] ledger::PruneOutcome soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries,
                                                         int limit) override;

  void rows_by_key(const std::string &prefix, const std::string &after,
                   const std::function<bool(const ledger::FileRecord &)> &visit) override;
  [[nodiscard]] int64_t max_record_id() override;
  [[nodiscard]] ledger::QueueOutcome requeue_task_for(int64_t record_id, int64_t now,
                                                      int max_retries) override;
  [[nodiscard]] ledger::DeadLetterOutcome dead_letter(const ledger::TaskRecord &t, const std::string &error,
                                                      int64_t now) override;

  [[nodiscard]] ledger::IdBlockState id_blocks() override;
  [[nodiscard]] ledger::BlockOutcome begin_id_block(int64_t expected_intent, int64_t new_intent,
                                                    int64_t now) override;
  void end_id_block(int64_t end, int64_t now) override;
  [[nodiscard]] bool record_divergence(int64_t store_mark, int64_t now) override;
  void note_reconciled(int64_t now) override;
  [[nodiscard]] ledger::AcceptOutcome accept_divergence(int64_t now) override;

  [[nodiscard]] ledger::OutboxSettings outbox_settings() override;
  [[nodiscard]] ledger::SetOutboxOutcome set_outbox_settings(const ledger::OutboxSettings &s) override;
  [[nodiscard]] std::vector<ledger::TaskRecord> unsent_due_tasks(int64_t now, int limit) override;
  int64_t mark_tasks_sent(const std::vector<ledger::SentMark> &marks, int64_t now) override;
  [[nodiscard]] ledger::EventClaim claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                                   int64_t lease_ms) override;
  [[nodiscard]] std::vector<ledger::UploadEvent> unsent_events(int limit) override;
  int64_t mark_events_sent(const std::vector<ledger::SentMark> &marks, int64_t now) override;
  [[nodiscard]] ledger::OutboxCounts outbox_counts(int64_t now) override;
  [[nodiscard]] std::vector<ledger::TaskRecord>
  claim_due_not_queued(int64_t now, int limit, const std::string &worker, int64_t lease_ms) override;

private:
  struct Script {
    std::string op;
    enum class Kind { fail, lose, before } kind = Kind::fail;
    Errc code = Errc::ledger_unavailable;
    int times = 1;
    std::function<void()> fn;
  };
  struct State; // the ledger every connection shares: its data, scripts and records
  class Deferred;

  explicit FakeLedger(std::shared_ptr<State> state);

  // Every public call: the scripts of `op`, then `body` under the lock.
  template <class F> auto call(const char *op, F &&body) -> decltype(body());
  bool take(const std::string &op, Script::Kind kind, Errc *code = nullptr);

  // With the lock held.
  ledger::FileRecord *row_at(int64_t id);
  ledger::TaskRecord *task_for(int64_t record_id);
  ledger::TaskRecord *task_at(int64_t task_id);
  ledger::TaskRecord *held(const ledger::TaskRecord &t); // still ours: PROCESSING, same lease_version
  void set_row(const char *op, ledger::FileRecord &r,
               const std::function<void(ledger::FileRecord &)> &change);
  void set_task(const char *op, ledger::TaskRecord &t,
                const std::function<void(ledger::TaskRecord &)> &change);
  // The schema's triggers: the upload event a row's change from `before` to `after` reports
  // (none for an insert's `before` = nullptr unless the row is ACTIVE), when its type is recorded.
  void record_events(const ledger::FileRecord *before, const ledger::FileRecord &after);
  [[nodiscard]] bool key_in_use(const std::string &key, int64_t except_id) const;
  [[nodiscard]] static bool due(const ledger::TaskRecord &t, int64_t now);
  ledger::QueueOutcome ensure_pending_task(const char *op, int64_t record_id, const std::string &key,
                                           int64_t due, int max_retries, bool verify, int64_t now);
  bool fail_overdue_row(const char *op, int64_t id, int64_t now, const std::string &by);
  // soft_delete's change of an alive ACTIVE row (dead, task pending after the grace).
  void soft_delete_locked(const char *op, ledger::FileRecord &r, int64_t now, int64_t grace_ms,
                          int max_retries);
  void retire_others(const char *op, int64_t id, const ledger::Retire &retire, int64_t now);
  std::optional<ledger::ReserveResult> dedup_answer(const ledger::ReserveRequest &req,
                                                    std::optional<ledger::FileRecord> &share);
  // ReserveRequest::resume: the newest resumable row, revived (unless a dry run) with its
  // task; nullopt when none. `prior`: the dead row whose idempotency key the reserve takes over.
  std::optional<ledger::ReserveResult> revive_resumable(const ledger::ReserveRequest &req, int64_t now,
                                                        ledger::FileRecord *prior);
  ledger::ConfirmOutcome confirm_locked(int64_t id, const std::string &etag, const std::string &version_id,
                                        int64_t now, ledger::CommitTag tag,
                                        std::optional<ledger::Retire> retire);
  ledger::TaskDecision decide_locked(const ledger::TaskRecord &t, int64_t now, int64_t grace_ms);
  ledger::TaskFinish finish_locked(const ledger::TaskRecord &t, bool succeeded, const std::string &error,
                                   int64_t next_retry_at, int64_t now);
  ledger::TaskFinish ignore_locked(const ledger::TaskRecord &t, int64_t now, const std::string &reason);
  ledger::TaskFinish end_tag_locked(const ledger::TaskRecord &t, int64_t due, int64_t now);
  ledger::DeadLetterOutcome dead_letter_locked(const ledger::TaskRecord &t, const std::string &error,
                                               int64_t now);
  std::optional<ledger::TaskRecord> claim_locked(ledger::TaskRecord &t, int64_t now,
                                                 const std::string &worker, int64_t lease_ms);
  std::vector<ledger::TaskRecord>
  claim_due_locked(int64_t now, int limit, const std::string &worker, int64_t lease_ms,
                   const std::function<bool(const ledger::TaskRecord &)> &which);

  std::shared_ptr<State> m_s;
};

// Worker ledgers for a run (ops::RunDeps::worker_ledger): every handle is the one fake,
// whose mutex serializes the workers' calls, so the run's transitions all land in one history.
class FakeLedgerPool {
public:
  explicit FakeLedgerPool(FakeLedger &l) : m_l(l) {}
  // A handle that owns nothing (the fake outlives the run).
  [[nodiscard]] std::shared_ptr<ledger::Ledger> worker() {
    ++m_handed;
    return {std::shared_ptr<void>(), &m_l};
  }
  [[nodiscard]] int handed() const { return m_handed.load(); }

private:
  FakeLedger &m_l;
  std::atomic<int> m_handed{0};
};

} // namespace lodge::test
