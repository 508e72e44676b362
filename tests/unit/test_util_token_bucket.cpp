#include "fake_time.hpp"
#include "support.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <lodge/util/token_bucket.hpp>
#include <lodge/util/units.hpp>
#include <thread>
#include <vector>

using namespace lodge;
using std::chrono::nanoseconds;

namespace {
constexpr uint64_t k_kib = 1024;
constexpr uint64_t k_mib = uint64_t{1} << 20;

using test::FakeTime;

double seconds(int64_t ns) {
  return static_cast<double>(ns) / 1e9;
}
} // namespace

TEST_CASE("token bucket: after N bytes at rate R the total wait is N/R minus the burst") {
  FakeTime t;
  const uint64_t rate = 1 * k_mib;
  util::TokenBucket bucket(rate, 0, t.now(), t.sleep());
  CHECK(bucket.burst() == rate); // one second's worth by default
  const uint64_t chunk = 256 * k_kib;
  const uint64_t total = 20 * k_mib;
  for (uint64_t sent = 0; sent < total; sent += chunk)
    bucket.acquire(chunk);
  // The first second's worth leaves at once; the other 19 MiB take 19 s.
  CHECK(seconds(t.slept_ns) == doctest::Approx(19.0).epsilon(1e-6));
}

TEST_CASE("token bucket: the first burst is free and the rest waits exactly its share") {
  FakeTime t;
  util::TokenBucket bucket(100 * k_kib, 0, t.now(), t.sleep());
  CHECK(bucket.burst() == 100 * k_kib);
  CHECK(bucket.reserve(100 * k_kib) == nanoseconds{0});
  // Empty now: 50 KiB at 100 KiB/s is half a second.
  CHECK(bucket.reserve(50 * k_kib) == nanoseconds{500'000'000});
  // The debt adds up: another 50 KiB waits a whole second from now.
  CHECK(bucket.reserve(50 * k_kib) == nanoseconds{1'000'000'000});
  // A second pays that debt off; the next 100 KiB waits its own second.
  t.now_ns += 1'000'000'000;
  CHECK(bucket.reserve(100 * k_kib) == nanoseconds{1'000'000'000});
}

TEST_CASE("token bucket: an idle bucket refills only up to its burst") {
  FakeTime t;
  util::TokenBucket bucket(1 * k_mib, 2 * k_mib, t.now(), t.sleep());
  CHECK(bucket.reserve(2 * k_mib) == nanoseconds{0});
  t.now_ns += 3600LL * 1'000'000'000; // an hour idle
  CHECK(bucket.reserve(2 * k_mib) == nanoseconds{0});
  CHECK(bucket.reserve(1 * k_mib) == nanoseconds{1'000'000'000});
}

TEST_CASE("token bucket: the burst has a floor so small rates still move whole buffers") {
  FakeTime t;
  util::TokenBucket slow(1000, 0, t.now(), t.sleep());
  CHECK(slow.burst() == util::TokenBucket::k_min_burst);
  util::TokenBucket tiny(1000, 10, t.now(), t.sleep());
  CHECK(tiny.burst() == util::TokenBucket::k_min_burst);
  util::TokenBucket big(1000, 10 * k_mib, t.now(), t.sleep());
  CHECK(big.burst() == 10 * k_mib);
}

TEST_CASE("token bucket: a clock that steps back adds no tokens") {
  FakeTime t;
  util::TokenBucket bucket(1 * k_mib, 0, t.now(), t.sleep());
  CHECK(bucket.reserve(1 * k_mib) == nanoseconds{0});
  t.now_ns -= 5'000'000'000;
  CHECK(bucket.reserve(1 * k_mib) == nanoseconds{1'000'000'000});
}

TEST_CASE("token bucket: rate 0 is unlimited and never sleeps") {
  FakeTime t;
  util::TokenBucket bucket(0, 0, t.now(), t.sleep());
  CHECK(bucket.unlimited());
  for (int i = 0; i < 1000; ++i)
    bucket.acquire(1 * k_mib);
  CHECK(bucket.reserve(uint64_t{1} << 60) == nanoseconds{0});
  CHECK(t.slept_ns == 0);
}

TEST_CASE("token bucket: concurrent callers share one budget") {
  FakeTime t; // frozen: only the shared debt decides the waits
  const uint64_t rate = 1 * k_mib;
  util::TokenBucket bucket(rate, 0, t.now(), t.sleep());
  constexpr int k_threads = 4;
  constexpr int k_each = 64;
  const uint64_t chunk = 64 * k_kib;
  std::vector<int64_t> longest(k_threads, 0);
  std::vector<std::thread> threads;
  threads.reserve(k_threads);
  for (int i = 0; i < k_threads; ++i)
    threads.emplace_back([&, i] {
      for (int j = 0; j < k_each; ++j)
        longest[static_cast<size_t>(i)] =
            std::max(longest[static_cast<size_t>(i)], bucket.reserve(chunk).count());
    });
  for (auto &th : threads)
    th.join();
  // 16 MiB reserved in all: whoever reserved last waits for the other 15 MiB.
  int64_t last = *std::max_element(longest.begin(), longest.end());
  CHECK(seconds(last) == doctest::Approx(15.0).epsilon(1e-6));
  // And the next caller queues behind all of them.
  CHECK(seconds(bucket.reserve(chunk).count()) == doctest::Approx(15.0625).epsilon(1e-6));
}

TEST_CASE("bwlimit: the one size grammar per second, binary multiples, bytes when no unit") {
  CHECK(util::parse_bwlimit("10M") == 10 * k_mib);
  CHECK(util::parse_bwlimit("10m") == 10 * k_mib);
  CHECK(util::parse_bwlimit("10Mi") == 10 * k_mib);
  CHECK(util::parse_bwlimit("10MiB") == 10 * k_mib);
  CHECK(util::parse_bwlimit("512K") == 512 * k_kib);
  CHECK(util::parse_bwlimit("512") == 512U);
  CHECK(util::parse_bwlimit("1.5M") == 3 * k_mib / 2);
  CHECK(util::parse_bwlimit("100B") == 100U);
  CHECK(util::parse_bwlimit("1G") == 1024 * k_mib);
  CHECK(util::parse_bwlimit("1T") == uint64_t{1} << 40);
  CHECK(util::parse_bwlimit("1P") == uint64_t{1} << 50);
  CHECK(util::parse_bwlimit("off") == 0U);
  CHECK(util::parse_bwlimit("OFF") == 0U);
  CHECK(util::parse_bwlimit("0") == 0U);
  for (const char *bad : {"", "M", "-1M", "10X", "10MB", "1e3", "inf", "nan", "1.2.3", "10 M", "10M:5M",
                          "08:00,512k", "iB", "10iB", "99999999999P"})
    CHECK_MESSAGE(!util::parse_bwlimit(bad), bad);
}

TEST_CASE("bwlimit: formatted the way rclone prints it, and read back") {
  CHECK(util::format_bwlimit(0) == "off");
  CHECK(util::format_bwlimit(10 * k_mib) == "10Mi");
  CHECK(util::format_bwlimit(3 * k_mib / 2) == "1.500Mi");
  CHECK(util::format_bwlimit(512 * k_kib) == "512Ki");
  CHECK(util::format_bwlimit(100) == "100B");
  for (uint64_t v : {uint64_t{100}, 512 * k_kib, 10 * k_mib, 3 * k_mib / 2, uint64_t{1} << 40})
    CHECK(util::parse_bwlimit(util::format_bwlimit(v)) == v);
}
