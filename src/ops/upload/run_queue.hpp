#pragma once
// What an upload run's workers take their files and their slots from (private to run.cpp): the
// bounded queue the walk fills (WorkQueue) and an adaptive run's gate on the requests in flight
// (Gate).

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <lodge/ops/upload/walk.hpp>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace lodge::ops {

// A bounded queue between the input walker and the workers. Workers take nothing until
// start(): the walk of the paths given lists first (or fills the queue), so the
// upload.after_walk failpoint sits at one well-defined point.
class WorkQueue {
public:
  explicit WorkQueue(size_t cap) : m_cap(cap) {}
  // Starts the workers if the queue is full and they have not started yet: a walk larger
  // than the queue must not wait for itself.
  bool push(InputFile item, const std::function<void()> &start_when_full) {
    bool start_now = false;
    {
      std::lock_guard lock(m_mutex);
      start_now = !m_started && m_items.size() >= m_cap;
    }
    if (start_now) start_when_full();
    std::unique_lock lock(m_mutex);
    m_not_full.wait(lock, [&] { return m_items.size() < m_cap || m_closed; });
    if (m_closed) return false;
    m_items.push_back(std::move(item));
    m_not_empty.notify_one();
    return true;
  }
  // `idle` runs (unlocked) before a wait for the next item: a worker settles its pending
  // confirm then, instead of holding it until more input comes (`--files-from -` fed
  // slowly: a stored file must not wait past its deadline for a partner).
  std::optional<InputFile> pop(const std::function<void()> &idle = {}) {
    std::unique_lock lock(m_mutex);
    if (idle && !m_closed && !(m_started && !m_items.empty())) {
      lock.unlock();
      idle();
      lock.lock();
    }
    m_not_empty.wait(lock, [&] { return (m_started && !m_items.empty()) || m_closed; });
    if (m_items.empty()) return std::nullopt;
    auto v = std::move(m_items.front());
    m_items.pop_front();
    m_not_full.notify_one();
    return v;
  }
  // Adds to `batch` (which holds a popped item) the items queued right behind it while
  // `fits` says yes, up to `max` in all and no more than a fair share of what is queued
  // among `workers`; never waits.
  void pop_more(std::vector<InputFile> &batch, size_t max, int workers,
                const std::function<bool(const InputFile &)> &fits) {
    std::lock_guard lock(m_mutex);
    const size_t share = m_items.size() / static_cast<size_t>(std::max(workers, 1));
    const size_t until = std::min(max, batch.size() + share);
    size_t taken = 0;
    while (batch.size() < until && !m_items.empty() && fits(m_items.front())) {
      batch.push_back(std::move(m_items.front()));
      m_items.pop_front();
      ++taken;
    }
    if (taken > 0) m_not_full.notify_all();
  }
  // Returns an item a worker popped but cannot take up (its connections failed to open):
  // first again, for another worker. Dropped once the queue is closed.
  void put_back(InputFile item) {
    {
      std::lock_guard lock(m_mutex);
      if (m_closed) return;
      m_items.push_front(std::move(item));
    }
    m_not_empty.notify_one();
  }
  void start() {
    std::lock_guard lock(m_mutex);
    m_started = true;
    m_not_empty.notify_all();
  }
  [[nodiscard]] bool started() {
    std::lock_guard lock(m_mutex);
    return m_started;
  }
  void close() {
    std::lock_guard lock(m_mutex);
    m_closed = true;
    m_not_empty.notify_all();
    m_not_full.notify_all();
  }
  // Drops what is waiting (after a stop: nothing new starts).
  void clear() {
    std::lock_guard lock(m_mutex);
    m_items.clear();
    m_not_full.notify_all();
  }

private:
  size_t m_cap;
  std::mutex m_mutex;
  std::condition_variable m_not_empty, m_not_full;
  std::deque<InputFile> m_items;
  bool m_started = false;
  bool m_closed = false;
};

// An adaptive run's requests in flight, held to the controller's level. A worker holds one
// slot per request it may have in flight (a small file's PUT: 1; a large file's parts sent
// at once: up to the part concurrency) from before it takes a file until it comes back for
// the next one; what does not fit is waited for holding nothing (no two waiters can block
// each other). A lowered level is met as workers come back for their next file.
class Gate {
public:
  explicit Gate(int level) : m_level(level) {}
  void set_level(int level) {
    std::lock_guard lock(m_mutex);
    m_level = level;
    m_cv.notify_all();
  }
  // This worker's `held` becomes `want` (at most the level) if that fits now.
  bool try_hold(int &held, int want) {
    std::lock_guard lock(m_mutex);
    want = std::min(want, m_level);
    if (m_used - held + want > m_level) return false;
    m_used += want - held;
    if (want < held) m_cv.notify_all();
    held = want;
    return true;
  }
  // Gives up what it holds, then waits until `want` (at most the level) fits. With
  // `until_closed`, false once the gate closed (holding nothing): the queue is drained.
  bool hold(int &held, int want, bool until_closed) {
    std::unique_lock lock(m_mutex);
    m_used -= held;
    held = 0;
    m_cv.notify_all();
    m_cv.wait(lock,
              [&] { return (until_closed && m_closed) || m_used + std::min(want, m_level) <= m_level; });
    if (until_closed && m_closed) return false;
    held = std::min(want, m_level);
    m_used += held;
    return true;
  }
  // A worker's slots are busy from when it takes a file until it waits for work (a slot, or
  // the queue): `mine` becomes `value`.
  void set_busy(int &mine, int value) {
    std::lock_guard lock(m_mutex);
    m_busy += value - mine;
    mine = value;
    m_peak = std::max(m_peak, m_busy);
  }
  // The most slots busy at once since the last call.
  int take_peak() {
    std::lock_guard lock(m_mutex);
    return std::exchange(m_peak, m_busy);
  }
  void release(int &held) {
    std::lock_guard lock(m_mutex);
    m_used -= held;
    held = 0;
    m_cv.notify_all();
  }
  // No more files: the workers waiting for a slot end.
  void close() {
    std::lock_guard lock(m_mutex);
    m_closed = true;
    m_cv.notify_all();
  }

private:
  std::mutex m_mutex;
  std::condition_variable m_cv;
  int m_level;
  int m_used = 0;
  int m_busy = 0; // of those, held by workers with a file
  int m_peak = 0; // the most busy since take_peak
  bool m_closed = false;
};

} // namespace lodge::ops
