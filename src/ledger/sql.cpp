// The driver seam's shared helpers (ledger/sql.hpp).
#include <algorithm>
#include <chrono>
#include <lodge/ledger/sql.hpp>
#include <random>
#include <thread>

namespace lodge::ledger::sql {

void conflict_backoff(int attempt) {
  // 2, 4, 8, ... ms, capped at 100, each with up to as much again of jitter: two
  // transactions that conflicted once do not meet again in lockstep.
  int64_t base = std::min<int64_t>(int64_t{1} << std::clamp(attempt, 1, 7), 100);
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_int_distribution<int64_t> jitter(0, base);
  std::this_thread::sleep_for(std::chrono::milliseconds(base + jitter(rng)));
}

} // namespace lodge::ledger::sql
