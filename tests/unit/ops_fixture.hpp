#pragma once
// What the ops unit tests share: the ledger fake, the fake store and a clock the test sets,
// with rows made as an upload makes them (reserved, the object stored with lodge's stamp,
// confirmed) without running the uploader.

#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "support/fake_ledger.hpp"

#include <doctest/doctest.h>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <string>

namespace lodge::test {

// The PUT of `rec`'s object as the uploader sends it: its size, digest and content type, and
// lodge's stamp naming this ledger and record `stamp` (the row's own id, or another row's).
inline store::PutRequest stamped_put(const ledger::FileRecord &rec, const std::string &ledger_uuid,
                                     int64_t stamp) {
  store::PutRequest p;
  p.key = rec.object_key;
  p.body.size = static_cast<uint64_t>(rec.size);
  p.body.sha256_hex = rec.sha256;
  p.content_type = rec.object_content_type();
  p.metadata = {{store::meta::ledger, ledger_uuid},
                {store::meta::record, std::to_string(stamp)},
                {store::meta::sha256, rec.sha256}};
  return p;
}

struct OpsWorld {
  ManualClock clock;
  FakeLedger l;
  FakeStore store;
  static constexpr int64_t k_deadline_ms = 10'000;
  static constexpr int64_t k_grace_ms = 1'000;

  [[nodiscard]] int64_t now() const { return clock.now_ms(); }

  // An UPLOADING row of `name` whose content is named by `seed` (a distinct digest each).
  ledger::FileRecord reserve(const std::string &name, const std::string &seed, int max_retries = 8) {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = name;
    r.relative_path = name;
    r.media_type = "text/plain";
    r.sha256 = std::string(64 - seed.size(), '0') + seed;
    r.size = 1;
    r.policy = "default";
    r.deadline_ms = k_deadline_ms;
    r.grace_ms = k_grace_ms;
    r.max_retries = max_retries;
    auto res = l.reserve(r, now());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    return res.record;
  }

  // The object of `rec` in the store, stamped as the uploader stamps it (by record `stamp`
  // when given: another row's object at this key).
  store::PutResult put(const ledger::FileRecord &rec, std::optional<int64_t> stamp = std::nullopt) {
    auto p = stamped_put(rec, l.uuid(), stamp.value_or(rec.id));
    auto put = store.put(p);
    REQUIRE(put);
    return put.value();
  }

  // Reserved, stored and confirmed (its task IGNORED).
  ledger::FileRecord active(const std::string &name, const std::string &seed) {
    auto rec = reserve(name, seed);
    put(rec);
    REQUIRE(l.confirm(rec.id, "etag", "", now()) == ledger::ConfirmOutcome::confirmed);
    return l.row(rec.id);
  }

  // Reserved, stored, then failed definitely (its task due now).
  ledger::FileRecord failed(const std::string &name, const std::string &seed, int max_retries = 8) {
    auto rec = reserve(name, seed, max_retries);
    put(rec);
    REQUIRE(l.mark_failed(rec.id, "STORAGE_ERROR: refused", true, now()) ==
            ledger::MarkFailedOutcome::failed);
    return l.row(rec.id);
  }

  // The row's task, claimed by `worker` for `lease_ms`.
  ledger::TaskRecord claim(int64_t record_id, const std::string &worker = "w1", int64_t lease_ms = 5'000) {
    auto t = l.claim_task(l.task_of(record_id).id, now(), worker, lease_ms);
    REQUIRE(t);
    return *t;
  }
};

} // namespace lodge::test
