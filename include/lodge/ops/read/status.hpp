#pragma once
// `lodge status`: health judgement over the ledger's figures, JSON and Prometheus forms.

#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/ledger/records.hpp>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

// Why a ledger is unhealthy: a stable machine code (k_reason_codes) and a line for people.
struct Reason {
  std::string code;
  std::string message;
};

// Every reason code status --check can give, in the order it reports them.
inline constexpr const char *k_reason_codes[] = {
    "ledger_diverged", "dead_letters",      "uploading_overdue",  "lease_expired",     "job_failed",
    "job_overdue",     "store_unreachable", "upload_failed_rate", "reconcile_findings"};

struct Health {
  bool healthy = true;
  std::vector<Reason> reasons;
};

// Unhealthy when: the history diverged; dead letters exist; UPLOADING rows are overdue;
// leases have expired; a job's last run failed (store_unreachable when it could not reach
// the store, reconcile_findings when reconcile found discrepancies, job_failed otherwise);
// a job did not run within its interval (one that never ran only when required, once the
// ledger is older than the interval); more than upload_failed_max rows failed since
// r.failed_since.
[[nodiscard]] Health evaluate(const ledger::StatusReport &r, const config::StatusSettings &s);

// The figures `lodge status` reports at `now`: the ledger's counts (failures counted since
// s.upload_failed_window_ms ago), the outbox's mode and what it holds.
[[nodiscard]] ledger::StatusReport read_status(ledger::LedgerReports &reads, ledger::OutboxLedger &outbox,
                                               const config::StatusSettings &s, int64_t now);

[[nodiscard]] nlohmann::json status_json(const ledger::StatusReport &r, const Health &h,
                                         const std::string &ledger_path);

// Prometheus text exposition of the same figures (for node_exporter's textfile collector).
[[nodiscard]] std::string status_prometheus(const ledger::StatusReport &r, const Health &h);

// Writes text to path atomically (temporary file in the same directory, fsync, rename),
// with the permission bits `mode` whatever the umask. Throws LodgeError(io_error) naming
// the path, the failed step and errno's text; the temporary file is removed and an
// existing file at path is left as it was.
void write_file_atomically(const std::string &path, const std::string &text, unsigned mode = 0644);

} // namespace lodge::ops
