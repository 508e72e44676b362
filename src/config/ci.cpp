#include <array>
#include <lodge/config/ci.hpp>
#include <lodge/util/strings.hpp>
#include <string_view>

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
  const char *repo;    // -> cirepo
  // -> cireftype: GitHub's GITHUB_REF_TYPE says it (branch or tag); the others set a variable
  // to the tag's name only when the job builds a tag (tag), else the ref is a branch.
  const char *ref_type;
  bool ref_type_is_tag_name;
};

constexpr std::array<CiSystem, 4> k_systems{{
    {"github", "GITHUB_ACTIONS", "GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_RUN_ID", nullptr, true,
     "GITHUB_REPOSITORY", "GITHUB_REF_TYPE", false},
    {"gitlab", "GITLAB_CI", "CI_COMMIT_SHA", "CI_COMMIT_REF_NAME", "CI_PIPELINE_ID", "CI_JOB_URL", true,
     "CI_PROJECT_PATH", "CI_COMMIT_TAG", true},
    {"buildkite", "BUILDKITE", "BUILDKITE_COMMIT", "BUILDKITE_BRANCH", "BUILDKITE_BUILD_NUMBER",
     "BUILDKITE_BUILD_URL", true, "BUILDKITE_REPO", "BUILDKITE_TAG", true},
    {"jenkins", "JENKINS_URL", "GIT_COMMIT", "GIT_BRANCH", "BUILD_NUMBER", "BUILD_URL", false, "GIT_URL",
     "TAG_NAME", true},
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

// A repository URL without the user and password it may carry (https://user:token@host/x:
// https://host/x), which must reach no object nor the ledger; scp-like git@host:x is kept.
std::string without_userinfo(const std::string &url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const auto host = scheme + 3;
  const auto path = url.find('/', host);
  const auto at = url.rfind('@', path == std::string::npos ? std::string::npos : path);
  if (at == std::string::npos || at < host) return url;
  return url.substr(0, host) + url.substr(at + 1);
}

// cireftype: "branch" or "tag" when the CI says which; "" when it does not.
std::string ref_type_of(const CiSystem &s, const std::map<std::string, std::string> &env, bool ref_known) {
  const std::string v = value_of(env, s.ref_type);
  if (!s.ref_type_is_tag_name) return v == "branch" || v == "tag" ? v : "";
  if (!v.empty()) return "tag";
  return ref_known ? "branch" : "";
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
    const std::array<std::pair<const char *, const char *>, 5> vars{{{k_ci_commit, s.commit},
                                                                     {k_ci_ref, s.ref},
                                                                     {k_ci_run, s.run},
                                                                     {k_ci_url, s.url},
                                                                     {k_ci_repo, s.repo}}};
    for (const auto &[name, var] : vars) {
      std::string v = var ? value_of(env, var) : github_run_url(env);
      if (std::string_view(name) == k_ci_repo) v = without_userinfo(v);
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
    if (auto t = ref_type_of(s, env, out.contains(k_ci_ref)); !t.empty()) out[k_ci_ref_type] = t;
    out[k_ci_system] = s.name;
    return out;
  }
  return Error(Errc::usage, "--ci-metadata: not in a CI job: looked for " + looked_for());
}

} // namespace lodge::config
