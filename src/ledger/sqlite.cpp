#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <lodge/ledger/sqlite.hpp>
#include <mutex>
#include <sqlite3.h>

namespace lodge::ledger {

void Sqlite3Closer::operator()(sqlite3 *db) const noexcept {
  sqlite3_close_v2(db);
}
void StmtFinalizer::operator()(sqlite3_stmt *s) const noexcept {
  sqlite3_finalize(s);
}

Error sqlite_error(sqlite3 *db, int rc, std::string_view what, std::string_view path) {
  int ext = db ? sqlite3_extended_errcode(db) : rc;
  if ((ext & 0xFF) != (rc & 0xFF)) ext = rc;
  std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  // "unable to open database file" alone hides the reason the OS gave (permission
  // denied, read-only filesystem, ...): SQLite keeps the errno of its last system call.
  int sys = db ? sqlite3_system_errno(db) : 0;
  switch (rc & 0xFF) {
  case SQLITE_CANTOPEN:
  case SQLITE_IOERR:
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_FULL:
    if (sys != 0) msg += " (" + std::string(std::strerror(sys)) + ")";
    break;
  default:
    break;
  }
  ErrorDetails d;
  d.sqlite_code = ext;
  Errc code = Errc::internal;
  switch (rc & 0xFF) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    code = Errc::ledger_locked;
    msg = "ledger is locked by another process (waited past the busy timeout): " + msg;
    break;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
  case SQLITE_CANTOPEN:
  case SQLITE_PERM:
  case SQLITE_READONLY:
  case SQLITE_IOERR:
  case SQLITE_FULL:
  case SQLITE_AUTH:
    code = Errc::ledger_unusable;
    break;
  default:
    break;
  }
  return Error(code, std::string(path) + ": " + std::string(what) + ": " + msg, d);
}

Stmt::Stmt(Db &db, std::string_view sql, bool persistent) : m_db(&db) {
  sqlite3_stmt *raw = nullptr;
  int rc = sqlite3_prepare_v3(db.raw(), sql.data(), static_cast<int>(sql.size()),
                              persistent ? SQLITE_PREPARE_PERSISTENT : 0, &raw, nullptr);
  m_stmt.reset(raw);
  if (rc != SQLITE_OK) throw LodgeError(db.error(rc, "prepare"));
}

Stmt &Stmt::bind(int i, int64_t v) {
  int rc = sqlite3_bind_int64(m_stmt.get(), i, v);
  if (rc != SQLITE_OK) throw LodgeError(m_db->error(rc, "bind"));
  return *this;
}

Stmt &Stmt::bind(int i, std::string_view v) {
  int rc = sqlite3_bind_text64(m_stmt.get(), i, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) throw LodgeError(m_db->error(rc, "bind"));
  return *this;
}

Stmt &Stmt::bind(int i, const std::optional<std::string> &v) {
  return v ? bind(i, std::string_view(*v)) : bind_null(i);
}

Stmt &Stmt::bind(int i, const std::optional<int64_t> &v) {
  return v ? bind(i, *v) : bind_null(i);
}

Stmt &Stmt::bind_null(int i) {
  int rc = sqlite3_bind_null(m_stmt.get(), i);
  if (rc != SQLITE_OK) throw LodgeError(m_db->error(rc, "bind"));
  return *this;
}

bool Stmt::step() {
  int rc = sqlite3_step(m_stmt.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw LodgeError(m_db->error(rc, "step"));
}

int Stmt::exec() {
  while (step()) {
  }
  return sqlite3_changes(m_db->raw());
}

void Stmt::reset() {
  sqlite3_reset(m_stmt.get());
  sqlite3_clear_bindings(m_stmt.get());
}

StmtHandle Stmt::release() {
  reset();
  return std::move(m_stmt);
}

bool Stmt::is_null(int i) const {
  return sqlite3_column_type(m_stmt.get(), i) == SQLITE_NULL;
}

int64_t Stmt::col_int(int i) const {
  return sqlite3_column_int64(m_stmt.get(), i);
}

std::string Stmt::col_text(int i) const {
  const auto *p = sqlite3_column_text(m_stmt.get(), i);
  int n = sqlite3_column_bytes(m_stmt.get(), i);
  return p ? std::string(reinterpret_cast<const char *>(p), static_cast<size_t>(n)) : std::string{};
}

std::optional<int64_t> Stmt::col_opt_int(int i) const {
  if (sqlite3_column_type(m_stmt.get(), i) == SQLITE_NULL) return std::nullopt;
  return col_int(i);
}

std::optional<std::string> Stmt::col_opt_text(int i) const {
  if (sqlite3_column_type(m_stmt.get(), i) == SQLITE_NULL) return std::nullopt;
  return col_text(i);
}

namespace {
// A file: URI naming path, every byte but unreserved ones and '/' percent-encoded.
std::string file_uri(const std::string &path, std::string_view query) {
  static constexpr char k_hex[] = "0123456789ABCDEF";
  std::string u = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      u.push_back(static_cast<char>(c));
    } else {
      u.push_back('%');
      u.push_back(k_hex[c >> 4]);
      u.push_back(k_hex[c & 15]);
    }
  }
  return u + "?" + std::string(query);
}
} // namespace

Db::Db(const std::string &path, int64_t busy_timeout_ms, bool read_only, bool immutable)
    : m_path(path), m_read_only(read_only || immutable) {
  // SQLite counts every allocation in process-wide statistics under one global mutex, which
  // the upload's connections then contend for; lodge never reads them. Set before SQLite
  // initializes (the first open); later it is refused, harmlessly.
  static std::once_flag no_memstatus;
  std::call_once(no_memstatus, [] { (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); });
  sqlite3 *raw = nullptr;
  int flags = (m_read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOFOLLOW |
              SQLITE_OPEN_NOMUTEX;
  std::string name = path;
  if (immutable) {
    flags |= SQLITE_OPEN_URI;
    name = file_uri(path, "immutable=1");
  }
  // sqlite3_open_v2 hands back a handle even on failure: own it before checking rc.
  int rc = sqlite3_open_v2(name.c_str(), &raw, flags, nullptr);
  m_db.reset(raw);
  if (rc != SQLITE_OK) {
    auto e = sqlite_error(raw, rc, "cannot open ledger", path);
    e.code = Errc::ledger_unusable;
    throw LodgeError(e);
  }
  sqlite3_extended_result_codes(raw, 1);
  // SQLite takes an int: a longer timeout (the configuration refuses one) must not wrap
  // around to a negative "never wait".
  sqlite3_busy_timeout(raw, static_cast<int>(std::clamp<int64_t>(busy_timeout_ms, 0, INT_MAX)));
}

Error Db::error(int rc, std::string_view what) const {
  return sqlite_error(m_db.get(), rc, what, m_path);
}

void Db::exec(std::string_view sql) {
  std::string s(sql);
  char *err = nullptr;
  int rc = sqlite3_exec(m_db.get(), s.c_str(), nullptr, nullptr, &err);
  if (err) sqlite3_free(err);
  if (rc != SQLITE_OK) throw LodgeError(error(rc, "exec"));
}

int64_t Db::query_int(std::string_view sql) {
  Stmt st(*this, sql);
  return st.step() ? st.col_int(0) : 0;
}

std::string Db::query_text(std::string_view sql) {
  Stmt st(*this, sql);
  return st.step() ? st.col_text(0) : std::string{};
}

int64_t Db::last_insert_rowid() const {
  return sqlite3_last_insert_rowid(m_db.get());
}

Transaction::Transaction(Db &db) : m_db(db) {
  m_db.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (!m_done) sqlite3_exec(m_db.raw(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  m_db.exec("COMMIT");
  m_done = true;
}

ReadTransaction::ReadTransaction(Db &db) : m_db(db) {
  m_db.exec("BEGIN DEFERRED");
}

ReadTransaction::~ReadTransaction() {
  sqlite3_exec(m_db.raw(), "COMMIT", nullptr, nullptr, nullptr);
}

} // namespace lodge::ledger
