// `lodge get --prefix`'s rows (ops::scan_active_under_prefix): the newest alive ACTIVE row
// per restore path, in byte order of the path, streamed from pages of the ledger's rows in
// path order, whatever the page size (a path's rows split across pages included); rows
// without a relative path restore to their original name and merge with a path of that
// name. The same answer as active_under_prefix, which collects it.
#include "support/fake_ledger.hpp"

#include <doctest/doctest.h>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <string>
#include <vector>

using namespace lodge;
using Ids = std::vector<int64_t>;

namespace {
struct Env {
  test::FakeLedger l;
  int64_t t = 1'000;
  int seed = 0;

  // A row of `owner` under `prefix` at `path` (original name `name`), confirmed unless not.
  int64_t add(const std::string &path, const std::string &name = "f.txt", bool confirm = true,
              const std::string &prefix = "p", const std::string &owner = "o") {
    ledger::ReserveRequest r;
    r.owner_id = owner;
    r.original_name = name;
    r.relative_path = path;
    r.run_prefix = prefix;
    r.media_type = "text/plain";
    const auto s = std::to_string(++seed);
    r.sha256 = std::string(64 - s.size(), '0') + s;
    r.size = 1;
    r.policy = "default";
    r.deadline_ms = 10'000;
    r.grace_ms = 1'000;
    r.max_retries = 2;
    t += 10;
    auto res = l.reserve(r, t);
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    if (confirm) REQUIRE(l.confirm(res.record.id, "etag", "", t) == ledger::ConfirmOutcome::confirmed);
    return res.record.id;
  }

  Ids scan(int64_t page, int stop_after = 0) {
    Ids out;
    ops::scan_active_under_prefix(
        l, "o", "p",
        [&](const ledger::FileRecord &r) {
          out.push_back(r.id);
          return stop_after == 0 || static_cast<int>(out.size()) < stop_after;
        },
        page);
    return out;
  }
};
} // namespace

TEST_CASE(
    "get --prefix's rows: the newest ACTIVE row per restore path, in path order, in pages of any size") {
  Env e;
  const auto b_old = e.add("b");
  const auto a = e.add("a");
  const auto b_new = e.add("b"); // b's newest
  const auto c_active = e.add("c");
  (void)e.add("c", "f.txt", false);      // c's newest is UPLOADING: the ACTIVE one is restored
  const auto unnamed_a = e.add("", "a"); // no relative path: restores to "a", newer than a
  const auto unnamed_0 = e.add("", "0");
  const auto dead = e.add("d");
  REQUIRE(e.l.soft_delete(dead, "o", e.t, 1'000, 2) == ledger::DeleteOutcome::deleted);
  (void)e.add("e", "f.txt", true, "q");          // another prefix
  (void)e.add("f", "f.txt", true, "p", "other"); // another owner
  const auto z1 = e.add("z");
  const auto z2 = e.add("z");
  const auto z3 = e.add("z"); // a path whose rows span pages of one and two

  const Ids want{unnamed_0, unnamed_a, b_new, c_active, z3};
  for (int64_t page : {1, 2, 3, 1000}) {
    CAPTURE(page);
    CHECK(e.scan(page) == want);
  }
  (void)b_old;
  (void)a;
  (void)z1;
  (void)z2;
  // active_under_prefix collects the same rows.
  Ids collected;
  for (const auto &r : ops::active_under_prefix(e.l, "o", "p"))
    collected.push_back(r.id);
  CHECK(collected == want);
  // A visitor that stops is visited no more.
  CHECK(e.scan(1, 2) == Ids{unnamed_0, unnamed_a});
  CHECK(e.scan(2, 3) == Ids{unnamed_0, unnamed_a, b_new});
}

TEST_CASE("get --prefix's rows: the older row wins a restore path when it was activated later") {
  Env e;
  const auto early = e.add("x", "f.txt", false);
  const auto later = e.add("x");
  e.t += 100;
  REQUIRE(e.l.confirm(early, "etag", "", e.t) == ledger::ConfirmOutcome::confirmed);
  for (int64_t page : {1, 1000})
    CHECK(e.scan(page) == Ids{early});
  (void)later;
}
