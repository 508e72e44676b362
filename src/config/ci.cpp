#include <array>
#include <lodge/config/ci.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::config {
namespace {

// One CI: the variable that says a job runs on it, and the variables of each value.
struct CiSystem {
  const char *name;
  const char *marker;  // set (GitHub, GitLab, Buildkite: to "true") in every job
  const char *commit;  // -> cicommit
  const char *ref;     // -> ciref
  const char *run;     // -> cirun
  const char *url;     // -> ciurl (nullptr: made from other variables)
  bool marker_is_true; // the marker must be "true", not only set
};

constexpr std::array<CiSystem, 4> k_systems{{
    {"github", "GITHUB_ACTIONS", "GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_RUN_ID", nullptr, true},
    {"gitlab", "GITLAB_CI", "CI_COMMIT_SHA", "CI_COMMIT_REF_NAME", "CI_PIPELINE_ID", "CI_JOB_URL", true},
    {"buildkite", "BUILDKITE", "BUILDKITE_COMMIT", "BUILDKITE_BRANCH", "BUILDKITE_BUILD_NUMBER",
     "BUILDKITE_BUILD_URL", true},
    {"jenkins", "JENKINS_URL", "GIT_COMMIT", "GIT_BRANCH", "BUILD_NUMBER", "BUILD_URL", false},
}};

std::string value_of(const std::map<std::string, std::string> &env, const char *name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

bool printable_ascii(const std::string &s) {
  for (char ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) > 0x7e) return false;
  return true;
}

// GitHub has no variable holding the run's page: it is the repository's actions/runs/ID.
std::string github_run_url(const std::map<std::string, std::string> &env) {
  const std::string server = value_of(env, "GITHUB_SERVER_URL");
  const std::string repo = value_of(env, "GITHUB_REPOSITORY");
  const std::string run = value_of(env, "GITHUB_RUN_ID");
  if (server.empty() || repo.empty() || run.empty()) return "";
  std::string base = server;
  while (!base.empty() && base.back() == '/')
    base.pop_back();
  return base + "/" + repo + "/actions/runs/" + run;
}

std::string looked_for() {
  std::string out;
  for (const auto &s : k_systems) {
    if (!out.empty()) out += ", ";
    out += std::string(s.marker) + (s.marker_is_true ? "=true" : "") + " (" + s.name + ": " + s.commit +
           ", " + s.ref + ", " + s.run + ", " + (s.url ? s.url : "GITHUB_SERVER_URL/GITHUB_REPOSITORY") + ")";
  }
  return out;
}

} // namespace

Result<std::map<std::string, std::string>> ci_metadata(const std::map<std::string, std::string> &env) {
  for (const auto &s : k_systems) {
    const std::string marker = value_of(env, s.marker);
    if (s.marker_is_true ? marker != "true" : marker.empty()) continue;
    std::map<std::string, std::string> out;
    // Each value with the variable it came from, for an error that names it.
    const std::array<std::pair<const char *, const char *>, 4> vars{
        {{k_ci_commit, s.commit}, {k_ci_ref, s.ref}, {k_ci_run, s.run}, {k_ci_url, s.url}}};
    for (const auto &[name, var] : vars) {
      const std::string v = var ? value_of(env, var) : github_run_url(env);
      if (v.empty()) continue;
      if (!printable_ascii(v))
        return Error(Errc::usage,
                     std::string("--ci-metadata: ") + (var ? var : "GITHUB_SERVER_URL/GITHUB_REPOSITORY") +
                         " is not printable ASCII (metadata travels in HTTP headers): '" +
                         util::escape_for_terminal(v) + "'; give " + name + " with --metadata instead");
      out[name] = v;
    }
    if (out.empty())
      return Error(Errc::usage, std::string("--ci-metadata: ") + s.marker + " says this is a " + s.name +
                                    " job, but none of " + s.commit + ", " + s.ref + ", " + s.run + ", " +
                                    (s.url ? s.url : "GITHUB_SERVER_URL/GITHUB_REPOSITORY") + " is set");
    out[k_ci_system] = s.name;
    return out;
  }
  return Error(Errc::usage, "--ci-metadata: not in a CI job: looked for " + looked_for());
}

} // namespace lodge::config
