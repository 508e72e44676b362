// The outbox (ledger/outbox.hpp) over SQL: the relay's and the consumer's transactions.
// Not implemented yet: schema version 11 (the columns, outbox_event and its triggers) comes
// next; until then every outbox call says so.
#include "sql_ledger.hpp"

namespace lodge::ledger {

namespace {
[[noreturn]] void not_yet(const char *what) {
  throw LodgeError(Errc::internal, std::string("the outbox is not implemented yet: ") + what);
}
} // namespace

OutboxSettings SqlLedger::outbox_settings() {
  not_yet("outbox_settings");
}
SetOutboxOutcome SqlLedger::set_outbox_settings(const OutboxSettings & /*s*/) {
  not_yet("set_outbox_settings");
}
std::vector<TaskRecord> SqlLedger::unsent_due_tasks(int64_t /*now*/, int /*limit*/) {
  not_yet("unsent_due_tasks");
}
int64_t SqlLedger::mark_tasks_sent(const std::vector<SentMark> & /*marks*/, int64_t /*now*/) {
  not_yet("mark_tasks_sent");
}
EventClaim SqlLedger::claim_sent_task(int64_t /*task_id*/, int64_t /*now*/, const std::string & /*worker*/,
                                      int64_t /*lease_ms*/) {
  not_yet("claim_sent_task");
}
std::vector<UploadEvent> SqlLedger::unsent_events(int /*limit*/) {
  not_yet("unsent_events");
}
int64_t SqlLedger::mark_events_sent(const std::vector<SentMark> & /*marks*/, int64_t /*now*/) {
  not_yet("mark_events_sent");
}
OutboxCounts SqlLedger::outbox_counts(int64_t /*now*/) {
  not_yet("outbox_counts");
}
std::vector<TaskRecord> SqlLedger::claim_due_not_queued(int64_t /*now*/, int /*limit*/,
                                                        const std::string & /*worker*/, int64_t /*lease_ms*/) {
  not_yet("claim_due_not_queued");
}

} // namespace lodge::ledger
