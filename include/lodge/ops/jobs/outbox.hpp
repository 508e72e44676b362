#pragma once
// Outbox + MQ: the relay publishes what the ledger's outbox holds (cleanup events when the
// ledger's cleanup runs through a queue, upload events for whatever runs after an upload)
// and records each as sent only after the broker confirmed it; the consumer runs a cleanup
// event's task under its lease, exactly as sweep would, and acknowledges the message only
// after the task's end is committed. Both are at-least-once: every step re-checks the
// ledger, so a message delivered twice, or published twice, changes nothing the second time.
// Each records its run in the job log (ops/jobs/job_run.hpp). What the ledger records of its
// outbox (the cleanup mode, the upload event types) is set here too, for `lodge init`.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/store/store.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

// A cleanup event's message body: {"type":"cleanup","ledger":UUID,"task_id":N,"record_id":N,"key":K}.
[[nodiscard]] std::string cleanup_message(const std::string &ledger_uuid, const ledger::TaskRecord &t);
// An upload event's message body (schema 1, documented in lodge-events(7)):
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
  std::string worker_id; // in the job log
};

struct RelayReport {
  int64_t cleanup_published = 0, cleanup_marked = 0;
  int64_t events_published = 0, events_marked = 0;
  int64_t failed = 0; // publishes the broker did not confirm (sent again next time)
  std::vector<std::string> errors;
};

// Publishes what is due, then records the run in `log`.
[[nodiscard]] RelayReport relay(ledger::OutboxLedger &l, ledger::LedgerMeta &log, const RelayOptions &o,
                                const util::Clock &clock);
// What a run records in the job log, as `--json` shows it.
[[nodiscard]] nlohmann::json job_counts(const RelayReport &r);
// The run's exit status: STORAGE_UNAVAILABLE's when nothing it sent was confirmed, some items
// failed when anything was not, else 0.
[[nodiscard]] int exit_status(const RelayReport &r);

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
struct ConsumeReport : CleanupTally {
  int64_t received = 0;
  int64_t duplicates = 0; // nothing owed: the task had ended or waits as a new event (acknowledged)
  int64_t delayed = 0;    // handed back for later: a live lease, a retry's back-off
  int64_t rejected =
      0; // not a cleanup event of this ledger, or not matching its task: dead-lettered, nothing deleted
  std::vector<std::string> errors;
};

// Runs what the queue delivers, then records the run in `log` as worker_id's.
[[nodiscard]] ConsumeReport consume(ledger::ConsumeLedger &l, ledger::LedgerMeta &log, store::ObjectStore &s,
                                    const ConsumeOptions &o, const util::Clock &clock);
// What a run records in the job log, as `--json` shows it.
[[nodiscard]] nlohmann::json job_counts(const ConsumeReport &r);
// The run's exit status: STORAGE_UNAVAILABLE's when every task it ran failed on a store that
// gave no answer (nothing done), some items failed when a task was dead-lettered or a message
// rejected, else 0.
[[nodiscard]] int exit_status(const ConsumeReport &r);

// The queues of the outbox: cleanup.queue (the ledger runs its cleanup through it) and
// events.queue (the upload events the ledger records go there).
enum class OutboxQueue { cleanup, events };

// What the configuration says of the outbox that ledger `location` does not record (the file
// edited, `lodge init` not run since): one warning's text each. The ledger's record runs.
[[nodiscard]] std::vector<std::string> outbox_drift(const ledger::OutboxSettings &recorded,
                                                    const config::OutboxConfig &c,
                                                    const std::string &location);
// The URL of the queue `which` a relay opens: "" when the ledger's record needs none;
// CONFIG_INVALID when it needs one the configuration names not.
[[nodiscard]] std::string relay_queue(const ledger::OutboxSettings &recorded, const config::OutboxConfig &c,
                                      OutboxQueue which);
// consume's queue (cleanup.queue); USAGE when ledger `location` runs its cleanup from its task
// table, CONFIG_INVALID when the configuration names no queue.
[[nodiscard]] std::string consume_queue(const ledger::OutboxSettings &recorded, const config::OutboxConfig &c,
                                        const std::string &location);

// `lodge init`'s outbox: the cleanup mode and upload event types from --cleanup-via and
// --events (their text, "" when not given), else the configuration's cleanup.via and
// events.types, over what the ledger records now (USAGE for a value that is none of them).
// Each queue they rely on is handed to `ensure` (its URL, its key) before anything is
// recorded: a relay's first publish finds it. Returns what the ledger records then.
// IN_PROGRESS, recording nothing, while cleanup events sent to the queue are not consumed
// yet: switching then would strand them.
[[nodiscard]] ledger::OutboxSettings
init_outbox(ledger::OutboxLedger &l, const config::OutboxConfig &c, const std::string &via_flag,
            const std::string &events_flag,
            const std::function<void(const std::string &, const char *)> &ensure, const util::Clock &clock);

} // namespace lodge::ops
