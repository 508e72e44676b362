#pragma once
// One MessageQueue fake for the unit tests: a broker in memory. publish records each message
// and gives it an id; receive hands ready messages out (in flight until ack, delay or
// dead_letter); what happened to each is recorded; calls fail on script, and a publish can
// lose its confirmation (the broker keeps the message, the publisher gets an error, as when a
// connection drops before the ack). Several instances can share one broker
// (FakeQueue::connection()), like a relay and a consumer. Time does not pass by itself: a
// test returns unacknowledged messages (return_unacked(): the visibility timeout, or the
// connection closed) and releases delayed ones (release_delayed()) when it means to.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <lodge/mq/queue.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace lodge::test {

struct QueueCall {
  std::string op;     // ensure_queues, publish, receive, ack, delay, dead_letter, counts
  std::string detail; // publish: the dedup id; ack/delay/dead_letter: the message id
  bool ok = true;
};

// A message as the fake broker holds it.
struct QueuedMessage {
  std::string message_id;
  std::string dedup_id;
  std::string body;
  int64_t receive_count = 0;
  int64_t delay_ms = 0;    // the last delay asked for it
  std::string dead_reason; // dead_letter's reason
};

class FakeQueue final : public mq::MessageQueue {
  struct Failure {
    std::string op;
    Error error;
    int times; // < 0: until cleared
  };
  struct State {
    std::mutex mutex;
    std::vector<QueueCall> calls;
    std::vector<Failure> failures;
    int lost_confirms = 0;                          // the next publishes that keep the message but fail
    std::vector<QueuedMessage> published;           // every message the broker accepted, in order
    std::deque<QueuedMessage> ready;                // NAME, waiting
    std::map<std::string, QueuedMessage> in_flight; // handle -> message
    std::vector<QueuedMessage> delayed;             // waiting out a delay
    std::vector<QueuedMessage> dead;                // NAME-dlq
    std::vector<QueuedMessage> acked;
    bool ensured = false;
    int64_t next_id = 1;
    int64_t next_handle = 1;
  };

public:
  explicit FakeQueue(std::string name = "lodge-events") : m_state(std::make_shared<State>()) {
    m_url.broker = mq::Broker::sqs;
    m_url.name = std::move(name);
    m_url.text = "sqs://" + m_url.name;
  }

  // Another connection to the same fake broker: shares messages, calls and failures.
  [[nodiscard]] std::unique_ptr<FakeQueue> connection() const {
    return std::unique_ptr<FakeQueue>(new FakeQueue(m_state, m_url));
  }

  // The next `times` calls of op fail with e (times < 0: every call until cleared). A failed
  // publish fails every message of its batch and the broker keeps none of them.
  void fail(const std::string &op, Error e, int times = -1) {
    std::lock_guard lock(m_state->mutex);
    m_state->failures.push_back({op, std::move(e), times});
  }
  void clear_failures() {
    std::lock_guard lock(m_state->mutex);
    m_state->failures.clear();
  }
  // The next `messages` published messages reach the broker, but their confirmation is lost:
  // each one's result is a STORAGE_UNAVAILABLE error (ambiguous) while the broker holds it.
  void lose_confirms(int messages) {
    std::lock_guard lock(m_state->mutex);
    m_state->lost_confirms = messages;
  }

  // Every call so far, in order.
  [[nodiscard]] std::vector<QueueCall> calls() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->calls;
  }
  [[nodiscard]] size_t count(const std::string &op) const {
    auto all = calls();
    return static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [&](const auto &c) { return c.op == op; }));
  }
  // Every message the broker accepted (a lost confirmation's too), in order.
  [[nodiscard]] std::vector<QueuedMessage> published() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->published;
  }
  [[nodiscard]] std::vector<QueuedMessage> ready() const {
    std::lock_guard lock(m_state->mutex);
    return {m_state->ready.begin(), m_state->ready.end()};
  }
  [[nodiscard]] std::vector<QueuedMessage> in_flight() const {
    std::lock_guard lock(m_state->mutex);
    std::vector<QueuedMessage> out;
    for (const auto &[h, m] : m_state->in_flight)
      out.push_back(m);
    return out;
  }
  [[nodiscard]] std::vector<QueuedMessage> delayed() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->delayed;
  }
  [[nodiscard]] std::vector<QueuedMessage> dead() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->dead;
  }
  [[nodiscard]] std::vector<QueuedMessage> acked() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->acked;
  }
  [[nodiscard]] bool ensured() const {
    std::lock_guard lock(m_state->mutex);
    return m_state->ensured;
  }

  // What the broker does by itself: messages received and never settled come back (SQS's
  // visibility timeout, or the AMQP connection closed), counted as received again.
  void return_unacked() {
    std::lock_guard lock(m_state->mutex);
    for (auto &[h, m] : m_state->in_flight)
      m_state->ready.push_back(m);
    m_state->in_flight.clear();
  }
  // Delayed messages become ready (their delay has passed).
  void release_delayed() {
    std::lock_guard lock(m_state->mutex);
    for (auto &m : m_state->delayed)
      m_state->ready.push_back(m);
    m_state->delayed.clear();
  }
  // A copy of a ready or in-flight message delivered once more (at-least-once delivery).
  void duplicate(const std::string &message_id) {
    std::lock_guard lock(m_state->mutex);
    for (const auto &m : m_state->ready)
      if (m.message_id == message_id) return m_state->ready.push_back(m);
    for (const auto &[h, m] : m_state->in_flight)
      if (m.message_id == message_id) return m_state->ready.push_back(m);
  }
  // A message nobody published through lodge (a forged or foreign one), ready now.
  std::string inject(const std::string &body, const std::string &dedup_id = "") {
    std::lock_guard lock(m_state->mutex);
    QueuedMessage m;
    m.message_id = "fake-" + std::to_string(m_state->next_id++);
    m.dedup_id = dedup_id;
    m.body = body;
    m_state->ready.push_back(m);
    return m.message_id;
  }

  Status ensure_queues() override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("ensure_queues", "")) return *e;
    m_state->ensured = true;
    record("ensure_queues", "", true);
    return ok_status();
  }

  [[nodiscard]] std::vector<Result<std::string>> publish(const std::vector<mq::OutMessage> &batch) override {
    std::lock_guard lock(m_state->mutex);
    std::vector<Result<std::string>> out;
    if (auto e = scripted("publish", batch.empty() ? std::string{} : batch.front().dedup_id)) {
      for (size_t i = 0; i < batch.size(); ++i)
        out.emplace_back(*e);
      return out;
    }
    for (const auto &msg : batch) {
      QueuedMessage m;
      m.message_id = "fake-" + std::to_string(m_state->next_id++);
      m.dedup_id = msg.dedup_id;
      m.body = msg.body;
      m_state->published.push_back(m);
      m_state->ready.push_back(m);
      if (m_state->lost_confirms > 0) {
        --m_state->lost_confirms;
        record("publish", msg.dedup_id, false);
        ErrorDetails d;
        d.ambiguous = true;
        out.emplace_back(Error(Errc::storage_unavailable, "the broker's confirmation was lost", d));
        continue;
      }
      record("publish", msg.dedup_id, true);
      out.emplace_back(m.message_id);
    }
    return out;
  }

  [[nodiscard]] Result<std::vector<mq::Delivery>> receive(int max, int64_t /*wait_ms*/) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("receive", "")) return *e;
    std::vector<mq::Delivery> out;
    while (static_cast<int>(out.size()) < max && !m_state->ready.empty()) {
      QueuedMessage m = std::move(m_state->ready.front());
      m_state->ready.pop_front();
      ++m.receive_count;
      std::string handle = "h" + std::to_string(m_state->next_handle++);
      out.push_back({m.body, m.message_id, handle, m.receive_count});
      m_state->in_flight.emplace(handle, std::move(m));
    }
    record("receive", std::to_string(out.size()), true);
    return out;
  }

  Status ack(const mq::Delivery &d) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("ack", d.message_id)) return *e;
    auto m = take(d, "ack");
    if (!m.ok()) return m.error();
    m_state->acked.push_back(std::move(m.value()));
    record("ack", d.message_id, true);
    return ok_status();
  }

  Status delay(const mq::Delivery &d, int64_t delay_ms) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("delay", d.message_id)) return *e;
    auto m = take(d, "delay");
    if (!m.ok()) return m.error();
    m.value().delay_ms = delay_ms;
    m_state->delayed.push_back(std::move(m.value()));
    record("delay", d.message_id, true);
    return ok_status();
  }

  Status dead_letter(const mq::Delivery &d, const std::string &reason) override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("dead_letter", d.message_id)) return *e;
    auto m = take(d, "dead_letter");
    if (!m.ok()) return m.error();
    m.value().dead_reason = reason;
    m_state->dead.push_back(std::move(m.value()));
    record("dead_letter", d.message_id, true);
    return ok_status();
  }

  [[nodiscard]] Result<mq::QueueCounts> counts() override {
    std::lock_guard lock(m_state->mutex);
    if (auto e = scripted("counts", "")) return *e;
    record("counts", "", true);
    mq::QueueCounts c;
    c.ready = static_cast<int64_t>(m_state->ready.size());
    c.delayed = static_cast<int64_t>(m_state->in_flight.size() + m_state->delayed.size());
    c.dead = static_cast<int64_t>(m_state->dead.size());
    return c;
  }

  [[nodiscard]] const mq::QueueUrl &url() const override { return m_url; }

private:
  FakeQueue(std::shared_ptr<State> s, mq::QueueUrl url) : m_state(std::move(s)), m_url(std::move(url)) {}

  void record(const std::string &op, const std::string &detail, bool ok) {
    m_state->calls.push_back({op, detail, ok});
  }
  std::optional<Error> scripted(const std::string &op, const std::string &detail) {
    for (auto it = m_state->failures.begin(); it != m_state->failures.end(); ++it) {
      if (it->op != op) continue;
      Error e = it->error;
      if (it->times > 0 && --it->times == 0) m_state->failures.erase(it);
      record(op, detail, false);
      return e;
    }
    return std::nullopt;
  }
  // The in-flight message a delivery names; a handle already settled (or returned to the
  // queue since) is NOT_FOUND, as a stale receipt handle or delivery tag is.
  Result<QueuedMessage> take(const mq::Delivery &d, const std::string &op) {
    auto it = m_state->in_flight.find(d.handle);
    if (it == m_state->in_flight.end()) {
      record(op, d.message_id, false);
      return Error(Errc::not_found, "no message in flight with handle " + d.handle);
    }
    QueuedMessage m = std::move(it->second);
    m_state->in_flight.erase(it);
    return m;
  }

  std::shared_ptr<State> m_state;
  mq::QueueUrl m_url;
};

} // namespace lodge::test
