// lodge init, lodge status, lodge config, and the hidden lodge debug.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/failpoint.hpp>
#include <lodge/ops/binding.hpp>
#include <lodge/ops/read/config_report.hpp>
#include <lodge/ops/read/status.hpp>
#include <lodge/ops/read/text.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace lodge::cli {

Command add_init(CLI::App &app) {
  auto rebind = std::make_shared<bool>(false);
  auto accept = std::make_shared<bool>(false);
  auto via = std::make_shared<std::string>();
  auto events = std::make_shared<std::string>();
  auto *sub =
      app.add_subcommand("init", "Create the ledger bound to its store, or migrate an older one (idempotent; "
                                 "--rebind-store after moving the data)");
  sub->add_flag(
      "--rebind-store", *rebind,
      "Bind the ledger to the store given instead of the one it serves (only after moving the data)");
  sub->add_flag(
      "--accept-diverged", *accept,
      "Clear a diverged ledger's state, after `lodge reconcile` reported what the other copy wrote");
  choices(sub->add_option("--cleanup-via", *via,
                          "Who runs cleanup: sweep from the task table (tasks, the default) or consumers of "
                          "cleanup.queue (queue); refused while events are in flight"),
          {"tasks", "queue"});
  sub->add_option(
      "--events", *events,
      "Upload events the ledger records for `lodge relay` (file.active,file.deleted,file.failed or "
      "none; default: the configuration's events.types)");
  return {sub, [rebind, accept, via, events](Context &ctx) {
            // The store first: a bad store URL leaves no ledger behind.
            (void)ctx.open_store_unbound();
            auto want = ctx.store_binding();
            auto &l = ctx.init_ledger();
            const auto done = ops::init_binding(l, l, l.location(),
                                                {want, *rebind, *accept, util::system_clock().now_ms()});
            ctx.binding_checked();
            auto store = store::describe(want);
            if (done.divergence_accepted && !ctx.g.quiet && !ctx.g.json)
              std::fprintf(
                  stderr,
                  "lodge: the divergence of %s is accepted; repair, sweep and reconcile --apply run again\n",
                  util::escape_for_terminal(l.location()).c_str());
            auto outbox = apply_outbox_settings(ctx, l, *via, *events);
            std::vector<std::string> types;
            std::string types_text;
            for (auto t : outbox.event_types) {
              types.emplace_back(ledger::to_string(t));
              types_text += (types_text.empty() ? "" : ", ") + types.back();
            }
            if (ctx.g.json) {
              nlohmann::json j{{"ledger", l.location()},
                               {"cleanup_via", ledger::to_string(outbox.cleanup_via)},
                               {"event_types", types},
                               {"ledger_uuid", l.uuid()},
                               {"schema_version", l.schema_version()},
                               {"store", store},
                               {"binding",
                                {{"scheme", want.scheme},
                                 {"endpoint", want.endpoint},
                                 {"location", want.location},
                                 {"root", want.root},
                                 {"state_tags", want.state_tags}}},
                               {"rebound_from", done.rebound_from
                                                    ? nlohmann::json(store::describe(*done.rebound_from))
                                                    : nlohmann::json(nullptr)}};
              ctx.print_json(j);
            } else if (!ctx.g.quiet) {
              std::printf("ledger %s ready (schema %d, uuid %s), bound to store %s\n",
                          util::escape_for_terminal(l.location()).c_str(), l.schema_version(),
                          l.uuid().c_str(), util::escape_for_terminal(store).c_str());
              if (outbox.cleanup_via == ledger::CleanupVia::queue || !types.empty())
                std::printf("cleanup via %s; upload events: %s\n", ledger::to_string(outbox.cleanup_via),
                            types.empty() ? "none" : types_text.c_str());
            }
            if (done.rebound_from) {
              // Say the tagging modes only when they changed.
              const auto &was = *done.rebound_from;
              auto tagging = [&](const store::Binding &b) {
                return was.state_tags == want.state_tags ? ""
                       : b.state_tags                    ? " (with state tags)"
                                                         : " (without state tags)";
              };
              std::fprintf(stderr, "lodge: ledger %s rebound: its store was %s%s, it is now %s%s\n",
                           util::escape_for_terminal(l.location()).c_str(),
                           util::escape_for_terminal(store::describe(was)).c_str(), tagging(was),
                           util::escape_for_terminal(store).c_str(), tagging(want));
            }
            return exit_status(Errc::ok);
          }};
}

namespace {
struct StatusOptions {
  bool check = false;
  std::string prometheus;
};

} // namespace

Command add_status(CLI::App &app) {
  auto opts = std::make_shared<StatusOptions>();
  auto *sub = app.add_subcommand(
      "status", "Show ledger health: files by state, cleanup pending/failed, overdue work, last job runs, "
                "why it is unhealthy");
  sub->add_flag(
      "--check", opts->check,
      "Exit 1 when unhealthy, one line per reason (for monitoring; thresholds under \"status\" in the "
      "config)");
  sub->add_option("--prometheus", opts->prometheus,
                  "Also write Prometheus text metrics to FILE (atomically, mode status.prometheus_file_mode, "
                  "0644)")
      ->type_name("FILE");
  return {sub, [opts](Context &ctx) {
            auto &l = ctx.reader();
            auto settings = ctx.cfg().status;
            int64_t now = util::system_clock().now_ms();
            auto report = ops::read_status(l, l, settings, now);
            auto health = ops::evaluate(report, settings);
            if (!opts->prometheus.empty())
              ops::write_file_atomically(opts->prometheus, ops::status_prometheus(report, health),
                                         settings.prometheus_file_mode);
            if (ctx.g.json)
              ctx.print_json(ops::status_json(report, health, l.location()));
            else if (!ctx.g.quiet)
              Context::print_text(ops::status_text(report, health, l.location(), ctx.g.verbose > 0));
            else if (opts->check) // -q: the reasons alone, one line each (what cron mails)
              for (const auto &reason : health.reasons)
                std::printf("%s: %s\n", reason.code.c_str(),
                            util::escape_for_terminal(reason.message).c_str());
            if (opts->check && !health.healthy) {
              std::fprintf(stderr, "lodge: error: the ledger is unhealthy: %s (%s)\n",
                           util::plural(static_cast<int64_t>(health.reasons.size()), "problem").c_str(),
                           std::string(errc_name(Errc::unhealthy)).c_str());
              return exit_status(Errc::unhealthy);
            }
            return exit_status(Errc::ok);
          }};
}

namespace {
// The text form of `lodge config`: every S3 value with its source, the credentials the
// store would use (never the secret), the upload run's settings with theirs, then the whole
// configuration as JSON.
void print_setting(const char *name, const nlohmann::json &value, const std::string &source) {
  std::string v = value.is_null() ? "(none)" : value.is_string() ? value.get<std::string>() : value.dump();
  std::printf("  %-28s %s  (%s)\n", name, util::escape_for_terminal(v).c_str(),
              util::escape_for_terminal(source).c_str());
}

void print_config_text(const nlohmann::json &j) {
  if (j.contains("s3")) {
    std::printf("S3 settings (value, then where it came from):\n");
    for (const char *k : {"endpoint", "region", "addressing_style", "ca_bundle", "profile", "max_attempts",
                          "retry_mode", "request_checksum_calculation"})
      print_setting(k, j["s3"][k]["value"], j["s3"][k]["source"].get<std::string>());
    // The profile's `s3 =` keys, where set (what they became is under "upload run").
    for (const char *k :
         {"max_concurrent_requests", "multipart_threshold", "multipart_chunksize", "max_bandwidth"})
      if (!j["s3"][k]["value"].is_null())
        print_setting(("s3." + std::string(k)).c_str(), j["s3"][k]["value"],
                      j["s3"][k]["source"].get<std::string>());
  }
  const auto &c = j["credentials"];
  if (c.is_object()) {
    if (c.contains("error"))
      std::printf("  %-28s none: %s\n", "credentials",
                  util::escape_for_terminal(c["error"].get<std::string>()).c_str());
    else
      std::printf("  %-28s %s, access key id %s%s  (%s)\n", "credentials", "found",
                  util::escape_for_terminal(c["access_key_id"].get<std::string>()).c_str(),
                  c["session_token"].is_null() ? "" : " with a session token",
                  util::escape_for_terminal(c["source"].get<std::string>()).c_str());
  }
  // The upload run's settings: upload's --jobs, --part-size and --part-concurrency win.
  std::printf("upload run (value, then where it came from):\n");
  for (const char *k : {"jobs", "part_size", "part_concurrency", "multipart_threshold"})
    print_setting(k, j[k], j["sources"].value(k, std::string("default")));
  if (j.contains("store_bandwidth"))
    print_setting("store_bandwidth", j["store_bandwidth"], j["sources"]["bandwidth"].get<std::string>());
  std::printf("configuration:\n%s\n",
              j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}
} // namespace

Command add_config(CLI::App &app) {
  auto *sub = app.add_subcommand("config", "Print the effective configuration (secrets redacted); --explain "
                                           "walks the credential chain");
  auto explain = std::make_shared<bool>(false);
  sub->add_flag(
      "--explain", *explain,
      "Say, for each credential provider in the order the AWS SDKs ask them, whether it was used and why");
  return {sub, [explain](Context &ctx) {
            const auto report = ops::config_report(ctx.cfg(), ctx.backend());
            if (*explain) {
              if (ctx.g.json) {
                ctx.print_json(
                    {{"credential_chain", report.chain}, {"credentials", report.config["credentials"]}});
              } else {
                if (!report.needs_credentials) std::printf("this store needs no credentials\n");
                for (const auto &s : report.chain)
                  std::printf("%-8s %s: %s\n", s["used"].get<bool>() ? "used" : "not used",
                              util::escape_for_terminal(s["provider"].get<std::string>()).c_str(),
                              util::escape_for_terminal(s["why"].get<std::string>()).c_str());
                if (!report.error.empty())
                  std::printf("no credentials: %s\n", util::escape_for_terminal(report.error).c_str());
              }
              return exit_status(Errc::ok);
            }
            if (ctx.g.json)
              ctx.print_json(report.config, -1);
            else
              print_config_text(report.config);
            return exit_status(Errc::ok);
          }};
}

Command add_debug(CLI::App &app) {
  // Hidden (no group): for tests and for whoever writes one, not part of the user's contract.
  auto *sub = app.add_subcommand("debug", "Facts about this build, for tests")->group("");
  auto *fp = sub->add_subcommand("failpoints", "Every failpoint with the actions it honours");
  auto queue = add_debug_queue(*sub);
  sub->require_subcommand(1);
  return {
      sub, [fp, queue](Context &ctx) {
        if (!fp->parsed()) return queue(ctx);
        for (const auto &p : failpoint::table()) {
          std::vector<std::string> actions;
          for (auto a : {failpoint::crash, failpoint::error, failpoint::sleep, failpoint::pause})
            if (p.actions & a) actions.emplace_back(failpoint::action_name(a));
          if (ctx.g.json) {
            ctx.print_json(nlohmann::json{{"name", p.name}, {"actions", actions}, {"on_error", p.on_error}});
          } else {
            std::string line(p.name);
            for (const auto &a : actions)
              line += " " + a;
            std::printf("%s\n", line.c_str());
          }
        }
        return exit_status(Errc::ok);
      }};
}

} // namespace lodge::cli
