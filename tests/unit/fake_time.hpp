#pragma once
// The one fake clock of the rate-limit tests: time moves only when the limiter sleeps (or a
// test moves now_ns), and every sleep is counted.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <lodge/util/token_bucket.hpp>
#include <memory>

namespace lodge::test {

struct FakeTime {
  std::atomic<int64_t> now_ns{1'000'000'000};
  std::atomic<int64_t> slept_ns{0};
  util::TokenBucket::NowFn now() {
    return [this] { return std::chrono::nanoseconds{now_ns.load()}; };
  }
  util::TokenBucket::SleepFn sleep() {
    return [this](std::chrono::nanoseconds d) {
      slept_ns += d.count();
      now_ns += d.count();
    };
  }
  // A bucket of `rate` bytes/s (burst: the bucket's default) on this clock.
  std::shared_ptr<util::TokenBucket> bucket(uint64_t rate) {
    return std::make_shared<util::TokenBucket>(rate, 0, now(), sleep());
  }
  [[nodiscard]] double slept_s() const { return static_cast<double>(slept_ns.load()) / 1e9; }
};

} // namespace lodge::test
