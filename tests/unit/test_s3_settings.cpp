#include "support.hpp"

#include <lodge/error.hpp>
#include <lodge/s3/settings.hpp>
#include <lodge/store/store.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {
using Env = std::map<std::string, std::string>;

// An environment whose HOME has no ~/.aws: only what a test gives is read.
Env empty_home(const test::TempDir &dir) {
  return {{"HOME", dir.path().string()}};
}
} // namespace

TEST_CASE("s3 settings: a key an s3:// store does not read is an error naming it and the known ones") {
  test::TempDir dir;
  CHECK(test::throws_errc(
      [&] {
        (void)s3::parse_s3_settings({{"regoin", {"x", "file /c.json"}}}, empty_home(dir));
      },
      Errc::config_invalid,
      "regoin: not a setting of an s3:// store (known: endpoint, region, ca_bundle, profile, "
      "tag_state)"));
}

TEST_CASE("s3 settings: tag_state is true or false, anything else is the configuration's error") {
  test::TempDir dir;
  CHECK(s3::parse_s3_settings({{"tag_state", {"true", "file /c.json"}}}, empty_home(dir)).tag_state);
  CHECK_FALSE(s3::parse_s3_settings({}, empty_home(dir)).tag_state);
  CHECK(test::throws_errc(
      [&] {
        (void)s3::parse_s3_settings({{"tag_state", {"\"yes\"", "file /c.json"}}}, empty_home(dir));
      },
      Errc::config_invalid, R"(tag_state: expected true or false (got "yes"))"));
}

TEST_CASE("s3 settings: AWS_ENDPOINT_URL(_S3) beat the file, never LODGE_ENDPOINT or the flag") {
  test::TempDir dir;
  auto env = empty_home(dir);
  env["AWS_ENDPOINT_URL"] = "http://aws-any:1";
  env["AWS_ENDPOINT_URL_S3"] = "http://aws-s3:1";
  auto from_file = s3::parse_s3_settings({{"endpoint", {"http://file:1", "file /c.json"}}}, env);
  CHECK(from_file.endpoint == "http://aws-s3:1");
  CHECK(from_file.sources.at("endpoint") == "env AWS_ENDPOINT_URL_S3");
  auto from_flag = s3::parse_s3_settings({{"endpoint", {"http://flag:1", "flag --endpoint"}}}, env);
  CHECK(from_flag.endpoint == "http://flag:1");
  CHECK(from_flag.sources.at("endpoint") == "flag --endpoint");
  env["AWS_IGNORE_CONFIGURE_ENDPOINT_URLS"] = "true"; // the CLI drops the AWS endpoints, env and file
  auto ignored = s3::parse_s3_settings({{"endpoint", {"http://file:1", "file /c.json"}}}, env);
  CHECK(ignored.endpoint == "http://file:1");
  CHECK(ignored.sources.at("endpoint") == "file /c.json");
}

TEST_CASE("s3 settings: nothing configured assumes us-east-1 and says so; every key has a source") {
  test::TempDir dir;
  auto s = s3::parse_s3_settings({}, empty_home(dir));
  CHECK(s.region == "us-east-1");
  CHECK(s.region_assumed);
  for (const char *k :
       {"endpoint", "region", "ca_bundle", "profile", "addressing_style", "max_attempts", "retry_mode"})
    CHECK(s.sources.at(k) == "default");
  CHECK_FALSE(
      s3::parse_s3_settings({{"region", {"eu-west-3", "flag --region"}}}, empty_home(dir)).region_assumed);
  auto j = s3::to_json(s);
  CHECK(j["region"] == nlohmann::json{{"value", "us-east-1"}, {"source", "default"}});
  CHECK(j["endpoint"]["value"].is_null());
}

TEST_CASE("s3 settings: AWS_MAX_ATTEMPTS, AWS_RETRY_MODE and the profile's addressing_style are validated") {
  test::TempDir dir;
  auto env = empty_home(dir);
  env["AWS_MAX_ATTEMPTS"] = "0";
  CHECK(test::throws_errc([&] { (void)s3::parse_s3_settings({}, env); }, Errc::config_invalid,
                          "env AWS_MAX_ATTEMPTS: max_attempts: expected an integer from 1 to 100"));
  env["AWS_MAX_ATTEMPTS"] = "7";
  env["AWS_RETRY_MODE"] = "Adaptive";
  auto s = s3::parse_s3_settings({}, env);
  CHECK(s.max_attempts == 7);
  CHECK(s.retry_mode == "adaptive");
  test::write_file(dir.file("config"), "[default]\ns3 =\n  addressing_style = sideways\n");
  env["AWS_CONFIG_FILE"] = dir.file("config");
  CHECK(test::throws_errc([&] { (void)s3::parse_s3_settings({}, env); }, Errc::config_invalid,
                          "expected auto, path or virtual, got 'sideways'"));
}

TEST_CASE("store settings: each scheme resolves its own; az:// ignores S3's keys and AWS endpoints") {
  test::TempDir dir;
  auto env = empty_home(dir);
  env["AWS_ENDPOINT_URL"] = "http://aws:1";
  env["AWS_REGION"] = "eu-west-3";
  store::Settings given{{"region", {"ap-south-1", "file /c.json"}},
                        {"tag_state", {"true", "file /c.json"}},
                        {"profile", {"nobody", "flag --profile"}}};
  auto az = store::resolve_settings("az://container/p", given, env);
  CHECK(az->endpoint().empty());
  CHECK_FALSE(az->tag_state());
  CHECK(az->notice().empty());
  nlohmann::json shown;
  az->to_json(shown);
  CHECK(shown["region"] == "eu-west-3"); // shown as given, env over the file
  CHECK(shown["profile"] == "nobody");
  CHECK(shown["tag_state"] == true);
  CHECK_FALSE(shown.contains("s3"));
  env["LODGE_ENDPOINT"] = "http://127.0.0.1:10000/devstoreaccount1";
  CHECK(store::resolve_settings("az://container/p", given, env)->endpoint() ==
        "http://127.0.0.1:10000/devstoreaccount1");

  // An s3:// store reads every one of them, the named profile included.
  CHECK(test::throws_errc([&] { (void)store::resolve_settings("s3://bucket/p", given, env); },
                          Errc::config_invalid, "nobody"));
  given.erase("profile");
  env.erase("LODGE_ENDPOINT");
  auto s3 = store::resolve_settings("s3://bucket/p", given, env);
  CHECK(s3->endpoint() == "http://aws:1");
  CHECK(s3->tag_state());
  nlohmann::json j;
  s3->to_json(j);
  CHECK(j["s3"]["region"] == nlohmann::json{{"value", "eu-west-3"}, {"source", "env AWS_REGION"}});
}

TEST_CASE("store settings: the keys a configuration may carry are the union of the schemes'") {
  std::vector<std::string> names;
  for (const auto &k : store::setting_keys())
    names.emplace_back(k.name);
  CHECK(names == std::vector<std::string>{"endpoint", "region", "ca_bundle", "profile", "tag_state"});
  for (const auto &k : store::setting_keys())
    CHECK(k.boolean == (std::string(k.name) == "tag_state"));
}
