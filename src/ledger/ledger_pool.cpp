// The ledger pool (ledger.hpp: LedgerPool, open_ledger_pool): one set of connections per run,
// shared by its workers, so 256 workers open (and parse the schema on) a handful of
// connections, not 256. A worker's ledger holds none: each call borrows one for itself and
// gives it back when it returns, which is sound because every Ledger method is its own
// transaction (none spans two calls).
#include "ledger_pool.hpp"

#include "drivers.hpp"
#include "sql_ledger.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <lodge/util/log.hpp>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lodge::ledger {
namespace {

// PostgreSQL: every call is a transaction of its own on its connection (the server commits
// them in parallel), so the pool is what bounds the run's connections.
constexpr size_t k_postgres_connections = 32;

// SQLite: the group's one writer, and WAL readers, which read side by side.
size_t sqlite_readers() {
  return std::max<size_t>(4, 2 * static_cast<size_t>(std::thread::hardware_concurrency()));
}

// What the PostgreSQL server lets the pool open, read once on its first connection: its
// max_connections less the slots kept for superusers (and, from PostgreSQL 16, for
// pg_use_reserved_connections) and the backends connected to a database now (the server's
// own processes have none), the pool's first among them, so it counts back in. At least 1.
// A server that will not say (a role that may not read pg_stat_activity): no bound of its own.
size_t server_allows(sql::Conn &c) {
  try {
    sql::Stmt st(c.prepare("SELECT current_setting('max_connections')::int"
                           " - current_setting('superuser_reserved_connections')::int"
                           " - COALESCE(current_setting('reserved_connections', true), '0')::int"
                           " - (SELECT count(*) FROM pg_stat_activity WHERE datid IS NOT NULL) + 1"));
    if (!st.step()) return std::numeric_limits<size_t>::max();
    return static_cast<size_t>(std::max<int64_t>(1, st.col_int(0)));
  } catch (const LodgeError &e) {
    util::log::debug("ledger: the server's connection limit was not read (" + std::string(e.what()) +
                     "): the pool keeps its own");
    return std::numeric_limits<size_t>::max();
  }
}

// The pool's connections, each a SqlLedger: the first opened with the pool; one more only
// when a call finds none free and fewer than the maximum are open, otherwise the call waits
// for one to come back. Every one opened is owned here until the pool and the last worker
// ledger are gone, so what a call returns may refer to its SqlLedger.
class Connections {
public:
  using Open = std::function<std::unique_ptr<SqlLedger>()>;
  Connections(Open open, std::unique_ptr<SqlLedger> first, size_t max, std::shared_ptr<GroupCommit> group)
      : m_open(std::move(open)), m_first(first.get()), m_max(std::max<size_t>(max, 1)),
        m_group(std::move(group)) {
    m_all.push_back(std::move(first));
    m_free.push_back(m_first);
  }
  Connections(const Connections &) = delete;
  Connections &operator=(const Connections &) = delete;
  ~Connections() {
    try {
      if (m_workers > 0)
        util::log::debug("ledger: " + std::to_string(opened()) + " connections for " +
                         std::to_string(m_workers.load()) + " workers (" + std::to_string(m_waits) +
                         " waits for a free one)");
    } catch (...) { // a log line that cannot be made is not worth ending the process for
    }
  }

  // The connection opened with the pool. Stays open, and its location and uuid never change.
  [[nodiscard]] SqlLedger &first() { return *m_first; }
  [[nodiscard]] bool group_commits() const { return m_group != nullptr; }
  void add_worker() { ++m_workers; }

  [[nodiscard]] size_t opened() {
    std::lock_guard lock(m_mu);
    return m_all.size() + (m_group ? 1 : 0);
  }
  [[nodiscard]] size_t max() {
    std::lock_guard lock(m_mu);
    return m_max + (m_group ? 1 : 0);
  }

  // A free connection, or a new one, or (at the maximum) the next one given back.
  SqlLedger *take() {
    std::unique_lock lock(m_mu);
    bool waited = false;
    while (m_free.empty() && m_all.size() + m_opening >= m_max) {
      if (!waited) ++m_waits;
      waited = true;
      m_cv.wait(lock);
    }
    if (!m_free.empty()) {
      SqlLedger *l = m_free.back(); // the one given back last: its pages are the warmest
      m_free.pop_back();
      return l;
    }
    ++m_opening;
    lock.unlock();
    std::unique_ptr<SqlLedger> made;
    try {
      made = m_open();
    } catch (const LodgeError &e) {
      // The server's slots or the process's files ran out since the pool opened (the first
      // connection proved the ledger there): the pool keeps the connections it has, and this
      // call waits for one of them.
      lock.lock();
      --m_opening;
      m_max = m_all.size() + m_opening;
      const size_t kept = m_all.size();
      lock.unlock();
      util::log::debug(std::string("ledger: no more connections for the pool (") + e.what() + "): it keeps " +
                       std::to_string(kept));
      return take();
    } catch (...) {
      lock.lock();
      --m_opening;
      m_cv.notify_one();
      throw;
    }
    lock.lock();
    --m_opening;
    m_all.push_back(std::move(made));
    return m_all.back().get();
  }

  void give_back(SqlLedger *l) {
    {
      std::lock_guard lock(m_mu);
      m_free.push_back(l);
    }
    m_cv.notify_one();
  }

private:
  Open m_open;
  SqlLedger *m_first;
  std::mutex m_mu;
  std::condition_variable m_cv;
  size_t m_max;
  size_t m_opening = 0; // being opened now, outside the lock
  std::vector<std::unique_ptr<SqlLedger>> m_all;
  std::vector<SqlLedger *> m_free;
  int64_t m_waits = 0;
  std::atomic<int64_t> m_workers{0};
  std::shared_ptr<GroupCommit> m_group; // SQLite's: every reader's SqlLedger holds it too
};

// The connections this thread has borrowed, innermost last.
thread_local std::vector<std::pair<const Connections *, SqlLedger *>> t_held;

// A connection borrowed for one call, given back when the call returns. A call made on a
// thread that already holds one of the same pool (a scan's visit calling a worker ledger)
// runs on that one: a thread never waits for a second connection of a pool, so a small pool
// cannot deadlock on itself.
class Lease {
public:
  explicit Lease(Connections &pool) : m_pool(pool) {
    for (const auto &[p, l] : t_held)
      if (p == &pool) {
        m_l = l;
        return;
      }
    m_l = pool.take();
    m_own = true;
    try {
      t_held.emplace_back(&pool, m_l);
    } catch (...) {
      pool.give_back(m_l);
      throw;
    }
  }
  Lease(const Lease &) = delete;
  Lease &operator=(const Lease &) = delete;
  ~Lease() {
    if (!m_own) return;
    t_held.pop_back();
    m_pool.give_back(m_l);
  }
  [[nodiscard]] SqlLedger &operator*() const { return *m_l; }

private:
  Connections &m_pool;
  SqlLedger *m_l = nullptr;
  bool m_own = false;
};

// A worker's ledger: every virtual method of Ledger, the ones with a default of their own
// among them (reserve_batch, confirm_later: SqlLedger's batch through the group commit),
// forwarded to a SqlLedger of the pool. Each forwarder calls the SqlLedger directly, never
// back into the pool.
class PooledLedger final : public Ledger {
public:
  explicit PooledLedger(std::shared_ptr<Connections> pool) : m_pool(std::move(pool)) {}

private:
  // f on a connection borrowed for this one call.
  template <class F> decltype(auto) on_conn(F &&f) {
    Lease lease(*m_pool);
    return f(*lease);
  }
  // An upload-path write. With group commit SqlLedger sends it to the group's writer and never
  // touches its own connection (each of those methods starts with `if (m_group) return
  // m_group->...`: sql_reserve.cpp, sql_confirm.cpp), so it runs on the pool's first SqlLedger
  // from any number of threads at once, and none is borrowed: a worker waiting for its batch
  // holds no connection another worker's read could use, and a batch gathers every worker
  // that waits, not only as many as there are connections. Without group commit, a borrowed
  // one.
  template <class F> decltype(auto) on_group(F &&f) {
    if (m_pool->group_commits()) return f(m_pool->first());
    return on_conn(std::forward<F>(f));
  }

public:
  [[nodiscard]] const std::string &location() const override { return m_pool->first().location(); }
  [[nodiscard]] const std::string &uuid() const override { return m_pool->first().uuid(); }
  [[nodiscard]] int schema_version() override {
    return on_conn([&](SqlLedger &l) { return l.schema_version(); });
  }
  using LedgerReports::status;
  [[nodiscard]] StatusReport status(int64_t now, int64_t failed_since) override {
    return on_conn([&](SqlLedger &l) { return l.status(now, failed_since); });
  }
  void record_job_run(const JobRun &run) override {
    on_conn([&](SqlLedger &l) { l.record_job_run(run); });
  }
  [[nodiscard]] std::optional<StoreBinding> store_binding() override {
    return on_conn([&](SqlLedger &l) { return l.store_binding(); });
  }
  [[nodiscard]] BindResult bind_store(const StoreBinding &b, Rebind rebind) override {
    return on_conn([&](SqlLedger &l) { return l.bind_store(b, rebind); });
  }

  // The upload path's writes: group-committed on SQLite (on_group).
  [[nodiscard]] ReserveResult reserve(const ReserveRequest &req, int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.reserve(req, now); });
  }
  [[nodiscard]] std::vector<Result<ReserveResult>> reserve_batch(const std::vector<ReserveRequest> &reqs,
                                                                 int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.reserve_batch(reqs, now); });
  }
  [[nodiscard]] SetUploadIdOutcome set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                           int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.set_multipart_upload_id(id, upload_id, now); });
  }
  [[nodiscard]] RenewOutcome renew(int64_t id, const std::string &holder, int64_t new_deadline,
                                   int64_t new_not_before, int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.renew(id, holder, new_deadline, new_not_before, now); });
  }
  [[nodiscard]] ConfirmOutcome confirm(int64_t id, const std::string &etag, const std::string &version_id,
                                       int64_t now, CommitTag tag = CommitTag::none,
                                       std::optional<Retire> retire = std::nullopt) override {
    return on_group([&](SqlLedger &l) { return l.confirm(id, etag, version_id, now, tag, retire); });
  }
  // What it returns outlives the call, and never uses a connection of the pool: with group
  // commit it is queued on the group's writer (it holds the group, not the SqlLedger);
  // without, SqlLedger confirms at once, on the borrowed connection, before this returns,
  // and the result only hands back that outcome.
  [[nodiscard]] std::unique_ptr<PendingConfirm> confirm_later(int64_t id, const std::string &etag,
                                                              const std::string &version_id, int64_t now,
                                                              CommitTag tag, std::optional<Retire> retire,
                                                              Durable durable = {}) override {
    return on_group([&](SqlLedger &l) {
      return l.confirm_later(id, etag, version_id, now, tag, retire, std::move(durable));
    });
  }
  [[nodiscard]] std::optional<FileRecord> find_unchanged(const std::string &owner,
                                                         const std::string &run_prefix,
                                                         const std::string &relative_path,
                                                         const FileStat &stat, int64_t size) override {
    return on_conn(
        [&](SqlLedger &l) { return l.find_unchanged(owner, run_prefix, relative_path, stat, size); });
  }
  bool record_stat(int64_t id, const FileStat &stat, int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.record_stat(id, stat, now); });
  }
  [[nodiscard]] SettleOutcome settle(int64_t record_id, int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.settle(record_id, now); });
  }
  [[nodiscard]] MarkFailedOutcome mark_failed(int64_t id, const std::string &reason, bool run_now,
                                              int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.mark_failed(id, reason, run_now, now); });
  }
  [[nodiscard]] MarkFailedOutcome fail_resumable(int64_t id, const std::string &reason, int64_t due_at,
                                                 int64_t now) override {
    return on_group([&](SqlLedger &l) { return l.fail_resumable(id, reason, due_at, now); });
  }

  [[nodiscard]] std::optional<FileRecord> find_file(int64_t id) override {
    return on_conn([&](SqlLedger &l) { return l.find_file(id); });
  }
  void scan_files(const FileQuery &f, const std::function<bool(const FileRecord &)> &visit) override {
    on_conn([&](SqlLedger &l) { l.scan_files(f, visit); });
  }
  void prefix_summaries(const FileQuery &f,
                        const std::function<bool(const PrefixSummary &)> &visit) override {
    on_conn([&](SqlLedger &l) { l.prefix_summaries(f, visit); });
  }
  [[nodiscard]] std::vector<std::string> metadata_values(const std::string &owner, const std::string &name,
                                                         const std::string &start, int limit) override {
    return on_conn([&](SqlLedger &l) { return l.metadata_values(owner, name, start, limit); });
  }
  [[nodiscard]] std::vector<SharedRow> shared_outside(const std::string &owner, const std::string &run_prefix,
                                                      std::optional<int64_t> unexpired_at) override {
    return on_conn([&](SqlLedger &l) { return l.shared_outside(owner, run_prefix, unexpired_at); });
  }
  [[nodiscard]] std::vector<FileRecord> find_by_path(const std::string &owner, const std::string &run_prefix,
                                                     const std::string &relative_path) override {
    return on_conn([&](SqlLedger &l) { return l.find_by_path(owner, run_prefix, relative_path); });
  }
  [[nodiscard]] std::optional<TaskRecord> find_task_for(int64_t record_id) override {
    return on_conn([&](SqlLedger &l) { return l.find_task_for(record_id); });
  }
  void scan_tasks(std::optional<TaskStatus> status,
                  const std::function<bool(const TaskRecord &)> &visit) override {
    on_conn([&](SqlLedger &l) { l.scan_tasks(status, visit); });
  }
  void rows_by_key(const std::string &prefix, const std::string &after,
                   const std::function<bool(const FileRecord &)> &visit) override {
    on_conn([&](SqlLedger &l) { l.rows_by_key(prefix, after, visit); });
  }
  [[nodiscard]] int64_t max_record_id() override {
    return on_conn([&](SqlLedger &l) { return l.max_record_id(); });
  }

  [[nodiscard]] std::vector<TaskRecord> claim_due(int64_t now, int limit, const std::string &worker,
                                                  int64_t lease_ms) override {
    return on_conn([&](SqlLedger &l) { return l.claim_due(now, limit, worker, lease_ms); });
  }
  [[nodiscard]] std::optional<TaskRecord> claim_task(int64_t task_id, int64_t now, const std::string &worker,
                                                     int64_t lease_ms) override {
    return on_conn([&](SqlLedger &l) { return l.claim_task(task_id, now, worker, lease_ms); });
  }
  [[nodiscard]] TaskDecision decide(const TaskRecord &t, int64_t now, int64_t grace_ms) override {
    return on_conn([&](SqlLedger &l) { return l.decide(t, now, grace_ms); });
  }
  [[nodiscard]] TaskFinish ignore_task(const TaskRecord &t, int64_t now,
                                       const std::string &reason = {}) override {
    return on_conn([&](SqlLedger &l) { return l.ignore_task(t, now, reason); });
  }
  [[nodiscard]] TaskFinish end_tag(const TaskRecord &t, int64_t due, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.end_tag(t, due, now); });
  }
  [[nodiscard]] TaskFinish finish(const TaskRecord &t, bool succeeded, const std::string &error,
                                  int64_t next_retry_at, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.finish(t, succeeded, error, next_retry_at, now); });
  }
  [[nodiscard]] std::vector<TaskDecision> decide_many(const std::vector<TaskRecord> &tasks, int64_t now,
                                                      int64_t grace_ms) override {
    return on_conn([&](SqlLedger &l) { return l.decide_many(tasks, now, grace_ms); });
  }
  [[nodiscard]] std::vector<TaskFinish> finish_many(const std::vector<TaskEnd> &ends, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.finish_many(ends, now); });
  }
  [[nodiscard]] std::vector<TaskRecord> due_tasks(int64_t now, int limit) override {
    return on_conn([&](SqlLedger &l) { return l.due_tasks(now, limit); });
  }
  [[nodiscard]] RetryOutcome retry_task(int64_t task_id, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.retry_task(task_id, now); });
  }
  [[nodiscard]] QueueOutcome requeue_task_for(int64_t record_id, int64_t now, int max_retries) override {
    return on_conn([&](SqlLedger &l) { return l.requeue_task_for(record_id, now, max_retries); });
  }
  [[nodiscard]] DeadLetterOutcome dead_letter(const TaskRecord &t, const std::string &error,
                                              int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.dead_letter(t, error, now); });
  }

  [[nodiscard]] std::vector<FileRecord> overdue_uploads(int64_t now, int limit) override {
    return on_conn([&](SqlLedger &l) { return l.overdue_uploads(now, limit); });
  }
  [[nodiscard]] RepairOutcome repair_row(int64_t id, int64_t now, int64_t grace_ms,
                                         int max_retries) override {
    return on_conn([&](SqlLedger &l) { return l.repair_row(id, now, grace_ms, max_retries); });
  }
  [[nodiscard]] std::vector<FileRecord> held_uploads(const std::string &holder_prefix, int limit) override {
    return on_conn([&](SqlLedger &l) { return l.held_uploads(holder_prefix, limit); });
  }
  [[nodiscard]] RepairOutcome fail_abandoned(int64_t id, const std::string &holder, const std::string &reason,
                                             int64_t now, int64_t grace_ms, int max_retries) override {
    return on_conn(
        [&](SqlLedger &l) { return l.fail_abandoned(id, holder, reason, now, grace_ms, max_retries); });
  }
  [[nodiscard]] DeleteOutcome soft_delete(int64_t id, const std::string &owner, int64_t now, int64_t grace_ms,
                                          int max_retries) override {
    return on_conn([&](SqlLedger &l) { return l.soft_delete(id, owner, now, grace_ms, max_retries); });
  }
  [[nodiscard]] MissingOutcome mark_missing(int64_t id, const std::string &reason, int64_t now,
                                            int64_t grace_ms, int max_retries) override {
    return on_conn([&](SqlLedger &l) { return l.mark_missing(id, reason, now, grace_ms, max_retries); });
  }
  [[nodiscard]] PruneOutcome prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                            int64_t created_until, const std::vector<int64_t> &keep_ids,
                                            int64_t now, int64_t grace_ms, int max_retries) override {
    return on_conn([&](SqlLedger &l) {
      return l.prune_snapshot(owner, run_prefix, created_until, keep_ids, now, grace_ms, max_retries);
    });
  }
  [[nodiscard]] PruneOutcome soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries,
                                                 int limit) override {
    return on_conn([&](SqlLedger &l) { return l.soft_delete_expired(now, grace_ms, max_retries, limit); });
  }

  [[nodiscard]] IdBlockState id_blocks() override {
    return on_conn([&](SqlLedger &l) { return l.id_blocks(); });
  }
  [[nodiscard]] BlockOutcome begin_id_block(int64_t expected_intent, int64_t new_intent,
                                            int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.begin_id_block(expected_intent, new_intent, now); });
  }
  void end_id_block(int64_t end, int64_t now) override {
    on_conn([&](SqlLedger &l) { l.end_id_block(end, now); });
  }
  [[nodiscard]] bool record_divergence(int64_t store_mark, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.record_divergence(store_mark, now); });
  }
  void note_reconciled(int64_t now) override {
    on_conn([&](SqlLedger &l) { l.note_reconciled(now); });
  }
  [[nodiscard]] AcceptOutcome accept_divergence(int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.accept_divergence(now); });
  }

  [[nodiscard]] OutboxSettings outbox_settings() override {
    return on_conn([&](SqlLedger &l) { return l.outbox_settings(); });
  }
  [[nodiscard]] SetOutboxOutcome set_outbox_settings(const OutboxSettings &s) override {
    return on_conn([&](SqlLedger &l) { return l.set_outbox_settings(s); });
  }
  [[nodiscard]] std::vector<TaskRecord> unsent_due_tasks(int64_t now, int limit) override {
    return on_conn([&](SqlLedger &l) { return l.unsent_due_tasks(now, limit); });
  }
  int64_t mark_tasks_sent(const std::vector<SentMark> &marks, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.mark_tasks_sent(marks, now); });
  }
  [[nodiscard]] EventClaim claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                           int64_t lease_ms) override {
    return on_conn([&](SqlLedger &l) { return l.claim_sent_task(task_id, now, worker, lease_ms); });
  }
  [[nodiscard]] std::vector<UploadEvent> unsent_events(int limit) override {
    return on_conn([&](SqlLedger &l) { return l.unsent_events(limit); });
  }
  int64_t mark_events_sent(const std::vector<SentMark> &marks, int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.mark_events_sent(marks, now); });
  }
  [[nodiscard]] OutboxCounts outbox_counts(int64_t now) override {
    return on_conn([&](SqlLedger &l) { return l.outbox_counts(now); });
  }
  [[nodiscard]] std::vector<TaskRecord>
  claim_due_not_queued(int64_t now, int limit, const std::string &worker, int64_t lease_ms) override {
    return on_conn([&](SqlLedger &l) { return l.claim_due_not_queued(now, limit, worker, lease_ms); });
  }

private:
  std::shared_ptr<Connections> m_pool;
};

class SharedPool final : public ConnectionPool {
public:
  explicit SharedPool(std::shared_ptr<Connections> c) : m_c(std::move(c)) {}
  [[nodiscard]] std::unique_ptr<Ledger> worker() override {
    m_c->add_worker();
    return std::make_unique<PooledLedger>(m_c);
  }
  [[nodiscard]] size_t connections_opened() override { return m_c->opened(); }
  [[nodiscard]] size_t max_connections() override { return m_c->max(); }

private:
  std::shared_ptr<Connections> m_c;
};
} // namespace

std::shared_ptr<LedgerPool> open_ledger_pool(const OpenOptions &opts, const PoolOptions &pool) {
  OpenOptions o = opts;
  o.create = false;
  if (is_postgres_location(o.location)) {
    Connections::Open open = [o] { return std::make_unique<SqlLedger>(open_postgres(o)); };
    auto first = open();
    const size_t max = std::min(pool.max_connections > 0 ? pool.max_connections : k_postgres_connections,
                                server_allows(first->connection()));
    return std::make_shared<SharedPool>(std::make_shared<Connections>(open, std::move(first), max, nullptr));
  }
  std::shared_ptr<GroupCommit> group;
  if (!o.read_only && pool.group_commit)
    group = std::make_shared<GroupCommit>(open_sqlite(o), pool.max_batch);
  Connections::Open open = [o, group] { return std::make_unique<SqlLedger>(open_sqlite(o), group); };
  auto first = open();
  const size_t max = pool.max_connections > 0 ? pool.max_connections : sqlite_readers();
  return std::make_shared<SharedPool>(std::make_shared<Connections>(open, std::move(first), max, group));
}

} // namespace lodge::ledger
