#include <algorithm>
#include <cmath>
#include <cstring>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/upload/listing_cache.hpp>

namespace lodge::ops {

namespace {

constexpr size_t k_uuid_len = 36;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Where the uuid of rec's object key starts: the key must be the row's own form,
// <root>/<owner>/[<run_prefix>/]<uuid>/..., its uuid's first group hex. nullopt otherwise
// (an object shared from another owner's or prefix's row, a key of an older form).
std::optional<size_t> uuid_offset(const std::string &root, const ledger::FileRecord &rec) {
  std::string base = root + rec.owner_id + "/";
  if (!rec.run_prefix.empty()) base += rec.run_prefix + "/";
  const std::string &key = rec.object_key;
  if (key.size() <= base.size() + k_uuid_len || key.compare(0, base.size(), base) != 0 ||
      key[base.size() + k_uuid_len] != '/')
    return std::nullopt;
  for (size_t i = 0; i < ListingCache::k_max_depth; ++i)
    if (hex_value(key[base.size() + i]) < 0) return std::nullopt;
  return base.size();
}

std::string unquoted(const std::string &etag) {
  std::string s = etag;
  std::erase(s, '"');
  return s;
}

// How far into the uuid space a key lies, from its hex digits at `at` (0 to 1).
double uuid_fraction(const std::string &key, size_t at) {
  double f = 0;
  double scale = 1.0 / 16;
  for (size_t i = at; i < std::min(key.size(), at + 4); ++i) {
    const int v = hex_value(key[i]);
    if (v < 0) break;
    f += v * scale;
    scale /= 16;
  }
  return f;
}

// The stamp as a listing's metadata carries it, in the one form a row's is written in.
std::string stamp_text(const std::string &ledger, int64_t record_id) {
  return ledger + "\n" + std::to_string(record_id);
}

} // namespace

ListingCache::Seen ListingCache::seen(std::string_view rest, uint64_t size, const std::string &etag,
                                      const std::string &stamp) {
  crypto::Sha256 h;
  const std::string head = std::to_string(rest.size()) + "\n";
  h.update(head);
  h.update(rest);
  h.update("\n" + std::to_string(size) + "\n" + std::to_string(etag.size()) + "\n" + etag + "\n" + stamp);
  const auto d = h.finish();
  Seen out{};
  std::memcpy(out.data(), d.data(), out.size());
  return out;
}

Result<ListingCache::Shard> ListingCache::list_shard(store::ObjectStore &store, const std::string &prefix) {
  Shard s;
  s.complete = true;
  int64_t n = 0;
  auto listed = store.list(prefix, [&](const store::ObjectInfo &o) {
    const std::string etag = unquoted(o.etag);
    if (!etag.empty()) { // without one, the object is HEADed
      std::string stamp;
      if (!o.metadata.empty()) {
        s.stamps = true;
        const auto st = store::read_stamp(o.metadata);
        stamp = stamp_text(st.ledger.value_or(""), st.record_id);
      }
      s.seen.push_back(seen(std::string_view(o.key).substr(prefix.size()), o.size, etag, stamp));
    }
    s.last_key = o.key;
    if (++n < k_shard_pages_max * k_page_keys) return true;
    s.complete = false; // stopped here: what lies beyond is for deeper shards
    return false;
  });
  if (!listed) return listed.error();
  std::sort(s.seen.begin(), s.seen.end());
  return s;
}

void ListingCache::learn(const Shard &s, size_t depth, size_t uuid_at) {
  auto n = static_cast<double>(s.seen.size());
  if (!s.complete) {
    // The pages reached this far into the shard's part of the uuid space.
    const double reached = uuid_fraction(s.last_key, uuid_at + depth);
    n = reached > 0 ? n / reached : n * 16;
  }
  size_t d = depth;
  const auto most = static_cast<double>(k_shard_pages_max * k_page_keys);
  while (n > most && d < k_max_depth) {
    n /= 16;
    ++d;
  }
  if (!s.complete) d = std::max(d, depth + 1);
  m_depth = std::max(m_depth, d);
  m_pages_expected =
      std::max<int64_t>(1, static_cast<int64_t>(std::ceil(n / static_cast<double>(k_page_keys))));
}

bool ListingCache::unproven() {
  ++m_counts.unproven;
  return false;
}

bool ListingCache::proves(store::ObjectStore &store, const ledger::FileRecord &rec,
                          const std::string &ledger_uuid) {
  const auto at = uuid_offset(store.key_prefix(), rec);
  std::unique_lock lk(m_mu);
  if (!at || !rec.etag || unquoted(*rec.etag).empty()) return unproven(); // nothing to prove it by
  const std::string &key = rec.object_key;
  size_t depth = 0;
  while (depth <= k_max_depth) {
    const std::string prefix = key.substr(0, *at + depth);
    auto it = m_shards.find(prefix);
    Shard *s = it == m_shards.end() ? nullptr : it->second.get();
    if (s && s->listing) {
      m_listed.wait(lk, [s] { return !s->listing; });
      continue; // read what it found
    }
    if (s && s->listed) {
      const std::string stamp = s->stamps ? stamp_text(ledger_uuid, rec.stamp_id()) : std::string();
      const Seen want = seen(std::string_view(key).substr(prefix.size()), static_cast<uint64_t>(rec.size),
                             unquoted(rec.etag.value_or("")), stamp);
      if (std::binary_search(s->seen.begin(), s->seen.end(), want)) {
        ++m_counts.proven;
        return true;
      }
      // Not there when listed, or otherwise: HEAD decides (it may have been written since).
      if (s->complete || key <= s->last_key) return unproven();
      ++depth; // beyond where the listing stopped: a deeper shard's
      continue;
    }
    if (depth < m_depth) {
      ++depth;
      continue;
    }
    if (!s) s = m_shards.emplace(prefix, std::make_unique<Shard>()).first->second.get();
    if (++s->asked < m_pages_expected) return unproven(); // not yet worth its pages
    s->listing = true;
    lk.unlock();
    auto listed = list_shard(store, prefix);
    lk.lock();
    s->listing = false;
    m_listed.notify_all();
    if (!listed) {
      s->asked = 0; // tried again after as many asks
      return unproven();
    }
    ++m_counts.listings;
    m_counts.keys += static_cast<int64_t>(listed->seen.size());
    const int64_t asked = s->asked;
    *s = std::move(listed.value());
    s->asked = asked;
    s->listed = true;
    learn(*s, depth, *at);
  }
  return unproven();
}

ListingCache::Counts ListingCache::counts() const {
  std::lock_guard lk(m_mu);
  return m_counts;
}

} // namespace lodge::ops
