// The consumer: a cleanup event's task run under its lease, as sweep runs it; the message
// acknowledged only after the task's end is committed.
#include <lodge/failpoint.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <nlohmann/json.hpp>

namespace lodge::ops {
namespace {

struct CleanupEvent {
  int64_t task_id = 0;
  int64_t record_id = 0;
  std::string key;
};

// The event a message carries, or why it is not a cleanup event of this ledger.
Result<CleanupEvent> parse_event(const std::string &body, const std::string &ledger_uuid) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const std::exception &) {
    return Error(Errc::usage, "not JSON");
  }
  if (!j.is_object() || j.value("type", "") != "cleanup") return Error(Errc::usage, "not a cleanup event");
  if (!j.contains("ledger") || !j["ledger"].is_string() || j["ledger"] != ledger_uuid)
    return Error(Errc::usage, "for another ledger (" + j.value("ledger", std::string("none")) + ")");
  CleanupEvent e;
  if (!j.contains("task_id") || !j["task_id"].is_number_integer() || !j.contains("record_id") ||
      !j["record_id"].is_number_integer() || !j.contains("key") || !j["key"].is_string())
    return Error(Errc::usage, "task_id, record_id or key missing");
  e.task_id = j["task_id"].get<int64_t>();
  e.record_id = j["record_id"].get<int64_t>();
  e.key = j["key"].get<std::string>();
  return e;
}

void note_error(ConsumeReport &sum, const std::string &what) {
  if (sum.errors.size() < 20) sum.errors.push_back(what);
}

// The broker's answer to an ack, delay or dead-letter; a failure leaves the message to come
// back (the broker's visibility timeout or the connection's end): harmless, it owes nothing
// or is claimed again.
void check(ConsumeReport &sum, const Status &st, const std::string &what) {
  if (st) return;
  note_error(sum, what + ": " + st.error().message);
  util::log::warn("consume: " + what + ": " + st.error().message);
}

// A claimed task run as sweep runs it; then the message's end: acknowledged, delayed by
// the retry's back-off, or dead-lettered with the task.
void run_task(ledger::ConsumeLedger &l, store::ObjectStore &s, const ConsumeOptions &o,
              const util::Clock &clock, const mq::Delivery &d, const ledger::TaskRecord &task,
              ConsumeReport &sum) {
  auto r = run_claimed_task(l, s, task, o.cleanup, clock);
  sum.add(r);
  std::string id = "task " + std::to_string(task.id);
  if (!r.error.empty()) note_error(sum, id + ": " + r.error);
  // A consumer killed here deleted and committed, but never acknowledged: the message comes
  // back and finds the task ended.
  if (failpoint::hit("consume.before_ack"))
    throw LodgeError(Errc::internal, "injected failure before acknowledging " + id);
  if (r.outcome == CleanupOutcome::retried) {
    // The ledger decided the back-off (RETRY, due at next_retry_at): the broker keeps the
    // message away until then instead of handing it straight back.
    auto t = l.find_task_for(task.record_id);
    int64_t due = t ? t->next_retry_at : clock.now_ms() + o.cleanup.backoff_base_ms;
    check(sum, o.queue->delay(d, std::max<int64_t>(1000, due - clock.now_ms())), "delay of " + id);
    ++sum.delayed;
    return;
  }
  if (r.outcome == CleanupOutcome::dead_lettered) {
    check(sum, o.queue->dead_letter(d, id + ": " + r.error), "dead-letter of " + id);
    return;
  }
  check(sum, o.queue->ack(d), "ack of " + id);
}

void handle(ledger::ConsumeLedger &l, store::ObjectStore &s, const ConsumeOptions &o,
            const util::Clock &clock, const mq::Delivery &d, ConsumeReport &sum) {
  auto ev = parse_event(d.body, o.ledger_uuid);
  if (!ev) {
    // Never deleted on a message's word: set aside where an operator can read it.
    ++sum.rejected;
    std::string why = "message " + d.message_id + " rejected: " + ev.error().message;
    util::log::warn("consume: " + why);
    note_error(sum, why);
    check(sum, o.queue->dead_letter(d, ev.error().message), "dead-letter of message " + d.message_id);
    return;
  }
  // The message names a task; only the ledger's own record of it counts. A message whose
  // task, row or key do not match (forged, or from another deployment) deletes nothing.
  auto known = l.find_task_for(ev->record_id);
  if (!known || known->id != ev->task_id || known->object_key != ev->key) {
    ++sum.rejected;
    std::string why = "message for task " + std::to_string(ev->task_id) + " (" + ev->key +
                      ") rejected: the ledger has no such task at that key";
    util::log::warn("consume: " + why);
    note_error(sum, why);
    check(sum, o.queue->dead_letter(d, "the ledger has no such task at that key"),
          "dead-letter of message " + d.message_id);
    return;
  }
  auto claim = l.claim_sent_task(ev->task_id, clock.now_ms(), o.worker_id, o.lease_ms);
  std::string id = "task " + std::to_string(ev->task_id);
  switch (claim.kind) {
  case ledger::EventClaimKind::claimed:
    run_task(l, s, o, clock, d, *claim.task, sum);
    return;
  case ledger::EventClaimKind::held:
  case ledger::EventClaimKind::not_due:
    // Another worker holds it, or a retry waits for its back-off: back later, not now.
    ++sum.delayed;
    check(sum, o.queue->delay(d, std::max<int64_t>(1000, claim.retry_at - clock.now_ms() + 1000)),
          "delay of " + id);
    return;
  case ledger::EventClaimKind::done:
    ++sum.duplicates;
    check(sum, o.queue->ack(d), "ack of " + id);
    return;
  }
}

// The work: deliveries received and handled until none comes (with --follow: until
// stopped), the most messages or the run time.
ConsumeReport receive_all(ledger::ConsumeLedger &l, store::ObjectStore &s, const ConsumeOptions &o,
                          const util::Clock &clock) {
  ConsumeReport sum;
  if (o.queue == nullptr) throw LodgeError(Errc::internal, "consume: no queue");
  int64_t started = util::steady_ms();
  for (;;) {
    if (o.stop.stopped()) break;
    int64_t elapsed = util::steady_ms() - started;
    if (o.max_runtime_ms > 0 && elapsed >= o.max_runtime_ms) break;
    int64_t room = o.max_messages > 0 ? o.max_messages - sum.received : o.batch;
    if (room <= 0) break;
    int n = static_cast<int>(std::min<int64_t>(o.batch, room));
    int64_t wait = o.wait_ms;
    if (o.max_runtime_ms > 0) wait = std::min(wait, o.max_runtime_ms - elapsed);
    auto got = o.queue->receive(n, std::max<int64_t>(0, wait));
    if (!got) throw LodgeError(got.error());
    for (const auto &d : got.value()) {
      ++sum.received;
      handle(l, s, o, clock, d, sum);
    }
    if (got.value().empty() && !o.follow) break;
  }
  return sum;
}

} // namespace

ConsumeReport consume(ledger::ConsumeLedger &l, ledger::LedgerMeta &log, store::ObjectStore &s,
                      const ConsumeOptions &o, const util::Clock &clock) {
  const int64_t started = clock.now_ms();
  auto sum = receive_all(l, s, o, clock);
  // A retried task is a failure too, though the run goes on: the job log says it failed.
  record_run(log, "consume", o.worker_id, started,
             sum.dead_lettered == 0 && sum.rejected == 0 && sum.retried == 0, job_counts(sum), clock);
  return sum;
}

nlohmann::json job_counts(const ConsumeReport &r) {
  nlohmann::json j{{"received", r.received},     {"deleted", r.deleted},   {"ignored", r.ignored},
                   {"postponed", r.postponed},   {"retried", r.retried},   {"dead_lettered", r.dead_lettered},
                   {"lease_lost", r.lease_lost}, {"kept", r.kept},         {"duplicates", r.duplicates},
                   {"delayed", r.delayed},       {"rejected", r.rejected}, {"unreachable", r.unreachable}};
  j["verify_scheduled"] = r.verify_scheduled;
  return j;
}

int exit_status(const ConsumeReport &r) {
  if (r.received > 0 && r.deleted + r.ignored + r.postponed + r.kept == 0 && r.unreachable > 0 &&
      r.unreachable == r.retried + r.dead_lettered)
    return errc_info(Errc::storage_unavailable).exit_code;
  return r.dead_lettered + r.rejected > 0 ? items_failed_status() : errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
