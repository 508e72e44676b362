#include "drivers.hpp"

#include <array>
#include <lodge/ledger/schema.hpp>
#include <lodge/ledger/sqlite.hpp>
#include <string_view>

namespace lodge::ledger {
namespace {
// Step i brings a ledger from version k_oldest_schema_version + i to the next one.
// Version 1 had no job_run table: status could not tell whether cron ran the jobs.
// Version 2 had no verify_pass: a task finished with its first delete, even when a late
// PUT could still land after it.
// Version 3 kept only a file's base name and one alive row per (owner, sha256): no
// relative path, no per-run prefix, no de-dup scope. Its rows were reserved under what is
// now the 'owner' scope, with no prefix; their path is their name.
// Version 4 counted an owner's alive rows for the quota (linear in them) and looked
// duplicates up through an index on the owner alone (every reserve read all the owner's
// rows): version 5 indexes alive rows by (owner, sha256) and keeps owner_usage.
// Version 5 did not record who sends an UPLOADING row: a killed run's rows waited out
// their whole deadline. Version 6 adds file_upload.holder (NULL for the rows it had).
// Version 6 did not record the object's options or the file's stat: every re-run read and
// hashed every file again. Version 7 adds content_type, object_options and the stat cache
// columns (NULL for the rows it had: they are read once more, then cached).
// Version 7 gave a file whose content was already stored no row of its own (a duplicate at
// another path was not restorable by that path). Version 8 adds content_of and content_key
// (rows sharing another row's object; NULL for the rows it had) and leaves sharing rows out
// of the I4 indexes.
// Version 8 did not record that an ACTIVE row's object is still owed the committed tag: a
// sweep decided it from its own host's configuration, so one without tag_state ignored the
// task and the store's backstop later expired an ACTIVE object. Version 9 adds
// cleanup_task.tag_owed, set for what an owed tag looked like then: an alive ACTIVE row
// whose task is still live (only a confirm owing the tag left one so).
// Version 9 could find a row only by owner, prefix and path: its metadata and tags were
// not searchable, nothing recorded an expiry, and job_run knew no 'prune'. Version 10 adds
// file_upload.expires_at (NULL for the rows it had), file_attr filled from each row's
// object_options, the indexes on expires_at and created_at, and job 'prune' (SQLite cannot
// change a CHECK in place: job_run is rebuilt with its rows and ids).
// Version 10 had no outbox: cleanup ran only through sweep, and nothing told anyone else of
// an upload. Version 11 adds cleanup_task.sent_at and message_id (NULL: no task of a
// version-10 ledger was ever sent), outbox_event with its index and triggers (no event is
// written until ledger_meta 'event_types' names one), and jobs 'relay' and 'consume'
// (job_run rebuilt again).
// Version 11 wrote three indexes with a random key per file and kept every task in
// cleanup_task_due: file_upload_alive_digest held every alive row a second time beside the
// I4 index on (owner, run_prefix, sha256), and the ended tasks (nearly all) stayed in the due
// index. Version 12 keys that I4 index (owner, sha256, run_prefix) (the same uniqueness; the
// de-dup lookup of the rows it holds), keeps in file_upload_alive_other_digest only the alive
// rows it leaves out ('none'-scope and sharing rows), and makes cleanup_task_due partial on the
// live statuses. No row changes.
// std::to_array deduces the count from the initializers, so a version bump without its
// step (or a step too many) is a compile error below, never an empty migration at run time.
constexpr auto k_steps = std::to_array<std::string_view>({
    R"sql(
CREATE TABLE job_run (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  job         TEXT    NOT NULL CHECK (job IN ('sweep', 'repair', 'reconcile')),
  worker_id   TEXT    NOT NULL,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  outcome     TEXT    NOT NULL CHECK (outcome IN ('ok', 'failed')),
  counts      TEXT    NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX job_run_latest ON job_run (job, started_at);
)sql",
    R"sql(
ALTER TABLE cleanup_task ADD COLUMN
  verify_pass    INTEGER NOT NULL DEFAULT 0 CHECK (verify_pass IN (0, 1, 2));
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN
  relative_path       TEXT    NOT NULL DEFAULT '';
ALTER TABLE file_upload ADD COLUMN
  run_prefix          TEXT    NOT NULL DEFAULT '';
ALTER TABLE file_upload ADD COLUMN
  dedup_scope         TEXT    NOT NULL DEFAULT 'owner' CHECK (dedup_scope IN ('owner', 'prefix', 'none'));
UPDATE file_upload SET relative_path = original_name;
DROP INDEX file_upload_alive_digest;
CREATE UNIQUE INDEX file_upload_alive_owner_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0 AND dedup_scope = 'owner';
CREATE UNIQUE INDEX file_upload_alive_prefix_digest
  ON file_upload (owner_id, run_prefix, sha256) WHERE is_deleted = 0 AND dedup_scope <> 'none';
CREATE INDEX file_upload_path
  ON file_upload (owner_id, run_prefix, relative_path);
)sql",
    R"sql(
DROP INDEX file_upload_owner_alive;
CREATE INDEX file_upload_alive_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0;
CREATE TABLE owner_usage (
  owner_id     TEXT    PRIMARY KEY,
  alive_files  INTEGER NOT NULL CHECK (alive_files >= 0)
) STRICT;
INSERT INTO owner_usage (owner_id, alive_files)
  SELECT owner_id, count(*) FROM file_upload WHERE is_deleted = 0 GROUP BY owner_id;
CREATE TRIGGER file_upload_usage_insert
  AFTER INSERT ON file_upload WHEN NEW.is_deleted = 0
BEGIN
  INSERT INTO owner_usage (owner_id, alive_files) VALUES (NEW.owner_id, 1)
    ON CONFLICT (owner_id) DO UPDATE SET alive_files = alive_files + 1;
END;
CREATE TRIGGER file_upload_usage_delete
  AFTER UPDATE OF is_deleted ON file_upload WHEN OLD.is_deleted = 0 AND NEW.is_deleted = 1
BEGIN
  UPDATE owner_usage SET alive_files = alive_files - 1 WHERE owner_id = OLD.owner_id;
END;
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN
  holder              TEXT;
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN
  content_type        TEXT;
ALTER TABLE file_upload ADD COLUMN
  object_options      TEXT;
ALTER TABLE file_upload ADD COLUMN
  stat_dev            INTEGER;
ALTER TABLE file_upload ADD COLUMN
  stat_ino            INTEGER;
ALTER TABLE file_upload ADD COLUMN
  stat_mtime_ns       INTEGER;
ALTER TABLE file_upload ADD COLUMN
  stat_ctime_ns       INTEGER;
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN
  content_of          INTEGER REFERENCES file_upload (id);
ALTER TABLE file_upload ADD COLUMN
  content_key         TEXT;
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
ALTER TABLE cleanup_task ADD COLUMN
  tag_owed       INTEGER NOT NULL DEFAULT 0 CHECK (tag_owed IN (0, 1));
UPDATE cleanup_task SET tag_owed = 1
  WHERE status IN ('PENDING', 'RETRY', 'PROCESSING')
    AND record_id IN (SELECT id FROM file_upload WHERE upload_status = 'ACTIVE' AND is_deleted = 0);
)sql",
    R"sql(
ALTER TABLE file_upload ADD COLUMN
  expires_at          INTEGER;
CREATE INDEX file_upload_expiry
  ON file_upload (expires_at) WHERE expires_at IS NOT NULL AND is_deleted = 0;
CREATE INDEX file_upload_created
  ON file_upload (created_at);
CREATE TABLE file_attr (
  record_id  INTEGER NOT NULL REFERENCES file_upload (id),
  kind       TEXT    NOT NULL CHECK (kind IN ('meta', 'tag')),
  name       TEXT    NOT NULL,
  value      TEXT    NOT NULL,
  PRIMARY KEY (kind, name, value, record_id)
) STRICT, WITHOUT ROWID;
INSERT INTO file_attr (record_id, kind, name, value)
  SELECT f.id, 'meta', j.key, j.value FROM file_upload f, json_each(NULLIF(f.object_options, ''), '$.metadata') j;
INSERT INTO file_attr (record_id, kind, name, value)
  SELECT f.id, 'tag', j.key, j.value FROM file_upload f, json_each(NULLIF(f.object_options, ''), '$.tags') j;
DROP INDEX job_run_latest;
ALTER TABLE job_run RENAME TO job_run_v9;
CREATE TABLE job_run (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  job         TEXT    NOT NULL CHECK (job IN ('sweep', 'repair', 'reconcile', 'prune')),
  worker_id   TEXT    NOT NULL,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  outcome     TEXT    NOT NULL CHECK (outcome IN ('ok', 'failed')),
  counts      TEXT    NOT NULL DEFAULT '{}'
) STRICT;
INSERT INTO job_run (id, job, worker_id, started_at, finished_at, outcome, counts)
  SELECT id, job, worker_id, started_at, finished_at, outcome, counts FROM job_run_v9;
DROP TABLE job_run_v9;
CREATE INDEX job_run_latest ON job_run (job, started_at);
)sql",
    R"sql(
ALTER TABLE cleanup_task ADD COLUMN
  sent_at        INTEGER;
ALTER TABLE cleanup_task ADD COLUMN
  message_id     TEXT;
CREATE TABLE outbox_event (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  event_type  TEXT    NOT NULL CHECK (event_type IN ('file.active', 'file.deleted', 'file.failed')),
  record_id   INTEGER NOT NULL REFERENCES file_upload (id),
  occurred_at INTEGER NOT NULL,
  sent_at     INTEGER,
  message_id  TEXT
) STRICT;
CREATE INDEX outbox_event_unsent ON outbox_event (id) WHERE sent_at IS NULL;
CREATE TRIGGER file_upload_event_insert
  AFTER INSERT ON file_upload
  WHEN NEW.upload_status = 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.active,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.active', NEW.id, NEW.updated_at);
END;
CREATE TRIGGER file_upload_event_active
  AFTER UPDATE OF upload_status ON file_upload
  WHEN NEW.upload_status = 'ACTIVE' AND OLD.upload_status <> 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.active,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.active', NEW.id, NEW.updated_at);
END;
CREATE TRIGGER file_upload_event_failed
  AFTER UPDATE OF upload_status ON file_upload
  WHEN NEW.upload_status = 'UPLOAD_FAILED' AND OLD.upload_status <> 'UPLOAD_FAILED'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.failed,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.failed', NEW.id, NEW.updated_at);
END;
CREATE TRIGGER file_upload_event_deleted
  AFTER UPDATE OF is_deleted ON file_upload
  WHEN OLD.is_deleted = 0 AND NEW.is_deleted = 1
   AND OLD.upload_status = 'ACTIVE' AND NEW.upload_status = 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.deleted,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.deleted', NEW.id, NEW.updated_at);
END;
DROP INDEX job_run_latest;
ALTER TABLE job_run RENAME TO job_run_v10;
CREATE TABLE job_run (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  job         TEXT    NOT NULL CHECK (job IN ('sweep', 'repair', 'reconcile', 'prune', 'relay', 'consume')),
  worker_id   TEXT    NOT NULL,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  outcome     TEXT    NOT NULL CHECK (outcome IN ('ok', 'failed')),
  counts      TEXT    NOT NULL DEFAULT '{}'
) STRICT;
INSERT INTO job_run (id, job, worker_id, started_at, finished_at, outcome, counts)
  SELECT id, job, worker_id, started_at, finished_at, outcome, counts FROM job_run_v10;
DROP TABLE job_run_v10;
CREATE INDEX job_run_latest ON job_run (job, started_at);
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
)sql",
});
static_assert(k_steps.size() == static_cast<size_t>(k_schema_version - k_oldest_schema_version),
              "every schema version after the oldest needs exactly one migration step in k_steps");
} // namespace

void migrate(Db &db, int from) {
  if (from < k_oldest_schema_version || from > k_schema_version)
    throw LodgeError(Errc::ledger_unusable, db.path() + ": ledger schema version " + std::to_string(from) +
                                                " cannot be migrated (this lodge reads versions " +
                                                std::to_string(k_oldest_schema_version) + " to " +
                                                std::to_string(k_schema_version) + ")");
  for (int v = from; v < k_schema_version; ++v)
    db.exec(k_steps.at(static_cast<size_t>(v - k_oldest_schema_version)));
  db.exec("PRAGMA user_version = " + std::to_string(k_schema_version));
}

} // namespace lodge::ledger
