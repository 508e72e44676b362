#include <algorithm>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/util/log.hpp>
#include <nlohmann/json.hpp>

namespace lodge::ops {
namespace {

// Rounds of read, compare, conditional write before giving up: each lost round means
// another process advanced meanwhile, so a handful is plenty.
constexpr int k_attempts = 16;

std::string marker_json(const std::string &uuid, int64_t high_water, int64_t now) {
  return nlohmann::json{{"ledger", uuid}, {"high_water", high_water}, {"updated_at", now}}.dump() + "\n";
}

void say_diverged(const ledger::LedgerReports &l, int64_t mark, int64_t sequence) {
  util::log::warn(
      "ledger " + l.location() + " has DIVERGED from the store: the store's id marker says ids up to #" +
      std::to_string(mark) + " were reserved, but this ledger's last is #" + std::to_string(sequence) +
      " (restored from a backup, or copied?). New ids start after #" + std::to_string(mark) +
      "; repair, sweep and reconcile --apply refuse until `lodge reconcile` and then "
      "`lodge init --accept-diverged`");
}

// A mark above everything the ledger reserved (intent included: an advance of another
// process records its intent before writing the store, and the ledger is read after the
// marker) can only come from another copy of this ledger.
bool handle_divergence(ledger::MarkLedger &l, const IdMarker &m, const ledger::IdBlockState &st,
                       int64_t now) {
  if (m.high_water <= st.block_intent) return false;
  if (l.record_divergence(m.high_water, now)) say_diverged(l, m.high_water, st.sequence);
  return true;
}

} // namespace

std::string metadata_prefix(const store::ObjectStore &s) {
  return s.key_prefix() + ".lodge/";
}

std::string id_marker_key(const store::ObjectStore &s, const std::string &uuid) {
  return metadata_prefix(s) + uuid;
}

Result<IdMarker> read_id_marker(store::ObjectStore &s, const std::string &uuid) {
  const auto key = id_marker_key(s, uuid);
  auto got = s.get_small(key);
  if (!got && got.error().code == Errc::not_found) return IdMarker{};
  if (!got) return got.error();
  auto j = nlohmann::json::parse(got->bytes, nullptr, false);
  auto bad = [&](const std::string &why) {
    return Error(Errc::metadata_corrupt,
                 "the id marker " + key + " " + why + "; lodge will not guess its ids");
  };
  if (j.is_discarded() || !j.is_object()) return bad("is not a JSON object");
  auto hw = j.find("high_water");
  if (hw == j.end() || !hw->is_number_integer() || hw->get<int64_t>() < 0)
    return bad("has no non-negative integer 'high_water'");
  auto owner = j.find("ledger");
  if (owner == j.end() || !owner->is_string() || owner->get<std::string>() != uuid)
    return bad("does not name ledger " + uuid);
  return IdMarker{true, hw->get<int64_t>(), got->tag};
}

int64_t IdBlocks::block_end() const {
  std::lock_guard lock(m_mutex);
  return m_end;
}

Status IdBlocks::advance(ledger::MarkLedger &l, store::ObjectStore &s, int64_t need, bool fresh,
                         const util::Clock &clock) {
  std::lock_guard lock(m_mutex);
  return advance_locked(l, s, need, fresh, clock);
}

Status IdBlocks::advance_locked(ledger::MarkLedger &l, store::ObjectStore &s, int64_t need, bool fresh,
                                const util::Clock &clock) {
  for (int attempt = 0; attempt < k_attempts; ++attempt) {
    int64_t now = clock.now_ms();
    // The marker first, then the ledger: see handle_divergence.
    auto m = read_id_marker(s, l.uuid());
    if (!m) return m.error();
    auto st = l.id_blocks();
    if (handle_divergence(l, m.value(), st, now)) continue; // the sequence moved past the mark
    if (!fresh && st.block_end >= need) {
      m_end = st.block_end;
      return ok_status();
    }
    int64_t target = st.block_intent;
    if (fresh || target < need) {
      target = std::max({st.block_intent, st.sequence, m->high_water, need - 1}) + m_block;
      // The ledger's transaction decides who advances; a loser reads again.
      if (l.begin_id_block(st.block_intent, target, now) == ledger::BlockOutcome::moved) continue;
      fresh = false;
      need = target; // ours now: finished even if a conditional write below loses a round
    }
    // Here the ledger's intent is `target` (ours, or another process's that we finish):
    // the store's marker goes up to it, conditionally on the version read.
    if (m->high_water < target) {
      auto put = s.put_small(id_marker_key(s, l.uuid()), marker_json(l.uuid(), target, now),
                             m->exists ? m->tag : std::string());
      if (!put && put.error().code == Errc::precondition_failed) continue;
      if (!put) return put.error();
    }
    l.end_id_block(target, now);
    m_end = std::max(m_end, target);
    if (m_end >= need) return ok_status();
  }
  return Error(Errc::ledger_locked, "could not advance the id marker " + id_marker_key(s, l.uuid()) + " in " +
                                        std::to_string(k_attempts) +
                                        " rounds (other processes kept winning)");
}

Result<ledger::ReserveResult> IdBlocks::reserve(ledger::ReserveLedger &l, store::ObjectStore &s,
                                                ledger::ReserveRequest req, int64_t now,
                                                const util::Clock &clock) {
  for (int attempt = 0; attempt < k_attempts; ++attempt) {
    {
      std::lock_guard lock(m_mutex);
      if (!m_opened) {
        if (auto a = advance_locked(l, s, 0, true, clock); !a) return a.error();
        m_opened = true;
      }
      req.id_limit = m_end;
    }
    auto res = l.reserve(req, now);
    if (res.outcome != ledger::ReserveOutcome::id_limit_reached) return res;
    std::lock_guard lock(m_mutex);
    if (m_end <= *req.id_limit)
      if (auto a = advance_locked(l, s, *req.id_limit + 1, false, clock); !a) return a.error();
  }
  return Error(Errc::ledger_locked, "could not reserve a record id inside the id marker's block in " +
                                        std::to_string(k_attempts) + " rounds");
}

std::vector<Result<ledger::ReserveResult>> IdBlocks::reserve_batch(ledger::ReserveLedger &l,
                                                                   store::ObjectStore &s,
                                                                   std::vector<ledger::ReserveRequest> reqs,
                                                                   int64_t now, const util::Clock &clock) {
  {
    std::lock_guard lock(m_mutex);
    if (!m_opened) {
      if (auto a = advance_locked(l, s, 0, true, clock); !a)
        return std::vector<Result<ledger::ReserveResult>>(reqs.size(), a.error());
      m_opened = true;
    }
    for (auto &req : reqs)
      req.id_limit = m_end;
  }
  auto out = l.reserve_batch(reqs, now);
  for (size_t i = 0; i < out.size() && i < reqs.size(); ++i)
    if (out[i] && out[i].value().outcome == ledger::ReserveOutcome::id_limit_reached)
      out[i] = reserve(l, s, reqs[i], now, clock); // rolled back: the block advances, and it goes alone
  return out;
}

Result<std::optional<ledger::Divergence>> check_divergence(ledger::MarkLedger &l, store::ObjectStore &s,
                                                           const util::Clock &clock) {
  auto m = read_id_marker(s, l.uuid());
  if (!m) return m.error();
  auto st = l.id_blocks();
  if (handle_divergence(l, m.value(), st, clock.now_ms())) st = l.id_blocks();
  return st.diverged;
}

void refuse_if_diverged(const std::optional<ledger::Divergence> &d, const std::string &what) {
  if (!d) return;
  std::string next = d->reconciled_at
                         ? "run `lodge init --accept-diverged` once the report was dealt with"
                         : "run `lodge reconcile` (it only reports), then `lodge init --accept-diverged`";
  throw LodgeError(
      Errc::ledger_diverged,
      what + " refused: the ledger's history diverged from the store's (the store's id marker is at #" +
          std::to_string(d->store_mark) + ", this ledger was at #" + std::to_string(d->sequence_before) +
          "): it was restored from a backup or copied; " + next);
}

} // namespace lodge::ops
