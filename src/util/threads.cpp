#include <lodge/util/threads.hpp>

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

} // namespace lodge::util
