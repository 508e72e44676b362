// util::AtomicFile: the one write-then-publish of lodge. The target shows the old bytes or
// the new ones, never a mixture; a file not committed, or a step that fails, leaves the
// target as it was and no temporary file behind.
#include "support.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <lodge/util/atomic_file.hpp>
#include <optional>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace lodge;
namespace fs = std::filesystem;

namespace {

// Every name in dir, sorted.
std::vector<std::string> names_in(const fs::path &dir) {
  std::vector<std::string> out;
  for (const auto &e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

unsigned mode_of(const std::string &path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

ino_t inode_of(const std::string &path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_ino;
}

util::AtomicFile::Options durable_with_mode(unsigned mode) {
  util::AtomicFile::Options o;
  o.mode = mode;
  o.exact_mode = true;
  return o;
}

} // namespace

TEST_CASE("commit publishes the whole contents with the mode asked for, whatever the umask") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  const std::string text(300'000, 'x'); // more than one write(2) may take
  auto old = ::umask(077);
  util::AtomicFile f(path, durable_with_mode(0644));
  REQUIRE(f.open());
  CHECK(!fs::exists(path)); // nothing at the target before the commit
  REQUIRE(f.write(text.substr(0, 1000)));
  REQUIRE(f.write(text.substr(1000)));
  REQUIRE(f.commit());
  ::umask(old);
  CHECK(test::read_file(path) == text);
  CHECK(mode_of(path) == 0644);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
}

TEST_CASE("without exact_mode the umask applies to the mode, as open(2) does") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  auto old = ::umask(027);
  util::AtomicFile::Options o;
  o.mode = 0666;
  util::AtomicFile f(path, o);
  REQUIRE(f.open());
  REQUIRE(f.write("x"));
  REQUIRE(f.commit());
  ::umask(old);
  CHECK(mode_of(path) == 0640);
}

TEST_CASE("not committing leaves the target untouched and no temporary file behind") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  SUBCASE("no target before") {
    {
      util::AtomicFile f(path, {});
      REQUIRE(f.open());
      REQUIRE(f.write("half of it"));
      CHECK(names_in(dir.path()).size() == 1); // the temporary file, beside the target
    }
    CHECK(names_in(dir.path()).empty());
  }
  SUBCASE("an existing target") {
    test::write_file(path, "old");
    {
      util::AtomicFile f(path, {});
      REQUIRE(f.open());
      REQUIRE(f.write("new"));
      f.discard();
      CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
    }
    CHECK(test::read_file(path) == "old");
    CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
  }
  SUBCASE("an anonymous file") {
    util::AtomicFile::Options o;
    o.replace = false;
    o.anonymous = true;
    {
      util::AtomicFile f(path, o);
      REQUIRE(f.open());
      REQUIRE(f.write("half of it"));
    }
    CHECK(names_in(dir.path()).empty());
  }
  SUBCASE("a moved-from file removes nothing, the one it moved to removes it") {
    std::optional<util::AtomicFile> kept;
    {
      util::AtomicFile f(path, {});
      REQUIRE(f.open());
      kept.emplace(std::move(f));
    }
    CHECK(names_in(dir.path()).size() == 1);
    kept.reset();
    CHECK(names_in(dir.path()).empty());
  }
}

TEST_CASE("an existing target is replaced in one step") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  test::write_file(path, "the old contents");
  const ino_t before = inode_of(path);
  util::Fd reader(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(reader.valid());
  util::AtomicFile f(path, durable_with_mode(0600));
  REQUIRE(f.open());
  REQUIRE(f.write("new"));
  CHECK(test::read_file(path) == "the old contents"); // written, not yet published
  REQUIRE(f.commit());
  CHECK(test::read_file(path) == "new");
  // A new file took the name; the old one was never written in place.
  CHECK(inode_of(path) != before);
  char buf[64] = {};
  CHECK(::pread(reader.get(), buf, sizeof buf - 1, 0) == 16);
  CHECK(std::string(buf) == "the old contents");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
}

TEST_CASE("an anonymous file replaces an existing target, and no name of it stays behind") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  util::AtomicFile::Options o;
  o.anonymous = true;
  o.durable = false;
  for (const char *before : {"", "the old contents"}) {
    CAPTURE(before);
    if (*before) test::write_file(path, before);
    util::AtomicFile f(path, o);
    REQUIRE(f.open());
    REQUIRE(f.write("new"));
    CHECK(names_in(dir.path()) ==
          (*before ? std::vector<std::string>{"out.txt"} : std::vector<std::string>{}));
    REQUIRE(f.commit());
    CHECK(test::read_file(path) == "new");
    CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
    fs::remove(path);
  }
}

TEST_CASE("with replace off, an existing target is kept and commit fails with EEXIST") {
  test::TempDir dir;
  const auto path = dir.file("out.txt");
  for (bool anonymous : {false, true}) {
    CAPTURE(anonymous);
    test::write_file(path, "old");
    util::AtomicFile::Options o;
    o.replace = false;
    o.anonymous = anonymous;
    util::AtomicFile f(path, o);
    REQUIRE(f.open());
    REQUIRE(f.write("new"));
    CHECK(!f.commit());
    CHECK(f.error().err == EEXIST);
    CHECK(test::read_file(path) == "old");
    CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
    // With the target gone, the same options publish.
    fs::remove(path);
    util::AtomicFile g(path, o);
    REQUIRE(g.open());
    REQUIRE(g.write("new"));
    REQUIRE(g.commit());
    CHECK(test::read_file(path) == "new");
    CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
  }
}

TEST_CASE("a target in an open directory, with the temporary file made elsewhere") {
  test::TempDir dir;
  fs::create_directory(dir.path() / "target");
  fs::create_directory(dir.path() / "tmp");
  util::Fd d(::open((dir.path() / "target").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(d.valid());
  util::AtomicFile::Options o;
  o.temp_dir = (dir.path() / "tmp").string();
  o.temp_prefix = "t-";
  util::AtomicFile f(d.get(), "a.txt", o);
  REQUIRE(f.open());
  REQUIRE(names_in(dir.path() / "tmp").size() == 1);
  CHECK(names_in(dir.path() / "tmp").front().rfind("t-", 0) == 0);
  REQUIRE(f.write("bytes"));
  REQUIRE(f.commit());
  CHECK(test::read_file((dir.path() / "target" / "a.txt").string()) == "bytes");
  CHECK(names_in(dir.path() / "tmp").empty());
}

TEST_CASE("a failing step reports its errno and leaves nothing behind") {
  test::TempDir dir;
  SUBCASE("the directory is missing") {
    util::AtomicFile f(dir.file("no/such/dir/out.txt"), {});
    CHECK(!f.open());
    CHECK(std::string(f.error().step) == "open");
    CHECK(f.error().err == ENOENT);
  }
  SUBCASE("the directory is not writable") {
    if (::geteuid() == 0) return; // root writes anyway
    fs::create_directory(dir.path() / "ro");
    fs::permissions(dir.path() / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    util::AtomicFile f((dir.path() / "ro" / "out.txt").string(), {});
    CHECK(!f.open());
    CHECK(std::string(f.error().step) == "open");
    CHECK(f.error().err == EACCES);
    fs::permissions(dir.path() / "ro", fs::perms::owner_all);
    CHECK(names_in(dir.path() / "ro").empty());
  }
  SUBCASE("a write fails (the file size limit)") {
    const auto path = dir.file("out.txt");
    test::write_file(path, "old");
    struct rlimit was {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &was) == 0);
    auto *handler = std::signal(SIGXFSZ, SIG_IGN); // EFBIG instead of the signal
    struct rlimit small = was;
    small.rlim_cur = 4096;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    util::AtomicFile f(path, {});
    REQUIRE(f.open());
    bool wrote = f.write(std::string(8192, 'x'));
    ::setrlimit(RLIMIT_FSIZE, &was);
    std::signal(SIGXFSZ, handler);
    CHECK(!wrote);
    CHECK(std::string(f.error().step) == "write");
    CHECK(f.error().err == EFBIG);
    CHECK(test::read_file(path) == "old");
    CHECK(names_in(dir.path()) == std::vector<std::string>{"out.txt"});
  }
  SUBCASE("the rename fails (the target is a directory)") {
    fs::create_directory(dir.path() / "a-directory");
    util::AtomicFile f(dir.file("a-directory"), {});
    REQUIRE(f.open());
    REQUIRE(f.write("x"));
    CHECK(!f.commit());
    CHECK(std::string(f.error().step) == "rename");
    CHECK(f.error().err == EISDIR);
    CHECK(fs::is_directory(dir.path() / "a-directory"));
    CHECK(names_in(dir.path()) == std::vector<std::string>{"a-directory"});
  }
}

TEST_CASE("only a regular file is replaced: a FIFO, a directory or a symlink at the target stays, commit "
          "fails naming it") {
  test::TempDir dir;
  const auto path = dir.file("out.prom");
  const auto elsewhere = dir.file("elsewhere.txt");
  test::write_file(elsewhere, "an operator's file");
  struct Case {
    const char *name;
    std::function<void()> make;
    const char *found;
    int err;
  };
  const std::vector<Case> cases{
      {"a FIFO", [&] { REQUIRE(::mkfifo(path.c_str(), 0600) == 0); }, "a FIFO", EEXIST},
      {"a directory", [&] { fs::create_directory(path); }, "a directory", EISDIR},
      {"a symlink", [&] { fs::create_symlink(elsewhere, path); }, "a symlink", EEXIST},
  };
  for (const auto &c : cases) {
    for (bool anonymous : {false, true}) {
      CAPTURE(c.name);
      CAPTURE(anonymous);
      c.make();
      struct stat before {};
      REQUIRE(::lstat(path.c_str(), &before) == 0);
      util::AtomicFile::Options o;
      o.anonymous = anonymous;
      util::AtomicFile f(path, o);
      REQUIRE(f.open());
      REQUIRE(f.write("lodge_health_ok 1\n"));
      CHECK(!f.commit());
      CHECK(std::string(f.error().step) == "check the target");
      CHECK(std::string(f.error().found) == c.found);
      CHECK(f.error().err == c.err);
      struct stat after {};
      REQUIRE(::lstat(path.c_str(), &after) == 0);
      CHECK(after.st_ino == before.st_ino);
      CHECK((after.st_mode & S_IFMT) == (before.st_mode & S_IFMT));
      CHECK(test::read_file(elsewhere) == "an operator's file");
      CHECK(names_in(dir.path()) == std::vector<std::string>{"elsewhere.txt", "out.prom"});
      fs::remove(path);
    }
  }
}

TEST_CASE("file_kind names each type of file") {
  CHECK(std::string(util::file_kind(S_IFREG | 0644)) == "a regular file");
  CHECK(std::string(util::file_kind(S_IFIFO | 0600)) == "a FIFO");
  CHECK(std::string(util::file_kind(S_IFCHR | 0666)) == "a character device");
  CHECK(std::string(util::file_kind(S_IFBLK | 0660)) == "a block device");
  CHECK(std::string(util::file_kind(S_IFSOCK | 0755)) == "a socket");
  CHECK(std::string(util::file_kind(S_IFLNK | 0777)) == "a symlink");
  CHECK(std::string(util::file_kind(S_IFDIR | 0755)) == "a directory");
}
