// The protocol's pure rules (ledger/protocol.hpp, ops/grace.hpp), the state name tables,
// and the typed outcomes that tell a transition's failed preconditions apart.
#include "support.hpp"
#include "support/decode.hpp"

#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/protocol.hpp>
#include <lodge/ops/grace.hpp>

using namespace lodge;
using ledger::DecisionKind;

TEST_CASE("object keys: object_key_for and parse_object_key are each other's inverse") {
  const std::string uuid = "0f8b5c2e-6a1d-4e3b-9c7f-1a2b3c4d5e6f";
  struct Case {
    std::string root, owner, prefix, path;
  };
  for (const auto &c : {Case{"", "ci", "", "a.txt"}, Case{"archive/", "ci", "", "src/lib/a.c"},
                        Case{"archive/", "team.x", "nightly/2026-12-01", "out/build.tar"},
                        Case{"r/", "o", "p", "deep/x/y/z"}}) {
    auto key = ledger::object_key_for(c.root, c.owner, c.prefix, uuid, c.path);
    auto parts = test::parse_object_key(c.root, key);
    REQUIRE(parts);
    CHECK(parts->owner == c.owner);
    CHECK(parts->run_prefix == c.prefix);
    CHECK(parts->uuid == uuid);
    CHECK(parts->relative_path == c.path);
  }
  CHECK(ledger::object_key_for("archive/", "ci", "run1", uuid, "a/b.txt") ==
        "archive/ci/run1/" + uuid + "/a/b.txt");
}

TEST_CASE("parse_object_key refuses keys lodge did not make under that root") {
  const std::string uuid = "0f8b5c2e-6a1d-4e3b-9c7f-1a2b3c4d5e6f";
  CHECK_FALSE(test::parse_object_key("archive/", "other/ci/" + uuid + "/a.txt")); // another root
  CHECK_FALSE(test::parse_object_key("", "ci/no-uuid/a.txt"));
  CHECK_FALSE(test::parse_object_key("", "ci/" + uuid));          // no path after the uuid
  CHECK_FALSE(test::parse_object_key("", "ci/" + uuid + "/"));    // an empty path
  CHECK_FALSE(test::parse_object_key("", "/" + uuid + "/a.txt")); // no owner
  CHECK_FALSE(test::parse_object_key("", "ci"));                  // nothing after the owner
  CHECK_FALSE(test::parse_object_key("", "ci/0F8B5C2E-6A1D-4E3B-9C7F-1A2B3C4D5E6F/a")); // not lowercase
  CHECK_FALSE(test::parse_object_key("", ".lodge/" + uuid));                            // an id marker
}

namespace {
ledger::TaskRecord task(ledger::TaskStatus s, int64_t version, int64_t verify = ledger::k_verify_none) {
  ledger::TaskRecord t;
  t.id = 7;
  t.record_id = 3;
  t.status = s;
  t.lease_version = version;
  t.verify_pass = verify;
  return t;
}
ledger::FileRecord row(ledger::FileStatus s, bool deleted, int64_t deadline) {
  ledger::FileRecord r;
  r.id = 3;
  r.upload_status = s;
  r.is_deleted = deleted;
  r.upload_deadline_at = deadline;
  return r;
}
} // namespace

TEST_CASE("decide_task: a task whose lease is not the worker's any more changes nothing") {
  using ledger::TaskStatus;
  auto held = task(TaskStatus::processing, 4);
  auto up = row(ledger::FileStatus::uploading, false, 2'000);
  CHECK(ledger::decide_task(held, std::nullopt, up, false, 1'000, 500).kind == DecisionKind::lease_lost);
  CHECK(ledger::decide_task(held, task(TaskStatus::processing, 5), up, false, 1'000, 500).kind ==
        DecisionKind::lease_lost);
  CHECK(ledger::decide_task(held, task(TaskStatus::pending, 4), up, false, 1'000, 500).kind ==
        DecisionKind::lease_lost);
  CHECK(ledger::decide_task(held, task(TaskStatus::success, 4), std::nullopt, false, 1'000, 500).kind ==
        DecisionKind::lease_lost);
}

TEST_CASE("decide_task: by the row, postponed, failed when overdue, ignored or allowed") {
  using ledger::FileStatus;
  using ledger::TaskStatus;
  auto held = task(TaskStatus::processing, 4);
  auto cur = task(TaskStatus::processing, 4, ledger::k_verify_owed);
  // Not overdue: postponed to deadline + grace, the task's verify pass as it was.
  auto d = ledger::decide_task(held, cur, row(FileStatus::uploading, false, 2'000), false, 1'000, 500);
  CHECK(d.kind == DecisionKind::postpone);
  CHECK(d.due == 2'500);
  CHECK(d.verify_pass == ledger::k_verify_owed);
  // At the deadline exactly it may still be confirmed.
  d = ledger::decide_task(held, task(TaskStatus::processing, 4), row(FileStatus::uploading, false, 1'000),
                          false, 1'000, 0);
  CHECK(d.kind == DecisionKind::postpone);
  CHECK(d.due == 1'001); // never due again within this run
  CHECK(d.verify_pass == ledger::k_verify_none);
  // Overdue, within the grace: failed, postponed to deadline + grace, a verify pass owed.
  d = ledger::decide_task(held, task(TaskStatus::processing, 4), row(FileStatus::uploading, false, 900),
                          false, 1'000, 500);
  CHECK(d.kind == DecisionKind::fail_overdue_then_postpone);
  CHECK(d.due == 1'400);
  CHECK(d.verify_pass == ledger::k_verify_owed);
  // Overdue past the grace: failed, a verify pass owed, deleted now.
  d = ledger::decide_task(held, task(TaskStatus::processing, 4), row(FileStatus::uploading, false, 400),
                          false, 1'000, 500);
  CHECK(d.kind == DecisionKind::fail_overdue_then_allow);
  CHECK(d.verify_pass == ledger::k_verify_owed);
  d = ledger::decide_task(held, task(TaskStatus::processing, 4), row(FileStatus::uploading, false, 500),
                          false, 1'000, 500);
  CHECK(d.kind == DecisionKind::fail_overdue_then_allow); // now == deadline + grace
  // An alive ACTIVE row keeps its object; a dead row (or none) gives it up.
  CHECK(ledger::decide_task(held, cur, row(FileStatus::active, false, 0), false, 1'000, 500).kind ==
        DecisionKind::ignore);
  CHECK(ledger::decide_task(held, cur, row(FileStatus::active, true, 0), false, 1'000, 500).kind ==
        DecisionKind::allow);
  CHECK(ledger::decide_task(held, cur, row(FileStatus::upload_failed, true, 0), false, 1'000, 500).kind ==
        DecisionKind::allow);
  CHECK(ledger::decide_task(held, cur, std::nullopt, false, 1'000, 500).kind == DecisionKind::allow);
}

TEST_CASE("decide_task: a dead row whose key another alive row uses keeps its object") {
  using ledger::FileStatus;
  using ledger::TaskStatus;
  auto held = task(TaskStatus::processing, 4);
  auto owed = held;
  owed.tag_owed = true;
  // Deleted by its user, or failed, while a sharer is alive: the object stays, as an alive
  // ACTIVE row's would (ignored; tagged when the task owes the tag).
  CHECK(ledger::decide_task(held, held, row(FileStatus::active, true, 0), true, 1'000, 500).kind ==
        DecisionKind::ignore);
  CHECK(ledger::decide_task(held, held, row(FileStatus::upload_failed, true, 0), true, 1'000, 500).kind ==
        DecisionKind::ignore);
  CHECK(ledger::decide_task(held, owed, row(FileStatus::active, true, 0), true, 1'000, 500).kind ==
        DecisionKind::tag);
  // The lease comes first; no row at all is no user of the key.
  CHECK(ledger::decide_task(held, task(TaskStatus::processing, 5), row(FileStatus::active, true, 0), true,
                            1'000, 500)
            .kind == DecisionKind::lease_lost);
  CHECK(ledger::decide_task(held, held, std::nullopt, true, 1'000, 500).kind == DecisionKind::allow);
  // An alive row decides as it would without the sharer.
  CHECK(ledger::decide_task(held, held, row(FileStatus::uploading, false, 2'000), true, 1'000, 500).kind ==
        DecisionKind::postpone);
}

TEST_CASE("the dead-letter rule: FAILED once an attempt makes more than max_retries failures") {
  CHECK_FALSE(ledger::dead_letters(0, 2));
  CHECK_FALSE(ledger::dead_letters(1, 2));
  CHECK(ledger::dead_letters(2, 2));
  CHECK(ledger::dead_letters(0, 0));
}

TEST_CASE("states: one name table each, parsed back exactly, unknown names refused") {
  for (auto s : ledger::k_file_statuses)
    CHECK(ledger::parse_file_status(ledger::to_string(s)) == s);
  for (auto s : ledger::k_task_statuses)
    CHECK(ledger::parse_task_status(ledger::to_string(s)) == s);
  CHECK(std::string(ledger::to_string(ledger::FileStatus::upload_failed)) == "UPLOAD_FAILED");
  CHECK(std::string(ledger::to_string(ledger::TaskStatus::failed)) == "FAILED");
  CHECK_FALSE(ledger::parse_file_status("active"));
  CHECK_FALSE(ledger::parse_file_status("DELETED"));
  CHECK_FALSE(ledger::parse_task_status("pending"));
  CHECK_FALSE(ledger::parse_task_status(""));
}

TEST_CASE("grace_for: the policy's grace, or the longest of any policy when there is none to go by") {
  config::Config c;
  c.policies["default"].grace_ms = 300'000;
  c.policies["quick"].grace_ms = 1'000;
  c.policies["slow"].grace_ms = 900'000;
  CHECK(ops::grace_for(c, std::string("quick")) == 1'000);
  CHECK(ops::grace_for(c, std::string("default")) == 300'000);
  CHECK(ops::grace_for(c, std::string("removed-since")) == 900'000);
  CHECK(ops::grace_for(c, std::nullopt) == 900'000);
}

namespace {
class ManualClock final : public util::Clock {
public:
  int64_t t = 1'000'000;
  [[nodiscard]] int64_t now_ms() const override { return t; }
};
} // namespace

TEST_CASE("confirm says which precondition failed: a sweep holding the task, or the row moved on") {
  test::TempDir dir;
  ManualClock clock;
  ledger::OpenOptions o;
  o.location = dir.file("l.db");
  o.create = true;
  o.clock = &clock;
  auto l = ledger::open_ledger(o);
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.original_name = "f.txt";
  r.sha256 = std::string(64, 'a');
  r.size = 1;
  r.policy = "default";
  r.deadline_ms = 10'000;
  r.grace_ms = 1'000;
  auto res = l->reserve(r, clock.t);
  REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
  const int64_t id = res.record.id;
  clock.t += 11'000; // the task is due: a sweep claims it while the PUT is still running
  auto claimed = l->claim_due(clock.t, 10, "w", 60'000);
  REQUIRE(claimed.size() == 1);
  CHECK(l->confirm(id, "etag", "", clock.t) == ledger::ConfirmOutcome::task_held);
  CHECK(l->find_file(id)->upload_status == ledger::FileStatus::uploading); // nothing written
  CHECK(l->find_task_for(id)->status == ledger::TaskStatus::processing);
  CHECK(l->mark_failed(id, "x", true, clock.t) == ledger::MarkFailedOutcome::failed);
  CHECK(l->confirm(id, "etag", "", clock.t) == ledger::ConfirmOutcome::row_not_uploading);
  CHECK(l->mark_failed(id, "x", true, clock.t) == ledger::MarkFailedOutcome::not_uploading);
  CHECK(l->set_multipart_upload_id(id, "u", clock.t) == ledger::SetUploadIdOutcome::not_uploading);
}

TEST_CASE("decide_task: an alive ACTIVE row's task is `tag` exactly when the task records the tag owed") {
  ledger::TaskRecord held;
  held.id = 1;
  held.status = ledger::TaskStatus::processing;
  held.lease_version = 3;
  ledger::FileRecord row;
  row.upload_status = ledger::FileStatus::active;
  CHECK(ledger::decide_task(held, held, row, false, 1000, 10).kind == ledger::DecisionKind::ignore);
  // What the task as read under the lock records decides, not the claimed copy.
  ledger::TaskRecord owed = held;
  owed.tag_owed = true;
  CHECK(ledger::decide_task(held, owed, row, false, 1000, 10).kind == ledger::DecisionKind::tag);
  CHECK(ledger::decide_task(owed, held, row, false, 1000, 10).kind == ledger::DecisionKind::ignore);
  row.is_deleted = true; // deleted by its user: the object goes, tag or not
  CHECK(ledger::decide_task(held, owed, row, false, 1000, 10).kind == ledger::DecisionKind::allow);
}
