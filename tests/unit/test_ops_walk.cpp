#include "support.hpp"

#include <fcntl.h>
#include <lodge/match/filter.hpp>
#include <lodge/ops/upload/walk.hpp>
#include <map>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace lodge;

namespace {
// What a walk visits: path -> "excluded: why", "skipped", "error" or "file".
std::map<std::string, std::string> walk(const std::string &root, const match::Filter &f, int64_t now_ms) {
  std::map<std::string, std::string> seen;
  ops::WalkSkips skips;
  skips.filter = {&f, now_ms};
  ops::walk_inputs({root}, false, skips, [&](const ops::InputFile &file, const std::optional<Error> &err) {
    std::string rel = file.path.substr(root.size() + 1);
    seen[rel] = !file.excluded.empty()  ? "excluded: " + file.excluded
                : err                   ? "error"
                : !file.skipped.empty() ? "skipped"
                                        : "file";
    return true;
  });
  return seen;
}

// The directory's last access, which a listing (getdents) moves forward.
int64_t atime_ns(const std::string &path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<int64_t>(st.st_atim.tv_sec) * 1'000'000'000 + st.st_atim.tv_nsec;
}

// Sets a directory's atime far in the past (before its mtime), so that a listing updates it
// even under relatime.
void age_atime(const std::string &path) {
  struct timespec ts[2] = {{1, 0}, {0, UTIME_OMIT}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), ts, 0) == 0);
}
} // namespace

TEST_CASE("walk with a filter: an excluded directory is one entry and is never listed") {
  test::TempDir dir;
  std::string root = dir.file("tree");
  std::filesystem::create_directories(root + "/build/obj");
  std::filesystem::create_directories(root + "/node_modules/pkg");
  std::filesystem::create_directories(root + "/keep");
  test::write_file(root + "/build/a.o", "o");
  test::write_file(root + "/build/a.c", "c");
  test::write_file(root + "/build/obj/b.o", "o");
  test::write_file(root + "/node_modules/pkg/index.js", "js");
  test::write_file(root + "/keep/x.txt", "x");
  // A FIFO would be reported as an error if its directory were walked.
  REQUIRE(::mkfifo((root + "/node_modules/pkg/pipe").c_str(), 0600) == 0);
  age_atime(root + "/node_modules");
  age_atime(root + "/keep");
  const int64_t pruned_before = atime_ns(root + "/node_modules");
  const int64_t control_before = atime_ns(root + "/keep");

  match::Filter f;
  f.add_exclude("*.o");
  f.add_exclude("node_modules/");
  auto seen = walk(root, f, 0);
  CHECK(seen == std::map<std::string, std::string>{{"build/a.c", "file"},
                                                   {"build/a.o", "excluded: - *.o"},
                                                   {"build/obj/b.o", "excluded: - *.o"},
                                                   {"keep/x.txt", "file"},
                                                   {"node_modules/", "excluded: - node_modules/"}});
  // The walk lists what it enters (the control's atime moves), and never listed the excluded one.
  if (atime_ns(root + "/keep") != control_before)
    CHECK(atime_ns(root + "/node_modules") == pruned_before);
  else
    MESSAGE("this filesystem does not record directory reads (noatime): the listing check is moot");
}

TEST_CASE("walk with a filter: a marker excludes its directory; bounds and the implied include") {
  test::TempDir dir;
  std::string root = dir.file("tree");
  std::filesystem::create_directories(root + "/cache/deep");
  std::filesystem::create_directories(root + "/src");
  test::write_file(root + "/cache/.nobackup", "");
  test::write_file(root + "/cache/deep/big.c", std::string(4096, 'x'));
  test::write_file(root + "/src/small.c", "1");
  test::write_file(root + "/src/big.c", std::string(4096, 'x'));
  test::write_file(root + "/src/notes.txt", "n");

  match::Filter f;
  f.add_include("*.c");
  f.add_exclude_if_present(".nobackup");
  f.set_bounds({std::nullopt, 1024, std::nullopt, std::nullopt});
  auto seen = walk(root, f, 0);
  CHECK(seen == std::map<std::string, std::string>{{"cache/", "excluded: --exclude-if-present .nobackup"},
                                                   {"src/big.c", "excluded: --max-size"},
                                                   {"src/notes.txt", "excluded: no --include matched"},
                                                   {"src/small.c", "file"}});
}

TEST_CASE("walk with a filter: ages from the walk's stat and the run's now; anchors at the argument") {
  test::TempDir dir;
  std::string root = dir.file("tree");
  std::filesystem::create_directories(root + "/sub");
  test::write_file(root + "/old.log", "o");
  test::write_file(root + "/new.log", "n");
  test::write_file(root + "/sub/new.log", "n");
  struct timespec old_time[2] = {{0, UTIME_OMIT}, {1'000'000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (root + "/old.log").c_str(), old_time, 0) == 0);
  match::Filter f;
  f.add_exclude("/new.log"); // the argument's root, not sub/
  struct stat st {};
  REQUIRE(::stat((root + "/new.log").c_str(), &st) == 0);
  const int64_t new_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000;
  // A day after new.log was written: old.log (1970) is older than a week, new.log is not.
  f.set_bounds({std::nullopt, std::nullopt, std::nullopt, 7 * 86'400'000LL});
  auto seen = walk(root, f, new_ms + 86'400'000LL);
  CHECK(seen == std::map<std::string, std::string>{{"new.log", "excluded: - /new.log"},
                                                   {"old.log", "excluded: --max-age"},
                                                   {"sub/new.log", "file"}});
}
