// Direct uploads (ops/direct.cpp) on the ledger fake and the fake store: the reservation a
// presigned URL is handed out for, `lodge confirm`'s checks of what the client sent, and
// what becomes of a reservation whose bytes differ, never came, or outlived its deadline.
#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/upload/direct.hpp>
#include <lodge/util/fd.hpp>

using namespace lodge;

namespace {
std::string sha256_of(const std::string &bytes) {
  crypto::Sha256 h;
  h.update(bytes.data(), bytes.size());
  return crypto::to_hex(h.finish());
}

struct Direct {
  test::TempDir dir;
  test::ManualClock clock;
  test::FakeLedger l;
  test::FakeStore store;
  ops::UploadSettings s;
  static constexpr int64_t k_expires_s = 60;

  Direct() {
    s.policy.name = "default";
    s.owner = "o";
    s.cleanup.grace_ms = 1'000;
    s.worker_id = "w";
  }
  // A reservation of `content` as a.txt; its URL valid for k_expires_s.
  ops::DirectReservation reserve(const std::string &content) {
    ops::DirectUploads direct(l, store, s, clock);
    auto d = direct.reserve({"a.txt", content.size(), sha256_of(content), k_expires_s});
    REQUIRE(d.reserved);
    REQUIRE(d.put);
    return d;
  }
  // What a client holding the URL of `key` sends: `bytes`, with the headers the URL signs.
  void send(const std::string &key, const std::string &bytes) {
    auto req = store.presigned(key);
    REQUIRE(req);
    test::write_file(dir.file("body"), bytes);
    util::Fd fd(::open(dir.file("body").c_str(), O_RDONLY | O_CLOEXEC));
    store::PutRequest p;
    p.key = key;
    p.body = {fd.get(), 0, bytes.size(), sha256_of(bytes), nullptr};
    p.content_type = req->content_type;
    p.metadata = req->metadata;
    REQUIRE(store.put(p));
  }
  ops::FileResult confirm(int64_t id) {
    ops::DirectUploads direct(l, store, s, clock);
    return direct.confirm(id);
  }
};
} // namespace

TEST_CASE("direct: the reserved bytes sent, confirm makes the row ACTIVE") {
  Direct d;
  auto res = d.reserve("hello direct");
  const int64_t id = *res.r.id;
  auto row = d.l.row(id);
  CHECK(row.upload_status == ledger::FileStatus::uploading);
  CHECK(row.holder == "direct until=" + std::to_string(d.clock.now_ms() + Direct::k_expires_s * 1000));
  CHECK(res.url_expires_at == d.clock.now_ms() + Direct::k_expires_s * 1000);
  d.send(row.object_key, "hello direct");
  auto r = d.confirm(id);
  CHECK(r.outcome == ops::UploadOutcome::active);
  const std::string n = std::to_string(id);
  CHECK(d.l.history(id) == std::vector<std::string>{
                               "reserve #" + n + " row none -> UPLOADING",
                               "reserve #" + n + " task none -> PENDING",
                               "confirm #" + n + " row UPLOADING -> ACTIVE",
                               "confirm #" + n + " task PENDING -> IGNORED",
                           });
  CHECK(d.confirm(id).outcome == ops::UploadOutcome::active); // the same answer again
}

TEST_CASE("direct: nothing sent yet while the URL is valid: NOT_FOUND, the row unchanged") {
  Direct d;
  const int64_t id = *d.reserve("hello direct").r.id;
  auto r = d.confirm(id);
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::not_found);
  CHECK(d.l.row(id).upload_status == ledger::FileStatus::uploading);
}

TEST_CASE("direct: bytes that differ fail the row; the object stays until the URL's expiry and the grace") {
  Direct d;
  const int64_t id = *d.reserve("hello direct").r.id;
  auto row = d.l.row(id);
  d.send(row.object_key, "HELLO DIRECT"); // same size, other bytes
  auto r = d.confirm(id);
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::content_mismatch);
  CHECK(d.l.row(id).upload_status == ledger::FileStatus::upload_failed);
  auto t = d.l.task_of(id);
  CHECK(t.status == ledger::TaskStatus::pending);
  CHECK(t.verify_pass == ledger::k_verify_owed);
  CHECK(t.next_retry_at == d.clock.now_ms() + Direct::k_expires_s * 1000 + d.s.cleanup.grace_ms);
  CHECK(d.store.has(row.object_key));
  CHECK(d.store.count("remove_owned") == 0);
}

TEST_CASE(
    "direct: bytes that differ, found after the URL expired, are removed at once through sweep's path") {
  Direct d;
  const int64_t id = *d.reserve("hello direct").r.id;
  auto row = d.l.row(id);
  d.send(row.object_key, "HELLO DIRECT");
  d.clock.advance(Direct::k_expires_s * 1000);
  auto r = d.confirm(id);
  CHECK(r.error->code == Errc::content_mismatch);
  CHECK_FALSE(d.store.has(row.object_key));
  auto t = d.l.task_of(id);
  CHECK(t.status == ledger::TaskStatus::pending); // the verify pass, for a PUT begun before the expiry
  CHECK(t.verify_pass == ledger::k_verify_due);
  const std::string n = std::to_string(id);
  auto h = d.l.history(id);
  REQUIRE(h.size() == 6);
  CHECK(h[2] == "fail_abandoned #" + n + " row UPLOADING -> UPLOAD_FAILED");
  CHECK(h[3] == "fail_abandoned #" + n + " task PENDING -> PENDING"); // due now, a verify pass owed
  CHECK(h[4] == "claim #" + n + " task PENDING -> PROCESSING");
  CHECK(h[5] == "finish #" + n + " task PROCESSING -> PENDING");
}

TEST_CASE(
    "direct: the ledger fails fail_abandoned: the row stays UPLOADING for repair, the object untouched") {
  Direct d;
  const int64_t id = *d.reserve("hello direct").r.id;
  auto row = d.l.row(id);
  d.send(row.object_key, "HELLO DIRECT");
  d.clock.advance(Direct::k_expires_s * 1000);
  d.l.fail_next("fail_abandoned");
  auto r = d.confirm(id);
  CHECK(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::content_mismatch);
  CHECK(d.l.row(id).upload_status == ledger::FileStatus::uploading);
  CHECK(d.l.task_of(id).status == ledger::TaskStatus::pending);
  CHECK(d.store.has(row.object_key));
  CHECK(d.l.count("claim_task") == 0);
}

TEST_CASE(
    "direct: confirm --all-due fails an expired reservation with nothing sent, and repairs one past its "
    "deadline") {
  Direct d;
  const int64_t expired = *d.reserve("first").r.id;
  d.clock.advance(Direct::k_expires_s * 1000);
  ops::DirectUploads direct(d.l, d.store, d.s, d.clock);
  auto got = direct.confirm_due(10);
  REQUIRE(got.size() == 1);
  CHECK(got[0].outcome == ops::UploadOutcome::failed);
  CHECK(got[0].error->code == Errc::not_found);
  CHECK(d.l.row(expired).upload_status == ledger::FileStatus::upload_failed);
  CHECK(d.l.task_of(expired).verify_pass == ledger::k_verify_owed); // a PUT may still land: after the grace

  const int64_t overdue = *d.reserve("second").r.id;
  d.clock.t = d.l.row(overdue).upload_deadline_at + 1;
  got = direct.confirm_due(10);
  REQUIRE(got.size() == 1);
  CHECK(got[0].error->code == Errc::deadline_exceeded);
  CHECK(d.l.history(overdue).back() == "repair_row #" + std::to_string(overdue) +
                                           " task PENDING -> PENDING"); // due no sooner than the grace
  CHECK(d.l.row(overdue).failure_reason->find("DEADLINE_EXCEEDED") != std::string::npos);
}
