#pragma once
// A group of threads that is always joined, also when the code that started them unwinds,
// and that carries the first exception one of them threw out instead of calling
// std::terminate.

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lodge::util {

class ThreadGroup {
public:
  // on_failure runs once, on the thread whose task threw first (for example to close a
  // queue the other threads wait on); it must not throw.
  explicit ThreadGroup(std::function<void()> on_failure = {});
  ThreadGroup(const ThreadGroup &) = delete;
  ThreadGroup &operator=(const ThreadGroup &) = delete;
  // Joins every thread still running; an exception no join() collected is dropped.
  ~ThreadGroup();

  // Starts task on a new thread. Throws std::system_error when no thread can be made.
  void spawn(std::function<void()> task);
  // Joins every thread, then rethrows the first exception any task threw.
  void join();
  // Whether a task has thrown so far.
  [[nodiscard]] bool failed() const;

private:
  std::function<void()> m_on_failure;
  mutable std::mutex m_mutex;
  std::exception_ptr m_first;
  std::vector<std::jthread> m_threads;
};

} // namespace lodge::util
