#pragma once
// Helpers shared by the ledger contract's test files: a settable clock, reserve requests,
// and a fixture holding one fresh ledger.

#include "backend.hpp"

#include <atomic>
#include <lodge/ledger/ledger.hpp>
#include <memory>
#include <string>

namespace lodge::test {

class ManualClock final : public util::Clock {
public:
  std::atomic<int64_t> t{1'000'000};
  [[nodiscard]] int64_t now_ms() const override { return t.load(); }
};

// A 64-character digest made from `seed` (hex digits), so tests name content briefly.
inline std::string sha(const std::string &seed) {
  return std::string(64 - seed.size(), '0') + seed;
}

inline ledger::ReserveRequest request(const std::string &owner, const std::string &seed) {
  ledger::ReserveRequest r;
  r.owner_id = owner;
  r.original_name = "f.txt";
  r.media_type = "text/plain";
  r.sha256 = sha(seed);
  r.size = 1;
  r.policy = "default";
  r.deadline_ms = 10'000;
  r.grace_ms = 1'000;
  r.max_retries = 2;
  return r;
}

// Takes back, on a closed ledger, what schema version 12 changed (its indexes), as a
// version-11 ledger had them, and says the ledger is at version 11.
inline void as_schema_v11(const FreshLedger &f) {
  f.exec_raw("DROP INDEX file_upload_alive_other_digest");
  f.exec_raw("CREATE INDEX file_upload_alive_digest ON file_upload (owner_id, sha256) WHERE is_deleted = 0");
  f.exec_raw("DROP INDEX file_upload_alive_prefix_digest");
  f.exec_raw(
      "CREATE UNIQUE INDEX file_upload_alive_prefix_digest ON file_upload (owner_id, run_prefix, sha256)"
      " WHERE is_deleted = 0 AND dedup_scope <> 'none' AND content_of IS NULL");
  f.exec_raw("DROP INDEX cleanup_task_due");
  f.exec_raw("CREATE INDEX cleanup_task_due ON cleanup_task (status, next_retry_at)");
  f.set_schema_version(11);
}

// Takes back, on a closed ledger, what schema versions 12 and 11 added (11: the outbox:
// outbox_event, its triggers, cleanup_task's sent_at and message_id; job_run's 'relay' and
// 'consume' may stay), as a version-10 ledger had it, and says the ledger is at version 10.
inline void as_schema_v10(const FreshLedger &f) {
  as_schema_v11(f);
  if (f.kind() == Backend::sqlite) {
    for (const char *t : {"file_upload_event_insert", "file_upload_event_active", "file_upload_event_failed",
                          "file_upload_event_deleted"})
      f.exec_raw(std::string("DROP TRIGGER ") + t);
  } else {
    f.exec_raw("DROP TRIGGER file_upload_event ON file_upload; DROP FUNCTION file_upload_event()");
  }
  f.exec_raw("DROP TABLE outbox_event");
  f.exec_raw("ALTER TABLE cleanup_task DROP COLUMN sent_at");
  f.exec_raw("ALTER TABLE cleanup_task DROP COLUMN message_id");
  f.set_schema_version(10);
}

// Takes back, on a closed ledger, what schema versions 12 to 10 added (10: expires_at,
// file_attr, their indexes; job_run's 'prune' may stay), as a version-9 ledger had it, and
// says the ledger is at version 9: a migration test starts there (or earlier, taking back more).
inline void as_schema_v9(const FreshLedger &f) {
  as_schema_v10(f);
  f.exec_raw("DROP INDEX file_upload_expiry");
  f.exec_raw("DROP INDEX file_upload_created");
  f.exec_raw("DROP TABLE file_attr");
  f.exec_raw("ALTER TABLE file_upload DROP COLUMN expires_at");
  f.set_schema_version(9);
}

// confirm()'s outcomes, by the names the cases use.
namespace confirm_outcome {
inline constexpr auto confirmed = ledger::ConfirmOutcome::confirmed;
inline constexpr auto row_not_uploading = ledger::ConfirmOutcome::row_not_uploading;
inline constexpr auto task_held = ledger::ConfirmOutcome::task_held;
} // namespace confirm_outcome

// One fresh ledger, opened once; more connections to it with connect().
struct LedgerFixture {
  FreshLedger fresh;
  ManualClock clock;
  std::unique_ptr<ledger::Ledger> l;
  LedgerFixture() : l(fresh.open(&clock)) {}
  [[nodiscard]] int64_t now() const { return clock.t.load(); }
  [[nodiscard]] std::unique_ptr<ledger::Ledger> connect() const { return fresh.open(&clock, false); }
  // The workers' ledgers of one process, as `lodge upload --jobs N` gets them: on SQLite
  // their upload writes are group-committed through one shared writer.
  [[nodiscard]] std::shared_ptr<ledger::LedgerPool> pool() const {
    return open_ledger_pool(fresh.location(), &clock);
  }
  // Reserves seed's content for owner "o"; the test fails unless it is reserved.
  ledger::FileRecord reserve(const std::string &seed, std::optional<int64_t> max_files = std::nullopt) {
    auto r = request("o", seed);
    r.max_files = max_files;
    auto res = l->reserve(r, now());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    return res.record;
  }
  ledger::TaskRecord task_of(int64_t record_id) {
    auto t = l->find_task_for(record_id);
    REQUIRE(t.has_value());
    return *t;
  }
  ledger::FileRecord row(int64_t id) {
    auto r = l->find_file(id);
    REQUIRE(r.has_value());
    return *r;
  }
};

} // namespace lodge::test
