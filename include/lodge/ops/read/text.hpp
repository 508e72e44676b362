#pragma once
// The text forms of `lodge status` (its table) and `lodge show` (one field a line), next to
// their JSON forms (status.hpp, retrieve.hpp). Strings: the caller prints them.

#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/read/status.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

// The status table; `verbose` (-v) adds the backend and the task states.
[[nodiscard]] std::string status_text(const ledger::StatusReport &r, const Health &h, const std::string &path,
                                      bool verbose);
// A row and its cleanup task, one field a line.
[[nodiscard]] std::string show_text(const ledger::FileRecord &r, const std::optional<ledger::TaskRecord> &t);

} // namespace lodge::ops
