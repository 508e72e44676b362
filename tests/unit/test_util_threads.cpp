// ThreadGroup: every thread is joined, and an exception in one of them is carried out to
// join() instead of ending the process in std::terminate; TaskThread, one kept thread for
// many tasks.
#include "support.hpp"

#include <atomic>
#include <lodge/util/threads.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

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

TEST_CASE("TaskThread runs each posted task on one kept thread, in order, and carries its exception") {
  util::TaskThread sender;
  std::vector<std::thread::id> ran_on;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) {
    sender.post([&, i] {
      ran_on.push_back(std::this_thread::get_id());
      order.push_back(i);
    });
    sender.wait(); // what the task wrote is visible after wait()
  }
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(ran_on[0] != std::this_thread::get_id());
  for (const auto &id : ran_on)
    CHECK(id == ran_on[0]); // one thread for every task, not one per task
  sender.post([] { throw std::runtime_error("the PUT threw"); });
  CHECK_THROWS_WITH_AS(sender.wait(), "the PUT threw", std::runtime_error);
  sender.wait(); // the exception is carried once
  int after = 0;
  sender.post([&] { after = 1; }); // the thread still serves
  sender.wait();
  CHECK(after == 1);
}

TEST_CASE("TaskThread's destructor waits for the task in hand before it joins") {
  std::atomic<bool> released{false};
  std::atomic<bool> done{false};
  auto post_then_throw = [&] {
    util::TaskThread sender;
    sender.post([&] {
      while (!released)
        std::this_thread::yield();
      done = true;
    });
    released = true;
    throw std::runtime_error("the worker unwound");
  };
  CHECK_THROWS_WITH_AS(post_then_throw(), "the worker unwound", std::runtime_error);
  CHECK(done);
  util::TaskThread never_used; // no thread made, nothing to join
}

TEST_CASE("TaskThread queues a task behind the running one and starts it as that one ends") {
  util::TaskThread sender;
  std::atomic<bool> release_first{false};
  std::atomic<bool> second_started{false};
  std::atomic<bool> release_second{false};
  const uint64_t first = sender.post([&] {
    while (!release_first)
      std::this_thread::yield();
  });
  const uint64_t second = sender.post([&] {
    second_started = true;
    while (!release_second)
      std::this_thread::yield();
    throw std::runtime_error("the second PUT threw");
  });
  CHECK(second == first + 1);
  CHECK_FALSE(second_started); // one at a time: the second waits for the first
  release_first = true;
  sender.wait(first); // returns with the second still running: nobody posted it again
  while (!second_started)
    std::this_thread::yield();
  release_second = true;
  CHECK_THROWS_WITH_AS(sender.wait(second), "the second PUT threw", std::runtime_error);
  sender.wait(second); // carried once
  sender.wait();
}

TEST_CASE("TaskThread's wait() waits for every queued task and rethrows the first error") {
  std::vector<int> order;
  {
    util::TaskThread sender;
    (void)sender.post([&] { order.push_back(1); });
    (void)sender.post([&] { throw std::runtime_error("first"); });
    (void)sender.post([&] { throw std::runtime_error("second"); });
    (void)sender.post([&] { order.push_back(4); });
    CHECK_THROWS_WITH_AS(sender.wait(), "first", std::runtime_error);
    CHECK(order == std::vector<int>{1, 4});
    sender.wait(); // nothing left to rethrow
    for (int i = 5; i < 8; ++i)
      (void)sender.post([&, i] { order.push_back(i); });
    // the destructor waits for all three before it joins
  }
  CHECK(order == std::vector<int>{1, 4, 5, 6, 7});
}
