#pragma once
// What `lodge config` shows: the effective configuration (the ledger's location without its
// password), and which credentials the store would use, never what they are: their source,
// a shortened identity, "(redacted)" for the secret and the token, or why none were found;
// with --explain, each provider of the chain asked, whether it was used and why.

#include <lodge/config/config.hpp>
#include <lodge/store/store.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace lodge::ops {

// Its implicit destructor is nlohmann::json's, which frees nested values through a std::vector
// (lodge does not handle running out of memory).
struct ConfigReport {    // NOLINT(bugprone-exception-escape)
  nlohmann::json config; // config::to_json, with "ledger" and "credentials"
  nlohmann::json chain;  // [{provider, used, why}]
  bool needs_credentials = false;
  std::string error; // no credentials were found: why
};
[[nodiscard]] ConfigReport config_report(const config::Config &cfg, const store::Backend &backend);

} // namespace lodge::ops
