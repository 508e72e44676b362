#pragma once
// Who sends an UPLOADING row's bytes, and whether that process is provably gone.
//
// A holder is "boot=BOOT_ID pidns=INODE pid=PID start=TICKS host=NAME": the kernel's boot
// id and the PID namespace make PID and start time (clock ticks since boot, /proc/PID/stat
// field 22) name one process for as long as this boot lasts, and two containers sharing a
// kernel but not a PID namespace never judge each other's processes. A row held in another
// boot, namespace or host is never judged here: it keeps the deadline rule.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/util/clock.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

struct Holder {
  std::string boot_id;
  std::string pid_ns;
  int64_t pid = 0;
  int64_t start_ticks = 0;
  std::string host;
  [[nodiscard]] std::string text() const;
  // "boot=… pidns=… ": what every process of this boot and namespace shares.
  [[nodiscard]] std::string scope() const;
};

[[nodiscard]] std::optional<Holder> parse_holder(const std::string &text);

// This process as a holder; nullopt when /proc cannot say (then rows carry no holder).
[[nodiscard]] const std::optional<Holder> &this_process();

enum class HolderState { alive, gone, not_ours };
// not_ours: another boot, namespace or host, or no holder at all.
[[nodiscard]] HolderState holder_state(const std::optional<std::string> &holder);

struct RecoverSummary {
  int64_t examined = 0, failed = 0;
};

// Fails at once (ledger::RecoveryLedger::fail_abandoned) every UPLOADING row held by a
// process of this boot and namespace that is gone; their cleanup still waits for the grace.
// The rows of live processes, and of anywhere else, are left to their deadline.
// `history_ok`, when given, is asked once, and only when some sender is gone: false (the
// ledger's history is not the store's: a restored copy) fails nothing, as does a diverged
// ledger. The ledger (ledger::RepairLedger): the rows and their failure, and its divergence.
[[nodiscard]] RecoverSummary recover_abandoned(ledger::RepairLedger &l, const config::Config &c,
                                               int max_retries, const util::Clock &clock,
                                               const std::function<bool()> &history_ok = {});

// Waits, polling the ledger, until row `id` is no longer an alive UPLOADING row (its
// sender confirmed or failed it), or its sender is found gone here (then the row is failed
// as recover_abandoned would). False when it gave up first: the row's deadline passed
// or stop() said so. The ledger (ledger::WaitLedger): the row it polls, and
// recover_abandoned's.
[[nodiscard]] bool wait_for_upload(ledger::WaitLedger &l, int64_t id, const config::Config &c,
                                   int max_retries, const util::Clock &clock,
                                   const std::function<bool()> &stop);

// The URL expiry of a direct reservation's holder ("direct until=<ms>", followed by
// " parts=<part size>" for reserve --parts); nullopt for any
// other holder.
[[nodiscard]] std::optional<int64_t> direct_until(const std::optional<std::string> &holder);

// Who holds an UPLOADING row, for a message: "direct reservation #ID until <UTC>", or
// "pid N on HOST" (until its deadline), or "another process until <UTC>".
[[nodiscard]] std::string describe_holder(const ledger::FileRecord &row);

// How a bounded wait for another sender ended.
struct HolderWait {
  bool settled = false; // the row is no longer an alive UPLOADING one (or its gone sender was failed)
  std::string held_by;  // else: who holds it (describe_holder), when the wait gave up
};
// wait_for_upload bounded by `until_ms` too (by `clock`), pausing with `pause`: a direct
// reservation is never waited for (its sender is a person with a URL, done when they are);
// a live sender is waited for until the bound or its deadline, whichever is first.
[[nodiscard]] HolderWait wait_for_holder(ledger::WaitLedger &l, int64_t id, const config::Config &c,
                                         int max_retries, const util::Clock &clock, int64_t until_ms,
                                         const std::function<bool()> &stop,
                                         const std::function<void(int64_t ms)> &pause);

} // namespace lodge::ops
