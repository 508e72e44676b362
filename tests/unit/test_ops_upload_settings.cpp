// An upload's settings from the configuration and the command's inputs
// (ops/upload/settings.hpp): the flags over the configuration, the policy's object options
// and expiry, the run's concurrency and its open-file fit, the filter's stdin.
#include "support.hpp"

#include <lodge/ops/upload/open_files.hpp>
#include <lodge/ops/upload/settings.hpp>

using namespace lodge;

namespace {
config::Config configured() {
  config::Config c;
  c.policies["default"].grace_ms = 1'000;
  c.policies["default"].expire_after_ms = 5'000;
  c.default_owner = "o";
  c.part_size = 16ULL << 20;
  c.part_concurrency = 4;
  c.jobs = 8;
  c.store = "file:///srv/x";
  c.ledger = "/srv/l.db";
  return c;
}

Errc code_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const LodgeError &e) {
    return e.error().code;
  }
  return Errc::ok;
}
} // namespace

TEST_CASE("upload_settings: the flags over the configuration, the policy's expiry unless given") {
  const auto c = configured();
  ops::UploadInputs in;
  auto s = ops::upload_settings(c, in, {});
  CHECK(s.owner == "o");
  CHECK(s.part_size == (16ULL << 20));
  CHECK(s.part_concurrency == 4);
  CHECK(s.expire_after_ms == 5'000);
  CHECK(s.cleanup.grace_ms == 1'000);
  CHECK_FALSE(s.listings); // file://: no listing cache
  in.part_size = "32M";
  in.part_concurrency = "2";
  in.expire_after = "never";
  s = ops::upload_settings(c, in, {});
  CHECK(s.part_size == (32ULL << 20));
  CHECK(s.part_concurrency == 2);
  CHECK_FALSE(s.expire_after_ms);
  in.expire_after = "2d";
  CHECK(ops::upload_settings(c, in, {}).expire_after_ms == 2 * 86'400'000LL);
  in.part_size = "1M";
  CHECK(code_of([&] { (void)ops::upload_settings(c, in, {}); }) == Errc::usage);
  in.part_size.clear();
  in.policy = "none";
  CHECK(code_of([&] { (void)ops::upload_settings(c, in, {}); }) == Errc::config_invalid);
}

TEST_CASE("object_options: --metadata over the CI's names, lowercased; a bad assignment is refused") {
  const std::map<std::string, std::string> env{{"GITHUB_ACTIONS", "true"}, {"GITHUB_SHA", "abc1234"}};
  ops::ObjectInputs in;
  in.ci_metadata = true;
  in.env = &env;
  in.metadata = {"CICommit=mine"};
  auto o = ops::object_options(in, config::Policy{});
  CHECK(o.metadata["cicommit"] == "mine");
  in.tags = {"no-equals"};
  CHECK(code_of([&] { (void)ops::object_options(in, config::Policy{}); }) == Errc::usage);
}

TEST_CASE("direct_settings: confirm goes without an owner; reserve takes the object options") {
  auto c = configured();
  c.default_owner.clear();
  ops::UploadInputs in;
  in.with_owner = false;
  CHECK(ops::direct_settings(c, in, false).owner.empty());
  in.with_owner = true;
  CHECK(code_of([&] { (void)ops::direct_settings(c, in, true); }) == Errc::usage);
}

TEST_CASE("plan_run: adaptive unless someone chose the jobs; jobs x parts fitted to the open files") {
  auto c = configured();
  ops::RunSpec spec;
  spec.settings.part_concurrency = 4;
  CHECK_FALSE(ops::plan_run(spec, c, 0, 1'000'000));
  CHECK_FALSE(spec.jobs_fixed);
  CHECK(spec.skips.ledger == "/srv/l.db");
  CHECK(spec.skips.store_root == "/srv/x");
  ops::RunSpec fixed;
  fixed.settings.part_concurrency = 64;
  auto note = ops::plan_run(fixed, c, 64, 512);
  CHECK(fixed.jobs_fixed);
  REQUIRE(note.has_value());
  CHECK(note->jobs == 64);
  CHECK(note->to_jobs == fixed.jobs);
  CHECK(fixed.jobs * (fixed.settings.part_concurrency + ops::k_worker_descriptors) <= 512);
}

TEST_CASE("make_filter: none when nothing is left out; stdin is read once") {
  int reads = 0;
  auto read = [&reads] {
    ++reads;
    return std::string("- *.tmp\n");
  };
  CHECK_FALSE(ops::make_filter({}, read));
  ops::FilterInputs in;
  in.rules = {{"filter-from", "-"}};
  CHECK(ops::make_filter(in, read));
  CHECK(reads == 1);
  in.stdin_taken = true; // --files-from -
  CHECK(code_of([&] { (void)ops::make_filter(in, read); }) == Errc::usage);
  in.stdin_taken = false;
  in.rules.emplace_back("exclude-from", "-");
  CHECK(code_of([&] { (void)ops::make_filter(in, read); }) == Errc::usage);
}
