#include <algorithm>
#include <chrono>
#include <lodge/ledger/sql.hpp>
#include <random>
#include <thread>

namespace lodge::ledger::sql {

void conflict_backoff(int attempt) {
  // 2, 4, 8, ... ms, capped at 100 ms, each jittered to between half and all of it, so
  // two transactions that conflicted do not meet again in lockstep.
  int64_t cap = std::min<int64_t>(100, int64_t{1} << std::clamp(attempt, 1, 7));
  thread_local std::minstd_rand rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> d(cap / 2, cap);
  std::this_thread::sleep_for(std::chrono::milliseconds(d(rng)));
}

} // namespace lodge::ledger::sql
