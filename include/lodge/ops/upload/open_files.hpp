#pragma once
// An upload run's concurrency fitted to the descriptors the process may hold: every worker
// holds its file, a connection per part in flight and its ledger connection's files, so
// jobs x part concurrency can pass the open-file limit long before either number looks big.

#include <cstdint>

namespace lodge::ops {

// What one worker holds besides its part connections: the file it sends, and its ledger
// connection (SQLite: the database, its WAL and shared-memory files); pipelined
// (UploadSettings::send_ahead), also the next file it reads and the sender's connection.
inline constexpr int k_worker_descriptors = 6;

struct Concurrency {
  int jobs = 1;
  int part_concurrency = 1;
  bool lowered = false; // either was lowered to fit
};

// jobs x (part_concurrency + k_worker_descriptors) within `budget` descriptors: part
// concurrency is lowered first (to 1), then jobs (to 1); neither ever goes below 1, so a
// tiny budget gives 1 x 1 and the run still goes (never an error).
[[nodiscard]] Concurrency fit_open_files(int jobs, int part_concurrency, uint64_t budget);

// An adaptive run's bound (ConcurrencyController): `start` fitted as fit_open_files fits
// jobs, then `jobs` is the most workers that fit the budget with that part concurrency,
// `start` to `most`. The part concurrency is lowered only when `start` does not fit.
[[nodiscard]] Concurrency fit_adaptive(int start, int most, int part_concurrency, uint64_t budget);

} // namespace lodge::ops
