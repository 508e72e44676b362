// An upload's own transitions after its reserve (UploadLedger), in the SQL SQLite and
// PostgreSQL both speak: the multipart id, renew, confirm (now, or with a group-committing
// ledger's batch) and settle, the upload's failure, and the stat cache.
// Every write is one Conn::write transaction; every transition names the state it expects and
// checks that exactly the expected rows changed. A row a transaction reads and then changes is
// read with for_update(); lock order: the file_upload row, then its task.
#include "sql_ledger.hpp"

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lodge::ledger {

SetUploadIdOutcome SqlLedger::set_multipart_upload_id(int64_t id, const std::string &upload_id, int64_t now) {
  if (m_group)
    return m_group->run([&](SqlLedger &w) { return w.set_multipart_upload_id(id, upload_id, now); });
  return m_c->write([&](sql::Tx &tx) {
    auto st = q("UPDATE file_upload SET multipart_upload_id = ?2, updated_at = ?3"
                " WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0");
    if (st.bind(1, id).bind(2, upload_id).bind(3, now).exec() != 1) return SetUploadIdOutcome::not_uploading;
    tx.commit();
    return SetUploadIdOutcome::recorded;
  });
}

RenewOutcome SqlLedger::renew(int64_t id, const std::string &holder, int64_t new_deadline,
                              int64_t new_not_before, int64_t now) {
  if (m_group)
    return m_group->run([&](SqlLedger &w) { return w.renew(id, holder, new_deadline, new_not_before, now); });
  return m_c->write([&](sql::Tx &tx) {
    // The conditional UPDATE is the fence; the row read under the lock only names the refusal.
    auto st = q("UPDATE file_upload SET upload_deadline_at = ?3, updated_at = ?4"
                " WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0 AND holder = ?2"
                " AND upload_deadline_at > ?4");
    if (st.bind(1, id).bind(2, holder).bind(3, new_deadline).bind(4, now).exec() != 1) {
      auto row = file_for_update(id);
      if (!row || row->is_deleted || row->upload_status != FileStatus::uploading)
        return RenewOutcome::not_uploading;
      if (row->holder != holder) return RenewOutcome::not_holder;
      return RenewOutcome::past_deadline;
    }
    // A task a sweep holds (PROCESSING) is left alone: its decide reads the row's new
    // deadline under the lock and postpones it to that deadline + grace.
    auto task = q("UPDATE cleanup_task SET next_retry_at = ?2, updated_at = ?3"
                  " WHERE record_id = ?1 AND status IN ('PENDING', 'RETRY')");
    (void)task.bind(1, id).bind(2, new_not_before).bind(3, now).exec();
    tx.commit();
    return RenewOutcome::renewed;
  });
}

namespace {
// A confirm queued on the group's writer: its outcome once its batch committed. Its owner
// waits for it (Uploader::finish); one destroyed unwaited is abandoned, never waited for.
class GroupConfirm final : public UploadLedger::PendingConfirm {
public:
  GroupConfirm(std::shared_ptr<GroupCommit> group, int64_t id, const std::string &etag,
               const std::string &version_id, int64_t now, CommitTag tag, std::optional<Retire> retire,
               Durable durable)
      : m_group(std::move(group)), m_out(std::make_shared<std::optional<ConfirmOutcome>>()),
        m_what("the confirm of file #" + std::to_string(id)) {
    m_req = m_group->enqueue(
        [out = m_out, id, etag, version_id, now, tag, retire](SqlLedger &w) {
          out->emplace(w.confirm(id, etag, version_id, now, tag, retire));
        },
        std::move(durable), true);
  }
  GroupConfirm(const GroupConfirm &) = delete;
  GroupConfirm &operator=(const GroupConfirm &) = delete;
  // Never waits and never throws (a destructor that did would end the process): the request
  // stays with the group, which runs it with the next batch anyone leads, or says in a
  // warning that it never ran.
  ~GroupConfirm() override {
    if (m_waited) return;
    try {
      m_group->abandon(m_req, std::move(m_what));
    } catch (...) { // the lock failed: the request is still queued, and runs or is reported as above
    }
  }
  [[nodiscard]] ConfirmOutcome wait() override {
    m_group->wait(*m_req);
    m_waited = true;
    if (m_req->error) std::rethrow_exception(m_req->error);
    return m_out->value();
  }

private:
  std::shared_ptr<GroupCommit> m_group;
  std::shared_ptr<std::optional<ConfirmOutcome>> m_out;
  std::shared_ptr<GroupCommit::Request> m_req;
  std::string m_what;
  bool m_waited = false;
};
} // namespace

std::unique_ptr<Ledger::PendingConfirm> SqlLedger::confirm_later(int64_t id, const std::string &etag,
                                                                 const std::string &version_id, int64_t now,
                                                                 CommitTag tag, std::optional<Retire> retire,
                                                                 Durable durable) {
  if (!m_group)
    return UploadLedger::confirm_later(id, etag, version_id, now, tag, retire, std::move(durable));
  return std::make_unique<GroupConfirm>(m_group, id, etag, version_id, now, tag, retire, std::move(durable));
}

ConfirmOutcome SqlLedger::confirm(int64_t id, const std::string &etag, const std::string &version_id,
                                  int64_t now, CommitTag tag, std::optional<Retire> retire) {
  if (m_group)
    return m_group->run([&](SqlLedger &w) { return w.confirm(id, etag, version_id, now, tag, retire); });
  return m_c->write([&](sql::Tx &tx) {
    auto row = q("UPDATE file_upload SET upload_status = 'ACTIVE', activated_at = ?2, updated_at = ?2,"
                 " etag = ?3, version_id = NULLIF(?4, '')"
                 " WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0");
    if (row.bind(1, id).bind(2, now).bind(3, etag).bind(4, version_id).exec() != 1)
      return ConfirmOutcome::row_not_uploading;
    // A task a sweep already holds (PROCESSING) means the cleanup may be under way:
    // then the upload must not become ACTIVE. Rolling back keeps the row UPLOADING.
    // Owed a committed tag, the task stays PENDING (due as it was) and records the debt:
    // settle() ends it once the tag is set, or whichever sweep claims it sets the tag.
    auto task =
        q(tag == CommitTag::owed
              ? "UPDATE cleanup_task SET tag_owed = 1, updated_at = ?2 WHERE record_id = ?1 AND status "
                "IN ('PENDING', 'RETRY')"
              : "UPDATE cleanup_task SET status = 'IGNORED', tag_owed = 0, updated_at = ?2,"
                " lease_owner = NULL, lease_until = NULL WHERE record_id = ?1 AND status IN ('PENDING',"
                " 'RETRY')");
    if (task.bind(1, id).bind(2, now).exec() != 1) return ConfirmOutcome::task_held;
    // upload --replace: the rows this one supersedes, in the same transaction (new object
    // first, then this; the old objects go with their tasks after the grace).
    if (retire) retire_others(id, *retire, now);
    tx.commit();
    return ConfirmOutcome::confirmed;
  });
}

void SqlLedger::retire_others(int64_t id, const Retire &retire, int64_t now) {
  std::vector<std::pair<int64_t, std::string>> old;
  {
    auto st =
        q("SELECT o.id, COALESCE(o.content_key, o.object_key) FROM file_upload n JOIN file_upload o"
          " ON o.owner_id = n.owner_id AND o.run_prefix = n.run_prefix AND o.relative_path = n.relative_path"
          " WHERE n.id = ?1 AND o.id <> ?1 AND o.is_deleted = 0 AND o.upload_status = 'ACTIVE'"
          " ORDER BY o.id" +
          std::string(m_c->for_update()));
    st.bind(1, id);
    while (st.step())
      old.emplace_back(st.col_int(0), st.col_text(1));
  }
  for (const auto &[old_id, old_key] : old) {
    auto del = q("UPDATE file_upload SET is_deleted = 1, deleted_at = ?2, updated_at = ?2"
                 " WHERE id = ?1 AND upload_status = 'ACTIVE' AND is_deleted = 0");
    if (del.bind(1, old_id).bind(2, now).exec() != 1) continue;
    (void)ensure_pending_task(old_id, old_key, now + retire.grace_ms, retire.max_retries, false, now);
  }
}

SettleOutcome SqlLedger::settle(int64_t record_id, int64_t now) {
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.settle(record_id, now); });
  return m_c->write([&](sql::Tx &tx) {
    // The row first (the lock order): a delete that makes it dead meanwhile must win, its
    // task then being the one that deletes the object.
    auto row = file_for_update(record_id);
    if (!row || row->is_deleted || row->upload_status != FileStatus::active)
      return SettleOutcome::not_pending;
    auto task =
        q("UPDATE cleanup_task SET status = 'IGNORED', tag_owed = 0, updated_at = ?2, lease_owner = NULL,"
          " lease_until = NULL WHERE record_id = ?1 AND status IN ('PENDING', 'RETRY')");
    if (task.bind(1, record_id).bind(2, now).exec() != 1) return SettleOutcome::not_pending;
    tx.commit();
    return SettleOutcome::settled;
  });
}

MarkFailedOutcome SqlLedger::mark_failed(int64_t id, const std::string &reason, bool run_now, int64_t now) {
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.mark_failed(id, reason, run_now, now); });
  return m_c->write([&](sql::Tx &tx) {
    auto row =
        q("UPDATE file_upload SET upload_status = 'UPLOAD_FAILED', is_deleted = 1, failure_reason = ?2,"
          " deleted_at = ?3, updated_at = ?3 WHERE id = ?1 AND upload_status = 'UPLOADING'");
    if (row.bind(1, id).bind(2, reason).bind(3, now).exec() != 1) return MarkFailedOutcome::not_uploading;
    if (run_now) {
      auto task = q("UPDATE cleanup_task SET next_retry_at = ?2, updated_at = ?2"
                    " WHERE record_id = ?1 AND status IN ('PENDING', 'RETRY')");
      task.bind(1, id).bind(2, now).exec();
    } else {
      // Not definite: the object may still land after the task's delete, so the task owes
      // a second pass. (A worker may hold it: the flag is no fencing matter, and finish()
      // reads it under the lease.)
      auto task = q("UPDATE cleanup_task SET verify_pass = 1, updated_at = ?2 WHERE record_id = ?1"
                    " AND status IN ('PENDING', 'RETRY', 'PROCESSING') AND verify_pass = 0");
      task.bind(1, id).bind(2, now).exec();
    }
    tx.commit();
    return MarkFailedOutcome::failed;
  });
}

MarkFailedOutcome SqlLedger::fail_resumable(int64_t id, const std::string &reason, int64_t due_at,
                                            int64_t now) {
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.fail_resumable(id, reason, due_at, now); });
  return m_c->write([&](sql::Tx &tx) {
    auto row = q(
        "UPDATE file_upload SET upload_status = 'UPLOAD_FAILED', is_deleted = 1, failure_reason = ?2,"
        " deleted_at = ?3, updated_at = ?3 WHERE id = ?1 AND upload_status = 'UPLOADING' AND is_deleted = 0");
    if (row.bind(1, id).bind(2, reason).bind(3, now).exec() != 1) return MarkFailedOutcome::not_uploading;
    // Definite (a part never becomes an object by itself): no verify pass. Due one grace
    // later, so that a resume meanwhile finds the staged upload's parts; a task a sweep
    // holds is left to its decide, which now finds the row dead.
    auto task = q("UPDATE cleanup_task SET next_retry_at = ?2, updated_at = ?3"
                  " WHERE record_id = ?1 AND status IN ('PENDING', 'RETRY')");
    (void)task.bind(1, id).bind(2, due_at).bind(3, now).exec();
    tx.commit();
    return MarkFailedOutcome::failed;
  });
}

std::optional<FileRecord> SqlLedger::find_unchanged(const std::string &owner, const std::string &run_prefix,
                                                    const std::string &relative_path, const FileStat &stat,
                                                    int64_t size) {
  // The path index finds the few rows of this path; the stat is compared on them.
  return file_where(
      "owner_id = ?1 AND run_prefix = ?2 AND relative_path = ?3 AND is_deleted = 0 AND upload_status = "
      "'ACTIVE'"
      " AND size = ?4 AND stat_dev = ?5 AND stat_ino = ?6 AND stat_mtime_ns = ?7 AND stat_ctime_ns = ?8"
      " ORDER BY id DESC LIMIT 1",
      [&](Stmt &s) {
        s.bind(1, owner)
            .bind(2, run_prefix)
            .bind(3, relative_path)
            .bind(4, size)
            .bind(5, stat.dev)
            .bind(6, stat.ino)
            .bind(7, stat.mtime_ns)
            .bind(8, stat.ctime_ns);
      });
}

bool SqlLedger::record_stat(int64_t id, const FileStat &stat, int64_t now) {
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.record_stat(id, stat, now); });
  return m_c->write([&](sql::Tx &tx) {
    auto st = q("UPDATE file_upload SET stat_dev = ?2, stat_ino = ?3, stat_mtime_ns = ?4, stat_ctime_ns = ?5,"
                " updated_at = ?6 WHERE id = ?1 AND is_deleted = 0 AND upload_status = 'ACTIVE'");
    if (st.bind(1, id)
            .bind(2, stat.dev)
            .bind(3, stat.ino)
            .bind(4, stat.mtime_ns)
            .bind(5, stat.ctime_ns)
            .bind(6, now)
            .exec() != 1)
      return false;
    tx.commit();
    return true;
  });
}

} // namespace lodge::ledger
