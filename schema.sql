-- lodge ledger schema (current version: see k_schema_version in ledger/schema.hpp).
-- Applied to a new, empty ledger in one transaction. Older ledgers are migrated by the
-- steps in src/ledger/migrations.cpp. Times are integers: ms since the Unix epoch, UTC.

-- Besides the ledger's uuid, schema facts, store binding and id blocks, the outbox's
-- settings: 'cleanup_via' ('tasks' or 'queue'; absent: tasks) and 'event_types' (the upload
-- event types recorded, comma-separated, e.g. 'file.active,file.failed'; absent or empty:
-- none), which the outbox_event triggers below read.
CREATE TABLE ledger_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;

CREATE TABLE file_upload (
  id                  INTEGER PRIMARY KEY AUTOINCREMENT,
  owner_id            TEXT    NOT NULL CHECK (length(owner_id) BETWEEN 1 AND 128),
  original_name       TEXT    NOT NULL,
  object_key          TEXT    NOT NULL UNIQUE,
  media_type          TEXT    NOT NULL,
  sha256              TEXT    NOT NULL CHECK (length(sha256) = 64),
  size                INTEGER NOT NULL CHECK (size >= 0),
  policy              TEXT    NOT NULL,
  upload_status       TEXT    NOT NULL
                      CHECK (upload_status IN ('UPLOADING', 'ACTIVE', 'UPLOAD_FAILED')),
  failure_reason      TEXT,
  is_deleted          INTEGER NOT NULL DEFAULT 0 CHECK (is_deleted IN (0, 1)),
  idempotency_key     TEXT,
  etag                TEXT,
  version_id          TEXT,
  multipart_upload_id TEXT,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  activated_at        INTEGER,
  deleted_at          INTEGER,
  upload_deadline_at  INTEGER NOT NULL,
  -- The file's path relative to the directory argument it was found under (or as given),
  -- each component sanitized; never absolute, never with a '..' segment. The object key
  -- ends with it. (Declared with a default only because ALTER TABLE ADD COLUMN needs one:
  -- every insert names it, and migrated rows take their original_name.)
  relative_path       TEXT    NOT NULL DEFAULT '',
  -- The run's --prefix ('' when none): keys are <root>/<owner>/[<run_prefix>/]<uuid>/<path>.
  run_prefix          TEXT    NOT NULL DEFAULT '',
  -- The de-dup scope the row was reserved under (the policy's "dedup"); see I4 below.
  dedup_scope         TEXT    NOT NULL DEFAULT 'owner' CHECK (dedup_scope IN ('owner', 'prefix', 'none')),
  -- Who sends an UPLOADING row's bytes: "boot=BOOT_ID pidns=INODE pid=PID start=TICKS
  -- host=NAME" (TICKS: the process's start time in clock ticks since boot, /proc/PID/stat
  -- field 22), so that a later run on the same kernel can prove that process gone and fail
  -- the row at once. NULL when not known (rows of older versions).
  holder              TEXT,
  -- The Content-Type the object was written with; NULL: media_type (rows of older versions).
  content_type        TEXT,
  -- What else the upload asked of the object (metadata, tags, storage class, encryption,
  -- Cache-Control) as canonical JSON (store::to_json); NULL when nothing.
  object_options      TEXT,
  -- The stat cache: the file as the upload opened it (st_dev, st_ino, mtime and ctime in
  -- ns; its size is `size`). A later upload of the same owner, prefix and relative path
  -- whose file still has all of them maps to this row without reading it. NULL: unknown.
  stat_dev            INTEGER,
  stat_ino            INTEGER,
  stat_mtime_ns       INTEGER,
  stat_ctime_ns       INTEGER,
  -- De-duplication saves storage, never a path: a file whose content is already stored (an
  -- alive ACTIVE row of the scope, at another path) gets a row of its own, ACTIVE at once, that
  -- shares that object. content_of is the row whose object it is (whose stamp the object
  -- carries; never itself a sharing row), content_key that object's key. Reads give the row's
  -- object as content_key when set; object_key stays the row's own unique name and is never
  -- written to the store. NULL on rows that wrote their own object.
  content_of          INTEGER REFERENCES file_upload (id),
  content_key         TEXT,
  -- When the row expires (upload --expire-after): `prune --expired` soft-deletes an alive
  -- ACTIVE row once this is past. NULL: never.
  expires_at          INTEGER,
  -- A failed upload never holds quota.
  CHECK (upload_status <> 'UPLOAD_FAILED' OR is_deleted = 1)
) STRICT;

-- I4 (scoped, ARCHITECTURE.md): at most one alive 'owner'-scope row that wrote its own object
-- per (owner, sha256), and at most one alive such row that is not 'none'-scope per (owner,
-- run_prefix, sha256); rows sharing an object are not counted. The reserve transaction
-- implements the rest of the rule (which alive rows make a request a duplicate).
-- The second one's key is (owner, sha256, run_prefix): unique on the same three columns, and
-- with the digest second it is also the de-dup lookup of every alive row that wrote its own
-- object and is not 'none'-scope, by (owner, sha256) whatever its prefix.
CREATE UNIQUE INDEX file_upload_alive_owner_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0 AND dedup_scope = 'owner' AND content_of IS NULL;
CREATE UNIQUE INDEX file_upload_alive_prefix_digest
  ON file_upload (owner_id, sha256, run_prefix)
  WHERE is_deleted = 0 AND dedup_scope <> 'none' AND content_of IS NULL;
-- I5 for shared objects: which alive rows still use an object key (sweep, reconcile).
CREATE INDEX file_upload_content_key
  ON file_upload (content_key) WHERE content_key IS NOT NULL;
-- Finding a file by its path: get/cat/url PATH, list --prefix.
CREATE INDEX file_upload_path
  ON file_upload (owner_id, run_prefix, relative_path);
CREATE UNIQUE INDEX file_upload_idempotency
  ON file_upload (owner_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- The repair scan: alive UPLOADING rows by deadline.
CREATE INDEX file_upload_overdue
  ON file_upload (upload_deadline_at) WHERE upload_status = 'UPLOADING' AND is_deleted = 0;
-- The rest of the de-dup lookup: the alive rows file_upload_alive_prefix_digest leaves out
-- ('none'-scope rows and rows sharing an object), so that the two hold every alive row once.
-- Most rows are in the unique index alone: one index with a random key less per file.
CREATE INDEX file_upload_alive_other_digest
  ON file_upload (owner_id, sha256) WHERE is_deleted = 0 AND (dedup_scope = 'none' OR content_of IS NOT NULL);
-- `prune --expired`: the alive rows with an expiry, by it.
CREATE INDEX file_upload_expiry
  ON file_upload (expires_at) WHERE expires_at IS NOT NULL AND is_deleted = 0;
-- `list --since/--until/--sort time`.
CREATE INDEX file_upload_created
  ON file_upload (created_at);

-- The search index of `list --metadata/--tag`: each row's metadata ('meta') and tags ('tag')
-- as reserve recorded them in object_options (which stays the row's record of what was
-- asked), one row per name, keyed for the lookup by (kind, name, value). Written with the
-- row, in reserve's transaction; never changed after (a row's options never change).
CREATE TABLE file_attr (
  record_id  INTEGER NOT NULL REFERENCES file_upload (id),
  kind       TEXT    NOT NULL CHECK (kind IN ('meta', 'tag')),
  name       TEXT    NOT NULL,
  value      TEXT    NOT NULL,
  PRIMARY KEY (kind, name, value, record_id)
) STRICT, WITHOUT ROWID;

-- The quota: an owner's alive rows, counted as they change (an insert alive, an alive row
-- deleted) by the triggers below, so reserve reads one row instead of counting the owner's
-- rows. Rows are never deleted; is_deleted goes back to 0 only when reserve resumes a
-- failed staged upload's row, and that transaction counts the row itself.
CREATE TABLE owner_usage (
  owner_id     TEXT    PRIMARY KEY,
  alive_files  INTEGER NOT NULL CHECK (alive_files >= 0)
) STRICT;
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

CREATE TABLE cleanup_task (
  id             INTEGER PRIMARY KEY AUTOINCREMENT,
  record_id      INTEGER NOT NULL REFERENCES file_upload (id),
  task_type      TEXT    NOT NULL CHECK (task_type IN ('DELETE_OBJECT')),
  object_key     TEXT    NOT NULL,
  status         TEXT    NOT NULL
                 CHECK (status IN ('PENDING', 'PROCESSING', 'RETRY', 'SUCCESS', 'FAILED', 'IGNORED')),
  next_retry_at  INTEGER NOT NULL,
  retry_count    INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
  max_retries    INTEGER NOT NULL CHECK (max_retries >= 0),
  lease_owner    TEXT,
  lease_until    INTEGER,
  lease_version  INTEGER NOT NULL DEFAULT 0 CHECK (lease_version >= 0),
  last_error     TEXT,
  created_at     INTEGER NOT NULL,
  updated_at     INTEGER NOT NULL,
  -- 0: the delete finishes the task. 1: the upload failed ambiguously or by its deadline, so
  -- a late PUT may still land: after the delete, one more pass is owed. 2: this is that pass.
  verify_pass    INTEGER NOT NULL DEFAULT 0 CHECK (verify_pass IN (0, 1, 2)),
  -- 1: the row is ACTIVE on a store that tags objects, and its object is still owed the
  -- committed tag (confirm recorded it; settle, or a sweep's tag, clears it). Recorded so
  -- that whoever finishes the task tags it, whatever that host's configuration says.
  tag_owed       INTEGER NOT NULL DEFAULT 0 CHECK (tag_owed IN (0, 1)),
  -- The outbox (cleanup_via 'queue'): the task row is the cleanup event. sent_at: when the
  -- relay recorded the broker's confirmation of its message; message_id: the broker's id
  -- for it. Every statement that makes a task PENDING sets both NULL (a new event, unsent);
  -- RETRY keeps them (the broker holds the delayed message); SUCCESS, IGNORED and FAILED
  -- keep them (history: FAILED with sent_at is a dead letter of the queue).
  sent_at        INTEGER,
  message_id     TEXT,
  UNIQUE (record_id, task_type)
) STRICT;

-- The live tasks by status and time (claim, the dry run's due tasks, the relay, status's due
-- and expired counts). An ended task (IGNORED, SUCCESS, FAILED: nearly every task) is not in
-- it. The condition is written as the queries write theirs (status IN ('PENDING', 'RETRY')
-- ... OR status = 'PROCESSING' ...): SQLite takes a partial index only for a query whose
-- terms name its condition, each arm of an OR on its own.
CREATE INDEX cleanup_task_due ON cleanup_task (status, next_retry_at)
  WHERE status IN ('PENDING', 'RETRY') OR status = 'PROCESSING';

-- The fencing token only ever increases.
CREATE TRIGGER cleanup_task_lease_monotonic
  BEFORE UPDATE OF lease_version ON cleanup_task
  WHEN NEW.lease_version < OLD.lease_version
BEGIN
  SELECT RAISE(ABORT, 'lease_version must not decrease');
END;

CREATE TABLE job_run (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  job         TEXT    NOT NULL CHECK (job IN ('sweep', 'repair', 'reconcile', 'prune', 'relay', 'consume')),
  worker_id   TEXT    NOT NULL,
  started_at  INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  outcome     TEXT    NOT NULL CHECK (outcome IN ('ok', 'failed')),
  counts      TEXT    NOT NULL DEFAULT '{}'
) STRICT;

CREATE INDEX job_run_latest ON job_run (job, started_at);

-- Upload events (file.active, file.deleted, file.failed) for whatever runs after an upload:
-- one row per transition of a row, written by the triggers below in the transaction that
-- made it (whichever code path: confirm, settle, share, delete, prune, expiry, repair, an
-- abandoned upload...), for the types ledger_meta 'event_types' names when it commits.
-- occurred_at: the row's updated_at then. The relay publishes the unsent ones (lowest id
-- first) and sets sent_at and message_id once the broker confirmed each.
CREATE TABLE outbox_event (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  event_type  TEXT    NOT NULL CHECK (event_type IN ('file.active', 'file.deleted', 'file.failed')),
  record_id   INTEGER NOT NULL REFERENCES file_upload (id),
  occurred_at INTEGER NOT NULL,
  sent_at     INTEGER,
  message_id  TEXT
) STRICT;
-- The relay's backlog: the few unsent events, by id.
CREATE INDEX outbox_event_unsent ON outbox_event (id) WHERE sent_at IS NULL;
-- A row inserted ACTIVE (a reserve sharing another row's object).
CREATE TRIGGER file_upload_event_insert
  AFTER INSERT ON file_upload
  WHEN NEW.upload_status = 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.active,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.active', NEW.id, NEW.updated_at);
END;
-- A row made ACTIVE (confirm).
CREATE TRIGGER file_upload_event_active
  AFTER UPDATE OF upload_status ON file_upload
  WHEN NEW.upload_status = 'ACTIVE' AND OLD.upload_status <> 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.active,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.active', NEW.id, NEW.updated_at);
END;
-- A row made UPLOAD_FAILED (its upload failed, repair, a sweep's decide, an abandoned upload).
CREATE TRIGGER file_upload_event_failed
  AFTER UPDATE OF upload_status ON file_upload
  WHEN NEW.upload_status = 'UPLOAD_FAILED' AND OLD.upload_status <> 'UPLOAD_FAILED'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.failed,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.failed', NEW.id, NEW.updated_at);
END;
-- An ACTIVE row deleted (delete, replace, prune, expiry, an object found missing).
CREATE TRIGGER file_upload_event_deleted
  AFTER UPDATE OF is_deleted ON file_upload
  WHEN OLD.is_deleted = 0 AND NEW.is_deleted = 1
   AND OLD.upload_status = 'ACTIVE' AND NEW.upload_status = 'ACTIVE'
   AND instr(',' || COALESCE((SELECT value FROM ledger_meta WHERE key = 'event_types'), '') || ',',
             ',file.deleted,') > 0
BEGIN
  INSERT INTO outbox_event (event_type, record_id, occurred_at) VALUES ('file.deleted', NEW.id, NEW.updated_at);
END;
