// lodge relay, lodge consume: the outbox published to a message queue, and cleanup events
// consumed from it.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <lodge/ledger/outbox.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/mq/settings.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>

namespace lodge::cli {
namespace {

// SQS is reached as the S3 store is (mq::resolve_sqs_options): the flags and the environment
// handed in as read.
mq::QueueOptions sqs_options(Context &ctx) {
  return mq::resolve_sqs_options(
      {ctx.env, ctx.g.profile, ctx.g.profile.empty() ? "" : "flag --profile", ctx.g.region},
      util::system_clock());
}

} // namespace

std::unique_ptr<mq::MessageQueue> open_message_queue(Context &ctx, const std::string &url, const char *what,
                                                     int64_t visibility_ms) {
  auto parsed = mq::parse_queue_url(url);
  if (!parsed) throw LodgeError(Errc::config_invalid, std::string(what) + ": " + parsed.error().message);
  mq::QueueOptions o;
  if (parsed->broker == mq::Broker::sqs) o = sqs_options(ctx);
  o.visibility_timeout_ms = visibility_ms;
  auto q = mq::open_queue(parsed.value(), o);
  if (!q) throw LodgeError(q.error());
  return std::move(q).value();
}

namespace {

// A duration flag's value (the one grammar and range check, config::duration_value), or
// `fallback` when it was not given.
int64_t duration_flag(const std::string &text, const char *name, int64_t fallback,
                      config::DurationRange range = config::k_any_duration) {
  return text.empty() ? fallback : config::duration_value(text, name, Errc::usage, range);
}

ops::Stopper stopper() {
  ops::Stopper s;
  s.stopped = [] { return interrupted(); };
  return s;
}

// The ledger's recorded mode; a configuration that says otherwise (edited, and `lodge init`
// not run since) is named, since the ledger's record is what runs.
ledger::OutboxSettings outbox_of(Context &ctx) {
  auto s = ctx.ledger().outbox_settings();
  const auto &oc = ctx.cfg().outbox;
  if (oc.cleanup_given && oc.cleanup_via != ledger::to_string(s.cleanup_via))
    std::fprintf(stderr,
                 "lodge: warning: the configuration says cleanup.via %s, but ledger %s runs its cleanup %s; "
                 "`lodge init --cleanup-via %s` switches it\n",
                 oc.cleanup_via.c_str(), ctx.ledger().location().c_str(),
                 s.cleanup_via == ledger::CleanupVia::queue ? "through a queue"
                                                            : "from its task table (sweep)",
                 oc.cleanup_via.c_str());
  if (oc.events_given) {
    std::vector<std::string> recorded;
    std::string names;
    for (auto t : s.event_types) {
      recorded.emplace_back(ledger::to_string(t));
      names += (names.empty() ? "" : ", ") + recorded.back();
    }
    auto wanted = oc.event_types;
    std::sort(wanted.begin(), wanted.end());
    std::sort(recorded.begin(), recorded.end());
    if (wanted != recorded)
      std::fprintf(
          stderr,
          "lodge: warning: the configuration's events.types differ from what ledger %s records (%s); "
          "`lodge init` records the configuration's\n",
          ctx.ledger().location().c_str(), names.empty() ? "none" : names.c_str());
  }
  return s;
}

struct RelayCli {
  bool follow = false;
  std::string poll, max_runtime;
  int64_t limit = 0;
  int batch = 100;
};

struct ConsumeCli {
  bool follow = false;
  std::string wait, max_runtime, lease, worker_id;
  int64_t max_messages = 0;
  int batch = 10;
};

} // namespace

Command add_relay(CLI::App &app) {
  auto o = std::make_shared<RelayCli>();
  auto *sub = app.add_subcommand(
      "relay", "Publish the outbox: due cleanup events (cleanup via a queue) and upload events, each marked "
               "sent once the broker confirmed it");
  sub->add_flag("--follow", o->follow,
                "Keep running, polling the ledger (stop with a signal or --max-runtime)");
  sub->add_option("--poll-interval", o->poll, "--follow: the wait when nothing is due (default 5s)");
  sub->add_option("--max-runtime", o->max_runtime, "Stop after this long");
  sub->add_option("--limit", o->limit, "Most events to publish (default: all that are due)")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  sub->add_option("--batch", o->batch, "Events per ledger read and publish (default 100)")
      ->check(CLI::Range(1, 1000));
  return {sub, [o](Context &ctx) {
            // The flags first: a bad value is said before anything is opened.
            const int64_t poll_ms = duration_flag(o->poll, "--poll-interval", 5'000);
            const int64_t max_runtime_ms = duration_flag(o->max_runtime, "--max-runtime", 0);
            const auto &c = ctx.cfg();
            auto settings = outbox_of(ctx);
            std::unique_ptr<mq::MessageQueue> cleanup, events;
            if (settings.cleanup_via == ledger::CleanupVia::queue) {
              if (c.outbox.cleanup_queue.empty())
                throw LodgeError(Errc::config_invalid, "the ledger runs its cleanup through a queue, but the "
                                                       "configuration names none (cleanup.queue)");
              cleanup = open_message_queue(ctx, c.outbox.cleanup_queue, "cleanup.queue");
            }
            if (!settings.event_types.empty()) {
              if (c.outbox.events_queue.empty())
                throw LodgeError(Errc::config_invalid,
                                 "the ledger records upload events, but the "
                                 "configuration names no queue for them (events.queue)");
              events = open_message_queue(ctx, c.outbox.events_queue, "events.queue");
            }
            install_interrupt_handlers();
            ops::RelayOptions ro;
            ro.cleanup = cleanup.get();
            ro.events = events.get();
            ro.ledger_uuid = ctx.ledger().uuid();
            ro.batch = o->batch;
            ro.limit = o->limit;
            ro.follow = o->follow;
            ro.poll_ms = poll_ms;
            ro.max_runtime_ms = max_runtime_ms;
            ro.stop = stopper();
            int64_t started = util::system_clock().now_ms();
            auto sum = ops::relay(ctx.ledger(), ro, util::system_clock());
            nlohmann::json j{{"cleanup_published", sum.cleanup_published},
                             {"cleanup_marked", sum.cleanup_marked},
                             {"events_published", sum.events_published},
                             {"events_marked", sum.events_marked},
                             {"failed", sum.failed}};
            bool ok = sum.failed == 0;
            ctx.ledger().record_job_run({"relay", default_worker(), started, util::system_clock().now_ms(),
                                         ok ? "ok" : "failed", j.dump()});
            if (ctx.g.json)
              ctx.print_json(j);
            else if (speak(ctx))
              std::printf("relay: published %lld cleanup events and %lld upload events, "
                          "%lld not confirmed\n",
                          static_cast<long long>(sum.cleanup_published),
                          static_cast<long long>(sum.events_published), static_cast<long long>(sum.failed));
            if (sum.failed > 0 && sum.cleanup_published + sum.events_published == 0)
              return exit_status(Errc::storage_unavailable);
            return sum.failed > 0 ? exit_items_failed() : exit_status(Errc::ok);
          }};
}

Command add_consume(CLI::App &app) {
  auto o = std::make_shared<ConsumeCli>();
  auto *sub = app.add_subcommand(
      "consume", "Run the cleanup events a queue delivers: each task decided and run under its lease, as "
                 "sweep would, then acknowledged");
  sub->add_flag("--follow", o->follow,
                "Keep receiving (stop with a signal, --max-messages or --max-runtime)");
  sub->add_option("--max-messages", o->max_messages, "Stop after this many messages")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  sub->add_option("--max-runtime", o->max_runtime, "Stop after this long");
  sub->add_option("--wait", o->wait,
                  "How long one receive waits for a message (default 1s; SQS at most 20s)");
  sub->add_option("--lease", o->lease, "Lease per task (default: sweep.lease, 2m)");
  sub->add_option("--worker-id", o->worker_id, "Name in lease_owner (default host:pid)");
  sub->add_option("--batch", o->batch, "Messages per receive (default 10)")->check(CLI::Range(1, 10));
  return {sub, [o](Context &ctx) {
            const auto &c = ctx.cfg();
            // The flags first: a bad value is said before anything is opened. --lease is checked
            // as sweep.lease is.
            const int64_t lease_ms = duration_flag(o->lease, "--lease", c.sweep.lease_ms, {});
            const int64_t max_runtime_ms = duration_flag(o->max_runtime, "--max-runtime", 0);
            const int64_t wait_ms = duration_flag(o->wait, "--wait", 1'000);
            auto settings = outbox_of(ctx);
            if (settings.cleanup_via != ledger::CleanupVia::queue)
              throw LodgeError(Errc::usage, "ledger " + ctx.ledger().location() +
                                                " runs its cleanup from its task table (lodge "
                                                "sweep); `lodge init --cleanup-via queue` "
                                                "switches it to a queue");
            if (c.outbox.cleanup_queue.empty())
              throw LodgeError(Errc::config_invalid, "the ledger runs its cleanup through a queue, but the "
                                                     "configuration names none (cleanup.queue)");
            auto queue = open_message_queue(ctx, c.outbox.cleanup_queue, "cleanup.queue");
            auto store = ctx.open_store();
            install_interrupt_handlers();
            ops::ConsumeOptions co;
            co.queue = queue.get();
            co.ledger_uuid = ctx.ledger().uuid();
            co.worker_id = o->worker_id.empty() ? default_worker() : o->worker_id;
            co.lease_ms = lease_ms;
            co.cleanup = {ops::grace_for(c, std::nullopt), c.sweep.backoff_base_ms, c.sweep.backoff_max_ms};
            co.batch = o->batch;
            co.max_messages = o->max_messages;
            co.max_runtime_ms = max_runtime_ms;
            co.follow = o->follow;
            co.wait_ms = wait_ms;
            co.stop = stopper();
            int64_t started = util::system_clock().now_ms();
            auto sum = ops::consume(ctx.ledger(), *store, co, util::system_clock());
            nlohmann::json j{{"received", sum.received},     {"deleted", sum.deleted},
                             {"ignored", sum.ignored},       {"postponed", sum.postponed},
                             {"retried", sum.retried},       {"dead_lettered", sum.dead_lettered},
                             {"lease_lost", sum.lease_lost}, {"kept", sum.kept},
                             {"duplicates", sum.duplicates}, {"delayed", sum.delayed},
                             {"rejected", sum.rejected},     {"unreachable", sum.unreachable}};
            j["verify_scheduled"] = sum.verify_scheduled;
            bool ok = sum.dead_lettered == 0 && sum.rejected == 0 && sum.retried == 0;
            ctx.ledger().record_job_run({"consume", co.worker_id, started, util::system_clock().now_ms(),
                                         ok ? "ok" : "failed", j.dump()});
            if (ctx.g.json)
              ctx.print_json(j);
            else if (speak(ctx))
              std::printf("consume: received %lld, deleted %lld, ignored %lld, postponed "
                          "%lld, retried %lld, dead-lettered %lld, duplicates %lld, "
                          "delayed %lld, rejected %lld, kept %lld\n",
                          static_cast<long long>(sum.received), static_cast<long long>(sum.deleted),
                          static_cast<long long>(sum.ignored), static_cast<long long>(sum.postponed),
                          static_cast<long long>(sum.retried), static_cast<long long>(sum.dead_lettered),
                          static_cast<long long>(sum.duplicates), static_cast<long long>(sum.delayed),
                          static_cast<long long>(sum.rejected), static_cast<long long>(sum.kept));
            if (sum.received > 0 && sum.deleted + sum.ignored + sum.postponed + sum.kept == 0 &&
                sum.unreachable > 0 && sum.unreachable == sum.retried + sum.dead_lettered)
              return exit_status(Errc::storage_unavailable);
            return sum.dead_lettered + sum.rejected > 0 ? exit_items_failed() : exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli

namespace lodge::cli {

ledger::OutboxSettings apply_outbox_settings(Context &ctx, ledger::Ledger &l, const std::string &via_flag,
                                             const std::string &events_flag) {
  const auto &oc = ctx.cfg().outbox;
  auto current = l.outbox_settings();
  auto want = current;
  std::string via = !via_flag.empty() ? via_flag : oc.cleanup_given ? oc.cleanup_via : "";
  if (!via.empty()) {
    auto v = ledger::parse_cleanup_via(via);
    if (!v) throw LodgeError(Errc::usage, "--cleanup-via: expected tasks or queue, got '" + via + "'");
    want.cleanup_via = *v;
  }
  std::optional<std::vector<std::string>> types;
  if (!events_flag.empty())
    types = events_flag == "none" ? std::vector<std::string>{} : util::split(events_flag, ',');
  else if (oc.events_given)
    types = oc.event_types;
  if (types) {
    want.event_types.clear();
    for (auto t : ledger::k_event_types) {
      for (const auto &name : *types) {
        auto parsed = ledger::parse_event_type(name);
        if (!parsed)
          throw LodgeError(Errc::usage,
                           "--events: expected file.active, file.deleted, file.failed or none, got '" +
                               util::escape_for_terminal(name) + "'");
        if (*parsed == t) {
          want.event_types.push_back(t);
          break;
        }
      }
    }
  }
  // The queues exist before the ledger relies on them: a relay's first publish finds them.
  if (want.cleanup_via == ledger::CleanupVia::queue) {
    if (oc.cleanup_queue.empty())
      throw LodgeError(Errc::config_invalid,
                       "cleanup through a queue needs the queue: set cleanup.queue in the "
                       "configuration (sqs://NAME or amqp://USER@HOST/VHOST?queue=NAME)");
    auto st = open_message_queue(ctx, oc.cleanup_queue, "cleanup.queue")->ensure_queues();
    if (!st) throw LodgeError(st.error());
  }
  if (!want.event_types.empty()) {
    if (oc.events_queue.empty())
      throw LodgeError(Errc::config_invalid,
                       "upload events need a queue: set events.queue in the configuration (sqs://NAME or "
                       "amqp://USER@HOST/VHOST?queue=NAME)");
    auto st = open_message_queue(ctx, oc.events_queue, "events.queue")->ensure_queues();
    if (!st) throw LodgeError(st.error());
  }
  if (want == current) return current;
  if (l.set_outbox_settings(want) == ledger::SetOutboxOutcome::in_flight) {
    auto n = l.outbox_counts(util::system_clock().now_ms()).cleanup_in_flight;
    throw LodgeError(Errc::in_progress,
                     "init --cleanup-via " + std::string(ledger::to_string(want.cleanup_via)) +
                         " refused: " + util::plural(n, "cleanup event") +
                         " sent to the queue and not yet consumed; run `lodge consume` until `lodge status` "
                         "shows none in flight, then switch");
  }
  return want;
}

} // namespace lodge::cli

namespace lodge::cli {

namespace {
struct DebugQueueCli {
  std::string url, body;
  int max = 10;
  std::string wait = "1s";
  bool ack = false;
};
} // namespace

Action add_debug_queue(CLI::App &debug) {
  auto o = std::make_shared<DebugQueueCli>();
  auto *q = debug.add_subcommand("queue", "A message queue as a test sees it");
  auto *pub = q->add_subcommand("publish", "Publish BODY to URL (confirmed)");
  pub->add_option("url", o->url)->required();
  pub->add_option("body", o->body)->required();
  auto *recv = q->add_subcommand("receive", "Receive up to --max messages: one JSON line each");
  recv->add_option("url", o->url)->required();
  recv->add_option("--max", o->max)->check(CLI::Range(1, 10000));
  recv->add_option("--wait", o->wait);
  recv->add_flag("--ack", o->ack, "Acknowledge each (otherwise they come back)");
  auto *counts = q->add_subcommand("counts", "The queue's counts as JSON");
  counts->add_option("url", o->url)->required();
  q->require_subcommand(1);
  return [o, pub, recv](Context &ctx) {
    auto queue = open_message_queue(ctx, o->url, "url");
    if (pub->parsed()) {
      auto r = queue->publish({{"debug", o->body}});
      if (r.empty() || !r[0]) throw LodgeError(r.empty() ? Error(Errc::internal, "no answer") : r[0].error());
      ctx.print_json(nlohmann::json{{"message_id", r[0].value()}});
      return exit_status(Errc::ok);
    }
    if (recv->parsed()) {
      int64_t wait = duration_flag(o->wait, "--wait", 1'000);
      int got = 0;
      while (got < o->max) {
        auto batch = queue->receive(std::min(10, o->max - got), wait);
        if (!batch) throw LodgeError(batch.error());
        if (batch.value().empty()) break;
        for (const auto &d : batch.value()) {
          ++got;
          ctx.print_json(nlohmann::json{
              {"message_id", d.message_id}, {"body", d.body}, {"receive_count", d.receive_count}});
          if (o->ack) {
            auto st = queue->ack(d);
            if (!st) throw LodgeError(st.error());
          }
        }
      }
      return exit_status(Errc::ok);
    }
    auto c = queue->counts();
    if (!c) throw LodgeError(c.error());
    auto opt = [](const std::optional<int64_t> &v) {
      return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
    };
    ctx.print_json(
        nlohmann::json{{"ready", opt(c->ready)}, {"delayed", opt(c->delayed)}, {"dead", opt(c->dead)}});
    return exit_status(Errc::ok);
  };
}

} // namespace lodge::cli
