// UploadLedger::reserve in the SQL SQLite and PostgreSQL both speak: idempotency replay, the
// alive duplicate per de-dup scope, the quota, the revive of a resumable row, then the insert
// of the UPLOADING row and its cleanup task, all in one transaction.
// Every write is one Conn::write transaction; every transition names the state it expects and
// checks that exactly the expected rows changed. A row a transaction reads and then changes is
// read with for_update(); lock order: the file_upload row, then its task.
#include "sql_ledger.hpp"

#include <lodge/crypto/random.hpp>
#include <optional>
#include <string>

namespace lodge::ledger {

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

std::vector<Result<ReserveResult>> SqlLedger::reserve_batch(const std::vector<ReserveRequest> &reqs,
                                                            int64_t now) {
  // One group request (SQLite) or one transaction (PostgreSQL) for them all: one commit, one
  // wait. Each reserve is a savepoint of it, so one that throws (a key too long) is undone
  // alone; one the ledger itself failed under (the transaction gone) fails them all.
  // The group's batch is the transaction already: each reserve is a savepoint of it directly
  // (a savepoint more around them all would copy every page they touch once more).
  if (m_group) return m_group->run([&](SqlLedger &w) { return w.reserve_each(reqs, now); });
  return m_c->write([&](sql::Tx &tx) {
    auto out = reserve_each(reqs, now);
    tx.commit();
    return out;
  });
}

std::vector<Result<ReserveResult>> SqlLedger::reserve_each(const std::vector<ReserveRequest> &reqs,
                                                           int64_t now) {
  std::vector<Result<ReserveResult>> out;
  out.reserve(reqs.size());
  for (const auto &req : reqs) {
    try {
      out.emplace_back(reserve(req, now));
    } catch (const sql::TransientConflict &) {
      throw; // the whole batch runs again
    } catch (const LodgeError &e) {
      if (!m_c->in_transaction()) throw; // the transaction is gone: so is every reserve of it
      out.emplace_back(e.error());
    }
  }
  return out;
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
  auto alive = file_where(alive_with_digest("?1", "?2") + " AND (?3 = 1 OR run_prefix = ?4)" +
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

} // namespace lodge::ledger
