#include "sql_ledger.hpp"

#include "drivers.hpp"
#include "pg.hpp"

#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <map>

namespace lodge::ledger {

bool is_postgres_location(std::string_view location) {
  if (location.rfind("postgres:", 0) == 0 || location.rfind("postgresql:", 0) == 0) return true;
  // A libpq keyword string ("host=db dbname=lodge password=..."): psql reads a database name
  // holding a '=' as one. Taken for a file name, it made a local ledger named after it (the
  // password included) where the host meant the shared one. A path spelt as one (/..., ./...)
  // stays a file whatever it holds.
  return !location.empty() && location.front() != '/' && location.front() != '.' &&
         location.find('=') != std::string_view::npos;
}

std::string shown_location(const std::string &location) {
  // A file path as it is; whatever else (a URL of another scheme, refused on open) without a password.
  return is_postgres_location(location) ? pg::display_location(location) : util::log::redact(location);
}

std::unique_ptr<Ledger> open_ledger(const OpenOptions &opts) {
  return std::make_unique<SqlLedger>(is_postgres_location(opts.location) ? open_postgres(opts)
                                                                         : open_sqlite(opts));
}

SqlLedger::SqlLedger(std::unique_ptr<sql::Conn> conn, std::shared_ptr<GroupCommit> group)
    : m_c(std::move(conn)), m_group(std::move(group)) {
  m_uuid = meta_text("uuid").value_or("");
  if (m_uuid.empty()) throw LodgeError(Errc::ledger_unusable, m_c->display_name() + ": ledger has no uuid");
}

int SqlLedger::schema_version() {
  return m_c->schema_version();
}

StatusReport SqlLedger::status(int64_t now, int64_t failed_since) {
  return m_c->read([&] {
    StatusReport r;
    r.now = now;
    r.failed_since = failed_since;
    r.ledger_uuid = m_uuid;
    r.schema_version = m_c->schema_version();
    r.backend_kind = m_c->dialect() == sql::Dialect::postgres ? "postgres" : "sqlite";
    r.backend = m_c->health();
    r.ledger_created_at = meta_int("created_at").value_or(0);
    r.diverged = divergence();
    {
      auto st = q("SELECT upload_status, is_deleted, count(*) FROM file_upload GROUP BY 1, 2");
      while (st.step()) {
        auto s = parse_file_status(st.col_text(0));
        bool del = st.col_int(1) != 0;
        int64_t n = st.col_int(2);
        if (s == FileStatus::upload_failed)
          r.files_failed += n;
        else if (del)
          r.files_deleted += n;
        else if (s == FileStatus::active)
          r.files_active += n;
        else if (s == FileStatus::uploading)
          r.files_uploading += n;
      }
    }
    for (auto s : k_task_statuses)
      r.tasks[to_string(s)] = 0;
    {
      // Every task, ended ones included: a read of the table (cleanup_task_due holds only the
      // live tasks), as the count of the files above reads theirs.
      auto st = q("SELECT status, count(*) FROM cleanup_task GROUP BY 1");
      while (st.step())
        r.tasks[st.col_text(0)] = st.col_int(1);
    }
    r.dead_letters = r.tasks[to_string(TaskStatus::failed)];
    {
      auto st = q("SELECT count(*) FROM file_upload "
                  "WHERE upload_status = 'UPLOADING' AND is_deleted = 0 AND upload_deadline_at < ?1");
      st.bind(1, now).step();
      r.overdue_uploading = st.col_int(0);
    }
    {
      // min(+created_at): the unary plus keeps the planner off file_upload_created (a walk
      // in created_at order past every ACTIVE row: 0.2 s on a million) and on the partial
      // index of alive UPLOADING rows, which holds only the few in flight.
      auto st =
          q("SELECT min(+created_at) FROM file_upload WHERE upload_status = 'UPLOADING' AND is_deleted = 0");
      st.step();
      if (auto oldest = st.col_opt_int(0)) r.oldest_uploading_age_ms = now - *oldest;
    }
    {
      auto st = q("SELECT count(*) FROM cleanup_task WHERE status = 'PROCESSING' AND lease_until < ?1");
      st.bind(1, now).step();
      r.expired_leases = st.col_int(0);
    }
    {
      auto st =
          q("SELECT count(*) FROM cleanup_task WHERE status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1");
      st.bind(1, now).step();
      r.tasks_due = st.col_int(0);
    }
    for (const char *job : {"sweep", "repair", "reconcile", "prune", "relay", "consume"}) {
      auto st = q("SELECT worker_id, started_at, finished_at, outcome, counts FROM job_run "
                  "WHERE job = ?1 ORDER BY started_at DESC, id DESC LIMIT 1");
      st.bind(1, std::string_view(job));
      if (st.step())
        r.last_runs[job] =
            JobRun{job, st.col_text(0), st.col_int(1), st.col_int(2), st.col_text(3), st.col_text(4)};
      else
        r.last_runs[job] = std::nullopt;
      auto ok = q("SELECT finished_at FROM job_run WHERE job = ?1 AND outcome = 'ok' "
                  "ORDER BY started_at DESC, id DESC LIMIT 1");
      ok.bind(1, std::string_view(job));
      if (ok.step()) r.last_success_at[job] = ok.col_int(0);
    }
    {
      // A row's updated_at is set when it fails and not changed after.
      auto st =
          q("SELECT count(*) FROM file_upload WHERE upload_status = 'UPLOAD_FAILED' AND updated_at >= ?1");
      st.bind(1, failed_since).step();
      r.files_failed_since = st.col_int(0);
    }
    return r;
  });
}

void SqlLedger::record_job_run(const JobRun &run) {
  return m_c->write([&](sql::Tx &tx) {
    auto st = q("INSERT INTO job_run (job, worker_id, started_at, finished_at, outcome, counts) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    st.bind(1, run.job)
        .bind(2, run.worker_id)
        .bind(3, run.started_at)
        .bind(4, run.finished_at)
        .bind(5, run.outcome)
        .bind(6, run.counts_json)
        .exec();
    tx.commit();
  });
}

std::optional<StoreBinding> SqlLedger::store_binding() {
  std::map<std::string, std::string> kv;
  {
    auto st = q("SELECT key, value FROM ledger_meta WHERE key LIKE 'binding.%'");
    while (st.step())
      kv[st.col_text(0)] = st.col_text(1);
  }
  if (!kv.contains("binding.scheme")) return std::nullopt;
  return StoreBinding{kv["binding.scheme"], kv["binding.endpoint"], kv["binding.location"],
                      kv["binding.root"], kv["binding.tagging"]};
}

BindResult SqlLedger::bind_store(const StoreBinding &b, Rebind rebind) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta(); // read under the write lock: two first uses race to record it
    BindResult r;
    r.previous = store_binding();
    // A binding recorded before tagging modes were gets this one's, for the same store only.
    const bool fill_in =
        r.previous && r.previous->tagging.empty() && !b.tagging.empty() && r.previous->same_store(b);
    if (r.previous && !fill_in && (rebind == Rebind::no || *r.previous == b)) return r;
    auto st =
        q("INSERT INTO ledger_meta (key, value) VALUES ('binding.scheme', ?1), ('binding.endpoint', ?2),"
          " ('binding.location', ?3), ('binding.root', ?4), ('binding.tagging', ?5)"
          " ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    st.bind(1, b.scheme).bind(2, b.endpoint).bind(3, b.location).bind(4, b.root).bind(5, b.tagging).exec();
    tx.commit();
    r.written = true;
    return r;
  });
}

} // namespace lodge::ledger
