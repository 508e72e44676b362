// Relative paths, run prefixes and de-dup scopes in the ledger: what reserve calls a
// duplicate under each scope (I4, scoped), find_by_path, and list_files' filters.
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/read/retrieve.hpp>

using namespace lodge;

namespace {
class ManualClock final : public util::Clock {
public:
  int64_t t = 1'000'000;
  [[nodiscard]] int64_t now_ms() const override { return t; }
};

struct Env {
  test::TempDir dir;
  ManualClock clock;
  std::unique_ptr<ledger::Ledger> l;
  Env() {
    ledger::OpenOptions o;
    o.location = dir.file("l.db");
    o.create = true;
    o.clock = &clock;
    l = ledger::open_ledger(o);
  }
  ledger::ReserveResult reserve(const std::string &sha_seed, const std::string &path,
                                const std::string &prefix, ledger::DedupScope scope,
                                const std::string &owner = "o") {
    ledger::ReserveRequest r;
    r.owner_id = owner;
    r.original_name = path.substr(path.find_last_of('/') + 1);
    r.relative_path = path;
    r.run_prefix = prefix;
    r.dedup = scope;
    r.key_prefix = "root/";
    r.media_type = "text/plain";
    r.sha256 = std::string(64 - sha_seed.size(), '0') + sha_seed;
    r.size = 1;
    r.policy = "default";
    r.deadline_ms = 10'000;
    r.grace_ms = 1'000;
    r.max_retries = 2;
    return l->reserve(r, clock.t);
  }
  // Reserves and confirms: an ACTIVE row.
  ledger::FileRecord active(const std::string &sha_seed, const std::string &path, const std::string &prefix,
                            ledger::DedupScope scope, const std::string &owner = "o") {
    auto res = reserve(sha_seed, path, prefix, scope, owner);
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    ++clock.t;
    REQUIRE(l->confirm(res.record.id, "etag", "", clock.t) == ledger::ConfirmOutcome::confirmed);
    return *l->find_file(res.record.id);
  }
};

using ledger::DedupScope;
using ledger::ReserveOutcome;
} // namespace

TEST_CASE("dedup scope names parse and print; nothing else parses") {
  for (auto s : {DedupScope::owner, DedupScope::prefix, DedupScope::none})
    CHECK(ledger::parse_dedup_scope(ledger::to_string(s)) == s);
  CHECK_FALSE(ledger::parse_dedup_scope("Owner").has_value());
  CHECK_FALSE(ledger::parse_dedup_scope("").has_value());
}

TEST_CASE("a row keeps its relative path, run prefix and scope") {
  Env e;
  auto a = e.active("a", "tree/src/f.txt", "builds/1", DedupScope::prefix);
  CHECK(a.original_name == "f.txt");
  CHECK(a.relative_path == "tree/src/f.txt");
  CHECK(a.run_prefix == "builds/1");
  CHECK(a.dedup_scope == DedupScope::prefix);
  // No relative path given: the display name stands in.
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.original_name = "n.txt";
  r.media_type = "text/plain";
  r.sha256 = std::string(64, 'b');
  r.policy = "default";
  auto res = e.l->reserve(r, e.clock.t);
  REQUIRE(res.outcome == ReserveOutcome::reserved);
  CHECK(res.record.relative_path == "n.txt");
}

TEST_CASE("prefix scope: the same content under another prefix is a new row; under the same, shared") {
  Env e;
  auto b1 = e.active("a", "f.txt", "builds/1", DedupScope::prefix);
  auto b2 = e.reserve("a", "f.txt", "builds/2", DedupScope::prefix);
  CHECK(b2.outcome == ReserveOutcome::reserved);
  auto again = e.reserve("a", "g.txt", "builds/1", DedupScope::prefix);
  CHECK(again.outcome == ReserveOutcome::shareable); // another path: it will share b1's object
  CHECK(again.record.id == b1.id);
  // Still uploading under builds/2: the same content there is in progress, not a second row.
  CHECK(e.reserve("a", "f.txt", "builds/2", DedupScope::prefix).outcome == ReserveOutcome::in_progress);
  // Another owner is never a duplicate.
  CHECK(e.reserve("a", "f.txt", "builds/1", DedupScope::prefix, "p").outcome == ReserveOutcome::reserved);
}

TEST_CASE("owner scope: any alive row of the owner holds the content, preferring one in this prefix") {
  Env e;
  auto b1 = e.active("a", "f.txt", "builds/1", DedupScope::prefix);
  auto b2 = e.active("a", "f.txt", "builds/2", DedupScope::prefix);
  // No row at builds/3/f.txt: the path gets a row of its own sharing a stored copy.
  auto d = e.reserve("a", "f.txt", "builds/3", DedupScope::owner);
  CHECK(d.outcome == ReserveOutcome::shareable);
  CHECK(d.record.id == b1.id); // none in builds/3: the oldest
  d = e.reserve("a", "f.txt", "builds/2", DedupScope::owner);
  CHECK(d.outcome == ReserveOutcome::duplicate);
  CHECK(d.record.id == b2.id);
  // With no alive copy left, an owner-scope row is made; then a prefix-scope request in a
  // prefix without a copy makes its own row, and an owner-scope one finds a copy.
  Env f;
  auto o = f.active("c", "x.txt", "", DedupScope::owner);
  CHECK(f.reserve("c", "x.txt", "p", DedupScope::prefix).outcome == ReserveOutcome::reserved);
  auto again = f.reserve("c", "x.txt", "q", DedupScope::owner);
  CHECK(again.outcome == ReserveOutcome::shareable);
  CHECK(again.record.id == o.id);
}

TEST_CASE("none scope: every upload is its own row; an ACTIVE one prefers itself to an uploading one") {
  Env e;
  auto a = e.active("a", "f.txt", "", DedupScope::none);
  auto b = e.reserve("a", "f.txt", "", DedupScope::none);
  REQUIRE(b.outcome == ReserveOutcome::reserved);
  CHECK(b.record.id != a.id);
  CHECK(b.record.object_key != a.object_key);
  // A prefix-scope request sees both alive rows; the ACTIVE one is the duplicate.
  auto d = e.reserve("a", "f.txt", "", DedupScope::prefix);
  CHECK(d.outcome == ReserveOutcome::duplicate);
  CHECK(d.record.id == a.id);
}

TEST_CASE("find_by_path: alive ACTIVE rows of (owner, prefix, path), newest first") {
  Env e;
  auto a = e.active("a", "tree/f.txt", "b/1", DedupScope::none);
  auto b = e.active("b", "tree/f.txt", "b/1", DedupScope::none);
  auto other = e.active("c", "tree/f.txt", "b/2", DedupScope::none);
  auto uploading = e.reserve("d", "tree/f.txt", "b/1", DedupScope::none);
  REQUIRE(uploading.outcome == ReserveOutcome::reserved);
  auto found = e.l->find_by_path("o", "b/1", "tree/f.txt");
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == b.id);
  CHECK(found[1].id == a.id);
  CHECK(e.l->find_by_path("o", "b/2", "tree/f.txt").at(0).id == other.id);
  CHECK(e.l->find_by_path("o", "", "tree/f.txt").empty());
  CHECK(e.l->find_by_path("p", "b/1", "tree/f.txt").empty());
  REQUIRE(e.l->soft_delete(b.id, "o", e.clock.t, 1000, 2) == ledger::DeleteOutcome::deleted);
  found = e.l->find_by_path("o", "b/1", "tree/f.txt");
  REQUIRE(found.size() == 1);
  CHECK(found[0].id == a.id);
}

TEST_CASE("list_files: by owner ('*' for all), prefix and path glob") {
  Env e;
  e.active("a", "src/lib/a.c", "b/1", DedupScope::prefix);
  e.active("b", "src/main.c", "b/1", DedupScope::prefix);
  e.active("c", "README", "b/2", DedupScope::prefix);
  auto gone = e.active("d", "src/x.c", "", DedupScope::prefix);
  e.active("e", "src/y.c", "", DedupScope::prefix, "p");
  REQUIRE(e.l->soft_delete(gone.id, "o", e.clock.t, 1000, 2) == ledger::DeleteOutcome::deleted);
  auto paths = [&](ledger::FileQuery f, std::optional<std::string> glob = std::nullopt) {
    std::vector<std::string> out;
    for (const auto &r : ops::list_files(*e.l, f, glob))
      out.push_back(r.owner_id + ":" + r.run_prefix + ":" + r.relative_path);
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(paths({.owner = "o", .include_dead = false}) ==
        V{"o:b/1:src/lib/a.c", "o:b/1:src/main.c", "o:b/2:README"});
  CHECK(paths({.owner = "o", .include_dead = true}) ==
        V{"o:b/1:src/lib/a.c", "o:b/1:src/main.c", "o:b/2:README", "o::src/x.c"});
  CHECK(paths({.owner = "*", .include_dead = false}) ==
        V{"o:b/1:src/lib/a.c", "o:b/1:src/main.c", "o:b/2:README", "p::src/y.c"});
  CHECK(paths({.owner = "o", .run_prefix = "b/2", .include_dead = false}) == V{"o:b/2:README"});
  CHECK(paths({.owner = "o", .run_prefix = "", .include_dead = true}) == V{"o::src/x.c"});
  // The path glob is the upload filter's matcher: '*' stops at '/', '**' crosses it.
  CHECK(paths({.owner = "o", .include_dead = false}, "src/*.c") == V{"o:b/1:src/main.c"});
  CHECK(paths({.owner = "o", .include_dead = false}, "src/**.c") ==
        V{"o:b/1:src/lib/a.c", "o:b/1:src/main.c"});
  CHECK(paths({.owner = "*", .include_dead = false}, "src/?.c") == V{"p::src/y.c"});
  CHECK(paths({.owner = "o", .run_prefix = "b/1", .include_dead = false}, "*/lib/*") ==
        V{"o:b/1:src/lib/a.c"});
  // Unanchored, a pattern matches the path's tail; a leading '/' anchors it at the start.
  CHECK(paths({.owner = "o", .include_dead = false}, "a.c") == V{"o:b/1:src/lib/a.c"});
  CHECK(paths({.owner = "o", .include_dead = false}, "/lib/a.c").empty());
  CHECK(paths({.owner = "o", .include_dead = false}, "/src/**") ==
        V{"o:b/1:src/lib/a.c", "o:b/1:src/main.c"});
  CHECK(paths({.owner = "o", .include_dead = false}, "/src/lib/a.c") == V{"o:b/1:src/lib/a.c"});
  CHECK(paths({.owner = "o", .include_dead = false}, "[A-Z]*") == V{"o:b/2:README"});
  CHECK(paths({.owner = "o", .include_dead = false}, "nothing").empty());
  CHECK_THROWS_AS((void)paths({.owner = "o", .include_dead = false}, "src/[a"), LodgeError);
}
