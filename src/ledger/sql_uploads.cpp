// The ledger's upload and cleanup-task transitions, in the SQL SQLite and PostgreSQL both
// speak. Every write is one Conn::write transaction; every transition names the state it
// expects and checks that exactly the expected rows changed. A row a transaction reads and
// then changes is read with for_update(); lock order: the file_upload row, then its task.
#include "sql_ledger.hpp"

#include <algorithm>
#include <lodge/crypto/random.hpp>
#include <lodge/failpoint.hpp>
#include <memory>
#include <optional>

namespace lodge::ledger {

// A row sharing another row's object reads as that object's key (content_key).
const char *const k_file_cols =
    "id, owner_id, original_name, COALESCE(content_key, object_key), media_type, sha256, size, "
    "policy, upload_status, failure_reason,"
    " is_deleted, idempotency_key, etag, version_id, multipart_upload_id, "
    "created_at, updated_at, activated_at,"
    " deleted_at, upload_deadline_at, relative_path, run_prefix, dedup_scope, holder,"
    " content_type, object_options, stat_dev, stat_ino, stat_mtime_ns, stat_ctime_ns, content_of,"
    " expires_at";

const char *const k_task_cols =
    "id, record_id, task_type, object_key, status, next_retry_at, retry_count, max_retries, lease_owner,"
    " lease_until, lease_version, last_error, created_at, updated_at, verify_pass, tag_owed, sent_at,"
    " message_id";

namespace {

// A state as stored: the schema's CHECK admits only the names of the enum's table.
template <class E> E stored_state(std::optional<E> v, const char *column, const std::string &text) {
  if (!v)
    throw LodgeError(Errc::ledger_unusable,
                     std::string("the ledger holds an unknown ") + column + " '" + text + "'");
  return *v;
}

} // namespace

TaskRecord read_task(const sql::Stmt &st) {
  TaskRecord t;
  t.id = st.col_int(0);
  t.record_id = st.col_int(1);
  t.task_type = st.col_text(2);
  t.object_key = st.col_text(3);
  t.status = stored_state(parse_task_status(st.col_text(4)), "status", st.col_text(4));
  t.next_retry_at = st.col_int(5);
  t.retry_count = st.col_int(6);
  t.max_retries = st.col_int(7);
  t.lease_owner = st.col_opt_text(8);
  t.lease_until = st.col_opt_int(9);
  t.lease_version = st.col_int(10);
  t.last_error = st.col_opt_text(11);
  t.created_at = st.col_int(12);
  t.updated_at = st.col_int(13);
  t.verify_pass = st.col_int(14);
  t.tag_owed = st.col_int(15) != 0;
  t.sent_at = st.col_opt_int(16);
  t.message_id = st.col_opt_text(17);
  return t;
}

namespace {

// Due: PENDING/RETRY whose time has come, or PROCESSING whose lease has expired.
constexpr const char *k_due = "((status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1)"
                              " OR (status = 'PROCESSING' AND lease_until < ?1))";
} // namespace

FileRecord read_file(const sql::Stmt &st) {
  FileRecord r;
  r.id = st.col_int(0);
  r.owner_id = st.col_text(1);
  r.original_name = st.col_text(2);
  r.object_key = st.col_text(3);
  r.media_type = st.col_text(4);
  r.sha256 = st.col_text(5);
  r.size = st.col_int(6);
  r.policy = st.col_text(7);
  r.upload_status = stored_state(parse_file_status(st.col_text(8)), "upload_status", st.col_text(8));
  r.failure_reason = st.col_opt_text(9);
  r.is_deleted = st.col_int(10) != 0;
  r.idempotency_key = st.col_opt_text(11);
  r.etag = st.col_opt_text(12);
  r.version_id = st.col_opt_text(13);
  r.multipart_upload_id = st.col_opt_text(14);
  r.created_at = st.col_int(15);
  r.updated_at = st.col_int(16);
  r.activated_at = st.col_opt_int(17);
  r.deleted_at = st.col_opt_int(18);
  r.upload_deadline_at = st.col_int(19);
  r.relative_path = st.col_text(20);
  r.run_prefix = st.col_text(21);
  // The schema's CHECK admits only the three names.
  r.dedup_scope = parse_dedup_scope(st.col_text(22)).value_or(DedupScope::owner);
  r.holder = st.col_opt_text(23);
  r.content_type = st.col_opt_text(24);
  r.object_options = st.col_opt_text(25).value_or("");
  auto dev = st.col_opt_int(26);
  auto ino = st.col_opt_int(27);
  auto mtime = st.col_opt_int(28);
  auto ctime = st.col_opt_int(29);
  if (dev && ino && mtime && ctime) r.stat = FileStat{*dev, *ino, *mtime, *ctime};
  r.content_of = st.col_opt_int(30);
  r.expires_at = st.col_opt_int(31);
  return r;
}

std::optional<FileRecord> SqlLedger::file_where(const std::string &where,
                                                const std::function<void(Stmt &)> &bind, const char *lock) {
  auto st = q(std::string("SELECT ") + k_file_cols + " FROM file_upload WHERE " + where + lock);
  bind(st);
  if (!st.step()) return std::nullopt;
  return read_file(st);
}

std::optional<FileRecord> SqlLedger::file_for_update(int64_t id) {
  return file_where(
      "id = ?1", [&](Stmt &s) { s.bind(1, id); }, m_c->for_update());
}

std::optional<TaskRecord> SqlLedger::task_by_id(int64_t id, const char *lock) {
  auto st = q(std::string("SELECT ") + k_task_cols + " FROM cleanup_task WHERE id = ?1" + lock);
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_task(st);
}

std::optional<TaskRecord> SqlLedger::task_for_record(int64_t record_id, const char *lock) {
  auto st = q(std::string("SELECT ") + k_task_cols + " FROM cleanup_task WHERE record_id = ?1" + lock);
  st.bind(1, record_id);
  if (!st.step()) return std::nullopt;
  return read_task(st);
}

ReserveResult SqlLedger::reserve(const ReserveRequest &req, int64_t now) {
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.reserve(req, now); });
  return m_c->write([&](sql::Tx &tx) {
    // The owner's check-then-insert (idempotency, duplicate, quota) is serialized with every
    // other reserve of the same owner.
    m_c->lock_key(req.owner_id);
    if (auto replay = replay_by_key(req, now)) return *replay;
    std::optional<FileRecord> share;
    if (auto dedup = dedup_answer(req, share)) return *dedup;
    if (req.max_files) {
      // Kept by the schema's triggers: one row read, however many files the owner has.
      auto cnt = q("SELECT alive_files FROM owner_usage WHERE owner_id = ?1");
      const int64_t alive = cnt.bind(1, req.owner_id).step() ? cnt.col_int(0) : 0;
      if (alive >= *req.max_files) {
        ReserveResult res;
        res.outcome = ReserveOutcome::quota_exceeded;
        return res;
      }
    }
    // Resume replaces only the insert: everything above answered first, and the quota
    // counted the revived row as it would a new one.
    if (req.resume && !share)
      if (auto revived = revive_resumable(req, now)) {
        if (!req.dry_run) tx.commit(); // a dry run's revive is rolled back
        return *revived;
      }
    ReserveResult res = insert_reserved(req, share, now);
    if (res.outcome == ReserveOutcome::id_limit_reached || req.dry_run) return res; // rolled back
    tx.commit();
    return res;
  });
}

std::optional<ReserveResult> SqlLedger::replay_by_key(const ReserveRequest &req, int64_t now) {
  if (!req.idempotency_key) return std::nullopt;
  auto prior = file_where(
      "owner_id = ?1 AND idempotency_key = ?2",
      [&](Stmt &s) { s.bind(1, req.owner_id).bind(2, *req.idempotency_key); }, m_c->for_update());
  if (!prior) return std::nullopt;
  ReserveResult res;
  res.record = *prior;
  if (prior->sha256 != req.sha256) {
    res.outcome = ReserveOutcome::key_reused;
    return res;
  }
  if (!prior->is_deleted && prior->upload_status == FileStatus::active) {
    res.outcome = ReserveOutcome::replayed;
    return res;
  }
  if (!prior->is_deleted && prior->upload_status == FileStatus::uploading) {
    res.outcome = ReserveOutcome::in_progress;
    return res;
  }
  // The earlier attempt failed or its file was deleted: this one starts afresh and
  // takes the key over.
  auto clear = q("UPDATE file_upload SET idempotency_key = NULL, updated_at = ?2 WHERE id = ?1 AND "
                 "is_deleted = 1");
  if (clear.bind(1, prior->id).bind(2, now).exec() != 1)
    throw LodgeError(Errc::internal, "idempotency key release changed no row");
  return std::nullopt;
}

std::optional<ReserveResult> SqlLedger::dedup_answer(const ReserveRequest &req,
                                                     std::optional<FileRecord> &share) {
  if (req.dedup == DedupScope::none) return std::nullopt;
  ReserveResult res;
  const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
  // The path's current row (what get of the path restores) holds this content already:
  // nothing to do. Any other alive copy saves the bytes, never the path: the file gets a row
  // of its own that shares the copy's object.
  auto current = file_where("owner_id = ?1 AND run_prefix = ?2 AND relative_path = ?3 AND upload_status = "
                            "'ACTIVE' AND is_deleted = 0"
                            " ORDER BY activated_at DESC, id DESC LIMIT 1",
                            [&](Stmt &s) { s.bind(1, req.owner_id).bind(2, req.run_prefix).bind(3, path); });
  if (current && current->sha256 == req.sha256) {
    res.outcome = ReserveOutcome::duplicate;
    res.record = *current;
    return res;
  }
  if (req.share_with) {
    // The row the caller checked: still alive, ACTIVE and of this content, under the lock
    // that a delete of it takes too (so its object's cleanup cannot decide meanwhile).
    share = file_for_update(*req.share_with);
    if (!share || share->is_deleted || share->upload_status != FileStatus::active ||
        share->sha256 != req.sha256 || share->owner_id != req.owner_id) {
      share.reset();
      res.outcome = ReserveOutcome::share_gone;
      return res;
    }
    return std::nullopt;
  }
  // I4, scoped (ARCHITECTURE.md): the alive rows that hold this content are, under "owner",
  // every alive row of the owner with this digest (whatever its prefix or scope); under
  // "prefix", those with this run prefix too. Of several, one in this run prefix first, then
  // an ACTIVE one, then the oldest. Whether its object is really there is the caller's to check.
  auto alive = file_where("owner_id = ?1 AND sha256 = ?2 AND is_deleted = 0 AND (?3 = 1 OR run_prefix = ?4)"
                          " ORDER BY CASE WHEN run_prefix = ?4 THEN 0 ELSE 1 END,"
                          " CASE WHEN upload_status = 'ACTIVE' THEN 0 ELSE 1 END, id LIMIT 1",
                          [&](Stmt &s) {
                            s.bind(1, req.owner_id)
                                .bind(2, req.sha256)
                                .bind(3, static_cast<int64_t>(req.dedup == DedupScope::owner))
                                .bind(4, req.run_prefix);
                          });
  if (!alive) return std::nullopt;
  res.record = *alive;
  res.outcome =
      alive->upload_status == FileStatus::uploading ? ReserveOutcome::in_progress : ReserveOutcome::shareable;
  return res;
}

std::optional<ReserveResult> SqlLedger::revive_resumable(const ReserveRequest &req, int64_t now) {
  const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
  // The staged upload was created with the object's Content-Type and options: only a row
  // whose object would be exactly the one this request makes can be continued.
  const std::string &content_type = req.content_type.empty() ? req.media_type : req.content_type;
  std::vector<FileRecord> found;
  {
    auto st = q(std::string("SELECT ") + k_file_cols +
                " FROM file_upload WHERE owner_id = ?1 AND run_prefix = ?2 AND relative_path = ?3"
                " AND sha256 = ?4 AND size = ?5 AND upload_status = 'UPLOAD_FAILED' AND content_of IS NULL"
                " AND multipart_upload_id IS NOT NULL AND COALESCE(content_type, media_type) = ?6"
                " AND COALESCE(object_options, '') = ?7 AND (holder IS NULL OR holder NOT LIKE 'direct %')"
                " AND EXISTS (SELECT 1 FROM cleanup_task t WHERE t.record_id = file_upload.id"
                " AND t.status = 'PENDING' AND t.lease_version = 0)"
                " ORDER BY id DESC");
    st.bind(1, req.owner_id)
        .bind(2, req.run_prefix)
        .bind(3, path)
        .bind(4, req.sha256)
        .bind(5, req.size)
        .bind(6, content_type)
        .bind(7, req.object_options);
    while (st.step()) {
      auto r = read_file(st);
      if (r.object_key.starts_with(req.key_prefix)) found.push_back(std::move(r));
    }
  }
  const int64_t deadline = now + req.deadline_ms;
  for (const auto &cand : found) {
    // The row, then its task (the lock order), each locked before the conditional updates
    // re-check them: a sweep claims a task by locking it alone (claim_due skips a locked
    // one, claim_task waits and then finds it not due), so once both are held the task can
    // no longer become PROCESSING under the revive.
    (void)file_for_update(cand.id);
    auto task = task_for_record(cand.id, m_c->for_update());
    if (!task || task->status != TaskStatus::pending || task->lease_version != 0) continue;
    auto row = q(
        std::string("UPDATE file_upload SET upload_status = 'UPLOADING', is_deleted = 0,"
                    " deleted_at = NULL, failure_reason = NULL, holder = ?2, upload_deadline_at = ?3,"
                    " updated_at = ?4, stat_dev = ?5, stat_ino = ?6, stat_mtime_ns = ?7,"
                    " stat_ctime_ns = ?8, original_name = ?9, policy = ?10, dedup_scope = ?11,"
                    " idempotency_key = ?12, expires_at = ?13"
                    " WHERE id = ?1 AND upload_status = 'UPLOAD_FAILED' AND content_of IS NULL"
                    " AND multipart_upload_id IS NOT NULL AND EXISTS (SELECT 1 FROM cleanup_task t"
                    " WHERE t.record_id = ?1 AND t.status = 'PENDING' AND t.lease_version = 0) RETURNING ") +
        k_file_cols);
    const auto stat = req.stat;
    row.bind(1, cand.id)
        .bind(2, req.holder)
        .bind(3, deadline)
        .bind(4, now)
        .bind(5, stat ? std::optional<int64_t>(stat->dev) : std::nullopt)
        .bind(6, stat ? std::optional<int64_t>(stat->ino) : std::nullopt)
        .bind(7, stat ? std::optional<int64_t>(stat->mtime_ns) : std::nullopt)
        .bind(8, stat ? std::optional<int64_t>(stat->ctime_ns) : std::nullopt)
        .bind(9, req.original_name)
        .bind(10, req.policy)
        .bind(11, std::string_view(to_string(req.dedup)))
        .bind(12, req.idempotency_key)
        .bind(13, req.expires_at);
    if (!row.step()) continue; // moved on before we locked it: nothing written
    ReserveResult res;
    res.outcome = ReserveOutcome::resumed;
    res.record = read_file(row);
    res.cleanup_due_before = task->next_retry_at;
    row.reset();
    // An owed verify pass stays owed: the row's earlier sender may have had a completion in
    // flight when the row failed without an answer or by its deadline, and only that pass
    // removes it should this row fail again after its own delete.
    auto t = q("UPDATE cleanup_task SET next_retry_at = ?2, max_retries = ?3, tag_owed = 0,"
               " last_error = NULL, updated_at = ?4 WHERE record_id = ?1 AND status = 'PENDING'"
               " AND lease_version = 0");
    if (t.bind(1, cand.id)
            .bind(2, deadline + req.grace_ms)
            .bind(3, static_cast<int64_t>(req.max_retries))
            .bind(4, now)
            .exec() != 1)
      throw LodgeError(Errc::internal, "the revive of file #" + std::to_string(cand.id) +
                                           " found its task moved on under its lock");
    // The quota's counter follows rows made alive by an insert only (the schema's triggers):
    // a row alive again is counted here, in the same transaction.
    auto usage = q("INSERT INTO owner_usage (owner_id, alive_files) VALUES (?1, 1)"
                   " ON CONFLICT (owner_id) DO UPDATE SET alive_files = owner_usage.alive_files + 1");
    usage.bind(1, req.owner_id).exec();
    return res;
  }
  return std::nullopt;
}

ReserveResult SqlLedger::insert_reserved(const ReserveRequest &req, const std::optional<FileRecord> &share,
                                         int64_t now) {
  ReserveResult res;
  const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
  std::string key = object_key_for(req.key_prefix, req.owner_id, req.run_prefix, crypto::random_uuid(), path);
  if (key.size() > k_max_key_bytes)
    throw LodgeError(Errc::bad_name, "the object key for '" + path + "' would be " +
                                         std::to_string(key.size()) + " bytes; the store allows " +
                                         std::to_string(k_max_key_bytes));
  int64_t deadline = now + req.deadline_ms;
  auto ins =
      q("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
        " upload_status, is_deleted, idempotency_key, created_at, updated_at, upload_deadline_at,"
        " relative_path, run_prefix, dedup_scope, holder, content_type, object_options,"
        " stat_dev, stat_ino, stat_mtime_ns, stat_ctime_ns, activated_at, content_of, content_key, etag,"
        " version_id, expires_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?21, 0, ?8, ?9, ?9, ?10, ?11, ?12, ?13, ?14,"
        " NULLIF(?15, ''), NULLIF(?16, ''), ?17, ?18, ?19, ?20, ?22, ?23, ?24, ?25, ?26, ?27) "
        "RETURNING " +
        std::string(k_file_cols));
  ins.bind(1, req.owner_id)
      .bind(2, req.original_name)
      .bind(3, key)
      .bind(4, req.media_type)
      .bind(5, req.sha256)
      .bind(6, req.size)
      .bind(7, req.policy)
      .bind(8, req.idempotency_key)
      .bind(9, now)
      .bind(10, deadline)
      .bind(11, path)
      .bind(12, req.run_prefix)
      .bind(13, std::string_view(to_string(req.dedup)))
      .bind(14, share ? std::nullopt : req.holder)
      .bind(15, req.content_type)
      .bind(16, req.object_options);
  const auto stat = req.stat;
  ins.bind(17, stat ? std::optional<int64_t>(stat->dev) : std::nullopt)
      .bind(18, stat ? std::optional<int64_t>(stat->ino) : std::nullopt)
      .bind(19, stat ? std::optional<int64_t>(stat->mtime_ns) : std::nullopt)
      .bind(20, stat ? std::optional<int64_t>(stat->ctime_ns) : std::nullopt);
  // A shared row is ACTIVE at once: its object is the shared one, already stored and checked.
  ins.bind(21, share ? "ACTIVE" : "UPLOADING")
      .bind(22, share ? std::optional<int64_t>(now) : std::nullopt)
      .bind(23, share ? std::optional<int64_t>(share->stamp_id()) : std::nullopt)
      .bind(24, share ? std::optional<std::string>(share->object_key) : std::nullopt)
      .bind(25, share ? share->etag : std::nullopt)
      .bind(26, share ? share->version_id : std::nullopt)
      .bind(27, req.expires_at);
  if (!ins.step()) throw LodgeError(Errc::internal, "reserve's insert returned no id");
  // The new row as stored, from the insert itself: no second read.
  res.record = read_file(ins);
  const int64_t id = res.record.id;
  ins.reset();
  // Past the end of the id block the store's marker covers: rolled back (no commit), so
  // concurrent reservers can never both slip under the limit.
  if (req.id_limit && id > *req.id_limit) {
    res.record = FileRecord{};
    res.outcome = ReserveOutcome::id_limit_reached;
    return res;
  }
  if (share) res.outcome = ReserveOutcome::shared;
  // A dry run stops here: rolled back, nothing written (the id is no one's).
  if (req.dry_run) {
    res.record.id = 0;
    return res;
  }
  record_attrs(id, req.object_options);
  // Every row has its task. A shared row's names the shared object and has nothing to do
  // while the row is alive (IGNORED); a delete makes it pending like any other.
  auto task =
      q("INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,"
        " created_at, updated_at) VALUES (?1, 'DELETE_OBJECT', ?2, ?6, ?3, ?4, ?5, ?5)");
  task.bind(1, id)
      .bind(2, res.record.object_key)
      .bind(3, share ? now : deadline + req.grace_ms)
      .bind(4, static_cast<int64_t>(req.max_retries))
      .bind(5, now)
      .bind(6, share ? "IGNORED" : "PENDING")
      .exec();
  if (share && req.retire) retire_others(id, *req.retire, now);
  return res;
}

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

bool SqlLedger::key_in_use(const std::string &key, int64_t except_id) {
  // Two probes, each on its own index (the UNIQUE key, the shared-key index).
  auto own = q("SELECT 1 FROM file_upload WHERE object_key = ?1 AND content_of IS NULL AND is_deleted = 0"
               " AND id <> ?2");
  if (own.bind(1, key).bind(2, except_id).step()) return true;
  auto shared = q("SELECT 1 FROM file_upload WHERE content_key = ?1 AND is_deleted = 0 AND id <> ?2 LIMIT 1");
  return shared.bind(1, key).bind(2, except_id).step();
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

std::optional<FileRecord> SqlLedger::find_file(int64_t id) {
  return file_where("id = ?1", [&](Stmt &s) { s.bind(1, id); });
}

std::vector<FileRecord> SqlLedger::find_by_path(const std::string &owner, const std::string &run_prefix,
                                                const std::string &relative_path) {
  auto st = q(std::string("SELECT ") + k_file_cols +
              " FROM file_upload WHERE owner_id = ?1 AND run_prefix = ?2 AND relative_path = ?3"
              " AND upload_status = 'ACTIVE' AND is_deleted = 0 ORDER BY activated_at DESC, id DESC");
  st.bind(1, owner).bind(2, run_prefix).bind(3, relative_path);
  std::vector<FileRecord> out;
  while (st.step())
    out.push_back(read_file(st));
  return out;
}

std::optional<TaskRecord> SqlLedger::find_task_for(int64_t record_id) {
  return task_for_record(record_id);
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

} // namespace lodge::ledger

namespace lodge::ledger {

std::vector<TaskRecord> SqlLedger::due_tasks(int64_t now, int limit) {
  auto st = q(std::string("SELECT ") + k_task_cols + " FROM cleanup_task WHERE " + k_due +
              " ORDER BY next_retry_at, id LIMIT ?2");
  st.bind(1, now).bind(2, static_cast<int64_t>(limit));
  std::vector<TaskRecord> out;
  while (st.step())
    out.push_back(read_task(st));
  return out;
}

void SqlLedger::scan_tasks(std::optional<TaskStatus> status,
                           const std::function<bool(const TaskRecord &)> &visit) {
  // SQLite steps through its rows as they are read; libpq receives a statement's whole
  // result at once, so on PostgreSQL the tasks come in pages of k_page, each after the
  // last id of the one before.
  constexpr int64_t k_page = 1000;
  const bool paged = m_c->dialect() == sql::Dialect::postgres;
  auto st = q(std::string("SELECT ") + k_task_cols +
              " FROM cleanup_task WHERE (?1 = '' OR status = ?1) AND id > ?2 ORDER BY id" +
              (paged ? " LIMIT ?3" : ""));
  int64_t after = 0;
  for (;;) {
    st.reset();
    st.bind(1, status ? to_string(*status) : "").bind(2, after);
    if (paged) st.bind(3, k_page);
    int64_t got = 0;
    while (st.step()) {
      auto t = read_task(st);
      after = t.id;
      ++got;
      if (!visit(t)) return;
    }
    if (!paged || got < k_page) return;
  }
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

void SqlLedger::rows_by_key(const std::string &prefix, const std::string &after,
                            const std::function<bool(const FileRecord &)> &visit) {
  // The keys with the prefix are the ones from the prefix on, in byte order (the store's
  // listing order; the column compares bytes), up to the first key without it: a range
  // scan on the UNIQUE index with no upper bound to compute. One lower bound only: with
  // both `>= prefix` and `> after`, SQLite seeks on the first and filters on the second,
  // so a page resumed after key N stepped over the N rows before it (reconcile, which
  // reads the ledger in pages, was quadratic in rows).
  const bool resume = !after.empty() && after >= prefix; // after < prefix: the prefix bounds
  // Rows sharing another row's object have no object of their own: the row that wrote it
  // stands for them, with the count of its alive sharers.
  // On PostgreSQL (libpq receives a statement's whole result at once) the rows come in
  // pages of k_page, each after the last key of the one before: without the LIMIT every
  // page of a caller that stops early fetched every key from its start to the end.
  constexpr int64_t k_page = 1000;
  const bool paged = m_c->dialect() == sql::Dialect::postgres;
  bool first = true;
  std::string from = resume ? after : prefix;
  for (;;) {
    auto st = q(std::string("SELECT ") + k_file_cols +
                ", (SELECT count(*) FROM file_upload s WHERE s.content_key = file_upload.object_key"
                " AND s.is_deleted = 0),"
                " (SELECT count(*) FROM file_upload s JOIN cleanup_task t ON t.record_id = s.id"
                " WHERE s.content_key = file_upload.object_key"
                " AND t.status IN ('PENDING', 'RETRY', 'PROCESSING'))"
                " FROM file_upload WHERE object_key " +
                (first && !resume ? ">=" : ">") + " ?1 AND content_of IS NULL ORDER BY object_key" +
                (paged ? " LIMIT ?2" : ""));
    st.bind(1, from);
    if (paged) st.bind(2, k_page);
    int64_t got = 0;
    while (st.step()) {
      auto r = read_file(st);
      r.alive_sharers = st.col_int(k_file_col_count); // the columns after k_file_cols
      r.live_sharer_tasks = st.col_int(k_file_col_count + 1);
      if (r.object_key.compare(0, prefix.size(), prefix) != 0) return;
      ++got;
      from = r.object_key;
      if (!visit(r)) return;
    }
    if (!paged || got < k_page) return;
    first = false;
  }
}

int64_t SqlLedger::max_record_id() {
  return m_c->max_record_id();
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
