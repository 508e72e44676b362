// What `lodge config` shows (config_report.hpp).
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/read/config_report.hpp>

namespace lodge::ops {

ConfigReport config_report(const config::Config &cfg, const store::Backend &backend) {
  ConfigReport out;
  out.config = config::to_json(cfg);
  out.config["ledger"] = ledger::shown_location(cfg.ledger); // a URL's password never
  out.config["credentials"] = nullptr;
  out.chain = nlohmann::json::array();
  auto v = backend.credentials();
  if (!v) return out;
  out.needs_credentials = true;
  out.error = v->error;
  if (v->error.empty())
    out.config["credentials"] = {
        {"source", v->source},
        {"access_key_id", v->identity},
        {"secret_access_key", "(redacted)"},
        {"session_token", v->has_token ? nlohmann::json("(redacted)") : nlohmann::json(nullptr)}};
  else
    out.config["credentials"] = {{"error", v->error}};
  for (const auto &s : v->chain)
    out.chain.push_back({{"provider", s.provider}, {"used", s.used}, {"why", s.why}});
  return out;
}

} // namespace lodge::ops
