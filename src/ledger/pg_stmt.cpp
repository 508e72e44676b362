// A PostgreSQL statement (sql::StmtImpl over libpq): the seam's ?N placeholders as $N, each
// SQL text prepared once per connection, every parameter bound as text (a NUL refused), the
// whole result read at once, and its values read as the seam's integers and text.

#include "pg_conn.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <utility>
#include <vector>

namespace lodge::ledger::pg {

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

} // namespace lodge::ledger::pg
