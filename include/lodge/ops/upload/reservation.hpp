#pragma once
// A file's reservation: the reserve transaction (under the run's id block) and what its answer
// means for the file. A duplicate is one only once its object is verified in the store (the
// run's listing, else a HEAD); a missing copy's row is retired and the reserve asked again; the
// content of this process's own upload still in flight is waited for. The uploader reserves
// each file through it, and direct uploads (`lodge reserve`) theirs.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// Why an object is not the one a row recorded: its size, or a stamp (ledger, record, and
// with `full` the digest) that differs; a stamp the store did not return is a difference
// only with `full` (a direct upload's object must carry it). nullopt: it is.
[[nodiscard]] std::optional<std::string> object_differs(const store::ObjectInfo &h,
                                                        const ledger::FileRecord &rec,
                                                        const std::string &ledger_uuid, bool full);

// What a reserve gave: the ledger's last answer (its outcome and record) and when it was asked
// (the wall time the row's deadline counts from, and the steady time taken with it: the
// transfer's bound is measured from there), and the file's final result unless its row is
// reserved (or resumed) for its bytes now.
struct Reserved {
  ledger::ReserveResult res;
  int64_t wall_at_reserve = 0;
  int64_t steady_at_reserve = 0;
  // A duplicate (verified), shared, replayed, rejected (quota, idempotency key), in progress
  // elsewhere, or failed; a dry run's planned file too. nullopt: the row is res.record.
  std::optional<FileResult> done;
};

// A reserve already asked with others (Reservation::ask_batch), and when: what reserve()
// takes as its first answer instead of asking the ledger.
struct Asked {
  Result<ledger::ReserveResult> res;
  int64_t wall_at_reserve = 0;
  int64_t steady_at_reserve = 0;
};

class Reservation {
public:
  Reservation(ledger::UploaderLedger &ledger, store::ObjectStore &store, const UploadSettings &settings,
              const util::Clock &clock);

  // The run's part of a reserve request, and the file's from r (relative path, digest, size,
  // types); deadline, holder and stat are the caller's.
  [[nodiscard]] ledger::ReserveRequest request(const std::string &name, const FileResult &r) const;
  // The reserve transaction and what its outcome means: a duplicate only once its object is
  // verified in the store (own_duplicate, when set, is told of one of this very path). When
  // this process's own upload holds the same content, settle_own (when set) settles this
  // worker's pending work and the reserve is asked again (wait_for_own). r is the file so far.
  // With `first`, that answer is the first round's (the rounds after it ask alone).
  [[nodiscard]] Reserved reserve(const ledger::ReserveRequest &req, const FileResult &r,
                                 const std::function<void(const ledger::FileRecord &)> &own_duplicate = {},
                                 const std::function<void()> &settle_own = {},
                                 std::optional<Asked> first = std::nullopt);
  // Several files' first reserves asked together, in one ledger transaction (one commit and
  // one wait for them all), each with its expiry from now; in the requests' order. Not for a
  // dry run.
  [[nodiscard]] std::vector<Asked> ask_batch(std::vector<ledger::ReserveRequest> reqs);
  // How long one ask of the ledger (one reserve, or one batch of them) takes, on average of
  // the recent ones (microseconds); 0 before the first.
  [[nodiscard]] int64_t wait_us() const { return m_wait_us; }
  // The stat cache: r as the unchanged duplicate of its path's row (the file stat `stat`,
  // extension `ext`), or nullopt when the file is to be read.
  [[nodiscard]] std::optional<FileResult> unchanged(const FileResult &r, const std::string &ext,
                                                    const ledger::FileStat &stat);
  // Whether a would-be duplicate's object is in the store as its row says (the run's
  // listing, else HEAD: size, and the stamp where the store returns one): ok; NOT_FOUND (a missing object);
  // or the error that makes this file's outcome `failed` (the HEAD failed, or the object is another one).
  Status check_duplicate(const ledger::FileRecord &existing);

private:
  // What a reserve's outcome other than a duplicate means for the file: its final result, or
  // nullopt when the row is reserved or resumed.
  [[nodiscard]] std::optional<FileResult> answer(const ledger::ReserveResult &res, const FileResult &r) const;
  // in_progress by this process's own upload of the same content: true after settling this
  // worker's pending confirms (settle_own; and a short wait from the second time on), so the
  // caller reserves again; false when another process holds it or its deadline passed.
  bool wait_for_own(const ledger::FileRecord &uploading, int waits, const std::function<void()> &settle_own);

  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  const UploadSettings &m_s;
  const util::Clock &m_clock;
  std::shared_ptr<IdBlocks> m_id_blocks; // the run's (UploadSettings::id_blocks), or one of its own
  std::string m_options_json;            // m_s.options as the row records them (without the content type)
  int64_t m_wait_us = 0;                 // wait_us()
  // Times one ask of the ledger into m_wait_us.
  template <class Ask> auto timed(Ask &&ask);
};

} // namespace lodge::ops
