#pragma once
// `lodge reserve` and `lodge confirm` as the command runs them: what is checked before a
// direct upload's own steps (DirectUploads), and the exit status of what came back.

#include <cstdint>
#include <lodge/ops/upload/direct.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <vector>

namespace lodge::ops {

// reserve: UNSUPPORTED when the store cannot sign an upload URL, the store's refusal of the
// object options, then the reservation.
[[nodiscard]] DirectReservation reserve_direct(ledger::UploaderLedger &ledger, store::ObjectStore &st,
                                               const UploadSettings &s, const util::Clock &clock,
                                               const DirectRequest &d);

// confirm: each of `ids` in turn, or (`all_due`) every reservation whose URL has expired.
struct ConfirmReport {
  std::vector<FileResult> results;
  // The worst of the results' (direct_exit_status); 0 when there were none.
  [[nodiscard]] int exit_status() const;
};
[[nodiscard]] ConfirmReport confirm_direct(ledger::UploaderLedger &ledger, store::ObjectStore &st,
                                           const UploadSettings &s, const util::Clock &clock,
                                           const std::vector<int64_t> &ids, bool all_due);

} // namespace lodge::ops
