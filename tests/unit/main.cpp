// A doctest main whose TempDir is removed only when the test passed, so a failing
// test leaves its files behind to look at.
#define DOCTEST_CONFIG_IMPLEMENT
#include "support.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace lodge::test {
namespace {
std::atomic<bool> g_failed{false};

// Remembers whether the running test case has failed, so TempDir can keep its files.
struct FailureListener : doctest::IReporter {
  explicit FailureListener(const doctest::ContextOptions &) {}
  void report_query(const doctest::QueryData &) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats &) override {}
  void test_case_start(const doctest::TestCaseData &) override { g_failed = false; }
  void test_case_reenter(const doctest::TestCaseData &) override {}
  void test_case_end(const doctest::CurrentTestCaseStats &) override {}
  void test_case_exception(const doctest::TestCaseException &) override { g_failed = true; }
  void subcase_start(const doctest::SubcaseSignature &) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData &ad) override {
    if (ad.m_failed) g_failed = true;
  }
  void log_message(const doctest::MessageData &) override {}
  void test_case_skipped(const doctest::TestCaseData &) override {}
};
} // namespace
REGISTER_LISTENER("tempdir-keeper", 1, FailureListener);

TempDir::TempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lodge-unit-XXXXXX";
  char *made = ::mkdtemp(tmpl.data());
  REQUIRE(made != nullptr);
  m_path = made;
}

TempDir::~TempDir() {
  if (g_failed) {
    std::fprintf(stderr, "kept test directory: %s\n", m_path.c_str());
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

} // namespace lodge::test

int main(int argc, char **argv) {
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
