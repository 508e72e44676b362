// The id blocks behind the store's id marker, and the diverged state: ledger_meta keys,
// no schema change. The rule that uses them lives in ops/id_blocks.cpp.
#include "sql_ledger.hpp"

#include <algorithm>
#include <lodge/util/strings.hpp>

namespace lodge::ledger {
namespace {
constexpr const char *k_block_end = "id_block_end";
constexpr const char *k_block_intent = "id_block_intent";
constexpr const char *k_diverged_at = "diverged_at";
constexpr const char *k_diverged_mark = "diverged_store_mark";
constexpr const char *k_diverged_sequence = "diverged_sequence";
constexpr const char *k_diverged_reconciled = "diverged_reconciled_at";
} // namespace

std::optional<int64_t> SqliteLedger::meta_int(const char *key) {
  Stmt st(m_db, "SELECT value FROM ledger_meta WHERE key = ?1");
  st.bind(1, key);
  if (!st.step()) return std::nullopt;
  return util::parse_int(st.col_text(0));
}

void SqliteLedger::set_meta(const char *key, const std::string &value) {
  Stmt st(m_db, "INSERT INTO ledger_meta (key, value) VALUES (?1, ?2)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  st.bind(1, key).bind(2, value).exec();
}

void SqliteLedger::clear_meta(const char *key) {
  Stmt st(m_db, "DELETE FROM ledger_meta WHERE key = ?1");
  st.bind(1, key).exec();
}

std::optional<Divergence> SqliteLedger::divergence() {
  auto at = meta_int(k_diverged_at);
  if (!at) return std::nullopt;
  Divergence d;
  d.detected_at = *at;
  d.store_mark = meta_int(k_diverged_mark).value_or(0);
  d.sequence_before = meta_int(k_diverged_sequence).value_or(0);
  d.reconciled_at = meta_int(k_diverged_reconciled);
  return d;
}

IdBlockState SqliteLedger::id_blocks() {
  ReadTransaction rt(m_db);
  IdBlockState s;
  s.sequence = max_record_id();
  s.block_end = meta_int(k_block_end).value_or(0);
  s.block_intent = std::max(s.block_end, meta_int(k_block_intent).value_or(0));
  s.diverged = divergence();
  return s;
}

bool SqliteLedger::begin_id_block(int64_t expected_intent, int64_t new_intent, int64_t /*now*/) {
  Transaction tx(m_db);
  int64_t cur = std::max(meta_int(k_block_end).value_or(0), meta_int(k_block_intent).value_or(0));
  if (cur != expected_intent || new_intent <= cur) return false;
  set_meta(k_block_intent, std::to_string(new_intent));
  tx.commit();
  return true;
}

void SqliteLedger::end_id_block(int64_t end, int64_t /*now*/) {
  Transaction tx(m_db);
  if (end <= meta_int(k_block_end).value_or(0)) return;
  set_meta(k_block_end, std::to_string(end));
  tx.commit();
}

bool SqliteLedger::record_divergence(int64_t store_mark, int64_t now) {
  Transaction tx(m_db);
  int64_t seq = max_record_id();
  bool fresh = !meta_int(k_diverged_at).has_value();
  // AUTOINCREMENT issues max(seq, largest rowid) + 1: raising seq skips every id up to the
  // mark, so no stamp another copy of this ledger wrote can match a new row.
  if (store_mark > seq) {
    Stmt up(m_db, "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'file_upload'");
    if (up.bind(1, store_mark).exec() == 0) {
      Stmt ins(m_db, "INSERT INTO sqlite_sequence (name, seq) VALUES ('file_upload', ?1)");
      ins.bind(1, store_mark).exec();
    }
  }
  int64_t end = std::max({store_mark, meta_int(k_block_end).value_or(0)});
  set_meta(k_block_end, std::to_string(end));
  set_meta(k_block_intent, std::to_string(std::max(end, meta_int(k_block_intent).value_or(0))));
  if (fresh) {
    set_meta(k_diverged_at, std::to_string(now));
    set_meta(k_diverged_sequence, std::to_string(seq));
  }
  set_meta(k_diverged_mark, std::to_string(store_mark));
  clear_meta(k_diverged_reconciled); // what was reconciled before this mark does not count
  tx.commit();
  return fresh;
}

void SqliteLedger::note_reconciled(int64_t now) {
  Transaction tx(m_db);
  if (!meta_int(k_diverged_at)) return;
  set_meta(k_diverged_reconciled, std::to_string(now));
  tx.commit();
}

AcceptOutcome SqliteLedger::accept_divergence(int64_t /*now*/) {
  Transaction tx(m_db);
  auto d = divergence();
  if (!d) return AcceptOutcome::not_diverged;
  if (!d->reconciled_at) return AcceptOutcome::not_reconciled;
  for (const char *k : {k_diverged_at, k_diverged_mark, k_diverged_sequence, k_diverged_reconciled})
    clear_meta(k);
  tx.commit();
  return AcceptOutcome::accepted;
}

bool SqliteLedger::dead_letter(const TaskRecord &t, const std::string &error, int64_t now) {
  Transaction tx(m_db);
  Stmt st(m_db, "UPDATE cleanup_task SET status = 'FAILED', last_error = ?4, lease_owner = NULL,"
                " lease_until = NULL, updated_at = ?3"
                " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
  if (st.bind(1, t.id).bind(2, t.lease_version).bind(3, now).bind(4, error).exec() != 1) return false;
  tx.commit();
  return true;
}

} // namespace lodge::ledger
