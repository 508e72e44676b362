#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/crypto/random.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/ops/read/doctor.hpp>
#include <lodge/ops/read/doctor_ledger.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::cli {
namespace {

using ops::doctor::Check;
using ops::doctor::Level;

Check fail(std::string name, std::string message, std::string fix) {
  return Check{std::move(name), Level::fail, std::move(message), std::move(fix)};
}

// The server's Date header, from an unsigned HEAD of the endpoint (any answer carries one).
Check clock_check(Context &ctx) {
  auto b = ctx.store_binding();
  std::string url;
  if (b.endpoint.rfind("http", 0) == 0)
    url = b.endpoint + "/";
  else
    url = ctx.cfg().store_config->default_service_url();
  if (url.empty()) return {"store.clock", Level::ok, "not checked (no endpoint to ask)", ""};
  http::TransportOptions o;
  o.connect_timeout_ms = 5000;
  o.total_timeout_ms = 15000;
  o.ca_bundle = ctx.cfg().store_config->ca_bundle();
  o.verify_tls = ctx.cfg().verify_tls;
  auto t = http::make_curl_transport(o);
  http::Request req;
  req.method = "HEAD";
  req.url = url;
  auto r = t->perform(req);
  int64_t now = util::system_clock().now_ms();
  if (!r)
    return {"store.clock", Level::warn, "not checked: " + url + ": " + r.error().message,
            "make the store reachable (see store.reachable)"};
  return ops::doctor::clock_skew(r->header("date"), now);
}

void store_checks(Context &ctx, std::vector<Check> &out) {
  if (ctx.cfg().store.empty()) {
    out.push_back(
        fail("store.config", "no store configured", "pass --store, set LODGE_STORE, or store in the config"));
    return;
  }
  std::unique_ptr<store::ObjectStore> st;
  try {
    st = ctx.open_store_unbound();
  } catch (const LodgeError &e) {
    out.push_back(fail("store.credentials", e.error().message + " (" + std::string(e.error().name()) + ")",
                       "`lodge config --explain` shows where lodge looked for credentials"));
    return;
  }
  if (st->describe().rfind("file:", 0) != 0) out.push_back(clock_check(ctx));
  auto checks = ops::doctor::store_checks(*st, st->key_prefix() + ".lodge/doctor-" + crypto::random_uuid());
  out.insert(out.end(), checks.begin(), checks.end());
}

} // namespace

Command add_doctor(CLI::App &app) {
  auto *sub =
      app.add_subcommand("doctor", "Check the ledger, the store, the credentials and the clock before a "
                                   "scheduled run fails: one ok/warn/fail line per check (exit 1 on a fail)");
  return {sub, [](Context &ctx) {
            std::vector<Check> checks;
            bool configured = true;
            try {
              (void)ctx.cfg();
            } catch (const LodgeError &e) {
              checks.push_back(fail("config", e.error().message + " (" + std::string(e.error().name()) + ")",
                                    "correct the configuration (`lodge config` shows it)"));
              configured = false;
            }
            if (configured) {
              checks = ops::doctor::ledger_checks(ctx, ctx.cfg());
              store_checks(ctx, checks);
            }
            bool failed = false;
            for (auto &c : checks) {
              failed = failed || c.level == Level::fail;
              // A check may name the ledger's location or an endpoint as given: never a password.
              c.message = util::log::redact(c.message);
              c.fix = util::log::redact(c.fix);
            }
            if (ctx.g.json) {
              auto arr = nlohmann::json::array();
              for (const auto &c : checks)
                arr.push_back({{"name", c.name},
                               {"status", ops::doctor::level_name(c.level)},
                               {"message", c.message},
                               {"fix", c.fix}});
              ctx.print_json(nlohmann::json{{"checks", arr}, {"ok", !failed}});
            } else {
              for (const auto &c : checks) {
                std::string line = std::string(ops::doctor::level_name(c.level));
                line.resize(6, ' ');
                line += c.name + ": " + c.message;
                if (!c.fix.empty()) line += "; fix: " + c.fix;
                line = util::escape_for_terminal(line) + "\n";
                std::fwrite(line.data(), 1, line.size(), stdout);
              }
              std::fflush(stdout);
              check_stdout();
            }
            return exit_status(failed ? Errc::unhealthy : Errc::ok);
          }};
}

} // namespace lodge::cli
