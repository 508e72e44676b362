// The uploader's sequence (see lodge/ops/upload/upload.hpp): a file opened and checked, found in
// the stat cache or digested, then reserved, sent and confirmed through its collaborators.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <lodge/failpoint.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <sys/stat.h>

namespace lodge::ops {

const char *to_string(UploadOutcome o) {
  switch (o) {
  case UploadOutcome::active:
    return "active";
  case UploadOutcome::duplicate:
    return "duplicate";
  case UploadOutcome::replayed:
    return "replayed";
  case UploadOutcome::rejected:
    return "rejected";
  case UploadOutcome::failed:
    return "failed";
  case UploadOutcome::skipped:
    return "skipped";
  case UploadOutcome::planned:
    return "planned";
  case UploadOutcome::in_progress:
    return "in_progress";
  }
  return "?";
}

namespace {
// The biggest file whose read and hash may delay the worker's pending confirms (they commit
// with whatever batch comes next); before a bigger one they are waited for at once.
constexpr uint64_t k_confirm_alongside_max = 1ULL << 20;
} // namespace

Uploader::Uploader(ledger::UploaderLedger &ledger, store::ObjectStore &store, UploadSettings settings,
                   const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(std::move(settings)), m_clock(clock),
      m_failure(m_ledger, m_store, m_s, m_clock), m_reservation(m_ledger, m_store, m_s, m_clock),
      m_transfer(m_ledger, m_store, m_s, m_clock),
      m_confirms(m_ledger, m_store, m_s, m_clock, m_transfer, m_failure) {}

Uploader::~Uploader() = default;

FileResult Uploader::upload(const std::string &path) {
  InputFile f;
  f.path = path;
  f.name = path;
  return upload(f);
}

FileResult Uploader::upload(const InputFile &file) {
  auto out = upload_next(file);
  for (auto &last : finish())
    out.push_back(std::move(last));
  return out.back();
}

std::vector<FileResult> Uploader::upload_next(const InputFile &file) {
  (void)m_confirms.take_done(); // only what this call finishes is returned
  // Filled as the upload goes, so a failure after the reservation still reports the
  // record id and key it reserved (they are in the ledger; the user needs them).
  FileResult r;
  r.file = file.path;
  auto failed = [&](Error e) {
    r.outcome = UploadOutcome::failed;
    r.error = std::move(e);
    return r;
  };
  std::optional<FileResult> mine;
  try {
    mine = upload_unguarded(file, r);
  } catch (const LodgeError &e) {
    mine = failed(e.error());
  } catch (const std::exception &e) {
    // A worker thread must never die of one file: report it and go on.
    mine = failed(Error(Errc::internal, e.what()));
  }
  if (mine) m_confirms.end(std::move(*mine));
  return m_confirms.take_done();
}

std::vector<FileResult> Uploader::finish() {
  return m_confirms.finish();
}

namespace {
int64_t ns_of(const struct timespec &t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

ledger::FileStat stat_of(const struct stat &st) {
  return {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino), ns_of(st.st_mtim),
          ns_of(st.st_ctim)};
}

// Whether the file at fd is a regular file; the error names why not.
Status regular_file(const std::string &path, int fd, struct stat &st) {
  if (::fstat(fd, &st) != 0) return Error(Errc::unreadable, path + ": " + std::strerror(errno));
  if (S_ISREG(st.st_mode)) return ok_status();
  const char *what = S_ISDIR(st.st_mode)                          ? "a directory"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                  : "not a regular file";
  return Error(Errc::not_regular_file, util::escape_for_terminal(path) + " is " + what);
}
} // namespace

bool racily_clean(const ledger::FileStat &stat, int64_t taken_ms) {
  constexpr int64_t k_second = 1'000'000'000;
  // Whole-second timestamps (ext4 with 128-byte inodes, ext3, HFS+) or FAT's two seconds:
  // two seconds. Finer ones still advance by the kernel's clock tick: a tenth of a second
  // covers any tick.
  const bool whole_seconds = stat.mtime_ns % k_second == 0 && stat.ctime_ns % k_second == 0;
  const int64_t granularity = whole_seconds ? 2 * k_second : k_second / 10;
  return std::max(stat.mtime_ns, stat.ctime_ns) > taken_ms * 1'000'000 - granularity;
}

bool OpenedFile::unchanged() const {
  struct stat now {};
  return ::fstat(fd.get(), &now) == 0 && now.st_size == st.st_size &&
         ns_of(now.st_mtim) == ns_of(st.st_mtim) && ns_of(now.st_ctim) == ns_of(st.st_ctim) &&
         now.st_ino == st.st_ino && now.st_dev == st.st_dev;
}

std::optional<FileResult> Uploader::upload_unguarded(const InputFile &file, FileResult &r) {
  auto opened = open_checked(file, r);
  if (!opened) return refused(r, UploadOutcome::rejected, opened.error());
  OpenedFile &f = opened.value();
  if (auto unchanged = m_reservation.unchanged(r, f.ext, f.file_stat)) return unchanged;
  auto digests = digest_and_type(f, r);
  if (!digests) return refused(r, UploadOutcome::rejected, digests.error());
  return reserve_and_send(f, digests.value(), r);
}

Result<OpenedFile> Uploader::open_checked(const InputFile &file, FileResult &r) {
  const std::string &path = file.path;
  OpenedFile f;
  // Relative to the directory the walk opened (the name is one component), so nothing the
  // walk checked is resolved again. O_NONBLOCK: opening a FIFO swapped in must not hang;
  // it is refused right after fstat.
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (m_s.follow_symlinks ? 0 : O_NOFOLLOW);
  f.fd = util::Fd(::openat(file.parent ? file.parent->get() : AT_FDCWD, file.name.c_str(), flags));
  if (!f.fd.valid()) {
    int e = errno;
    if (e == ELOOP)
      return Error(Errc::not_regular_file, util::escape_for_terminal(path) +
                                               " is a symbolic link (use --follow-symlinks to follow it)");
    return Error(Errc::unreadable, util::escape_for_terminal(path) + ": " + std::strerror(e) +
                                       (file.parent ? " (since the walk listed it)" : ""));
  }
  if (auto s = regular_file(path, f.fd.get(), f.st); !s) return s.error();
  f.stat_taken_ms = m_clock.now_ms();
  if (file.has_identity && (f.st.st_dev != file.dev || f.st.st_ino != file.ino))
    return Error(Errc::file_changed,
                 util::escape_for_terminal(path) + " was replaced after the walk listed it; not uploaded");
  r.size = static_cast<uint64_t>(f.st.st_size);
  // A big file's read would hold the pending confirms too long (their rows' deadlines run),
  // so they are waited for first.
  if (r.size > k_confirm_alongside_max) m_confirms.settle_all();
  if (r.size == 0 && !m_s.policy.allow_empty)
    return Error(Errc::empty_file, util::escape_for_terminal(path) + " is empty; policy " + m_s.policy.name +
                                       " does not allow empty files");
  if (r.size > m_s.policy.max_size)
    return Error(Errc::too_large, util::escape_for_terminal(path) + " is " + std::to_string(r.size) +
                                      " bytes; policy " + m_s.policy.name + " allows " +
                                      std::to_string(m_s.policy.max_size));
  auto name = sanitize_display_name(path);
  if (!name) return name.error();
  f.name = name.value();
  auto rel = sanitize_relative_path(file.relative_path.empty() ? path : file.relative_path);
  if (!rel) return rel.error();
  r.relative_path = rel.value();
  // Checked before the file is read: the uuid has a fixed length.
  if (auto key = ledger::object_key_for(m_store.key_prefix(), m_s.owner, m_s.run_prefix, std::string(36, '0'),
                                        r.relative_path);
      key.size() > ledger::k_max_key_bytes)
    return Error(Errc::bad_name, util::escape_for_terminal(path) + ": its object key would be " +
                                     std::to_string(key.size()) + " bytes, more than the " +
                                     std::to_string(ledger::k_max_key_bytes) +
                                     " a store allows (a shorter path or --prefix)");
  f.ext = extension_of(f.name);
  if (auto s = check_extension(m_s.policy, f.ext); !s) return s.error();
  f.file_stat = stat_of(f.st);
  return f;
}

Result<Digests> Uploader::digest_and_type(const OpenedFile &f, FileResult &r) {
  if (failpoint::hit("upload.before_read"))
    return Error(Errc::unreadable, util::escape_for_terminal(r.file) + ": injected read failure");
  bool multipart = r.size > m_s.multipart_threshold;
  auto digests = hash_file(f.fd.get(), r.size, multipart);
  if (!digests) return digests.error();
  r.sha256 = digests->sha256;
  // libmagic only where its verdict is checked; elsewhere the signature sniff names it.
  r.media_type = sniff_media_type(digests->head.data(), digests->head.size());
  if (needs_libmagic(m_s.policy, f.ext, r.media_type))
    r.media_type = m_detector.detect(digests->head.data(), digests->head.size());
  if (auto s = check_media_type(m_s.policy, f.ext, r.media_type); !s) return s.error();
  r.content_type =
      m_s.options.content_type.empty() ? content_type_for(f.ext, r.media_type) : m_s.options.content_type;
  return digests;
}

std::optional<FileResult> Uploader::reserve_and_send(OpenedFile &f, const Digests &digests, FileResult &r) {
  bool cacheable = false;
  ledger::ReserveRequest req = reserve_request(f, digests, r, cacheable);
  (void)failpoint::hit("upload.before_reserve");
  return send_reserved(f, digests, r, req, cacheable, std::nullopt);
}

ledger::ReserveRequest Uploader::reserve_request(const OpenedFile &f, const Digests &digests,
                                                 const FileResult &r, bool &cacheable) const {
  ledger::ReserveRequest req = m_reservation.request(f.name, r);
  req.deadline_ms = m_s.policy.deadline_ms;
  // A staged upload an earlier run of the same content left behind is resumed.
  req.resume = !digests.parts.empty();
  if (const auto &me = this_process()) req.holder = me->text();
  // A racily clean stat is never recorded: the next run reads the file again.
  cacheable = !ops::racily_clean(f.file_stat, f.stat_taken_ms);
  if (cacheable) req.stat = f.file_stat;
  req.dry_run = m_s.dry_run;
  return req;
}

std::optional<FileResult> Uploader::send_reserved(OpenedFile &f, const Digests &digests, FileResult &r,
                                                  const ledger::ReserveRequest &req, bool cacheable,
                                                  std::optional<Asked> first) {
  auto own_duplicate = [&](const ledger::FileRecord &dup) {
    if (!m_s.dry_run && cacheable && dup.owner_id == m_s.owner && dup.run_prefix == m_s.run_prefix &&
        dup.relative_path == r.relative_path && dup.upload_status == ledger::FileStatus::active &&
        dup.size == static_cast<int64_t>(r.size) && dup.stat != f.file_stat && f.unchanged())
      (void)m_ledger.record_stat(dup.id, f.file_stat, m_clock.now_ms());
  };
  // This worker's own PUT in flight, or its pending confirm, may hold the same content.
  Reserved got = m_reservation.reserve(
      req, r, own_duplicate, [this] { m_confirms.settle_all(); }, std::move(first));
  if (got.done) return got.done;
  const auto &rec = got.res.record;
  if (m_s.dry_run) {
    r.outcome = UploadOutcome::planned;
    return r;
  }
  r.id = rec.id;
  r.object_key = rec.object_key;
  (void)failpoint::hit("upload.after_reserve");

  auto renewal = m_transfer.renewal(rec, got.wall_at_reserve, got.steady_at_reserve);
  if (failpoint::hit("upload.before_put")) {
    m_failure.fail(r, rec, Error(Errc::storage_unavailable, "injected failure before the PUT"), true);
    return r;
  }
  TransferNote note;
  note.resume = got.res.outcome == ledger::ReserveOutcome::resumed;
  if (note.resume) note.cleanup_due_before = got.res.cleanup_due_before;
  if (!note.resume && m_confirms.can_send_ahead(digests)) {
    m_confirms.send_ahead(r, f, rec, std::move(renewal));
    return std::nullopt;
  }
  // The previous file's PUT ends first: its result lands before this one's.
  m_confirms.land_flights(0);
  auto put = m_transfer.send(f.fd.get(), rec, digests, *renewal, note);
  return m_confirms.after_transfer(r, f, rec, std::move(put), *renewal, note);
}

Result<Digests> Uploader::hash_file(int fd, uint64_t size, bool multipart) {
  const uint64_t part = multipart ? m_s.part_size : 0;
  Progress *p = m_s.progress.get();
  uint64_t mine = 0;
  bool first = true;
  auto on_read = [&](uint64_t n) {
    mine += n;
    if (p) p->hashed.fetch_add(n, std::memory_order_relaxed);
    // Once per file read in more than one chunk, with the rest still to read.
    if (first && mine < size) (void)failpoint::hit("upload.while_hashing");
    first = false;
  };
  if (p) {
    p->hashing_size.fetch_add(size, std::memory_order_relaxed);
    p->hashing.fetch_add(1, std::memory_order_relaxed);
  }
  auto d = digest_file(fd, size, part, 256 << 10, m_buf, on_read);
  if (p) {
    p->hashing.fetch_sub(1, std::memory_order_relaxed);
    p->hashing_size.fetch_sub(size, std::memory_order_relaxed);
    p->hashed.fetch_sub(mine, std::memory_order_relaxed);
  }
  return d;
}

} // namespace lodge::ops
