#include "fake_transport.hpp"
#include "support.hpp"

#include <atomic>
#include <condition_variable>
#include <lodge/aws/aws_config.hpp>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/aws/credentials.hpp>
#include <mutex>
#include <sys/stat.h>
#include <thread>

using namespace lodge;
using lodge::aws::Env;

namespace {
aws::AwsShared shared(const std::string &config, const std::string &credentials, const std::string &profile) {
  return aws::AwsShared(aws::parse_ini(config, "/c/config"), aws::parse_ini(credentials, "/c/credentials"),
                        profile, "test");
}

std::string error_of(const std::string &text) {
  try {
    (void)aws::parse_ini(text, "/etc/aws/config");
  } catch (const LodgeError &e) {
    CHECK(e.error().code == Errc::config_invalid);
    return e.error().message;
  }
  return "(no error)";
}
} // namespace

TEST_CASE("ini: sections, comments, whitespace and key case") {
  auto f = aws::parse_ini("# a comment\n; another\n\n[default]\nregion=eu-west-1\n"
                          "  \t\n[profile ci]   # after a header\n"
                          "Region = us-west-2 ; inline\noutput: json\nendpoint_url = http://h:9000#frag\n"
                          "note = first\n  second\n",
                          "/x");
  REQUIRE(f.find("default"));
  CHECK(f.find("default")->values.at("region").value == "eu-west-1");
  const auto *ci = f.find("profile ci");
  REQUIRE(ci);
  CHECK(ci->line == 7);
  CHECK(ci->values.at("region").value == "us-west-2");
  CHECK(ci->values.at("region").line == 8);
  CHECK(ci->values.at("output").value == "json");
  // An indented line under a key with a value continues it, as configparser does.
  CHECK(ci->values.at("note").value == "first\nsecond");
  // A # not preceded by whitespace is part of the value.
  CHECK(ci->values.at("endpoint_url").value == "http://h:9000#frag");
}

TEST_CASE("ini: indented sub-settings under a key without a value") {
  auto f = aws::parse_ini("[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n"
                          "  addressing_style = path # comment\n\ndynamodb =\n\tendpoint_url = http://d\n",
                          "/x");
  const auto *s = f.find("services local");
  REQUIRE(s);
  CHECK(s->values.at("s3").value.empty());
  CHECK(s->values.at("s3").sub.at("endpoint_url") == "http://127.0.0.1:9000");
  CHECK(s->values.at("s3").sub.at("addressing_style") == "path");
  CHECK(s->values.at("dynamodb").sub.at("endpoint_url") == "http://d");
}

TEST_CASE("ini: malformed lines are errors naming the file and line, never the text") {
  CHECK(error_of("[default]\nregion = x\nAKIAEXAMPLESECRET\n") ==
        "/etc/aws/config:3: expected [section], 'name = value' or a comment");
  CHECK(error_of("region = x\n") == "/etc/aws/config:1: a setting before any [section] header");
  CHECK(error_of("[default\n") == "/etc/aws/config:1: a section header without its closing ']'");
  CHECK(error_of("[]\n") == "/etc/aws/config:1: an empty section name");
  CHECK(error_of("[a]\ns3 =\n  no equals here\n") ==
        "/etc/aws/config:3: expected an indented 'name = value' sub-setting");
  CHECK(error_of("[a]\n = v\n") == "/etc/aws/config:2: a setting without a name");
}

TEST_CASE("ini: a missing file is no settings; an unreadable one is an error naming it") {
  test::TempDir dir;
  auto missing = aws::read_ini(dir.file("nope"));
  CHECK_FALSE(missing.exists);
  CHECK(missing.sections.empty());
  auto e = dir.file("adir");
  ::mkdir(e.c_str(), 0700);
  try {
    (void)aws::read_ini(e);
    FAIL("a directory was read");
  } catch (const LodgeError &err) {
    CHECK(err.error().message == e + ": cannot read: is a directory");
  }
  test::write_file(dir.file("bad"), "[default]\nregion\n");
  try {
    (void)aws::read_ini(dir.file("bad"));
    FAIL("a malformed file was accepted");
  } catch (const LodgeError &err) {
    CHECK(err.error().message == dir.file("bad") + ":2: expected [section], 'name = value' or a comment");
  }
}

TEST_CASE("aws profile: [profile P] and [default] in config, [P] in credentials, credentials win") {
  auto s = shared(
      "[default]\nregion = eu-west-1\n[profile ci]\nregion = eu-central-1\naws_access_key_id = CFG\n"
      "s3 =\n  addressing_style = virtual\nservices = loc\n[services loc]\ns3 =\n  endpoint_url = http://e\n",
      "[ci]\naws_access_key_id = CRED\n[profile ci]\nregion = wrong\n", "ci");
  CHECK(s.get("region")->value == "eu-central-1");
  CHECK(s.get("region")->source == "file /c/config [profile ci]");
  CHECK(s.get("aws_access_key_id")->value == "CRED");
  CHECK(s.get("aws_access_key_id")->source == "file /c/credentials [ci]");
  CHECK(s.sub("s3", "addressing_style")->value == "virtual");
  CHECK(s.service("s3", "endpoint_url")->value == "http://e");
  CHECK(s.service("s3", "endpoint_url")->source ==
        "file /c/config [services loc] s3.endpoint_url (services = loc in [profile ci])");
  auto d = shared("[profile default]\nregion = ap-south-1\ns3 = addressing_style = path\n", "", "default");
  CHECK(d.get("region")->value == "ap-south-1");
  CHECK(d.sub("s3", "addressing_style")->value == "path");
  CHECK_FALSE(d.service("s3", "endpoint_url"));
}

TEST_CASE("aws profile: a named profile neither file has is an error naming it") {
  test::TempDir dir;
  test::write_file(dir.file("config"), "[profile other]\n");
  std::map<std::string, std::string> env{{"AWS_CONFIG_FILE", dir.file("config")},
                                         {"AWS_SHARED_CREDENTIALS_FILE", dir.file("credentials")},
                                         {"AWS_PROFILE", "x"}};
  try {
    (void)aws::AwsShared::load({env, "", ""});
    FAIL("a missing profile was accepted");
  } catch (const LodgeError &e) {
    CHECK(e.error().message.rfind("The config profile (x) could not be found (named by env AWS_PROFILE", 0) ==
          0);
  }
  env.erase("AWS_PROFILE");
  env["AWS_DEFAULT_PROFILE"] = "other";
  CHECK(aws::AwsShared::load({env, "", ""}).profile() == "other");
  env.erase("AWS_DEFAULT_PROFILE");
  CHECK(aws::AwsShared::load({env, "", ""}).profile() == "default"); // may be absent
  env["HOME"] = dir.path().string();
  env["AWS_CONFIG_FILE"] = "~/config";
  CHECK(aws::AwsShared::load({env, "", ""}).config_file().path == dir.path().string() + "/config");
}

TEST_CASE("credential chain: environment first, then the credentials file, then the config file") {
  auto s = shared("[profile ci]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n",
                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n"
                  "[ci]\naws_access_key_id=CIKEY\naws_secret_access_key=cisecret\naws_session_token=tok\n",
                  "ci");
  auto c = aws::resolve_credential_chain({}, s);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "CIKEY");
  CHECK(c.credentials->session_token == "tok");
  CHECK(c.credentials->source == "file /c/credentials [ci]");
  REQUIRE(c.steps.size() == 3);
  CHECK(c.steps[0].why == "AWS_ACCESS_KEY_ID not set");
  CHECK(c.steps[2].used);

  auto only_config = shared("[profile ci]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n",
                            "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n", "ci");
  c = aws::resolve_credential_chain({}, only_config);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "CFGKEY");
  CHECK(c.steps[2].why == "no profile section for it");

  std::map<std::string, std::string> env{{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                                         {"AWS_SECRET_ACCESS_KEY", "envsecret"}};
  c = aws::resolve_credential_chain(env, s);
  CHECK(c.credentials->access_key_id == "ENVKEY");
  CHECK(c.credentials->source == "environment");

  auto none = aws::resolve_credential_chain({}, shared("", "", "nope"));
  REQUIRE_FALSE(none.credentials.ok());
  CHECK(none.credentials.error().code == Errc::config_invalid);
}

TEST_CASE("credential chain: --profile takes the profile's keys over the environment's, as aws --profile") {
  Env env{{"AWS_ACCESS_KEY_ID", "ENVKEY"}, {"AWS_SECRET_ACCESS_KEY", "envsecret"}};
  auto creds =
      aws::parse_ini("[ci]\naws_access_key_id = CIKEY\naws_secret_access_key = c\n", "/c/credentials");
  aws::AwsShared by_flag(aws::parse_ini("", "/c/config"), creds, "ci", "flag --profile");
  auto c = aws::resolve_credential_chain(env, by_flag);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "CIKEY");
  CHECK(c.steps[0].why.rfind("skipped: --profile chooses", 0) == 0);
  // AWS_PROFILE does not: the environment's keys still come first.
  aws::AwsShared by_env(aws::parse_ini("", "/c/config"), creds, "ci", "env AWS_PROFILE");
  CHECK(aws::resolve_credential_chain(env, by_env).credentials->access_key_id == "ENVKEY");
  // A --profile without keys is no credentials, and the error says why the environment's were not taken.
  aws::AwsShared empty(aws::parse_ini("[profile ci]\nregion = x\n", "/c/config"),
                       aws::parse_ini("", "/c/credentials"), "ci", "flag --profile");
  auto none = aws::resolve_credential_chain(env, empty);
  REQUIRE_FALSE(none.credentials.ok());
  CHECK(none.credentials.error().message.find(
            "AWS_ACCESS_KEY_ID is set, but --profile takes the profile's") != std::string::npos);
}

TEST_CASE("credential chain: partial credentials are an error naming what is missing") {
  auto s = shared("", "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n", "default");
  auto c = aws::resolve_credential_chain({{"AWS_ACCESS_KEY_ID", "ENVKEY"}}, s);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message == "partial credentials found in the environment: AWS_ACCESS_KEY_ID is "
                                         "set but AWS_SECRET_ACCESS_KEY is missing");
  c = aws::resolve_credential_chain({{"AWS_SECRET_ACCESS_KEY", "s"}}, s);
  CHECK(c.credentials.error().message == "partial credentials found in the environment: "
                                         "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is missing");
  auto half = shared("", "[default]\naws_access_key_id = DEF\n", "default");
  c = aws::resolve_credential_chain({}, half);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message ==
        "partial credentials in [default] of /c/credentials: aws_secret_access_key is missing");
}

TEST_CASE("credential chain: a configured provider that fails is an error, never another identity") {
  auto s = shared("[profile ci]\ncredential_process = /nonexistent/creds\n",
                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n", "ci");
  auto c = aws::resolve_credential_chain({}, s);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message.rfind(
            "credential_process in file /c/config [profile ci]: the program exited with status 127", 0) == 0);
  // A web identity token without its role is an error, not the files' static keys.
  auto w = aws::resolve_credential_chain(
      {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}},
      shared("", "[default]\naws_access_key_id = A\naws_secret_access_key = B\n", "default"));
  REQUIRE_FALSE(w.credentials.ok());
  CHECK(w.credentials.error().message.rfind("AWS_WEB_IDENTITY_TOKEN_FILE is set but no role", 0) == 0);
  auto sso = aws::resolve_credential_chain(
      {}, shared("[profile ci]\nsso_session = corp\n",
                 "[ci]\naws_access_key_id = A\naws_secret_access_key = B\n", "ci"));
  REQUIRE_FALSE(sso.credentials.ok());
  CHECK(sso.credentials.error().message.rfind("sso_session in file /c/config [profile ci]: lodge does not "
                                              "implement",
                                              0) == 0);
}

namespace {
using lodge::testing::ForwardingTransport;
using lodge::testing::ScriptedTransport;

ScriptedTransport::Step step(long status, std::string body = {}, int curl_error = 0) {
  ScriptedTransport::Step s;
  s.status = status;
  s.body = std::move(body);
  s.curl_error = curl_error;
  return s;
}

// The chain's network: every call (STS, container, IMDS) answered from one script.
struct Net {
  ScriptedTransport t;
  std::vector<int64_t> metadata_timeouts;
  aws::ChainAccess access;
  Net() {
    access.sts_endpoint = "http://sts.test:9";
    access.region = "eu-west-1";
    access.sts_transport = [this] { return std::make_unique<ForwardingTransport>(t); };
    access.metadata_transport = [this](int64_t ms) {
      metadata_timeouts.push_back(ms);
      return std::make_unique<ForwardingTransport>(t);
    };
    access.now_ms = [] { return int64_t{1'780'000'000'000}; };
  }
  [[nodiscard]] std::string header(size_t i, const std::string &name) const {
    for (const auto &[k, v] : t.seen.at(i).headers)
      if (k == name) return v;
    return "(none)";
  }
};

std::string assume_role_answer(const std::string &id) {
  return "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult>"
         "<Credentials><AccessKeyId>" +
         id + "</AccessKeyId><SecretAccessKey>sec-" + id + "</SecretAccessKey><SessionToken>tok-" + id +
         "</SessionToken><Expiration>2026-12-02T10:00:00Z</Expiration></Credentials></AssumeRoleResult>"
         "</AssumeRoleResponse>";
}

bool has(const std::string &hay, const std::string &needle) {
  INFO(hay, " should hold ", needle);
  return hay.find(needle) != std::string::npos;
}
} // namespace

TEST_CASE("credential chain: role_arn + source_profile assumes the role, signed for sts by the source") {
  Net net;
  net.t.script = {step(200, assume_role_answer("ASIAROLE"))};
  auto s = shared("[profile ci]\nrole_arn = arn:aws:iam::1:role/deploy\nsource_profile = base\n"
                  "external_id = ext-7\nduration_seconds = 1800\nrole_session_name = nightly\n",
                  "[base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = basesecret\n"
                  "[ci]\naws_access_key_id = AKIDCI\naws_secret_access_key = cisecret\n",
                  "ci");
  auto c = aws::resolve_credential_chain({}, s, &net.access);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "ASIAROLE"); // never the profile's own static keys
  CHECK(c.credentials->session_token == "tok-ASIAROLE");
  CHECK(c.credentials->expires_ms == 1'796'205'600'000);
  REQUIRE(net.t.seen.size() == 1);
  CHECK(net.t.seen[0].method == "POST");
  CHECK(net.t.seen[0].url == "http://sts.test:9/");
  CHECK(has(net.header(0, "authorization"), "Credential=AKIDBASE/20260528/eu-west-1/sts/aws4_request"));
  const auto &body = net.t.bodies_sent[0];
  CHECK(has(body, "Action=AssumeRole&"));
  CHECK(has(body, "RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fdeploy"));
  CHECK(has(body, "RoleSessionName=nightly"));
  CHECK(has(body, "DurationSeconds=1800"));
  CHECK(has(body, "ExternalId=ext-7"));
  REQUIRE(c.steps.size() == 2);
  CHECK(c.steps[1].used);
  CHECK(c.steps[1].why ==
        "STS AssumeRole for arn:aws:iam::1:role/deploy at http://sts.test:9, as static keys "
        "of [base]");
}

TEST_CASE("credential chain: roles chain through source_profile, each signed by the one before") {
  Net net;
  net.t.script = {step(200, assume_role_answer("ASIAMID")), step(200, assume_role_answer("ASIATOP"))};
  auto s = shared("[profile top]\nrole_arn = arn:aws:iam::1:role/top\nsource_profile = mid\n"
                  "[profile mid]\nrole_arn = arn:aws:iam::1:role/mid\nsource_profile = base\n"
                  "[profile base]\naws_access_key_id = AKIDBASE\naws_secret_access_key = b\n",
                  "", "top");
  auto c = aws::resolve_credential_chain({}, s, &net.access);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "ASIATOP");
  REQUIRE(net.t.seen.size() == 2);
  CHECK(has(net.t.bodies_sent[0], "role%2Fmid"));
  CHECK(has(net.header(0, "authorization"), "Credential=AKIDBASE/"));
  CHECK(net.header(0, "x-amz-security-token") == "(none)");
  CHECK(has(net.t.bodies_sent[1], "role%2Ftop"));
  CHECK(has(net.header(1, "authorization"), "Credential=ASIAMID/"));
  CHECK(net.header(1, "x-amz-security-token") == "tok-ASIAMID");
  CHECK(has(net.t.bodies_sent[1], "RoleSessionName=lodge-1780000000"));

  // A profile naming itself uses its own static keys for its role.
  Net self;
  self.t.script = {step(200, assume_role_answer("ASIASELF"))};
  auto own = shared("",
                    "[me]\naws_access_key_id = AKIDME\naws_secret_access_key = m\n"
                    "role_arn = arn:aws:iam::1:role/me\nsource_profile = me\n",
                    "me");
  auto o = aws::resolve_credential_chain({}, own, &self.access);
  REQUIRE(o.credentials.ok());
  CHECK(o.credentials->access_key_id == "ASIASELF");
  CHECK(has(self.header(0, "authorization"), "Credential=AKIDME/"));
}

TEST_CASE("credential chain: a source_profile cycle and other role mistakes are errors, with nothing sent") {
  auto error_for = [](const std::string &config, const std::string &profile, const Env &env = {}) {
    Net net;
    auto c = aws::resolve_credential_chain(env, shared(config, "", profile), &net.access);
    CHECK(net.t.seen.empty());
    REQUIRE_FALSE(c.credentials.ok());
    CHECK(c.credentials.error().code == Errc::config_invalid);
    return c.credentials.error().message;
  };
  CHECK(error_for("[profile a]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\n"
                  "[profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = c\n"
                  "[profile c]\nrole_arn = arn:aws:iam::1:role/c\nsource_profile = a\n",
                  "a") ==
        "role_arn in file /c/config [profile c]: source_profile makes a cycle: a -> b -> c -> a");
  CHECK(error_for("[profile a]\nrole_arn = arn:aws:iam::1:role/a\n", "a") ==
        "role_arn in file /c/config [profile a]: it needs source_profile, credential_source or "
        "web_identity_token_file to say whose credentials assume the role");
  CHECK(
      error_for("[profile a]\nrole_arn = r\nsource_profile = b\ncredential_source = Environment\n", "a") ==
      "role_arn in file /c/config [profile a]: source_profile and credential_source are both set; keep one");
  CHECK(has(error_for("[profile a]\nrole_arn = r\nsource_profile = b\nmfa_serial = arn:mfa\n"
                      "[profile b]\naws_access_key_id = X\naws_secret_access_key = Y\n",
                      "a"),
            "mfa_serial (file /c/config [profile a]) needs a code typed at a terminal"));
  CHECK(
      error_for("[profile a]\nrole_arn = r\nsource_profile = ghost\n", "a") ==
      "source_profile in file /c/config [profile a]: the profile (ghost) could not be found in /c/config or "
      "/c/credentials");
  CHECK(error_for("[profile a]\nrole_arn = r\nsource_profile = b\n[profile b]\nregion = x\n", "a") ==
        "source_profile [b] has no credentials: no aws_access_key_id, role_arn or credential_process in "
        "/c/config or /c/credentials");
  CHECK(error_for("[profile a]\nrole_arn = r\ncredential_source = Environment\n", "a") ==
        "credential_source = Environment in file /c/config [profile a]: AWS_ACCESS_KEY_ID is not set");
  CHECK(error_for("[profile a]\nrole_arn = r\ncredential_source = Laptop\n", "a") ==
        "credential_source in file /c/config [profile a]: 'Laptop' is not one of Environment, "
        "Ec2InstanceMetadata, EcsContainer");
  CHECK(
      error_for("[profile a]\nrole_arn = r\nsource_profile = a\naws_access_key_id = k\n"
                "aws_secret_access_key = s\nduration_seconds = 60\n",
                "a") ==
      "duration_seconds in file /c/config [profile a]: expected a whole number from 900 to 43200, got '60'");

  // With keys in the environment, the environment provider answers first, as in the SDKs:
  // credential_source = Environment only matters when the profile is chosen with no keys set.
  Net net;
  Env env{{"AWS_ACCESS_KEY_ID", "AKIDENV"}, {"AWS_SECRET_ACCESS_KEY", "e"}};
  auto s =
      shared("[profile a]\nrole_arn = arn:aws:iam::1:role/a\ncredential_source = Environment\n", "", "a");
  auto top = aws::resolve_credential_chain(env, s, &net.access);
  CHECK(top.credentials->access_key_id == "AKIDENV");
  CHECK(net.t.seen.empty());
}

TEST_CASE("credential chain: credential_process, its JSON contract and its failures") {
  test::TempDir dir;
  auto script = [&](const std::string &name, const std::string &body) {
    auto path = dir.file(name);
    test::write_file(path, "#!/bin/sh\n" + body);
    ::chmod(path.c_str(), 0700);
    return path;
  };
  auto good =
      script("good", "echo \"$@\" >> " + dir.file("calls") +
                         "\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", \"SecretAccessKey\": "
                         "\"s\", \"SessionToken\": \"t\", \"Expiration\": \"2026-12-02T10:00:00.000Z\"}'\n");
  auto s = shared("[profile ci]\ncredential_process = " + good + " --account 1\n",
                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n", "ci");
  auto c = aws::resolve_credential_chain({}, s);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "AKIDPROC");
  CHECK(c.credentials->session_token == "t");
  CHECK(c.credentials->expires_ms == 1'796'205'600'000);
  CHECK(c.credentials->source == "credential_process in file /c/config [profile ci]");
  CHECK(test::read_file(dir.file("calls")) == "--account 1\n");

  auto error_of_script = [&](const std::string &body) {
    auto path = script("bad", body);
    auto r = aws::run_credential_process(path, "credential_process in X", 2'000);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::config_invalid);
    return r.error().message;
  };
  CHECK(error_of_script("echo 'SECRET-ON-STDOUT'\necho 'token expired, run login' >&2\nexit 3\n") ==
        "credential_process in X: the program exited with status 3: token expired, run login");
  CHECK(error_of_script("echo '{\"AccessKeyId\": \"A\", \"SecretAccessKey\": \"B\"}'\n") ==
        "credential_process in X: the program's output must have \"Version\": 1");
  CHECK(error_of_script("echo 'not json'\n") ==
        "credential_process in X: the program's output is not a JSON object");
  CHECK(error_of_script("echo '{\"Version\": 1, \"AccessKeyId\": \"A\"}'\n") ==
        "credential_process in X: the answer has no SecretAccessKey");
  CHECK(error_of_script("echo '{\"Version\": 1, \"AccessKeyId\": \"A\", \"SecretAccessKey\": \"B\", "
                        "\"Expiration\": \"tomorrow\"}'\n") ==
        "credential_process in X: Expiration 'tomorrow' is not an ISO 8601 time");
  CHECK(error_of_script("kill -9 $$\n") ==
        "credential_process in X: the program exited with status 137: Killed");
  CHECK(error_of_script("exec sleep 30\n") ==
        "credential_process in X: the program did not finish within 2 s");
}

TEST_CASE("credential chain: container credentials, with the authorization token from its file") {
  test::TempDir dir;
  test::write_file(dir.file("token"), "Bearer abc\n");
  Net net;
  net.t.script = {step(200, R"({"AccessKeyId":"ASIACONT","SecretAccessKey":"s","Token":"t",)"
                            R"("Expiration":"2026-12-02T10:00:00Z"})")};
  Env env{{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:51679/creds"},
          {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-when-the-file-is-set"},
          {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.file("token")}};
  auto c = aws::resolve_credential_chain(env, shared("", "", "default"), &net.access);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "ASIACONT");
  CHECK(c.credentials->session_token == "t");
  CHECK(c.credentials->expires_ms == 1'796'205'600'000);
  REQUIRE(net.t.seen.size() == 1);
  CHECK(net.t.seen[0].url == "http://127.0.0.1:51679/creds");
  CHECK(net.header(0, "authorization") == "Bearer abc");
  CHECK(net.metadata_timeouts == std::vector<int64_t>{2'000});

  Net rel;
  rel.t.script = {step(200, R"({"AccessKeyId":"A","SecretAccessKey":"s","Token":"t"})")};
  auto r = aws::resolve_credential_chain({{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/x"}},
                                         shared("", "", "default"), &rel.access);
  REQUIRE(r.credentials.ok());
  CHECK(rel.t.seen.at(0).url == "http://169.254.170.2/v2/credentials/x");

  Net none;
  auto refused =
      aws::resolve_credential_chain({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://evil.example/c"}},
                                    shared("", "", "default"), &none.access);
  REQUIRE_FALSE(refused.credentials.ok());
  CHECK(refused.credentials.error().message ==
        "AWS_CONTAINER_CREDENTIALS_FULL_URI: plain http to evil.example is refused; use https, a loopback "
        "address, or the ECS/EKS agent");
  CHECK(none.t.seen.empty());

  Net down;
  down.t.script = {step(503, ""), step(503, ""), step(401, "no")};
  auto d = aws::resolve_credential_chain(
      {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}},
      shared("", "[default]\naws_access_key_id = A\naws_secret_access_key = B\n", "default"), &down.access);
  // The files' keys come before the container in the chain, so they answer first...
  CHECK(d.credentials->access_key_id == "A");
  auto d2 = aws::resolve_credential_chain({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"}},
                                          shared("", "", "default"), &down.access);
  // ... and a failing container service is an error, retried on 5xx, never the next provider.
  REQUIRE_FALSE(d2.credentials.ok());
  CHECK(d2.credentials.error().code == Errc::access_denied);
  CHECK(down.t.seen.size() == 3);
}

TEST_CASE("credential chain: instance metadata with an IMDSv2 session token") {
  const std::string creds = R"({"Code":"Success","AccessKeyId":"ASIAIMDS","SecretAccessKey":"s","Token":"t",)"
                            R"("Expiration":"2026-12-02T10:00:00Z"})";
  Net net;
  net.t.script = {step(200, "SESSION-TOKEN"), step(200, "web-role\n"), step(200, creds)};
  Env env{{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8111/"}};
  auto c = aws::resolve_credential_chain(env, shared("", "", "default"), &net.access);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "ASIAIMDS");
  CHECK(c.credentials->source == "instance metadata (role web-role)");
  REQUIRE(net.t.seen.size() == 3);
  CHECK(net.t.seen[0].method == "PUT");
  CHECK(net.t.seen[0].url == "http://127.0.0.1:8111/latest/api/token");
  CHECK(net.header(0, "x-aws-ec2-metadata-token-ttl-seconds") == "21600");
  CHECK(net.t.seen[1].url == "http://127.0.0.1:8111/latest/meta-data/iam/security-credentials/");
  CHECK(net.t.seen[2].url == "http://127.0.0.1:8111/latest/meta-data/iam/security-credentials/web-role");
  CHECK(net.header(1, "x-aws-ec2-metadata-token") == "SESSION-TOKEN");
  CHECK(net.header(2, "x-aws-ec2-metadata-token") == "SESSION-TOKEN");
  CHECK(net.metadata_timeouts == std::vector<int64_t>{1'000}); // a laptop without IMDS waits a second
  CHECK(c.steps.back().why == "role web-role at http://127.0.0.1:8111 (IMDSv2)");

  // Disabled: not asked at all.
  Net off;
  auto d = aws::resolve_credential_chain({{"AWS_EC2_METADATA_DISABLED", "TRUE"}}, shared("", "", "default"),
                                         &off.access);
  REQUIRE_FALSE(d.credentials.ok());
  CHECK(off.t.seen.empty());
  CHECK(d.steps.back().why == "disabled by AWS_EC2_METADATA_DISABLED");
  CHECK(has(d.credentials.error().message, "no S3 credentials"));

  // Not reachable (no instance): no credentials, the step says why.
  Net away;
  away.t.script = {step(0, "", 28)};
  auto a = aws::resolve_credential_chain({{"AWS_METADATA_SERVICE_TIMEOUT", "3"}}, shared("", "", "default"),
                                         &away.access);
  REQUIRE_FALSE(a.credentials.ok());
  CHECK(away.metadata_timeouts == std::vector<int64_t>{3'000});
  CHECK(away.t.seen.at(0).url == "http://169.254.169.254/latest/api/token");
  CHECK(has(a.steps.back().why, "not reachable at http://169.254.169.254"));

  // A service that does not know the token call: IMDSv1, unless it is disabled.
  Net v1;
  v1.t.script = {step(404, ""), step(200, "r"), step(200, creds)};
  auto one = aws::resolve_credential_chain(env, shared("", "", "default"), &v1.access);
  REQUIRE(one.credentials.ok());
  CHECK(v1.header(1, "x-aws-ec2-metadata-token") == "(none)");
  Net v2only;
  v2only.t.script = {step(404, "")};
  auto no = aws::resolve_credential_chain(
      {{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8111"}},
      shared("[default]\nec2_metadata_v1_disabled = true\n", "", "default"), &v2only.access);
  REQUIRE_FALSE(no.credentials.ok());
  CHECK(v2only.t.seen.size() == 1);
  CHECK(no.steps.back().why ==
        "failed: instance metadata at http://127.0.0.1:8111: the IMDSv2 token request failed: HTTP 404");
  // Something that answers 403 where no instance metadata is (a proxy off EC2): no credentials
  // from it, and the chain's own error, not the proxy's.
  Net blocked;
  blocked.t.script = {step(403, ""), step(403, "")};
  auto b = aws::resolve_credential_chain({}, shared("", "", "default"), &blocked.access);
  REQUIRE_FALSE(b.credentials.ok());
  CHECK(b.credentials.error().message.rfind("no S3 credentials: set AWS_ACCESS_KEY_ID", 0) == 0);
  CHECK(b.steps.back().why == "failed: instance metadata at "
                              "http://169.254.169.254/latest/meta-data/iam/security-credentials/: HTTP 403");

  // An instance without a role: no credentials from it.
  Net norole;
  norole.t.script = {step(200, "T"), step(404, "")};
  auto nr = aws::resolve_credential_chain(env, shared("", "", "default"), &norole.access);
  REQUIRE_FALSE(nr.credentials.ok());
  CHECK(nr.steps.back().why == "the instance has no IAM role");

  // credential_source = Ec2InstanceMetadata: the instance's role assumes the profile's.
  Net src;
  src.t.script = {step(200, "T"), step(200, "r"), step(200, creds),
                  step(200, assume_role_answer("ASIAFROMIMDS"))};
  auto role = aws::resolve_credential_chain(
      env,
      shared("[profile x]\nrole_arn = arn:aws:iam::1:role/x\ncredential_source = Ec2InstanceMetadata\n", "",
             "x"),
      &src.access);
  REQUIRE(role.credentials.ok());
  CHECK(role.credentials->access_key_id == "ASIAFROMIMDS");
  CHECK(has(src.header(3, "authorization"), "Credential=ASIAIMDS/"));
}

namespace {
class SteppedClock final : public util::Clock {
public:
  [[nodiscard]] int64_t now_ms() const override { return m_now.load(); }
  std::atomic<int64_t> m_now{1'000'000};
};

aws::Credentials temporary(const std::string &id, int64_t expires_ms) {
  aws::Credentials c;
  c.access_key_id = id;
  c.secret_access_key = "secret-" + id;
  c.session_token = "token-" + id;
  c.expires_ms = expires_ms;
  return c;
}
} // namespace

TEST_CASE("credential source: renewed within the margin of expiry, by one caller, with no lock held") {
  SteppedClock clock;
  std::mutex gate;
  std::condition_variable cv;
  bool fetch_started = false, release = false;
  int fetches = 0;
  aws::CredentialSource source(
      temporary("ASIA1", 2'000'000),
      [&]() -> Result<aws::Credentials> {
        std::unique_lock lock(gate);
        ++fetches;
        fetch_started = true;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
        return temporary("ASIA2", 9'000'000);
      },
      clock, 300'000);
  CHECK(source.current()->access_key_id == "ASIA1"); // far from expiry: no fetch
  clock.m_now = 2'000'000 - 299'000;                 // within five minutes of it
  std::thread renewer([&] { CHECK(source.current()->access_key_id == "ASIA2"); });
  {
    std::unique_lock lock(gate);
    cv.wait(lock, [&] { return fetch_started; });
  }
  // While the renewal is in flight, the others sign with the current ones at once.
  for (int i = 0; i < 3; ++i)
    CHECK(source.current()->access_key_id == "ASIA1");
  {
    std::lock_guard lock(gate);
    release = true;
  }
  cv.notify_all();
  renewer.join();
  CHECK(fetches == 1);
  CHECK(source.renewals() == 1);
  CHECK(source.current()->access_key_id == "ASIA2");
  CHECK(source.current()->session_token == "token-ASIA2");
}

TEST_CASE("credential source: a failed renewal keeps the current credentials and is tried again") {
  SteppedClock clock;
  int calls = 0;
  aws::CredentialSource source(
      temporary("ASIA1", 1'100'000),
      [&]() -> Result<aws::Credentials> {
        if (++calls == 1) return Error(Errc::storage_unavailable, "STS down");
        return temporary("ASIA3", 9'000'000);
      },
      clock, 300'000);
  CHECK(source.current()->access_key_id == "ASIA1");
  CHECK(calls == 1);
  CHECK(source.current()->access_key_id == "ASIA3");
  CHECK(calls == 2);
  CHECK(source.current()->access_key_id == "ASIA3"); // fresh: no more fetches
  CHECK(calls == 2);
  aws::CredentialSource forever(
      temporary("AKIA", 0), [&]() -> Result<aws::Credentials> { return Error(Errc::internal, "x"); }, clock);
  clock.m_now = 99'000'000'000;
  CHECK(forever.current()->access_key_id == "AKIA"); // static keys never expire
}

TEST_CASE("aws s3 units: sizes as the CLI reads them, its MB a MiB") {
  CHECK(aws::parse_aws_size("16777216") == 16777216ULL);
  CHECK(aws::parse_aws_size("8MB") == 8ULL << 20);
  CHECK(aws::parse_aws_size("8mb") == 8ULL << 20);
  CHECK(aws::parse_aws_size("64MiB") == 64ULL << 20);
  CHECK(aws::parse_aws_size("512KB") == 512ULL << 10);
  CHECK(aws::parse_aws_size("1GB") == 1ULL << 30);
  CHECK(aws::parse_aws_size("2TiB") == 2ULL << 40);
  CHECK(aws::parse_aws_size(" 5 MB ") == 5ULL << 20);
  for (const char *bad :
       {"", "0", "MB", "8M", "8 megabytes", "-8MB", "1.5MB", "8MB/s", "99999999999999999999"})
    CHECK_MESSAGE(!aws::parse_aws_size(bad), bad);
  CHECK_FALSE(aws::parse_aws_size("20000000TB")); // overflows
}

TEST_CASE("aws s3 units: max_bandwidth in bytes per second") {
  CHECK(aws::parse_aws_rate("1048576") == 1048576ULL);
  CHECK(aws::parse_aws_rate("1048576B/s") == 1048576ULL);
  CHECK(aws::parse_aws_rate("50MB/s") == 50ULL << 20);
  CHECK(aws::parse_aws_rate("300KB/s") == 300ULL << 10);
  CHECK(aws::parse_aws_rate("1GB/s") == 1ULL << 30);
  CHECK(aws::parse_aws_rate("2MiB/s") == 2ULL << 20);
  CHECK(aws::parse_aws_rate("50Mb/s") == 50ULL << 20); // the CLI lowercases it
  for (const char *bad : {"", "50MB", "fast", "0B/s", "B/s", "50MB/min", "1.5MB/s"})
    CHECK_MESSAGE(!aws::parse_aws_rate(bad), bad);
}

TEST_CASE("aws profile: the s3 sub-section's transfer keys, nested and from the credentials file too") {
  auto s = shared("[profile ci]\ns3 =\n  max_concurrent_requests = 20\n  multipart_threshold = 64MB\n"
                  "  multipart_chunksize = 16MB  # aws-cli's\n  max_bandwidth = 50MB/s\nregion = eu-west-1\n",
                  "", "ci");
  REQUIRE(s.sub("s3", "multipart_chunksize"));
  CHECK(s.sub("s3", "multipart_chunksize")->value == "16MB");
  CHECK(s.sub("s3", "multipart_chunksize")->source == "file /c/config [profile ci] s3.multipart_chunksize");
  CHECK(s.sub("s3", "max_bandwidth")->value == "50MB/s");
  CHECK(s.sub("s3", "max_concurrent_requests")->value == "20");
  CHECK(s.get("region")->value == "eu-west-1"); // the sub-section ends at the next unindented key
  CHECK_FALSE(s.sub("s3", "max_queue_size"));
}
