// The SQLite driver: one sql::Conn over today's Db/Stmt (ledger/sqlite.hpp). Everything
// SQLite-only lives here: the checks on the file before SQLite opens it (network
// filesystems, symbolic links, permissions), read-only and immutable opening, WAL with
// synchronous=FULL, PRAGMA user_version with schema.sql and the migrations, and the
// file_upload sequence in sqlite_sequence.
#include "drivers.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <lodge/crypto/random.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/ledger/sqlite.hpp>
#include <lodge/util/fs.hpp>
#include <lodge/util/log.hpp>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace lodge::ledger {

void refuse_network_fs(const std::string &path, unsigned long f_type, bool force) {
  if (force) return;
  if (auto name = util::network_fs_name(f_type))
    throw LodgeError(
        Errc::ledger_on_network_fs,
        path + ": the ledger is on a network filesystem (" + std::string(*name) +
            "); SQLite locking is unsafe there. Put it on a local disk, or pass --force-network-fs");
}

namespace {

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
  const auto &path = o.location;
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec)
      throw LodgeError(Errc::ledger_unusable,
                       path + ": cannot create directory " + dir.string() + ": " + ec.message());
  }
  struct statfs sf {};
  if (::statfs(dir.c_str(), &sf) == 0)
    refuse_network_fs(path, static_cast<unsigned long>(sf.f_type), o.force_network_fs);
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
  if (::lstat((o.location + "-shm").c_str(), &st) == 0) return false;
  std::filesystem::path p(o.location);
  std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  return ::access(dir.c_str(), W_OK) != 0;
}

LodgeError not_found(const std::string &path, const std::string &what) {
  return LodgeError(Errc::ledger_not_found, path + ": " + what +
                                                ". Is there a ledger at that path? Run `lodge init --db " +
                                                path + "` to create one");
}

// The statements a connection prepared, kept by their SQL text for the next use: the hot
// path runs the same dozen statements for every file, and compiling them was a tenth of
// its cost. A statement in use is out of the cache; a second use of the same text meanwhile
// (a nested query) prepares its own, and both are kept when they come back.
class StmtCache {
public:
  StmtHandle take(const std::string &sql) {
    auto it = m_free.find(sql);
    if (it == m_free.end() || it->second.empty()) return nullptr;
    auto h = std::move(it->second.back());
    it->second.pop_back();
    return h;
  }
  void give(const std::string &sql, StmtHandle h) {
    auto &v = m_free[sql];
    if (v.size() < k_per_text) v.push_back(std::move(h));
  }

private:
  static constexpr size_t k_per_text = 4;
  std::unordered_map<std::string, std::vector<StmtHandle>> m_free;
};

class SqliteStmt final : public sql::StmtImpl {
public:
  SqliteStmt(Db &db, StmtCache &cache, std::string sql, StmtHandle cached)
      : m_cache(&cache), m_sql(std::move(sql)),
        m_st(cached ? Stmt(db, std::move(cached)) : Stmt(db, m_sql, true)) {}
  SqliteStmt(const SqliteStmt &) = delete;
  SqliteStmt &operator=(const SqliteStmt &) = delete;
  ~SqliteStmt() override { m_cache->give(m_sql, m_st.release()); }
  void bind_int(int i, int64_t v) override { m_st.bind(i, v); }
  void bind_text(int i, std::string_view v) override { m_st.bind(i, v); }
  void bind_null(int i) override { m_st.bind_null(i); }
  bool step() override { return m_st.step(); }
  int64_t exec() override { return m_st.exec(); }
  void reset() override { m_st.reset(); }
  [[nodiscard]] bool is_null(int col) const override { return m_st.is_null(col); }
  [[nodiscard]] int64_t col_int(int col) const override { return m_st.col_int(col); }
  [[nodiscard]] std::string col_text(int col) const override { return m_st.col_text(col); }

private:
  StmtCache *m_cache;
  std::string m_sql;
  Stmt m_st;
};

class SqliteConn final : public sql::Conn {
public:
  explicit SqliteConn(const OpenOptions &opts);
  // Opened read-only as the file is, for `lodge doctor`: no schema check, no migration,
  // nothing set up, so a ledger too new or too old for this lodge can still be inspected.
  struct InspectOnly {};
  SqliteConn(const std::string &path, int64_t busy_timeout_ms, InspectOnly /*tag*/)
      : m_db(path, busy_timeout_ms, true), m_clock(&util::system_clock()), m_create(false) {}

  [[nodiscard]] sql::Dialect dialect() const override { return sql::Dialect::sqlite; }
  [[nodiscard]] const std::string &display_name() const override { return m_db.path(); }
  [[nodiscard]] std::unique_ptr<sql::StmtImpl> prepare(std::string_view sql) override {
    std::string text(sql);
    auto cached = m_cache.take(text);
    return std::make_unique<SqliteStmt>(m_db, m_cache, std::move(text), std::move(cached));
  }
  // BEGIN IMMEDIATE takes the write lock at once (waiting up to the busy timeout): every
  // writer is serialized, so a transaction's reads stay true until it commits.
  void begin_write() override { m_db.exec("BEGIN IMMEDIATE"); }
  void begin_read() override { m_db.exec("BEGIN DEFERRED"); }
  void commit() override { m_db.exec("COMMIT"); }
  void rollback() noexcept override { sqlite3_exec(m_db.raw(), "ROLLBACK", nullptr, nullptr, nullptr); }
  void exec_plain(std::string_view sql) override { m_db.exec(sql); }
  [[nodiscard]] bool in_transaction() const override { return sqlite3_get_autocommit(m_db.raw()) == 0; }
  void lock_key(std::string_view /*key*/) override {}
  [[nodiscard]] const char *for_update() const override { return ""; }
  [[nodiscard]] const char *skip_locked() const override { return ""; }
  [[nodiscard]] int64_t max_record_id() override;
  void raise_record_id(int64_t id) override;
  [[nodiscard]] int schema_version() override;
  [[nodiscard]] sql::Health health() override;
  [[nodiscard]] std::string integrity_check() override { return m_db.query_text("PRAGMA quick_check"); }

private:
  void initialise_or_migrate();
  // A read-only connection: the ledger must be at exactly this lodge's version.
  void check_version_for_reading();

  Db m_db;
  StmtCache m_cache; // after m_db: its statements are finalized before the database closes
  const util::Clock *m_clock;
  bool m_create;
};

SqliteConn::SqliteConn(const OpenOptions &opts)
    : m_db((prepare_file(opts), opts.location), opts.lock_timeout_ms, opts.read_only, needs_immutable(opts)),
      m_clock(opts.clock), m_create(opts.create) {
  // The first statement is where SQLite notices a file that is not a database.
  try {
    m_db.exec("PRAGMA trusted_schema = OFF; PRAGMA foreign_keys = ON;");
    if (m_db.read_only()) {
      // Nothing to set up: a reader takes the ledger as it is, or says what to run.
      check_version_for_reading();
      return;
    }
    // Switching a new file to WAL needs it alone for a moment, and SQLite answers SQLITE_BUSY
    // there without its busy handler waiting: two `lodge init` at once would fail. So the
    // wait is here, as long as the lock timeout.
    std::string mode;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.lock_timeout_ms);
    for (int attempt = 1;; ++attempt) {
      try {
        mode = m_db.query_text("PRAGMA journal_mode = WAL");
        break;
      } catch (const LodgeError &e) {
        if (e.error().code != Errc::ledger_locked || std::chrono::steady_clock::now() >= until) throw;
        sql::conflict_backoff(attempt);
      }
    }
    if (mode != "wal")
      throw LodgeError(Errc::ledger_unusable,
                       opts.location + ": cannot switch the ledger to WAL mode (got " + mode + ")");
    // A reservation must be durable before its PUT starts.
    m_db.exec("PRAGMA synchronous = FULL");
    // A savepoint's undo pages (each group-committed request has one) in memory, not in a
    // temporary file: a write per page a reserve touches.
    m_db.exec("PRAGMA temp_store = MEMORY");
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

void SqliteConn::check_version_for_reading() {
  int version = schema_version();
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
}

void SqliteConn::initialise_or_migrate() {
  int version = schema_version();
  if (version > k_schema_version)
    throw LodgeError(Errc::ledger_too_new, m_db.path() + ": the ledger has schema version " +
                                               std::to_string(version) + " but this lodge knows up to " +
                                               std::to_string(k_schema_version) + "; upgrade lodge");
  if (version == k_schema_version) return;
  Transaction tx(m_db); // re-read under the write lock: another process may have won
  version = schema_version();
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

int SqliteConn::schema_version() {
  return static_cast<int>(m_db.query_int("PRAGMA user_version"));
}

int64_t SqliteConn::max_record_id() {
  return m_db.query_int("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'file_upload'), 0)");
}

void SqliteConn::raise_record_id(int64_t id) {
  // AUTOINCREMENT issues max(seq, largest rowid) + 1: raising seq skips every id up to `id`.
  if (id <= max_record_id()) return;
  Stmt up(m_db, "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'file_upload'");
  if (up.bind(1, id).exec() == 0) {
    Stmt ins(m_db, "INSERT INTO sqlite_sequence (name, seq) VALUES ('file_upload', ?1)");
    ins.bind(1, id).exec();
  }
}

sql::Health SqliteConn::health() {
  static constexpr const char *k_sync[] = {"OFF", "NORMAL", "FULL", "EXTRA"};
  auto sync = m_db.query_int("PRAGMA synchronous");
  return {{"path", m_db.path()},
          {"journal_mode", m_db.query_text("PRAGMA journal_mode")},
          {"synchronous", sync >= 0 && sync < 4 ? std::string(k_sync[sync]) : std::to_string(sync)}};
}

// A URL of another scheme (mysql://..., a misspelt postgres://) is no file name: SQLite would
// make a local ledger, and directories, named after it, any password in it included.
void refuse_url(const std::string &path) {
  auto scheme = path.find("://");
  if (scheme == std::string::npos || path.front() == '/' || path.front() == '.') return;
  throw LodgeError(Errc::config_invalid,
                   "the ledger location '" + util::log::redact(path) + "' is a URL of scheme '" +
                       path.substr(0, scheme) +
                       "': a ledger is a SQLite file path, a postgres:// URL or a libpq "
                       "keyword string (a file whose name holds '://' is written ./NAME)");
}

} // namespace

std::unique_ptr<sql::Conn> open_sqlite_to_inspect(const std::string &path, int64_t busy_timeout_ms) {
  refuse_url(path);
  return std::make_unique<SqliteConn>(path, busy_timeout_ms, SqliteConn::InspectOnly{});
}

std::unique_ptr<sql::Conn> open_sqlite(const OpenOptions &opts) {
  refuse_url(opts.location);
  // Only `lodge init` creates a ledger: a typo in --db must not make a fresh, empty one
  // (that status --check would call healthy).
  struct stat st {};
  if (!opts.create && ::lstat(opts.location.c_str(), &st) != 0 && errno == ENOENT)
    throw not_found(opts.location, "no ledger there");
  return std::make_unique<SqliteConn>(opts);
}

} // namespace lodge::ledger
