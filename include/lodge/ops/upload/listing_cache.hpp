#pragma once
// Re-runs verified in bulk: a would-be duplicate's object (the stat cache's unchanged file,
// a de-duplicated content) is proven present by the store's listing instead of one HEAD
// per file. Shared by a run's workers; the listing is made once per shard and kept for the
// run.
//
// A key is <root>/<owner>/[<run_prefix>/]<uuid>/<path>, the uuid random: one prefix's keys
// are spread evenly over the uuid's first hex digits. A shard is that prefix and the uuid's
// first `depth` digits (depth 0: the whole prefix; 1: 16 shards). A shard is listed once it
// has been asked about as many times as its listing is expected to take pages (1,000 keys
// a page); until then the caller HEADs. A listing stops after k_shard_pages_max pages: the
// keys it saw stay proven, and later shards are made deeper (from how far into the uuid
// space those pages reached), so a prefix of a million objects is never listed whole for a
// few files, and one of ten thousand takes ten requests.
//
// The listing only proves: a key it shows with the row's size and ETag (and stamp, where
// the listing shows metadata) is there; a row without an ETag is never proven by it. A key it does not show,
// or shows otherwise, is asked of HEAD as before (the object may have been written by this very run after its
// shard was listed, or be another one): a missing object is only ever declared so by a HEAD.

#include <array>
#include <condition_variable>
#include <cstdint>
#include <lodge/ledger/records.hpp>
#include <lodge/store/store.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::ops {

class ListingCache {
public:
  // Keys a listing returns per request (S3's ListObjectsV2 page).
  static constexpr int64_t k_page_keys = 1000;
  // A shard's listing stops after this many pages (and later shards are made deeper).
  static constexpr int64_t k_shard_pages_max = 16;
  // The deepest shard: the uuid's first group.
  static constexpr size_t k_max_depth = 8;

  // Whether the store's listing shows `rec`'s object (rec.object_key) as the row recorded
  // it: its size, its ETag (a row or a listing without one proves nothing), and the stamp
  // (ledger `ledger_uuid`, the record that wrote it) where the listing carries metadata.
  // false: not proven, the caller HEADs. Lists the key's shard with `store` (the caller's
  // connection) when it is due; a listing that fails proves nothing (and is tried again
  // later). Thread-safe.
  [[nodiscard]] bool proves(store::ObjectStore &store, const ledger::FileRecord &rec,
                            const std::string &ledger_uuid);

  struct Counts {
    int64_t proven = 0;   // answered by a listing
    int64_t unproven = 0; // left to HEAD
    int64_t listings = 0; // shards listed
    int64_t keys = 0;     // keys those listings returned
  };
  [[nodiscard]] Counts counts() const;

private:
  // What a listing shows of one object, as 16 bytes of a SHA-256: its key (after the shard's
  // prefix), size, ETag and stamp; a row is proven by the same digest of what it recorded.
  // 16 bytes an object: a million keys take 16 MB.
  using Seen = std::array<unsigned char, 16>;
  [[nodiscard]] static Seen seen(std::string_view rest, uint64_t size, const std::string &etag,
                                 const std::string &stamp);
  struct Shard {
    int64_t asked = 0;
    bool listing = false;  // a worker is listing it now
    bool listed = false;   // seen holds its listing
    bool complete = false; // the listing reached its end (else it stopped after last_key)
    bool stamps = false;   // the listing showed metadata (a row's digest then has its stamp)
    std::string last_key;
    std::vector<Seen> seen; // sorted
  };
  // The listing of `prefix`, up to k_shard_pages_max pages (made without the lock held).
  static Result<Shard> list_shard(store::ObjectStore &store, const std::string &prefix);
  // Later shards' depth and expected pages, from `s`, listed at depth `depth` (its uuid
  // digits start at key offset `uuid_at`).
  void learn(const Shard &s, size_t depth, size_t uuid_at);
  bool unproven();

  mutable std::mutex m_mu;
  std::condition_variable m_listed;
  std::map<std::string, std::unique_ptr<Shard>> m_shards; // by shard prefix
  size_t m_depth = 0;
  int64_t m_pages_expected = 1; // pages a shard's listing is expected to take
  Counts m_counts;
};

} // namespace lodge::ops
