#include "support.hpp"

#include <lodge/config/ci.hpp>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {
using Env = std::map<std::string, std::string>;

std::string usage_message(const Env &env) {
  auto r = config::ci_metadata(env);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::usage);
  return r.error().message;
}
} // namespace

TEST_CASE("ci metadata: GitHub Actions, its run URL made from the server, repository and run id") {
  Env env{{"GITHUB_ACTIONS", "true"},
          {"GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"},
          {"GITHUB_REF_NAME", "main"},
          {"GITHUB_RUN_ID", "4242"},
          {"GITHUB_SERVER_URL", "https://github.com/"},
          {"GITHUB_REPOSITORY", "acme/app"},
          {"CI_COMMIT_SHA", "not-this"}}; // another CI's variable beside it changes nothing
  auto m = config::ci_metadata(env).take();
  CHECK(m == Env{{"cicommit", "0123456789abcdef0123456789abcdef01234567"},
                 {"ciref", "main"},
                 {"cirun", "4242"},
                 {"ciurl", "https://github.com/acme/app/actions/runs/4242"},
                 {"cirepo", "acme/app"},
                 {"cisystem", "github"}});
  // GITHUB_REF_TYPE says branch or tag; another value is left out.
  env["GITHUB_REF_TYPE"] = "tag";
  CHECK(config::ci_metadata(env).take().at("cireftype") == "tag");
  env["GITHUB_REF_TYPE"] = "branch";
  CHECK(config::ci_metadata(env).take().at("cireftype") == "branch");
  env["GITHUB_REF_TYPE"] = "pull";
  CHECK_FALSE(config::ci_metadata(env).take().contains("cireftype"));
}

TEST_CASE(
    "ci metadata: cirepo and cireftype on every CI; a tag told from a branch; a URL's password left out") {
  auto gitlab = config::ci_metadata({{"GITLAB_CI", "true"},
                                     {"CI_COMMIT_REF_NAME", "v1.2"},
                                     {"CI_COMMIT_TAG", "v1.2"},
                                     {"CI_PROJECT_PATH", "acme/group/app"}})
                    .take();
  CHECK(gitlab.at("cirepo") == "acme/group/app");
  CHECK(gitlab.at("cireftype") == "tag");
  auto buildkite = config::ci_metadata({{"BUILDKITE", "true"},
                                        {"BUILDKITE_BRANCH", "main"},
                                        {"BUILDKITE_TAG", ""},
                                        {"BUILDKITE_REPO", "https://ci-bot:s3cr3t@github.com/acme/app.git"}})
                       .take();
  CHECK(buildkite.at("cirepo") == "https://github.com/acme/app.git");
  CHECK(buildkite.at("cireftype") == "branch");
  auto scp = config::ci_metadata({{"BUILDKITE", "true"},
                                  {"BUILDKITE_BRANCH", "v2"},
                                  {"BUILDKITE_TAG", "v2"},
                                  {"BUILDKITE_REPO", "git@github.com:acme/app.git"}})
                 .take();
  CHECK(scp.at("cirepo") == "git@github.com:acme/app.git");
  CHECK(scp.at("cireftype") == "tag");
  auto jenkins = config::ci_metadata({{"JENKINS_URL", "https://ci.example/"},
                                      {"GIT_BRANCH", "origin/main"},
                                      {"GIT_URL", "https://git.example/acme/app.git"}})
                     .take();
  CHECK(jenkins.at("cirepo") == "https://git.example/acme/app.git");
  CHECK(jenkins.at("cireftype") == "branch");
  // No ref known: no ref type either.
  auto bare = config::ci_metadata({{"JENKINS_URL", "https://ci.example/"}, {"BUILD_NUMBER", "3"}}).take();
  CHECK_FALSE(bare.contains("cireftype"));
}

TEST_CASE("ci metadata: GitLab, Buildkite and Jenkins under the same names") {
  auto gitlab = config::ci_metadata({{"GITLAB_CI", "true"},
                                     {"CI_COMMIT_SHA", "abc"},
                                     {"CI_COMMIT_REF_NAME", "release/1.2"},
                                     {"CI_PIPELINE_ID", "977"},
                                     {"CI_JOB_URL", "https://gitlab.example/acme/app/-/jobs/31"}})
                    .take();
  CHECK(gitlab == Env{{"cicommit", "abc"},
                      {"ciref", "release/1.2"},
                      {"cireftype", "branch"},
                      {"cirun", "977"},
                      {"ciurl", "https://gitlab.example/acme/app/-/jobs/31"},
                      {"cisystem", "gitlab"}});
  auto buildkite = config::ci_metadata({{"BUILDKITE", "true"},
                                        {"BUILDKITE_COMMIT", "def"},
                                        {"BUILDKITE_BRANCH", "feature-x"},
                                        {"BUILDKITE_BUILD_NUMBER", "15"},
                                        {"BUILDKITE_BUILD_URL", "https://buildkite.com/acme/app/builds/15"}})
                       .take();
  CHECK(buildkite == Env{{"cicommit", "def"},
                         {"ciref", "feature-x"},
                         {"cireftype", "branch"},
                         {"cirun", "15"},
                         {"ciurl", "https://buildkite.com/acme/app/builds/15"},
                         {"cisystem", "buildkite"}});
  auto jenkins = config::ci_metadata({{"JENKINS_URL", "https://ci.example/"},
                                      {"GIT_COMMIT", "fed"},
                                      {"GIT_BRANCH", "origin/main"},
                                      {"BUILD_NUMBER", "88"},
                                      {"BUILD_URL", "https://ci.example/job/app/88/"}})
                     .take();
  CHECK(jenkins == Env{{"cicommit", "fed"},
                       {"ciref", "origin/main"},
                       {"cireftype", "branch"},
                       {"cirun", "88"},
                       {"ciurl", "https://ci.example/job/app/88/"},
                       {"cisystem", "jenkins"}});
}

TEST_CASE("ci metadata: a variable unset or empty is left out, the others recorded") {
  // Jenkins without its git plugin: no GIT_COMMIT, no GIT_BRANCH.
  auto m = config::ci_metadata({{"JENKINS_URL", "https://ci.example/"},
                                {"GIT_COMMIT", ""},
                                {"BUILD_NUMBER", "7"},
                                {"BUILD_URL", "https://ci.example/job/app/7/"}})
               .take();
  CHECK(m == Env{{"cirun", "7"}, {"ciurl", "https://ci.example/job/app/7/"}, {"cisystem", "jenkins"}});
  // GitHub without GITHUB_REPOSITORY: no URL can be made.
  auto g = config::ci_metadata({{"GITHUB_ACTIONS", "true"}, {"GITHUB_RUN_ID", "9"}}).take();
  CHECK(g == Env{{"cirun", "9"}, {"cisystem", "github"}});
}

TEST_CASE("ci metadata: outside a CI, a usage error naming every variable looked for") {
  // CI=true alone (set by many CIs and by tools) names no CI; a marker not "true" neither.
  auto msg = usage_message({{"CI", "true"}, {"GITHUB_ACTIONS", "false"}, {"GITHUB_SHA", "abc"}});
  for (const char *var : {"GITHUB_ACTIONS",      "GITHUB_SHA",
                          "GITHUB_REF_NAME",     "GITHUB_RUN_ID",
                          "GITHUB_SERVER_URL",   "GITLAB_CI",
                          "CI_COMMIT_SHA",       "CI_COMMIT_REF_NAME",
                          "CI_PIPELINE_ID",      "CI_JOB_URL",
                          "BUILDKITE",           "BUILDKITE_COMMIT",
                          "BUILDKITE_BRANCH",    "BUILDKITE_BUILD_NUMBER",
                          "BUILDKITE_BUILD_URL", "JENKINS_URL",
                          "GIT_COMMIT",          "GIT_BRANCH",
                          "BUILD_NUMBER",        "BUILD_URL"})
    CHECK_MESSAGE(msg.find(var) != std::string::npos, var);
  CHECK(msg.find("--ci-metadata") == 0);
  CHECK(msg.find("not in a CI job") != std::string::npos);
  // A CI's marker with none of its values: said as such.
  auto none = usage_message({{"GITLAB_CI", "true"}});
  CHECK(none.find("GITLAB_CI") != std::string::npos);
  CHECK(none.find("CI_COMMIT_SHA") != std::string::npos);
}

TEST_CASE("ci metadata: a value that is not printable ASCII is refused, naming its variable") {
  auto msg =
      usage_message({{"GITLAB_CI", "true"}, {"CI_COMMIT_SHA", "abc"}, {"CI_COMMIT_REF_NAME", "f\xc3\xbcr"}});
  CHECK(msg.find("CI_COMMIT_REF_NAME") != std::string::npos);
  CHECK(msg.find("printable ASCII") != std::string::npos);
}

TEST_CASE("ci metadata: the first CI in order wins when several markers are set") {
  auto m = config::ci_metadata({{"GITHUB_ACTIONS", "true"},
                                {"GITHUB_RUN_ID", "1"},
                                {"GITLAB_CI", "true"},
                                {"CI_PIPELINE_ID", "2"}})
               .take();
  CHECK(m.at("cisystem") == "github");
  CHECK(m.at("cirun") == "1");
}

TEST_CASE("policy expire_after: a duration, null or absent for never; lodge config prints it back") {
  test::TempDir dir;
  test::write_file(dir.file("config.json"),
                   R"({"policies": {"ci": {"expire_after": "30d"}, "keep": {"expire_after": null}}})");
  config::ConfigInputs in;
  in.config_flag = dir.file("config.json");
  in.env["HOME"] = dir.path().string();
  auto c = config::load(in);
  CHECK(c.policy("ci").expire_after_ms == 30 * 86'400'000LL);
  CHECK_FALSE(c.policy("keep").expire_after_ms.has_value());
  CHECK_FALSE(c.policy("default").expire_after_ms.has_value());
  auto j = config::to_json(c);
  CHECK(j["policies"]["ci"]["expire_after"] == "30d");
  CHECK(j["policies"]["default"]["expire_after"].is_null());
  for (const char *bad : {R"("soon")", R"("0s")", R"(30)", R"("36501d")"}) {
    test::write_file(dir.file("config.json"),
                     std::string(R"({"policies": {"ci": {"expire_after": )") + bad + "}}}");
    try {
      (void)config::load(in);
      FAIL("accepted expire_after " << bad);
    } catch (const LodgeError &e) {
      CHECK(e.error().code == Errc::config_invalid);
      CHECK(e.error().message.find("policies.ci.expire_after") != std::string::npos);
    }
  }
}
