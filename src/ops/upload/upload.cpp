#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <lodge/crypto/md5.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/threads.hpp>
#include <lodge/util/transfer_watch.hpp>
#include <lodge/util/units.hpp>
#include <mutex>
#include <sys/stat.h>
#include <thread>

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

Uploader::Uploader(UploaderLedger ledger, store::ObjectStore &store, UploadSettings settings,
                   const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(std::move(settings)), m_clock(clock),
      m_failure(m_ledger, m_store, m_s, m_clock), m_reservation(m_ledger, m_store, m_s, m_clock) {}

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
  m_done.clear();
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
  if (mine) {
    // The earlier files' first: results keep the files' order.
    land_flights(0);
    settle_tails(0);
    m_done.push_back(std::move(*mine));
  }
  return std::move(m_done);
}

std::vector<FileResult> Uploader::finish() {
  m_done.clear();
  land_flights(0);
  settle_tails(0);
  return std::move(m_done);
}

namespace {
int64_t ns_of(const struct timespec &t) {
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

ledger::FileStat stat_of(const struct stat &st) {
  return {static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino), ns_of(st.st_mtim),
          ns_of(st.st_ctim)};
}

} // namespace

bool OpenedFile::unchanged() const {
  struct stat now {};
  return ::fstat(fd.get(), &now) == 0 && now.st_size == st.st_size &&
         ns_of(now.st_mtim) == ns_of(st.st_mtim) && ns_of(now.st_ctim) == ns_of(st.st_ctim) &&
         now.st_ino == st.st_ino && now.st_dev == st.st_dev;
}

bool racily_clean(const ledger::FileStat &stat, int64_t taken_ms) {
  constexpr int64_t k_second = 1'000'000'000;
  // Whole-second timestamps (ext4 with 128-byte inodes, ext3, HFS+) or FAT's two seconds:
  // two seconds. Finer ones still advance by the kernel's clock tick: a tenth of a second
  // covers any tick.
  const bool whole_seconds = stat.mtime_ns % k_second == 0 && stat.ctime_ns % k_second == 0;
  const int64_t granularity = whole_seconds ? 2 * k_second : k_second / 10;
  return std::max(stat.mtime_ns, stat.ctime_ns) > taken_ms * 1'000'000 - granularity;
}

namespace {
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
  if (r.size > k_confirm_alongside_max) {
    land_flights(0);
    settle_tails(0);
  }
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

// The monotonic bound of one file's transfer and its renewal by progress. The row's deadline
// is `policy.deadline` after the reserve; progress is bytes sent (the store tells of them as
// they leave: util::TransferWatch) and parts finished, and progress at least a quarter
// deadline after the last renewal renews the row (UploadLedger::renew, fenced: only while the
// row is still this sender's and its deadline ahead): its deadline becomes `policy.deadline`
// from now and its task's not-before that + grace. The steady bound moves only once a renewal
// committed, to the same length from a steady time taken before the renewal's wall time, less
// the margin: no request may end after the deadline the row shows (measured by this host's
// monotonic clock). A transfer must also move a byte within `policy.stall` of the last
// progress. Renewal is judged by the wall clock (its `now` is the ledger's), the bound by the
// monotonic one. Thread-safe: the part threads share one; one renewal runs at a time, outside
// the lock, so the other parts' bytes never wait for it.
class Uploader::Renewal final : public util::TransferWatch {
public:
  Renewal(ledger::UploadLedger &l, const util::Clock &clock, const ledger::FileRecord &rec,
          const config::Policy &policy, int64_t grace_ms, int64_t steady_deadline, int64_t margin)
      : m_ledger(l), m_clock(clock), m_id(rec.id), m_holder(rec.holder), m_deadline_ms(policy.deadline_ms),
        m_stall_ms(policy.stall_ms), m_grace_ms(grace_ms), m_margin_ms(margin),
        m_every_ms(std::max<int64_t>(policy.deadline_ms / 4, 1)), m_steady_deadline(steady_deadline),
        m_last_progress(util::steady_ms()), m_last_renewal(clock.now_ms()) {}

  // A PUT sent on the sender thread renews through the ledger `via` gives there (the worker's
  // own is busy with the next file); null from it: not renewed. Set before the PUT begins.
  void renew_through(std::function<ledger::UploadLedger *()> via) { m_via = std::move(via); }
  // The transfer begins now: the stall counts from here (a PUT queued behind another waited).
  void begin() {
    std::lock_guard lock(m_mutex);
    m_last_progress = util::steady_ms();
  }

  // The steady time a request begun now must end by (checked again as it goes when its body
  // is watched): the row's bound, or the stall's from the last progress; past once stopped.
  [[nodiscard]] int64_t bound() const {
    std::lock_guard lock(m_mutex);
    if (m_stop) return 1;
    return std::min(m_steady_deadline, m_last_progress + m_stall_ms);
  }
  [[nodiscard]] int64_t bound_ms() const override { return bound(); }
  // Bytes left: progress. A refused renewal stops the transfer (bound() passes at once).
  void on_bytes(uint64_t /*n*/) override { (void)progress(); }

  // Progress (bytes sent, a part finished). An error stops the transfer: the row is no longer
  // this sender's to send (failed by repair or sweep, or held by another sender).
  Status progress() {
    const int64_t steady = util::steady_ms(); // before the wall time the row's deadline counts from
    int64_t now = 0;
    {
      std::lock_guard lock(m_mutex);
      if (m_stop) return *m_stop;
      m_last_progress = steady;
      if (!m_holder || m_renewing) return Unit{}; // a row without a holder cannot be fenced
      now = m_clock.now_ms();
      if (now - m_last_renewal < m_every_ms) return Unit{};
      m_renewing = true;
    }
    const auto out = ask(now);
    std::lock_guard lock(m_mutex);
    m_renewing = false;
    if (!out) {
      // Not renewed: the bound stays where the row's deadline is; tried again a sixteenth
      // deadline later (not at every chunk of bytes).
      m_last_renewal = now - m_every_ms + m_every_ms / 4;
      return Unit{};
    }
    m_last_renewal = now;
    switch (*out) {
    case ledger::RenewOutcome::renewed:
      m_steady_deadline = std::max(m_steady_deadline, steady + m_deadline_ms - m_margin_ms);
      return Unit{};
    case ledger::RenewOutcome::past_deadline:
      // By this host's wall clock the row is overdue, its steady bound not yet (a clock step):
      // the bound stays, and repair or sweep may fail the row; its confirm is then refused.
      return Unit{};
    case ledger::RenewOutcome::not_holder:
      m_taken_over = true;
      m_stop =
          Error(Errc::state_changed, "file #" + std::to_string(m_id) +
                                         " is held by another sender now (its deadline was not renewed); "
                                         "not stored");
      return *m_stop;
    case ledger::RenewOutcome::not_uploading:
      break;
    }
    m_stop =
        Error(Errc::state_changed, "file #" + std::to_string(m_id) +
                                       " changed state during the upload (failed by repair or a sweep?); "
                                       "its deadline was not renewed; not stored");
    return *m_stop;
  }
  // A transfer's error as the bound that ended it says it: the renewal refused (the row is not
  // this sender's any more), the stall (no byte for policy.stall) or the row's deadline.
  [[nodiscard]] Error explain(Error e) const {
    std::lock_guard lock(m_mutex);
    if (m_stop) {
      Error stopped = *m_stop;
      stopped.details = e.details;
      return stopped;
    }
    if (e.code != Errc::deadline_exceeded) return e;
    if (m_last_progress + m_stall_ms < m_steady_deadline)
      e.message = "no bytes sent for " + util::format_duration_exact(m_stall_ms) +
                  " (the policy's stall): " + e.message;
    else
      e.message = "the record's deadline passed: no progress renewed it within the policy's deadline (" +
                  util::format_duration_exact(m_deadline_ms) + "): " + e.message;
    return e;
  }
  [[nodiscard]] Result<store::PutResult> explain(Result<store::PutResult> put) const {
    if (!put) return explain(put.error());
    return put;
  }
  [[nodiscard]] bool taken_over() const {
    std::lock_guard lock(m_mutex);
    return m_taken_over;
  }

private:
  // One renewal asked of the ledger (outside the lock); nullopt when it could not be asked.
  std::optional<ledger::RenewOutcome> ask(int64_t now) {
    ledger::UploadLedger *via = m_via ? m_via() : &m_ledger;
    if (via == nullptr) return std::nullopt;
    try {
      return via->renew(m_id, *m_holder, now + m_deadline_ms, now + m_deadline_ms + m_grace_ms, now);
    } catch (const LodgeError &e) {
      util::log::warn("could not renew the deadline of file #" + std::to_string(m_id) + ": " +
                      e.error().message);
      return std::nullopt;
    }
  }

  ledger::UploadLedger &m_ledger;
  const util::Clock &m_clock;
  const int64_t m_id;
  const std::optional<std::string> m_holder;
  const int64_t m_deadline_ms;
  const int64_t m_stall_ms;
  const int64_t m_grace_ms;
  const int64_t m_margin_ms;
  const int64_t m_every_ms;
  std::function<ledger::UploadLedger *()> m_via; // set before the transfer, read-only during it
  mutable std::mutex m_mutex;
  int64_t m_steady_deadline;
  int64_t m_last_progress;
  int64_t m_last_renewal;
  bool m_renewing = false;     // a renewal is being asked, outside the lock
  std::optional<Error> m_stop; // a renewal was refused: the transfer stops with this
  bool m_taken_over = false;
};

// A file whose single PUT runs on the sender thread: what landing it needs once it ended.
struct Uploader::Flight {
  FileResult r;
  OpenedFile f;
  ledger::FileRecord rec;
  std::unique_ptr<Renewal> renewal;
  Result<store::PutResult> put = Error(Errc::internal, "the PUT did not run");
  util::TaskThread *sender = nullptr; // runs this flight's PUT until it is waited for
  uint64_t ticket = 0;                // the PUT's on the sender

  Flight() = default;
  Flight(const Flight &) = delete;
  Flight &operator=(const Flight &) = delete;
  // A flight dropped before it landed (the worker unwinding) waits for its PUT, which uses
  // this flight's members.
  ~Flight() {
    if (sender == nullptr) return;
    try {
      sender->wait(ticket);
    } catch (...) { // the task catches everything: nothing is thrown here
    }
  }
};

Uploader::~Uploader() = default;

bool Uploader::can_send_ahead(const Digests &d) {
  if (!m_s.send_ahead || !d.parts.empty() || m_s.dry_run || !m_s.open_store) return false;
  if (!m_send_store && !m_send_store_failed) {
    try {
      m_send_store = m_s.open_store();
    } catch (const LodgeError &e) {
      m_send_store_failed = true;
      util::log::warn("sending each file after the next one's reserve is off: " + e.error().message);
    }
  }
  return m_send_store != nullptr;
}

ledger::UploadLedger *Uploader::sender_ledger() {
  if (!m_send_ledger && !m_send_ledger_failed) {
    if (!m_s.open_ledger) {
      m_send_ledger_failed = true;
    } else {
      try {
        m_send_ledger = m_s.open_ledger();
      } catch (const LodgeError &e) {
        m_send_ledger_failed = true;
        util::log::warn("a PUT sent ahead is not renewed while its bytes flow: " + e.error().message);
      }
    }
  }
  return m_send_ledger.get();
}

void Uploader::start_flight(FileResult &r, OpenedFile &f, const ledger::FileRecord &rec,
                            std::unique_ptr<Renewal> renewal) {
  auto fl = std::make_unique<Flight>();
  fl->r = r;
  fl->f = std::move(f);
  fl->rec = rec;
  fl->renewal = std::move(renewal);
  // Made here, on the worker: the sender touches its own connection and the file alone.
  store::PutRequest req = single_request(fl->f.fd.get(), fl->rec, *fl->renewal);
  // Its bytes renew its row from the sender thread, through the sender's own ledger.
  fl->renewal->renew_through([this] { return sender_ledger(); });
  Flight *raw = fl.get();
  store::ObjectStore &via = *m_send_store;
  // One thread per worker sends every flight: a thread made per file cost more CPU than its PUT.
  if (!m_sender) m_sender = std::make_unique<util::TaskThread>();
  raw->sender = m_sender.get();
  // Queued behind the PUT already in the air, if any: it starts the moment that one ends.
  raw->ticket = m_sender->post([raw, &via, req = std::move(req)] {
    try {
      raw->renewal->begin();
      raw->put = ours_if_landed(via, raw->rec, raw->renewal->explain(via.put(req)));
    } catch (const LodgeError &e) {
      raw->put = e.error();
    } catch (const std::exception &e) {
      raw->put = Error(Errc::internal, "sending " + raw->rec.object_key + ": " + e.what());
    }
  });
  m_flights.push_back(std::move(fl));
}

void Uploader::land_flights(size_t keep) {
  while (m_flights.size() > keep) {
    std::unique_ptr<Flight> fl = std::move(m_flights.front());
    m_flights.pop_front();
    land(*fl);
  }
}

void Uploader::land(Flight &fl) {
  fl.sender->wait(fl.ticket); // the task catches everything: nothing to rethrow
  fl.sender = nullptr;
  const TransferNote note;
  auto ended = after_transfer(fl.r, fl.f, fl.rec, std::move(fl.put), *fl.renewal, note);
  if (!ended) return; // its confirm is pending, in m_tails
  Tail t;
  t.r = *ended;
  t.done = std::move(*ended);
  m_tails.push_back(std::move(t));
}

std::optional<FileResult> Uploader::reserve_and_send(OpenedFile &f, const Digests &digests, FileResult &r) {
  ledger::ReserveRequest req = m_reservation.request(f.name, r);
  req.deadline_ms = m_s.policy.deadline_ms;
  // A staged upload an earlier run of the same content left behind is resumed.
  req.resume = !digests.parts.empty();
  if (const auto &me = this_process()) req.holder = me->text();
  // A racily clean stat is never recorded: the next run reads the file again.
  const bool cacheable = !ops::racily_clean(f.file_stat, f.stat_taken_ms);
  if (cacheable) req.stat = f.file_stat;
  req.dry_run = m_s.dry_run;
  (void)failpoint::hit("upload.before_reserve");
  auto own_duplicate = [&](const ledger::FileRecord &dup) {
    if (!m_s.dry_run && cacheable && dup.owner_id == m_s.owner && dup.run_prefix == m_s.run_prefix &&
        dup.relative_path == r.relative_path && dup.upload_status == ledger::FileStatus::active &&
        dup.size == static_cast<int64_t>(r.size) && dup.stat != f.file_stat && f.unchanged())
      (void)m_ledger.uploads.record_stat(dup.id, f.file_stat, m_clock.now_ms());
  };
  // This worker's own PUT in flight, or its pending confirm, may hold the same content.
  Reserved got = m_reservation.reserve(req, r, own_duplicate, [this] {
    land_flights(0);
    settle_tails(0);
  });
  if (got.done) return got.done;
  const auto &rec = got.res.record;
  if (m_s.dry_run) {
    r.outcome = UploadOutcome::planned;
    return r;
  }
  r.id = rec.id;
  r.object_key = rec.object_key;
  (void)failpoint::hit("upload.after_reserve");

  // Abort our own transfer before the row's deadline, with a margin, so no PUT can land
  // after repair and sweep have acted on the row. Measured on the monotonic clock: a wall-clock
  // step here changes nothing; the PUT lands at most one deadline length after the reserve,
  // or after the last renewal that committed (Renewal).
  int64_t margin = std::clamp<int64_t>(m_s.policy.deadline_ms / 10, 200, 30'000);
  int64_t steady_deadline = got.steady_at_reserve + (rec.upload_deadline_at - got.wall_at_reserve) - margin;
  auto renewal = std::make_unique<Renewal>(m_ledger.uploads, m_clock, rec, m_s.policy, m_s.cleanup.grace_ms,
                                           steady_deadline, margin);

  if (failpoint::hit("upload.before_put")) {
    m_failure.fail(r, rec, Error(Errc::storage_unavailable, "injected failure before the PUT"), true);
    return r;
  }
  TransferNote note;
  note.resume = got.res.outcome == ledger::ReserveOutcome::resumed;
  if (note.resume) note.cleanup_due_before = got.res.cleanup_due_before;
  if (!note.resume && can_send_ahead(digests)) {
    // Queued on the sender behind the previous file's PUT, which then lands: the connection
    // never idles between the two, and one reserved file waits per worker at most (for one
    // PUT), its result landing after the previous one's.
    start_flight(r, f, rec, std::move(renewal));
    land_flights(1);
    return std::nullopt;
  }
  // The previous file's PUT ends first: its result lands before this one's.
  land_flights(0);
  auto put = transfer(f.fd.get(), rec, digests, *renewal, note);
  return after_transfer(r, f, rec, std::move(put), *renewal, note);
}

std::optional<FileResult> Uploader::after_transfer(FileResult &r, const OpenedFile &f,
                                                   const ledger::FileRecord &rec,
                                                   Result<store::PutResult> put, const Renewal &renewal,
                                                   const TransferNote &note) {
  r.resumed_bytes = note.resumed_bytes;
  if (put) {
    // The bytes sent were checked against the digest; a file that grew or was rewritten
    // since we measured it is still not the file the user meant.
    // (ctime too: the row's stat must be the file its bytes came from.)
    if (!f.unchanged())
      put = Error(Errc::file_changed,
                  util::escape_for_terminal(r.file) + " changed while it was being uploaded");
  }
  if (!put) {
    const auto &e = put.error();
    if (renewal.taken_over()) {
      // Another sender holds the row now: its state and its staged upload are its own.
      r.outcome = UploadOutcome::failed;
      r.error = e;
      return r;
    }
    std::optional<int64_t> kept_until;
    if (note.staged_kept) {
      // Kept one grace for the next run to resume; a resumed row failing again keeps the time
      // its cleanup had: a file re-sent more often than the grace would otherwise never see
      // its staged upload cleaned up.
      kept_until = m_clock.now_ms() + m_s.cleanup.grace_ms;
      if (note.cleanup_due_before) kept_until = std::min(*kept_until, *note.cleanup_due_before);
    }
    m_failure.fail(r, rec, e, !e.details.ambiguous, kept_until);
    return r;
  }
  // Stored and checked: the confirm is queued and left pending (upload_next's caller learns
  // of it once it committed), with at most k_pending_confirms others.
  if (m_s.progress) m_s.progress->stored.fetch_add(1, std::memory_order_relaxed);
  Tail t;
  t.r = r;
  t.rec = rec;
  begin_tail(t, put.value());
  m_tails.push_back(std::move(t));
  settle_tails(k_pending_confirms);
  return std::nullopt;
}

void Uploader::begin_tail(Tail &t, const store::PutResult &put) {
  FileResult &r = t.r;
  const auto &rec = t.rec;
  try {
    if (failpoint::hit("upload.after_put")) {
      // What a real fault here looks like: the object landed, its answer was lost (a
      // timeout). Ambiguous, so the cleanup waits for the grace instead of running now.
      ErrorDetails lost;
      lost.curl_code = 28; // CURLE_OPERATION_TIMEDOUT
      lost.ambiguous = true;
      m_failure.fail(
          r, rec, Error(Errc::storage_unavailable, "PUT " + rec.object_key + ": no answer (injected)", lost),
          false);
      t.done = r;
      return;
    }
    if (failpoint::hit("upload.confirm")) {
      // The confirmation itself failed: the row stays UPLOADING with its task pending;
      // repair and sweep take it from here. Never reported as success.
      r.outcome = UploadOutcome::failed;
      r.error =
          Error(Errc::internal, "could not record the upload as active (injected); repair will clean it up");
      t.done = r;
      return;
    }
    std::optional<ledger::Retire> retire;
    if (m_s.replace) retire = ledger::Retire{m_s.cleanup.grace_ms, m_s.max_retries};
    // The object is durable before its row says so: file:// writes without fsync, and the
    // confirm waits for a store flush, one for every confirm of its group-commit batch (one
    // syncfs). A failed flush leaves the object perhaps stored (settle_front).
    ledger::Durable durable;
    if (const void *domain = m_store.flush_domain()) {
      durable.domain = domain;
      durable.make = m_store.flusher(); // not this connection: it may run after it is closed
    }
    t.pending.emplace(
        activate_later(m_ledger.uploads, m_store, rec, put, retire, std::move(durable), m_clock));
  } catch (const LodgeError &e) {
    r.outcome = UploadOutcome::failed;
    r.error = e.error();
    t.done = r;
  } catch (const std::exception &e) {
    r.outcome = UploadOutcome::failed;
    r.error = Error(Errc::internal, e.what());
    t.done = r;
  }
}

void Uploader::settle_tails(size_t keep) {
  while (m_tails.size() > keep)
    settle_front();
}

void Uploader::settle_front() {
  Tail &t = m_tails.front();
  FileResult &r = t.r;
  const auto &rec = t.rec;
  auto end = [&] {
    m_done.push_back(std::move(r));
    m_tails.pop_front();
  };
  if (t.done) {
    r = std::move(*t.done);
    end();
    return;
  }
  try {
    switch (t.pending->finish().confirm) {
    case ledger::ConfirmOutcome::confirmed:
      break;
    case ledger::ConfirmOutcome::row_not_uploading:
      r.outcome = UploadOutcome::failed;
      r.error =
          Error(Errc::state_changed,
                "file #" + std::to_string(rec.id) +
                    " changed state during the upload (failed by repair or a sweep past its deadline?); "
                    "not stored");
      end();
      return;
    case ledger::ConfirmOutcome::task_held:
      r.outcome = UploadOutcome::failed;
      r.error = Error(Errc::state_changed,
                      "file #" + std::to_string(rec.id) +
                          " could not be confirmed: a sweep is already cleaning it up (past its "
                          "deadline?); not stored");
      end();
      return;
    }
    r.outcome = UploadOutcome::active;
  } catch (const ledger::NotDurable &e) {
    // The store could not make the object durable: the row stays unconfirmed, the object
    // perhaps stored, so its cleanup waits for the grace.
    Error err = e.error();
    err.details.ambiguous = true;
    m_failure.fail(r, rec, err, false);
  } catch (const LodgeError &e) {
    r.outcome = UploadOutcome::failed;
    r.error = e.error();
  } catch (const std::exception &e) {
    r.outcome = UploadOutcome::failed;
    r.error = Error(Errc::internal, e.what());
  }
  end();
}

namespace {
// Best effort: a staged upload left behind costs storage until reconcile finds it as
// stale (it lists incomplete uploads), so a failure here is said, not fatal.
void abort_or_warn(store::ObjectStore &store, const std::string &key, const std::string &upload_id) {
  auto a = store.abort_staged(key, upload_id);
  if (!a)
    util::log::warn("could not abort the staged upload " + upload_id + " of " + key + ": " +
                    a.error().message +
                    " (lodge reconcile reports it as stale_multipart; --apply aborts it)");
}
} // namespace

store::Metadata object_metadata(const store::ObjectOptions &options, const ledger::FileRecord &rec,
                                const std::string &ledger_uuid) {
  // The path is percent-encoded: metadata values are printable ASCII on the wire, and
  // any UTF-8 name must come back byte for byte.
  // The user's metadata first: lodge's stamp names (reserved) are set over it.
  store::Metadata meta(options.metadata.begin(), options.metadata.end());
  store::Metadata stamp{{store::meta::record, std::to_string(rec.id)},
                        {store::meta::sha256, rec.sha256},
                        {store::meta::ledger, ledger_uuid},
                        {store::meta::owner, rec.owner_id},
                        {store::meta::path, util::percent_encode(rec.relative_path, true)}};
  if (!rec.run_prefix.empty()) stamp[store::meta::prefix] = rec.run_prefix;
  for (auto &[k, v] : stamp)
    meta[k] = std::move(v);
  return meta;
}

store::PutRequest Uploader::single_request(int fd, const ledger::FileRecord &rec, Renewal &renewal) const {
  store::PutRequest req;
  req.key = rec.object_key;
  req.body = {fd, 0, static_cast<uint64_t>(rec.size), rec.sha256, sent_counter(), &renewal};
  req.content_type = rec.object_content_type();
  req.metadata = object_metadata(m_s.options, rec, m_ledger.reads.uuid());
  req.options = m_s.options;
  req.options.metadata.clear(); // sent above
  req.options.content_type.clear();
  req.deadline_steady_ms = renewal.bound(); // where it starts: the body's watch moves it
  return req;
}

Result<store::PutResult> Uploader::transfer(int fd, const ledger::FileRecord &rec, const Digests &d,
                                            Renewal &renewal, TransferNote &note) {
  if (d.parts.empty())
    return ours_if_landed(m_store, rec, renewal.explain(m_store.put(single_request(fd, rec, renewal))));
  store::ObjectOptions options = m_s.options;
  options.metadata.clear(); // sent in meta
  options.content_type.clear();
  store::StagedRequest staged{rec.object_key, rec.object_content_type(),
                              object_metadata(m_s.options, rec, m_ledger.reads.uuid()), options};
  return ours_if_landed(m_store, rec, transfer_staged(fd, rec, d, staged, renewal, note));
}

Result<store::PutResult> Uploader::ours_if_landed(store::ObjectStore &via, const ledger::FileRecord &rec,
                                                  Result<store::PutResult> put) {
  if (!put && put.error().code == Errc::precondition_failed) {
    // Our own earlier attempt may have landed (a retry after a lost answer, or the completion
    // of a resumed row's staged upload by its earlier sender): it is ours only if the object
    // carries our record id and digest.
    auto h = via.head(rec.object_key);
    if (h && h->metadata[store::meta::record] == std::to_string(rec.id) &&
        h->metadata[store::meta::sha256] == rec.sha256)
      return store::PutResult{h->etag, h->version_id};
    Error e = put.error();
    e.details.ambiguous = true; // not ours to delete at once
    return e;
  }
  return put;
}

namespace {
// Whether a staged upload whose parts failed with `e` is kept for a later run to resume:
// not when the file changed under it (its parts are not the content the row records), the
// row is no longer this sender's (another sender's, or failed by someone else), or the
// failure is lodge's own (INTERNAL: nothing is known of what was sent).
bool keep_for_resume(const Error &e) {
  return e.code != Errc::file_changed && e.code != Errc::state_changed && e.code != Errc::internal;
}

// Whether listing a staged upload's parts failed for a reason that does not pass by itself:
// refused (403: credentials without the right to list parts; file://: EACCES), a request the
// store will never take (another 4xx; file://: a part it cannot open, such as a symlink
// loop), or its record unreadable. Not a 5xx, a throttle or a timeout, which a later run may
// get past.
bool listing_refused_for_good(const Error &e) {
  return e.code == Errc::access_denied || e.code == Errc::storage_error || e.code == Errc::metadata_corrupt;
}

// The MD5 of `n` bytes of the file from `off` (a stored part's ETag is its MD5), in hex.
Result<std::string> md5_of_range(int fd, uint64_t off, uint64_t n, std::vector<char> &buf) {
  if (buf.size() < (256U << 10)) buf.resize(256U << 10);
  crypto::Md5 md5;
  while (n > 0) {
    const ssize_t got = ::pread(fd, buf.data(), std::min<uint64_t>(n, buf.size()), static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return Error(Errc::file_changed,
                   got < 0 ? std::string("reading a stored part's bytes again: ") + std::strerror(errno)
                           : std::string("the file is shorter than when it was hashed"));
    md5.update(buf.data(), static_cast<size_t>(got));
    off += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  auto digest = md5.finish();
  return util::hex_encode(digest.data(), digest.size());
}
} // namespace

Result<store::PutResult> Uploader::transfer_staged(int fd, const ledger::FileRecord &rec, const Digests &d,
                                                   const store::StagedRequest &staged, Renewal &renewal,
                                                   TransferNote &note) {
  std::string handle;
  std::vector<std::optional<store::Part>> done(d.parts.size());
  if (note.resume && rec.multipart_upload_id) {
    auto stored = stored_parts(fd, rec, d, *rec.multipart_upload_id);
    if (!stored) {
      // Unknown whether its parts are there: the row fails again, resumable.
      note.staged_kept = true;
      Error e = stored.error();
      e.details.ambiguous = false;
      return e;
    }
    if (stored.value()) {
      handle = *rec.multipart_upload_id;
      done = std::move(stored.value()->parts);
      note.resumed_bytes = stored.value()->bytes;
    }
  }
  if (handle.empty()) {
    auto id = m_store.begin_staged(staged);
    if (!id) return id.error();
    // The handle is on the row before the first part, so cleanup can find it.
    if (m_ledger.uploads.set_multipart_upload_id(rec.id, id.value(), m_clock.now_ms()) ==
        ledger::SetUploadIdOutcome::not_uploading) {
      abort_or_warn(m_store, rec.object_key, id.value());
      return Error(Errc::state_changed,
                   "file #" + std::to_string(rec.id) + " changed state before its first part");
    }
    handle = id.value();
  }
  auto parts = put_parts(fd, rec, d, handle, renewal, std::move(done));
  if (!parts) {
    Error e = parts.error();
    e.details.ambiguous = false; // a part never becomes an object by itself
    // A staged upload another sender holds the row of is that sender's; one whose parts are
    // the file's bytes is kept for the next run to resume (its cleanup waits for the grace).
    if (keep_for_resume(e))
      note.staged_kept = true;
    else if (!renewal.taken_over())
      abort_or_warn(m_store, rec.object_key, handle);
    return e;
  }
  auto put = renewal.explain(m_store.complete_staged(staged, handle, parts.value(), renewal.bound()));
  if (!put && !put.error().details.ambiguous) abort_or_warn(m_store, rec.object_key, handle);
  return put;
}

Result<std::optional<Uploader::Resumable>>
Uploader::stored_parts(int fd, const ledger::FileRecord &rec, const Digests &d, const std::string &handle) {
  const std::string what = "the staged upload of file #" + std::to_string(rec.id);
  auto listed = m_store.list_parts(rec.object_key, handle);
  if (!listed) {
    const Errc c = listed.error().code;
    if (listing_refused_for_good(listed.error())) {
      // Credentials without the right to list parts (S3's s3:ListMultipartUploadParts), a part
      // that cannot be read: every later run would be refused the same, and fail, for ever.
      util::log::warn(what + " cannot be resumed (" + listed.error().message + "): uploading it anew");
      abort_or_warn(m_store, rec.object_key, handle);
      return std::optional<Resumable>();
    }
    if (c != Errc::not_found && c != Errc::unsupported) return listed.error();
    util::log::info(what + " is gone (" + listed.error().message + "): uploading it anew");
    if (c == Errc::unsupported) abort_or_warn(m_store, rec.object_key, handle);
    return std::optional<Resumable>();
  }
  const auto size = static_cast<uint64_t>(rec.size);
  Resumable out;
  out.parts.resize(d.parts.size());
  auto afresh = [&](const std::string &why) {
    util::log::info(what + " " + why + ": uploading it anew");
    abort_or_warn(m_store, rec.object_key, handle);
    return std::optional<Resumable>();
  };
  for (const auto &p : listed.value()) {
    if (p.number < 1 || static_cast<size_t>(p.number) > d.parts.size())
      return afresh("holds part " + std::to_string(p.number) + ", beyond the file's " +
                    std::to_string(d.parts.size()));
    const size_t i = static_cast<size_t>(p.number) - 1;
    const uint64_t off = i * m_s.part_size;
    const uint64_t n = std::min<uint64_t>(m_s.part_size, size - off);
    if (p.size != n)
      return afresh("holds parts of another size (part " + std::to_string(p.number) + ": " +
                    std::to_string(p.size) + " bytes, this run's is " + std::to_string(n) + ")");
    bool same = false;
    if (!p.sha256_hex.empty()) {
      same = p.sha256_hex == d.parts[i];
    } else if (!p.md5_hex.empty()) {
      auto md5 = md5_of_range(fd, off, n, m_buf);
      if (!md5) return md5.error();
      same = md5.value() == p.md5_hex;
    }
    if (!same) {
      util::log::info(what + ": part " + std::to_string(p.number) +
                      " is not proven the file's bytes; sending it again");
      continue;
    }
    out.parts[i] = store::Part{p.number, p.etag, d.parts[i]};
    out.bytes += n;
  }
  return std::optional<Resumable>(std::move(out));
}

Result<std::vector<store::Part>> Uploader::put_parts(int fd, const ledger::FileRecord &rec, const Digests &d,
                                                     const std::string &upload_id, Renewal &renewal,
                                                     std::vector<std::optional<store::Part>> done) {
  const size_t count = d.parts.size();
  done.resize(count);
  // The parts still to send, by index (a resumed upload's stored ones are left out).
  std::vector<size_t> todo;
  for (size_t i = 0; i < count; ++i)
    if (!done[i]) todo.push_back(i);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::optional<Error> first_error;
  auto record_failure = [&](Error e) {
    std::lock_guard lock(mutex);
    if (!first_error) first_error = std::move(e);
    failed = true;
  };
  // Runs on the helper threads too: whatever a store throws becomes the failed result, so
  // the multipart upload is aborted and no thread dies with an exception (std::terminate).
  auto send = [&](store::ObjectStore &store) {
    try {
      for (size_t t; !failed && (t = next++) < todo.size();) {
        const size_t i = todo[t];
        uint64_t off = i * m_s.part_size;
        uint64_t n = std::min<uint64_t>(m_s.part_size, static_cast<uint64_t>(rec.size) - off);
        auto p = store.put_part(rec.object_key, upload_id, static_cast<int>(i + 1),
                                {fd, off, n, d.parts[i], sent_counter(), &renewal}, renewal.bound());
        if (p && t == 0 && failpoint::hit("upload.between_parts"))
          p = Error(Errc::storage_unavailable, "injected failure between parts");
        if (!p) return record_failure(renewal.explain(p.error()));
        done[i] = p.value();
        (void)failpoint::hit("upload.after_part");
        if (auto renewed = renewal.progress(); !renewed) return record_failure(renewed.error());
      }
    } catch (const LodgeError &e) {
      record_failure(e.error());
    } catch (const std::exception &e) {
      record_failure(Error(Errc::internal, "sending a part of " + rec.object_key + ": " + e.what()));
    }
  };
  // Extra connections are opened once per worker and kept for later files.
  size_t helpers = m_s.open_store && !todo.empty()
                       ? std::min<size_t>(todo.size(), static_cast<size_t>(m_s.part_concurrency)) - 1
                       : 0;
  try {
    while (m_part_stores.size() < helpers)
      m_part_stores.push_back(m_s.open_store());
  } catch (const LodgeError &e) {
    helpers = m_part_stores.size();
    util::log::warn("sending parts over one connection: " + e.error().message);
  }
  {
    // Joined on every path out of this block, unwinding included.
    util::ThreadGroup threads;
    for (size_t h = 0; h < helpers; ++h)
      threads.spawn([&, h] { send(*m_part_stores[h]); });
    send(m_store);
    threads.join();
  }
  if (first_error) return *first_error;
  std::vector<store::Part> parts;
  parts.reserve(count);
  for (auto &p : done)
    parts.push_back(std::move(*p));
  return parts;
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
