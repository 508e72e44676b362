#pragma once
// repair: the uploads past their deadline failed and their cleanup made sure of; first the
// rows of this host's senders that are gone (ops/holder.hpp), which need not wait for it.

#include <cstdint>
#include <lodge/config/config.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/util/clock.hpp>

namespace lodge::ops {

struct RepairOptions {
  int limit = 1000;
  int batch = 100;
  bool dry_run = false;
  int max_retries = 8;
  // Required: the configuration whose policies give each row its grace (ops::grace_for).
  const config::Config *config = nullptr;
};

struct RepairSummary {
  int64_t examined = 0, repaired = 0, skipped = 0;
  int64_t abandoned =
      0; // of the repaired: held by a process of this host that is gone (before their deadline)
};

[[nodiscard]] RepairSummary repair(RepairLedger l, const RepairOptions &o, const util::Clock &clock);

} // namespace lodge::ops
