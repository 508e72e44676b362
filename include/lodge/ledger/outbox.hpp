#pragma once
// The outbox: what the ledger hands a message queue, and what it records of the queue's
// answers. Two kinds of event leave through it:
//  - cleanup events (cleanup.via = queue): the cleanup task row IS the outbox event. It is
//    written with the UPLOADING row (reserve), its not-before is the task's next_retry_at
//    (deadline + grace), confirm cancels it (IGNORED) in the transaction that activates the
//    row, and every transition that makes a task PENDING again (a soft delete, a repair, a
//    postponement, `lodge retry`) makes it a new, unsent event. `lodge relay` publishes the
//    due, unsent ones and records each as sent (sent_at, message_id) only after the broker
//    confirmed it; `lodge consume` claims the task under its lease (the same fencing sweep
//    uses) before deciding and deleting.
//  - upload events (file.active, file.deleted, file.failed): an `outbox_event` row written
//    in the same transaction as the transition it reports, for the event types recorded in
//    the ledger (a database trigger writes it, whichever code path made the transition).
// Both are at-least-once: a relay that dies between the broker's confirmation and
// mark_*_sent publishes again; consumers de-duplicate (cleanup: the task's state; upload
// events: the event id).

#include <cstdint>
#include <lodge/ledger/records.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::ledger {

// Who runs the cleanup tasks' deletes: sweep claiming them from the task table (tasks, the
// default), or consumers of a message queue the relay publishes them to (queue).
// Stored in ledger_meta ('cleanup_via'); absent means tasks.
enum class CleanupVia { tasks, queue };
[[nodiscard]] const char *to_string(CleanupVia v);
[[nodiscard]] std::optional<CleanupVia> parse_cleanup_via(std::string_view s);

// The upload event types. Stored and sent as "file.active", "file.deleted", "file.failed".
//  file.active: a row became ACTIVE (confirm, or a reserve that shares another row's object).
//  file.deleted: an ACTIVE row was soft-deleted (delete, replace, prune, expiry, missing).
//  file.failed: a row became UPLOAD_FAILED (its upload failed, repair, an abandoned upload).
enum class EventType { file_active, file_deleted, file_failed };
inline constexpr EventType k_event_types[] = {EventType::file_active, EventType::file_deleted,
                                              EventType::file_failed};
[[nodiscard]] const char *to_string(EventType t);
[[nodiscard]] std::optional<EventType> parse_event_type(std::string_view s);

// What the ledger records of the outbox (ledger_meta 'cleanup_via' and 'event_types').
struct OutboxSettings {
  CleanupVia cleanup_via = CleanupVia::tasks;
  std::vector<EventType> event_types; // in k_event_types order, no repeats; empty: none
  bool operator==(const OutboxSettings &) const = default;
};

// in_flight: cleanup_via would change while a cleanup event is sent and its task has not
// ended (PENDING, RETRY or PROCESSING with sent_at set): refused, nothing written.
enum class SetOutboxOutcome { set, in_flight };

// One upload event, with its row as it is now (a row's path, key, size, digest, type and
// options never change once reserved).
struct UploadEvent {
  int64_t id = 0; // outbox_event.id: with the ledger's uuid, the event's stable id
  EventType type = EventType::file_active;
  int64_t occurred_at = 0; // wall ms: the transition's time (the row's updated_at then)
  FileRecord row;
};

// The broker's confirmation of one published message.
struct SentMark {
  int64_t id = 0;         // the task's id, or the upload event's id
  std::string message_id; // the broker's id for the message ("" when it gives none)
};

// What a consumer's delivery of a cleanup event finds in the ledger.
//  claimed: the task was due (PENDING or RETRY due, or PROCESSING under an expired lease)
//           and is now PROCESSING under a new lease_version: decide and run it.
//  held:    another worker's lease is live: deliver again after `retry_at` (its end).
//  not_due: the task's event is sent and it waits for its next_retry_at (a retry's
//           back-off): deliver again at `retry_at`.
//  done:    nothing is owed for this message: the task ended (SUCCESS, IGNORED, FAILED), or
//           it waits as a new, unsent event the relay will publish when due, or there is no
//           such task. Acknowledge it; nothing is deleted.
enum class EventClaimKind { claimed, held, not_due, done };
struct EventClaim {
  EventClaimKind kind = EventClaimKind::done;
  std::optional<TaskRecord> task; // claimed: the task under its new lease; done: as found (if any)
  int64_t retry_at = 0;           // held, not_due
};

// The outbox's backlog for status and --prometheus.
struct OutboxCounts {
  int64_t cleanup_due_unsent = 0;          // the relay's backlog: due, unsent cleanup events
  int64_t cleanup_in_flight = 0;           // sent, their task not ended (PENDING, RETRY, PROCESSING)
  int64_t cleanup_dead = 0;                // sent and dead-lettered (FAILED with sent_at set)
  int64_t events_unsent = 0;               // upload events not yet confirmed by the broker
  std::optional<int64_t> oldest_unsent_at; // the oldest due cleanup event's or upload event's time
};

// The relay's and the consumer's view of the ledger (ops::relay, ops::consume, init, status).
class OutboxLedger {
public:
  virtual ~OutboxLedger() = default;
  [[nodiscard]] virtual OutboxSettings outbox_settings() = 0;
  // One transaction: records `s` (event types take effect for transitions committed after
  // it). in_flight (nothing written) when s.cleanup_via differs from the recorded one while
  // a cleanup event is in flight.
  [[nodiscard]] virtual SetOutboxOutcome set_outbox_settings(const OutboxSettings &s) = 0;
  // The relay's batch: cleanup tasks PENDING or RETRY with next_retry_at <= now, never sent
  // (sent_at NULL), a first delete (verify_pass < k_verify_due, not tag_owed), by id.
  [[nodiscard]] virtual std::vector<TaskRecord> unsent_due_tasks(int64_t now, int limit) = 0;
  // One transaction: each task still PENDING or RETRY and unsent gets sent_at = now and the
  // message id; a task that moved on meanwhile is left (its message finds it `done`).
  // Returns how many were marked.
  virtual int64_t mark_tasks_sent(const std::vector<SentMark> &marks, int64_t now) = 0;
  // A delivery of task `task_id`'s event: claims it as claim_task does (a new lease_version,
  // `worker`, lease until now + lease_ms) when it is due, whether or not marked sent (the
  // relay may have died before marking it); otherwise says why not.
  [[nodiscard]] virtual EventClaim claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                                   int64_t lease_ms) = 0;
  // Upload events not yet sent, oldest (lowest id) first, each with its row.
  [[nodiscard]] virtual std::vector<UploadEvent> unsent_events(int limit) = 0;
  // One transaction: sent_at = now and the message id on each event still unsent.
  virtual int64_t mark_events_sent(const std::vector<SentMark> &marks, int64_t now) = 0;
  [[nodiscard]] virtual OutboxCounts outbox_counts(int64_t now) = 0;
  // Sweep on a queue-mode ledger: claim_due (the same due rule, order and lease) restricted
  // to what the queue does not carry: verify passes (verify_pass = k_verify_due) and tasks
  // owing the committed tag (tag_owed). Every other task's delete goes relay -> consume.
  [[nodiscard]] virtual std::vector<TaskRecord>
  claim_due_not_queued(int64_t now, int limit, const std::string &worker, int64_t lease_ms) = 0;
};

} // namespace lodge::ledger
