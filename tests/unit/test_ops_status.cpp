// status's file output: a failure to write names the path, the step and errno's text, with
// an I/O error code (not a configuration error), and leaves no temporary file behind.
#include "support.hpp"

#include <cstring>
#include <filesystem>
#include <lodge/ops/read/status.hpp>
#include <sys/stat.h>

using namespace lodge;

TEST_CASE("write_file_atomically replaces the file in one step") {
  test::TempDir dir;
  auto path = dir.file("lodge.prom");
  test::write_file(path, "old\n");
  ops::write_file_atomically(path, "new\n");
  CHECK(test::read_file(path) == "new\n");
  size_t files = 0;
  for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator(dir.path()))
    ++files;
  CHECK(files == 1);
}

TEST_CASE("write_file_atomically reports I/O errors as IO_ERROR naming the path and the reason") {
  test::TempDir dir;
  auto missing_dir = dir.file("no/such/dir/lodge.prom");
  CHECK(test::throws_errc([&] { ops::write_file_atomically(missing_dir, "x\n"); }, Errc::io_error,
                          missing_dir + ": cannot write (open): " + std::strerror(ENOENT)));
  // Only a regular file is replaced: a directory there stays, and no temp file remains.
  auto target = dir.file("a-directory");
  std::filesystem::create_directory(target);
  CHECK(test::throws_errc([&] { ops::write_file_atomically(target, "x\n"); }, Errc::io_error,
                          target + " is a directory, not a regular file: not replaced"));
  CHECK(std::filesystem::is_directory(target));
  size_t files = 0;
  for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator(dir.path()))
    ++files;
  CHECK(files == 1);
  CHECK(errc_info(Errc::io_error).exit_code == 1);
  CHECK(errc_name(Errc::io_error) == "IO_ERROR");
}

TEST_CASE("the Prometheus textfile prints times as exact seconds") {
  // Printed through a double, 1796110000123 ms became "1.79611e+09" (over 1,000 s off).
  ledger::StatusReport r;
  ledger::JobRun run;
  run.finished_at = 1'796'110'000'123;
  r.last_runs["sweep"] = run;
  r.oldest_uploading_age_ms = 5;
  auto text = ops::status_prometheus(r, ops::Health{});
  CHECK(text.find("lodge_job_last_run_timestamp_seconds{job=\"sweep\"} 1796110000.123\n") !=
        std::string::npos);
  CHECK(text.find("lodge_oldest_uploading_age_seconds 0.005\n") != std::string::npos);
}

TEST_CASE("write_file_atomically gives the file its mode whatever the umask") {
  // lodge runs under umask 077: the textfile came out 0600, unreadable by node_exporter.
  test::TempDir dir;
  auto path = dir.file("lodge.prom");
  auto old = ::umask(077);
  ops::write_file_atomically(path, "x\n");
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  ops::write_file_atomically(path, "y\n", 0640);
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  ::umask(old);
}

TEST_CASE("a failed job run names its cause: the store, reconcile's findings, or the error") {
  config::StatusSettings s;
  ledger::StatusReport r;
  r.now = 10'000;
  r.ledger_created_at = 9'000;
  auto run = [&](const char *job, const char *counts) {
    ledger::JobRun j;
    j.job = job;
    j.finished_at = 9'500;
    j.outcome = "failed";
    j.counts_json = counts;
    r.last_runs[job] = j;
  };
  run("sweep", R"({"claimed":3,"retried":3,"unreachable":3})");
  run("repair", R"({"error":"database is locked","code":"LEDGER_LOCKED"})");
  run("reconcile", R"({"found":{"dangling":219,"corrupt":0,"diverged":2},"clean":false})");
  auto h = ops::evaluate(r, s);
  REQUIRE(h.reasons.size() == 3);
  CHECK(h.reasons[0].code == "store_unreachable");
  CHECK(h.reasons[0].message ==
        "the last sweep (500ms ago) could not reach the store: 3 tasks got no answer or were refused");
  CHECK(h.reasons[1].code == "job_failed");
  CHECK(h.reasons[1].message == "the last repair (500ms ago) failed: database is locked (LEDGER_LOCKED)");
  CHECK(h.reasons[2].code == "reconcile_findings");
  CHECK(h.reasons[2].message ==
        "the last reconcile (500ms ago) found 219 dangling, 2 diverged (run `lodge reconcile` to list them)");
  run("sweep", R"({"error":"GET .lodge/x: connection refused","code":"STORAGE_UNAVAILABLE"})");
  CHECK(ops::evaluate(r, s).reasons[0].message ==
        "the last sweep (500ms ago) could not reach the store: GET .lodge/x: connection refused "
        "(STORAGE_UNAVAILABLE)");
}

TEST_CASE("cleanup via a queue requires relay and consume; upload events require the relay") {
  config::StatusSettings s;
  ledger::StatusReport r;
  s.required_jobs.clear(); // the configured ones are not what this case is about
  r.now = 10 * 3'600'000;
  r.ledger_created_at = 0;
  auto overdue = [&] {
    std::vector<std::string> out;
    for (const auto &reason : ops::evaluate(r, s).reasons)
      if (reason.code == "job_overdue") out.push_back(reason.message);
    return out;
  };
  CHECK(overdue().empty()); // the task table: no relay or consumer is owed
  r.event_types = {"file.active"};
  CHECK(overdue() == std::vector<std::string>{
                         "relay has never run on this ledger (required by upload events; is cron set up?)"});
  r.cleanup_via = "queue";
  CHECK(overdue() ==
        std::vector<std::string>{
            "relay has never run on this ledger (required by cleanup via a queue; is cron set up?)",
            "consume has never run on this ledger (required by cleanup via a queue; is cron set up?)"});
  ledger::JobRun ok;
  ok.outcome = "ok";
  ok.finished_at = r.now - 60'000;
  ok.job = "relay";
  r.last_runs["relay"] = ok;
  ok.job = "consume";
  r.last_runs["consume"] = ok;
  CHECK(overdue().empty());
}
