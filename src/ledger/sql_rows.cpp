// The ledger's rows and tasks as read, in the SQL SQLite and PostgreSQL both speak: the column
// lists and their readers every query shares, the row and task lookups the transitions lock
// with, and LedgerReports' reads by id, path and key (scan_files and the other searches are in
// sql_search.cpp).
#include "sql_ledger.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

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

std::string alive_with_digest(const std::string &owner, const std::string &sha256) {
  const std::string rows = "SELECT id FROM file_upload WHERE owner_id = " + owner +
                           " AND sha256 = " + sha256 + " AND is_deleted = 0 AND ";
  return "id IN (" + rows + "dedup_scope <> 'none' AND content_of IS NULL UNION ALL " + rows +
         "(dedup_scope = 'none' OR content_of IS NOT NULL))";
}

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

} // namespace lodge::ledger
