// lodge relay, lodge consume: the outbox published to a message queue, and cleanup events
// consumed from it; `lodge init`'s outbox; `lodge debug queue`. The options mapped to the ops
// call, its report rendered, the exit status ops decided returned.
#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <lodge/ledger/outbox.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/mq/settings.hpp>
#include <lodge/ops/jobs/settings.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
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

// The ledger's recorded outbox, which is what runs; what the configuration says otherwise
// (edited, and `lodge init` not run since) is warned of.
ledger::OutboxSettings outbox_of(Context &ctx) {
  auto s = ctx.ledger().outbox_settings();
  for (const auto &w : ops::outbox_drift(s, ctx.cfg().outbox, ctx.ledger().location()))
    std::fprintf(stderr, "lodge: warning: %s\n", w.c_str());
  return s;
}

// The queue at `url` (a configuration key's, named by `what`) opened; none for no URL.
std::unique_ptr<mq::MessageQueue> queue_at(Context &ctx, const std::string &url, const char *what) {
  return url.empty() ? nullptr : open_message_queue(ctx, url, what);
}

struct RelayCli {
  ops::RelayOptions opts; // --follow, --limit, --batch
  std::string poll, max_runtime;
};

struct ConsumeCli {
  ops::ConsumeOptions opts; // --follow, --max-messages, --batch, --worker-id
  std::string wait, max_runtime, lease;
};

} // namespace

Command add_relay(CLI::App &app) {
  auto o = std::make_shared<RelayCli>();
  auto *sub = app.add_subcommand(
      "relay", "Publish the outbox: due cleanup events (cleanup via a queue) and upload events, each marked "
               "sent once the broker confirmed it");
  sub->add_flag("--follow", o->opts.follow,
                "Keep running, polling the ledger (stop with a signal or --max-runtime)");
  sub->add_option("--poll-interval", o->poll, "--follow: the wait when nothing is due (default 5s)");
  sub->add_option("--max-runtime", o->max_runtime, "Stop after this long");
  sub->add_option("--limit", o->opts.limit, "Most events to publish (default: all that are due)")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  sub->add_option("--batch", o->opts.batch, "Events per ledger read and publish (default 100)")
      ->check(CLI::Range(1, 1000));
  return {sub, [o](Context &ctx) {
            auto ro = o->opts;
            // The flags first: a bad value is said before anything is opened.
            ro.poll_ms = flags::duration(o->poll, "--poll-interval", ro.poll_ms);
            ro.max_runtime_ms = flags::duration(o->max_runtime, "--max-runtime", 0);
            const auto &c = ctx.cfg();
            auto settings = outbox_of(ctx);
            auto cleanup = queue_at(ctx, ops::relay_queue(settings, c.outbox, ops::OutboxQueue::cleanup),
                                    "cleanup.queue");
            auto events =
                queue_at(ctx, ops::relay_queue(settings, c.outbox, ops::OutboxQueue::events), "events.queue");
            install_interrupt_handlers();
            ro.cleanup = cleanup.get();
            ro.events = events.get();
            ro.ledger_uuid = ctx.ledger().uuid();
            ro.stop.stopped = [] { return interrupted(); };
            ro.worker_id = default_worker();
            auto &l = ctx.ledger();
            auto r = ops::relay(l, l, ro, util::system_clock());
            if (ctx.g.json)
              ctx.print_json(ops::job_counts(r));
            else if (speak(ctx))
              std::printf("relay: published %lld cleanup events and %lld upload events, %lld not confirmed\n",
                          static_cast<long long>(r.cleanup_published),
                          static_cast<long long>(r.events_published), static_cast<long long>(r.failed));
            return ops::exit_status(r);
          }};
}

Command add_consume(CLI::App &app) {
  auto o = std::make_shared<ConsumeCli>();
  auto *sub = app.add_subcommand(
      "consume", "Run the cleanup events a queue delivers: each task decided and run under its lease, as "
                 "sweep would, then acknowledged");
  sub->add_flag("--follow", o->opts.follow,
                "Keep receiving (stop with a signal, --max-messages or --max-runtime)");
  sub->add_option("--max-messages", o->opts.max_messages, "Stop after this many messages")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  sub->add_option("--max-runtime", o->max_runtime, "Stop after this long");
  sub->add_option("--wait", o->wait,
                  "How long one receive waits for a message (default 1s; SQS at most 20s)");
  sub->add_option("--lease", o->lease, "Lease per task (default: sweep.lease, 2m)");
  sub->add_option("--worker-id", o->opts.worker_id, "Name in lease_owner (default host:pid)");
  sub->add_option("--batch", o->opts.batch, "Messages per receive (default 10)")->check(CLI::Range(1, 10));
  return {sub, [o](Context &ctx) {
            auto co = ops::consume_options(ctx.cfg(), o->opts);
            // The flags first: a bad value is said before anything is opened. --lease is checked
            // as sweep.lease is.
            co.lease_ms = flags::duration(o->lease, "--lease", co.lease_ms, {});
            co.max_runtime_ms = flags::duration(o->max_runtime, "--max-runtime", 0);
            co.wait_ms = flags::duration(o->wait, "--wait", co.wait_ms);
            auto settings = outbox_of(ctx);
            // A message received and not acknowledged (the consumer killed) comes back once its
            // task's lease has ended, not after the queue's own timeout (SQS: 30 s by default).
            auto queue = open_message_queue(
                ctx, ops::consume_queue(settings, ctx.cfg().outbox, ctx.ledger().location()), "cleanup.queue",
                co.lease_ms);
            auto store = ctx.open_store();
            install_interrupt_handlers();
            co.queue = queue.get();
            co.ledger_uuid = ctx.ledger().uuid();
            if (co.worker_id.empty()) co.worker_id = default_worker();
            co.stop.stopped = [] { return interrupted(); };
            auto &l = ctx.ledger();
            auto r = ops::consume(l, l, *store, co, util::system_clock());
            if (ctx.g.json)
              ctx.print_json(ops::job_counts(r));
            else if (speak(ctx))
              std::printf("consume: received %lld, deleted %lld, ignored %lld, postponed %lld, retried %lld, "
                          "dead-lettered %lld, duplicates %lld, delayed %lld, rejected %lld, kept %lld\n",
                          static_cast<long long>(r.received), static_cast<long long>(r.deleted),
                          static_cast<long long>(r.ignored), static_cast<long long>(r.postponed),
                          static_cast<long long>(r.retried), static_cast<long long>(r.dead_lettered),
                          static_cast<long long>(r.duplicates), static_cast<long long>(r.delayed),
                          static_cast<long long>(r.rejected), static_cast<long long>(r.kept));
            return ops::exit_status(r);
          }};
}

ledger::OutboxSettings apply_outbox_settings(Context &ctx, ledger::Ledger &l, const std::string &via_flag,
                                             const std::string &events_flag) {
  auto ensure = [&ctx](const std::string &url, const char *key) {
    auto st = open_message_queue(ctx, url, key)->ensure_queues();
    if (!st) throw LodgeError(st.error());
  };
  return ops::init_outbox(l, ctx.cfg().outbox, via_flag, events_flag, ensure, util::system_clock());
}

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
      int64_t wait = flags::duration(o->wait, "--wait", 1'000);
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
