// A deadline renewed by progress, on the ledger fake and the fake store: the uploader renews
// its row as bytes leave and parts finish (at most once a quarter deadline), for a single PUT
// too, stops at once when a renewal is refused, and aborts a transfer whose bytes stop (the
// stall) or whose deadline passes, saying which; repair and sweep judge a renewed row by its
// current deadline.
#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "ops_fixture.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <chrono>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/ops/jobs/sweep.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <thread>

using namespace lodge;

namespace {
// 1 KiB parts, one at a time, under a policy deadline of `deadline_ms`; the run's grace 1s.
ops::UploadSettings renew_settings(int64_t deadline_ms, int64_t stall_ms = 120'000) {
  ops::UploadSettings s;
  s.policy.name = "default";
  s.policy.deadline_ms = deadline_ms;
  s.policy.stall_ms = stall_ms;
  s.cleanup.grace_ms = 1'000;
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = 1;
  return s;
}

size_t count_of(const std::vector<std::string> &history, const std::string &text) {
  return static_cast<size_t>(std::count_if(history.begin(), history.end(), [&](const std::string &h) {
    return h.find(text) != std::string::npos;
  }));
}
} // namespace

TEST_CASE("renewal: each part is progress; the row is renewed at most once a quarter deadline, by the "
          "policy's deadline from then") {
  REQUIRE(ops::this_process().has_value()); // rows carry a holder: renewal needs one
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  const int64_t t0 = clock.now_ms();
  // Each part takes a second by the wall clock; the deadline is 8 s: a renewal every 2 s.
  store.on_put_part = [&clock](int) { clock.advance(1'000); };
  int64_t task_due_before_confirm = 0;
  int64_t deadline_before_confirm = 0;
  l.before_next("confirm", [&] {
    ledger::FileQuery all;
    all.owner = "o";
    auto rows = l.list_files(all);
    REQUIRE(rows.size() == 1);
    deadline_before_confirm = rows[0].upload_deadline_at;
    task_due_before_confirm = l.task_of(rows[0].id).next_retry_at;
  });
  auto s = renew_settings(8'000);
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, s, clock);
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  // 10 parts, one second each: renewed after parts 2, 4, 6, 8 and 10, never more often.
  CHECK(l.count("renew") == 5);
  auto h = l.history(*r.id);
  CHECK(count_of(h, "renew #" + std::to_string(*r.id) + " row UPLOADING -> UPLOADING") == 5);
  CHECK(count_of(h, "renew #" + std::to_string(*r.id) + " task PENDING -> PENDING") == 5);
  // The last renewal, at t0 + 10 s: the deadline 8 s later, the task's not-before a grace after.
  CHECK(deadline_before_confirm == t0 + 10'000 + 8'000);
  CHECK(task_due_before_confirm == t0 + 10'000 + 8'000 + 1'000);
  CHECK(l.row(*r.id).upload_status == ledger::FileStatus::active);
}

TEST_CASE("renewal: parts faster than a quarter deadline renew nothing") {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  auto s = renew_settings(8'000);
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, s, clock); // the clock stands still
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE(r.outcome == ops::UploadOutcome::active);
  CHECK(l.count("renew") == 0);
}

TEST_CASE("renewal refused (the row failed by a repair whose clock is ahead): the transfer stops at once, "
          "nothing confirmed") {
  REQUIRE(ops::this_process().has_value());
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  store.on_put_part = [&clock](int) { clock.advance(1'000); };
  // Just before the first renewal, another host's repair (its clock past the deadline) fails the row.
  l.before_next("renew", [&] {
    ledger::FileQuery all;
    all.owner = "o";
    auto rows = l.list_files(all);
    REQUIRE(rows.size() == 1);
    REQUIRE(l.repair_row(rows[0].id, rows[0].upload_deadline_at + 1, 1'000, 8) ==
            ledger::RepairOutcome::repaired);
  });
  auto s = renew_settings(8'000);
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, s, clock);
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::state_changed);
  CHECK(r.error->message.find("not renewed") != std::string::npos);
  CHECK(store.count("put_part") == 2); // the renewal after part 2 was refused: no third part
  CHECK(store.count("complete_staged") == 0);
  CHECK(store.count("abort_staged") == 1);
  CHECK(l.count("confirm") == 0);
  auto row = l.row(*r.id);
  CHECK(row.upload_status == ledger::FileStatus::upload_failed);
  CHECK(count_of(l.history(*r.id), "mark_failed") == 0); // failed by the repair, once
  CHECK_FALSE(store.has(row.object_key));
}

TEST_CASE("stall: no part finished for the policy's stall aborts the transfer (DEADLINE_EXCEEDED) long "
          "before the deadline") {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  // Part 3 hangs (a link that moves nothing) past the 150 ms stall; the deadline is a minute.
  store.on_put_part = [](int n) {
    if (n == 3) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  };
  auto s = renew_settings(60'000, 150);
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, s, util::system_clock());
  const auto started = std::chrono::steady_clock::now();
  auto r = up.upload(dir.file("big.bin"));
  const auto took = std::chrono::steady_clock::now() - started;
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::deadline_exceeded);
  CHECK(r.error->message.find("stall") != std::string::npos);
  CHECK(took < std::chrono::seconds(30));
  CHECK(store.count("put_part") == 2); // parts 1 and 2; part 3 failed past its bound
  CHECK(store.count("complete_staged") == 0);
  // Failed, its two stored parts kept for the next upload to resume: the cleanup that
  // aborts them waits one grace.
  CHECK(store.count("abort_staged") == 0);
  CHECK(store.open_uploads().size() == 1);
  CHECK(l.row(*r.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK(l.task_of(*r.id).status == ledger::TaskStatus::pending);
}

TEST_CASE("repair and sweep judge a renewed row by its current deadline: never failed or cleaned while it "
          "is ahead") {
  test::OpsWorld w;
  ledger::ReserveRequest req;
  req.owner_id = "o";
  req.original_name = req.relative_path = "big.bin";
  req.media_type = "application/octet-stream";
  req.sha256 = std::string(64, 'a');
  req.size = 1;
  req.policy = "default";
  req.deadline_ms = test::OpsWorld::k_deadline_ms;
  req.grace_ms = test::OpsWorld::k_grace_ms;
  req.max_retries = 8;
  req.holder = "sender";
  auto res = w.l.reserve(req, w.now());
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  auto rec = res.record;
  w.put(rec); // what its sender stored so far (an object, as a PUT or a completed upload would leave)
  // Renewed just before its deadline, by 10 s more.
  w.clock.t = rec.upload_deadline_at - 1;
  const int64_t renewed_to = w.now() + test::OpsWorld::k_deadline_ms;
  REQUIRE(w.l.renew(rec.id, "sender", renewed_to, renewed_to + test::OpsWorld::k_grace_ms, w.now()) ==
          ledger::RenewOutcome::renewed);

  config::Config cfg;
  cfg.policies["default"].grace_ms = test::OpsWorld::k_grace_ms;
  ops::RepairOptions ro;
  ro.config = &cfg;
  ops::SweepOptions so;
  so.worker_id = "w";
  so.cleanup = ops::CleanupSettings{test::OpsWorld::k_grace_ms, 1'000, 8'000};
  // Past the reserve's deadline and grace, within the renewed deadline: nothing happens.
  w.clock.t = rec.upload_deadline_at + test::OpsWorld::k_grace_ms + 1;
  auto rep = ops::repair(w.l, w.l, w.l, ro, w.clock);
  CHECK(rep.repaired == 0);
  auto sw = ops::sweep(w.l, w.l, w.store, so, w.clock);
  CHECK(sw.deleted == 0);
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::uploading);
  CHECK(w.store.has(rec.object_key));
  // Past the renewed deadline and its grace: repair fails it, sweep cleans it (the test sees both).
  w.clock.t = renewed_to + test::OpsWorld::k_grace_ms + 1;
  CHECK(ops::repair(w.l, w.l, w.l, ro, w.clock).repaired == 1);
  CHECK(w.l.row(rec.id).upload_status == ledger::FileStatus::upload_failed);
  (void)ops::sweep(w.l, w.l, w.store, so, w.clock);
  CHECK_FALSE(w.store.has(rec.object_key));
}

namespace {
// `s` with every file of these tests sent in one PUT (below multipart_threshold).
ops::UploadSettings single_put(ops::UploadSettings s) {
  s.multipart_threshold = 1U << 20;
  return s;
}

int64_t deadline_of_only_row(test::FakeLedger &l) {
  ledger::FileQuery all;
  all.owner = "o";
  auto rows = l.list_files(all);
  REQUIRE(rows.size() == 1);
  return rows[0].upload_deadline_at;
}
} // namespace

TEST_CASE("renewal: a single PUT's bytes renew its row while they flow, at most once a quarter deadline") {
  REQUIRE(ops::this_process().has_value());
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  const int64_t t0 = clock.now_ms();
  // Each KiB takes a second by the wall clock: the 10 KiB PUT outlasts the 8 s deadline.
  store.on_bytes = [&clock](uint64_t) { clock.advance(1'000); };
  int64_t deadline_before_confirm = 0;
  l.before_next("confirm", [&] { deadline_before_confirm = deadline_of_only_row(l); });
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, single_put(renew_settings(8'000)), clock);
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  CHECK(store.count("put") == 1);
  // KiB n leaves at n - 1 s: renewed as KiB 3, 5, 7 and 9 leave (2, 4, 6 and 8 s), never more often.
  CHECK(l.count("renew") == 4);
  CHECK(deadline_before_confirm == t0 + 8'000 + 8'000);
}

TEST_CASE("renewal: a part's bytes renew its row before the part ends") {
  REQUIRE(ops::this_process().has_value());
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  const int64_t t0 = clock.now_ms();
  store.on_bytes = [&clock](uint64_t) { clock.advance(1'000); };
  int64_t deadline_before_confirm = 0;
  l.before_next("confirm", [&] { deadline_before_confirm = deadline_of_only_row(l); });
  // Two parts of 10 KiB, each 10 s: longer than the 8 s deadline by itself.
  auto s = renew_settings(8'000);
  s.part_size = size_t{10} * 1024;
  test::write_file(dir.file("big.bin"), std::string(size_t{20} * 1024, 'x'));
  ops::Uploader up(l, store, s, clock);
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  CHECK(store.count("put_part") == 2);
  CHECK(l.count("renew") == 10);
  CHECK(deadline_before_confirm == t0 + 20'000 + 8'000);
}

TEST_CASE("renewal refused while a single PUT's bytes flow: the PUT stops at once, nothing stored") {
  REQUIRE(ops::this_process().has_value());
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  test::ManualClock clock;
  uint64_t sent = 0;
  store.on_bytes = [&](uint64_t n) {
    sent = n;
    clock.advance(1'000);
  };
  // Just before the first renewal, another host's repair (its clock past the deadline) fails the row.
  l.before_next("renew", [&] {
    ledger::FileQuery all;
    all.owner = "o";
    auto rows = l.list_files(all);
    REQUIRE(rows.size() == 1);
    REQUIRE(l.repair_row(rows[0].id, rows[0].upload_deadline_at + 1, 1'000, 8) ==
            ledger::RepairOutcome::repaired);
  });
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, single_put(renew_settings(8'000)), clock);
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::state_changed);
  CHECK(r.error->message.find("not renewed") != std::string::npos);
  CHECK(sent == 3072); // the renewal as the third KiB left (2 s in) was refused: not one KiB more
  CHECK(l.count("confirm") == 0);
  CHECK(l.row(*r.id).upload_status == ledger::FileStatus::upload_failed);
  CHECK_FALSE(store.has(l.row(*r.id).object_key));
}

TEST_CASE("stall: a single PUT whose bytes stop for the policy's stall fails DEADLINE_EXCEEDED, naming the "
          "stall") {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  // After 3 KiB the link moves nothing for 400 ms: past the 150 ms stall; the deadline is a minute.
  store.on_bytes = [](uint64_t n) {
    if (n == 3 * 1024) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  };
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, single_put(renew_settings(60'000, 150)), util::system_clock());
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::deadline_exceeded);
  CHECK_MESSAGE(r.error->message.find("no bytes sent for 150ms (the policy's stall)") != std::string::npos,
                r.error->message);
  CHECK(l.row(*r.id).upload_status == ledger::FileStatus::upload_failed);
}

TEST_CASE("deadline: bytes that stop until the row's deadline passes fail DEADLINE_EXCEEDED, naming the "
          "deadline") {
  test::TempDir dir;
  test::FakeLedger l;
  test::FakeStore store;
  // A 1 s deadline (its margin 200 ms: the bound is 800 ms after the reserve), a minute's
  // stall: after the first KiB nothing moves for a second.
  store.on_bytes = [](uint64_t n) {
    if (n == 1024) std::this_thread::sleep_for(std::chrono::milliseconds(1'000));
  };
  test::write_file(dir.file("big.bin"), std::string(size_t{10} * 1024, 'x'));
  ops::Uploader up(l, store, single_put(renew_settings(1'000, 60'000)), util::system_clock());
  auto r = up.upload(dir.file("big.bin"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::deadline_exceeded);
  CHECK_MESSAGE(r.error->message.find("the policy's deadline (1s)") != std::string::npos, r.error->message);
  CHECK(r.error->message.find("stall") == std::string::npos);
}
