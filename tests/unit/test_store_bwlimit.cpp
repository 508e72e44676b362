// --bwlimit where the bytes move: a file:// store handed a rate limiter takes every byte it
// stores (put) and every byte it reads back (get) from the budget. The limiter's clock and
// sleeper are fakes, so what is checked is the wait the store asked for, not wall time.
#include "fake_time.hpp"
#include "support.hpp"

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <lodge/crypto/sha256.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/token_bucket.hpp>
#include <memory>
#include <string>

using namespace lodge;
using std::chrono::nanoseconds;

namespace {
constexpr uint64_t k_kib = 1024;
constexpr uint64_t k_mib = uint64_t{1} << 20;

using test::FakeTime;

std::unique_ptr<store::ObjectStore> file_store(const test::TempDir &dir,
                                               std::shared_ptr<util::TokenBucket> limiter) {
  store::StoreOptions o;
  o.url = "file://" + dir.file("store");
  o.limiter = std::move(limiter);
  return store::open_store(o);
}

// Puts `content` at `key` from a file in `dir`.
void put(store::ObjectStore &st, const test::TempDir &dir, const std::string &key,
         const std::string &content) {
  const std::string path = dir.file("source-" + std::to_string(content.size()));
  test::write_file(path, content);
  util::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  REQUIRE(fd.valid());
  store::PutRequest r;
  r.key = key;
  r.body.fd = fd.get();
  r.body.size = content.size();
  r.body.sha256_hex = crypto::sha256_hex(content);
  r.content_type = "application/octet-stream";
  auto res = st.put(r);
  REQUIRE_MESSAGE(res.ok(), (res.ok() ? "" : res.error().message));
}
} // namespace

TEST_CASE("bwlimit: a file store's put waits for every byte it stores: (size - burst) / rate") {
  test::TempDir dir;
  FakeTime t;
  const uint64_t rate = 1 * k_mib;
  auto st = file_store(dir, t.bucket(rate));
  // 9 MiB at 1 MiB/s: the first second's worth (the burst) leaves at once, the rest in 8 s.
  put(*st, dir, "a/nine", std::string(9 * k_mib, 'x'));
  CHECK(t.slept_s() == doctest::Approx(8.0).epsilon(1e-6));
  // A connection opened without one takes nothing from it.
  auto other = file_store(dir, nullptr);
  put(*other, dir, "a/free", std::string(2 * k_mib, 'y'));
  CHECK(t.slept_s() == doctest::Approx(8.0).epsilon(1e-6));
}

TEST_CASE("bwlimit: two connections handed one limiter share its budget") {
  test::TempDir dir;
  FakeTime t;
  auto bucket = t.bucket(512 * k_kib);
  auto a = file_store(dir, bucket);
  auto b = file_store(dir, bucket);
  put(*a, dir, "k/a", std::string(2 * k_mib, 'a')); // 512 KiB burst, 1.5 MiB at 512 KiB/s: 3 s
  put(*b, dir, "k/b", std::string(1 * k_mib, 'b')); // the bucket is empty: 2 s more
  CHECK(t.slept_s() == doctest::Approx(5.0).epsilon(1e-6));
}

TEST_CASE("bwlimit: a file store's read (get) waits for the bytes it reads") {
  test::TempDir dir;
  const std::string content(6 * k_mib, 'z');
  {
    auto plain = file_store(dir, nullptr);
    put(*plain, dir, "r/six", content);
  }
  FakeTime t;
  auto st = file_store(dir, t.bucket(2 * k_mib));
  uint64_t got = 0;
  auto s = st->read("r/six", [&](const char *, size_t n) {
    got += n;
    return true;
  });
  REQUIRE(s.ok());
  CHECK(got == content.size());
  // 2 MiB of burst, then 4 MiB at 2 MiB/s.
  CHECK(t.slept_s() == doctest::Approx(2.0).epsilon(1e-6));
}

TEST_CASE("bwlimit: without a limiter nothing waits") {
  test::TempDir dir;
  FakeTime t;
  auto unlimited = t.bucket(0);
  auto st = file_store(dir, unlimited);
  put(*st, dir, "u/big", std::string(8 * k_mib, 'u'));
  CHECK(t.slept_ns == 0);
}

TEST_CASE("bwlimit: a caller takes at most 1/32 s of the budget at a time") {
  util::TokenBucket fast(32 * k_mib);
  CHECK(fast.max_chunk() == 1 * k_mib);
  util::TokenBucket slow(10 * k_kib);
  CHECK(slow.max_chunk() == 1 * k_kib); // the floor
  util::TokenBucket none(0);
  CHECK(none.max_chunk() == UINT64_MAX);
}
