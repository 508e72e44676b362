// What the ledger records of its outbox (the cleanup mode, the upload event types) against
// the configuration: the queues a run opens, the drift a run warns of, what `lodge init`
// records.
#include <algorithm>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::ops {

std::vector<std::string> outbox_drift(const ledger::OutboxSettings &recorded, const config::OutboxConfig &c,
                                      const std::string &location) {
  std::vector<std::string> out;
  if (c.cleanup_given && c.cleanup_via != ledger::to_string(recorded.cleanup_via))
    out.push_back("the configuration says cleanup.via " + c.cleanup_via + ", but ledger " + location +
                  " runs its cleanup " +
                  (recorded.cleanup_via == ledger::CleanupVia::queue ? "through a queue"
                                                                     : "from its task table (sweep)") +
                  "; `lodge init --cleanup-via " + c.cleanup_via + "` switches it");
  if (c.events_given) {
    std::vector<std::string> names;
    std::string shown;
    for (auto t : recorded.event_types) {
      names.emplace_back(ledger::to_string(t));
      shown += (shown.empty() ? "" : ", ") + names.back();
    }
    auto wanted = c.event_types;
    std::sort(wanted.begin(), wanted.end());
    std::sort(names.begin(), names.end());
    if (wanted != names)
      out.push_back("the configuration's events.types differ from what ledger " + location + " records (" +
                    (shown.empty() ? "none" : shown) + "); `lodge init` records the configuration's");
  }
  return out;
}

std::string relay_queue(const ledger::OutboxSettings &recorded, const config::OutboxConfig &c,
                        OutboxQueue which) {
  if (which == OutboxQueue::cleanup) {
    if (recorded.cleanup_via != ledger::CleanupVia::queue) return "";
    if (c.cleanup_queue.empty())
      throw LodgeError(Errc::config_invalid, "the ledger runs its cleanup through a queue, but the "
                                             "configuration names none (cleanup.queue)");
    return c.cleanup_queue;
  }
  if (recorded.event_types.empty()) return "";
  if (c.events_queue.empty())
    throw LodgeError(Errc::config_invalid, "the ledger records upload events, but the "
                                           "configuration names no queue for them (events.queue)");
  return c.events_queue;
}

std::string consume_queue(const ledger::OutboxSettings &recorded, const config::OutboxConfig &c,
                          const std::string &location) {
  if (recorded.cleanup_via != ledger::CleanupVia::queue)
    throw LodgeError(Errc::usage, "ledger " + location +
                                      " runs its cleanup from its task table (lodge sweep); `lodge init "
                                      "--cleanup-via queue` switches it to a queue");
  return relay_queue(recorded, c, OutboxQueue::cleanup);
}

namespace {

// The event types `names` gives ("file.active", ...), in the ledger's order.
std::vector<ledger::EventType> event_types_of(const std::vector<std::string> &names) {
  std::vector<ledger::EventType> out;
  for (auto t : ledger::k_event_types) {
    for (const auto &name : names) {
      auto parsed = ledger::parse_event_type(name);
      if (!parsed)
        throw LodgeError(Errc::usage,
                         "--events: expected file.active, file.deleted, file.failed or none, got '" +
                             util::escape_for_terminal(name) + "'");
      if (*parsed == t) {
        out.push_back(t);
        break;
      }
    }
  }
  return out;
}

} // namespace

ledger::OutboxSettings init_outbox(ledger::OutboxLedger &l, const config::OutboxConfig &c,
                                   const std::string &via_flag, const std::string &events_flag,
                                   const std::function<void(const std::string &, const char *)> &ensure,
                                   const util::Clock &clock) {
  auto current = l.outbox_settings();
  auto want = current;
  std::string via = !via_flag.empty() ? via_flag : c.cleanup_given ? c.cleanup_via : "";
  if (!via.empty()) {
    auto v = ledger::parse_cleanup_via(via);
    if (!v) throw LodgeError(Errc::usage, "--cleanup-via: expected tasks or queue, got '" + via + "'");
    want.cleanup_via = *v;
  }
  if (!events_flag.empty())
    want.event_types =
        event_types_of(events_flag == "none" ? std::vector<std::string>{} : util::split(events_flag, ','));
  else if (c.events_given)
    want.event_types = event_types_of(c.event_types);
  // The queues exist before the ledger relies on them: a relay's first publish finds them.
  if (want.cleanup_via == ledger::CleanupVia::queue) {
    if (c.cleanup_queue.empty())
      throw LodgeError(Errc::config_invalid,
                       "cleanup through a queue needs the queue: set cleanup.queue in the "
                       "configuration (sqs://NAME or amqp://USER@HOST/VHOST?queue=NAME)");
    ensure(c.cleanup_queue, "cleanup.queue");
  }
  if (!want.event_types.empty()) {
    if (c.events_queue.empty())
      throw LodgeError(Errc::config_invalid,
                       "upload events need a queue: set events.queue in the configuration (sqs://NAME or "
                       "amqp://USER@HOST/VHOST?queue=NAME)");
    ensure(c.events_queue, "events.queue");
  }
  if (want == current) return current;
  if (l.set_outbox_settings(want) == ledger::SetOutboxOutcome::in_flight) {
    auto n = l.outbox_counts(clock.now_ms()).cleanup_in_flight;
    throw LodgeError(Errc::in_progress,
                     "init --cleanup-via " + std::string(ledger::to_string(want.cleanup_via)) +
                         " refused: " + util::plural(n, "cleanup event") +
                         " sent to the queue and not yet consumed; run `lodge consume` until `lodge status` "
                         "shows none in flight, then switch");
  }
  return want;
}

} // namespace lodge::ops
