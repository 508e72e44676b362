#pragma once
// A group of threads that is always joined, also when the code that started them unwinds,
// and that carries the first exception one of them threw out instead of calling
// std::terminate.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
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

// One thread kept for many short tasks, run one at a time in the order posted: post() queues
// a task and returns its ticket, wait(ticket) returns once that task ended and rethrows what
// it threw. A thread made per task costs its clone, its stack's release and its join
// (measured 5-6 % of an upload run's CPU with one per 16 KiB file); this one is made on the
// first post() and joined by the destructor, which first waits for every task queued.
// A task queued behind a running one starts the moment that one ends, without waiting for
// the owner to come back to post it (an upload worker queues its next PUT this way while it
// still has the current one in the air).
class TaskThread {
public:
  TaskThread() = default;
  TaskThread(const TaskThread &) = delete;
  TaskThread &operator=(const TaskThread &) = delete;
  ~TaskThread();

  // Queues task behind every task posted before; returns its ticket (1, 2, ...).
  uint64_t post(std::function<void()> task);
  // Until the task with this ticket ended; rethrows the exception it threw (once).
  void wait(uint64_t ticket);
  // Until every task posted ended; rethrows the first exception not yet rethrown.
  void wait();

private:
  void loop();
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::function<void()>> m_queue;
  uint64_t m_posted = 0; // tickets handed out
  uint64_t m_ended = 0;  // tasks ended: tickets 1..m_ended (they end in order)
  bool m_stop = false;
  bool m_started = false;
  std::map<uint64_t, std::exception_ptr> m_errors; // by ticket, until rethrown
  ThreadGroup m_thread;                            // declared last: joined first on destruction
};

} // namespace lodge::util
