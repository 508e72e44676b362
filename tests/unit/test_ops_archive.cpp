// Archives: the relative path a row records, and de-duplication that never lies (the
// uploader reports `duplicate` only after a HEAD found the existing row's object, size and
// stamp; a missing object retires the row and the file is uploaded anew; a HEAD that fails
// otherwise fails the file and deletes nothing).
#include "fake_store.hpp"
#include "support.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/upload.hpp>

using namespace lodge;

namespace {
struct Env {
  test::TempDir dir;
  std::unique_ptr<ledger::Ledger> l;
  test::FakeStore store;
  std::string file;
  Env() {
    ledger::OpenOptions o;
    o.location = dir.file("l.db");
    o.create = true;
    l = ledger::open_ledger(o);
    std::filesystem::create_directories(dir.path() / "in");
    file = dir.file("in/a.txt");
    test::write_file(file, "the same bytes\n");
  }
  ops::FileResult upload(const std::string &dedup = "prefix", const std::string &run_prefix = "") {
    ops::UploadSettings s;
    s.policy.name = "default";
    s.policy.dedup = dedup;
    s.owner = "o";
    s.run_prefix = run_prefix;
    ops::Uploader up(*l, store, s, util::system_clock());
    return up.upload(file);
  }
};
} // namespace

TEST_CASE("a duplicate is reported only after its object was found by a HEAD") {
  Env e;
  auto first = e.upload();
  REQUIRE(first.outcome == ops::UploadOutcome::active);
  CHECK(first.relative_path == "a.txt");
  auto heads = e.store.count("head");
  auto second = e.upload();
  CHECK(second.outcome == ops::UploadOutcome::duplicate);
  CHECK(second.id == first.id);
  CHECK(e.store.count("head") == heads + 1);
  CHECK(e.store.succeeded("head").back() == first.object_key);
}

TEST_CASE("an object missing from the store: its row is retired and the file is uploaded anew") {
  Env e;
  auto first = e.upload();
  REQUIRE(first.outcome == ops::UploadOutcome::active);
  e.store.forget(first.object_key);
  auto again = e.upload();
  REQUIRE(again.outcome == ops::UploadOutcome::active);
  CHECK(again.id != first.id);
  CHECK(again.object_key != first.object_key);
  CHECK(e.store.has(again.object_key));
  auto old = e.l->find_file(*first.id);
  REQUIRE(old);
  CHECK(old->is_deleted);
  CHECK(old->upload_status == ledger::FileStatus::active);
  CHECK(old->failure_reason == std::optional<std::string>("object missing from the store"));
  // Its task is pending: deleting a key that is gone is harmless, and it is never the new key.
  auto t = e.l->find_task_for(*first.id);
  REQUIRE(t);
  CHECK(t->status == ledger::TaskStatus::pending);
  CHECK(t->object_key == first.object_key);
}

TEST_CASE("a HEAD that fails (not 404) fails the file: never a duplicate, nothing retired or deleted") {
  Env e;
  auto first = e.upload();
  REQUIRE(first.outcome == ops::UploadOutcome::active);
  e.store.fail("head", Error(Errc::storage_unavailable, "HTTP 503 SlowDown"));
  auto r = e.upload();
  CHECK(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::storage_unavailable);
  CHECK(r.error->message.find("503") != std::string::npos);
  CHECK(e.store.removed().empty());
  CHECK(e.store.count("put") == 1);
  auto row = e.l->find_file(*first.id);
  CHECK_FALSE(row->is_deleted);
  CHECK(e.l->list_files({.owner = "o", .include_dead = true}).size() == 1);
}

TEST_CASE("an object that is not the row's (size or stamp) is no duplicate and is left alone") {
  Env e;
  auto first = e.upload();
  REQUIRE(first.outcome == ops::UploadOutcome::active);
  e.store.set_metadata(first.object_key, store::meta::ledger, "00000000-0000-4000-8000-00000000000f");
  auto r = e.upload();
  CHECK(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::storage_error);
  CHECK(r.error->message.find("lodgeledger") != std::string::npos);
  CHECK(e.store.removed().empty());
  CHECK_FALSE(e.l->find_file(*first.id)->is_deleted);
}

TEST_CASE("dedup scopes through the uploader: prefix keeps a copy per prefix, owner one, none every time") {
  Env e;
  auto b1 = e.upload("prefix", "builds/1");
  auto b2 = e.upload("prefix", "builds/2");
  REQUIRE(b1.outcome == ops::UploadOutcome::active);
  REQUIRE(b2.outcome == ops::UploadOutcome::active);
  CHECK(b1.object_key.rfind("o/builds/1/", 0) == 0);
  CHECK(b2.object_key.rfind("o/builds/2/", 0) == 0);
  CHECK(b1.object_key.ends_with("/a.txt"));
  // Stored once under owner scope, but builds/3/a.txt gets a row of its own sharing it.
  auto owner = e.upload("owner", "builds/3");
  CHECK(owner.outcome == ops::UploadOutcome::duplicate);
  CHECK(owner.shares == b1.id);
  CHECK(owner.id != b1.id);
  CHECK(owner.object_key == b1.object_key);
  CHECK(e.l->find_by_path("o", "builds/3", "a.txt").at(0).id == *owner.id);
  auto n1 = e.upload("none", "builds/1");
  CHECK(n1.outcome == ops::UploadOutcome::active);
  CHECK(n1.id != b1.id);
  // The object carries its path, percent-encoded, and its prefix.
  auto h = e.store.head(n1.object_key);
  REQUIRE(h);
  CHECK(h->metadata.at(store::meta::path) == "a.txt");
  CHECK(h->metadata.at(store::meta::prefix) == "builds/1");
}

TEST_CASE("relative paths: normalized, each component sanitized, never absolute or climbing") {
  auto ok = [](const char *in) {
    auto r = ops::sanitize_relative_path(in);
    INFO(in);
    REQUIRE(r);
    return r.value();
  };
  CHECK(ok("a.txt") == "a.txt");
  CHECK(ok("./a//b/./c.txt") == "a/b/c.txt");
  CHECK(ok("tree/src/lib/f010.txt") == "tree/src/lib/f010.txt");
  CHECK(ok("/abs/dir/file.bin") == "file.bin");
  CHECK(ok("../up/x.txt") == "x.txt");
  CHECK(ok("a/../b.txt") == "b.txt");
  CHECK(ok("r\xC3\xA9sum\xC3\xA9/100% sure.txt") == "r\xC3\xA9sum\xC3\xA9/100% sure.txt");
  auto bad = [](const std::string &in, const std::string &part) {
    auto r = ops::sanitize_relative_path(in);
    INFO(in);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::bad_name);
    CHECK(r.error().message.find(part) != std::string::npos);
  };
  bad("dir/ctl\x01/a.txt", "control");
  bad("dir/back\\slash/a.txt", "backslash");
  bad("a/" + std::string(300, 'x') + "/b", "longer than 255");
  bad("..", "empty");
  bad("", "empty");
}

TEST_CASE("an object key over 1024 bytes is a BAD_NAME for that file, before anything is reserved") {
  Env e;
  std::string deep = "in";
  while (deep.size() < 1100) {
    deep += "/" + std::string(200, 'd');
  }
  std::filesystem::create_directories(e.dir.path() / deep);
  auto f = e.dir.file(deep + "/a.txt");
  test::write_file(f, "x");
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  ops::Uploader up(*e.l, e.store, s, util::system_clock());
  ops::InputFile in;
  in.path = f;
  in.name = f;
  in.relative_path = deep.substr(3) + "/a.txt";
  auto r = up.upload(in);
  CHECK(r.outcome == ops::UploadOutcome::rejected);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::bad_name);
  CHECK(r.error->message.find("1024") != std::string::npos);
  CHECK(e.l->list_files({.owner = "o", .include_dead = true}).empty());
}
