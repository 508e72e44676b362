#include "support.hpp"

#include <lodge/azure/auth.hpp>
#include <lodge/util/strings.hpp>

using namespace lodge;
using Env = std::map<std::string, std::string>;

namespace {
Error error_of(const Env &env, const std::string &endpoint = {}) {
  auto r = azure::resolve_account(env, endpoint);
  REQUIRE_FALSE(r);
  return r.error();
}
} // namespace

TEST_CASE("connection string: elements split on ';' and the first '=', names case-insensitive") {
  auto cs =
      azure::parse_connection_string("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;;");
  REQUIRE(cs);
  CHECK(cs->at("accountname") == "acct");
  CHECK(cs->at("accountkey") == "a2V5");
  CHECK(cs->at("defaultendpointsprotocol") == "https");
  auto sas = azure::parse_connection_string(
      "BlobEndpoint=https://x.blob.core.windows.net;SharedAccessSignature=sv=1&sig=a%3D");
  REQUIRE(sas);
  CHECK(sas->at("sharedaccesssignature") == "sv=1&sig=a%3D");
  auto bad = azure::parse_connection_string("AccountName=acct;garbage");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::config_invalid);
  CHECK(bad.error().message.find("AZURE_STORAGE_CONNECTION_STRING") != std::string::npos);
}

TEST_CASE("connection string with a key: endpoint from protocol and suffix, key decoded") {
  auto a = azure::resolve_account(
      {{"AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;"
                                           "EndpointSuffix=core.chinacloudapi.cn"}},
      "");
  REQUIRE(a);
  CHECK(a->name == "acct");
  CHECK(a->key == "key");
  CHECK(a->sas.empty());
  CHECK(a->endpoint == "http://acct.blob.core.chinacloudapi.cn");
  auto d =
      azure::resolve_account({{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct;AccountKey=a2V5"}}, "");
  REQUIRE(d);
  CHECK(d->endpoint == "https://acct.blob.core.windows.net");
}

TEST_CASE("connection string: BlobEndpoint wins, a path-style one names the account") {
  auto a = azure::resolve_account(
      {{"AZURE_STORAGE_CONNECTION_STRING",
        "AccountName=devstoreaccount1;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/"
        "devstoreaccount1/"}},
      "");
  REQUIRE(a);
  CHECK(a->endpoint == "http://127.0.0.1:10000/devstoreaccount1");
  auto sas = azure::resolve_account(
      {{"AZURE_STORAGE_CONNECTION_STRING",
        "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=?sv=x&sig=y"}},
      "");
  REQUIRE(sas);
  CHECK(sas->name == "acct");
  CHECK(sas->key.empty());
  CHECK(sas->sas == "sv=x&sig=y");
}

TEST_CASE("UseDevelopmentStorage=true is Azurite's well-known account") {
  auto a = azure::resolve_account({{"AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"}}, "");
  REQUIRE(a);
  CHECK(a->name == "devstoreaccount1");
  CHECK(a->endpoint == "http://127.0.0.1:10000/devstoreaccount1");
  CHECK(a->key == *util::base64_decode(azure::k_dev_key));
  // --endpoint moves it to the port the test's Azurite listens on.
  auto moved = azure::resolve_account({{"AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"}},
                                      "http://127.0.0.1:41234/devstoreaccount1");
  REQUIRE(moved);
  CHECK(moved->endpoint == "http://127.0.0.1:41234/devstoreaccount1");
}

TEST_CASE("the connection string comes before AZURE_STORAGE_ACCOUNT") {
  auto a = azure::resolve_account({{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=one;AccountKey=a2V5"},
                                   {"AZURE_STORAGE_ACCOUNT", "two"},
                                   {"AZURE_STORAGE_KEY", "a2V5"}},
                                  "");
  REQUIRE(a);
  CHECK(a->name == "one");
  CHECK(a->source == "AZURE_STORAGE_CONNECTION_STRING");
}

TEST_CASE("AZURE_STORAGE_ACCOUNT with a key, else with a SAS token") {
  auto k = azure::resolve_account({{"AZURE_STORAGE_ACCOUNT", "acct"},
                                   {"AZURE_STORAGE_KEY", "a2V5"},
                                   {"AZURE_STORAGE_SAS_TOKEN", "sv=1&sig=2"}},
                                  "");
  REQUIRE(k);
  CHECK(k->key == "key");
  CHECK(k->sas.empty());
  CHECK(k->endpoint == "https://acct.blob.core.windows.net");
  auto s = azure::resolve_account(
      {{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=2"}}, "");
  REQUIRE(s);
  CHECK(s->key.empty());
  CHECK(s->sas == "sv=1&sig=2");
  CHECK(s->source == "AZURE_STORAGE_ACCOUNT + AZURE_STORAGE_SAS_TOKEN");
}

TEST_CASE("missing pieces are CONFIG_INVALID naming the variable") {
  auto none = error_of({});
  CHECK(none.code == Errc::config_invalid);
  CHECK(none.message.find("AZURE_STORAGE_CONNECTION_STRING") != std::string::npos);
  CHECK(none.message.find("AZURE_STORAGE_ACCOUNT") != std::string::npos);
  auto no_key = error_of({{"AZURE_STORAGE_ACCOUNT", "acct"}});
  CHECK(no_key.code == Errc::config_invalid);
  CHECK(no_key.message.find("AZURE_STORAGE_KEY") != std::string::npos);
  auto no_account = error_of({{"AZURE_STORAGE_KEY", "a2V5"}});
  CHECK(no_account.message.find("AZURE_STORAGE_ACCOUNT is missing") != std::string::npos);
  auto cs_no_cred = error_of({{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct"}});
  CHECK(cs_no_cred.message.find("neither AccountKey nor SharedAccessSignature") != std::string::npos);
  auto cs_no_name = error_of({{"AZURE_STORAGE_CONNECTION_STRING", "AccountKey=a2V5"}});
  CHECK(cs_no_name.message.find("AccountName") != std::string::npos);
}

TEST_CASE("a key that is not base64 is CONFIG_INVALID naming where it came from") {
  auto e = error_of({{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_KEY", "not base64!"}});
  CHECK(e.code == Errc::config_invalid);
  CHECK(e.message.find("AZURE_STORAGE_KEY") != std::string::npos);
  CHECK(e.message.find("base64") != std::string::npos);
  auto cs = error_of({{"AZURE_STORAGE_CONNECTION_STRING", "AccountName=a;AccountKey=abc"}});
  CHECK(cs.message.find("AccountKey") != std::string::npos);
}

TEST_CASE("endpoints: http(s) only, at most the account as path, the account must agree") {
  auto bad_scheme = error_of({{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_KEY", "a2V5"}}, "ftp://x");
  CHECK(bad_scheme.code == Errc::config_invalid);
  CHECK(bad_scheme.message.find("ftp://x") != std::string::npos);
  auto deep =
      error_of({{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_KEY", "a2V5"}}, "http://h/acct/more");
  CHECK(deep.message.find("one path segment") != std::string::npos);
  auto other =
      error_of({{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_KEY", "a2V5"}}, "http://h:1/other");
  CHECK(other.message.find("'other'") != std::string::npos);
  auto ok = azure::resolve_account({{"AZURE_STORAGE_ACCOUNT", "acct"}, {"AZURE_STORAGE_KEY", "a2V5"}},
                                   "https://proxy.example:8443");
  REQUIRE(ok);
  CHECK(ok->endpoint == "https://proxy.example:8443");
}
