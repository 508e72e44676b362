#include <lodge/util/threads.hpp>
#include <stdexcept>
#include <utility>

namespace lodge::util {

ThreadGroup::ThreadGroup(std::function<void()> on_failure) : m_on_failure(std::move(on_failure)) {}

ThreadGroup::~ThreadGroup() {
  // std::jthread joins in its destructor; doing it here first keeps the members alive
  // while the threads still use them.
  for (auto &t : m_threads)
    if (t.joinable()) t.join();
}

void ThreadGroup::spawn(std::function<void()> task) {
  m_threads.emplace_back([this, task = std::move(task)] {
    try {
      task();
    } catch (...) {
      bool first = false;
      {
        std::lock_guard lock(m_mutex);
        if (!m_first) {
          m_first = std::current_exception();
          first = true;
        }
      }
      if (first && m_on_failure) m_on_failure();
    }
  });
}

void ThreadGroup::join() {
  for (auto &t : m_threads)
    if (t.joinable()) t.join();
  std::exception_ptr first;
  {
    std::lock_guard lock(m_mutex);
    first = m_first;
  }
  if (first) std::rethrow_exception(first);
}

bool ThreadGroup::failed() const {
  std::lock_guard lock(m_mutex);
  return m_first != nullptr;
}

TaskThread::~TaskThread() {
  {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [&] { return !m_busy; });
    m_stop = true;
  }
  m_cv.notify_all();
  // m_thread's destructor joins the loop, which ends on m_stop.
}

void TaskThread::post(std::function<void()> task) {
  if (!m_started) { // the owner's thread alone posts: no race on m_started
    m_thread.spawn([this] { loop(); });
    m_started = true;
  }
  {
    std::lock_guard lock(m_mutex);
    if (m_busy) throw std::logic_error("TaskThread::post while a task is running");
    m_task = std::move(task);
    m_busy = true;
    m_error = nullptr;
  }
  m_cv.notify_all();
}

void TaskThread::wait() {
  std::exception_ptr error;
  {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [&] { return !m_busy; });
    error = std::exchange(m_error, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void TaskThread::loop() {
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_cv.wait(lock, [&] { return m_stop || (m_busy && m_task); });
    if (m_stop) return;
    auto task = std::exchange(m_task, nullptr);
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    task = nullptr; // what the task holds is released before wait() returns
    lock.lock();
    m_error = error;
    m_busy = false;
    m_cv.notify_all();
  }
}

} // namespace lodge::util
