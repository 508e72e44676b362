#pragma once
// `lodge status`: health judgement over the ledger's figures, JSON and Prometheus forms.

#include <lodge/ledger/records.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

struct Health {
  bool healthy = true;
  std::vector<std::string> problems; // one line each, for people
};

// Unhealthy when: dead letters exist, UPLOADING rows are overdue, leases have expired,
// or no sweep ran within sweep_max_age_ms (a ledger younger than that is given time).
[[nodiscard]] Health evaluate(const ledger::StatusReport &r, int64_t sweep_max_age_ms);

[[nodiscard]] nlohmann::json status_json(const ledger::StatusReport &r, const Health &h,
                                         const std::string &ledger_path);

// Prometheus text exposition of the same figures (for node_exporter's textfile collector).
[[nodiscard]] std::string status_prometheus(const ledger::StatusReport &r, const Health &h);

// Writes text to path atomically (temporary file in the same directory, fsync, rename).
// Throws LodgeError(io_error) naming the path, the failed step and errno's text; the
// temporary file is removed and an existing file at path is left as it was.
void write_file_atomically(const std::string &path, const std::string &text);

} // namespace lodge::ops
