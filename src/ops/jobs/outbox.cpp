// The relay: the outbox's due events to the broker, each marked sent only once confirmed.
#include <chrono>
#include <lodge/failpoint.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <nlohmann/json.hpp>
#include <thread>

namespace lodge::ops {
namespace {

nlohmann::json time_or_null(std::optional<int64_t> ms) {
  if (!ms) return nullptr;
  return util::format_rfc3339_ms(*ms);
}

} // namespace

std::string cleanup_message(const std::string &ledger_uuid, const ledger::TaskRecord &t) {
  nlohmann::json j{{"type", "cleanup"},
                   {"ledger", ledger_uuid},
                   {"task_id", t.id},
                   {"record_id", t.record_id},
                   {"key", t.object_key}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string upload_event_id(const std::string &ledger_uuid, int64_t event_id) {
  return ledger_uuid + ":event:" + std::to_string(event_id);
}

std::string upload_event_message(const std::string &ledger_uuid, const ledger::UploadEvent &e) {
  const auto &r = e.row;
  store::ObjectOptions opts;
  if (!r.object_options.empty()) {
    try {
      opts = store::from_json(r.object_options);
    } catch (const std::exception &) {
      // A row's options were checked when it was reserved; an unreadable one sends none.
    }
  }
  nlohmann::json j{{"schema", 1},
                   {"id", upload_event_id(ledger_uuid, e.id)},
                   {"type", ledger::to_string(e.type)},
                   {"ledger", ledger_uuid},
                   {"record_id", r.id},
                   {"owner", r.owner_id},
                   {"prefix", r.run_prefix},
                   {"path", r.relative_path.empty() ? r.original_name : r.relative_path},
                   {"key", r.object_key},
                   {"size", r.size},
                   {"sha256", r.sha256},
                   {"media_type", r.media_type},
                   {"content_type", r.object_content_type()},
                   {"metadata", opts.metadata},
                   {"tags", opts.tags},
                   {"status", ledger::to_string(r.upload_status)},
                   {"created_at", time_or_null(r.created_at)},
                   {"activated_at", time_or_null(r.activated_at)},
                   {"deleted_at", time_or_null(r.deleted_at)},
                   {"expires_at", time_or_null(r.expires_at)},
                   {"occurred_at", time_or_null(e.occurred_at)}};
  if (r.failure_reason) j["failure_reason"] = *r.failure_reason;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// Publishes `msgs`; the confirmed ones' marks (ids[i] for msgs[i]), failures counted.
std::vector<ledger::SentMark> publish(mq::MessageQueue &q, const std::vector<mq::OutMessage> &msgs,
                                      const std::vector<int64_t> &ids, RelayReport &sum, const char *what) {
  std::vector<ledger::SentMark> marks;
  auto results = q.publish(msgs);
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i < results.size() && results[i]) {
      marks.push_back({ids[i], results[i].value()});
      continue;
    }
    ++sum.failed;
    std::string why = i < results.size() ? results[i].error().message : "no answer from the broker";
    if (sum.errors.size() < 20)
      sum.errors.push_back(std::string(what) + " " + std::to_string(ids[i]) + ": " + why);
    util::log::warn(std::string("relay: ") + what + " " + std::to_string(ids[i]) + " not published: " + why);
  }
  return marks;
}

int64_t relay_cleanup(ledger::OutboxLedger &l, const RelayOptions &o, int n, const util::Clock &clock,
                      RelayReport &sum) {
  auto tasks = l.unsent_due_tasks(clock.now_ms(), n);
  if (tasks.empty()) return 0;
  std::vector<mq::OutMessage> msgs;
  std::vector<int64_t> ids;
  for (const auto &t : tasks) {
    msgs.push_back({o.ledger_uuid + ":task:" + std::to_string(t.id) + ":" + std::to_string(t.updated_at),
                    cleanup_message(o.ledger_uuid, t)});
    ids.push_back(t.id);
  }
  auto marks = publish(*o.cleanup, msgs, ids, sum, "task");
  sum.cleanup_published += static_cast<int64_t>(marks.size());
  // A relay that dies here published events it never marked: the next run sends them again,
  // and their consumers find the second delivery owes nothing.
  if (failpoint::hit("relay.after_publish"))
    throw LodgeError(Errc::internal,
                     "injected failure after publishing " + std::to_string(marks.size()) + " cleanup events");
  if (!marks.empty()) sum.cleanup_marked += l.mark_tasks_sent(marks, clock.now_ms());
  return static_cast<int64_t>(tasks.size());
}

int64_t relay_events(ledger::OutboxLedger &l, const RelayOptions &o, int n, const util::Clock &clock,
                     RelayReport &sum) {
  auto events = l.unsent_events(n);
  if (events.empty()) return 0;
  std::vector<mq::OutMessage> msgs;
  std::vector<int64_t> ids;
  for (const auto &e : events) {
    msgs.push_back({upload_event_id(o.ledger_uuid, e.id), upload_event_message(o.ledger_uuid, e)});
    ids.push_back(e.id);
  }
  auto marks = publish(*o.events, msgs, ids, sum, "event");
  sum.events_published += static_cast<int64_t>(marks.size());
  if (failpoint::hit("relay.after_publish"))
    throw LodgeError(Errc::internal,
                     "injected failure after publishing " + std::to_string(marks.size()) + " upload events");
  if (!marks.empty()) sum.events_marked += l.mark_events_sent(marks, clock.now_ms());
  return static_cast<int64_t>(events.size());
}

void wait_ms(const Stopper &s, int64_t ms) {
  if (s.wait) {
    s.wait(ms);
    return;
  }
  int64_t until = util::steady_ms() + ms;
  while (!s.stopped() && util::steady_ms() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(100, until - util::steady_ms())));
}

// The work: batches published until nothing is due (with --follow: until stopped), the limit
// or the run time.
RelayReport publish_due(ledger::OutboxLedger &l, const RelayOptions &o, const util::Clock &clock) {
  RelayReport sum;
  auto settings = l.outbox_settings();
  // Cleanup events are the queue's only while the ledger says so: a task-table ledger's
  // tasks are sweep's, and publishing them would only race it.
  bool cleanup = o.cleanup != nullptr && settings.cleanup_via == ledger::CleanupVia::queue;
  bool events = o.events != nullptr;
  int64_t started = util::steady_ms();
  int64_t sent = 0;
  for (;;) {
    if (o.stop.stopped()) break;
    if (o.max_runtime_ms > 0 && util::steady_ms() - started >= o.max_runtime_ms) break;
    int64_t room = o.limit > 0 ? o.limit - sent : o.batch;
    if (room <= 0) break;
    int n = static_cast<int>(std::min<int64_t>(o.batch, room));
    int64_t got = 0;
    int64_t failed_before = sum.failed;
    if (cleanup) got += relay_cleanup(l, o, n, clock, sum);
    if (events) got += relay_events(l, o, n, clock, sum);
    sent += got;
    // Nothing confirmed in a whole batch: the broker is down; stop rather than spin.
    if (got > 0 && sum.failed - failed_before == got) break;
    if (got > 0) continue;
    if (!o.follow) break;
    int64_t left = o.max_runtime_ms > 0 ? o.max_runtime_ms - (util::steady_ms() - started) : o.poll_ms;
    wait_ms(o.stop, std::max<int64_t>(0, std::min(o.poll_ms, left)));
  }
  return sum;
}

} // namespace

RelayReport relay(ledger::OutboxLedger &l, ledger::LedgerMeta &log, const RelayOptions &o,
                  const util::Clock &clock) {
  const int64_t started = clock.now_ms();
  auto sum = publish_due(l, o, clock);
  record_run(log, "relay", o.worker_id, started, sum.failed == 0, job_counts(sum), clock);
  return sum;
}

nlohmann::json job_counts(const RelayReport &r) {
  return {{"cleanup_published", r.cleanup_published},
          {"cleanup_marked", r.cleanup_marked},
          {"events_published", r.events_published},
          {"events_marked", r.events_marked},
          {"failed", r.failed}};
}

int exit_status(const RelayReport &r) {
  if (r.failed > 0 && r.cleanup_published + r.events_published == 0)
    return errc_info(Errc::storage_unavailable).exit_code;
  return r.failed > 0 ? items_failed_status() : errc_info(Errc::ok).exit_code;
}

} // namespace lodge::ops
