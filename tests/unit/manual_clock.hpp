#pragma once
// The clock the ops unit tests set and move: what the ledger fake's rows, the stores' times
// and the uploader's deadlines read as now.

#include <atomic>
#include <cstdint>
#include <lodge/util/clock.hpp>

namespace lodge::test {

class ManualClock final : public util::Clock {
public:
  std::atomic<int64_t> t{1'700'000'000'000};
  [[nodiscard]] int64_t now_ms() const override { return t.load(); }
  void advance(int64_t ms) { t += ms; }
};

} // namespace lodge::test
