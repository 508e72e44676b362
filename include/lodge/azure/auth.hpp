#pragma once
// Where an Azure storage account is and how to authorize against it, resolved from the
// process environment (handed in as a map; core code never reads the environment).
// Order: AZURE_STORAGE_CONNECTION_STRING, else AZURE_STORAGE_ACCOUNT with
// AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN. An endpoint given by the user
// (--endpoint, config "endpoint") overrides the blob endpoint.

#include <lodge/error.hpp>
#include <map>
#include <string>

namespace lodge::azure {

// Azurite's well-known development account.
inline constexpr const char *k_dev_account = "devstoreaccount1";
inline constexpr const char *k_dev_key =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
inline constexpr const char *k_dev_endpoint = "http://127.0.0.1:10000/devstoreaccount1";

struct Account {
  std::string name;     // the storage account
  std::string endpoint; // blob endpoint, no trailing '/': https://ACCOUNT.blob.core.windows.net
                        // or path-style http://127.0.0.1:10000/devstoreaccount1
  std::string key;      // the decoded account key (raw bytes); empty with a SAS
  std::string sas;      // a SAS token's query string, without '?'; empty with a key
  std::string source;   // which variable it came from, for `lodge config`
};

// "Name=Value;..." into a map keyed by the lowercased name (values keep their '=').
// CONFIG_INVALID naming the variable on an element without '=' or an empty name.
[[nodiscard]] Result<std::map<std::string, std::string>> parse_connection_string(const std::string &text);

// The account, endpoint and credential, or CONFIG_INVALID naming what is missing or bad
// (a key that is not base64 included). endpoint_override "" keeps the resolved one.
[[nodiscard]] Result<Account> resolve_account(const std::map<std::string, std::string> &env,
                                              const std::string &endpoint_override);

// A blob endpoint URL checked and normalized (http/https, a host, at most one path
// segment which then names the account); CONFIG_INVALID naming the value otherwise.
struct Endpoint {
  std::string base;         // scheme://host[:port]
  std::string path_account; // the account of a path-style endpoint, "" otherwise
};
[[nodiscard]] Result<Endpoint> parse_endpoint(const std::string &url, const std::string &what);

} // namespace lodge::azure
