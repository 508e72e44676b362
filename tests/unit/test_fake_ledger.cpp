// The ledger fake's own scripting and records: what the ops unit tests drive it with (a call
// failed before its write, an answer lost after it, another process's move just before a call,
// a deferred confirm) and what they read back (every transition in order). How it behaves as a
// ledger is the ledger contract's (tests/ledger, LODGE_TEST_LEDGER=fake), not these cases'.
#include "support/fake_ledger.hpp"

#include <doctest/doctest.h>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <string>
#include <vector>

using namespace lodge;
using ledger::FileStatus;
using ledger::ReserveOutcome;
using ledger::TaskStatus;
using Strings = std::vector<std::string>;

namespace {
struct Env {
  test::FakeLedger l;
  int64_t t = 1'700'000'000'000;
  ledger::ReserveRequest request(const std::string &seed) const {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = "f.bin";
    r.relative_path = "p/" + seed;
    r.media_type = "application/octet-stream";
    r.sha256 = std::string(64 - seed.size(), '0') + seed;
    r.size = 1;
    r.policy = "default";
    r.deadline_ms = 10'000;
    r.grace_ms = 1'000;
    r.max_retries = 2;
    r.holder = "host/1/100";
    return r;
  }
  ledger::FileRecord reserve(const std::string &seed) {
    auto res = l.reserve(request(seed), t);
    REQUIRE(res.outcome == ReserveOutcome::reserved);
    return res.record;
  }
};

// The code of the LodgeError fn throws (none: Errc::ok).
template <class F> Errc thrown(F &&fn) {
  try {
    fn();
  } catch (const LodgeError &e) {
    return e.error().code;
  }
  return Errc::ok;
}
} // namespace

TEST_CASE("fake ledger: fail_next fails the next calls of one method before they write anything") {
  Env e;
  e.l.fail_next("reserve", Errc::ledger_locked, 2);
  CHECK(thrown([&] { (void)e.l.reserve(e.request("a"), e.t); }) == Errc::ledger_locked);
  CHECK(thrown([&] { (void)e.l.reserve(e.request("a"), e.t); }) == Errc::ledger_locked);
  CHECK(e.l.list_files({.owner = "*", .include_dead = true}).empty());
  CHECK(e.l.transitions().empty());
  auto a = e.reserve("a"); // the script is spent
  e.l.fail_next("confirm");
  CHECK(thrown([&] { (void)e.l.confirm(a.id, "etag", "", e.t); }) == Errc::ledger_unavailable);
  CHECK(e.l.row(a.id).upload_status == FileStatus::uploading);
  // Every call is recorded, the failed ones too.
  CHECK(e.l.calls() == Strings{"reserve", "reserve", "scan_files", "reserve", "confirm"});
  CHECK(e.l.count("reserve") == 3);
  CHECK_THROWS_AS(e.l.fail_next("no_such_call"), std::logic_error);
}

TEST_CASE("fake ledger: lose_answer commits the write, then throws as a lost answer") {
  Env e;
  auto a = e.reserve("a");
  e.l.lose_answer("confirm");
  CHECK(thrown([&] { (void)e.l.confirm(a.id, "etag", "", e.t); }) == Errc::ledger_unavailable);
  CHECK(e.l.row(a.id).upload_status == FileStatus::active); // it committed
  CHECK(e.l.task_of(a.id).status == TaskStatus::ignored);
  CHECK(e.l.confirm(a.id, "etag", "", e.t) == ledger::ConfirmOutcome::row_not_uploading); // once
}

TEST_CASE("fake ledger: before_next runs once, just before the call, and may call the ledger") {
  Env e;
  auto a = e.reserve("a");
  int ran = 0;
  // Another process fails the row between this one's transfer and its confirm.
  e.l.before_next("confirm", [&] {
    ++ran;
    REQUIRE(e.l.mark_failed(a.id, "killed", false, e.t) == ledger::MarkFailedOutcome::failed);
  });
  CHECK(e.l.confirm(a.id, "etag", "", e.t) == ledger::ConfirmOutcome::row_not_uploading);
  auto b = e.reserve("b");
  CHECK(e.l.confirm(b.id, "etag", "", e.t) == ledger::ConfirmOutcome::confirmed);
  CHECK(ran == 1);
  CHECK(e.l.calls() == Strings{"reserve", "mark_failed", "confirm", "reserve", "confirm"});
}

TEST_CASE("fake ledger: defer_confirms runs a confirm when waited for; one never waited for is abandoned") {
  Env e;
  auto a = e.reserve("a");
  auto b = e.reserve("b");
  e.l.defer_confirms();
  auto later = e.l.confirm_later(a.id, "etag", "", e.t, ledger::CommitTag::none, std::nullopt);
  CHECK(e.l.row(a.id).upload_status == FileStatus::uploading); // not yet
  CHECK(later->wait() == ledger::ConfirmOutcome::confirmed);
  CHECK(e.l.row(a.id).upload_status == FileStatus::active);
  { auto dropped = e.l.confirm_later(b.id, "etag", "", e.t, ledger::CommitTag::none, std::nullopt); }
  CHECK(e.l.abandoned_confirms() == std::vector<int64_t>{b.id});
  CHECK(e.l.row(b.id).upload_status == FileStatus::uploading);
}

TEST_CASE("fake ledger: history, every transition of a row and its task in order, as the call named it") {
  Env e;
  auto req = e.request("a");
  auto a = e.reserve("a");
  REQUIRE(e.l.set_multipart_upload_id(a.id, "mpu-1", e.t) == ledger::SetUploadIdOutcome::recorded);
  REQUIRE(e.l.fail_resumable(a.id, "STALLED", e.t + 5'000, e.t) == ledger::MarkFailedOutcome::failed);
  // A dry run writes nothing, so records nothing.
  req.resume = true;
  req.dry_run = true;
  const auto before = e.l.transitions().size();
  REQUIRE(e.l.reserve(req, e.t).outcome == ReserveOutcome::resumed);
  CHECK(e.l.transitions().size() == before);
  // The revive is reserve's: the row and its task, in place of an insert.
  req.dry_run = false;
  REQUIRE(e.l.reserve(req, e.t).outcome == ReserveOutcome::resumed);
  auto t = e.l.task_of(a.id);
  auto c = e.l.claim_task(t.id, t.next_retry_at, "w", 60'000);
  REQUIRE(c.has_value());
  const std::string n = "#" + std::to_string(a.id);
  CHECK(e.l.history(a.id) ==
        Strings{"reserve " + n + " row none -> UPLOADING", "reserve " + n + " task none -> PENDING",
                "fail_resumable " + n + " row UPLOADING -> UPLOAD_FAILED",
                "fail_resumable " + n + " task PENDING -> PENDING",
                "reserve " + n + " row UPLOAD_FAILED -> UPLOADING",
                "reserve " + n + " task PENDING -> PENDING", "claim " + n + " task PENDING -> PROCESSING"});
  auto b = e.reserve("b");
  CHECK(e.l.history(b.id).size() == 2);
  CHECK(e.l.history().size() == 9);
}

TEST_CASE("fake ledger: a connection of connect() is the same ledger: rows, scripts and records") {
  Env e;
  auto other = e.l.connect();
  auto a = e.reserve("a");
  CHECK(other->find_file(a.id).has_value());
  CHECK(other->uuid() == e.l.uuid());
  CHECK(other->location() == e.l.location());
  e.l.fail_next("confirm");
  CHECK(thrown([&] { (void)other->confirm(a.id, "etag", "", e.t); }) == Errc::ledger_unavailable);
  CHECK(other->confirm(a.id, "etag", "", e.t) == ledger::ConfirmOutcome::confirmed);
  CHECK(e.l.history(a.id).back() == "confirm #" + std::to_string(a.id) + " task PENDING -> IGNORED");
  CHECK(e.l.count("confirm") == 2);
  // A new fake is another ledger.
  test::FakeLedger elsewhere;
  CHECK_FALSE(elsewhere.find_file(a.id).has_value());
}
