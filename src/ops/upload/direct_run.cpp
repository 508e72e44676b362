// `lodge reserve` and `lodge confirm` as the command runs them (direct_run.hpp).
#include <algorithm>
#include <lodge/ops/upload/direct_run.hpp>
#include <lodge/ops/upload/report.hpp>

namespace lodge::ops {

DirectReservation reserve_direct(ledger::UploaderLedger &ledger, store::ObjectStore &st,
                                 const UploadSettings &s, const util::Clock &clock, const DirectRequest &d) {
  if (!st.capabilities().presign)
    throw LodgeError(Errc::unsupported,
                     "reserve: " + st.describe() +
                         " cannot sign an upload URL (direct uploads need an S3 store, or an "
                         "Azure store with an account key)");
  if (auto a = st.accepts(s.options); !a) throw LodgeError(a.error());
  DirectUploads up(ledger, st, s, clock);
  return up.reserve(d);
}

int ConfirmReport::exit_status() const {
  int status = errc_info(Errc::ok).exit_code;
  for (const auto &r : results)
    status = std::max(status, direct_exit_status(r));
  return status;
}

ConfirmReport confirm_direct(ledger::UploaderLedger &ledger, store::ObjectStore &st, const UploadSettings &s,
                             const util::Clock &clock, const std::vector<int64_t> &ids, bool all_due) {
  DirectUploads up(ledger, st, s, clock);
  ConfirmReport out;
  if (all_due) {
    out.results = up.confirm_due(100'000);
  } else {
    for (auto id : ids)
      out.results.push_back(up.confirm(id));
  }
  return out;
}

} // namespace lodge::ops
