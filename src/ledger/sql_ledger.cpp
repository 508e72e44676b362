#include "sql_ledger.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <lodge/crypto/random.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace lodge::ledger {
namespace {

// Filesystems where SQLite's locking and WAL cannot be trusted.
bool is_network_fs(const std::string &dir, std::string &name) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
  case 0x6969:
    name = "NFS";
    return true;
  case 0x517B:
    name = "SMB";
    return true;
  case 0xFF534D42:
    name = "CIFS";
    return true;
  case 0xFE534D42:
    name = "SMB2";
    return true;
  case 0x564C:
    name = "NCP";
    return true;
  case 0x65735546:
    name = "FUSE";
    return true;
  case 0x01021997:
    name = "9P";
    return true;
  case 0x6B414653:
    name = "AFS";
    return true;
  case 0x47504653:
    name = "GPFS";
    return true;
  case 0x00C36400:
    name = "CEPH";
    return true;
  default:
    return false;
  }
}

// Checks that the existing ledger file may be opened as SQLite will, so a refusal says
// what the OS says ("Permission denied", "Read-only file system") instead of SQLite's bare
// "unable to open database file". faccessat, not open(2) + close(2): closing any
// descriptor of the file would drop the POSIX locks this process's other SQLite
// connections hold on it (and with them, the WAL's protection against a stale writer).
void check_openable(const std::string &path, bool read_only) {
  if (::faccessat(AT_FDCWD, path.c_str(), read_only ? R_OK : R_OK | W_OK, AT_EACCESS) == 0) return;
  int e = errno;
  std::string hint;
  if (!read_only && (e == EACCES || e == EPERM || e == EROFS))
    hint = " (commands that only read it, such as status, list and tasks, open it read-only)";
  throw LodgeError(Errc::ledger_unusable, path + ": cannot open the ledger " +
                                              (read_only ? "for reading" : "for writing") + ": " +
                                              std::strerror(e) + hint);
}

// Makes sure path names a regular file we may open, creating it 0600 when missing.
// Refuses symlinks outright: a ledger reached through a link is a way to make lodge
// write somewhere it was not told to.
void prepare_file(const OpenOptions &o) {
  namespace fs = std::filesystem;
  const auto &path = o.path;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      throw LodgeError(Errc::ledger_unusable,
                       path + ": cannot create directory " + dir.string() + ": " + ec.message());
  }
  std::string fsname;
  if (!o.force_network_fs && is_network_fs(dir.string(), fsname))
    throw LodgeError(
        Errc::ledger_on_network_fs,
        path + ": the ledger is on a network filesystem (" + fsname +
            "); SQLite locking is unsafe there. Put it on a local disk, or pass --force-network-fs");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      throw LodgeError(Errc::ledger_unusable,
                       path + ": the ledger path is a symbolic link; refusing to follow it");
    if (!S_ISREG(st.st_mode)) throw LodgeError(Errc::ledger_unusable, path + ": not a regular file");
    check_openable(path, o.read_only);
    // A writer in WAL mode creates PATH-wal and PATH-shm next to the ledger; without
    // them SQLite only says "attempt to write a readonly database".
    struct stat aux {};
    bool have_aux =
        ::lstat((path + "-wal").c_str(), &aux) == 0 && ::lstat((path + "-shm").c_str(), &aux) == 0;
    if (!o.read_only && !have_aux && ::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
      int e = errno;
      throw LodgeError(
          Errc::ledger_unusable,
          path + ": cannot write in its directory " + dir.string() + ": " + std::strerror(e) +
              " (the ledger's -wal and -shm files are made there; commands that only read it, such"
              " as status, list and tasks, open it read-only)");
    }
    return;
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    throw LodgeError(Errc::ledger_unusable, path + ": cannot create ledger: " + std::strerror(errno));
  if (fd >= 0) {
    ::fchmod(fd, 0600); // whatever the umask was
    ::close(fd);
  }
}

// A reader of a WAL ledger needs its -shm file, or must be able to create it. When it
// does not exist and this user cannot make it (a read-only directory or mount), no
// writer without more rights can be in the ledger either (a writer creates -shm first),
// so it is read as immutable: the main file as it stands, without locks. (On a
// read-only mount nobody writes; a privileged writer starting meanwhile could make this
// one read fail, never the ledger.)
bool needs_immutable(const OpenOptions &o) {
  if (!o.read_only) return false;
  struct stat st {};
  if (::lstat((o.path + "-shm").c_str(), &st) == 0) return false;
  std::filesystem::path p(o.path);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  return ::access(dir.c_str(), W_OK) != 0;
}

LodgeError not_found(const std::string &path, const std::string &what) {
  return LodgeError(Errc::ledger_not_found, path + ": " + what +
                                                ". Is there a ledger at that path? Run `lodge init --db " +
                                                path + "` to create one");
}

} // namespace

SqliteLedger::SqliteLedger(const OpenOptions &opts)
    : m_db((prepare_file(opts), opts.path), opts.busy_timeout_ms, opts.read_only, needs_immutable(opts)),
      m_clock(opts.clock), m_create(opts.create) {
  // The first statement is where SQLite notices a file that is not a database.
  try {
    m_db.exec("PRAGMA trusted_schema = OFF; PRAGMA foreign_keys = ON;");
    if (m_db.read_only()) {
      // Nothing to set up: a reader takes the ledger as it is, or says what to run.
      check_version_for_reading();
      return;
    }
    auto mode = m_db.query_text("PRAGMA journal_mode = WAL");
    if (mode != "wal")
      throw LodgeError(Errc::ledger_unusable,
                       opts.path + ": cannot switch the ledger to WAL mode (got " + mode + ")");
    // A reservation must be durable before its PUT starts.
    m_db.exec("PRAGMA synchronous = FULL");
    initialise_or_migrate();
  } catch (const LodgeError &e) {
    if (e.error().code == Errc::internal) {
      Error err = e.error();
      err.code = Errc::ledger_unusable;
      throw LodgeError(err);
    }
    throw;
  }
}

void SqliteLedger::check_version_for_reading() {
  int version = static_cast<int>(m_db.query_int("PRAGMA user_version"));
  if (version > k_schema_version)
    throw LodgeError(Errc::ledger_too_new, m_db.path() + ": the ledger has schema version " +
                                               std::to_string(version) + " but this lodge knows up to " +
                                               std::to_string(k_schema_version) + "; upgrade lodge");
  if (version == 0) {
    if (m_db.query_int("SELECT count(*) FROM sqlite_schema") != 0)
      throw LodgeError(Errc::ledger_unusable, m_db.path() + ": a SQLite database, but not a lodge ledger");
    throw not_found(m_db.path(), "an empty file, not a ledger");
  }
  if (version < k_schema_version)
    throw LodgeError(Errc::ledger_unusable,
                     m_db.path() + ": the ledger has schema version " + std::to_string(version) +
                         ", older than this lodge's " + std::to_string(k_schema_version) +
                         "; this command only reads it and does not migrate: run `lodge init` first");
  m_uuid = m_db.query_text("SELECT value FROM ledger_meta WHERE key = 'uuid'");
  if (m_uuid.empty()) throw LodgeError(Errc::ledger_unusable, m_db.path() + ": ledger has no uuid");
}

void SqliteLedger::initialise_or_migrate() {
  int version = static_cast<int>(m_db.query_int("PRAGMA user_version"));
  if (version > k_schema_version)
    throw LodgeError(Errc::ledger_too_new, m_db.path() + ": the ledger has schema version " +
                                               std::to_string(version) + " but this lodge knows up to " +
                                               std::to_string(k_schema_version) + "; upgrade lodge");
  if (version != k_schema_version) {
    Transaction tx(m_db); // re-read under the write lock: another process may have won
    version = static_cast<int>(m_db.query_int("PRAGMA user_version"));
    if (version == 0) {
      if (m_db.query_int("SELECT count(*) FROM sqlite_schema") != 0)
        throw LodgeError(Errc::ledger_unusable, m_db.path() + ": a SQLite database, but not a lodge ledger");
      if (!m_create) throw not_found(m_db.path(), "an empty file, not a ledger");
      m_db.exec(k_schema_sql);
      Stmt ins(m_db, "INSERT INTO ledger_meta (key, value) VALUES ('uuid', ?1), ('created_at', ?2)");
      ins.bind(1, crypto::random_uuid()).bind(2, std::to_string(m_clock->now_ms())).exec();
      m_db.exec("PRAGMA user_version = " + std::to_string(k_schema_version));
    } else if (version < k_schema_version) {
      migrate(m_db, version);
    }
    tx.commit();
  }
  m_uuid = m_db.query_text("SELECT value FROM ledger_meta WHERE key = 'uuid'");
  if (m_uuid.empty()) throw LodgeError(Errc::ledger_unusable, m_db.path() + ": ledger has no uuid");
}

int SqliteLedger::schema_version() {
  return static_cast<int>(m_db.query_int("PRAGMA user_version"));
}

StatusReport SqliteLedger::status(int64_t now) {
  StatusReport r;
  ReadTransaction rt(m_db);
  r.now = now;
  r.ledger_uuid = m_uuid;
  r.schema_version = schema_version();
  r.journal_mode = m_db.query_text("PRAGMA journal_mode");
  static constexpr const char *k_sync[] = {"OFF", "NORMAL", "FULL", "EXTRA"};
  auto sync = m_db.query_int("PRAGMA synchronous");
  r.synchronous = sync >= 0 && sync < 4 ? k_sync[sync] : std::to_string(sync);
  r.ledger_created_at =
      util::parse_int(m_db.query_text("SELECT value FROM ledger_meta WHERE key = 'created_at'")).value_or(0);
  r.diverged = divergence();
  {
    Stmt st(m_db, "SELECT upload_status, is_deleted, count(*) FROM file_upload GROUP BY 1, 2");
    while (st.step()) {
      auto s = st.col_text(0);
      bool del = st.col_int(1) != 0;
      int64_t n = st.col_int(2);
      if (s == k_upload_failed)
        r.files_failed += n;
      else if (del)
        r.files_deleted += n;
      else if (s == k_active)
        r.files_active += n;
      else if (s == k_uploading)
        r.files_uploading += n;
    }
  }
  for (const char *s : {"PENDING", "PROCESSING", "RETRY", "SUCCESS", "FAILED", "IGNORED"})
    r.tasks[s] = 0;
  {
    Stmt st(m_db, "SELECT status, count(*) FROM cleanup_task GROUP BY 1");
    while (st.step())
      r.tasks[st.col_text(0)] = st.col_int(1);
  }
  r.dead_letters = r.tasks["FAILED"];
  {
    Stmt st(m_db, "SELECT count(*) FROM file_upload "
                  "WHERE upload_status = 'UPLOADING' AND is_deleted = 0 AND upload_deadline_at < ?1");
    st.bind(1, now).step();
    r.overdue_uploading = st.col_int(0);
  }
  {
    Stmt st(m_db,
            "SELECT min(created_at) FROM file_upload WHERE upload_status = 'UPLOADING' AND is_deleted = 0");
    st.step();
    if (auto oldest = st.col_opt_int(0)) r.oldest_uploading_age_ms = now - *oldest;
  }
  {
    Stmt st(m_db, "SELECT count(*) FROM cleanup_task WHERE status = 'PROCESSING' AND lease_until < ?1");
    st.bind(1, now).step();
    r.expired_leases = st.col_int(0);
  }
  {
    Stmt st(m_db,
            "SELECT count(*) FROM cleanup_task WHERE status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1");
    st.bind(1, now).step();
    r.tasks_due = st.col_int(0);
  }
  for (const char *job : {"sweep", "repair", "reconcile"}) {
    Stmt st(m_db, "SELECT worker_id, started_at, finished_at, outcome, counts FROM job_run "
                  "WHERE job = ?1 ORDER BY started_at DESC, id DESC LIMIT 1");
    st.bind(1, std::string_view(job));
    if (st.step())
      r.last_runs[job] =
          JobRun{job, st.col_text(0), st.col_int(1), st.col_int(2), st.col_text(3), st.col_text(4)};
    else
      r.last_runs[job] = std::nullopt;
  }
  return r;
}

void SqliteLedger::record_job_run(const JobRun &run) {
  Transaction tx(m_db);
  Stmt st(m_db, "INSERT INTO job_run (job, worker_id, started_at, finished_at, outcome, counts) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  st.bind(1, run.job)
      .bind(2, run.worker_id)
      .bind(3, run.started_at)
      .bind(4, run.finished_at)
      .bind(5, run.outcome)
      .bind(6, run.counts_json)
      .exec();
  tx.commit();
}

std::optional<StoreBinding> SqliteLedger::store_binding() {
  std::map<std::string, std::string> kv;
  {
    Stmt st(m_db, "SELECT key, value FROM ledger_meta WHERE key LIKE 'binding.%'");
    while (st.step())
      kv[st.col_text(0)] = st.col_text(1);
  }
  if (!kv.contains("binding.scheme")) return std::nullopt;
  return StoreBinding{kv["binding.scheme"], kv["binding.endpoint"], kv["binding.location"],
                      kv["binding.root"]};
}

BindResult SqliteLedger::bind_store(const StoreBinding &b, Rebind rebind) {
  Transaction tx(m_db); // read under the write lock: two first uses race to record it
  BindResult r;
  r.previous = store_binding();
  if (r.previous && (rebind == Rebind::no || *r.previous == b)) return r;
  Stmt st(m_db,
          "INSERT INTO ledger_meta (key, value) VALUES ('binding.scheme', ?1), ('binding.endpoint', ?2),"
          " ('binding.location', ?3), ('binding.root', ?4)"
          " ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  st.bind(1, b.scheme).bind(2, b.endpoint).bind(3, b.location).bind(4, b.root).exec();
  tx.commit();
  r.written = true;
  return r;
}

std::unique_ptr<Ledger> open_sqlite_ledger(const OpenOptions &opts) {
  // Only `lodge init` creates a ledger: a typo in --db must not make a fresh, empty one
  // (that status --check would call healthy).
  struct stat st {};
  if (!opts.create && ::lstat(opts.path.c_str(), &st) != 0 && errno == ENOENT)
    throw not_found(opts.path, "no ledger there");
  return std::make_unique<SqliteLedger>(opts);
}

} // namespace lodge::ledger
