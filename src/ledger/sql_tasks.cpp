// Cleanup tasks under leases (TaskLedger), in the SQL SQLite and PostgreSQL both speak: claim,
// decide, the ends (finish, ignore, end_tag) one by one and in batches, the dry run's due
// tasks, retry and requeue.
// Every write is one Conn::write transaction; every transition names the state it expects and
// checks that exactly the expected rows changed. A row a transaction reads and then changes is
// read with for_update(); lock order: the file_upload row, then its task.
#include "sql_ledger.hpp"

#include <optional>
#include <string>
#include <vector>

namespace lodge::ledger {

namespace {

// Due: PENDING/RETRY whose time has come, or PROCESSING whose lease has expired. Each arm
// names one side of cleanup_task_due's condition (the index of the live tasks), so SQLite
// searches that index for each.
constexpr const char *k_due = "((status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1)"
                              " OR (status = 'PROCESSING' AND lease_until < ?1))";
} // namespace

bool SqlLedger::key_in_use(const std::string &key, int64_t except_id) {
  // Two probes, each on its own index (the UNIQUE key, the shared-key index).
  auto own = q("SELECT 1 FROM file_upload WHERE object_key = ?1 AND content_of IS NULL AND is_deleted = 0"
               " AND id <> ?2");
  if (own.bind(1, key).bind(2, except_id).step()) return true;
  auto shared = q("SELECT 1 FROM file_upload WHERE content_key = ?1 AND is_deleted = 0 AND id <> ?2 LIMIT 1");
  return shared.bind(1, key).bind(2, except_id).step();
}

TaskFinish SqlLedger::ignore_task(const TaskRecord &t, int64_t now, const std::string &reason) {
  return m_c->write([&](sql::Tx &tx) {
    auto ign =
        q("UPDATE cleanup_task SET status = 'IGNORED', tag_owed = 0, lease_owner = NULL, lease_until = NULL,"
          " last_error = COALESCE(NULLIF(?4, ''), last_error), updated_at = ?3"
          " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
    if (ign.bind(1, t.id).bind(2, t.lease_version).bind(3, now).bind(4, reason).exec() != 1)
      return TaskFinish::lease_lost;
    tx.commit();
    return TaskFinish::success;
  });
}

TaskFinish SqlLedger::end_tag(const TaskRecord &t, int64_t due, int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    // The row first (the lock order): a user's delete while the tag was being set found the
    // task held and left it to us; ignoring it then would leave the object forever.
    auto row = file_for_update(t.record_id);
    const bool alive = row && !row->is_deleted && row->upload_status == FileStatus::active;
    // Made PENDING again: a new outbox event (sent_at, message_id cleared); IGNORED keeps them.
    auto st = q("UPDATE cleanup_task SET status = CASE WHEN ?4 = 1 THEN 'IGNORED' ELSE 'PENDING' END,"
                " next_retry_at = CASE WHEN ?4 = 1 THEN next_retry_at ELSE ?5 END, tag_owed = 0,"
                " sent_at = CASE WHEN ?4 = 1 THEN sent_at END,"
                " message_id = CASE WHEN ?4 = 1 THEN message_id END,"
                " lease_owner = NULL, lease_until = NULL, updated_at = ?3"
                " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
    if (st.bind(1, t.id)
            .bind(2, t.lease_version)
            .bind(3, now)
            .bind(4, static_cast<int64_t>(alive))
            .bind(5, due)
            .exec() != 1)
      return TaskFinish::lease_lost;
    tx.commit();
    return TaskFinish::success;
  });
}

std::vector<TaskRecord> SqlLedger::claim_due(int64_t now, int limit, const std::string &worker,
                                             int64_t lease_ms) {
  return claim_due_where(now, limit, worker, lease_ms, "");
}

std::vector<TaskRecord> SqlLedger::claim_due_not_queued(int64_t now, int limit, const std::string &worker,
                                                        int64_t lease_ms) {
  return claim_due_where(now, limit, worker, lease_ms, " AND (verify_pass = 2 OR tag_owed = 1)");
}

std::vector<TaskRecord> SqlLedger::claim_due_where(int64_t now, int limit, const std::string &worker,
                                                   int64_t lease_ms, const char *only) {
  return m_c->write([&](sql::Tx &tx) {
    std::vector<int64_t> ids;
    {
      auto sel = q(std::string("SELECT id FROM cleanup_task WHERE ") + k_due + only +
                   " ORDER BY next_retry_at, id LIMIT ?2" + m_c->skip_locked());
      sel.bind(1, now).bind(2, static_cast<int64_t>(limit));
      while (sel.step())
        ids.push_back(sel.col_int(0));
    }
    std::vector<TaskRecord> out;
    auto upd =
        q(std::string("UPDATE cleanup_task SET status = 'PROCESSING', lease_owner = ?2, lease_until = ?3,"
                      " lease_version = lease_version + 1, updated_at = ?1 WHERE id = ?4 AND ") +
          k_due);
    for (auto id : ids) {
      upd.reset();
      if (upd.bind(1, now).bind(2, worker).bind(3, now + lease_ms).bind(4, id).exec() != 1)
        throw LodgeError(Errc::internal, "claim changed no row inside its own transaction");
      out.push_back(*task_by_id(id));
    }
    tx.commit();
    return out;
  });
}

std::optional<TaskRecord> SqlLedger::claim_task(int64_t task_id, int64_t now, const std::string &worker,
                                                int64_t lease_ms) {
  return m_c->write([&](sql::Tx &tx) -> std::optional<TaskRecord> {
    auto upd =
        q(std::string("UPDATE cleanup_task SET status = 'PROCESSING', lease_owner = ?2, lease_until = ?3,"
                      " lease_version = lease_version + 1, updated_at = ?1 WHERE id = ?4 AND ") +
          k_due);
    if (upd.bind(1, now).bind(2, worker).bind(3, now + lease_ms).bind(4, task_id).exec() != 1)
      return std::nullopt;
    auto t = task_by_id(task_id);
    tx.commit();
    return t;
  });
}

TaskDecision SqlLedger::decide(const TaskRecord &t, int64_t now, int64_t grace_ms) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(t.record_id); // the row first, then its task (the lock order)
    auto cur = task_by_id(t.id, m_c->for_update());
    // I5 for shared objects: a dead row's object stays while another alive row uses it (the
    // row it shares, or one sharing it); decide_task keeps it then. A new sharer needs an
    // alive user locked in its own transaction, so once no alive row uses the key, none ever
    // will again.
    const bool in_use = row && row->is_deleted && key_in_use(t.object_key, row->id);
    const Decision d = decide_task(t, cur, row, in_use, now, grace_ms);
    // Every change below is fenced by the lease: status PROCESSING, the same version.
    auto fenced = [&](Stmt &st) {
      return st.bind(1, t.id).bind(2, t.lease_version).bind(3, now).exec() == 1;
    };
    auto postpone = [&] {
      auto back =
          q("UPDATE cleanup_task SET status = 'PENDING', next_retry_at = ?4, lease_owner = NULL,"
            " lease_until = NULL, verify_pass = ?5, sent_at = NULL, message_id = NULL, updated_at = ?3"
            " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
      back.bind(4, d.due).bind(5, d.verify_pass);
      return fenced(back);
    };
    auto fail_row = [&] {
      if (!fail_overdue_row(row->id, now, "sweep"))
        throw LodgeError(Errc::internal, "an overdue row changed inside its own transaction");
    };
    switch (d.kind) {
    case DecisionKind::lease_lost:
      return TaskDecision::lease_lost;
    case DecisionKind::postpone:
      if (!postpone()) return TaskDecision::lease_lost;
      tx.commit();
      return TaskDecision::postponed;
    case DecisionKind::fail_overdue_then_postpone:
      fail_row();
      if (!postpone()) return TaskDecision::lease_lost;
      tx.commit();
      return TaskDecision::postponed;
    case DecisionKind::fail_overdue_then_allow: {
      fail_row();
      auto owe = q("UPDATE cleanup_task SET verify_pass = ?4, updated_at = ?3"
                   " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
      owe.bind(4, d.verify_pass);
      if (!fenced(owe)) return TaskDecision::lease_lost;
      tx.commit();
      return TaskDecision::allowed;
    }
    case DecisionKind::ignore: {
      auto ign = q("UPDATE cleanup_task SET status = 'IGNORED', tag_owed = 0, lease_owner = NULL,"
                   " lease_until = NULL, updated_at = ?3 WHERE id = ?1 AND lease_version = ?2 AND status ="
                   " 'PROCESSING'");
      if (!fenced(ign)) return TaskDecision::lease_lost;
      tx.commit();
      return TaskDecision::ignored;
    }
    case DecisionKind::tag:
      return TaskDecision::tag; // nothing written: the lease holds the task meanwhile
    case DecisionKind::allow:
      break;
    }
    tx.commit();
    return TaskDecision::allowed;
  });
}

TaskFinish SqlLedger::finish(const TaskRecord &t, bool succeeded, const std::string &error,
                             int64_t next_retry_at, int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    auto cur = task_by_id(t.id, m_c->for_update());
    if (!cur || cur->status != TaskStatus::processing || cur->lease_version != t.lease_version)
      return TaskFinish::lease_lost;
    TaskFinish result = TaskFinish::success;
    int64_t changed = 0;
    if (succeeded && cur->verify_pass == k_verify_owed) {
      // The first delete of an upload that may still land: look once more, later.
      result = TaskFinish::verify_scheduled;
      auto st = q("UPDATE cleanup_task SET status = 'PENDING', verify_pass = 2, next_retry_at = ?4,"
                  " lease_owner = NULL, lease_until = NULL, last_error = NULL, sent_at = NULL,"
                  " message_id = NULL, updated_at = ?3"
                  " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
      changed = st.bind(1, t.id).bind(2, t.lease_version).bind(3, now).bind(4, next_retry_at).exec();
    } else if (succeeded) {
      auto st = q("UPDATE cleanup_task SET status = 'SUCCESS', lease_owner = NULL, lease_until = NULL,"
                  " last_error = NULL, updated_at = ?3 WHERE id = ?1 AND lease_version = ?2 AND status = "
                  "'PROCESSING'");
      changed = st.bind(1, t.id).bind(2, t.lease_version).bind(3, now).exec();
    } else {
      bool dead = dead_letters(cur->retry_count, cur->max_retries);
      result = dead ? TaskFinish::dead_letter : TaskFinish::retry;
      auto st = q("UPDATE cleanup_task SET status = ?4, retry_count = retry_count + 1, next_retry_at = ?5,"
                  " last_error = ?6, lease_owner = NULL, lease_until = NULL, updated_at = ?3"
                  " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
      changed = st.bind(1, t.id)
                    .bind(2, t.lease_version)
                    .bind(3, now)
                    .bind(4, dead ? "FAILED" : "RETRY")
                    .bind(5, next_retry_at)
                    .bind(6, error)
                    .exec();
    }
    if (changed != 1) return TaskFinish::lease_lost;
    tx.commit();
    return result;
  });
}

// The batch forms: each item is the single-item method itself, whose own write is a
// savepoint inside this transaction (sql::Conn::write nests).
std::vector<TaskDecision> SqlLedger::decide_many(const std::vector<TaskRecord> &tasks, int64_t now,
                                                 int64_t grace_ms) {
  if (tasks.empty()) return {};
  return m_c->write([&](sql::Tx &tx) {
    std::vector<TaskDecision> out;
    out.reserve(tasks.size());
    for (const auto &t : tasks) {
      out.push_back(decide(t, now, grace_ms));
      still_in_batch("decide_many");
    }
    tx.commit();
    return out;
  });
}

std::vector<TaskFinish> SqlLedger::finish_many(const std::vector<TaskEnd> &ends, int64_t now) {
  if (ends.empty()) return {};
  return m_c->write([&](sql::Tx &tx) {
    std::vector<TaskFinish> out;
    out.reserve(ends.size());
    for (const auto &e : ends) {
      switch (e.kind) {
      case TaskEnd::Kind::finish:
        out.push_back(finish(e.task, e.succeeded, e.error, e.next_retry_at, now));
        break;
      case TaskEnd::Kind::ignore:
        out.push_back(ignore_task(e.task, now, e.error));
        break;
      case TaskEnd::Kind::tagged:
        out.push_back(end_tag(e.task, e.next_retry_at, now));
        break;
      case TaskEnd::Kind::dead_letter:
        out.push_back(dead_letter(e.task, e.error, now) == DeadLetterOutcome::dead_lettered
                          ? TaskFinish::dead_letter
                          : TaskFinish::lease_lost);
        break;
      }
      still_in_batch("finish_many");
    }
    tx.commit();
    return out;
  });
}

void SqlLedger::still_in_batch(const char *what) {
  // SQLite may roll a whole transaction back on its own (SQLITE_FULL, IOERR, BUSY, NOMEM):
  // what ran before would then be lost while the rest ran outside any transaction.
  if (!m_c->in_transaction())
    throw LodgeError(Errc::internal,
                     std::string(what) + ": the database rolled the batch's transaction back");
}

std::vector<TaskRecord> SqlLedger::due_tasks(int64_t now, int limit) {
  auto st = q(std::string("SELECT ") + k_task_cols + " FROM cleanup_task WHERE " + k_due +
              " ORDER BY next_retry_at, id LIMIT ?2");
  st.bind(1, now).bind(2, static_cast<int64_t>(limit));
  std::vector<TaskRecord> out;
  while (st.step())
    out.push_back(read_task(st));
  return out;
}

RetryOutcome SqlLedger::retry_task(int64_t task_id, int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    auto st =
        q("UPDATE cleanup_task SET status = 'PENDING', retry_count = 0, next_retry_at = ?2, updated_at = ?2,"
          " lease_owner = NULL, lease_until = NULL, sent_at = NULL, message_id = NULL"
          " WHERE id = ?1 AND status = 'FAILED'");
    if (st.bind(1, task_id).bind(2, now).exec() != 1) return RetryOutcome::not_failed;
    tx.commit();
    return RetryOutcome::requeued;
  });
}

QueueOutcome SqlLedger::requeue_task_for(int64_t record_id, int64_t now, int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(record_id);
    if (!row || !row->is_deleted) return QueueOutcome::not_dead; // only dead rows' objects may go
    auto q = ensure_pending_task(record_id, row->object_key, now, max_retries, false, now);
    if (q != QueueOutcome::queued) return q; // nothing was written: nothing to commit
    tx.commit();
    return q;
  });
}

} // namespace lodge::ledger
