// The cleanup path's pure rules (its ledger side is in the ledger contract, tests/ledger).
#include <doctest/doctest.h>
#include <lodge/ops/cleanup.hpp>

using namespace lodge;

TEST_CASE("backoff is bounded and grows") {
  ops::CleanupSettings s{0, 1000, 8000};
  CHECK(ops::cleanup_backoff_ms(s, 0, 0) == 500);
  CHECK(ops::cleanup_backoff_ms(s, 0, UINT64_MAX) <= 1000);
  CHECK(ops::cleanup_backoff_ms(s, 10, 7500) == 8000);
  CHECK(ops::cleanup_backoff_ms(s, 2, 3500) == 4000);
}
