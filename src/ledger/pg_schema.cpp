// The PostgreSQL ledger's schema: created from schema_pg.sql by `lodge init`, migrated from
// any version since the oldest this build knows, or (read-only) checked; in one transaction
// under the schema lock. The steps, kept apart from the driver, say what each version added.

#include "pg_conn.hpp"

#include <array>
#include <charconv>
#include <lodge/crypto/random.hpp>
#include <lodge/ledger/schema.hpp>
#include <string>
#include <string_view>

namespace lodge::ledger::pg {

namespace {

// The oldest PostgreSQL schema version this build migrates from (the first one it had).
constexpr int k_oldest_pg_schema_version = 4;
// Step i brings a PostgreSQL ledger from version k_oldest_pg_schema_version + i to the next
// one; run in the schema transaction, under the schema lock. Version 4 -> 5: as SQLite's
// (src/ledger/migrations.cpp), the (owner, sha256) index of alive rows and owner_usage.
// Version 5 -> 6: file_upload.holder. Version 6 -> 7: the object's options and the stat cache.
// Version 7 -> 8: rows sharing another row's object (content_of, content_key).
// Version 8 -> 9: cleanup_task.tag_owed, set as SQLite's step sets it.
// Version 9 -> 10: expires_at, file_attr filled from object_options, the indexes on
// expires_at and created_at, job 'prune' (as SQLite's step).
// Version 10 -> 11: the outbox: cleanup_task.sent_at and message_id, outbox_event, its
// index and trigger, jobs 'relay' and 'consume' (as SQLite's step).
// Version 11 -> 12: the leaner indexes (as SQLite's step): the I4 index on (owner, sha256,
// run_prefix), file_upload_alive_other_digest for the alive rows it leaves out, and
// cleanup_task_due on the live tasks only.
constexpr std::array<std::string_view, 8> k_pg_steps{
    R"sql(
DROP INDEX file_upload_owner_alive;
CREATE INDEX file_upload_alive_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0;
CREATE TABLE owner_usage (
  owner_id     TEXT COLLATE "C" PRIMARY KEY,
  alive_files  BIGINT NOT NULL CHECK (alive_files >= 0)
);
INSERT INTO owner_usage (owner_id, alive_files)
  SELECT owner_id, count(*) FROM file_upload WHERE is_deleted = 0 GROUP BY owner_id;
CREATE FUNCTION file_upload_usage() RETURNS trigger LANGUAGE plpgsql AS $lodge$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.is_deleted = 0 THEN
      INSERT INTO owner_usage (owner_id, alive_files) VALUES (NEW.owner_id, 1)
        ON CONFLICT (owner_id) DO UPDATE SET alive_files = owner_usage.alive_files + 1;
    END IF;
  ELSIF OLD.is_deleted = 0 AND NEW.is_deleted = 1 THEN
    UPDATE owner_usage SET alive_files = alive_files - 1 WHERE owner_id = OLD.owner_id;
  END IF;
  RETURN NULL;
END $lodge$;
CREATE TRIGGER file_upload_usage
  AFTER INSERT OR UPDATE OF is_deleted ON file_upload
  FOR EACH ROW EXECUTE FUNCTION file_upload_usage();
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN holder TEXT COLLATE "C";
)sql",
    R"sql(
ALTER TABLE file_upload
  ADD COLUMN content_type TEXT COLLATE "C",
  ADD COLUMN object_options TEXT COLLATE "C",
  ADD COLUMN stat_dev BIGINT,
  ADD COLUMN stat_ino BIGINT,
  ADD COLUMN stat_mtime_ns BIGINT,
  ADD COLUMN stat_ctime_ns BIGINT;
)sql",
    R"sql(
ALTER TABLE file_upload
  ADD COLUMN content_of BIGINT REFERENCES file_upload (id),
  ADD COLUMN content_key TEXT COLLATE "C";
DROP INDEX file_upload_alive_owner_digest;
DROP INDEX file_upload_alive_prefix_digest;
CREATE UNIQUE INDEX file_upload_alive_owner_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0 AND dedup_scope = 'owner' AND content_of IS NULL;
CREATE UNIQUE INDEX file_upload_alive_prefix_digest
  ON file_upload (owner_id, run_prefix, sha256)
  WHERE is_deleted = 0 AND dedup_scope <> 'none' AND content_of IS NULL;
CREATE INDEX file_upload_content_key
  ON file_upload (content_key) WHERE content_key IS NOT NULL;
)sql",
    R"sql(
ALTER TABLE cleanup_task
  ADD COLUMN tag_owed BIGINT NOT NULL DEFAULT 0 CHECK (tag_owed IN (0, 1));
UPDATE cleanup_task SET tag_owed = 1
  WHERE status IN ('PENDING', 'RETRY', 'PROCESSING')
    AND record_id IN (SELECT id FROM file_upload WHERE upload_status = 'ACTIVE' AND is_deleted = 0);
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN expires_at BIGINT;
CREATE INDEX file_upload_expiry
  ON file_upload (expires_at) WHERE expires_at IS NOT NULL AND is_deleted = 0;
CREATE INDEX file_upload_created
  ON file_upload (created_at);
CREATE TABLE file_attr (
  record_id  BIGINT NOT NULL REFERENCES file_upload (id),
  kind       TEXT COLLATE "C" NOT NULL CHECK (kind IN ('meta', 'tag')),
  name       TEXT COLLATE "C" NOT NULL,
  value      TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (kind, name, value, record_id)
);
INSERT INTO file_attr (record_id, kind, name, value)
  SELECT f.id, 'meta', j.key, j.value FROM file_upload f,
    jsonb_each_text(NULLIF(f.object_options, '')::jsonb -> 'metadata') j;
INSERT INTO file_attr (record_id, kind, name, value)
  SELECT f.id, 'tag', j.key, j.value FROM file_upload f,
    jsonb_each_text(NULLIF(f.object_options, '')::jsonb -> 'tags') j;
ALTER TABLE job_run DROP CONSTRAINT job_run_job_check;
ALTER TABLE job_run ADD CONSTRAINT job_run_job_check
  CHECK (job IN ('sweep', 'repair', 'reconcile', 'prune'));
)sql",
    R"sql(
ALTER TABLE cleanup_task
  ADD COLUMN sent_at BIGINT,
  ADD COLUMN message_id TEXT COLLATE "C";
CREATE TABLE outbox_event (
  id          BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  event_type  TEXT COLLATE "C" NOT NULL CHECK (event_type IN ('file.active', 'file.deleted', 'file.failed')),
  record_id   BIGINT NOT NULL REFERENCES file_upload (id),
  occurred_at BIGINT NOT NULL,
  sent_at     BIGINT,
  message_id  TEXT COLLATE "C"
);
CREATE INDEX outbox_event_unsent ON outbox_event (id) WHERE sent_at IS NULL;
CREATE FUNCTION file_upload_event() RETURNS trigger LANGUAGE plpgsql AS $lodge$
DECLARE
  kind TEXT;
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.upload_status = 'ACTIVE' THEN kind := 'file.active'; END IF;
  ELSIF NEW.upload_status = 'ACTIVE' AND OLD.upload_status <> 'ACTIVE' THEN
    kind := 'file.active';
  ELSIF NEW.upload_status = 'UPLOAD_FAILED' AND OLD.upload_status <> 'UPLOAD_FAILED' THEN
    kind := 'file.failed';
  ELSIF OLD.upload_status = 'ACTIVE' AND NEW.upload_status = 'ACTIVE' AND OLD.is_deleted = 0
        AND NEW.is_deleted = 1 THEN
    kind := 'file.deleted';
  END IF;
  IF kind IS NOT NULL AND kind = ANY (string_to_array(
       (SELECT value FROM ledger_meta WHERE key = 'event_types'), ',')) THEN
    INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES (kind, NEW.id, NEW.updated_at);
  END IF;
  RETURN NULL;
END $lodge$;
CREATE TRIGGER file_upload_event
  AFTER INSERT OR UPDATE OF upload_status, is_deleted ON file_upload
  FOR EACH ROW EXECUTE FUNCTION file_upload_event();
ALTER TABLE job_run DROP CONSTRAINT job_run_job_check;
ALTER TABLE job_run ADD CONSTRAINT job_run_job_check
  CHECK (job IN ('sweep', 'repair', 'reconcile', 'prune', 'relay', 'consume'));
)sql",
    R"sql(
DROP INDEX file_upload_alive_digest;
DROP INDEX file_upload_alive_prefix_digest;
CREATE UNIQUE INDEX file_upload_alive_prefix_digest
  ON file_upload (owner_id, sha256, run_prefix)
  WHERE is_deleted = 0 AND dedup_scope <> 'none' AND content_of IS NULL;
CREATE INDEX file_upload_alive_other_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0 AND (dedup_scope = 'none' OR content_of IS NOT NULL);
DROP INDEX cleanup_task_due;
CREATE INDEX cleanup_task_due ON cleanup_task (status, next_retry_at)
  WHERE status IN ('PENDING', 'RETRY') OR status = 'PROCESSING';
)sql"};
static_assert(k_pg_steps.size() == static_cast<size_t>(k_schema_version - k_oldest_pg_schema_version),
              "every PostgreSQL schema version after the oldest needs exactly one step in k_pg_steps");

} // namespace

int PgConn::read_version() {
  // Read from pg_class itself, under the statement's snapshot: to_regclass would consult
  // the catalog caches, which a transaction that began before another one created the
  // table (two inits at once) may still hold as "no such table".
  auto r = simple("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON "
                  "n.oid = c.relnamespace WHERE c.relname = 'ledger_meta' AND n.nspname = current_schema())");
  if (std::string_view(PQgetvalue(r.get(), 0, 0)) != "t") return 0;
  r = simple("SELECT value FROM ledger_meta WHERE key = 'schema_version'");
  std::string v = PQntuples(r.get()) > 0 ? PQgetvalue(r.get(), 0, 0) : "";
  int out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || out <= 0)
    throw LodgeError(Errc::ledger_unusable, m_display +
                                                ": the database has a ledger_meta table with no valid " +
                                                "schema_version ('" + v + "'): not a lodge ledger");
  return out;
}

int PgConn::schema_version() {
  return read_version();
}

void PgConn::setup_schema(const PgOpen &o) {
  auto too_new = [&](int v) {
    return LodgeError(Errc::ledger_too_new, m_display + ": the ledger has schema version " +
                                                std::to_string(v) + " but this lodge knows up to " +
                                                std::to_string(k_schema_version) + "; upgrade lodge");
  };
  auto not_found = [&] {
    return LodgeError(Errc::ledger_not_found, m_display +
                                                  ": no lodge ledger in this database (it has no ledger_meta "
                                                  "table). Run `lodge init --db " +
                                                  m_display + "` to create one");
  };
  int v = read_version();
  if (v > k_schema_version) throw too_new(v);
  if (v == k_schema_version) return;
  if (o.read_only) {
    if (v == 0) throw not_found();
    throw LodgeError(Errc::ledger_unusable,
                     m_display + ": the ledger has schema version " + std::to_string(v) +
                         ", older than this lodge's " + std::to_string(k_schema_version) +
                         "; this command only reads it and does not migrate: run `lodge "
                         "init` first");
  }
  if (v == 0 && !o.create) throw not_found();
  // Creation and migration: one transaction, under the schema lock, deciding on the
  // version read after the lock is held (another process may have just done it).
  simple("BEGIN ISOLATION LEVEL READ COMMITTED");
  try {
    simple("SELECT pg_advisory_xact_lock(" + std::to_string(sql::k_lock_namespace) + ", " +
           std::to_string(sql::k_schema_lock) + ")");
    v = read_version();
    if (v > k_schema_version) throw too_new(v);
    if (v == 0) {
      if (!o.create) throw not_found();
      simple(k_schema_pg_sql);
      sql::Stmt ins(
          prepare("INSERT INTO ledger_meta (key, value) VALUES ('schema_version', ?1), ('uuid', ?2), "
                  "('created_at', ?3)"));
      ins.bind(1, std::to_string(k_schema_version))
          .bind(2, crypto::random_uuid())
          .bind(3, std::to_string(o.now_ms));
      ins.exec();
    } else if (v < k_schema_version) {
      if (v < k_oldest_pg_schema_version)
        throw LodgeError(Errc::ledger_unusable,
                         m_display + ": ledger schema version " + std::to_string(v) +
                             " cannot be migrated (this lodge reads PostgreSQL versions " +
                             std::to_string(k_oldest_pg_schema_version) + " to " +
                             std::to_string(k_schema_version) + ")");
      for (int step = v; step < k_schema_version; ++step)
        simple(std::string(k_pg_steps.at(static_cast<size_t>(step - k_oldest_pg_schema_version))));
      sql::Stmt up(prepare("UPDATE ledger_meta SET value = ?1 WHERE key = 'schema_version'"));
      up.bind(1, std::to_string(k_schema_version)).exec();
    }
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

} // namespace lodge::ledger::pg
