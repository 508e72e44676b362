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

void SqlLedger::lock_meta() {
  m_c->lock_key("ledger_meta");
}

std::optional<std::string> SqlLedger::meta_text(const char *key) {
  auto st = q("SELECT value FROM ledger_meta WHERE key = ?1");
  st.bind(1, key);
  if (!st.step()) return std::nullopt;
  return st.col_text(0);
}

std::optional<int64_t> SqlLedger::meta_int(const char *key) {
  auto v = meta_text(key);
  if (!v) return std::nullopt;
  return util::parse_int(*v);
}

void SqlLedger::set_meta(const char *key, const std::string &value) {
  auto st = q("INSERT INTO ledger_meta (key, value) VALUES (?1, ?2)"
              " ON CONFLICT (key) DO UPDATE SET value = excluded.value");
  st.bind(1, key).bind(2, value).exec();
}

void SqlLedger::clear_meta(const char *key) {
  auto st = q("DELETE FROM ledger_meta WHERE key = ?1");
  st.bind(1, key).exec();
}

std::optional<Divergence> SqlLedger::divergence() {
  auto at = meta_int(k_diverged_at);
  if (!at) return std::nullopt;
  Divergence d;
  d.detected_at = *at;
  d.store_mark = meta_int(k_diverged_mark).value_or(0);
  d.sequence_before = meta_int(k_diverged_sequence).value_or(0);
  d.reconciled_at = meta_int(k_diverged_reconciled);
  return d;
}

IdBlockState SqlLedger::id_blocks() {
  return m_c->read([&] {
    IdBlockState s;
    s.sequence = max_record_id();
    s.block_end = meta_int(k_block_end).value_or(0);
    s.block_intent = std::max(s.block_end, meta_int(k_block_intent).value_or(0));
    s.diverged = divergence();
    return s;
  });
}

bool SqlLedger::begin_id_block(int64_t expected_intent, int64_t new_intent, int64_t /*now*/) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta();
    int64_t cur = std::max(meta_int(k_block_end).value_or(0), meta_int(k_block_intent).value_or(0));
    if (cur != expected_intent || new_intent <= cur) return false;
    set_meta(k_block_intent, std::to_string(new_intent));
    tx.commit();
    return true;
  });
}

void SqlLedger::end_id_block(int64_t end, int64_t /*now*/) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta();
    if (end <= meta_int(k_block_end).value_or(0)) return;
    set_meta(k_block_end, std::to_string(end));
    tx.commit();
  });
}

bool SqlLedger::record_divergence(int64_t store_mark, int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta();
    int64_t seq = max_record_id();
    bool fresh = !meta_int(k_diverged_at).has_value();
    // No id at or below the mark is issued again: no stamp another copy of this ledger
    // wrote can match a new row.
    m_c->raise_record_id(store_mark);
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
  });
}

void SqlLedger::note_reconciled(int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta();
    if (!meta_int(k_diverged_at)) return;
    set_meta(k_diverged_reconciled, std::to_string(now));
    tx.commit();
  });
}

AcceptOutcome SqlLedger::accept_divergence(int64_t /*now*/) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta();
    auto d = divergence();
    if (!d) return AcceptOutcome::not_diverged;
    if (!d->reconciled_at) return AcceptOutcome::not_reconciled;
    for (const char *k : {k_diverged_at, k_diverged_mark, k_diverged_sequence, k_diverged_reconciled})
      clear_meta(k);
    tx.commit();
    return AcceptOutcome::accepted;
  });
}

bool SqlLedger::dead_letter(const TaskRecord &t, const std::string &error, int64_t now) {
  return m_c->write([&](sql::Tx &tx) {
    auto st = q("UPDATE cleanup_task SET status = 'FAILED', last_error = ?4, lease_owner = NULL,"
                " lease_until = NULL, updated_at = ?3"
                " WHERE id = ?1 AND lease_version = ?2 AND status = 'PROCESSING'");
    if (st.bind(1, t.id).bind(2, t.lease_version).bind(3, now).bind(4, error).exec() != 1) return false;
    tx.commit();
    return true;
  });
}

} // namespace lodge::ledger
