#pragma once
// A reserved row that failed: marked so in the ledger, and what it left in the store cleaned up
// at once, through sweep's path, when nothing more can land there. The uploader, its confirm
// pipeline and direct uploads fail their rows through it.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/ledger/records.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <optional>

namespace lodge::ops {

class RowFailure {
public:
  RowFailure(ledger::UploaderLedger &ledger, store::ObjectStore &store, const UploadSettings &settings,
             const util::Clock &clock);
  // Marks the row failed (definite: nothing more can land; then compensates at once unless
  // `kept_until` is set: the staged upload stays for a later run to resume, its cleanup due
  // then). r ends failed with e.
  void fail(FileResult &r, const ledger::FileRecord &rec, const Error &e, bool definite,
            std::optional<int64_t> kept_until = std::nullopt);
  // A failed row's cleanup task, claimed and run now through sweep's path (the upload speaking
  // in the log), instead of when it comes due; nothing when there is none or it is held.
  void clean_up_now(const ledger::FileRecord &rec);

private:
  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  const UploadSettings &m_s;
  const util::Clock &m_clock;
};

} // namespace lodge::ops
