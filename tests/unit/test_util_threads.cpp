// ThreadGroup: every thread is joined, and an exception in one of them is carried out to
// join() instead of ending the process in std::terminate.
#include "support.hpp"

#include <atomic>
#include <lodge/util/threads.hpp>
#include <stdexcept>

using namespace lodge;

TEST_CASE("ThreadGroup carries the first exception of a thread out to join") {
  std::atomic<int> finished{0};
  std::atomic<int> failures_seen{0};
  util::ThreadGroup group([&] { ++failures_seen; });
  for (int i = 0; i < 4; ++i)
    group.spawn([&, i] {
      if (i == 2) throw std::runtime_error("part 3 failed");
      ++finished;
    });
  CHECK_THROWS_WITH_AS(group.join(), "part 3 failed", std::runtime_error);
  CHECK(finished == 3);
  CHECK(failures_seen == 1);
  CHECK(group.failed());
}

TEST_CASE("ThreadGroup joins its threads when the code that started them unwinds") {
  std::atomic<bool> released{false};
  std::atomic<bool> done{false};
  auto start_then_throw = [&] {
    util::ThreadGroup group;
    group.spawn([&] {
      while (!released)
        std::this_thread::yield();
      done = true;
    });
    released = true;
    throw std::runtime_error("the walk failed");
  };
  CHECK_THROWS_WITH_AS(start_then_throw(), "the walk failed", std::runtime_error);
  CHECK(done); // joined before the exception left the scope
}
