#pragma once
// `upload --ci-metadata`: which build made a file, read from the CI's environment (the CLI
// hands the environment in) and recorded as metadata under fixed names, the same whatever
// the CI, so `list --metadata cicommit=...` finds a build's files on any of them.

#include <lodge/error.hpp>
#include <map>
#include <string>

namespace lodge::config {

// The names recorded: letters only, as lodge's own stamp names are ("lodgerecord"). A hyphen
// fails on Azure (a metadata name must be a C# identifier); an underscore passes lodge's
// check but many HTTP servers and proxies drop a header whose name holds one (nginx by
// default, werkzeug, hence moto), so the object would silently lose it.
inline constexpr const char *k_ci_commit = "cicommit";
inline constexpr const char *k_ci_ref = "ciref";
inline constexpr const char *k_ci_run = "cirun";
inline constexpr const char *k_ci_url = "ciurl";
inline constexpr const char *k_ci_system = "cisystem";
inline constexpr const char *k_ci_repo = "cirepo";
inline constexpr const char *k_ci_ref_type = "cireftype";

// The CI this environment is a job of, by the variable each sets in every job:
// GITHUB_ACTIONS=true (github), GITLAB_CI=true (gitlab), BUILDKITE=true (buildkite),
// JENKINS_URL (jenkins), asked in that order; from its variables:
//   github:    GITHUB_SHA, GITHUB_REF_NAME, GITHUB_RUN_ID,
//              GITHUB_SERVER_URL/GITHUB_REPOSITORY/actions/runs/GITHUB_RUN_ID
//   gitlab:    CI_COMMIT_SHA, CI_COMMIT_REF_NAME, CI_PIPELINE_ID, CI_JOB_URL
//   buildkite: BUILDKITE_COMMIT, BUILDKITE_BRANCH, BUILDKITE_BUILD_NUMBER, BUILDKITE_BUILD_URL
//   jenkins:   GIT_COMMIT, GIT_BRANCH, BUILD_NUMBER, BUILD_URL
// as cicommit, ciref, cirun, ciurl, and cisystem the CI's name; the repository as cirepo
// (GITHUB_REPOSITORY, CI_PROJECT_PATH, BUILDKITE_REPO, GIT_URL; a URL's user and password
// left out) and cireftype, branch or tag (GITHUB_REF_TYPE; elsewhere "tag" when CI_COMMIT_TAG,
// BUILDKITE_TAG or TAG_NAME is set, else "branch" when the ref is known). A variable unset or
// empty is left out (Jenkins without its git plugin has no GIT_COMMIT). USAGE, naming what it
// looked for, outside any of them or when the CI set none of the four; USAGE naming the
// variable when a value is not printable ASCII (metadata travels in HTTP headers).
[[nodiscard]] Result<std::map<std::string, std::string>>
ci_metadata(const std::map<std::string, std::string> &env);

} // namespace lodge::config
