// Rows taken out of the upload path by someone other than their sender (RecoveryLedger), in
// the SQL SQLite and PostgreSQL both speak: the overdue and held rows, repair, an abandoned
// upload's failure, soft delete, a missing object; and ensure_pending_task, the one write that
// makes a dead row's task pending, which retire, requeue and prune share.
// Every write is one Conn::write transaction; every transition names the state it expects and
// checks that exactly the expected rows changed. A row a transaction reads and then changes is
// read with for_update(); lock order: the file_upload row, then its task.
#include "sql_ledger.hpp"

#include <algorithm>
#include <lodge/failpoint.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::ledger {

std::vector<FileRecord> SqlLedger::overdue_uploads(int64_t now, int limit) {
  auto st =
      q(std::string("SELECT ") + k_file_cols +
        " FROM file_upload WHERE upload_status = 'UPLOADING' AND is_deleted = 0 AND upload_deadline_at < ?1"
        " ORDER BY upload_deadline_at LIMIT ?2");
  st.bind(1, now).bind(2, static_cast<int64_t>(limit));
  std::vector<FileRecord> out;
  while (st.step())
    out.push_back(read_file(st));
  return out;
}

QueueOutcome SqlLedger::ensure_pending_task(int64_t record_id, const std::string &key, int64_t due,
                                            int max_retries, bool verify, int64_t now) {
  // Each statement names one task by id inside this transaction: anything but one
  // changed row is a bug, never a success to report.
  auto one = [](int64_t changed) {
    if (changed != 1) throw LodgeError(Errc::internal, "queueing a cleanup task changed no row");
  };
  const int64_t pass = verify ? k_verify_owed : k_verify_none;
  auto t = task_for_record(record_id, m_c->for_update());
  if (!t) {
    auto ins =
        q("INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,"
          " verify_pass, created_at, updated_at)"
          " VALUES (?1, 'DELETE_OBJECT', ?2, 'PENDING', ?3, ?4, ?6, ?5, ?5)");
    one(ins.bind(1, record_id)
            .bind(2, key)
            .bind(3, due)
            .bind(4, static_cast<int64_t>(max_retries))
            .bind(5, now)
            .bind(6, pass)
            .exec());
    return QueueOutcome::queued;
  }
  if (t->status == TaskStatus::processing)
    return QueueOutcome::held; // a worker holds it; its own checks decide
  if (t->status == TaskStatus::pending || t->status == TaskStatus::retry) {
    // Never earlier than the grace allows: a PUT may still be landing. A pass owed stays owed.
    // A tag owed is not: the row is dead, its object is the task's to delete.
    auto st = q("UPDATE cleanup_task SET"
                " next_retry_at = CASE WHEN next_retry_at > ?2 THEN next_retry_at ELSE ?2 END,"
                " verify_pass = CASE WHEN verify_pass > ?4 THEN verify_pass ELSE ?4 END,"
                " tag_owed = 0, updated_at = ?3 WHERE id = ?1");
    one(st.bind(1, t->id).bind(2, due).bind(3, now).bind(4, pass).exec());
    return QueueOutcome::queued;
  }
  auto st =
      q("UPDATE cleanup_task SET status = 'PENDING', next_retry_at = ?2, retry_count = 0, last_error = NULL,"
        " lease_owner = NULL, lease_until = NULL, verify_pass = ?4, tag_owed = 0, sent_at = NULL,"
        " message_id = NULL, updated_at = ?3 WHERE id = ?1");
  one(st.bind(1, t->id).bind(2, due).bind(3, now).bind(4, pass).exec());
  return QueueOutcome::queued;
}

bool SqlLedger::fail_overdue_row(int64_t id, int64_t now, std::string_view by) {
  auto st =
      q("UPDATE file_upload SET upload_status = 'UPLOAD_FAILED', is_deleted = 1, deleted_at = ?2,"
        " updated_at = ?2, failure_reason = ?3"
        " WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0 AND upload_deadline_at < ?2");
  return st.bind(1, id)
             .bind(2, now)
             .bind(3, "DEADLINE_EXCEEDED: not confirmed before its deadline (" + std::string(by) + ")")
             .exec() == 1;
}

RepairOutcome SqlLedger::repair_row(int64_t id, int64_t now, int64_t grace_ms, int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(id);
    if (!row || row->is_deleted || row->upload_status != FileStatus::uploading ||
        row->upload_deadline_at >= now)
      return RepairOutcome::not_overdue;
    if (!fail_overdue_row(id, now, "repair")) return RepairOutcome::not_overdue;
    // Failed by deadline, not definitely: a late PUT may still land, so the delete owes a
    // verify pass.
    (void)ensure_pending_task(id, row->object_key, std::max(now, row->upload_deadline_at + grace_ms),
                              max_retries, true, now);
    if (failpoint::hit("repair.before_commit"))
      throw LodgeError(Errc::internal, "injected failure before repair commit");
    tx.commit();
    return RepairOutcome::repaired;
  });
}

std::vector<FileRecord> SqlLedger::held_uploads(const std::string &holder_prefix, int limit) {
  // The UPLOADING rows are few and indexed (file_upload_overdue): the prefix is compared on them.
  // "+id": the sort is of those few rows. Ordered by plain id, SQLite walked the whole table
  // in id order to spare the sort (60,000 page reads at every upload's start on a ledger of
  // 1,000,000 rows).
  auto st = q(std::string("SELECT ") + k_file_cols +
              " FROM file_upload WHERE upload_status = 'UPLOADING' AND is_deleted = 0"
              " AND substr(holder, 1, length(?1)) = ?1 ORDER BY +id LIMIT ?2");
  st.bind(1, holder_prefix).bind(2, static_cast<int64_t>(limit));
  std::vector<FileRecord> out;
  while (st.step())
    out.push_back(read_file(st));
  return out;
}

RepairOutcome SqlLedger::fail_abandoned(int64_t id, const std::string &holder, const std::string &reason,
                                        int64_t now, int64_t grace_ms, int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(id);
    if (!row || row->is_deleted || row->upload_status != FileStatus::uploading || row->holder != holder)
      return RepairOutcome::not_overdue;
    auto st = q("UPDATE file_upload SET upload_status = 'UPLOAD_FAILED', is_deleted = 1, deleted_at = ?2,"
                " updated_at = ?2, failure_reason = ?3"
                " WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0 AND holder = ?4");
    if (st.bind(1, id).bind(2, now).bind(3, reason).bind(4, holder).exec() != 1)
      return RepairOutcome::not_overdue;
    // Two bounds on when what its sender sent can still land: the grace after the sender's
    // end (which was before now), and the grace after the deadline (lodge aborts its own PUTs
    // before then). The task is due at the earlier, not at deadline + grace regardless.
    const int64_t due_at = std::min(now + grace_ms, std::max(now, row->upload_deadline_at + grace_ms));
    (void)ensure_pending_task(id, row->object_key, due_at, max_retries, true, now);
    auto due = q("UPDATE cleanup_task SET next_retry_at = ?2, updated_at = ?3"
                 " WHERE record_id = ?1 AND status IN ('PENDING', 'RETRY') AND next_retry_at > ?2");
    (void)due.bind(1, id).bind(2, due_at).bind(3, now).exec();
    tx.commit();
    return RepairOutcome::repaired;
  });
}

DeleteOutcome SqlLedger::soft_delete(int64_t id, const std::string &owner, int64_t now, int64_t grace_ms,
                                     int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(id);
    if (!row || row->owner_id != owner) return DeleteOutcome::not_found;
    if (row->is_deleted || row->upload_status != FileStatus::active) return DeleteOutcome::not_active;
    auto st = q("UPDATE file_upload SET is_deleted = 1, deleted_at = ?2, updated_at = ?2"
                " WHERE id = ?1 AND upload_status = 'ACTIVE' AND is_deleted = 0");
    if (st.bind(1, id).bind(2, now).exec() != 1) return DeleteOutcome::not_active;
    (void)ensure_pending_task(id, row->object_key, now + grace_ms, max_retries, false, now);
    tx.commit();
    return DeleteOutcome::deleted;
  });
}

MissingOutcome SqlLedger::mark_missing(int64_t id, const std::string &reason, int64_t now, int64_t grace_ms,
                                       int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    auto row = file_for_update(id);
    if (!row || row->is_deleted || row->upload_status != FileStatus::active)
      return MissingOutcome::not_active;
    auto st = q("UPDATE file_upload SET is_deleted = 1, deleted_at = ?2, updated_at = ?2, failure_reason = ?3"
                " WHERE id = ?1 AND upload_status = 'ACTIVE' AND is_deleted = 0");
    if (st.bind(1, id).bind(2, now).bind(3, reason).exec() != 1) return MissingOutcome::not_active;
    (void)ensure_pending_task(id, row->object_key, now + grace_ms, max_retries, false, now);
    tx.commit();
    return MissingOutcome::marked_missing;
  });
}

} // namespace lodge::ledger
