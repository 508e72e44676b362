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
    m_cv.wait(lock, [&] { return m_ended == m_posted; });
    m_stop = true;
  }
  m_cv.notify_all();
  // m_thread's destructor joins the loop, which ends on m_stop.
}

uint64_t TaskThread::post(std::function<void()> task) {
  if (!m_started) { // the owner's thread alone posts: no race on m_started
    m_thread.spawn([this] { loop(); });
    m_started = true;
  }
  uint64_t ticket = 0;
  {
    std::lock_guard lock(m_mutex);
    m_queue.push_back(std::move(task));
    ticket = ++m_posted;
  }
  m_cv.notify_all();
  return ticket;
}

void TaskThread::wait(uint64_t ticket) {
  std::exception_ptr error;
  {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [&] { return m_ended >= ticket; });
    if (auto it = m_errors.find(ticket); it != m_errors.end()) {
      error = it->second;
      m_errors.erase(it);
    }
  }
  if (error) std::rethrow_exception(error);
}

void TaskThread::wait() {
  std::exception_ptr error;
  {
    std::unique_lock lock(m_mutex);
    m_cv.wait(lock, [&] { return m_ended == m_posted; });
    if (!m_errors.empty()) {
      error = m_errors.begin()->second;
      m_errors.clear();
    }
  }
  if (error) std::rethrow_exception(error);
}

void TaskThread::loop() {
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
    if (m_queue.empty()) return; // m_stop, and nothing left
    auto task = std::move(m_queue.front());
    m_queue.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    task = nullptr; // what the task holds is released before wait() returns
    lock.lock();
    ++m_ended;
    if (error) m_errors.emplace(m_ended, error);
    m_cv.notify_all();
  }
}

} // namespace lodge::util
