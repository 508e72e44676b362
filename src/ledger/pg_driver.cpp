// The PostgreSQL driver (sql::Conn over libpq): connects, keeps the schema (schema_pg.sql,
// its version in ledger_meta), prepares each SQL text once per connection and runs it with
// every parameter bound, bounds every wait for the server by ledger_timeout, and maps
// SQLSTATEs onto lodge's error codes.

#include "drivers.hpp"
#include "pg.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <functional>
#include <limits>
#include <lodge/crypto/random.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/units.hpp>
#include <poll.h>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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
constexpr std::array<std::string_view, 7> k_pg_steps{
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
)sql"};
static_assert(k_pg_steps.size() == static_cast<size_t>(k_schema_version - k_oldest_pg_schema_version),
              "every PostgreSQL schema version after the oldest needs exactly one step in k_pg_steps");

// libpq's messages span lines ("...failed: Connection refused\n\tIs the server running...");
// lodge prints one line per error: each run of white space becomes one space.
std::string trim(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

void ignore_notice(void * /*arg*/, const char * /*message*/) {}

using ConninfoHandle = std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption *)>;

// The value of `keyword` in a list of libpq's options ("" when it has none).
std::string option_value(const ConninfoHandle &opts, std::string_view keyword) {
  for (const PQconninfoOption *o = opts.get(); o && o->keyword; ++o)
    if (keyword == o->keyword) return o->val ? std::string(o->val) : std::string();
  return {};
}

std::string result_field(const PGresult *r, int field) {
  const char *v = r ? PQresultErrorField(r, field) : nullptr;
  return v ? std::string(v) : std::string();
}

class PgConn;

class PgStmt final : public sql::StmtImpl {
public:
  PgStmt(PgConn *conn, const std::string *name, int nparams)
      : m_conn(conn), m_name(name), m_values(static_cast<size_t>(nparams)),
        m_state(static_cast<size_t>(nparams), Param::unbound) {}
  void bind_int(int i, int64_t v) override { set(i, std::to_string(v), Param::value); }
  void bind_text(int i, std::string_view v) override;
  void bind_null(int i) override { set(i, std::string(), Param::null); }
  bool step() override;
  int64_t exec() override;
  void reset() override {
    m_result.reset();
    m_row = -1;
    m_rows = 0;
  }
  [[nodiscard]] bool is_null(int col) const override { return PQgetisnull(row_result(col), m_row, col) != 0; }
  [[nodiscard]] int64_t col_int(int col) const override;
  [[nodiscard]] std::string col_text(int col) const override {
    const PGresult *r = row_result(col);
    return {PQgetvalue(r, m_row, col), static_cast<size_t>(PQgetlength(r, m_row, col))};
  }

private:
  enum class Param { unbound, value, null };
  void set(int i, std::string v, Param p) {
    if (i < 1 || static_cast<size_t>(i) > m_values.size())
      throw LodgeError(Errc::internal, "SQL parameter ?" + std::to_string(i) +
                                           " out of range (the statement has " +
                                           std::to_string(m_values.size()) + ")");
    m_values[static_cast<size_t>(i - 1)] = std::move(v);
    m_state[static_cast<size_t>(i - 1)] = p;
  }
  [[nodiscard]] const PGresult *row_result(int col) const {
    if (!m_result || m_row < 0 || m_row >= m_rows || col < 0 || col >= PQnfields(m_result.get()))
      throw LodgeError(Errc::internal,
                       "SQL column " + std::to_string(col) + " read with no row or out of range");
    return m_result.get();
  }
  void run();

  PgConn *m_conn;
  const std::string *m_name;
  std::vector<std::string> m_values;
  std::vector<Param> m_state;
  PgResultHandle m_result;
  int m_row = -1;
  int m_rows = 0;
};

class PgConn final : public sql::Conn {
public:
  explicit PgConn(const PgOpen &o);
  [[nodiscard]] sql::Dialect dialect() const override { return sql::Dialect::postgres; }
  [[nodiscard]] const std::string &display_name() const override { return m_display; }
  [[nodiscard]] std::unique_ptr<sql::StmtImpl> prepare(std::string_view sql) override;
  void begin_write() override { simple("BEGIN ISOLATION LEVEL READ COMMITTED"); }
  void begin_read() override { simple("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); }
  void commit() override;
  void rollback() noexcept override;
  void exec_plain(std::string_view sql) override { simple(std::string(sql)); }
  [[nodiscard]] bool in_transaction() const override {
    auto s = m_conn ? PQtransactionStatus(m_conn.get()) : PQTRANS_UNKNOWN;
    return s == PQTRANS_INTRANS || s == PQTRANS_INERROR || s == PQTRANS_ACTIVE;
  }
  void lock_key(std::string_view key) override;
  [[nodiscard]] const char *for_update() const override { return " FOR UPDATE"; }
  [[nodiscard]] const char *skip_locked() const override { return " FOR UPDATE SKIP LOCKED"; }
  [[nodiscard]] int64_t max_record_id() override;
  void raise_record_id(int64_t id) override;
  [[nodiscard]] int schema_version() override;
  [[nodiscard]] sql::Health health() override;
  [[nodiscard]] std::string integrity_check() override;

  // Runs a prepared statement; the result of a statement that succeeded, else throws.
  PgResultHandle exec_prepared(const std::string &name, const std::vector<const char *> &values);

private:
  void connect(const std::string &location, const Bounds &b);
  void set_session_timeouts(const Bounds &b);
  void ensure_alive() const;
  // Runs SQL (one or more statements, no parameters) and returns its last result.
  PgResultHandle simple(const std::string &sql);
  // Sends a request with `send` (a PQsend* call) and reads its whole answer, waiting at
  // most m_answer_ms in all; the last result (the first error, if any), or null when libpq
  // failed (its error message says why). Past the bound: no_answer().
  PgResultHandle exchange(const std::function<int(PGconn *)> &send);
  // Waits until the socket is ready for `events`; false once `until` (steady ms) passed.
  [[nodiscard]] bool wait_socket(short events, int64_t until) const;
  // No answer in time: the connection is closed (the server rolls back what it ran for us
  // when it sees that, unless a COMMIT had reached it) and LEDGER_UNAVAILABLE thrown. Closed,
  // not cancelled: libpq 15's PQcancel waits for the server without a timeout.
  [[noreturn]] void no_answer();
  PgResultHandle checked(PGresult *r);
  [[noreturn]] void fail(const PGresult *r);
  int read_version();
  void setup_schema(const PgOpen &o);
  int64_t query_int(const std::string &sql);
  // A libpq message as lodge shows it: on one line, without any secret of the location
  // (libpq quotes the piece of a location it could not parse, the password included).
  [[nodiscard]] std::string said(const char *message) const;

  std::string m_location; // as given: only for said()
  std::string m_display;
  PgConnHandle m_conn;
  bool m_lost = false;
  std::string m_lost_message;
  int64_t m_timeout_ms;       // ledger_timeout
  int64_t m_answer_ms;        // answer_wait_ms: the most one exchange waits
  int64_t m_statement_ms = 0; // the session's statement_timeout (0: none)
  // SQL text → its prepared statement's name and parameter count, for this connection.
  struct Prepared {
    std::string name;
    int nparams = 0;
  };
  std::unordered_map<std::string, Prepared> m_prepared;
  std::string m_sequence; // file_upload's id sequence, as a quoted, qualified name
};

void PgStmt::bind_text(int i, std::string_view v) {
  // libpq passes text parameters as C strings: a NUL would cut the value short unseen.
  if (v.find('\0') != std::string_view::npos) {
    ErrorDetails d;
    d.sqlstate = "22P05";
    throw LodgeError(
        Errc::bad_name,
        m_conn->display_name() + ": the ledger's database takes only UTF-8 text: a NUL byte in a value", d);
  }
  set(i, std::string(v), Param::value);
}

bool PgStmt::step() {
  if (!m_result) run();
  ++m_row;
  return m_row < m_rows;
}

int64_t PgStmt::exec() {
  reset();
  run();
  const char *n = PQcmdTuples(m_result.get());
  int64_t v = 0;
  if (n && *n) std::from_chars(n, n + std::char_traits<char>::length(n), v);
  return v;
}

void PgStmt::run() {
  std::vector<const char *> values(m_values.size());
  for (size_t i = 0; i < m_values.size(); ++i) {
    if (m_state[i] == Param::unbound)
      throw LodgeError(Errc::internal, "SQL parameter ?" + std::to_string(i + 1) + " not bound");
    values[i] = m_state[i] == Param::null ? nullptr : m_values[i].c_str();
  }
  m_result = m_conn->exec_prepared(*m_name, values);
  m_row = -1;
  m_rows = PQntuples(m_result.get());
}

int64_t PgStmt::col_int(int col) const {
  const PGresult *r = row_result(col);
  if (PQgetisnull(r, m_row, col) != 0) return 0;
  std::string_view v(PQgetvalue(r, m_row, col), static_cast<size_t>(PQgetlength(r, m_row, col)));
  if (v == "t") return 1; // a boolean expression's value
  if (v == "f") return 0;
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw LodgeError(Errc::internal,
                     "SQL column " + std::to_string(col) + " is not an integer: '" + std::string(v) + "'");
  return out;
}

PgConn::PgConn(const PgOpen &o)
    : m_location(o.location), m_display(display_location(o.location)), m_timeout_ms(o.timeout_ms),
      m_answer_ms(answer_wait_ms(o.timeout_ms, 0)) {
  const Bounds b = bounds_for(o.timeout_ms, o.lock_timeout_ms);
  connect(o.location, b);
  PQsetNoticeProcessor(m_conn.get(), ignore_notice, nullptr);
  // Non-blocking: no send waits unbounded either (exchange flushes under its deadline).
  if (PQsetnonblocking(m_conn.get(), 1) != 0)
    throw LodgeError(Errc::ledger_unavailable,
                     m_display + ": cannot use the connection: " + said(PQerrorMessage(m_conn.get())));
  set_session_timeouts(b);
  if (o.read_only) simple("SET default_transaction_read_only = on");
  setup_schema(o);
  auto r = simple("SELECT pg_get_serial_sequence('file_upload', 'id')");
  m_sequence = PQgetvalue(r.get(), 0, 0);
  if (m_sequence.empty())
    throw LodgeError(Errc::ledger_unusable,
                     m_display + ": file_upload.id has no sequence: not a lodge ledger");
}

std::string PgConn::said(const char *message) const {
  return util::log::redact(trim(message ? message : ""), m_location);
}

void PgConn::connect(const std::string &location, const Bounds &b) {
  // A location libpq cannot read is the configuration's fault, not the server's; its message
  // quotes what it could not parse, so it goes through said().
  char *parse_error = nullptr;
  ConninfoHandle parsed(PQconninfoParse(location.c_str(), &parse_error), PQconninfoFree);
  if (!parsed) {
    std::string why = parse_error ? said(parse_error) : std::string("out of memory");
    if (parse_error) PQfreemem(parse_error);
    throw LodgeError(Errc::config_invalid,
                     "the ledger location is not a PostgreSQL URL or keyword string that libpq reads: " +
                         why);
  }
  // Keywords before dbname are defaults the location may override; those after it win.
  // client_encoding: lodge speaks UTF-8. fallback_application_name: "lodge" unless the
  // location or PGAPPNAME names the application. The bounds: see Bounds. connect_timeout
  // bounds the whole connection (TCP, TLS, the server's answer to the startup) per host;
  // a value libpq has of its own (PGCONNECT_TIMEOUT) wins.
  const std::string connect_s = std::to_string(b.connect_timeout_s);
  ConninfoHandle defaults(PQconndefaults(), PQconninfoFree);
  const bool ours = option_value(defaults, "connect_timeout").empty();
  std::vector<std::pair<const char *, std::string>> params;
  if (ours) params.emplace_back("connect_timeout", connect_s);
  params.emplace_back("keepalives", "1");
  params.emplace_back("keepalives_idle", std::to_string(b.keepalives_idle_s));
  params.emplace_back("keepalives_interval", std::to_string(b.keepalives_interval_s));
  params.emplace_back("keepalives_count", std::to_string(b.keepalives_count));
  params.emplace_back("tcp_user_timeout", std::to_string(b.tcp_user_timeout_ms));
  params.emplace_back("dbname", location);
  params.emplace_back("fallback_application_name", "lodge");
  params.emplace_back("client_encoding", "UTF8");
  std::vector<const char *> keys, vals;
  for (const auto &[k, v] : params) {
    keys.push_back(k);
    vals.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  vals.push_back(nullptr);
  m_conn.reset(PQconnectdbParams(keys.data(), vals.data(), 1));
  if (!m_conn) throw LodgeError(Errc::ledger_unavailable, m_display + ": cannot connect (out of memory)");
  if (PQstatus(m_conn.get()) == CONNECTION_OK) return;
  std::string msg = said(PQerrorMessage(m_conn.get()));
  ErrorDetails d;
  if (msg.find("database \"") != std::string::npos && msg.find("does not exist") != std::string::npos) {
    d.sqlstate = "3D000";
    throw LodgeError(
        Errc::ledger_not_found,
        m_display + ": " + msg + ". Create the database, then run `lodge init --db " + m_display + "`", d);
  }
  if (msg.find("timeout expired") != std::string::npos) {
    ConninfoHandle used(PQconninfo(m_conn.get()), PQconninfoFree);
    std::string t = option_value(used, "connect_timeout");
    msg += ours && t == connect_s ? " (connect_timeout " + t + "s, from ledger_timeout " +
                                        util::format_duration_exact(m_timeout_ms) + ")"
                                  : " (connect_timeout " + t + "s, from PGCONNECT_TIMEOUT or the location)";
  }
  throw LodgeError(Errc::ledger_unavailable, m_display + ": cannot connect to the PostgreSQL ledger: " + msg,
                   d);
}

void PgConn::set_session_timeouts(const Bounds &b) {
  // statement_timeout ends a statement the server runs too long, lock_timeout a wait for a
  // row or advisory lock (LEDGER_LOCKED past it). Set for this session unless the location
  // or PGOPTIONS set them (`-c name=value`: source "client"), which win; then the client's
  // own bound follows the session's statement_timeout, whatever set it.
  auto r = simple("SELECT set_config(name, CASE name WHEN 'statement_timeout' THEN '" +
                  std::to_string(b.statement_timeout_ms) + "' ELSE '" + std::to_string(b.lock_timeout_ms) +
                  "' END, false) FROM pg_settings WHERE name IN ('statement_timeout', 'lock_timeout') AND "
                  "source <> 'client'; SELECT setting FROM pg_settings WHERE name = 'statement_timeout'");
  std::string_view v = PQntuples(r.get()) > 0 ? PQgetvalue(r.get(), 0, 0) : "";
  std::from_chars(v.data(), v.data() + v.size(), m_statement_ms);
  m_answer_ms = answer_wait_ms(m_timeout_ms, m_statement_ms);
}

void PgConn::ensure_alive() const {
  if (m_lost)
    throw LodgeError(Errc::ledger_unavailable,
                     m_display + ": the connection to the PostgreSQL ledger was lost earlier (" +
                         m_lost_message + "); lodge does not reconnect in the middle of a run");
}

[[noreturn]] void PgConn::fail(const PGresult *r) {
  std::string state = result_field(r, PG_DIAG_SQLSTATE);
  std::string msg = said(result_field(r, PG_DIAG_MESSAGE_PRIMARY).c_str());
  if (msg.empty()) msg = said(PQerrorMessage(m_conn.get()));
  bool lost = PQstatus(m_conn.get()) == CONNECTION_BAD;
  Error e = map_error(state, lost, msg, m_display);
  if (state == "57014")
    e.message += " (statement_timeout " + util::format_duration_exact(m_statement_ms) + ", ledger_timeout " +
                 util::format_duration_exact(m_timeout_ms) + ")";
  if (e.code == Errc::ledger_unavailable) {
    m_lost = true;
    m_lost_message = msg;
  }
  if (e.code != Errc::ledger_unavailable && is_transient(state)) throw sql::TransientConflict(e);
  throw LodgeError(e);
}

PgResultHandle PgConn::checked(PGresult *raw) {
  PgResultHandle r(raw);
  auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  fail(r.get());
}

PgResultHandle PgConn::simple(const std::string &sql) {
  ensure_alive();
  return checked(exchange([&](PGconn *c) { return PQsendQuery(c, sql.c_str()); }).release());
}

PgResultHandle PgConn::exec_prepared(const std::string &name, const std::vector<const char *> &values) {
  ensure_alive();
  return checked(exchange([&](PGconn *c) {
                   return PQsendQueryPrepared(c, name.c_str(), static_cast<int>(values.size()), values.data(),
                                              nullptr, nullptr, 0);
                 }).release());
}

PgResultHandle PgConn::exchange(const std::function<int(PGconn *)> &send) {
  PGconn *c = m_conn.get();
  const int64_t until = util::steady_ms() + m_answer_ms;
  if (send(c) != 1) return nullptr;
  // What did not fit in the socket's buffer is sent as the socket takes it; an answer
  // arriving meanwhile is read so that the server is never blocked writing to us.
  for (int left = PQflush(c); left != 0; left = PQflush(c)) {
    if (left < 0) return nullptr;
    if (!wait_socket(POLLIN | POLLOUT, until)) no_answer();
    if (PQconsumeInput(c) == 0) return nullptr;
  }
  PgResultHandle last;
  for (;;) {
    while (PQisBusy(c) == 0) {
      PgResultHandle r(PQgetResult(c));
      if (!r) return last;
      // After an error the server skips the rest: the error is the answer.
      if (!last || PQresultStatus(last.get()) != PGRES_FATAL_ERROR) last = std::move(r);
    }
    if (!wait_socket(POLLIN, until)) no_answer();
    if (PQconsumeInput(c) == 0) return nullptr;
  }
}

bool PgConn::wait_socket(short events, int64_t until) const {
  pollfd p{PQsocket(m_conn.get()), events, 0};
  if (p.fd < 0) return true; // libpq reports the closed connection on the next call
  for (;;) {
    const int64_t left = until - util::steady_ms();
    if (left <= 0) return false;
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (n > 0 || (n < 0 && errno != EINTR)) return true;
  }
}

void PgConn::no_answer() {
  m_lost = true;
  m_lost_message = "no answer within " + util::format_duration_exact(m_answer_ms) + ": ledger_timeout " +
                   util::format_duration_exact(m_timeout_ms) + " plus " +
                   util::format_duration_exact(m_answer_ms - m_timeout_ms) + "; lodge closed the connection";
  m_conn.reset();
  throw LodgeError(Errc::ledger_unavailable,
                   m_display + ": the PostgreSQL ledger did not answer (" + m_lost_message +
                       "): the server is stopped, overloaded or unreachable; the transaction in progress "
                       "was not committed");
}

std::unique_ptr<sql::StmtImpl> PgConn::prepare(std::string_view sql) {
  ensure_alive();
  std::string key(sql);
  auto it = m_prepared.find(key);
  if (it == m_prepared.end()) {
    Prepared p{"lodge_" + std::to_string(m_prepared.size() + 1), max_placeholder(sql)};
    // Parameter types are left to the server, inferred from where each one is used.
    const std::string text = translate_placeholders(sql);
    checked(exchange([&](PGconn *c) {
              return PQsendPrepare(c, p.name.c_str(), text.c_str(), 0, nullptr);
            }).release());
    it = m_prepared.emplace(std::move(key), std::move(p)).first;
  }
  return std::make_unique<PgStmt>(this, &it->second.name, it->second.nparams);
}

void PgConn::commit() {
  PgResultHandle r;
  bool was_lost = m_lost;
  try {
    r = simple("COMMIT");
  } catch (const LodgeError &e) {
    if (was_lost || !m_lost) throw;
    // The server may have committed before the connection went (or before it stopped
    // answering): say so, not "rolled back". Callers treat it as not known: the upload is
    // reported failed, never active, and nothing is deleted on its account.
    Error err = e.error();
    err.message = m_display + ": lost the connection to the PostgreSQL ledger during COMMIT (" +
                  m_lost_message + "): the transaction either committed whole or not at all";
    err.details.ambiguous = true;
    throw LodgeError(err);
  }
  // COMMIT of a transaction an error already aborted answers ROLLBACK, not an error.
  if (std::string_view(PQcmdStatus(r.get())) != "COMMIT")
    throw LodgeError(Errc::internal,
                     m_display + ": the transaction was rolled back by the server, not committed");
}

void PgConn::rollback() noexcept {
  if (m_lost || !m_conn || PQstatus(m_conn.get()) != CONNECTION_OK) return;
  if (PQtransactionStatus(m_conn.get()) == PQTRANS_IDLE) return;
  try {
    exchange([](PGconn *c) { return PQsendQuery(c, "ROLLBACK"); });
  } catch (const LodgeError &) {
    return; // no answer: no_answer() closed the connection, which rolls it back
  } catch (const std::exception &) {
    return; // out of memory: the connection is not used again in this transaction
  }
  if (PQstatus(m_conn.get()) == CONNECTION_BAD) {
    m_lost = true;
    m_lost_message = said(PQerrorMessage(m_conn.get()));
  }
}

void PgConn::lock_key(std::string_view key) {
  sql::Stmt st(prepare("SELECT pg_advisory_xact_lock(CAST(?1 AS INTEGER), CAST(?2 AS INTEGER))"));
  st.bind(1, static_cast<int64_t>(sql::k_lock_namespace)).bind(2, static_cast<int64_t>(lock_key_hash(key)));
  st.step();
}

int64_t PgConn::query_int(const std::string &sql) {
  sql::Stmt st(prepare(sql));
  return st.step() ? st.col_int(0) : 0;
}

int64_t PgConn::max_record_id() {
  // The sequence's last value counts ids of rolled-back inserts too; max(id) counts rows
  // inserted with an explicit id.
  return query_int("SELECT GREATEST((SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM " +
                   m_sequence + "), (SELECT COALESCE(max(id), 0) FROM file_upload))");
}

void PgConn::raise_record_id(int64_t id) {
  if (id <= 0) return;
  ensure_alive();
  if (PQtransactionStatus(m_conn.get()) != PQTRANS_INTRANS)
    throw LodgeError(Errc::internal, "raise_record_id outside a write transaction");
  // Reading the sequence and setting it must not let another transaction's insert take
  // an id in between (setval would then move the sequence back under it): this lock waits
  // for every transaction that may have drawn an id and keeps new inserts out until commit.
  simple("LOCK TABLE file_upload IN SHARE ROW EXCLUSIVE MODE");
  std::string literal = "'";
  for (char c : m_sequence)
    literal += c == '\'' ? std::string("''") : std::string(1, c);
  literal += "'";
  sql::Stmt st(prepare("SELECT setval(" + literal +
                       ", GREATEST(CAST(?1 AS BIGINT), (SELECT CASE WHEN is_called " +
                       "THEN last_value ELSE 0 END FROM " + m_sequence + ")))"));
  st.bind(1, id).step();
}

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

std::string PgConn::integrity_check() {
  for (const char *table : {"ledger_meta", "file_upload", "cleanup_task"})
    (void)simple(std::string("SELECT count(*) FROM ") + table); // throws what the server says
  return "ok";
}

sql::Health PgConn::health() {
  sql::Health h;
  auto r = simple("SELECT current_setting('server_version'), current_setting('statement_timeout'), "
                  "current_setting('lock_timeout')");
  h.emplace_back("server_version", std::string(PQgetvalue(r.get(), 0, 0)));
  const char *host = PQhost(m_conn.get());
  h.emplace_back("host", std::string(host ? host : ""));
  int64_t port = 0;
  const char *p = PQport(m_conn.get());
  if (p && *p) std::from_chars(p, p + std::char_traits<char>::length(p), port);
  h.emplace_back("port", port);
  h.emplace_back("database", std::string(PQdb(m_conn.get())));
  h.emplace_back("user", std::string(PQuser(m_conn.get())));
  h.emplace_back("connected", PQstatus(m_conn.get()) == CONNECTION_OK);
  h.emplace_back("schema_version", static_cast<int64_t>(schema_version()));
  // The bounds this connection runs under, as the server and libpq took them.
  h.emplace_back("statement_timeout", std::string(PQgetvalue(r.get(), 0, 1)));
  h.emplace_back("lock_timeout", std::string(PQgetvalue(r.get(), 0, 2)));
  ConninfoHandle used(PQconninfo(m_conn.get()), PQconninfoFree);
  auto connect_s = option_value(used, "connect_timeout");
  h.emplace_back("connect_timeout", connect_s.empty() ? std::string("none") : connect_s + "s");
  h.emplace_back("answer_timeout", util::format_duration_exact(m_answer_ms));
  return h;
}

} // namespace

Bounds bounds_for(int64_t timeout_ms, int64_t lock_timeout_ms) {
  Bounds b;
  const int64_t t = std::max<int64_t>(timeout_ms, 1);
  const int64_t secs = std::min<int64_t>((t + 999) / 1000, std::numeric_limits<int>::max());
  b.connect_timeout_s = static_cast<int>(std::max<int64_t>(secs, 2));
  // Probes from half the bound on, three of them across the other half.
  b.keepalives_idle_s = static_cast<int>(std::max<int64_t>(secs / 2, 1));
  b.keepalives_interval_s = static_cast<int>(std::max<int64_t>(secs / 6, 1));
  b.keepalives_count = 3;
  b.tcp_user_timeout_ms = t;
  b.statement_timeout_ms = t;
  b.lock_timeout_ms = std::clamp<int64_t>(lock_timeout_ms, 1, t);
  return b;
}

int64_t answer_wait_ms(int64_t timeout_ms, int64_t statement_timeout_ms) {
  return std::max(timeout_ms, statement_timeout_ms) + k_answer_margin_ms;
}

std::string translate_placeholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 8);
  for (size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] != '?') {
      out += sql[i];
      continue;
    }
    size_t j = i + 1;
    while (j < sql.size() && std::isdigit(static_cast<unsigned char>(sql[j])) != 0)
      ++j;
    if (j == i + 1 || sql[i + 1] == '0')
      throw LodgeError(Errc::internal, "SQL with a '?' that is not a parameter ?1..?N: " + std::string(sql));
    out += '$';
    out.append(sql.substr(i + 1, j - i - 1));
    i = j - 1;
  }
  return out;
}

int max_placeholder(std::string_view sql) {
  int best = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    if (sql[i] != '?') continue;
    int n = 0;
    auto [end, ec] = std::from_chars(sql.data() + i + 1, sql.data() + sql.size(), n);
    if (ec == std::errc()) best = std::max(best, n);
    i = static_cast<size_t>(end - sql.data()) - 1;
  }
  return best;
}

std::string display_location(const std::string &location) {
  char *err = nullptr;
  PQconninfoOption *opts = PQconninfoParse(location.c_str(), &err);
  if (err) PQfreemem(err);
  if (!opts) return "postgres (unparsable location)";
  std::unique_ptr<PQconninfoOption, void (*)(PQconninfoOption *)> own(opts, PQconninfoFree);
  std::string user, host, hostaddr, port, db;
  for (PQconninfoOption *o = opts; o->keyword; ++o) {
    if (!o->val || !*o->val) continue;
    std::string_view k(o->keyword);
    if (k == "user")
      user = o->val;
    else if (k == "host")
      host = o->val;
    else if (k == "hostaddr")
      hostaddr = o->val;
    else if (k == "port")
      port = o->val;
    else if (k == "dbname")
      db = o->val;
  }
  if (host.empty()) host = hostaddr;
  std::string out = "postgres://";
  if (!user.empty()) out += user + "@";
  for (char c : host)
    out += c == '/' ? std::string("%2F") : std::string(1, c); // a socket directory
  if (!port.empty()) out += ":" + port;
  out += "/" + db;
  return out;
}

uint32_t fnv1a32(std::string_view key) {
  uint32_t h = 2166136261U;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619U;
  }
  return h;
}

int32_t lock_key_hash(std::string_view key) {
  return static_cast<int32_t>(fnv1a32(key)); // two's complement (C++20): the same bits as int4
}

bool is_transient(std::string_view sqlstate) {
  return sqlstate == "40001" || sqlstate == "40P01";
}

Error map_error(std::string_view sqlstate, bool lost, std::string_view message, std::string_view where) {
  ErrorDetails d;
  d.sqlstate = std::string(sqlstate);
  std::string w(where);
  std::string msg(message);
  std::string state = sqlstate.empty() ? std::string() : " (SQLSTATE " + std::string(sqlstate) + ")";
  // 57014: statement_timeout (or a cancel) ended the statement. A ledger that slow is not
  // used again in this run: each later statement would wait as long.
  if (!lost && sqlstate == "57014")
    return {Errc::ledger_unavailable,
            w + ": the PostgreSQL ledger did not finish a statement in time: " + msg + state +
                "; the transaction in progress was not committed",
            d};
  // 57P01..57P03: the server is shutting down or terminated this session.
  if (lost || sqlstate.substr(0, 2) == "08" || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03")
    return {Errc::ledger_unavailable,
            w + ": lost the connection to the PostgreSQL ledger: " + msg + state +
                "; the transaction in progress was not committed",
            d};
  if (is_transient(sqlstate))
    return {Errc::ledger_locked, w + ": a concurrent transaction conflicted: " + msg + state, d};
  if (sqlstate == "55P03")
    return {Errc::ledger_locked,
            w + ": the ledger is locked by another process (waited past lock_timeout): " + msg + state, d};
  if (sqlstate == "22021" || sqlstate == "22P05")
    return {Errc::bad_name, w + ": the ledger's database takes only UTF-8 text: " + msg + state, d};
  if (sqlstate == "3D000")
    return {Errc::ledger_not_found,
            w + ": " + msg + ". Create the database, then run `lodge init --db " + w + "`", d};
  if (sqlstate == "42P01")
    return {Errc::ledger_not_found,
            w + ": " + msg + ": no lodge ledger in this database. Run `lodge init --db " + w +
                "` to create one",
            d};
  return {Errc::internal, w + ": PostgreSQL error" + state + ": " + msg, d};
}

std::unique_ptr<sql::Conn> open_pg_conn(const PgOpen &o) {
  return std::make_unique<PgConn>(o);
}

} // namespace lodge::ledger::pg

namespace lodge::ledger {

std::unique_ptr<sql::Conn> open_postgres(const OpenOptions &opts) {
  pg::PgOpen o;
  o.location = opts.location;
  o.create = opts.create;
  o.read_only = opts.read_only;
  o.lock_timeout_ms = opts.lock_timeout_ms;
  o.timeout_ms = opts.timeout_ms;
  o.now_ms = opts.clock->now_ms();
  return pg::open_pg_conn(o);
}

} // namespace lodge::ledger
