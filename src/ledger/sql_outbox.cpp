// The outbox (ledger/outbox.hpp) over SQL: the relay's and the consumer's transactions. The
// cleanup task row is the cleanup event (its sent_at and message_id); upload events are
// outbox_event rows the schema's triggers write. Every write is one Conn::write transaction
// whose conditional UPDATEs name the state they expect.
#include "sql_ledger.hpp"

#include <algorithm>

namespace lodge::ledger {

namespace {
constexpr const char *k_cleanup_via_key = "cleanup_via";
constexpr const char *k_event_types_key = "event_types";

// The relay's: a cleanup task due, never sent, a first delete (the queue does not carry
// verify passes or owed tags: sweep does those). ?1 = now.
constexpr const char *k_relayable =
    "status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1 AND sent_at IS NULL"
    " AND verify_pass < 2 AND tag_owed = 0";
// A cleanup event in flight: sent, its task not ended. The statuses as cleanup_task_due's
// condition names them, so that SQLite reads that index (of the live tasks only).
constexpr const char *k_in_flight =
    "sent_at IS NOT NULL AND (status IN ('PENDING', 'RETRY') OR status = 'PROCESSING')";

std::string joined(const std::vector<EventType> &types) {
  std::string out;
  for (auto t : k_event_types) // k_event_types' order, each once
    if (std::find(types.begin(), types.end(), t) != types.end()) {
      if (!out.empty()) out += ',';
      out += to_string(t);
    }
  return out;
}

EventType stored_type(const std::string &text) {
  auto t = parse_event_type(text);
  if (!t) throw LodgeError(Errc::ledger_unusable, "the ledger holds an unknown event type '" + text + "'");
  return *t;
}
} // namespace

OutboxSettings SqlLedger::outbox_settings() {
  return m_c->read([&] {
    OutboxSettings s;
    if (auto via = meta_text(k_cleanup_via_key)) {
      auto v = parse_cleanup_via(*via);
      if (!v)
        throw LodgeError(Errc::ledger_unusable, "the ledger holds an unknown cleanup_via '" + *via + "'");
      s.cleanup_via = *v;
    }
    const std::string types = meta_text(k_event_types_key).value_or("");
    for (size_t at = 0; at < types.size();) {
      size_t end = std::min(types.find(',', at), types.size());
      auto t = stored_type(types.substr(at, end - at));
      if (std::find(s.event_types.begin(), s.event_types.end(), t) == s.event_types.end())
        s.event_types.push_back(t);
      at = end + 1;
    }
    std::sort(s.event_types.begin(), s.event_types.end());
    return s;
  });
}

SetOutboxOutcome SqlLedger::set_outbox_settings(const OutboxSettings &s) {
  return m_c->write([&](sql::Tx &tx) {
    lock_meta(); // a concurrent switch reads what this one wrote
    const auto via =
        parse_cleanup_via(meta_text(k_cleanup_via_key).value_or("tasks")).value_or(CleanupVia::tasks);
    if (via != s.cleanup_via) {
      // A sent event whose task has not ended would be left to whoever runs the other way.
      auto st = q(std::string("SELECT count(*) FROM cleanup_task WHERE ") + k_in_flight);
      if (st.step() && st.col_int(0) > 0) return SetOutboxOutcome::in_flight;
    }
    set_meta(k_cleanup_via_key, to_string(s.cleanup_via));
    set_meta(k_event_types_key, joined(s.event_types));
    tx.commit();
    return SetOutboxOutcome::set;
  });
}

std::vector<TaskRecord> SqlLedger::unsent_due_tasks(int64_t now, int limit) {
  auto st = q(std::string("SELECT ") + k_task_cols + " FROM cleanup_task WHERE " + k_relayable +
              " ORDER BY id LIMIT ?2");
  st.bind(1, now).bind(2, static_cast<int64_t>(limit));
  std::vector<TaskRecord> out;
  while (st.step())
    out.push_back(read_task(st));
  return out;
}

int64_t SqlLedger::mark_tasks_sent(const std::vector<SentMark> &marks, int64_t now) {
  if (marks.empty()) return 0;
  return m_c->write([&](sql::Tx &tx) {
    // A task claimed or ended meanwhile (a fast consumer, a confirm) is left as it is: its
    // message finds it so.
    auto st = q("UPDATE cleanup_task SET sent_at = ?2, message_id = ?3"
                " WHERE id = ?1 AND status IN ('PENDING', 'RETRY') AND sent_at IS NULL");
    int64_t n = 0;
    for (const auto &m : marks) {
      st.reset();
      n += st.bind(1, m.id).bind(2, now).bind(3, m.message_id).exec();
    }
    tx.commit();
    return n;
  });
}

EventClaim SqlLedger::claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                      int64_t lease_ms) {
  return m_c->write([&](sql::Tx &tx) {
    EventClaim out;
    // claim_task's claim, whether or not the relay lived to mark the task sent. A verify
    // pass is sweep's: the message's delete is done (a redelivery after the consumer died
    // between its commit and its ack).
    auto upd = q("UPDATE cleanup_task SET status = 'PROCESSING', lease_owner = ?2, lease_until = ?3,"
                 " lease_version = lease_version + 1, updated_at = ?1 WHERE id = ?4 AND verify_pass < ?5 AND"
                 " ((status IN ('PENDING', 'RETRY') AND next_retry_at <= ?1)"
                 " OR (status = 'PROCESSING' AND lease_until < ?1))");
    const bool claimed = upd.bind(1, now)
                             .bind(2, worker)
                             .bind(3, now + lease_ms)
                             .bind(4, task_id)
                             .bind(5, k_verify_due)
                             .exec() == 1;
    out.task = task_by_id(task_id);
    if (claimed) {
      out.kind = EventClaimKind::claimed;
      tx.commit();
      return out;
    }
    if (!out.task) return out; // done: no such task
    const TaskRecord &t = *out.task;
    if (t.verify_pass >= k_verify_due) return out; // done: the delete was; the verify is sweep's
    if (t.status == TaskStatus::processing) {
      out.kind = EventClaimKind::held;
      out.retry_at = t.lease_until.value_or(now);
    } else if ((t.status == TaskStatus::pending || t.status == TaskStatus::retry) && t.sent_at) {
      out.kind = EventClaimKind::not_due;
      out.retry_at = t.next_retry_at;
    }
    // Otherwise done: ended, or a new unsent event the relay publishes when it is due.
    return out;
  });
}

std::vector<UploadEvent> SqlLedger::unsent_events(int limit) {
  // The events' own columns renamed, so that k_file_cols names file_upload's alone.
  auto st = q(std::string("SELECT ") + k_file_cols +
              ", e.event_id, e.event_type, e.occurred_at FROM (SELECT id AS event_id, event_type, record_id,"
              " occurred_at FROM outbox_event WHERE sent_at IS NULL ORDER BY id LIMIT ?1) e"
              " JOIN file_upload ON file_upload.id = e.record_id ORDER BY e.event_id");
  st.bind(1, static_cast<int64_t>(limit));
  std::vector<UploadEvent> out;
  while (st.step()) {
    UploadEvent e;
    e.row = read_file(st);
    e.id = st.col_int(k_file_col_count);
    e.type = stored_type(st.col_text(k_file_col_count + 1));
    e.occurred_at = st.col_int(k_file_col_count + 2);
    out.push_back(std::move(e));
  }
  return out;
}

int64_t SqlLedger::mark_events_sent(const std::vector<SentMark> &marks, int64_t now) {
  if (marks.empty()) return 0;
  return m_c->write([&](sql::Tx &tx) {
    auto st = q("UPDATE outbox_event SET sent_at = ?2, message_id = ?3 WHERE id = ?1 AND sent_at IS NULL");
    int64_t n = 0;
    for (const auto &m : marks) {
      st.reset();
      n += st.bind(1, m.id).bind(2, now).bind(3, m.message_id).exec();
    }
    tx.commit();
    return n;
  });
}

OutboxCounts SqlLedger::outbox_counts(int64_t now) {
  return m_c->read([&] {
    OutboxCounts c;
    auto oldest = [&](std::optional<int64_t> at) {
      if (at) c.oldest_unsent_at = std::min(c.oldest_unsent_at.value_or(*at), *at);
    };
    auto due = q(std::string("SELECT count(*), min(next_retry_at) FROM cleanup_task WHERE ") + k_relayable);
    due.bind(1, now);
    if (due.step()) {
      c.cleanup_due_unsent = due.col_int(0);
      oldest(due.col_opt_int(1));
    }
    auto sent = q(std::string("SELECT count(*) FILTER (WHERE ") + k_in_flight +
                  "), count(*) FILTER (WHERE status = 'FAILED') FROM cleanup_task WHERE sent_at IS NOT NULL");
    if (sent.step()) {
      c.cleanup_in_flight = sent.col_int(0);
      c.cleanup_dead = sent.col_int(1);
    }
    auto events = q("SELECT count(*), min(occurred_at) FROM outbox_event WHERE sent_at IS NULL");
    if (events.step()) {
      c.events_unsent = events.col_int(0);
      oldest(events.col_opt_int(1));
    }
    return c;
  });
}

} // namespace lodge::ledger
