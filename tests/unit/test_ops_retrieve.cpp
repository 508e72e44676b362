// ops/retrieve: verified reads and atomic, confined writes of `lodge get`.
#include "fake_store.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <filesystem>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace lodge;

namespace {

// Puts `bytes` into the fake store under key (through a file, as put() takes one).
void put_object(test::FakeStore &st, const test::TempDir &tmp, const std::string &key,
                const std::string &bytes) {
  auto path = tmp.file("body.tmp");
  test::write_file(path, bytes);
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  store::PutRequest req;
  req.key = key;
  req.body = {fd.get(), 0, bytes.size(), crypto::sha256_hex(bytes)};
  REQUIRE(st.put(req).ok());
  fs::remove(path);
}

ledger::FileRecord row(const std::string &key, const std::string &path, const std::string &bytes) {
  ledger::FileRecord r;
  r.id = 7;
  r.owner_id = "ci";
  r.original_name = path.substr(path.rfind('/') + 1);
  r.relative_path = path;
  r.object_key = key;
  r.sha256 = crypto::sha256_hex(bytes);
  r.size = static_cast<int64_t>(bytes.size());
  r.upload_status = ledger::FileStatus::active;
  return r;
}

// Every entry under dir, recursively, as relative paths (temporaries included).
std::vector<std::string> entries(const fs::path &dir) {
  std::vector<std::string> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

TEST_CASE("get writes the verified bytes under the relative path, atomically, and skips an identical file") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes(300'000, 'a');
  put_object(st, tmp, "k/1", bytes);
  auto r = row("k/1", "src/lib/a.txt", bytes);
  fs::create_directory(tmp.path() / "out");
  auto dest = ops::open_destination(tmp.file("out"), false).take();
  auto res = ops::get_file(st, r, dest, {});
  REQUIRE(res.outcome == ops::GetOutcome::written);
  CHECK(test::read_file(tmp.file("out/src/lib/a.txt")) == bytes);
  CHECK(entries(tmp.path() / "out") == std::vector<std::string>{"src", "src/lib", "src/lib/a.txt"});
  auto reads = st.count("read");
  res = ops::get_file(st, r, dest, {});
  CHECK(res.outcome == ops::GetOutcome::skipped);
  CHECK(st.count("read") == reads); // no download for an identical file
}

TEST_CASE(
    "get leaves no file when the object's bytes differ from the ledger's (same size, longer, shorter)") {
  test::TempDir tmp;
  std::string bytes = "the real content\n";
  for (const std::string &stored : {std::string("The real content\n"), bytes + "x", bytes.substr(0, 5)}) {
    test::FakeStore st;
    put_object(st, tmp, "k/1", stored);
    auto dir = tmp.path() / ("out" + std::to_string(stored.size()));
    fs::create_directory(dir);
    auto dest = ops::open_destination(dir.string() + "/", false).take();
    auto res = ops::get_file(st, row("k/1", "d/a.txt", bytes), dest, {});
    REQUIRE(res.outcome == ops::GetOutcome::failed);
    CHECK(res.error->code == Errc::content_mismatch);
    CHECK(res.error->message.find("#7") != std::string::npos);
    CHECK(entries(dir) == std::vector<std::string>{"d"}); // the directory made, no file, no temporary
  }
}

TEST_CASE("a failed download removes its temporary file and keeps the existing file") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes = "new bytes\n";
  put_object(st, tmp, "k/1", bytes);
  st.fail("read", Error(Errc::storage_unavailable, "injected"));
  test::write_file(tmp.file("a.txt"), "old");
  auto dest = ops::open_destination(tmp.file("a.txt"), false).take();
  ops::GetOptions force;
  force.force = true;
  auto res = ops::get_file(st, row("k/1", "x/a.txt", bytes), dest, force);
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::storage_unavailable);
  CHECK(test::read_file(tmp.file("a.txt")) == "old");
  CHECK(entries(tmp.path()) == std::vector<std::string>{"a.txt"});
}

TEST_CASE("a stopped download (a signal) removes its temporary file") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes = "stopped\n";
  put_object(st, tmp, "k/1", bytes);
  fs::create_directory(tmp.path() / "out");
  auto dest = ops::open_destination(tmp.file("out"), false).take();
  ops::GetOptions stop;
  stop.stop = [] { return true; };
  auto res = ops::get_file(st, row("k/1", "a.txt", bytes), dest, stop);
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::interrupted);
  CHECK(entries(tmp.path() / "out").empty());
}

TEST_CASE("an existing different file is replaced only with force") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes = "new bytes\n";
  put_object(st, tmp, "k/1", bytes);
  test::write_file(tmp.file("a.txt"), "old");
  auto dest = ops::open_destination(tmp.file("a.txt"), false).take();
  auto res = ops::get_file(st, row("k/1", "a.txt", bytes), dest, {});
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::output_exists);
  CHECK(test::read_file(tmp.file("a.txt")) == "old");
  ops::GetOptions force;
  force.force = true;
  res = ops::get_file(st, row("k/1", "a.txt", bytes), dest, force);
  CHECK(res.outcome == ops::GetOutcome::written);
  CHECK(test::read_file(tmp.file("a.txt")) == bytes);
}

TEST_CASE("get never follows a symlink under the output directory and never writes outside it") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes = "payload\n";
  put_object(st, tmp, "k/1", bytes);
  fs::create_directory(tmp.path() / "out");
  fs::create_directory(tmp.path() / "elsewhere");
  fs::create_directory_symlink(tmp.path() / "elsewhere", tmp.path() / "out" / "src");
  auto dest = ops::open_destination(tmp.file("out"), false).take();
  auto res = ops::get_file(st, row("k/1", "src/a.txt", bytes), dest, {});
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::output_exists);
  CHECK(entries(tmp.path() / "elsewhere").empty());
  // A symlink as the final name is neither written through nor replaced, even with force:
  // only a regular file is ever replaced (IO_ERROR naming what is there).
  fs::create_symlink(tmp.path() / "elsewhere" / "target", tmp.path() / "out" / "b.txt");
  ops::GetOptions force;
  force.force = true;
  res = ops::get_file(st, row("k/1", "b.txt", bytes), dest, force);
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::io_error);
  CHECK(res.error->message.find("is a symlink, not a regular file") != std::string::npos);
  CHECK(fs::is_symlink(tmp.path() / "out" / "b.txt"));
  CHECK(entries(tmp.path() / "elsewhere").empty());
  // Paths a ledger should never hold are refused again here.
  for (const char *bad : {"../escape.txt", "/abs.txt", "a//b.txt", "a/./b.txt", ""}) {
    INFO(bad);
    res = ops::get_file(st, row("k/1", bad, bytes), dest, {});
    REQUIRE(res.outcome == ops::GetOutcome::failed);
    CHECK(res.error->code == Errc::bad_name);
  }
  CHECK(!fs::exists(tmp.path() / "escape.txt"));
}

TEST_CASE("get restores what upload records ('%', U+2024 in a name) and refuses what upload rejects") {
  test::TempDir tmp;
  test::FakeStore st;
  std::string bytes = "payload\n";
  put_object(st, tmp, "k/1", bytes);
  fs::create_directory(tmp.path() / "out");
  auto dest = ops::open_destination(tmp.file("out"), true).take();
  for (const std::string &rel : {std::string("100%.txt"),
                                 std::string("d/a\xE2\x80\xA4"
                                             "b.txt"),
                                 std::string("sp ace/\xC3\xA9t\xC3\xA9.txt")}) {
    INFO(rel);
    auto res = ops::get_file(st, row("k/1", rel, bytes), dest, {});
    REQUIRE(res.outcome == ops::GetOutcome::written);
    CHECK(test::read_file((tmp.path() / "out" / rel).string()) == bytes);
  }
  // A row written before the rule, with a name it refuses: refused, nothing written.
  auto res = ops::get_file(st, row("k/1", "d/\xE2\x80\xA5/x.txt", bytes), dest, {});
  REQUIRE(res.outcome == ops::GetOutcome::failed);
  CHECK(res.error->code == Errc::bad_name);
  CHECK(res.error->message.find("after Unicode folding") != std::string::npos);
  CHECK(!fs::exists(tmp.path() / "out" / "d" / "\xE2\x80\xA5"));
}

TEST_CASE("a row that is not ACTIVE is refused before any download") {
  test::TempDir tmp;
  test::FakeStore st;
  auto r = row("k/1", "a.txt", "x");
  r.is_deleted = true;
  CHECK(ops::shown_status(r) == "DELETED");
  auto dest = ops::open_destination(tmp.path().string() + "/", false).take();
  auto res = ops::get_file(st, r, dest, {});
  CHECK(res.error->code == Errc::not_active);
  r.is_deleted = false;
  r.upload_status = ledger::FileStatus::uploading;
  CHECK(ops::require_active(r).error().code == Errc::not_active);
  CHECK(st.count("read") == 0);
}

TEST_CASE("a store that cannot presign says so") {
  test::FakeStore st;
  auto u = st.presign_get("k/1", 3600);
  REQUIRE(!u.ok());
  CHECK(u.error().code == Errc::unsupported);
  CHECK(u.error().message.find("fake://") != std::string::npos);
}

TEST_CASE("a token of digits is an id; anything else a path") {
  CHECK(ops::parse_file_ref("42").id == 42);
  CHECK(!ops::parse_file_ref("42.txt").id);
  CHECK(ops::parse_file_ref("src/42").path == "src/42");
  CHECK(!ops::parse_file_ref("").id);
}
