// Group commit (sql_ledger.hpp): the upload path's writes of every worker thread of one
// process, batched into one SQLite transaction (one fsync for many files), each request in
// its own savepoint. The pool that hands the workers their ledgers is ledger_pool.cpp.
#include "sql_ledger.hpp"

#include <algorithm>
#include <chrono>
#include <lodge/util/log.hpp>
#include <utility>

namespace lodge::ledger {
namespace {
// What an exception_ptr holds, as a warning says it.
std::string error_text(const std::exception_ptr &e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception &x) {
    return x.what();
  } catch (...) {
    return "an unknown error";
  }
}
} // namespace

GroupCommit::GroupCommit(std::unique_ptr<sql::Conn> conn, size_t max_batch)
    : m_writer(std::make_unique<SqlLedger>(std::move(conn))), m_max(std::max<size_t>(max_batch, 1)) {}

GroupCommit::~GroupCommit() {
  // Only abandoned requests can be left: every other one's enqueuer waits for it, holding
  // this group meanwhile. Nobody led a batch since they were abandoned, and none will.
  try {
    std::vector<std::shared_ptr<Request>> left(m_queue.begin(), m_queue.end());
    left.insert(left.end(), m_deferred.begin(), m_deferred.end());
    for (const auto &r : left)
      util::log::warn(r->what + " was abandoned by its uploader and never ran: nothing of it was written");
    auto s = stats();
    if (s.requests > 0)
      util::log::debug("ledger: " + std::to_string(s.requests) + " upload transitions in " +
                       std::to_string(s.commits) + " commits (largest batch " + std::to_string(s.largest) +
                       "; " + std::to_string(s.batch_us / 1000) + " ms in transactions, " +
                       std::to_string(s.flushes) + " store flushes in " + std::to_string(s.flush_us / 1000) +
                       " ms)");
  } catch (...) { // a log line that cannot be made is not worth ending the process for
  }
}

GroupCommit::Stats GroupCommit::stats() {
  std::lock_guard lock(m_mu);
  return m_stats;
}

void GroupCommit::submit(std::function<void(SqlLedger &)> fn) {
  auto me = enqueue(std::move(fn));
  wait(*me);
  if (me->error) std::rethrow_exception(me->error);
}

std::shared_ptr<GroupCommit::Request> GroupCommit::enqueue(std::function<void(SqlLedger &)> f,
                                                           Durable durable, bool defer) {
  auto r = std::make_shared<Request>();
  r->fn = std::move(f);
  r->durable = std::move(durable);
  r->deferred = defer;
  r->queued = std::chrono::steady_clock::now();
  std::lock_guard lock(m_mu);
  if (defer)
    m_deferred.push_back(r);
  else
    m_queue.push_back(r);
  return r;
}

void GroupCommit::abandon(const std::shared_ptr<Request> &r, std::string what) {
  std::lock_guard lock(m_mu);
  r->what = std::move(what);
  r->abandoned = true;
  // It goes with the next batch anyone leads, as if its enqueuer were waiting for it.
  if (r->deferred) m_deferred_wanted = true;
}

void GroupCommit::wait(Request &me) {
  std::unique_lock lock(m_mu);
  if (me.deferred) m_deferred_wanted = true;
  me.waiting = true;
  m_waiters.push_back(&me);
  while (!me.done) {
    if (m_leading) {
      me.cv.wait(lock);
      continue;
    }
    const bool take_deferred =
        !m_deferred.empty() && (m_deferred_wanted || m_deferred.size() >= k_defer_max ||
                                std::chrono::steady_clock::now() - m_deferred.front()->queued >=
                                    std::chrono::milliseconds(k_defer_ms));
    if (m_queue.empty() && !take_deferred) { // not expected: `me` is queued, or wanted
      me.cv.wait(lock);
      continue;
    }
    m_leading = true;
    std::vector<std::shared_ptr<Request>> batch;
    if (take_deferred) {
      for (const auto &r : m_deferred)
        r->deferred = false;
      batch.swap(m_deferred);
      m_deferred_wanted = false;
    }
    const size_t cap = batch.size() + m_max;
    while (!m_queue.empty() && batch.size() < cap) {
      batch.push_back(m_queue.front());
      m_queue.pop_front();
    }
    lock.unlock();
    std::vector<std::shared_ptr<Request>> again;
    int64_t flushes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto t1 = t0;
    try {
      flushes = make_durable(batch);
      t1 = std::chrono::steady_clock::now();
      again = lead(batch);
    } catch (...) { // lead() catches everything itself; this only keeps the queue sound
      for (const auto &r : batch)
        if (!r->error) r->error = std::current_exception();
    }
    lock.lock();
    std::vector<std::shared_ptr<Request>> orphans; // abandoned and ended with an error
    for (const auto &r : batch) {
      if (std::find(again.begin(), again.end(), r) != again.end()) continue;
      r->done = true;
      if (r->abandoned && r->error) orphans.push_back(r);
    }
    m_queue.insert(m_queue.begin(), again.begin(), again.end()); // first again, in their order
    const auto t2 = std::chrono::steady_clock::now();
    ++m_stats.commits;
    m_stats.flushes += flushes;
    m_stats.flush_us += std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count();
    m_stats.batch_us += std::chrono::duration_cast<std::chrono::microseconds>(t2 - t1).count();
    m_stats.requests += static_cast<int64_t>(batch.size() - again.size());
    m_stats.largest = std::max<int64_t>(m_stats.largest, static_cast<int64_t>(batch.size()));
    m_leading = false;
    for (const auto &r : batch)
      if (r->done && r->waiting) r->cv.notify_one();
    for (Request *w : m_waiters)
      if (!w->done && w != &me) { // the next leader (`me`, if still to run, leads on)
        w->cv.notify_one();
        break;
      }
    if (!orphans.empty()) {
      lock.unlock();
      for (const auto &r : orphans)
        util::log::warn(r->what + ", abandoned by its uploader, failed: " + error_text(r->error));
      lock.lock();
    }
  }
  me.waiting = false;
  m_waiters.erase(std::find(m_waiters.begin(), m_waiters.end(), &me));
}

// Every request was enqueued after its writes, so one make() run now covers all of one domain's.
int64_t GroupCommit::make_durable(const std::vector<std::shared_ptr<Request>> &batch) {
  int64_t ran = 0;
  std::vector<const void *> done;
  for (const auto &r : batch) {
    if (!r->durable.make || r->error || std::find(done.begin(), done.end(), r->durable.domain) != done.end())
      continue;
    const void *domain = r->durable.domain;
    done.push_back(domain);
    ++ran;
    Status s = r->durable.make();
    if (s) continue;
    auto e = std::make_exception_ptr(NotDurable(s.error()));
    for (const auto &o : batch)
      if (o->durable.make && o->durable.domain == domain) o->error = e;
  }
  return ran;
}

std::vector<std::shared_ptr<GroupCommit::Request>>
GroupCommit::lead(const std::vector<std::shared_ptr<Request>> &batch) {
  sql::Conn &c = m_writer->connection();
  try {
    c.begin_batch(); // waits for other processes' writers like any write
  } catch (...) {
    for (const auto &r : batch)
      r->error = std::current_exception();
    return {};
  }
  size_t ran = 0;
  std::exception_ptr lost;
  for (const auto &r : batch) {
    if (r->error) { // its Durable failed: it does not run
      ++ran;
      continue;
    }
    try {
      r->fn(*m_writer);
    } catch (...) {
      r->error = std::current_exception();
    }
    ++ran;
    if (!c.in_transaction()) {
      // SQLite rolled the whole transaction back under this request: everything the batch
      // did so far is gone.
      lost = r->error
                 ? r->error
                 : std::make_exception_ptr(LodgeError(
                       Errc::ledger_unusable, c.display_name() + ": the ledger rolled the transaction back"));
      break;
    }
  }
  if (lost) {
    c.end_batch(false);
    for (size_t i = 0; i < ran; ++i)
      if (!batch[i]->error) batch[i]->error = lost;
    return {batch.begin() + static_cast<std::ptrdiff_t>(ran), batch.end()};
  }
  try {
    c.end_batch(true);
  } catch (...) {
    auto e = std::current_exception();
    c.rollback();
    for (const auto &r : batch)
      if (!r->error) r->error = e;
  }
  return {};
}

} // namespace lodge::ledger
