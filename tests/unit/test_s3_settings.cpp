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

namespace {
// The settings of an s3:// store with the AWS config file `config` and profile `profile`.
s3::S3Settings with_profile(const test::TempDir &dir, const std::string &config, Env env = {},
                            const std::string &profile = "ci") {
  test::write_file(dir.file("config"), config);
  env["HOME"] = dir.path().string();
  env["AWS_CONFIG_FILE"] = dir.file("config");
  return s3::parse_s3_settings({{"profile", {profile, "flag --profile"}}}, env);
}
} // namespace

TEST_CASE("s3 settings: the profile's s3 = transfer keys, each with its file, profile and key") {
  test::TempDir dir;
  auto s =
      with_profile(dir, "[profile ci]\ns3 =\n  max_concurrent_requests = 20\n  multipart_threshold = 8MB\n"
                        "  multipart_chunksize = 5MB\n  max_bandwidth = 1048576B/s\n");
  CHECK(s.max_concurrent_requests == 20);
  CHECK(s.multipart_threshold == 8ULL << 20);
  CHECK(s.multipart_chunksize == 5ULL << 20);
  CHECK(s.max_bandwidth == 1048576);
  const std::string at = "file " + dir.file("config") + " [profile ci] s3.";
  CHECK(s.sources.at("multipart_chunksize") == at + "multipart_chunksize");
  CHECK(s.sources.at("max_bandwidth") == at + "max_bandwidth");
  auto j = s3::to_json(s);
  CHECK(j["max_concurrent_requests"] ==
        nlohmann::json{{"value", 20}, {"source", at + "max_concurrent_requests"}});
  CHECK(s.request_checksum_calculation == "when_supported");
  CHECK(s.sends_checksums());

  // None set: nothing, every one null in lodge config.
  auto none = with_profile(dir, "[profile ci]\nregion = eu-west-1\n");
  CHECK(none.max_concurrent_requests == 0);
  CHECK(none.multipart_chunksize == 0);
  CHECK(none.max_bandwidth == 0);
  CHECK(s3::to_json(none)["multipart_chunksize"]["value"].is_null());
  CHECK(s3::to_json(none)["request_checksum_calculation"] ==
        nlohmann::json{{"value", "when_supported"}, {"source", "default"}});
}

TEST_CASE("s3 settings: a bad s3 = value is CONFIG_INVALID naming the file, the profile and the key") {
  test::TempDir dir;
  const std::string at = "file " + dir.file("config") + " [profile ci] s3.";
  struct Bad {
    const char *line, *key, *why;
  };
  for (const auto &b : {Bad{"max_concurrent_requests = 0", "max_concurrent_requests", "from 1 to 256"},
                        Bad{"max_concurrent_requests = many", "max_concurrent_requests", "got 'many'"},
                        Bad{"max_concurrent_requests = 1000", "max_concurrent_requests", "from 1 to 256"},
                        Bad{"multipart_chunksize = 4MB", "multipart_chunksize", "parts of 5MB"},
                        Bad{"multipart_chunksize = 6GB", "multipart_chunksize", "parts of 5MB"},
                        Bad{"multipart_chunksize = 8 MiBs", "multipart_chunksize", "a size like 8MB"},
                        Bad{"multipart_threshold = 10m", "multipart_threshold", "got '10m'"},
                        Bad{"max_bandwidth = 50MB", "max_bandwidth", "bytes per second"},
                        Bad{"max_bandwidth = 0", "max_bandwidth", "bytes per second"}}) {
    CAPTURE(b.line);
    CHECK(test::throws_errc(
        [&] { (void)with_profile(dir, std::string("[profile ci]\ns3 =\n  ") + b.line + "\n"); },
        Errc::config_invalid, at + b.key + ": "));
    CHECK(test::throws_errc(
        [&] { (void)with_profile(dir, std::string("[profile ci]\ns3 =\n  ") + b.line + "\n"); },
        Errc::config_invalid, b.why));
  }
}

TEST_CASE("s3 settings: request_checksum_calculation, the environment over the profile") {
  test::TempDir dir;
  const std::string cfg = "[profile ci]\nrequest_checksum_calculation = WHEN_REQUIRED\n";
  auto s = with_profile(dir, cfg);
  CHECK(s.request_checksum_calculation == "when_required");
  CHECK_FALSE(s.sends_checksums());
  CHECK(s.sources.at("request_checksum_calculation") == "file " + dir.file("config") + " [profile ci]");
  auto e = with_profile(dir, cfg, {{"AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported"}});
  CHECK(e.sends_checksums());
  CHECK(e.sources.at("request_checksum_calculation") == "env AWS_REQUEST_CHECKSUM_CALCULATION");
  CHECK(test::throws_errc(
      [&] {
        (void)with_profile(dir, cfg, {{"AWS_REQUEST_CHECKSUM_CALCULATION", "never"}});
      },
      Errc::config_invalid,
      "env AWS_REQUEST_CHECKSUM_CALCULATION: request_checksum_calculation: expected "
      "when_supported or when_required, got 'never'"));
  CHECK(test::throws_errc(
      [&] { (void)with_profile(dir, "[profile ci]\nrequest_checksum_calculation = sometimes\n"); },
      Errc::config_invalid, "file " + dir.file("config") + " [profile ci]: request_checksum_calculation"));
}

TEST_CASE("store settings: an s3:// store hands the profile's transfer keys on as its defaults") {
  test::TempDir dir;
  test::write_file(dir.file("config"), "[profile ci]\ns3 =\n  max_concurrent_requests = 3\n"
                                       "  multipart_chunksize = 8MB\n  max_bandwidth = 2MB/s\n");
  Env env{{"HOME", dir.path().string()}, {"AWS_CONFIG_FILE", dir.file("config")}};
  store::Settings given{{"profile", {"ci", "flag --profile"}}};
  auto d = store::resolve_settings("s3://bucket/p", given, env)->transfer_defaults();
  CHECK(d.jobs == 3);
  CHECK(d.part_size == 8ULL << 20);
  CHECK(d.multipart_threshold == 0);
  CHECK(d.bandwidth == 2ULL << 20);
  CHECK(d.sources.at("part_size") == "file " + dir.file("config") + " [profile ci] s3.multipart_chunksize");
  CHECK_FALSE(d.sources.contains("multipart_threshold"));
  // Another scheme has no AWS profile: nothing.
  auto az = store::resolve_settings("az://container/p", {}, env)->transfer_defaults();
  CHECK(az.jobs == 0);
  CHECK(az.sources.empty());
}
