// Re-runs verified in bulk: the run's listing cache proves would-be duplicates' objects
// present with a listing per shard instead of a HEAD each, and proves nothing it did not
// see exactly as the row recorded it (the uploader then HEADs, as before).
#include "fake_store.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <lodge/crypto/random.hpp>
#include <lodge/ops/upload/listing_cache.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <set>

using namespace lodge;

namespace {
const std::string k_ledger = "ledger-uuid";

// A row of owner "o" and its object in `store`, stamped as lodge stamps it.
ledger::FileRecord stored(test::FakeStore &store, int64_t id, uint64_t size = 10) {
  ledger::FileRecord rec;
  rec.id = id;
  rec.owner_id = "o";
  rec.relative_path = "f" + std::to_string(id);
  rec.object_key = "o/" + crypto::random_uuid() + "/" + rec.relative_path;
  rec.size = static_cast<int64_t>(size);
  store::PutRequest req;
  req.key = rec.object_key;
  req.body.size = size;
  req.metadata = {{store::meta::ledger, k_ledger}, {store::meta::record, std::to_string(id)}};
  auto put = store.put(req);
  REQUIRE(put);
  rec.etag = put->etag;
  return rec;
}

std::vector<ledger::FileRecord> stored_many(test::FakeStore &store, int n) {
  std::vector<ledger::FileRecord> out;
  for (int i = 1; i <= n; ++i)
    out.push_back(stored(store, i, 1));
  return out;
}
} // namespace

TEST_CASE("listing cache: a prefix of a few thousand objects is proven by one listing, no HEAD") {
  test::FakeStore store;
  auto rows = stored_many(store, 3000);
  ops::ListingCache cache;
  for (const auto &r : rows)
    CHECK(cache.proves(store, r, k_ledger));
  CHECK(store.count("list") == 1);
  CHECK(store.count("head") == 0);
  auto c = cache.counts();
  CHECK(c.proven == 3000);
  CHECK(c.unproven == 0);
  CHECK(c.keys == 3000);
}

TEST_CASE("listing cache: what the listing does not show as the row recorded it is left to HEAD") {
  test::FakeStore store;
  auto rows = stored_many(store, 7);
  store.forget(rows[0].object_key);                                   // deleted behind lodge's back
  rows[1].size += 1;                                                  // another size
  rows[2].etag = "\"other\"";                                         // another object at the key
  store.set_metadata(rows[3].object_key, store::meta::record, "999"); // stamped for another row
  store.set_metadata(rows[4].object_key, store::meta::ledger, "another-ledger");
  rows[6].etag.reset(); // a row that recorded none: nothing to compare the listing's with
  ops::ListingCache cache;
  for (int i : {0, 1, 2, 3, 4, 6})
    CHECK_FALSE(cache.proves(store, rows[i], k_ledger));
  CHECK(cache.proves(store, rows[5], k_ledger));
  // A row's quoted ETag (as S3 answers a PUT) is the listing's.
  rows[5].etag = "\"" + *rows[5].etag + "\"";
  CHECK(cache.proves(store, rows[5], k_ledger));
  // Written after the listing (by this very run): not proven by it, HEADed.
  auto later = stored(store, 8);
  CHECK_FALSE(cache.proves(store, later, k_ledger));
  CHECK(store.count("list") == 1);
}

TEST_CASE("listing cache: a key not of the row's own form is never listed for") {
  test::FakeStore store;
  auto rec = stored(store, 1);
  rec.run_prefix = "builds/1"; // the key lacks it: an object shared from another prefix's row
  ops::ListingCache cache;
  CHECK_FALSE(cache.proves(store, rec, k_ledger));
  CHECK(store.count("list") == 0);
}

TEST_CASE("listing cache: a failed listing proves nothing and is tried again") {
  test::FakeStore store;
  auto rows = stored_many(store, 3);
  store.fail("list", Error(Errc::storage_unavailable, "down"), 1);
  ops::ListingCache cache;
  CHECK_FALSE(cache.proves(store, rows[0], k_ledger));
  CHECK(cache.proves(store, rows[1], k_ledger));
  CHECK(store.count("list") == 2); // the failed one, then the one that listed
}

TEST_CASE("listing cache: a large prefix is listed by shards, each once it is worth its pages") {
  test::FakeStore store;
  auto rows = stored_many(store, 40'000);
  ops::ListingCache cache;
  int64_t proven = 0;
  for (const auto &r : rows)
    proven += cache.proves(store, r, k_ledger) ? 1 : 0;
  auto c = cache.counts();
  // The first listing stopped after k_shard_pages_max pages; the rest went by shards of
  // the uuid's first digit (about 2,500 keys: 3 pages each, so 3 asks before each listing).
  CHECK(c.listings <= 17);
  CHECK(c.unproven <= 16 * 3);
  CHECK(proven == 40'000 - c.unproven);
  CHECK(store.count("list") == static_cast<size_t>(c.listings));
}

TEST_CASE("listing cache: a few files in a large prefix are HEADed, not listed for") {
  test::FakeStore store;
  auto rows = stored_many(store, 40'000);
  ops::ListingCache cache;
  // The first ask lists k_shard_pages_max pages (16,000 keys: uuids up to about '6').
  (void)cache.proves(store, rows[0], k_ledger);
  REQUIRE(store.count("list") == 1);
  // Beyond them, a shard of the first digit is about 3 pages: one file's ask is not worth it.
  std::set<char> seen;
  for (const auto &r : rows) {
    const char digit = r.object_key[2];
    if (digit < 'a' || seen.contains(digit)) continue;
    seen.insert(digit);
    CHECK_FALSE(cache.proves(store, r, k_ledger));
  }
  CHECK(seen.size() == 6);
  CHECK(store.count("list") == 1);
}

TEST_CASE("uploader: a duplicate's object proven by the run's listing is not HEADed; a missing one is") {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.listings = std::make_shared<ops::ListingCache>();
  auto upload = [&](const std::string &name) {
    test::write_file(dir.file(name), "same bytes");
    ops::Uploader up(l, store, s, util::system_clock());
    return up.upload(dir.file(name));
  };
  auto a = upload("a.txt");
  REQUIRE(a.outcome == ops::UploadOutcome::active);
  auto again = upload("a.txt");
  CHECK(again.outcome == ops::UploadOutcome::duplicate);
  auto b = upload("b.txt");
  CHECK(b.outcome == ops::UploadOutcome::duplicate);
  CHECK(store.count("head") == 0);
  CHECK(store.count("list") == 1);
  // Deleted behind lodge's back: the listing (made before) would still show it, so a new
  // run's cache is asked; it does not show it, and the HEAD finds it missing.
  store.forget(l.row(*a.id).object_key);
  s.listings = std::make_shared<ops::ListingCache>();
  auto anew = upload("a.txt");
  CHECK(anew.outcome == ops::UploadOutcome::active);
  CHECK(anew.id != a.id);
  CHECK(l.row(*a.id).failure_reason == "object missing from the store");
  CHECK(store.count("head") >= 1);
}
