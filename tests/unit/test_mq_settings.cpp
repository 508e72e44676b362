// An SQS queue's settings as mq::resolve_sqs_options resolves them from what the CLI read.
#include "support.hpp"

#include <lodge/aws/credentials.hpp>
#include <lodge/mq/settings.hpp>
#include <lodge/util/clock.hpp>

using namespace lodge;

namespace {
// The environment of a machine whose AWS shared files are in dir (written or not).
std::map<std::string, std::string> env_in(const test::TempDir &dir) {
  return {{"HOME", dir.path().string()},
          {"AWS_CONFIG_FILE", dir.file("config")},
          {"AWS_SHARED_CREDENTIALS_FILE", dir.file("credentials")}};
}
} // namespace

TEST_CASE("sqs settings: the region from the flag, then AWS_REGION, AWS_DEFAULT_REGION, the profile") {
  test::TempDir dir;
  test::write_file(dir.file("config"), "[default]\nregion = ap-south-1\n");
  test::write_file(dir.file("credentials"),
                   "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = s\n");
  mq::SqsInputs in{env_in(dir), "", "", ""};
  auto o = mq::resolve_sqs_options(in, util::system_clock());
  CHECK(o.region == "ap-south-1");
  CHECK(o.endpoint.empty());
  REQUIRE(o.credentials);
  CHECK(o.credentials->current()->access_key_id == "FILEKEY");
  in.env["AWS_DEFAULT_REGION"] = "eu-west-3";
  CHECK(mq::resolve_sqs_options(in, util::system_clock()).region == "eu-west-3");
  in.env["AWS_REGION"] = "eu-north-1";
  CHECK(mq::resolve_sqs_options(in, util::system_clock()).region == "eu-north-1");
  in.region = "us-west-2";
  CHECK(mq::resolve_sqs_options(in, util::system_clock()).region == "us-west-2");
}

TEST_CASE("sqs settings: AWS_ENDPOINT_URL_SQS over AWS_ENDPOINT_URL; the profile --profile names") {
  test::TempDir dir;
  test::write_file(dir.file("credentials"), "[default]\naws_access_key_id = DEF\naws_secret_access_key = s\n"
                                            "[ci]\naws_access_key_id = CI\naws_secret_access_key = s\n");
  mq::SqsInputs in{env_in(dir), "ci", "flag --profile", ""};
  in.env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:1";
  auto o = mq::resolve_sqs_options(in, util::system_clock());
  CHECK(o.endpoint == "http://127.0.0.1:1");
  CHECK(o.region == "us-east-1"); // nothing named one: open_queue's default
  CHECK(o.credentials->current()->access_key_id == "CI");
  in.env["AWS_ENDPOINT_URL_SQS"] = "http://127.0.0.1:2";
  CHECK(mq::resolve_sqs_options(in, util::system_clock()).endpoint == "http://127.0.0.1:2");
}

TEST_CASE("sqs settings: no credentials, or a profile neither file has, is CONFIG_INVALID") {
  test::TempDir dir;
  mq::SqsInputs in{env_in(dir), "", "", ""};
  in.env["AWS_EC2_METADATA_DISABLED"] = "true";
  CHECK(test::throws_errc([&] { (void)mq::resolve_sqs_options(in, util::system_clock()); },
                          Errc::config_invalid, "no S3 credentials"));
  in.profile = "nope";
  in.profile_source = "flag --profile";
  CHECK(test::throws_errc([&] { (void)mq::resolve_sqs_options(in, util::system_clock()); },
                          Errc::config_invalid, "The config profile (nope) could not be found"));
}
