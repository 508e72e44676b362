// The ledger as a search index (`lodge list`'s filters, `lodge get`'s selection) and the
// retention writes (`lodge prune`): scan_files, prefix_summaries, shared_outside,
// prune_snapshot, soft_delete_expired. Every value is bound; the SQL text is built only
// from the query's shape (which fields are set), so equal shapes prepare the same text.
#include "sql_ledger.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

namespace lodge::ledger {
namespace {

// A WHERE clause being built: its text and its parameters, ?1..?N in order.
class Where {
public:
  std::string param(int64_t v) { return next(v); }
  std::string param(const std::string &v) { return next(v); }
  void add(const std::string &cond) { m_sql += (m_sql.empty() ? " WHERE " : " AND ") + cond; }
  [[nodiscard]] const std::string &sql() const { return m_sql; }
  void bind(sql::Stmt &st) const {
    for (size_t i = 0; i < m_params.size(); ++i) {
      const int n = static_cast<int>(i) + 1;
      if (const auto *v = std::get_if<int64_t>(&m_params[i]))
        st.bind(n, *v);
      else
        st.bind(n, std::get<std::string>(m_params[i]));
    }
  }

private:
  std::string next(std::variant<int64_t, std::string> v) {
    m_params.push_back(std::move(v));
    return "?" + std::to_string(m_params.size());
  }
  std::string m_sql;
  std::vector<std::variant<int64_t, std::string>> m_params;
};

// `column` starts with `start` (bytes), on both backends: LIKE is no use (SQLite's ignores
// ASCII case), so a byte-order range the indexes serve, exact with the substr check
// (substr and length count characters on both; the start is the caller's UTF-8).
void starts_with(Where &w, const char *column, const std::string &start) {
  if (start.empty()) return;
  const auto lo = w.param(start);
  const int64_t chars = std::count_if(start.begin(), start.end(),
                                      [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  w.add(std::string(column) + " >= " + lo + " AND substr(" + column + ", 1, " + w.param(chars) + ") = " + lo);
  // The first string past every one that starts so: the last byte one higher, when that
  // stays ASCII (a bound of invalid UTF-8 would be refused by PostgreSQL).
  const auto last = static_cast<unsigned char>(start.back());
  if (last < 0x7E) {
    std::string hi = start;
    hi.back() = static_cast<char>(last + 1);
    w.add(std::string(column) + " < " + w.param(hi));
  }
}

// Every field of q but latest, sort and limit: the FROM clause and the WHERE. Chosen so
// that SQLite, which has no statistics (lodge never runs ANALYZE), starts from the most
// selective index; PostgreSQL plans by its own statistics whatever the text says.
struct Selection {
  std::string from = " FROM file_upload";
  Where where;
};

Selection select_of(const FileQuery &q, sql::Dialect dialect) {
  Selection s;
  Where &w = s.where;
  auto attrs = [&](const char *kind, const std::vector<std::pair<std::string, std::string>> &pairs) {
    for (const auto &[name, value] : pairs) {
      const std::string cond =
          std::string("kind = '") + kind + "' AND name = " + w.param(name) + " AND value = " + w.param(value);
      if (s.from == " FROM file_upload") {
        // The first pair drives: its rows of file_attr, then each row by its id. (SQLite's
        // CROSS JOIN keeps this order; as `id IN (SELECT ...)` it would rather walk the
        // owner's rows.)
        s.from = " FROM file_attr CROSS JOIN file_upload";
        w.add("id = record_id AND " + cond);
      } else {
        w.add("id IN (SELECT record_id FROM file_attr WHERE " + cond + ")");
      }
    }
  };
  attrs("meta", q.metadata);
  attrs("tag", q.tags);
  const bool by_attr = s.from != " FROM file_upload";
  // A time range is the better start than the owner when nothing narrower is asked: on
  // SQLite the owner's term is made no index's ('+'), so created_at's index serves.
  const bool by_time = (q.since || q.until) && !by_attr && !q.run_prefix && q.run_prefixes.empty() &&
                       !q.path && !q.sha256 && !q.expired_by;
  const bool alive_only = !q.include_dead || q.latest || q.expired_by;
  // An owner's alive rows of a digest are found through the digest indexes (alive_with_digest):
  // on SQLite the owner's term is made no index's, so that they drive.
  const bool by_digest = q.sha256 && q.owner != "*" && alive_only;
  std::string owner;
  if (q.owner != "*") {
    owner = w.param(q.owner);
    w.add(((by_time || by_digest) && dialect == sql::Dialect::sqlite ? "+owner_id = " : "owner_id = ") +
          owner);
  }
  if (q.run_prefix) w.add("run_prefix = " + w.param(*q.run_prefix));
  if (!q.run_prefixes.empty()) {
    std::string in;
    for (const auto &p : q.run_prefixes)
      in += (in.empty() ? "" : ", ") + w.param(p);
    w.add("run_prefix IN (" + in + ")");
  }
  if (q.prefix_start) starts_with(w, "run_prefix", *q.prefix_start);
  if (q.path_prefix) starts_with(w, "relative_path", *q.path_prefix);
  if (q.path) w.add("relative_path = " + w.param(*q.path));
  if (alive_only) w.add("is_deleted = 0");
  if (q.latest) w.add("upload_status = 'ACTIVE'");
  if (q.since) w.add("created_at >= " + w.param(*q.since));
  if (q.until) w.add("created_at <= " + w.param(*q.until));
  if (by_digest)
    w.add(alive_with_digest(owner, w.param(*q.sha256)));
  else if (q.sha256)
    w.add("sha256 = " + w.param(*q.sha256));
  if (q.min_size) w.add("size >= " + w.param(*q.min_size));
  if (q.max_size) w.add("size <= " + w.param(*q.max_size));
  // IS NOT NULL spelled out: SQLite takes the partial index only when the query's terms
  // name its condition.
  if (q.expired_by) w.add("expires_at IS NOT NULL AND expires_at <= " + w.param(*q.expired_by));
  if (q.unexpired_at) w.add("(expires_at IS NULL OR expires_at > " + w.param(*q.unexpired_at) + ")");
  return s;
}

std::string order_of(const FileQuery &q) {
  const char *dir = q.descending ? " DESC" : "";
  auto by = [&](std::initializer_list<const char *> cols) {
    std::string s;
    for (const char *c : cols)
      s += (s.empty() ? " ORDER BY " : ", ") + std::string(c) + dir;
    return s;
  };
  switch (q.sort) {
  case FileSort::time:
    return by({"created_at", "id"});
  case FileSort::path:
    return by({"run_prefix", "relative_path", "id"});
  case FileSort::size:
    return by({"size", "id"});
  case FileSort::id:
    break;
  }
  return by({"id"});
}
// The rows after `r` in q's order: a row-value comparison on the sort's columns and id.
std::string after_row(Where &w, const FileQuery &q, const FileRecord &r) {
  const char *op = q.descending ? " < " : " > ";
  switch (q.sort) {
  case FileSort::time:
    return "(created_at, id)" + std::string(op) + "(" + w.param(r.created_at) + ", " + w.param(r.id) + ")";
  case FileSort::path:
    // One run prefix (get --prefix's pages): without it in the row value SQLite seeks on
    // (owner_id, run_prefix, relative_path) and reads on from there; with it, it read every
    // row after the seek to sort them by id (50 ms a page of 1,000 in 100,000 rows).
    if (q.run_prefix)
      return "(relative_path, id)" + std::string(op) + "(" + w.param(r.relative_path) + ", " + w.param(r.id) +
             ")";
    return "(run_prefix, relative_path, id)" + std::string(op) + "(" + w.param(r.run_prefix) + ", " +
           w.param(r.relative_path) + ", " + w.param(r.id) + ")";
  case FileSort::size:
    return "(size, id)" + std::string(op) + "(" + w.param(r.size) + ", " + w.param(r.id) + ")";
  case FileSort::id:
    break;
  }
  return "id" + std::string(op) + w.param(r.id);
}
} // namespace

void SqlLedger::scan_files(const FileQuery &f, const std::function<bool(const FileRecord &)> &visit) {
  if (f.latest) { // the newest alive ACTIVE row per (owner, path) among those matching, as find_by_path
                  // orders
    auto sel = select_of(f, m_c->dialect());
    auto &w = sel.where;
    std::string sql = std::string("SELECT ") + k_file_cols +
                      " FROM (SELECT file_upload.*, row_number() OVER (PARTITION BY owner_id, relative_path"
                      " ORDER BY activated_at DESC, id DESC) AS lodge_rank" +
                      sel.from + w.sql() + ") AS newest WHERE lodge_rank = 1";
    if (f.after) sql += " AND " + after_row(w, f, *f.after);
    sql += order_of(f);
    if (f.limit) sql += " LIMIT " + w.param(std::max<int64_t>(0, *f.limit));
    auto st = q(sql);
    w.bind(st);
    while (st.step())
      if (!visit(read_file(st))) return;
    return;
  }
  // SQLite steps through its rows as they are read. libpq receives a statement's whole
  // result at once, so on PostgreSQL the rows come in pages of k_page, each continuing after
  // the last row of the one before in the query's order (a total order: id ends it).
  constexpr int64_t k_page = 1000;
  const bool paged = m_c->dialect() == sql::Dialect::postgres;
  std::optional<FileRecord> last = f.after;
  int64_t left = f.limit ? std::max<int64_t>(0, *f.limit) : -1;
  while (left != 0) {
    auto sel = select_of(f, m_c->dialect());
    auto &w = sel.where;
    if (last) w.add(after_row(w, f, *last));
    std::string sql = std::string("SELECT ") + k_file_cols + sel.from + w.sql() + order_of(f);
    const int64_t want = paged ? (left < 0 ? k_page : std::min(left, k_page)) : left;
    if (want >= 0) sql += " LIMIT " + w.param(want);
    auto st = q(sql);
    w.bind(st);
    int64_t got = 0;
    while (st.step()) {
      last = read_file(st);
      ++got;
      if (left > 0) --left;
      if (!visit(*last)) return;
    }
    if (!paged || got < want) return;
  }
}

void SqlLedger::prefix_summaries(const FileQuery &f,
                                 const std::function<bool(const PrefixSummary &)> &visit) {
  FileQuery alive = f;
  alive.include_dead = false;
  alive.latest = false;
  auto sel = select_of(alive, m_c->dialect());
  const auto &w = sel.where;
  auto st = q(std::string("SELECT owner_id, run_prefix,"
                          " CAST(sum(CASE WHEN upload_status = 'ACTIVE' THEN 1 ELSE 0 END) AS BIGINT),"
                          " CAST(sum(CASE WHEN upload_status = 'ACTIVE' THEN size ELSE 0 END) AS BIGINT),"
                          " max(CASE WHEN upload_status = 'ACTIVE' THEN created_at ELSE 0 END),"
                          " CAST(sum(CASE WHEN upload_status = 'UPLOADING' THEN 1 ELSE 0 END) AS BIGINT)") +
              sel.from + w.sql() + " GROUP BY owner_id, run_prefix ORDER BY owner_id, run_prefix");
  w.bind(st);
  while (st.step()) {
    PrefixSummary s;
    s.owner_id = st.col_text(0);
    s.run_prefix = st.col_text(1);
    s.files = st.col_int(2);
    s.bytes = st.col_int(3);
    s.newest_at = st.col_int(4);
    s.uploading = st.col_int(5);
    if (!visit(s)) return;
  }
}

std::vector<std::string> SqlLedger::metadata_values(const std::string &owner, const std::string &name,
                                                    const std::string &start, int limit) {
  // file_attr's primary key (kind, name, value, ...) serves the range; each value once.
  Where w;
  w.add("kind = 'meta' AND name = " + w.param(name));
  starts_with(w, "value", start);
  if (owner != "*")
    w.add("EXISTS (SELECT 1 FROM file_upload WHERE id = record_id AND owner_id = " + w.param(owner) + ")");
  auto st = q("SELECT DISTINCT value FROM file_attr" + w.sql() + " ORDER BY value LIMIT " +
              w.param(static_cast<int64_t>(std::max(0, limit))));
  w.bind(st);
  std::vector<std::string> out;
  while (st.step())
    out.push_back(st.col_text(0));
  return out;
}

std::vector<SharedRow> SqlLedger::shared_outside(const std::string &owner, const std::string &run_prefix,
                                                 std::optional<int64_t> unexpired_at) {
  // The object a row uses is COALESCE(content_key, object_key); the other alive rows using
  // it are the one that wrote it (object_key, unique) and those sharing it (content_key,
  // indexed): one indexed lookup each.
  const std::string from =
      " FROM file_upload r JOIN file_upload o ON o.%s = COALESCE(r.content_key, r.object_key)"
      " WHERE r.owner_id = ?1 AND r.run_prefix = ?2 AND r.is_deleted = 0 AND o.is_deleted = 0"
      " AND o.id <> r.id AND (o.owner_id <> ?1 OR o.run_prefix <> ?2)";
  const std::string unexpired = unexpired_at ? " AND (r.expires_at IS NULL OR r.expires_at > ?3)"
                                               " AND (o.expires_at IS NULL OR o.expires_at > ?3)"
                                             : "";
  auto with = [&](const char *col) {
    auto s = from + unexpired;
    s.replace(s.find("%s"), 2, col);
    return "SELECT r.id, o.owner_id, o.run_prefix" + s;
  };
  auto st = q(with("object_key") + " UNION " + with("content_key") + " ORDER BY 1, 2, 3");
  st.bind(1, owner).bind(2, run_prefix);
  if (unexpired_at) st.bind(3, *unexpired_at);
  std::vector<SharedRow> out;
  while (st.step())
    out.push_back({st.col_int(0), st.col_text(1), st.col_text(2)});
  return out;
}

void SqlLedger::record_attrs(int64_t id, const std::string &object_options) {
  if (object_options.empty()) return;
  // store::to_json wrote it (canonical): "metadata" and "tags" are objects of text.
  auto j = nlohmann::json::parse(object_options, nullptr, false);
  if (!j.is_object()) throw LodgeError(Errc::internal, "reserve was given object options that are not JSON");
  auto ins = q("INSERT INTO file_attr (record_id, kind, name, value) VALUES (?1, ?2, ?3, ?4)");
  for (const auto &[field, kind] : {std::pair{"metadata", "meta"}, std::pair{"tags", "tag"}}) {
    if (!j.contains(field) || !j[field].is_object()) continue;
    for (const auto &[name, v] : j[field].items()) {
      if (!v.is_string()) continue;
      ins.reset();
      ins.bind(1, id).bind(2, kind).bind(3, name).bind(4, v.get<std::string>()).exec();
    }
  }
}

bool SqlLedger::soft_delete_row(const FileRecord &row, int64_t now, int64_t grace_ms, int max_retries) {
  auto st = q("UPDATE file_upload SET is_deleted = 1, deleted_at = ?2, updated_at = ?2"
              " WHERE id = ?1 AND upload_status = 'ACTIVE' AND is_deleted = 0");
  if (st.bind(1, row.id).bind(2, now).exec() != 1) return false;
  (void)ensure_pending_task(row.id, row.object_key, now + grace_ms, max_retries, false, now);
  return true;
}

PruneOutcome SqlLedger::prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                       int64_t created_until, const std::vector<int64_t> &keep_ids,
                                       int64_t now, int64_t grace_ms, int max_retries) {
  return m_c->write([&](sql::Tx &tx) {
    std::vector<FileRecord> rows;
    {
      // Locked (PostgreSQL) before they change: a concurrent delete or sweep waits.
      auto st = q(std::string("SELECT ") + k_file_cols +
                  " FROM file_upload WHERE owner_id = ?1 AND run_prefix = ?2 AND upload_status = 'ACTIVE'"
                  " AND is_deleted = 0 AND created_at <= ?3 ORDER BY id" +
                  m_c->for_update());
      st.bind(1, owner).bind(2, run_prefix).bind(3, created_until);
      while (st.step())
        rows.push_back(read_file(st));
    }
    PruneOutcome out;
    for (const auto &r : rows) {
      if (std::find(keep_ids.begin(), keep_ids.end(), r.id) != keep_ids.end()) continue;
      if (!soft_delete_row(r, now, grace_ms, max_retries)) continue;
      ++out.deleted;
      out.bytes += r.size;
    }
    tx.commit();
    return out;
  });
}

PruneOutcome SqlLedger::soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries, int limit) {
  return m_c->write([&](sql::Tx &tx) {
    std::vector<FileRecord> rows;
    {
      auto st = q(std::string("SELECT ") + k_file_cols +
                  " FROM file_upload WHERE expires_at IS NOT NULL AND expires_at <= ?1"
                  " AND upload_status = 'ACTIVE' AND is_deleted = 0"
                  " ORDER BY id LIMIT ?2" +
                  m_c->for_update());
      st.bind(1, now).bind(2, static_cast<int64_t>(std::max(0, limit)));
      while (st.step())
        rows.push_back(read_file(st));
    }
    PruneOutcome out;
    for (const auto &r : rows) {
      if (!soft_delete_row(r, now, grace_ms, max_retries)) continue;
      ++out.deleted;
      out.bytes += r.size;
    }
    tx.commit();
    return out;
  });
}

} // namespace lodge::ledger
