#include <algorithm>
#include <lodge/ops/upload/open_files.hpp>

namespace lodge::ops {

Concurrency fit_open_files(int jobs, int part_concurrency, uint64_t budget) {
  Concurrency c{std::max(jobs, 1), std::max(part_concurrency, 1), false};
  auto need = [](int j, int p) {
    return static_cast<uint64_t>(j) * static_cast<uint64_t>(p + k_worker_descriptors);
  };
  if (need(c.jobs, c.part_concurrency) <= budget) return c;
  c.lowered = true;
  // Fewer parts in flight per file first: a run of many files keeps its parallelism.
  const uint64_t per_job = budget / static_cast<uint64_t>(c.jobs);
  const auto parts = per_job > k_worker_descriptors ? per_job - k_worker_descriptors : 1;
  c.part_concurrency =
      static_cast<int>(std::clamp<uint64_t>(parts, 1, static_cast<uint64_t>(c.part_concurrency)));
  if (need(c.jobs, c.part_concurrency) <= budget) return c;
  const uint64_t jobs_fit = budget / static_cast<uint64_t>(c.part_concurrency + k_worker_descriptors);
  c.jobs = static_cast<int>(std::clamp<uint64_t>(jobs_fit, 1, static_cast<uint64_t>(c.jobs)));
  return c;
}

Concurrency fit_adaptive(int start, int most, int part_concurrency, uint64_t budget) {
  Concurrency c = fit_open_files(start, part_concurrency, budget);
  const uint64_t fit = budget / static_cast<uint64_t>(c.part_concurrency + k_worker_descriptors);
  c.jobs = static_cast<int>(std::clamp<uint64_t>(fit, static_cast<uint64_t>(c.jobs),
                                                 static_cast<uint64_t>(std::max(most, c.jobs))));
  return c;
}

} // namespace lodge::ops
