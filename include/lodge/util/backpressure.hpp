#pragma once
// What a process's store connections heard that says "fewer at once": answers asking to
// slow down (S3's 503 SlowDown, 429, Azure's 503 ServerBusy) and other transient failures
// (other 5xx answers, resets, timeouts), each counted as the retry loop sees it, retried or
// not. One for every connection of the process (store::StoreOptions::backpressure); the
// upload run reads it to choose how many requests it keeps in flight.

#include <atomic>
#include <cstdint>

namespace lodge::util {

struct Backpressure {
  std::atomic<uint64_t> throttled{0};
  std::atomic<uint64_t> failed{0};
};

} // namespace lodge::util
