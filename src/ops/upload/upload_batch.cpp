// Uploader::upload_batch (see lodge/ops/upload/upload.hpp): several small files' reserves in
// one ledger transaction. Each file is opened, checked and hashed as upload_next does it, its
// reserve asked with the others', then reserved (the rounds after the first asked alone, as
// always), sent and confirmed in the files' order, so results keep that order too.
#include <algorithm>
#include <lodge/failpoint.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <utility>

namespace lodge::ops {

namespace {
// A file of the batch: done before its reserve (rejected, unchanged), or waiting for it.
struct Item {
  FileResult r;
  std::optional<FileResult> done;
  std::optional<OpenedFile> f;
  Digests digests;
  ledger::ReserveRequest req;
  bool cacheable = false;
  size_t asked = 0; // its place among the requests asked together
};

// What upload_next makes of a file whose step threw: a failed result, never a dead worker.
template <class Step> std::optional<FileResult> guarded(FileResult &r, Step &&step) {
  auto failed = [&](Error e) {
    r.outcome = UploadOutcome::failed;
    r.error = std::move(e);
    return r;
  };
  try {
    return step();
  } catch (const LodgeError &e) {
    return failed(e.error());
  } catch (const std::exception &e) {
    return failed(Error(Errc::internal, e.what()));
  }
}
} // namespace

bool Uploader::batch_fits(const InputFile &file, uint64_t bytes_before) const {
  return !m_s.dry_run && m_s.send_ahead && file.size <= m_s.multipart_threshold &&
         bytes_before + file.size <= k_batch_bytes;
}

size_t batch_size_for(int64_t put_us, int64_t wait_us, size_t most) {
  if (put_us <= 0 || wait_us <= 0) return 1;
  return std::clamp<size_t>(1 + static_cast<size_t>(wait_us / put_us), 1, std::max<size_t>(most, 1));
}

size_t Uploader::batch_limit() const {
  if (m_s.batch_files > 0) return std::min(m_s.batch_files, k_batch_files);
  return batch_size_for(m_confirms.put_us(), m_reservation.wait_us(), k_batch_files);
}

std::vector<FileResult> Uploader::upload_batch(const std::vector<InputFile> &files) {
  if (files.size() < 2 || m_s.dry_run) {
    std::vector<FileResult> out;
    for (const auto &file : files)
      for (auto &r : upload_next(file))
        out.push_back(std::move(r));
    return out;
  }
  (void)m_confirms.take_done(); // only what this call finishes is returned
  std::vector<Item> items(files.size());
  std::vector<ledger::ReserveRequest> reqs;
  for (size_t i = 0; i < files.size(); ++i) {
    Item &it = items[i];
    it.r.file = files[i].path;
    it.done = guarded(it.r, [&]() -> std::optional<FileResult> {
      auto opened = open_checked(files[i], it.r);
      if (!opened) return refused(it.r, UploadOutcome::rejected, opened.error());
      if (auto unchanged = m_reservation.unchanged(it.r, opened->ext, opened->file_stat)) return unchanged;
      auto digests = digest_and_type(opened.value(), it.r);
      if (!digests) return refused(it.r, UploadOutcome::rejected, digests.error());
      it.digests = std::move(digests.value());
      it.req = reserve_request(opened.value(), it.digests, it.r, it.cacheable);
      it.f = std::move(opened.value());
      (void)failpoint::hit("upload.before_reserve");
      return std::nullopt;
    });
    if (it.done) continue;
    it.asked = reqs.size();
    reqs.push_back(it.req);
  }
  std::vector<Asked> asked;
  if (!reqs.empty()) {
    try {
      asked = m_reservation.ask_batch(std::move(reqs));
    } catch (const LodgeError &e) { // the batch's transaction failed: so did each reserve
      asked.assign(items.size(), Asked{e.error(), 0, 0});
    }
  }
  for (auto &it : items) {
    std::optional<FileResult> mine = std::move(it.done);
    if (!mine)
      mine = guarded(it.r, [&] {
        return send_reserved(*it.f, it.digests, it.r, it.req, it.cacheable, std::move(asked.at(it.asked)));
      });
    if (mine) m_confirms.end(std::move(*mine));
  }
  return m_confirms.take_done();
}

} // namespace lodge::ops
