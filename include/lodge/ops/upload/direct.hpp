#pragma once
// Direct uploads: a trusted host reserves and hands out a presigned PUT (`lodge reserve`); the
// bytes go straight to the store from a host without credentials; `lodge confirm` verifies the
// object before the row becomes ACTIVE. The reserve (Reservation) and the activation
// (ops::activate) are the upload's own; only who sends the bytes differs.

#include <cstdint>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload/file.hpp>
#include <lodge/ops/upload/reservation.hpp>
#include <lodge/ops/upload/row_failure.hpp>
#include <lodge/ops/upload/upload_settings.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// lodge reserve: the checks an upload makes without the bytes (name, extension, size,
// quota, de-dup by the given digest, idempotency) and the same reserve transaction; the
// row's holder is "direct until=<ms>" (the URL's expiry) and its deadline that expiry plus
// the policy's deadline. A reserved row comes with a presigned PUT pinning the object.
struct DirectRequest {
  std::string name; // the relative path the row records
  uint64_t size = 0;
  std::string sha256;
  int64_t expires_s = 3600;
  // reserve --parts: a staged upload of parts this size (the last one shorter), one
  // presigned URL each; its handle is on the row and the holder says
  // "direct until=<ms> parts=<part_size>". 0: one presigned PUT.
  uint64_t part_size = 0;
};
struct DirectPart {
  int number = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  store::PresignedPut put;
};
struct DirectReservation {
  FileResult r;          // outcome: active (reserved, not yet sent), duplicate, replayed, rejected, failed
  bool reserved = false; // a new reservation (r.outcome is then planned: the client sends)
  std::optional<store::PresignedPut> put;
  std::vector<DirectPart> parts; // reserve --parts: one URL per part, instead of put
  int64_t url_expires_at = 0;
};

class DirectUploads {
public:
  DirectUploads(ledger::UploaderLedger &ledger, store::ObjectStore &store, UploadSettings settings,
                const util::Clock &clock);
  DirectUploads(const DirectUploads &) = delete;
  DirectUploads &operator=(const DirectUploads &) = delete;

  [[nodiscard]] DirectReservation reserve(const DirectRequest &d);
  // lodge confirm: a reservation with parts first has its staged upload's parts listed
  // (numbers 1..n, each of the reserved part size, the last the rest) and completed,
  // create-only; missing parts while the URLs are valid: NOT_FOUND, nothing changed; parts
  // of another number or size fail the row as bytes that differ do. Then, as for one PUT:
  // the object of a direct reservation must be exactly the reserved size,
  // carry lodge's stamp for this ledger and row, and hash to the reserved digest (the
  // server's verified checksum, or the bytes read back); then the upload's confirm. Bytes
  // that differ fail the row; their object stays until the URL's expiry plus the grace
  // (while it takes the key, the create-only URL cannot put another there), then goes with a
  // verify pass; past the expiry it is cleaned now. Already ACTIVE: the same answer again.
  // outcome active, or failed with the reason; NOT_FOUND while nothing was sent and the URL
  // is still valid.
  [[nodiscard]] FileResult confirm(int64_t id);
  // lodge confirm --all-due: every direct reservation whose URL has expired, confirmed or
  // failed (nothing sent: failed, its cleanup after the grace as repair would).
  [[nodiscard]] std::vector<FileResult> confirm_due(int limit);

private:
  // The checks made before the reserve (the policy, the store, the name, the key, the
  // extension): the display name the row records (r gets its relative path and types), or
  // the error that rejects the request.
  [[nodiscard]] Result<std::string> check(const DirectRequest &d, FileResult &r);
  // A reserve answered without a new row (out.r): when it is the replay of a reservation still
  // open (`rec`), its URLs handed out again, expiring with it.
  void replay(DirectReservation &out, const ledger::FileRecord &rec);
  // The presigned PUT of a reserved row's object, with the run's options.
  [[nodiscard]] Result<store::PresignedPut> presign(const ledger::FileRecord &rec, int64_t expires_s);
  // A direct staged upload's request (as begin_staged and complete_staged are given it).
  [[nodiscard]] store::StagedRequest direct_staged(const ledger::FileRecord &rec) const;
  // reserve --parts: the staged upload begun and its handle on the row (then a URL per part),
  // or the URLs of the one a replayed reservation began.
  [[nodiscard]] Result<std::vector<DirectPart>>
  presign_parts(const ledger::FileRecord &rec, uint64_t part_size, int64_t expires_s, bool begin);
  // confirm of a reservation with parts: lists and completes its staged upload. nullopt when
  // completed (the object is then checked as one PUT's), else r's final result.
  std::optional<FileResult> complete_parts(FileResult &r, const ledger::FileRecord &rec, uint64_t part_size,
                                           int64_t url_until);
  // What confirm refuses of an object that was sent (fail_sent in direct.cpp says when its
  // object goes).
  void fail_sent(const ledger::FileRecord &rec, const Error &e, int64_t url_until);

  ledger::UploaderLedger &m_ledger;
  store::ObjectStore &m_store;
  UploadSettings m_s; // the collaborators below read it: declared before them
  const util::Clock &m_clock;
  Reservation m_reservation;
  RowFailure m_failure;
};

} // namespace lodge::ops
