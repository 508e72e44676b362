#pragma once
// Outbox + MQ: the relay publishes what the ledger's outbox holds (cleanup events when the
// ledger's cleanup runs through a queue, upload events for whatever runs after an upload)
// and records each as sent only after the broker confirmed it; the consumer runs a cleanup
// event's task under its lease, exactly as sweep would, and acknowledges the message only
// after the task's end is committed. Both are at-least-once: every step re-checks the
// ledger, so a message delivered twice, or published twice, changes nothing the second time.

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/store/store.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

// A cleanup event's message body: {"type":"cleanup","ledger":UUID,"task_id":N,"record_id":N,"key":K}.
[[nodiscard]] std::string cleanup_message(const std::string &ledger_uuid, const ledger::TaskRecord &t);
// An upload event's message body (schema 1, documented in man/lodge.1 "UPLOAD EVENTS"):
// {"schema":1,"id":"UUID:event:N","type":"file.active","ledger":UUID,"record_id":N,"owner",
//  "prefix","path","key","size","sha256","media_type","content_type","metadata":{},"tags":{},
//  "created_at","activated_at","deleted_at","expires_at","occurred_at"} (times RFC 3339 UTC,
// null when not set).
[[nodiscard]] std::string upload_event_message(const std::string &ledger_uuid, const ledger::UploadEvent &e);
// The event's stable id, a consumer's de-duplication key.
[[nodiscard]] std::string upload_event_id(const std::string &ledger_uuid, int64_t event_id);

// Stops a --follow loop (the CLI's interruption), and the wait between polls.
struct Stopper {
  std::function<bool()> stopped = [] { return false; };
  // Waits up to `ms` (returns early once stopped). Default: short sleeps polling `stopped`.
  std::function<void(int64_t)> wait;
};

struct RelayOptions {
  mq::MessageQueue *cleanup = nullptr; // the ledger's cleanup runs through this queue (queue mode)
  mq::MessageQueue *events = nullptr;  // upload events go here
  std::string ledger_uuid;
  int batch = 100;            // events per ledger read and per publish (SQS sends 10 per request)
  int64_t limit = 0;          // most events per run; 0: no limit
  int64_t max_runtime_ms = 0; // 0: no limit
  bool follow = false;        // keep polling until stopped or max_runtime
  int64_t poll_ms = 5'000;    // --follow: the wait when nothing was due
  Stopper stop;
};

struct RelaySummary {
  int64_t cleanup_published = 0, cleanup_marked = 0;
  int64_t events_published = 0, events_marked = 0;
  int64_t failed = 0; // publishes the broker did not confirm (sent again next time)
  std::vector<std::string> errors;
};

[[nodiscard]] RelaySummary relay(ledger::OutboxLedger &l, const RelayOptions &o, const util::Clock &clock);

// The consumer's ledger roles: the delivery's claim (outbox), the task's run (tasks, reads).
struct ConsumeLedger {
  ledger::OutboxLedger &outbox;
  ledger::TaskLedger &tasks;
  ledger::LedgerReports &reads;
  ConsumeLedger(ledger::Ledger &l) : outbox(l), tasks(l), reads(l) {} // NOLINT(google-explicit-constructor)
  ConsumeLedger(ledger::OutboxLedger &o, ledger::TaskLedger &t, ledger::LedgerReports &r)
      : outbox(o), tasks(t), reads(r) {}
};

struct ConsumeOptions {
  mq::MessageQueue *queue = nullptr;
  std::string ledger_uuid;
  std::string worker_id;
  int64_t lease_ms = 120'000;
  CleanupSettings cleanup;
  int batch = 10;             // deliveries per receive
  int64_t max_messages = 0;   // 0: no limit
  int64_t max_runtime_ms = 0; // 0: no limit
  bool follow = false;        // keep receiving until stopped or max_runtime / max_messages
  int64_t wait_ms = 1'000;    // how long one receive waits for a first message
  Stopper stop;
};

// What the tasks came to is counted as sweep counts them (the CleanupTally).
struct ConsumeSummary : CleanupTally {
  int64_t received = 0;
  int64_t duplicates = 0; // nothing owed: the task had ended or waits as a new event (acknowledged)
  int64_t delayed = 0;    // handed back for later: a live lease, a retry's back-off
  int64_t rejected =
      0; // not a cleanup event of this ledger, or not matching its task: dead-lettered, nothing deleted
  std::vector<std::string> errors;
};

[[nodiscard]] ConsumeSummary consume(ConsumeLedger l, store::ObjectStore &s, const ConsumeOptions &o,
                                     const util::Clock &clock);

} // namespace lodge::ops
