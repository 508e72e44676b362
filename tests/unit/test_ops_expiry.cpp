// Per-upload expiry (upload --expire-after, a policy's expire_after): each row the uploader
// reserves records its reserve's time plus the duration, on the ledger fake and the fake
// store; without one a row never expires.
#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/upload/direct.hpp>
#include <lodge/ops/upload/upload.hpp>

using namespace lodge;

namespace {
constexpr int64_t k_day_ms = 86'400'000;

struct Expiring {
  test::TempDir dir;
  test::ManualClock clock;
  test::FakeLedger l;
  test::FakeStore store;
  ops::UploadSettings s;

  Expiring() {
    s.policy.name = "default";
    s.owner = "o";
    s.worker_id = "w";
    s.open_store = [this]() -> std::unique_ptr<store::ObjectStore> { return store.connection(); };
  }
  ops::FileResult upload(const std::string &name, const std::string &content) {
    test::write_file(dir.file(name), content);
    ops::Uploader up(l, store, s, clock);
    return up.upload(dir.file(name));
  }
};

std::string sha256_of(const std::string &bytes) {
  crypto::Sha256 h;
  h.update(bytes.data(), bytes.size());
  return crypto::to_hex(h.finish());
}
} // namespace

TEST_CASE("expiry: each reserved row expires its reserve's time plus expire_after; none without it") {
  Expiring e;
  auto never = e.upload("a.txt", "first");
  REQUIRE(never.outcome == ops::UploadOutcome::active);
  CHECK_FALSE(e.l.row(*never.id).expires_at.has_value());

  e.s.expire_after_ms = 3 * k_day_ms;
  const int64_t t0 = e.clock.now_ms();
  auto a = e.upload("b.txt", "second");
  REQUIRE(a.outcome == ops::UploadOutcome::active);
  CHECK(e.l.row(*a.id).expires_at == t0 + 3 * k_day_ms);
  // Counted from each file's own reserve, not from the run's start.
  e.clock.advance(60'000);
  auto b = e.upload("c.txt", "third");
  REQUIRE(b.outcome == ops::UploadOutcome::active);
  CHECK(e.l.row(*b.id).expires_at == t0 + 60'000 + 3 * k_day_ms);
  // A path whose content is stored already gets a row of its own sharing the object: it
  // expires by this upload's setting, and the row it shares keeps its own.
  e.clock.advance(60'000);
  e.s.expire_after_ms = k_day_ms;
  auto shared = e.upload("d.txt", "first");
  REQUIRE(shared.outcome == ops::UploadOutcome::duplicate);
  REQUIRE(shared.shares == never.id);
  CHECK(e.l.row(*shared.id).expires_at == t0 + 120'000 + k_day_ms);
  CHECK_FALSE(e.l.row(*never.id).expires_at.has_value());
}

TEST_CASE("expiry: a direct reservation (lodge reserve) records it too") {
  Expiring e;
  e.s.expire_after_ms = 3'600'000;
  e.s.cleanup.grace_ms = 1'000;
  ops::DirectUploads direct(e.l, e.store, e.s, e.clock);
  const std::string content = "direct bytes";
  auto d = direct.reserve({"x.bin", content.size(), sha256_of(content), 60});
  REQUIRE(d.reserved);
  REQUIRE(d.r.id);
  CHECK(e.l.row(*d.r.id).expires_at == e.clock.now_ms() + 3'600'000);
}
