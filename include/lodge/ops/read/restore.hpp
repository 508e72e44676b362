#pragma once
// What `lodge get` restores of many files: the rows a selection takes, the check that a prefix
// holds any, and the tally of the downloads with the exit status it makes. The caller fetches
// each row (get_file) and prints.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/ops/read/select.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// The ACTIVE rows a selection takes, read whole before any download (no read transaction
// stays open across the transfers). Two rows restoring to one path would overwrite each
// other: USAGE, before anything is written; no row: NOT_FOUND naming `s.query.owner`.
[[nodiscard]] std::vector<ledger::FileRecord> rows_to_restore(ledger::LedgerReports &l, Selection s);

// NOT_FOUND unless `owner` has an ACTIVE file under `prefix` (asked before the output
// directory is made).
void require_any_under_prefix(ledger::LedgerReports &l, const std::string &owner, const std::string &prefix);

// The downloads of one `get`, counted as they end.
struct RestoreTally {
  int64_t files = 0, written = 0, skipped = 0, failed = 0;
  int64_t unreachable = 0; // failed: the store never reached
  uint64_t bytes = 0;
  std::optional<Error> last_error;

  void add(const GetResult &res, const ledger::FileRecord &r);
  // INTERRUPTED's status when stopped; 0 when nothing failed; one file: its error's status;
  // many: 4 if the store was never reached, else 1.
  [[nodiscard]] int exit_status(bool interrupted) const;
};

} // namespace lodge::ops
