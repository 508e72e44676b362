// The PostgreSQL driver (sql::Conn over libpq): connects, bounds every wait for the server by
// ledger_timeout, runs transactions, and maps SQLSTATEs onto lodge's error codes. Its
// statements are in pg_stmt.cpp, the schema's creation and migration in pg_schema.cpp.

#include "drivers.hpp"
#include "pg.hpp"
#include "pg_conn.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <functional>
#include <limits>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/units.hpp>
#include <poll.h>
#include <string>
#include <utility>
#include <vector>

namespace lodge::ledger::pg {

namespace {

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

} // namespace

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
