// De-duplication saves storage, never a path: rows that share another row's object (the
// ledger contract, on every backend), with the cleanup path over the recording fake store.
// I5 restated for shared objects: an object is deleted only once no alive row uses it.
#include "../unit/fake_store.hpp"
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/store/store.hpp>
#include <map>

using namespace lodge;
using ledger::ReserveOutcome;
using ledger::TaskStatus;

namespace {
struct Env : test::LedgerFixture {
  test::FakeStore store;
  ops::CleanupSettings cs{1000, 100, 1000};

  // An ACTIVE row of `seed`'s content at `path`, its object in the fake store, stamped.
  ledger::FileRecord stored(const std::string &seed, const std::string &path) {
    auto r = test::request("o", seed);
    r.relative_path = path;
    auto res = l->reserve(r, now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    store::PutRequest put;
    put.key = res.record.object_key;
    put.metadata[store::meta::ledger] = l->uuid();
    put.metadata[store::meta::record] = std::to_string(res.record.id);
    REQUIRE(store.put(put));
    REQUIRE(l->confirm(res.record.id, "etag", "", now()) == test::confirm_outcome::confirmed);
    return row(res.record.id);
  }
  // What the uploader does for a file whose content `holder` holds, at `path`.
  ledger::ReserveResult share(const std::string &seed, const std::string &path,
                              std::optional<int64_t> max_files = std::nullopt) {
    auto r = test::request("o", seed);
    r.relative_path = path;
    r.max_files = max_files;
    auto first = l->reserve(r, now());
    if (first.outcome != ReserveOutcome::shareable) return first;
    r.share_with = first.record.id;
    return l->reserve(r, now());
  }
  // Claims every due task and runs it as sweep does.
  std::vector<ops::CleanupOutcome> sweep() {
    std::vector<ops::CleanupOutcome> out;
    for (const auto &t : l->claim_due(now(), 100, "w", 5'000))
      out.push_back(ops::run_claimed_task(*l, store, t, cs, clock).outcome);
    return out;
  }
};
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("a second path of stored content gets its own ACTIVE row sharing the object, with its task") {
  Env e;
  auto a = e.stored("s1", "LICENSE");
  auto b = e.share("s1", "pkg/LICENSE");
  REQUIRE(b.outcome == ReserveOutcome::shared);
  CHECK(b.record.id != a.id);
  CHECK(b.record.upload_status == ledger::FileStatus::active);
  CHECK_FALSE(b.record.is_deleted);
  CHECK(b.record.content_of == a.id);
  CHECK(b.record.stamp_id() == a.id);
  CHECK(b.record.object_key == a.object_key); // reads as the shared object's key
  CHECK(b.record.relative_path == "pkg/LICENSE");
  auto t = e.task_of(b.record.id);
  CHECK(t.object_key == a.object_key);
  CHECK(t.status == TaskStatus::ignored);
  // Each path restores by itself.
  CHECK(e.l->find_by_path("o", "", "LICENSE").at(0).id == a.id);
  CHECK(e.l->find_by_path("o", "", "pkg/LICENSE").at(0).id == b.record.id);
  // The same path again is a plain duplicate of its own row; a third path shares the
  // writer, never a sharer (content_of always names the row that wrote the object).
  auto again = e.l->reserve(
      [&] {
        auto r = test::request("o", "s1");
        r.relative_path = "pkg/LICENSE";
        return r;
      }(),
      e.now());
  CHECK(again.outcome == ReserveOutcome::duplicate);
  CHECK(again.record.id == b.record.id);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto c = e.share("s1", "docs/LICENSE");
  REQUIRE(c.outcome == ReserveOutcome::shared);
  CHECK(c.record.content_of == a.id);
}

TEST_CASE("the quota counts every path, shared or not") {
  Env e;
  (void)e.stored("q1", "a.txt");
  CHECK(e.share("q1", "b.txt", 2).outcome == ReserveOutcome::shared);
  CHECK(e.share("q1", "c.txt", 2).outcome == ReserveOutcome::quota_exceeded);
}

TEST_CASE("share_gone when the checked row was deleted before the share committed") {
  Env e;
  auto a = e.stored("g1", "a.txt");
  auto r = test::request("o", "g1");
  r.relative_path = "b.txt";
  auto first = e.l->reserve(r, e.now());
  REQUIRE(first.outcome == ReserveOutcome::shareable);
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  r.share_with = first.record.id;
  CHECK(e.l->reserve(r, e.now()).outcome == ReserveOutcome::share_gone);
  // Asked afresh, nothing alive holds the content: a new row, a new object.
  r.share_with.reset();
  CHECK(e.l->reserve(r, e.now()).outcome == ReserveOutcome::reserved);
}

TEST_CASE("a shared object is deleted only after its last path: the writer first, or a sharer first") {
  for (bool writer_first : {true, false}) {
    CAPTURE(writer_first);
    Env e;
    auto a = e.stored("d1", "a.txt");
    auto b = e.share("d1", "b.txt").record;
    auto c = e.share("d1", "c.txt").record;
    const auto first = writer_first ? a.id : b.id;
    const auto second = writer_first ? b.id : a.id;
    REQUIRE(e.l->soft_delete(first, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
    for (auto o : e.sweep())
      CHECK(o == ops::CleanupOutcome::ignored);
    CHECK(e.store.has(a.object_key));
    REQUIRE(e.l->soft_delete(second, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
    for (auto o : e.sweep())
      CHECK(o == ops::CleanupOutcome::ignored);
    CHECK(e.store.has(a.object_key));
    CHECK(e.store.removed().empty());
    // The last alive path goes: its task deletes the object, whose stamp names the writer.
    REQUIRE(e.l->soft_delete(c.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
    auto last = e.sweep();
    REQUIRE(last.size() == 1);
    CHECK(last[0] == ops::CleanupOutcome::deleted);
    CHECK_FALSE(e.store.has(a.object_key));
  }
}

TEST_CASE("rows_by_key: a deleted writer stands for its alive sharers; an expiry is not a sharer") {
  Env e;
  auto a = e.stored("k1", "a.txt");
  auto b = e.share("k1", "b.txt").record;
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  auto r = test::request("o", "k2");
  r.relative_path = "x.txt";
  r.expires_at = e.now() + 86'400'000;
  auto x = e.l->reserve(r, e.now());
  REQUIRE(x.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->confirm(x.record.id, "etag", "", e.now()) == test::confirm_outcome::confirmed);
  std::map<int64_t, int64_t> sharers;
  e.l->rows_by_key("", "", [&](const ledger::FileRecord &row) {
    sharers[row.id] = row.alive_sharers;
    return true;
  });
  CHECK(sharers.at(a.id) == 1); // reconcile must not take its object for a dead row's
  CHECK(sharers.at(x.record.id) == 0);
  CHECK(sharers.count(b.id) == 0); // a sharer has no object of its own
}

TEST_CASE("rows_by_key: a deleted writer counts the live tasks of the paths that shared its object") {
  Env e;
  auto a = e.stored("p1", "a.txt");
  auto b = e.share("p1", "b.txt").record;
  auto sharer_tasks = [&] {
    int64_t n = -1;
    e.l->rows_by_key("", "", [&](const ledger::FileRecord &row) {
      if (row.id == a.id) n = row.live_sharer_tasks;
      return true;
    });
    return n;
  };
  CHECK(sharer_tasks() == 0); // the sharer's task is IGNORED while it is ACTIVE
  // The writer deleted and swept while b still uses the object: its task ends IGNORED.
  REQUIRE(e.l->soft_delete(a.id, "o", e.now(), 0, 3) == ledger::DeleteOutcome::deleted);
  e.sweep();
  CHECK(e.l->find_task_for(a.id)->status == TaskStatus::ignored);
  // The last path deleted, its grace still running: its pending task owns the object, which
  // reconcile must not take for a dead row's leftover.
  REQUIRE(e.l->soft_delete(b.id, "o", e.now(), 60'000, 3) == ledger::DeleteOutcome::deleted);
  CHECK(sharer_tasks() == 1);
  e.clock.t += 120'000;
  auto done = e.sweep();
  REQUIRE(done.size() == 1);
  CHECK(done[0] == ops::CleanupOutcome::deleted);
  CHECK(sharer_tasks() == 0);
}

TEST_CASE("upload --replace of a path with content stored elsewhere: the path serves the new content") {
  Env e;
  auto a = e.stored("r1", "a.txt");
  auto old_b = e.stored("r2", "b.txt");
  auto r = test::request("o", "r1");
  r.relative_path = "b.txt";
  r.retire = ledger::Retire{0, 3};
  auto first = e.l->reserve(r, e.now());
  REQUIRE(first.outcome == ReserveOutcome::shareable);
  r.share_with = first.record.id;
  auto b = e.l->reserve(r, e.now());
  REQUIRE(b.outcome == ReserveOutcome::shared);
  auto at_b = e.l->find_by_path("o", "", "b.txt");
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].id == b.record.id);
  CHECK(at_b[0].sha256 == a.sha256);
  CHECK(e.row(old_b.id).is_deleted);
  // The old content's object goes with its task; the shared one stays.
  auto done = e.sweep();
  REQUIRE(done.size() == 1);
  CHECK(done[0] == ops::CleanupOutcome::deleted);
  CHECK_FALSE(e.store.has(old_b.object_key));
  CHECK(e.store.has(a.object_key));
}
