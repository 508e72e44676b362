// Resume, on the ledger fake and the fake store: a staged upload whose parts failed is kept
// (its row failed with the cleanup one grace later), and the next upload of the same content
// revives the row and sends only the parts not proven stored; anything unexpected starts the
// staged upload afresh, and a changed file never leaves its parts for a resume.
#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <lodge/crypto/sha256.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload/upload.hpp>

using namespace lodge;

namespace {
constexpr uint64_t k_part = 1024;
constexpr int64_t k_grace_ms = 1'000;

// 1 KiB parts, one at a time; the run's grace 1 s.
ops::UploadSettings resume_settings() {
  ops::UploadSettings s;
  s.policy.name = "default";
  s.policy.deadline_ms = 60'000;
  s.cleanup.grace_ms = k_grace_ms;
  s.owner = "o";
  s.multipart_threshold = k_part;
  s.part_size = k_part;
  s.part_concurrency = 1;
  return s;
}

// A 5-part file whose parts differ, so a part sent in the wrong place shows.
std::string five_parts() {
  std::string bytes;
  for (char c : std::string("abcde"))
    bytes += std::string(k_part, c);
  return bytes;
}

struct World {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  std::string path = dir.file("big.bin");
  ops::UploadSettings s = resume_settings();

  World() { test::write_file(path, five_parts()); }

  ops::FileResult upload() {
    ops::Uploader up(l, store, s, clock);
    return up.upload(path);
  }

  // The first upload: parts 1-3 stored, the fourth fails (the link went away).
  ops::FileResult fail_at_part_four() {
    int sent = 0;
    store.on_put_part = [&sent, this](int) {
      if (++sent == 4) store.fail("put_part", Error(Errc::storage_unavailable, "connection reset"), 1);
    };
    auto r = upload();
    store.on_put_part = nullptr;
    return r;
  }
};
} // namespace

TEST_CASE(
    "resume: a part that fails keeps the staged upload, and the row fails with its cleanup a grace later") {
  World w;
  const int64_t t0 = w.clock.now_ms();
  auto r = w.fail_at_part_four();
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_unavailable);
  auto row = w.l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(row.is_deleted);
  CHECK(w.l.task_of(*r.id).status == ledger::TaskStatus::pending);
  CHECK(w.l.task_of(*r.id).next_retry_at == t0 + k_grace_ms);
  CHECK(w.store.count("abort_staged") == 0);
  CHECK(w.store.count("remove_owned") == 0); // not compensated at once
  CHECK(w.store.open_uploads().size() == 1);
}

TEST_CASE("resume: the next upload of the same file revives the row and sends only the missing parts") {
  World w;
  auto first = w.fail_at_part_four();
  REQUIRE(first.outcome == ops::UploadOutcome::failed);
  const size_t parts_before = w.store.count("put_part");
  auto r = w.upload();
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  CHECK(r.id == first.id);
  CHECK(r.resumed_bytes == 3 * k_part);
  CHECK(w.store.count("put_part") - parts_before == 2); // parts 4 and 5
  CHECK(w.store.count("begin_staged") == 1);            // the same staged upload
  auto parts = w.store.completed_parts();
  REQUIRE(parts.size() == 5);
  for (size_t i = 0; i < parts.size(); ++i) {
    CHECK(parts[i].number == static_cast<int>(i) + 1);
    CHECK(parts[i].sha256_hex == crypto::sha256_hex(std::string(k_part, static_cast<char>('a' + i))));
  }
  CHECK(w.l.row(*r.id).upload_status == ledger::FileStatus::active);
  CHECK(w.store.open_uploads().empty());
}

TEST_CASE("resume: a stored part whose digest is not the file's is sent again under its number") {
  World w;
  auto first = w.fail_at_part_four();
  auto handle = *w.l.row(*first.id).multipart_upload_id;
  store::StoredPart planted;
  planted.number = 2;
  planted.size = k_part;
  planted.etag = "other";
  planted.sha256_hex = crypto::sha256_hex(std::string(k_part, 'z'));
  w.store.plant_part(handle, planted);
  const size_t parts_before = w.store.count("put_part");
  auto r = w.upload();
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  CHECK(r.resumed_bytes == 2 * k_part);                 // parts 1 and 3
  CHECK(w.store.count("put_part") - parts_before == 3); // 2, 4, 5
  CHECK(w.store.completed_parts().at(1).sha256_hex == crypto::sha256_hex(std::string(k_part, 'b')));
}

TEST_CASE("resume: parts of another size, or a staged upload that is gone, start it afresh") {
  SUBCASE("another part size: the old staged upload is aborted, a new one begun") {
    World w;
    auto first = w.fail_at_part_four();
    auto old = *w.l.row(*first.id).multipart_upload_id;
    w.s.part_size = 2 * k_part;
    w.s.multipart_threshold = 2 * k_part;
    auto r = w.upload();
    REQUIRE(r.outcome == ops::UploadOutcome::active);
    CHECK(r.id == first.id);
    CHECK(r.resumed_bytes == 0);
    CHECK(w.store.count("abort_staged") == 1);
    CHECK(w.store.count("begin_staged") == 2);
    CHECK(*w.l.row(*r.id).multipart_upload_id != old);
  }
  SUBCASE("gone: a new staged upload for the same row") {
    World w;
    auto first = w.fail_at_part_four();
    auto old = *w.l.row(*first.id).multipart_upload_id;
    REQUIRE(w.store.abort_staged(first.object_key, old));
    auto r = w.upload();
    REQUIRE(r.outcome == ops::UploadOutcome::active);
    CHECK(r.id == first.id);
    CHECK(r.resumed_bytes == 0);
    CHECK(w.store.count("begin_staged") == 2);
  }
}

TEST_CASE("resume: a listing that fails leaves the row failed and resumable again") {
  World w;
  auto first = w.fail_at_part_four();
  w.store.fail("list_parts", Error(Errc::storage_unavailable, "503"), 1);
  auto r = w.upload();
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_unavailable);
  CHECK(w.l.row(*first.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK(w.store.count("abort_staged") == 0);
  auto again = w.upload();
  REQUIRE(again.outcome == ops::UploadOutcome::active);
  CHECK(again.id == first.id);
  CHECK(again.resumed_bytes == 3 * k_part);
}

TEST_CASE("resume: a listing that fails again never moves the cleanup later") {
  World w;
  auto first = w.fail_at_part_four();
  const int64_t due = w.l.task_of(*first.id).next_retry_at;
  w.clock.t += 600; // within the grace
  w.store.fail("list_parts", Error(Errc::storage_unavailable, "503"), 1);
  auto r = w.upload();
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(w.l.task_of(*first.id).next_retry_at == due);
}

TEST_CASE("resume: a listing refused for good (403, an unreadable part) starts the staged upload afresh") {
  for (Errc refused : {Errc::access_denied, Errc::storage_error}) {
    CAPTURE(errc_name(refused));
    World w;
    auto first = w.fail_at_part_four();
    w.store.fail("list_parts", Error(refused, "refused"), 1);
    auto r = w.upload();
    REQUIRE(r.outcome == ops::UploadOutcome::active);
    CHECK(r.id == first.id);
    CHECK(r.resumed_bytes == 0);
    CHECK(w.store.count("abort_staged") == 1);
    CHECK(w.store.open_uploads().empty());
  }
}

TEST_CASE(
    "resume: a file that changed is uploaded afresh as a new row; the old parts wait for their cleanup") {
  World w;
  auto first = w.fail_at_part_four();
  test::write_file(w.path, std::string(5 * k_part, 'q'));
  auto r = w.upload();
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  CHECK(r.id != first.id);
  CHECK(r.resumed_bytes == 0);
  CHECK(w.l.row(*first.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK(w.store.open_uploads().size() == 1); // the first row's, until its task runs
}

TEST_CASE("resume: a file that changes while its parts are sent is not kept for a resume") {
  World w;
  w.store.on_put_part = [&w](int n) {
    if (n == 2) test::write_file(w.path, std::string(5 * k_part, 'q'));
  };
  auto r = w.upload();
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::file_changed);
  CHECK(w.store.open_uploads().empty());
  CHECK(w.l.task_of(*r.id).status != ledger::TaskStatus::pending); // compensated at once
}
