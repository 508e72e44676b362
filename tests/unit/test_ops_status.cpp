// status's file output: a failure to write names the path, the step and errno's text, with
// an I/O error code (not a configuration error), and leaves no temporary file behind.
#include "support.hpp"

#include <cstring>
#include <filesystem>
#include <lodge/ops/status.hpp>

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
  // The rename fails when the target is a directory; the old target and no temp file remain.
  auto target = dir.file("a-directory");
  std::filesystem::create_directory(target);
  CHECK(test::throws_errc([&] { ops::write_file_atomically(target, "x\n"); }, Errc::io_error,
                          target + ": cannot write (rename): " + std::strerror(EISDIR)));
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
  CHECK(text.find("lodge_job_last_finished_timestamp_seconds{job=\"sweep\"} 1796110000.123\n") !=
        std::string::npos);
  CHECK(text.find("lodge_oldest_uploading_age_seconds 0.005\n") != std::string::npos);
}
