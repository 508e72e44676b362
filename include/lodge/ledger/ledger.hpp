#pragma once
// The ledger: every upload's intent and every compensation's execution state.
// Ledger is the interface the operations talk to; SQLite is the embedded backend and the
// only place its SQL lives (ledger/sqlite_ledger.cpp). Every write is one short
// BEGIN IMMEDIATE transaction; every state change is a conditional UPDATE whose changed
// row count is checked.

#include <lodge/ledger/records.hpp>
#include <lodge/util/clock.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ledger {

struct OpenOptions {
  std::string path;
  int64_t busy_timeout_ms = 10'000;
  bool force_network_fs = false;
  const util::Clock* clock = &util::system_clock();
};

class Ledger {
public:
  virtual ~Ledger() = default;

  [[nodiscard]] virtual const std::string& path() const = 0;
  // The uuid made when the ledger was created; stamped into every object's metadata.
  [[nodiscard]] virtual const std::string& uuid() const = 0;
  [[nodiscard]] virtual int schema_version() = 0;
  [[nodiscard]] virtual StatusReport status(int64_t now) = 0;
  virtual void record_job_run(const JobRun& run) = 0;
};

// Opens (creating with mode 0600 when missing) and migrates the SQLite ledger at
// opts.path. Throws LodgeError: LEDGER_UNUSABLE (corrupt, not a database, a symlink,
// not a lodge ledger), LEDGER_TOO_NEW, LEDGER_ON_NETWORK_FS, LEDGER_LOCKED.
[[nodiscard]] std::unique_ptr<Ledger> open_sqlite_ledger(const OpenOptions& opts);

} // namespace lodge::ledger
