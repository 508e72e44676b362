// A ledger's binding to its store (ops/binding.hpp): what the first store connection records
// and refuses, and what `lodge init` records, rebinds and accepts, on the ledger fake.
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <lodge/ops/binding.hpp>

using namespace lodge;

namespace {
store::Binding bucket(const std::string &name, bool tags = false) {
  return {"s3", "aws", name, "", tags};
}

Errc code_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const LodgeError &e) {
    return e.error().code;
  }
  return Errc::ok;
}
} // namespace

TEST_CASE("check_binding: a ledger with no binding is bound on first use; another store is refused") {
  test::FakeLedger l;
  auto first = ops::check_binding(l, "L", bucket("a"));
  CHECK(first.recorded);
  CHECK_FALSE(first.mode_added);
  REQUIRE(l.store_binding().has_value());
  CHECK(ops::from_ledger(*l.store_binding()) == bucket("a"));
  CHECK_FALSE(ops::check_binding(l, "L", bucket("a")).recorded);
  CHECK(code_of([&] { (void)ops::check_binding(l, "L", bucket("b")); }) == Errc::store_mismatch);
}

TEST_CASE("check_binding: a binding without a tagging mode gets this store's; another mode is refused") {
  test::FakeLedger l;
  auto old = ops::to_ledger(bucket("a"));
  old.tagging.clear(); // bound before tagging modes were recorded
  (void)l.bind_store(old, ledger::Rebind::yes);
  auto c = ops::check_binding(l, "L", bucket("a", true));
  CHECK(c.recorded);
  CHECK(c.mode_added);
  CHECK(code_of([&] { (void)ops::check_binding(l, "L", bucket("a", false)); }) == Errc::store_mismatch);
  auto refused = ops::binding_refusal("L", *l.store_binding(), bucket("a", false));
  REQUIRE(refused.has_value());
  CHECK(refused->message.find("with state tags") != std::string::npos);
}

TEST_CASE("init_binding: binds, refuses another store unless rebinding, and says what it replaced") {
  test::FakeLedger l;
  CHECK_FALSE(ops::init_binding(l, l, "L", {bucket("a"), false, false, 0}).rebound_from);
  CHECK(code_of([&] {
          (void)ops::init_binding(l, l, "L", {bucket("b"), false, false, 0});
        }) == Errc::store_mismatch);
  auto r = ops::init_binding(l, l, "L", {bucket("b"), true, false, 0});
  REQUIRE(r.rebound_from.has_value());
  CHECK(*r.rebound_from == bucket("a"));
}

TEST_CASE("init_binding --accept-diverged: USAGE when not diverged, LEDGER_DIVERGED before a reconcile") {
  test::FakeLedger l;
  CHECK(code_of([&] { (void)ops::init_binding(l, l, "L", {bucket("a"), false, true, 0}); }) == Errc::usage);
  (void)l.record_divergence(5, 1);
  CHECK(code_of([&] {
          (void)ops::init_binding(l, l, "L", {bucket("a"), false, true, 2});
        }) == Errc::ledger_diverged);
  l.note_reconciled(3);
  CHECK(ops::init_binding(l, l, "L", {bucket("a"), false, true, 4}).divergence_accepted);
}
