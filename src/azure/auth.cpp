#include <lodge/azure/auth.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::azure {

namespace {
std::string get(const std::map<std::string, std::string> &m, const std::string &k) {
  auto it = m.find(k);
  return it == m.end() ? std::string{} : it->second;
}

// The decoded key, or CONFIG_INVALID naming where it came from.
Result<std::string> decode_key(const std::string &b64, const std::string &what) {
  auto raw = util::base64_decode(util::trim(b64));
  if (!raw || raw->empty())
    return Error(Errc::config_invalid, what + ": the account key is not valid base64");
  return *raw;
}

std::string strip_sas(std::string s) {
  s = util::trim(s);
  if (!s.empty() && s.front() == '?') s.erase(0, 1);
  return s;
}
} // namespace

Result<std::map<std::string, std::string>> parse_connection_string(const std::string &text) {
  std::map<std::string, std::string> out;
  size_t n = 0;
  for (const auto &part : util::split(text, ';')) {
    ++n;
    auto item = util::trim(part);
    if (item.empty()) continue;
    auto eq = item.find('=');
    // Not echoed: an AccountKey that lost its '=' is the key itself.
    if (eq == std::string::npos || eq == 0)
      return Error(Errc::config_invalid, "AZURE_STORAGE_CONNECTION_STRING: element " + std::to_string(n) +
                                             " is not Name=Value (elements are separated by ';')");
    out[util::to_lower(util::trim(item.substr(0, eq)))] = util::trim(item.substr(eq + 1));
  }
  return out;
}

Result<Endpoint> parse_endpoint(const std::string &url, const std::string &what) {
  std::string e = util::trim(url);
  while (!e.empty() && e.back() == '/')
    e.pop_back();
  auto scheme_end = e.find("://");
  // A password there would be printed wherever the endpoint is and recorded in the ledger's
  // binding: refused, and not echoed.
  if (util::log::url_has_userinfo(e))
    return Error(Errc::config_invalid, what +
                                           ": user information (user:password@ before the host) is refused "
                                           "in an endpoint URL; Azure takes AZURE_STORAGE_KEY, a SAS or a "
                                           "connection string");
  auto bad = [&](const std::string &why) {
    return Error(Errc::config_invalid, what + ": " + why + ", got '" + util::escape_for_terminal(url) + "'");
  };
  if (scheme_end == std::string::npos) return bad("expected http(s)://host[:port][/ACCOUNT]");
  std::string scheme = e.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return bad("only http and https are supported");
  std::string rest = e.substr(scheme_end + 3);
  auto slash = rest.find('/');
  std::string host = rest.substr(0, slash);
  if (host.empty()) return bad("no host");
  if (rest.find_first_of("?#") != std::string::npos) return bad("no query or fragment allowed");
  Endpoint out{scheme + "://" + host, {}};
  if (slash != std::string::npos) {
    out.path_account = rest.substr(slash + 1);
    if (out.path_account.empty() || out.path_account.find('/') != std::string::npos)
      return bad("a path-style endpoint has exactly one path segment, the account");
  }
  return out;
}

Result<Account> resolve_account(const std::map<std::string, std::string> &env,
                                const std::string &endpoint_override) {
  Account a;
  std::string endpoint;
  const std::string conn = get(env, "AZURE_STORAGE_CONNECTION_STRING");
  if (!util::trim(conn).empty()) {
    const std::string what = "AZURE_STORAGE_CONNECTION_STRING";
    auto parsed = parse_connection_string(conn);
    if (!parsed) return parsed.error();
    const auto &cs = parsed.value();
    a.source = "AZURE_STORAGE_CONNECTION_STRING";
    if (util::to_lower(get(cs, "usedevelopmentstorage")) == "true") {
      a.name = k_dev_account;
      a.key = *util::base64_decode(k_dev_key);
      endpoint = k_dev_endpoint;
      a.source += " (UseDevelopmentStorage)";
    } else {
      a.name = get(cs, "accountname");
      a.sas = strip_sas(get(cs, "sharedaccesssignature"));
      if (auto key = get(cs, "accountkey"); !key.empty()) {
        auto raw = decode_key(key, what + " AccountKey");
        if (!raw) return raw.error();
        a.key = raw.value();
        a.sas.clear(); // a key signs everything a SAS could
      }
      if (a.key.empty() && a.sas.empty())
        return Error(Errc::config_invalid, what + ": neither AccountKey nor SharedAccessSignature is set");
      endpoint = get(cs, "blobendpoint");
      if (endpoint.empty()) {
        if (a.name.empty())
          return Error(Errc::config_invalid, what + ": neither AccountName nor BlobEndpoint is set");
        std::string protocol = get(cs, "defaultendpointsprotocol");
        if (protocol.empty()) protocol = "https";
        if (protocol != "http" && protocol != "https")
          return Error(Errc::config_invalid,
                       what + ": DefaultEndpointsProtocol must be http or https, got '" + protocol + "'");
        std::string suffix = get(cs, "endpointsuffix");
        if (suffix.empty()) suffix = "core.windows.net";
        endpoint = protocol + "://" + a.name + ".blob." + suffix;
      }
      if (!a.key.empty() && a.name.empty())
        return Error(Errc::config_invalid, what + ": AccountKey is set but AccountName is missing");
    }
  } else {
    a.name = util::trim(get(env, "AZURE_STORAGE_ACCOUNT"));
    const std::string key = get(env, "AZURE_STORAGE_KEY");
    const std::string sas = get(env, "AZURE_STORAGE_SAS_TOKEN");
    if (a.name.empty()) {
      if (!key.empty() || !sas.empty())
        return Error(Errc::config_invalid,
                     std::string(key.empty() ? "AZURE_STORAGE_SAS_TOKEN" : "AZURE_STORAGE_KEY") +
                         " is set but AZURE_STORAGE_ACCOUNT is missing");
      return Error(Errc::config_invalid,
                   "no Azure storage credentials: set AZURE_STORAGE_CONNECTION_STRING, or "
                   "AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN");
    }
    if (!key.empty()) {
      auto raw = decode_key(key, "AZURE_STORAGE_KEY");
      if (!raw) return raw.error();
      a.key = raw.value();
      a.source = "AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_KEY";
    } else if (!strip_sas(sas).empty()) {
      a.sas = strip_sas(sas);
      a.source = "AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_SAS_TOKEN";
    } else {
      return Error(
          Errc::config_invalid,
          "AZURE_STORAGE_ACCOUNT is set but neither AZURE_STORAGE_KEY nor AZURE_STORAGE_SAS_TOKEN is");
    }
    endpoint = "https://" + a.name + ".blob.core.windows.net";
  }
  std::string what = "blob endpoint";
  if (!util::trim(endpoint_override).empty()) {
    endpoint = endpoint_override;
    what = "endpoint";
  }
  auto ep = parse_endpoint(endpoint, what);
  if (!ep) return ep.error();
  if (!ep->path_account.empty()) {
    if (a.name.empty()) a.name = ep->path_account;
    if (ep->path_account != a.name)
      return Error(Errc::config_invalid, what + " '" + endpoint + "' names account '" + ep->path_account +
                                             "' but the credentials are for '" + a.name + "'");
    a.endpoint = ep->base + "/" + ep->path_account;
  } else {
    if (a.name.empty()) {
      // A SAS with a BlobEndpoint only: the account is the host's first label.
      auto host = ep->base.substr(ep->base.find("://") + 3);
      a.name = host.substr(0, host.find('.'));
    }
    a.endpoint = ep->base;
  }
  return a;
}

} // namespace lodge::azure
