// The id blocks behind the store's id marker: one marker PUT per block, never an id above
// the marker the store holds, and a restored ledger moving past the mark before issuing.
#include "fake_store.hpp"
#include "support.hpp"

#include <filesystem>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {
struct FixedClock final : util::Clock {
  int64_t t = 1'700'000'000'000;
  [[nodiscard]] int64_t now_ms() const override { return t; }
};

std::unique_ptr<ledger::Ledger> open_at(const std::string &path) {
  ledger::OpenOptions o;
  o.location = path;
  o.create = true;
  return ledger::open_ledger(o);
}

ledger::ReserveRequest request(int n) {
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.original_name = "f" + std::to_string(n) + ".txt";
  r.media_type = "text/plain";
  r.sha256 = crypto::sha256_hex("content " + std::to_string(n));
  r.size = 10;
  r.policy = "default";
  r.deadline_ms = 60'000;
  r.grace_ms = 1'000;
  return r;
}

// The high-water mark the fake store holds for the ledger (0 when there is no marker).
int64_t store_mark(test::FakeStore &s, const ledger::Ledger &l) {
  auto got = s.get_small(ops::id_marker_key(s, l.uuid()));
  if (!got) return 0;
  return nlohmann::json::parse(got->bytes).at("high_water").get<int64_t>();
}

int64_t reserve_one(ops::IdBlocks &blocks, ledger::Ledger &l, test::FakeStore &s, int n,
                    const FixedClock &c) {
  auto r = blocks.reserve(l, s, request(n), c.t, c);
  REQUIRE(r.ok());
  REQUIRE(r->outcome == ledger::ReserveOutcome::reserved);
  return r->record.id;
}
} // namespace

TEST_CASE("the id marker advances one PUT per block, before any id of the block is issued") {
  test::TempDir dir;
  auto l = open_at(dir.file("l.db"));
  test::FakeStore s;
  FixedClock c;
  ops::IdBlocks blocks(10);
  for (int n = 1; n <= 25; ++n) {
    int64_t id = reserve_one(blocks, *l, s, n, c);
    CHECK(id == n);
    CHECK(id <= store_mark(s, *l)); // never an id above the marker the store holds
    CHECK(l->id_blocks().block_end <= store_mark(s, *l));
  }
  // The run's first reserve opened block 1..10; ids 11 and 21 each needed one more.
  CHECK(s.count("put_small") == 3);
  CHECK(store_mark(s, *l) == 30);
  CHECK(!l->id_blocks().diverged);

  // The next run opens a block of its own, whatever is left of the last one.
  ops::IdBlocks next_run(10);
  CHECK(reserve_one(next_run, *l, s, 26, c) == 26);
  CHECK(s.count("put_small") == 4);
  CHECK(store_mark(s, *l) == 40);
}

TEST_CASE("a ledger restored from a copy moves past the store's mark before issuing an id") {
  test::TempDir dir;
  test::FakeStore s;
  FixedClock c;
  std::string uuid;
  {
    auto l = open_at(dir.file("l.db"));
    ops::IdBlocks run1(10);
    for (int n = 1; n <= 3; ++n)
      (void)reserve_one(run1, *l, s, n, c);
    uuid = l->uuid();
  }
  std::filesystem::copy_file(dir.file("l.db"), dir.file("backup.db"));
  {
    auto l = open_at(dir.file("l.db"));
    ops::IdBlocks run2(10);
    for (int n = 4; n <= 6; ++n)
      (void)reserve_one(run2, *l, s, n, c); // ids 4..6, after the backup
  }
  auto restored = open_at(dir.file("backup.db"));
  REQUIRE(restored->uuid() == uuid);
  int64_t mark = store_mark(s, *restored);
  CHECK(mark == 20);
  ops::IdBlocks run3(10);
  int64_t id = reserve_one(run3, *restored, s, 7, c);
  CHECK(id > mark); // ids 4..6 (and the rest of their block) are never issued again
  CHECK(id <= store_mark(s, *restored));
  auto st = restored->id_blocks();
  REQUIRE(st.diverged);
  CHECK(st.diverged->store_mark == 20);
  CHECK(st.diverged->sequence_before == 3);
  CHECK(!st.diverged->reconciled_at);
  CHECK(restored->accept_divergence(c.t) == ledger::AcceptOutcome::not_reconciled);
  restored->note_reconciled(c.t);
  CHECK(restored->accept_divergence(c.t) == ledger::AcceptOutcome::accepted);
  CHECK(!restored->id_blocks().diverged);
}

TEST_CASE("an advance another process has under way is not a divergence, and a lost race reads again") {
  test::TempDir dir;
  auto l = open_at(dir.file("l.db"));
  test::FakeStore s;
  FixedClock c;
  ops::IdBlocks blocks(10);
  (void)reserve_one(blocks, *l, s, 1, c); // marker 10
  // Another process: its intent (to 20) is in the ledger and the store already holds it.
  REQUIRE(l->begin_id_block(10, 20, c.t) == ledger::BlockOutcome::begun);
  s.set_small(ops::id_marker_key(s, l->uuid()),
              nlohmann::json{{"ledger", l->uuid()}, {"high_water", 20}, {"updated_at", 0}}.dump());
  // A third writer slips in between our read and our write once: the conditional PUT loses.
  s.fail("put_small", Error(Errc::precondition_failed, "changed meanwhile"), 1);
  ops::IdBlocks other(10);
  int64_t id = reserve_one(other, *l, s, 2, c);
  CHECK(id == 2);
  CHECK(!l->id_blocks().diverged);
  CHECK(store_mark(s, *l) == 30);
  CHECK(l->id_blocks().block_end == 30);
}

TEST_CASE("no row is reserved when the marker cannot be written") {
  test::TempDir dir;
  auto l = open_at(dir.file("l.db"));
  test::FakeStore s;
  FixedClock c;
  s.fail("put_small", Error(Errc::storage_unavailable, "PUT: no answer"));
  ops::IdBlocks blocks(10);
  auto r = blocks.reserve(*l, s, request(1), c.t, c);
  REQUIRE(!r.ok());
  CHECK(r.error().code == Errc::storage_unavailable);
  CHECK(l->max_record_id() == 0);
  ledger::FileQuery all;
  all.owner = "o";
  all.include_dead = true;
  CHECK(l->list_files(all).empty());
}
