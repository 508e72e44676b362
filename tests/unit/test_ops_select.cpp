// ops/select: what `list` and `get` select beyond the ledger's query (the path and prefix
// globs, the limit counted after them, ACTIVE only) on the ledger fake, and the parsing of
// the search options' values.
#include "ops_fixture.hpp"

#include <doctest/doctest.h>
#include <lodge/ops/read/select.hpp>
#include <lodge/util/clock.hpp>
#include <string>
#include <utility>
#include <vector>

using namespace lodge;
using lodge::test::OpsWorld;

namespace {

// An ACTIVE row of owner "o" at (prefix, path), its content named by seed.
ledger::FileRecord row(OpsWorld &w, const std::string &prefix, const std::string &path,
                       const std::string &seed) {
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.run_prefix = prefix;
  r.original_name = path;
  r.relative_path = path;
  r.media_type = "text/plain";
  r.sha256 = std::string(64 - seed.size(), '0') + seed;
  r.size = 1;
  r.policy = "default";
  r.deadline_ms = OpsWorld::k_deadline_ms;
  r.grace_ms = OpsWorld::k_grace_ms;
  r.max_retries = 8;
  auto res = w.l.reserve(r, w.now());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  w.put(res.record);
  REQUIRE(w.l.confirm(res.record.id, "etag", "", w.now()) == ledger::ConfirmOutcome::confirmed);
  return w.l.row(res.record.id);
}

std::vector<std::pair<std::string, std::string>> selected(OpsWorld &w, const ops::Selection &s) {
  std::vector<std::pair<std::string, std::string>> out;
  ops::select_files(w.l, s, [&](const ledger::FileRecord &r) {
    out.emplace_back(r.run_prefix, r.relative_path);
    return true;
  });
  return out;
}

ops::Selection of_owner() {
  ops::Selection s;
  s.query.owner = "o";
  return s;
}

using Rows = std::vector<std::pair<std::string, std::string>>;

} // namespace

TEST_CASE("select: a prefix glob is anchored at the prefix's start and '*' stops at '/'") {
  OpsWorld w;
  (void)row(w, "builds/main/1", "a.txt", "1");
  (void)row(w, "builds/main/2", "a.txt", "2");
  (void)row(w, "builds/dev/1", "a.txt", "3");
  (void)row(w, "old/builds/main/1", "a.txt", "4");
  (void)row(w, "", "loose.txt", "5");
  auto s = of_owner();
  s.prefix_glob = "builds/main/*";
  CHECK(selected(w, s) == Rows{{"builds/main/1", "a.txt"}, {"builds/main/2", "a.txt"}});
  s.prefix_glob = "/builds/*/1"; // a leading '/' changes nothing
  CHECK(selected(w, s) == Rows{{"builds/main/1", "a.txt"}, {"builds/dev/1", "a.txt"}});
  s.prefix_glob = "builds/*";
  CHECK(selected(w, s).empty());
  s.prefix_glob = "**";
  CHECK(selected(w, s).size() == 4); // every prefix but none
  s.prefix_glob = "nothing/*";
  CHECK(selected(w, s).empty()); // no prefix matched: nothing, not everything
  s.prefix_glob = "builds/**";
  s.query.run_prefix = "builds/dev/1";
  CHECK(selected(w, s) == Rows{{"builds/dev/1", "a.txt"}});
  s.query.run_prefix = "old/builds/main/1"; // both must hold
  CHECK(selected(w, s).empty());
  s = of_owner();
  s.prefix_glob = "builds/[";
  CHECK_THROWS_AS((void)selected(w, s), LodgeError);
}

TEST_CASE("select: more matched prefixes than a query binds are matched here, in the same order") {
  OpsWorld w;
  (void)row(w, "a/1", "x", "a1");
  for (int i = 0; i <= 1000; ++i)
    (void)row(w, "b/" + std::to_string(i), "x", "b" + std::to_string(i));
  (void)row(w, "b/1/deeper", "x", "c1");
  auto s = of_owner();
  s.prefix_glob = "b/*"; // 1001 prefixes: past the bound list
  auto all = selected(w, s);
  REQUIRE(all.size() == 1001);
  CHECK(all.front().first == "b/0");
  CHECK(all.back().first == "b/1000");
  s.query.limit = 2;
  CHECK(selected(w, s) == Rows{{"b/0", "x"}, {"b/1", "x"}});
  s.query.limit.reset();
  s.query.descending = true;
  s.query.limit = 1;
  CHECK(selected(w, s) == Rows{{"b/1000", "x"}});
  s = of_owner();
  s.prefix_glob = "b/1*"; // b/1, b/10-19, b/100-199, b/1000: a bound list
  CHECK(selected(w, s).size() == 112);
}

TEST_CASE("select: the limit counts the rows the path glob and ACTIVE-only keep") {
  OpsWorld w;
  (void)row(w, "p", "a.txt", "1");
  (void)row(w, "p", "b.bin", "2");
  (void)row(w, "p", "c.txt", "3");
  (void)row(w, "p", "d.bin", "4");
  auto up = w.reserve("e.bin", "5"); // UPLOADING, prefix ""
  auto s = of_owner();
  s.path_glob = "*.bin";
  s.query.limit = 1;
  CHECK(selected(w, s) == Rows{{"p", "b.bin"}});
  s.query.limit = 5;
  CHECK(selected(w, s) == Rows{{"p", "b.bin"}, {"p", "d.bin"}, {"", "e.bin"}});
  s.active_only = true;
  CHECK(selected(w, s) == Rows{{"p", "b.bin"}, {"p", "d.bin"}});
  s.path_glob = "/c.*"; // anchored: narrows the query by its literal start
  CHECK(selected(w, s) == Rows{{"p", "c.txt"}});
  s = of_owner();
  s.query.limit = 2;
  CHECK(selected(w, s) == Rows{{"p", "a.txt"}, {"p", "b.bin"}});
  // The visitor stops the stream.
  int seen = 0;
  ops::select_files(w.l, of_owner(), [&](const ledger::FileRecord &) { return ++seen < 2; });
  CHECK(seen == 2);
  (void)up;
}

TEST_CASE("select: RFC 3339 times and durations back from now") {
  CHECK(ops::parse_rfc3339_ms("1970-01-01T00:00:00Z") == 0);
  CHECK(ops::parse_rfc3339_ms("2026-12-01T10:00:00Z") == 1'796'119'200'000);
  CHECK(ops::parse_rfc3339_ms("2026-12-01T12:00:00+02:00") == 1'796'119'200'000);
  CHECK(ops::parse_rfc3339_ms("2026-12-01T09:30:00.5-00:30") == 1'796'119'200'500);
  CHECK(ops::parse_rfc3339_ms("2026-12-01t10:00:00.123456z") == 1'796'119'200'123);
  CHECK(ops::parse_rfc3339_ms("2026-12-01") == 1'796'083'200'000);
  for (const char *bad :
       {"2026-12-01T10:00:00", "2026-13-01", "2026-02-30", "2026-12-01T24:00:00Z", "2026-12-01T10:00Z",
        "2026-12-01T10:00:00.Z", "2026-12-01T10:00:00Zx", "26-12-01", ""})
    CHECK_MESSAGE(!ops::parse_rfc3339_ms(bad), bad);
  CHECK(util::format_rfc3339_ms(1'796'119'200'123) == "2026-12-01T10:00:00.123Z");
  const int64_t now = 1'796'119'200'000;
  CHECK(ops::parse_time_bound("7d", "--since", now) == now - 7 * 86'400'000LL);
  CHECK(ops::parse_time_bound("36h", "--since", now) == now - 36 * 3'600'000LL);
  CHECK(ops::parse_time_bound("1h30m", "--since", now) == now - 5'400'000LL);
  CHECK(ops::parse_time_bound("2026-12-01T10:00:00Z", "--until", now) == now);
  for (const char *bad : {"yesterday", "off", "2026-12-01T10:00:00", "-1d", ""}) {
    try {
      (void)ops::parse_time_bound(bad, "--until", now);
      FAIL_CHECK("accepted: ", bad);
    } catch (const LodgeError &e) {
      CHECK(e.error().code == Errc::usage);
      CHECK(std::string(e.what()).find("--until") != std::string::npos);
    }
  }
}

TEST_CASE("select: NAME=VALUE pairs and digests") {
  CHECK(ops::parse_search_pair("Commit=abc=d", "--metadata", true) ==
        std::make_pair(std::string("commit"), std::string("abc=d")));
  CHECK(ops::parse_search_pair("Keep=", "--tag", false) ==
        std::make_pair(std::string("Keep"), std::string()));
  CHECK_THROWS_AS((void)ops::parse_search_pair("commit", "--metadata", true), LodgeError);
  CHECK_THROWS_AS((void)ops::parse_search_pair("=x", "--tag", false), LodgeError);
  CHECK(ops::parse_sha256_hex(std::string(64, 'A'), "--sha256") == std::string(64, 'a'));
  CHECK_THROWS_AS((void)ops::parse_sha256_hex(std::string(63, 'a'), "--sha256"), LodgeError);
  CHECK_THROWS_AS((void)ops::parse_sha256_hex(std::string(64, 'g'), "--sha256"), LodgeError);
}
