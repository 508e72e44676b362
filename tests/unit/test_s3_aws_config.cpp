#include "support.hpp"

#include <atomic>
#include <condition_variable>
#include <lodge/s3/aws_config.hpp>
#include <lodge/s3/client.hpp>
#include <mutex>
#include <sys/stat.h>
#include <thread>

using namespace lodge;

namespace {
s3::AwsShared shared(const std::string &config, const std::string &credentials, const std::string &profile) {
  return s3::AwsShared(s3::parse_ini(config, "/c/config"), s3::parse_ini(credentials, "/c/credentials"),
                       profile, "test");
}

std::string error_of(const std::string &text) {
  try {
    (void)s3::parse_ini(text, "/etc/aws/config");
  } catch (const LodgeError &e) {
    CHECK(e.error().code == Errc::config_invalid);
    return e.error().message;
  }
  return "(no error)";
}
} // namespace

TEST_CASE("ini: sections, comments, whitespace and key case") {
  auto f = s3::parse_ini("# a comment\n; another\n\n[default]\nregion=eu-west-1\n"
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
  auto f = s3::parse_ini("[services local]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n"
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
  auto missing = s3::read_ini(dir.file("nope"));
  CHECK_FALSE(missing.exists);
  CHECK(missing.sections.empty());
  auto e = dir.file("adir");
  ::mkdir(e.c_str(), 0700);
  try {
    (void)s3::read_ini(e);
    FAIL("a directory was read");
  } catch (const LodgeError &err) {
    CHECK(err.error().message == e + ": cannot read: is a directory");
  }
  test::write_file(dir.file("bad"), "[default]\nregion\n");
  try {
    (void)s3::read_ini(dir.file("bad"));
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
    (void)s3::AwsShared::load({env, "", ""});
    FAIL("a missing profile was accepted");
  } catch (const LodgeError &e) {
    CHECK(e.error().message.rfind("The config profile (x) could not be found (named by env AWS_PROFILE", 0) ==
          0);
  }
  env.erase("AWS_PROFILE");
  env["AWS_DEFAULT_PROFILE"] = "other";
  CHECK(s3::AwsShared::load({env, "", ""}).profile() == "other");
  env.erase("AWS_DEFAULT_PROFILE");
  CHECK(s3::AwsShared::load({env, "", ""}).profile() == "default"); // may be absent
  env["HOME"] = dir.path().string();
  env["AWS_CONFIG_FILE"] = "~/config";
  CHECK(s3::AwsShared::load({env, "", ""}).config_file().path == dir.path().string() + "/config");
}

TEST_CASE("credential chain: environment first, then the credentials file, then the config file") {
  auto s = shared("[profile ci]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n",
                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n"
                  "[ci]\naws_access_key_id=CIKEY\naws_secret_access_key=cisecret\naws_session_token=tok\n",
                  "ci");
  auto c = s3::resolve_credential_chain({}, s);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "CIKEY");
  CHECK(c.credentials->session_token == "tok");
  CHECK(c.credentials->source == "file /c/credentials [ci]");
  REQUIRE(c.steps.size() == 3);
  CHECK(c.steps[0].why == "AWS_ACCESS_KEY_ID not set");
  CHECK(c.steps[2].used);

  auto only_config = shared("[profile ci]\naws_access_key_id = CFGKEY\naws_secret_access_key = cfgsecret\n",
                            "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n", "ci");
  c = s3::resolve_credential_chain({}, only_config);
  REQUIRE(c.credentials.ok());
  CHECK(c.credentials->access_key_id == "CFGKEY");
  CHECK(c.steps[2].why == "no profile section for it");

  std::map<std::string, std::string> env{{"AWS_ACCESS_KEY_ID", "ENVKEY"},
                                         {"AWS_SECRET_ACCESS_KEY", "envsecret"}};
  c = s3::resolve_credential_chain(env, s);
  CHECK(c.credentials->access_key_id == "ENVKEY");
  CHECK(c.credentials->source == "environment");

  auto none = s3::resolve_credential_chain({}, shared("", "", "nope"));
  REQUIRE_FALSE(none.credentials.ok());
  CHECK(none.credentials.error().code == Errc::config_invalid);
}

TEST_CASE("credential chain: partial credentials are an error naming what is missing") {
  auto s = shared("", "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n", "default");
  auto c = s3::resolve_credential_chain({{"AWS_ACCESS_KEY_ID", "ENVKEY"}}, s);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message == "partial credentials found in the environment: AWS_ACCESS_KEY_ID is "
                                         "set but AWS_SECRET_ACCESS_KEY is missing");
  c = s3::resolve_credential_chain({{"AWS_SECRET_ACCESS_KEY", "s"}}, s);
  CHECK(c.credentials.error().message == "partial credentials found in the environment: "
                                         "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is missing");
  auto half = shared("", "[default]\naws_access_key_id = DEF\n", "default");
  c = s3::resolve_credential_chain({}, half);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message ==
        "partial credentials in [default] of /c/credentials: aws_secret_access_key is missing");
}

TEST_CASE("credential chain: a provider lodge lacks is an error, never another identity") {
  auto s = shared("[profile ci]\ncredential_process = /bin/creds\n",
                  "[default]\naws_access_key_id = DEF\naws_secret_access_key = d\n", "ci");
  auto c = s3::resolve_credential_chain({}, s);
  REQUIRE_FALSE(c.credentials.ok());
  CHECK(c.credentials.error().message.rfind("credential_process in file /c/config [profile ci]", 0) == 0);
  // A web identity token without its role is an error, not the files' static keys.
  auto w = s3::resolve_credential_chain(
      {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}},
      shared("", "[default]\naws_access_key_id = A\naws_secret_access_key = B\n", "default"));
  REQUIRE_FALSE(w.credentials.ok());
  CHECK(w.credentials.error().message.rfind("AWS_WEB_IDENTITY_TOKEN_FILE is set but no role", 0) == 0);
  auto role = s3::resolve_credential_chain(
      {}, shared("[profile ci]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n", "", "ci"));
  REQUIRE_FALSE(role.credentials.ok());
  CHECK(role.credentials.error().message.rfind(
            "role_arn in file /c/config [profile ci]: lodge does not implement", 0) == 0);
}

namespace {
class SteppedClock final : public util::Clock {
public:
  [[nodiscard]] int64_t now_ms() const override { return m_now.load(); }
  std::atomic<int64_t> m_now{1'000'000};
};

s3::Credentials temporary(const std::string &id, int64_t expires_ms) {
  s3::Credentials c;
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
  s3::CredentialSource source(
      temporary("ASIA1", 2'000'000),
      [&]() -> Result<s3::Credentials> {
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
  s3::CredentialSource source(
      temporary("ASIA1", 1'100'000),
      [&]() -> Result<s3::Credentials> {
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
  s3::CredentialSource forever(
      temporary("AKIA", 0), [&]() -> Result<s3::Credentials> { return Error(Errc::internal, "x"); }, clock);
  clock.m_now = 99'000'000'000;
  CHECK(forever.current()->access_key_id == "AKIA"); // static keys never expire
}
