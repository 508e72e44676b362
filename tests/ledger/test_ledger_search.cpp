// The ledger as a search index and its retention writes (the contract, on every backend):
// scan_files' filters, latest, sort and limit, each against an answer computed by hand;
// prefix_summaries; shared_outside; prune_snapshot and soft_delete_expired (quota freed,
// tasks due after the grace); the migration from version 9 that fills file_attr.
#include "support.hpp"

#include <algorithm>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/schema.hpp>
#include <optional>
#include <string>
#include <vector>

using namespace lodge;
using ledger::FileQuery;
using ledger::FileSort;
using ledger::ReserveOutcome;
using Ids = std::vector<int64_t>;

namespace {
struct Row {
  std::string owner = "o", prefix{}, path = "a.txt", seed{};
  int64_t size = 1, at = 0;
  std::string options{};
  std::optional<int64_t> expires_at{};
  bool confirm = true;
  ledger::DedupScope dedup = ledger::DedupScope::prefix;
};

struct Env : test::LedgerFixture {
  // A row as an upload makes it, reserved (and confirmed, unless not) at `at`.
  int64_t add(const Row &w) {
    clock.t = w.at;
    auto r = test::request(w.owner, w.seed);
    r.run_prefix = w.prefix;
    r.relative_path = w.path;
    r.size = w.size;
    r.object_options = w.options;
    r.expires_at = w.expires_at;
    r.dedup = w.dedup;
    auto res = l->reserve(r, now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    if (w.confirm) REQUIRE(l->confirm(res.record.id, "etag", "", now()) == test::confirm_outcome::confirmed);
    return res.record.id;
  }
  Ids ids(const FileQuery &q) {
    Ids out;
    l->scan_files(q, [&](const ledger::FileRecord &r) {
      out.push_back(r.id);
      return true;
    });
    return out;
  }
  ledger::FileRecord row(int64_t id) {
    auto r = l->find_file(id);
    REQUIRE(r);
    return *r;
  }
};

// The rows every search case reads (ids 1..9 in order, created_at = id * 1000):
//  1 o b/main/1 a.txt    10  commit=c1 ci_ref=main, tag keep=yes
//  2 o b/main/1 lib/x.so 200 commit=c1
//  3 o b/main/2 a.txt    30  commit=c2 ci_ref=main; expires at 10000
//  4 o b/dev/1  a.txt    40  commit=c3 ci_ref=dev, tag keep=no; expires at 20000
//  5 p b/main/1 a.txt    50  commit=c1
//  6 o ""       README   60  deleted; expires at 5000
//  7 o b/main/3 a.txt    70  commit=c4, UPLOADING
//  8 o B/main/1 a.txt    80  (another case of the prefix)
//  9 o b/main/3 b.txt    90  UPLOAD_FAILED
struct SearchEnv : Env {
  SearchEnv() {
    REQUIRE(add({.prefix = "b/main/1",
                 .seed = "1",
                 .size = 10,
                 .at = 1000,
                 .options = R"({"metadata":{"ci_ref":"main","commit":"c1"},"tags":{"keep":"yes"}})"}) == 1);
    REQUIRE(add({.prefix = "b/main/1",
                 .path = "lib/x.so",
                 .seed = "2",
                 .size = 200,
                 .at = 2000,
                 .options = R"({"metadata":{"commit":"c1"}})"}) == 2);
    REQUIRE(add({.prefix = "b/main/2",
                 .seed = "3",
                 .size = 30,
                 .at = 3000,
                 .options = R"({"metadata":{"ci_ref":"main","commit":"c2"}})",
                 .expires_at = 10'000}) == 3);
    REQUIRE(add({.prefix = "b/dev/1",
                 .seed = "4",
                 .size = 40,
                 .at = 4000,
                 .options = R"({"metadata":{"ci_ref":"dev","commit":"c3"},"tags":{"keep":"no"}})",
                 .expires_at = 20'000}) == 4);
    REQUIRE(add({.owner = "p",
                 .prefix = "b/main/1",
                 .seed = "5",
                 .size = 50,
                 .at = 5000,
                 .options = R"({"metadata":{"commit":"c1"}})"}) == 5);
    REQUIRE(add({.path = "README", .seed = "6", .size = 60, .at = 6000, .expires_at = 5'000}) == 6);
    REQUIRE(l->soft_delete(6, "o", 6000, 1000, 2) == ledger::DeleteOutcome::deleted);
    REQUIRE(add({.prefix = "b/main/3",
                 .seed = "7",
                 .size = 70,
                 .at = 7000,
                 .options = R"({"metadata":{"commit":"c4"}})",
                 .confirm = false}) == 7);
    REQUIRE(add({.prefix = "B/main/1", .seed = "8", .size = 80, .at = 8000}) == 8);
    REQUIRE(
        add({.prefix = "b/main/3", .path = "b.txt", .seed = "9", .size = 90, .at = 9000, .confirm = false}) ==
        9);
    REQUIRE(l->mark_failed(9, "refused", true, 9000) == ledger::MarkFailedOutcome::failed);
  }
};
} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("scan_files: owner, prefixes, paths and the dead, each against the hand-computed rows") {
  SearchEnv e;
  CHECK(e.ids({.owner = "o"}) == Ids{1, 2, 3, 4, 7, 8});
  CHECK(e.ids({}) == Ids{1, 2, 3, 4, 5, 7, 8}); // "*": every owner
  CHECK(e.ids({.owner = "o", .include_dead = true}) == Ids{1, 2, 3, 4, 6, 7, 8, 9});
  CHECK(e.ids({.owner = "o", .run_prefix = "b/main/1"}) == Ids{1, 2});
  CHECK(e.ids({.owner = "o", .run_prefix = "", .include_dead = true}) == Ids{6});
  CHECK(e.ids({.run_prefixes = {"b/main/1", "b/dev/1"}}) == Ids{1, 2, 4, 5});
  // A prefix's start is bytes: case counts, and '%' or '_' are no wildcards.
  CHECK(e.ids({.owner = "o", .prefix_start = "b/main/"}) == Ids{1, 2, 3, 7});
  CHECK(e.ids({.owner = "o", .prefix_start = "b/"}) == Ids{1, 2, 3, 4, 7});
  CHECK(e.ids({.prefix_start = "b/"}) == Ids{1, 2, 3, 4, 5, 7});
  CHECK(e.ids({.prefix_start = "B/"}) == Ids{8});
  CHECK(e.ids({.prefix_start = "b/%"}).empty());
  CHECK(e.ids({.prefix_start = "b_main"}).empty());
  CHECK(e.ids({.owner = "o", .prefix_start = "b/main/1"}) == Ids{1, 2});
  CHECK(e.ids({.owner = "o", .prefix_start = "b/main/3", .include_dead = true}) == Ids{7, 9});
  CHECK(e.ids({.owner = "o", .path_prefix = "lib/"}) == Ids{2});
  CHECK(e.ids({.owner = "o", .path_prefix = "a."}) == Ids{1, 3, 4, 7, 8});
  CHECK(e.ids({.owner = "o", .path = "a.txt"}) == Ids{1, 3, 4, 7, 8});
  CHECK(e.ids({.owner = "o", .path = "a"}).empty());
}

TEST_CASE("scan_files: metadata and tags (AND), time, digest, size and expiry") {
  SearchEnv e;
  using KV = std::vector<std::pair<std::string, std::string>>;
  CHECK(e.ids({.owner = "o", .metadata = KV{{"commit", "c1"}}}) == Ids{1, 2});
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}}}) == Ids{1, 2, 5});
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}, {"ci_ref", "main"}}}) == Ids{1});
  CHECK(e.ids({.metadata = KV{{"ci_ref", "main"}}}) == Ids{1, 3});
  CHECK(e.ids({.metadata = KV{{"commit", "C1"}}}).empty()); // values are exact
  CHECK(e.ids({.metadata = KV{{"keep", "yes"}}}).empty());  // a tag is no metadata
  CHECK(e.ids({.tags = KV{{"keep", "yes"}}}) == Ids{1});
  CHECK(e.ids({.tags = KV{{"keep", "no"}}}) == Ids{4});
  CHECK(e.ids({.tags = KV{{"commit", "c1"}}}).empty()); // metadata is no tag
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}}, .tags = KV{{"keep", "yes"}}}) == Ids{1});
  CHECK(e.ids({.metadata = KV{{"commit", "c2"}}, .tags = KV{{"keep", "yes"}}}).empty());
  CHECK(e.ids({.metadata = KV{{"commit", "c4"}}}) == Ids{7}); // an UPLOADING row is alive
  CHECK(e.ids({.owner = "o", .since = 3000, .until = 7000}) == Ids{3, 4, 7});
  CHECK(e.ids({.owner = "o", .since = 3001}) == Ids{4, 7, 8});
  CHECK(e.ids({.owner = "o", .until = 2000}) == Ids{1, 2});
  CHECK(e.ids({.sha256 = test::sha("3")}) == Ids{3});
  CHECK(e.ids({.sha256 = test::sha("6")}).empty()); // deleted
  CHECK(e.ids({.include_dead = true, .sha256 = test::sha("6")}) == Ids{6});
  CHECK(e.ids({.owner = "o", .min_size = 30, .max_size = 70}) == Ids{3, 4, 7});
  CHECK(e.ids({.min_size = 200}) == Ids{2});
  CHECK(e.ids({.max_size = 10}) == Ids{1});
  CHECK(e.ids({.expired_by = 15'000}) == Ids{3});
  CHECK(e.ids({.expired_by = 20'000}) == Ids{3, 4});
  CHECK(e.ids({.include_dead = true, .expired_by = 20'000}) == Ids{3, 4}); // alive rows only
  CHECK(e.ids({.expired_by = 9'999}).empty());
  // Every read gives the expiry back.
  CHECK(e.row(3).expires_at == 10'000);
  CHECK_FALSE(e.row(1).expires_at);
  auto rows = e.l->list_files({.owner = "o", .run_prefix = "b/dev/1"});
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].expires_at == 20'000);
}

TEST_CASE("metadata_values: the distinct values of a metadata name starting so, per owner; unexpired_at") {
  SearchEnv e;
  using Values = std::vector<std::string>;
  CHECK(e.l->metadata_values("o", "commit", "c", 10) == Values{"c1", "c2", "c3", "c4"}); // any state
  CHECK(e.l->metadata_values("p", "commit", "c", 10) == Values{"c1"});
  CHECK(e.l->metadata_values("*", "commit", "c", 2) == Values{"c1", "c2"}); // each once, at most `limit`
  CHECK(e.l->metadata_values("o", "commit", "c3", 10) == Values{"c3"});
  CHECK(e.l->metadata_values("o", "commit", "C", 10).empty()); // bytes: case counts
  CHECK(e.l->metadata_values("o", "ci_ref", "m", 10) == Values{"main"});
  CHECK(e.l->metadata_values("o", "nothing", "", 10).empty());
  // unexpired_at: no expiry, or one after it (row 3 expires at 10000, row 4 at 20000).
  CHECK(e.ids({.owner = "o", .unexpired_at = 10'000}) == Ids{1, 2, 4, 7, 8});
  CHECK(e.ids({.owner = "o", .unexpired_at = 9'999}) == Ids{1, 2, 3, 4, 7, 8});
}

TEST_CASE("scan_files: latest is the newest alive ACTIVE row per (owner, path) among the matching ones") {
  SearchEnv e;
  using KV = std::vector<std::pair<std::string, std::string>>;
  // a.txt: ACTIVE 1, 3, 4, 8 (7 UPLOADING) -> 8; lib/x.so -> 2; README deleted.
  CHECK(e.ids({.owner = "o", .latest = true}) == Ids{2, 8});
  CHECK(e.ids({.owner = "o", .include_dead = true, .latest = true}) == Ids{2, 8});
  CHECK(e.ids({.owner = "o", .prefix_start = "b/main/", .latest = true}) == Ids{2, 3});
  CHECK(e.ids({.prefix_start = "b/main/", .latest = true}) == Ids{2, 3, 5}); // per owner
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}}, .latest = true}) == Ids{1, 2, 5});
  CHECK(e.ids({.owner = "o", .metadata = KV{{"ci_ref", "main"}}, .latest = true}) == Ids{3});
  CHECK(e.ids({.owner = "o", .until = 3500, .latest = true}) == Ids{2, 3});
  CHECK(e.ids({.owner = "o", .latest = true, .sort = FileSort::size, .descending = true, .limit = 1}) ==
        Ids{2});
  // Newest by activation, not by id: an older row confirmed later wins.
  Env f;
  const auto early = f.add({.seed = "a", .at = 100, .confirm = false});
  const auto later = f.add({.seed = "b", .at = 200});
  f.clock.t = 300;
  REQUIRE(f.l->confirm(early, "etag", "", f.now()) == test::confirm_outcome::confirmed);
  CHECK(f.ids({.owner = "o", .latest = true}) == Ids{early});
  CHECK(f.ids({.owner = "o"}) == Ids{early, later});
}

TEST_CASE("scan_files: sort, reverse, limit, and a visitor that stops") {
  SearchEnv e;
  CHECK(e.ids({.owner = "o", .descending = true}) == Ids{8, 7, 4, 3, 2, 1});
  CHECK(e.ids({.owner = "o", .sort = FileSort::time, .descending = true}) == Ids{8, 7, 4, 3, 2, 1});
  // By (run_prefix, relative_path) in byte order: "B/..." before "b/...".
  CHECK(e.ids({.owner = "o", .sort = FileSort::path}) == Ids{8, 4, 1, 2, 3, 7});
  CHECK(e.ids({.owner = "o", .sort = FileSort::path, .descending = true}) == Ids{7, 3, 2, 1, 4, 8});
  CHECK(e.ids({.owner = "o", .sort = FileSort::size, .descending = true}) == Ids{2, 8, 7, 4, 3, 1});
  CHECK(e.ids({.owner = "o", .sort = FileSort::size}) == Ids{1, 3, 4, 7, 8, 2});
  CHECK(e.ids({.owner = "o", .sort = FileSort::time, .limit = 2}) == Ids{1, 2});
  CHECK(e.ids({.owner = "o", .sort = FileSort::time, .descending = true, .limit = 2}) == Ids{8, 7});
  CHECK(e.ids({.owner = "o", .limit = 0}).empty());
  CHECK(e.ids({.owner = "o", .limit = 100}) == Ids{1, 2, 3, 4, 7, 8});
  int seen = 0;
  e.l->scan_files({.owner = "o"}, [&](const ledger::FileRecord &) { return ++seen < 2; });
  CHECK(seen == 2);
}

TEST_CASE("scan_files over more rows than one page (PostgreSQL reads in pages): each row once, in order") {
  Env e;
  constexpr int64_t n = 2'100;
  // Two rows to a created_at and to a size, so that the sort's tie-break (id) crosses pages.
  for (int64_t i = 0; i < n; ++i) {
    e.clock.t = 1000 + i / 2;
    auto r = test::request("o", std::to_string(i + 1));
    r.relative_path = "p" + std::to_string(i % 7);
    r.size = i % 3;
    REQUIRE(e.l->reserve(r, e.now()).outcome == ReserveOutcome::reserved);
  }
  Ids all(n);
  for (int64_t i = 0; i < n; ++i)
    all[static_cast<size_t>(i)] = i + 1;
  CHECK(e.ids({.owner = "o"}) == all);
  Ids reversed(all.rbegin(), all.rend());
  CHECK(e.ids({.owner = "o", .sort = FileSort::time, .descending = true}) == reversed);
  CHECK(e.ids({.owner = "o", .sort = FileSort::time, .descending = true, .limit = 1500}) ==
        Ids(reversed.begin(), reversed.begin() + 1500));
  // By size then id: every row once, sizes never decreasing, ids increasing within a size.
  auto by_size = e.ids({.owner = "o", .sort = FileSort::size});
  REQUIRE(by_size.size() == static_cast<size_t>(n));
  for (size_t i = 1; i < by_size.size(); ++i) {
    const int64_t a = (by_size[i - 1] - 1) % 3, b = (by_size[i] - 1) % 3;
    CHECK((a < b || (a == b && by_size[i - 1] < by_size[i])));
  }
  // By path (p0..p6) then id, reversed: computed here the same way.
  Ids want_path = all;
  std::sort(want_path.begin(), want_path.end(),
            [](int64_t a, int64_t b) { return std::pair((a - 1) % 7, a) > std::pair((b - 1) % 7, b); });
  want_path.resize(1001);
  CHECK(e.ids({.owner = "o", .sort = FileSort::path, .descending = true, .limit = 1001}) == want_path);
  int seen = 0;
  e.l->scan_files({.owner = "o"}, [&](const ledger::FileRecord &) { return ++seen < 1'200; });
  CHECK(seen == 1'200);
}

TEST_CASE("scan_files: after continues a scan after the given row, in every order (keyset paging)") {
  SearchEnv e;
  // Page by page (two rows each, the next page after the last row seen) gives exactly the
  // whole scan, in each sort, either way, and with latest.
  auto paged_in = [](auto &l, FileQuery q) {
    Ids out;
    q.limit = 2;
    for (;;) {
      std::vector<ledger::FileRecord> page;
      l.scan_files(q, [&](const ledger::FileRecord &r) {
        page.push_back(r);
        return true;
      });
      for (const auto &r : page)
        out.push_back(r.id);
      if (page.size() < 2) return out;
      q.after = page.back();
    }
  };
  auto paged = [&](const FileQuery &q) { return paged_in(*e.l, q); };
  for (auto sort : {FileSort::id, FileSort::time, FileSort::path, FileSort::size})
    for (bool descending : {false, true})
      for (bool latest : {false, true})
        for (bool dead : {false, true}) {
          const FileQuery q{
              .owner = "*", .include_dead = dead, .latest = latest, .sort = sort, .descending = descending};
          CAPTURE(static_cast<int>(sort));
          CAPTURE(descending);
          CAPTURE(latest);
          CAPTURE(dead);
          CHECK(paged(q) == e.ids(q));
        }
  // After a row: strictly after it (the row itself is not seen again).
  CHECK(e.ids({.owner = "o", .after = e.row(3)}) == Ids{4, 7, 8});
  CHECK(e.ids({.owner = "o", .sort = FileSort::path, .after = e.row(1)}) == Ids{2, 3, 7});
  CHECK(e.ids({.owner = "o", .descending = true, .after = e.row(3)}) == Ids{2, 1});
  CHECK(e.ids({.owner = "o", .after = e.row(8)}).empty());
  // One run prefix by path (get --prefix's pages): one path's rows across pages, another
  // prefix's row of that path not among them.
  Env f;
  for (int i = 0; i < 5; ++i)
    (void)f.add({.prefix = "p",
                 .path = i < 3 ? "same" : "x" + std::to_string(i),
                 .seed = std::to_string(i + 1),
                 .at = 100 + i,
                 .dedup = ledger::DedupScope::none});
  (void)f.add({.prefix = "q", .path = "same", .seed = "9", .at = 200});
  for (bool descending : {false, true}) {
    const FileQuery q{.owner = "o", .run_prefix = "p", .sort = FileSort::path, .descending = descending};
    CHECK(paged_in(*f.l, q) == (descending ? Ids{5, 4, 3, 2, 1} : Ids{1, 2, 3, 4, 5}));
    CHECK(paged_in(*f.l, q) == f.ids(q));
  }
}

TEST_CASE("scan_tasks and rows_by_key over more rows than one page (PostgreSQL reads in pages): each once, "
          "in order") {
  Env e;
  constexpr int64_t n = 2'100;
  std::vector<std::string> keys;
  for (int64_t i = 0; i < n; ++i) {
    e.clock.t = 1000 + i;
    auto r = test::request("o", std::to_string(i + 1));
    r.relative_path = "p" + std::to_string(i);
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    keys.push_back(res.record.object_key);
  }
  Ids all(n);
  for (int64_t i = 0; i < n; ++i)
    all[static_cast<size_t>(i)] = i + 1;
  auto task_rows = [&](std::optional<ledger::TaskStatus> status, int stop_after) {
    Ids out;
    e.l->scan_tasks(status, [&](const ledger::TaskRecord &t) {
      out.push_back(t.record_id);
      return stop_after == 0 || static_cast<int>(out.size()) < stop_after;
    });
    return out;
  };
  CHECK(task_rows(std::nullopt, 0) == all);
  CHECK(task_rows(ledger::TaskStatus::pending, 0) == all);
  CHECK(task_rows(ledger::TaskStatus::failed, 0).empty());
  CHECK(task_rows(std::nullopt, 1'200) == Ids(all.begin(), all.begin() + 1'200));
  CHECK(e.l->list_tasks(std::nullopt).size() == static_cast<size_t>(n));

  std::sort(keys.begin(), keys.end());
  auto by_key = [&](const std::string &after) {
    std::vector<std::string> out;
    e.l->rows_by_key("", after, [&](const ledger::FileRecord &r) {
      out.push_back(r.object_key);
      return true;
    });
    return out;
  };
  CHECK(by_key("") == keys);
  CHECK(by_key(keys[499]) == std::vector<std::string>(keys.begin() + 500, keys.end()));
  int seen = 0;
  e.l->rows_by_key("", "", [&](const ledger::FileRecord &) { return ++seen < 1'500; });
  CHECK(seen == 1'500);
}

TEST_CASE("prefix_summaries: one entry per snapshot, ACTIVE rows counted, UPLOADING ones apart") {
  SearchEnv e;
  using S = std::tuple<std::string, std::string, int64_t, int64_t, int64_t, int64_t>;
  auto sums = [&](const FileQuery &q) {
    std::vector<S> out;
    e.l->prefix_summaries(q, [&](const ledger::PrefixSummary &s) {
      out.emplace_back(s.owner_id, s.run_prefix, s.files, s.bytes, s.newest_at, s.uploading);
      return true;
    });
    return out;
  };
  CHECK(sums({.owner = "o"}) == std::vector<S>{{"o", "B/main/1", 1, 80, 8000, 0},
                                               {"o", "b/dev/1", 1, 40, 4000, 0},
                                               {"o", "b/main/1", 2, 210, 2000, 0},
                                               {"o", "b/main/2", 1, 30, 3000, 0},
                                               {"o", "b/main/3", 0, 0, 0, 1}});
  // Dead rows never count, whatever include_dead says: the failed row of b/main/3, README.
  CHECK(sums({.owner = "o", .include_dead = true}) == sums({.owner = "o"}));
  CHECK(sums({.prefix_start = "b/main/"}) == std::vector<S>{{"o", "b/main/1", 2, 210, 2000, 0},
                                                            {"o", "b/main/2", 1, 30, 3000, 0},
                                                            {"o", "b/main/3", 0, 0, 0, 1},
                                                            {"p", "b/main/1", 1, 50, 5000, 0}});
  CHECK(sums({.metadata = {{"commit", "c1"}}}) ==
        std::vector<S>{{"o", "b/main/1", 2, 210, 2000, 0}, {"p", "b/main/1", 1, 50, 5000, 0}});
  CHECK(sums({.owner = "o", .run_prefixes = {"b/main/2", "b/dev/1"}}) ==
        std::vector<S>{{"o", "b/dev/1", 1, 40, 4000, 0}, {"o", "b/main/2", 1, 30, 3000, 0}});
  CHECK(sums({.owner = "nobody"}).empty());
  int seen = 0;
  e.l->prefix_summaries({}, [&](const ledger::PrefixSummary &) { return ++seen < 3; });
  CHECK(seen == 3);
}

TEST_CASE("shared_outside: the snapshot's alive rows whose object another snapshot's alive row uses") {
  Env e;
  using D = ledger::DedupScope;
  auto sharer = [&](const std::string &prefix, const std::string &path) {
    auto r = test::request("o", "5");
    r.run_prefix = prefix;
    r.relative_path = path;
    r.dedup = D::owner;
    auto first = e.l->reserve(r, e.now());
    REQUIRE(first.outcome == ReserveOutcome::shareable);
    r.share_with = first.record.id;
    auto res = e.l->reserve(r, e.now());
    REQUIRE(res.outcome == ReserveOutcome::shared);
    return res.record.id;
  };
  const auto a = e.add({.prefix = "s/1", .seed = "5", .at = 100, .dedup = D::owner});
  const auto own = e.add({.prefix = "s/1", .path = "own.txt", .seed = "6", .at = 100, .dedup = D::owner});
  const auto inside = sharer("s/1", "copy.txt"); // the same snapshot: not outside
  const auto b = sharer("s/2", "a.txt");
  const auto c = sharer("s/3", "a.txt");
  auto outside = [&](const std::string &prefix) {
    std::vector<std::tuple<int64_t, std::string, std::string>> out;
    for (const auto &s : e.l->shared_outside("o", prefix, std::nullopt))
      out.emplace_back(s.id, s.sharer_owner, s.sharer_prefix);
    return out;
  };
  using V = std::vector<std::tuple<int64_t, std::string, std::string>>;
  // The writer is shared by s/2 and s/3; the sharers by the writer's snapshot and each other.
  CHECK(outside("s/1") == V{{a, "o", "s/2"}, {a, "o", "s/3"}, {inside, "o", "s/2"}, {inside, "o", "s/3"}});
  CHECK(outside("s/2") == V{{b, "o", "s/1"}, {b, "o", "s/3"}});
  CHECK(outside("s/3") == V{{c, "o", "s/1"}, {c, "o", "s/2"}});
  CHECK(outside("s/9").empty());
  (void)own;
  // A dead row neither is shared nor shares.
  REQUIRE(e.l->soft_delete(b, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  CHECK(outside("s/1") == V{{a, "o", "s/3"}, {inside, "o", "s/3"}});
  CHECK(outside("s/2").empty());
  REQUIRE(e.l->soft_delete(c, "o", e.now(), 1000, 2) == ledger::DeleteOutcome::deleted);
  CHECK(outside("s/1").empty());
}

TEST_CASE("prune_snapshot: one transaction soft-deletes the snapshot's ACTIVE rows up to created_until, "
          "but the kept ones; quota freed, tasks due after the grace") {
  Env e;
  const auto a = e.add({.prefix = "r/1", .seed = "1", .size = 10, .at = 1000});
  const auto b = e.add({.prefix = "r/1", .path = "b.txt", .seed = "2", .size = 20, .at = 2000});
  const auto c = e.add({.prefix = "r/1", .path = "c.txt", .seed = "3", .size = 40, .at = 3000});
  const auto u =
      e.add({.prefix = "r/1", .path = "u.txt", .seed = "4", .size = 80, .at = 1500, .confirm = false});
  const auto x = e.add({.prefix = "r/2", .seed = "5", .at = 1000});
  const auto y = e.add({.owner = "p", .prefix = "r/1", .seed = "6", .at = 1000});
  // The owner's five alive rows fill a quota of five.
  auto quota_allows = [&](const std::string &seed) {
    auto r = test::request("o", seed);
    r.max_files = 5;
    r.dry_run = true;
    return e.l->reserve(r, e.now()).outcome == ReserveOutcome::reserved;
  };
  REQUIRE_FALSE(quota_allows("f"));
  e.clock.t = 10'000;
  auto out = e.l->prune_snapshot("o", "r/1", 2500, {b}, e.now(), 700, 3);
  CHECK(out.deleted == 1);
  CHECK(out.bytes == 10);
  auto ra = e.row(a);
  CHECK(ra.is_deleted);
  CHECK(ra.deleted_at == 10'000);
  auto t = e.task_of(a);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.next_retry_at == 10'700);
  for (auto id : {b, c, u, x, y}) {
    INFO("record ", id);
    CHECK_FALSE(e.row(id).is_deleted);
  }
  CHECK(quota_allows("f")); // freed in the same transaction
  // Again: nothing more (b kept, c after created_until, u UPLOADING).
  auto again = e.l->prune_snapshot("o", "r/1", 2500, {b}, e.now(), 700, 3);
  CHECK(again.deleted == 0);
  CHECK(again.bytes == 0);
  auto rest = e.l->prune_snapshot("o", "r/1", 3000, {}, e.now(), 700, 3);
  CHECK(rest.deleted == 2);
  CHECK(rest.bytes == 60);
  CHECK(e.row(b).is_deleted);
  CHECK(e.row(c).is_deleted);
  CHECK_FALSE(e.row(u).is_deleted); // an upload in progress is never pruned
  CHECK(e.row(u).upload_status == ledger::FileStatus::uploading);
  CHECK_FALSE(e.row(x).is_deleted);
  CHECK_FALSE(e.row(y).is_deleted);
  CHECK(e.l->prune_snapshot("o", "nothing", 1'000'000, {}, e.now(), 700, 3).deleted == 0);
}

TEST_CASE("soft_delete_expired: up to `limit` alive ACTIVE rows past their expiry, lowest id first") {
  Env e;
  const auto e1 = e.add({.seed = "1", .size = 1, .at = 100, .expires_at = 5000});
  const auto e2 = e.add({.path = "2", .seed = "2", .size = 2, .at = 100, .expires_at = 6000});
  const auto e3 = e.add({.path = "3", .seed = "3", .size = 4, .at = 100, .expires_at = 7000});
  const auto up =
      e.add({.path = "4", .seed = "4", .size = 8, .at = 100, .expires_at = 5000, .confirm = false});
  const auto later = e.add({.path = "5", .seed = "5", .size = 16, .at = 100, .expires_at = 7001});
  const auto never = e.add({.path = "6", .seed = "6", .size = 32, .at = 100});
  e.clock.t = 7000;
  auto first = e.l->soft_delete_expired(e.now(), 500, 4, 2);
  CHECK(first.deleted == 2);
  CHECK(first.bytes == 3);
  CHECK(e.row(e1).is_deleted);
  CHECK(e.row(e2).is_deleted);
  CHECK_FALSE(e.row(e3).is_deleted);
  CHECK(e.task_of(e1).next_retry_at == 7500);
  CHECK(e.task_of(e1).status == ledger::TaskStatus::pending);
  auto second = e.l->soft_delete_expired(e.now(), 500, 4, 2);
  CHECK(second.deleted == 1);
  CHECK(second.bytes == 4);
  CHECK(e.row(e3).is_deleted);
  CHECK(e.l->soft_delete_expired(e.now(), 500, 4, 2).deleted == 0);
  for (auto id : {up, later, never}) {
    INFO("record ", id);
    CHECK_FALSE(e.row(id).is_deleted);
  }
  // Quota: the three expired rows were freed (three alive remain).
  auto r = test::request("o", "f");
  r.max_files = 4;
  r.dry_run = true;
  CHECK(e.l->reserve(r, e.now()).outcome == ReserveOutcome::reserved);
  r.max_files = 3;
  CHECK(e.l->reserve(r, e.now()).outcome == ReserveOutcome::quota_exceeded);
}

TEST_CASE("reserve records expires_at; a resumed row takes the new request's") {
  Env e;
  const auto id = e.add({.seed = "1", .at = 100, .expires_at = 9000});
  CHECK(e.row(id).expires_at == 9000);
  CHECK_FALSE(e.row(e.add({.path = "b", .seed = "2", .at = 100})).expires_at);
  // A failed staged upload's row revived by a resume: its expiry is the new run's.
  auto r = test::request("o", "3");
  r.relative_path = "big";
  r.expires_at = 1000;
  auto res = e.l->reserve(r, e.now());
  REQUIRE(res.outcome == ReserveOutcome::reserved);
  REQUIRE(e.l->set_multipart_upload_id(res.record.id, "mpu", e.now()) ==
          ledger::SetUploadIdOutcome::recorded);
  REQUIRE(e.l->fail_resumable(res.record.id, "link", e.now() + 5000, e.now()) ==
          ledger::MarkFailedOutcome::failed);
  r.resume = true;
  r.expires_at = 2000;
  auto again = e.l->reserve(r, e.now());
  REQUIRE(again.outcome == ReserveOutcome::resumed);
  CHECK(again.record.id == res.record.id);
  CHECK(again.record.expires_at == 2000);
}

TEST_SUITE_END(); // contract

// The job_run table's CHECK and the migration of a database, read back through status()
// (on both databases; the fake has no schema and does not model status).
TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("job_run accepts 'prune'") {
  Env e;
  e.l->record_job_run({"prune", "w", 10, 20, "ok", "{}"});
  CHECK(e.l->status(30).last_success_at.size() <= 4);
}

TEST_CASE(
    "migration 9 -> 10: file_attr filled from object_options, no expiry, job_run kept and taking 'prune'") {
  Env e;
  const auto a =
      e.add({.seed = "1", .at = 100, .options = R"({"metadata":{"commit":"c1"},"tags":{"keep":"yes"}})"});
  const auto b = e.add({.path = "b", .seed = "2", .at = 100, .options = R"({"cache_control":"no-cache"})"});
  const auto c =
      e.add({.path = "c", .seed = "3", .at = 100, .options = R"({"metadata":{"commit":"c1","x":"y"}})"});
  const auto d = e.add({.path = "d", .seed = "4", .at = 100});
  e.l->record_job_run({"sweep", "w1", 10, 20, "ok", "{}"});
  e.l.reset();
  test::as_schema_v9(e.fresh);
  e.l = e.fresh.open(&e.clock, false); // migrates
  CHECK(e.l->schema_version() == ledger::k_schema_version);
  using KV = std::vector<std::pair<std::string, std::string>>;
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}}}) == Ids{a, c});
  CHECK(e.ids({.metadata = KV{{"x", "y"}}}) == Ids{c});
  CHECK(e.ids({.tags = KV{{"keep", "yes"}}}) == Ids{a});
  CHECK(e.ids({.metadata = KV{{"cache_control", "no-cache"}}}).empty());
  for (auto id : {a, b, c, d}) {
    INFO("record ", id);
    CHECK_FALSE(e.row(id).expires_at);
  }
  auto s = e.l->status(30);
  REQUIRE(s.last_runs.at("sweep").has_value());
  CHECK(s.last_runs.at("sweep")->worker_id == "w1");
  e.l->record_job_run({"prune", "w2", 30, 40, "ok", "{}"});
  e.l->record_job_run({"sweep", "w3", 50, 60, "ok", "{}"});
  CHECK(e.l->status(70).last_runs.at("sweep")->worker_id == "w3");
  // New rows after the migration are indexed by reserve.
  const auto f = e.add({.path = "f", .seed = "5", .at = 200, .options = R"({"metadata":{"commit":"c1"}})"});
  CHECK(e.ids({.metadata = KV{{"commit", "c1"}}}) == Ids{a, c, f});
}

TEST_SUITE_END(); // sqlonly
