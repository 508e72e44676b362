#include "support.hpp"

#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <set>
#include <string>
#include <vector>

using namespace lodge;
using match::Filter;
using match::glob_match;

namespace {
// The error a call throws, or "" when it throws none.
template <class Fn> Error error_of(Fn fn) {
  try {
    fn();
  } catch (const LodgeError &e) {
    return e.error();
  }
  return Error(Errc::ok, "");
}

bool mentions(const Error &e, const std::string &text) {
  return e.message.find(text) != std::string::npos;
}

constexpr int64_t k_day_ms = 86'400'000;
} // namespace

TEST_CASE("filter glob: rclone's pattern examples") {
  // Wildcard: '*' stays within one element, unanchored patterns match any element's tail.
  CHECK(glob_match("*.jpg", "file.jpg"));
  CHECK(glob_match("*.jpg", "dir/file.jpg"));
  CHECK_FALSE(glob_match("*.jpg", "file.png"));
  CHECK_FALSE(glob_match("*.jpg", "dir/file.png"));
  // Rooted.
  CHECK(glob_match("/*.jpg", "file.jpg"));
  CHECK(glob_match("/*.jpg", "file2.jpg"));
  CHECK_FALSE(glob_match("/*.jpg", "dir/file.jpg"));
  CHECK_FALSE(glob_match("/*.jpg", "file.png"));
  // Alternates.
  CHECK(glob_match("*.{jpg,png}", "file.jpg"));
  CHECK(glob_match("*.{jpg,png}", "dir/file.png"));
  CHECK_FALSE(glob_match("*.{jpg,png}", "file.gif"));
  CHECK_FALSE(glob_match("*.{jpg,png}", "dir/file.gif"));
  // Path wildcard.
  CHECK(glob_match("dir/**", "dir/anyfile"));
  CHECK(glob_match("dir/**", "subdir/dir/subsubdir/anyfile"));
  CHECK_FALSE(glob_match("dir/**", "file.png"));
  CHECK_FALSE(glob_match("dir/**", "subdir/file.png"));
  // Any char.
  CHECK(glob_match("*.t?t", "file.txt"));
  CHECK(glob_match("*.t?t", "dir/file.tzt"));
  CHECK_FALSE(glob_match("*.t?t", "file.qxt"));
  CHECK_FALSE(glob_match("*.t?t", "dir/file.png"));
  // Range.
  CHECK(glob_match("*.[a-z]", "file.a"));
  CHECK(glob_match("*.[a-z]", "dir/file.b"));
  CHECK_FALSE(glob_match("*.[a-z]", "file.0"));
  CHECK_FALSE(glob_match("*.[a-z]", "dir/file.1"));
  // Escape.
  CHECK(glob_match("*.\\?\\?\\?", "file.???"));
  CHECK(glob_match("*.\\?\\?\\?", "dir/file.???"));
  CHECK_FALSE(glob_match("*.\\?\\?\\?", "file.abc"));
  // Class.
  CHECK(glob_match("*.\\d\\d\\d", "file.012"));
  CHECK(glob_match("*.\\d\\d\\d", "dir/file.345"));
  CHECK_FALSE(glob_match("*.\\d\\d\\d", "file.abc"));
  // Element boundaries: "file.jpg" is not the tail of "afile.jpg".
  CHECK(glob_match("file.jpg", "file.jpg"));
  CHECK(glob_match("file.jpg", "directory/file.jpg"));
  CHECK_FALSE(glob_match("file.jpg", "afile.jpg"));
  CHECK_FALSE(glob_match("file.jpg", "directory/afile.jpg"));
  CHECK_FALSE(glob_match("/file.jpg", "directory/file.jpg"));
  // {A,B}/** and the doc's "??[^[:punct:]]*".
  CHECK(glob_match("{A,B}/**", "A/x/y"));
  CHECK(glob_match("{A,B}/**", "top/B/y"));
  CHECK_FALSE(glob_match("{A,B}/**", "C/y"));
  CHECK(glob_match("??[^[:punct:]]*", "abc.txt"));
  CHECK_FALSE(glob_match("??[^[:punct:]]*", "ab-c.txt"));
  // Case matters.
  CHECK_FALSE(glob_match("potato", "POTATO"));
}

TEST_CASE("filter glob: stars, classes and braces in detail") {
  CHECK_FALSE(glob_match("/a*", "ab/c"));
  CHECK(glob_match("/a**", "ab/c"));
  CHECK(glob_match("/a/**", "a/b/c"));
  CHECK(glob_match("/a/**/z", "a/b/c/z"));
  CHECK_FALSE(glob_match("/a/**/z", "a/z")); // as rclone: the two '/' around '**' stay
  CHECK(glob_match("/a/**z", "a/z"));
  CHECK_FALSE(glob_match("/a/?", "a/"));
  CHECK_FALSE(glob_match("/a?b", "a/b")); // '?' never matches '/'
  CHECK(glob_match("/[^a]*", "b"));
  CHECK_FALSE(glob_match("/[^a]*", "a"));
  CHECK(glob_match("/[a-]", "-"));
  CHECK(glob_match("/x{a,{b,c}d}", "xcd")); // nested braces
  CHECK(glob_match("/x{,y}", "x"));         // an empty alternative
  CHECK(glob_match("/a,b", "a,b"));         // ',' outside braces is itself
  CHECK(glob_match("/\\{a\\}", "{a}"));
  CHECK(glob_match("/[[:upper:]][[:digit:]]", "A1"));
  CHECK_FALSE(glob_match("/[[:upper:]][[:digit:]]", "a1"));
  CHECK(glob_match("/\\w\\s\\W", "a !"));
  CHECK_FALSE(glob_match("/\\w\\s\\W", "a a"));
  // Many stars against a long name that does not match: finishes at once.
  std::string name(4000, 'a');
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*b", name));
  CHECK_FALSE(glob_match("**a**a**a**a**a**a**b", name + "/" + name));
}

TEST_CASE("filter glob: hostile names") {
  // '[' and '\' in names, matched by escaping them.
  CHECK(glob_match("*\\[{JP,KR,HK}\\]*", "Movie [JP].mkv"));
  CHECK_FALSE(glob_match("*\\[{JP,KR,HK}\\]*", "Movie [US].mkv"));
  CHECK(glob_match("/a\\\\b", "a\\b"));
  CHECK(glob_match("*", "a\\b"));
  // An unescaped '[' opens a class (here never closed); escaped it is itself.
  CHECK(error_of([] { (void)glob_match("/weird [name", "weird [name"); }).code == Errc::usage);
  CHECK(glob_match("/weird \\[name", "weird [name"));
  // Spaces, leading dots (no special dotfile rule, as in rclone), unicode one character each.
  CHECK(glob_match("my file.txt", "docs/my file.txt"));
  CHECK(glob_match("*", ".hidden"));
  CHECK(glob_match(".*", "dir/.bashrc"));
  CHECK(glob_match("/??.txt", "日本.txt"));
  CHECK_FALSE(glob_match("/?.txt", "日本.txt"));
  CHECK(glob_match("/[ä-ü]", "ö"));
  CHECK(glob_match("/caf?", "café"));
  // A name that is not UTF-8: each stray byte is one character.
  CHECK(glob_match("/a?b", std::string("a\xff"
                                       "b")));
  CHECK(glob_match("*", std::string("\xc3\x28")));
  CHECK_FALSE(glob_match("/?", std::string("\xc3\x28")));
}

TEST_CASE("filter glob: classes as rclone's: '!' is a member, '^' negates, a negated class takes '/'") {
  // rclone hands a class to Go's regexp: only '^' negates.
  CHECK(glob_match("/[!x]*", "!b"));
  CHECK(glob_match("/[!x]*", "x1"));
  CHECK_FALSE(glob_match("/[!x]*", "ab"));
  CHECK(glob_match("/[^x]*", "ab"));
  CHECK_FALSE(glob_match("/[^x]*", "x1"));
  // A negated class, \W, \D, \S and a range over '/' take a '/' (a '?' or '*' never does).
  CHECK(glob_match("/y[^q]bq", "y/bq"));
  CHECK(glob_match("/y\\Wbq", "y/bq"));
  CHECK(glob_match("/y[!-0]bq", "y/bq"));
  CHECK(glob_match("/y[[:^alpha:]]bq", "y/bq"));
  CHECK_FALSE(glob_match("/y?bq", "y/bq"));
  // What rclone refuses or reads otherwise is refused: a ']' or '[' as a member (rclone
  // counts brackets), a '\\' before a letter or digit that is not \d \s \w or their capitals
  // (Go's regexp reads \n, \b, \pL...), or before a non-ASCII character.
  for (const char *bad :
       {"[]x]", "[^]x]", "[\\]]", "[a[b]", "[a[b]c]", "\\n*", "\\b*", "*\\1", "\\pL", "[\\t]", "\\é"}) {
    Error e = error_of([&] { (void)glob_match(bad, "x"); });
    CHECK_MESSAGE(e.code == Errc::usage, bad);
    CHECK_MESSAGE(mentions(e, std::string("'") + bad + "'"), e.message);
  }
  CHECK(glob_match("/\\ \\!\\#\\]", " !#]"));
}

TEST_CASE("filter glob: braces nest up to a limit, a deeper pattern is a usage error") {
  std::string ok = "/";
  for (int i = 0; i < 32; ++i)
    ok += "{a,";
  ok += "b" + std::string(32, '}');
  CHECK(glob_match(ok, "b"));
  CHECK(glob_match(ok, "a"));
  // 30,000 levels once overflowed the stack; one past the limit is refused at once.
  for (size_t depth : {33U, 30'000U}) {
    std::string deep;
    for (size_t i = 0; i < depth; ++i)
      deep += "{a,";
    deep += "b" + std::string(depth, '}');
    Error e = error_of([&] { (void)glob_match(deep, "b"); });
    CHECK(e.code == Errc::usage);
    CHECK(mentions(e, "more than 32 levels"));
    CHECK(mentions(e, "'{a,{a,"));
    CHECK(e.message.size() < 400); // the pattern is named, shortened
  }
}

TEST_CASE("filter glob: bad patterns are usage errors naming the pattern") {
  for (const char *bad :
       {"a[bc", "{a,b", "a}b", "a]b", "trail\\", "***", "*.{{jpe?g}}", "[[:nope:]]", "[z-a]"}) {
    Error e = error_of([&] { (void)glob_match(bad, "x"); });
    CHECK_MESSAGE(e.code == Errc::usage, bad);
    CHECK_MESSAGE(mentions(e, std::string("'") + bad + "'"), e.message);
  }
  CHECK(mentions(error_of([] { (void)glob_match("a[bc", "x"); }), "'[' without its ']'"));
  CHECK(mentions(error_of([] { (void)glob_match("{a,b", "x"); }), "'{' without its '}'"));
}

TEST_CASE("filter rules: first match wins, no match includes") {
  Filter f;
  CHECK_FALSE(f.active());
  f.add_filter("- secret*.jpg");
  f.add_filter("+ *.jpg");
  f.add_filter("- *.jpg.bak");
  CHECK(f.active());
  CHECK_FALSE(f.path_included("secret17.jpg"));
  CHECK(f.path_included("a/photo.jpg"));
  CHECK_FALSE(f.path_included("photo.jpg.bak"));
  CHECK(f.path_included("notes.txt")); // no rule matched
  // The opposite order: the earlier rule decides, unlike aws-cli's last-rule-wins.
  Filter g;
  g.add_filter("+ *.jpg");
  g.add_filter("- secret*.jpg");
  CHECK(g.path_included("secret17.jpg"));
}

TEST_CASE("filter rules: --include implies excluding the rest, --filter '+' does not") {
  Filter inc;
  inc.add_include("*.{png,jpg}");
  CHECK(inc.path_included("a.png"));
  CHECK(inc.path_included("d/a.jpg"));
  CHECK_FALSE(inc.path_included("a.gif"));
  CHECK(inc.describe().back() == "dir - /**");

  Filter plus;
  plus.add_filter("+ *.png");
  CHECK(plus.path_included("a.gif"));

  // An --exclude before the --include still decides first; the implied rule comes last.
  Filter mixed;
  mixed.add_exclude("secret.png");
  mixed.add_include("*.png");
  mixed.add_exclude("*.gif");
  CHECK_FALSE(mixed.path_included("secret.png"));
  CHECK(mixed.path_included("x.png"));
  CHECK_FALSE(mixed.path_included("x.txt"));
}

TEST_CASE("filter rules: the doc's filter-from file, comments, blank lines and '!'") {
  test::TempDir tmp;
  std::string path = tmp.file("filter-file.txt");
  test::write_file(path, "# a sample filter rule file\n"
                         "- secret*.jpg\n"
                         "+ *.jpg\n"
                         "\n"
                         "   ; an indented comment\n"
                         "+ *.png\r\n"
                         "+ file2.avi\n"
                         "- /dir/Trash/**\n"
                         "+ /dir/**\n"
                         "# exclude everything else\n"
                         "- *\n");
  Filter f;
  f.add_filter_from(path);
  CHECK(f.path_included("a.jpg"));
  CHECK(f.path_included("x/b.png")); // the CRLF line's '\r' is trimmed
  CHECK(f.path_included("deep/file2.avi"));
  CHECK_FALSE(f.path_included("secret17.jpg"));
  CHECK(f.path_included("dir/notes.txt"));
  CHECK_FALSE(f.path_included("dir/Trash/old.txt"));
  CHECK_FALSE(f.path_included("other.txt"));
  CHECK_FALSE(f.path_included("sub/other.txt"));

  Filter bang;
  bang.add_filter_lines("+ *.jpg\n+ *.gif\n!\n+ 42.doc\n- *\n", "rules");
  CHECK(bang.path_included("42.doc"));
  CHECK_FALSE(bang.path_included("a.jpg"));
  CHECK_FALSE(bang.path_included("a.gif"));
  // '!' clears rules given before it, --include's too (its implied "- /**" stays).
  Filter cleared;
  cleared.add_include("*.jpg");
  cleared.add_filter("!");
  CHECK_FALSE(cleared.path_included("a.jpg"));
}

TEST_CASE("filter rules: include-from and exclude-from read plain patterns") {
  test::TempDir tmp;
  test::write_file(tmp.file("inc"), "# a sample include rule file\n*.jpg\nfile2.avi\n");
  test::write_file(tmp.file("exc"), "# a sample exclude rule file\n*.bak\nfile2.jpg\n");
  Filter inc;
  inc.add_include_from(tmp.file("inc"));
  CHECK(inc.path_included("a.jpg"));
  CHECK(inc.path_included("file2.avi"));
  CHECK_FALSE(inc.path_included("a.txt"));
  Filter exc;
  exc.add_exclude_from(tmp.file("exc"));
  CHECK_FALSE(exc.path_included("a.bak"));
  CHECK_FALSE(exc.path_included("d/file2.jpg"));
  CHECK(exc.path_included("a.txt"));
  // A pattern with inner spaces and a '[' escaped in the file.
  Filter spaced;
  spaced.add_exclude_lines("  My Documents/**  \nreport \\[draft\\].txt\n", "list");
  CHECK_FALSE(spaced.path_included("My Documents/a"));
  CHECK_FALSE(spaced.path_included("x/report [draft].txt"));
  CHECK(spaced.path_included("x/report d.txt"));
}

TEST_CASE("filter rules: errors name the file, the line and the pattern") {
  test::TempDir tmp;
  std::string path = tmp.file("rules.txt");
  test::write_file(path, "# fine\n+ *.jpg\n\n- [oops\n");
  Filter f;
  Error e = error_of([&] { f.add_filter_from(path); });
  CHECK(e.code == Errc::usage);
  CHECK(mentions(e, path + ":4: "));
  CHECK(mentions(e, "'[oops'"));

  Error malformed = error_of([] { Filter().add_filter_lines("+*.jpg\n", "stdin"); });
  CHECK(malformed.code == Errc::usage);
  CHECK(mentions(malformed, "stdin:1: malformed filter rule '+*.jpg'"));
  CHECK(error_of([] { Filter().add_filter("* x"); }).code == Errc::usage);

  Error missing = error_of([&] { Filter().add_exclude_from(tmp.file("absent")); });
  CHECK(missing.code == Errc::usage);
  CHECK(mentions(missing, "cannot read filter file '" + tmp.file("absent") + "'"));
  CHECK(mentions(missing, "No such file"));
  // A directory is no rule file (it read as an empty one); an endless input ends at the
  // bound, named, instead of filling memory.
  for (auto add : {&Filter::add_exclude_from, &Filter::add_include_from, &Filter::add_filter_from}) {
    Error dir = error_of([&] { (Filter().*add)(tmp.path().string()); });
    CHECK(dir.code == Errc::usage);
    CHECK(mentions(dir, "'" + tmp.path().string() + "'"));
    CHECK(mentions(dir, "Is a directory"));
    Error endless = error_of([&] { (Filter().*add)("/dev/zero"); });
    CHECK(endless.code == Errc::usage);
    CHECK(mentions(endless, "'/dev/zero'"));
    CHECK(mentions(endless, "more than 16 MiB"));
  }
  Error unbalanced = error_of([] { Filter().add_include("{a,b"); });
  CHECK(unbalanced.code == Errc::usage);
  CHECK(mentions(unbalanced, "'{a,b'"));
}

TEST_CASE("filter directories: '- dir/' and '- dir/**' prune, earlier includes keep") {
  Filter f;
  f.add_filter_lines("- /dir1/\n- /dir2/\n+ *.pdf\n- **\n", "list");
  // The doc's example: dir1 and dir2 and everything below are out, pdfs elsewhere are in.
  CHECK(f.dir_excluded("dir1"));
  CHECK(f.dir_excluded("dir2/"));
  CHECK(f.dir_excluded("dir1/sub"));
  CHECK_FALSE(f.path_included("dir1/a.pdf"));
  CHECK_FALSE(f.dir_excluded("docs"));
  CHECK_FALSE(f.dir_excluded("docs/deep/er"));
  CHECK(f.path_included("docs/deep/a.pdf"));
  CHECK_FALSE(f.path_included("docs/a.txt"));
  CHECK_FALSE(f.dir_excluded("")); // the root always

  // An include before the exclude could match under the directory: it is walked.
  Filter keep;
  keep.add_filter("+ /cache/keep.txt");
  keep.add_filter("- /cache/**");
  CHECK_FALSE(keep.dir_excluded("cache"));
  CHECK(keep.dir_excluded("cache/sub"));
  CHECK(keep.path_included("cache/keep.txt"));
  CHECK_FALSE(keep.path_included("cache/other.txt"));

  // '- dir/' unanchored prunes a directory of that name anywhere, and what it holds.
  Filter node;
  node.add_exclude("node_modules/");
  CHECK(node.dir_excluded("node_modules"));
  CHECK(node.dir_excluded("web/app/node_modules"));
  CHECK_FALSE(node.dir_excluded("web/app"));
  CHECK_FALSE(node.path_included("web/node_modules/x.js"));
  CHECK(node.path_included("node_modules")); // a file of that name is not a directory

  // A file exclude rules out no directory.
  Filter files;
  files.add_exclude("*.tmp");
  CHECK_FALSE(files.dir_excluded("a"));
  // Except "*", which excludes every file at every depth.
  Filter star;
  star.add_exclude("*");
  CHECK(star.dir_excluded("a"));
}

TEST_CASE("filter directories: includes keep only the directories they can reach") {
  Filter f;
  f.add_include("/a/*.jpg");
  CHECK_FALSE(f.dir_excluded("a"));
  CHECK(f.dir_excluded("b"));
  CHECK(f.dir_excluded("a/sub")); // '*' cannot reach below a/
  CHECK(f.path_included("a/x.jpg"));

  Filter deep;
  deep.add_include("/a/**/b/*.txt");
  CHECK_FALSE(deep.dir_excluded("a"));
  CHECK_FALSE(deep.dir_excluded("a/x/y/b"));
  CHECK(deep.dir_excluded("c"));

  // "--include /directory/" serves only to limit the walk: it takes no file itself.
  Filter dironly;
  dironly.add_include("/directory/");
  CHECK_FALSE(dironly.dir_excluded("directory"));
  CHECK(dironly.dir_excluded("other"));
  CHECK_FALSE(dironly.path_included("directory/file"));

  // As rclone: an unanchored include keeps the directories its own path names, wherever
  // they are, and no other: "x/a/b/c.jpg" matches, but x/ is never walked to find it.
  Filter tail;
  tail.add_include("a/b/*.jpg");
  CHECK_FALSE(tail.dir_excluded("a"));
  CHECK_FALSE(tail.dir_excluded("a/b"));
  CHECK(tail.dir_excluded("x"));
  CHECK(tail.dir_excluded("x/y/z"));
  CHECK(tail.path_included("x/a/b/c.jpg"));
  Filter unanchored_deep;
  unanchored_deep.add_include("deep/**");
  CHECK_FALSE(unanchored_deep.dir_excluded("deep"));
  CHECK_FALSE(unanchored_deep.dir_excluded("deep/er/est"));
  CHECK(unanchored_deep.dir_excluded("y"));
  Filter ext;
  ext.add_include("*.jpg");
  CHECK_FALSE(ext.dir_excluded("any/where"));

  // Braces spanning directories: nothing can be ruled out; "{A,B}/**" still prunes C.
  Filter hard;
  hard.add_include("/{dir1/**,dir2/**}");
  CHECK_FALSE(hard.dir_excluded("dir3"));
  Filter easy;
  easy.add_include("/{dir1,dir2}/**");
  CHECK_FALSE(easy.dir_excluded("dir1/sub"));
  CHECK(easy.dir_excluded("dir3"));
}

TEST_CASE("filter size bounds are inclusive, in the one size grammar (a bare number is bytes)") {
  Filter f;
  f.set_bounds(
      {match::parse_filter_size("1K", "--min-size"), match::parse_filter_size("2048", "--max-size"), {}, {}});
  CHECK(f.bounds().min_size == 1024U);
  CHECK(f.bounds().max_size == 2048U);
  CHECK(f.active());
  CHECK_FALSE(f.file_included("a", 1023, 0, 0));
  CHECK(f.file_included("a", 1024, 0, 0));
  CHECK(f.file_included("a", 2048, 0, 0));
  CHECK_FALSE(f.file_included("a", 2049, 0, 0));
  // The rules still apply to a file within the bounds.
  f.add_exclude("*.log");
  CHECK_FALSE(f.file_included("a.log", 1500, 0, 0));

  CHECK(match::parse_filter_size("10M", "--max-size") == 10U << 20);
  CHECK(match::parse_filter_size("1.5G", "--max-size") == 3ULL << 29);
  CHECK(match::parse_filter_size("100B", "--max-size") == 100U);
  CHECK_FALSE(match::parse_filter_size("off", "--max-size"));
  Error e = error_of([] { (void)match::parse_filter_size("10Q", "--min-size"); });
  CHECK(e.code == Errc::usage);
  CHECK(mentions(e, "--min-size: expected a size like 10MiB, got '10Q'"));
  CHECK(error_of([] { Filter().set_bounds({2048, 1024, {}, {}}); }).code == Errc::usage);
  // Equal bounds select exactly that size.
  Filter exact;
  exact.set_bounds({100, 100, {}, {}});
  CHECK(exact.file_included("a", 100, 0, 0));
  CHECK_FALSE(exact.file_included("a", 101, 0, 0));
}

TEST_CASE("filter age bounds are inclusive and measured from the given now") {
  const int64_t now = 1'700'000'000'000;
  Filter f;
  f.set_bounds(
      {{}, {}, match::parse_filter_age("1d", "--min-age"), match::parse_filter_age("2d", "--max-age")});
  CHECK_FALSE(f.file_included("a", 0, now, now));                    // brand new: younger than 1d
  CHECK_FALSE(f.file_included("a", 0, now - k_day_ms + 1, now));     // just under a day
  CHECK(f.file_included("a", 0, now - k_day_ms, now));               // exactly a day old
  CHECK(f.file_included("a", 0, now - 2 * k_day_ms, now));           // exactly two days old
  CHECK_FALSE(f.file_included("a", 0, now - 2 * k_day_ms - 1, now)); // just over
  CHECK_FALSE(f.file_included("a", 0, now + 5000, now));             // from the future: age < 0
  // The same file, a day later: now is a parameter, never read from a clock.
  CHECK_FALSE(f.file_included("a", 0, now - k_day_ms, now + k_day_ms + 1));

  CHECK(match::parse_filter_age("90s", "--max-age") == 90'000);
  CHECK(match::parse_filter_age("1.5s", "--max-age") == 1500);
  CHECK(match::parse_filter_age("1h30m", "--max-age") == 5'400'000);
  CHECK(match::parse_filter_age("1.5h", "--max-age") == 5'400'000);
  CHECK(match::parse_filter_age("250ms", "--max-age") == 250);
  CHECK(match::parse_filter_age("1w", "--max-age") == 7 * k_day_ms);
  CHECK(match::parse_filter_age("1M", "--max-age") == 30 * k_day_ms);
  CHECK(match::parse_filter_age("1y", "--max-age") == 365 * k_day_ms);
  CHECK_FALSE(match::parse_filter_age("off", "--max-age"));
  for (const char *bad : {"", "d", "1x", "2023-01-01", "-1d", "1d ", "1e9y9999999999999y", "90", "1.5"}) {
    Error e = error_of([&] { (void)match::parse_filter_age(bad, "--min-age"); });
    CHECK_MESSAGE(e.code == Errc::usage, bad);
    CHECK_MESSAGE(mentions(e, "--min-age"), e.message);
  }
  CHECK(error_of([] { Filter().set_bounds({{}, {}, 2 * k_day_ms, k_day_ms}); }).code == Errc::usage);
}

TEST_CASE("filter markers: names stored, the walker's answer decides") {
  Filter f;
  CHECK_FALSE(f.excluded_by_marker([](std::string_view, bool) { return true; }));
  f.add_exclude_if_present(".ignore");
  f.add_exclude_if_present("dir3/");
  CHECK(f.active());
  CHECK(f.marker_names() == std::vector<std::string>{".ignore", "dir3/"});
  std::set<std::pair<std::string, bool>> asked;
  auto holds = [&](const std::set<std::pair<std::string, bool>> &present) {
    return [&asked, present](std::string_view name, bool want_dir) {
      asked.emplace(std::string(name), want_dir);
      return present.contains({std::string(name), want_dir});
    };
  };
  CHECK(f.excluded_by_marker(holds({{".ignore", false}})));
  CHECK(f.excluded_by_marker(holds({{"dir3", true}})));
  CHECK_FALSE(f.excluded_by_marker(holds({{"dir3", false}}))); // a file named dir3 is no marker
  CHECK(asked.contains({"dir3", true}));
  for (const char *bad : {"", "/", "a/b", ".", "..", "../x"})
    CHECK_MESSAGE(error_of([&] { Filter().add_exclude_if_present(bad); }).code == Errc::usage, bad);
}
