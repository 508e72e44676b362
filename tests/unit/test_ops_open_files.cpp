#include "support.hpp"

#include <lodge/ops/upload/open_files.hpp>

using namespace lodge;

namespace {
uint64_t need(const ops::Concurrency &c) {
  return static_cast<uint64_t>(c.jobs) *
         static_cast<uint64_t>(c.part_concurrency + ops::k_worker_descriptors);
}
} // namespace

TEST_CASE("open files: what fits is left alone") {
  auto c = ops::fit_open_files(8, 4, 8 * (4 + ops::k_worker_descriptors));
  CHECK(c.jobs == 8);
  CHECK(c.part_concurrency == 4);
  CHECK_FALSE(c.lowered);
}

TEST_CASE("open files: part concurrency is lowered first, then jobs, never below 1, never refused") {
  // 64 jobs x 16 parts = 64 x 22 = 1408 descriptors; 640 leave 10 a job: 4 parts each.
  auto c = ops::fit_open_files(64, 16, 640);
  CHECK(c.lowered);
  CHECK(c.jobs == 64);
  CHECK(c.part_concurrency == 4);
  CHECK(need(c) <= 640);
  // Even one part a job is too many for 256 jobs in 640: jobs go down to what fits.
  auto j = ops::fit_open_files(256, 8, 640);
  CHECK(j.part_concurrency == 1);
  CHECK(j.jobs == 640 / (1 + ops::k_worker_descriptors));
  CHECK(need(j) <= 640);
  // Nothing fits: 1 x 1, and the run still goes.
  auto none = ops::fit_open_files(8, 4, 0);
  CHECK(none.lowered);
  CHECK(none.jobs == 1);
  CHECK(none.part_concurrency == 1);
  for (uint64_t budget : {7ULL, 17ULL, 100ULL, 1000ULL, 4096ULL})
    for (int jobs : {1, 7, 64, 256})
      for (int parts : {1, 4, 64}) {
        auto f = ops::fit_open_files(jobs, parts, budget);
        CAPTURE(budget);
        CAPTURE(jobs);
        CAPTURE(parts);
        CHECK(f.jobs >= 1);
        CHECK(f.part_concurrency >= 1);
        CHECK(f.jobs <= jobs);
        CHECK(f.part_concurrency <= parts);
        if (budget >= 1 + ops::k_worker_descriptors) CHECK(need(f) <= budget);
        CHECK(f.lowered == (f.jobs != jobs || f.part_concurrency != parts));
      }
}

TEST_CASE("open files: an adaptive run's bound is what fits, up to the most, never below the start") {
  // Plenty: the most (256), part concurrency kept.
  auto c = ops::fit_adaptive(8, 256, 4, 1'000'000);
  CHECK(c.jobs == 256);
  CHECK(c.part_concurrency == 4);
  CHECK_FALSE(c.lowered);
  // 1000 descriptors: 100 workers of 4 parts (4 + 6 each); parts are not lowered for it.
  c = ops::fit_adaptive(8, 256, 4, 1000);
  CHECK(c.jobs == 1000 / (4 + ops::k_worker_descriptors));
  CHECK(c.part_concurrency == 4);
  CHECK(need(c) <= 1000);
  // The start itself does not fit: lowered as a fixed run's jobs are, and that is the bound.
  c = ops::fit_adaptive(8, 256, 16, 60);
  CHECK(c.lowered);
  CHECK(c.jobs == ops::fit_open_files(8, 16, 60).jobs);
  CHECK(c.part_concurrency == ops::fit_open_files(8, 16, 60).part_concurrency);
}
