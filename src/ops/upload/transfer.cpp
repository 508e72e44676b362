// A file's transfer (see lodge/ops/upload/transfer.hpp): the renewal that bounds it, one PUT or
// a staged upload's parts, a resumed row's stored parts proven and kept.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <lodge/crypto/md5.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/upload/transfer.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/threads.hpp>
#include <lodge/util/units.hpp>
#include <mutex>
#include <unistd.h>

namespace lodge::ops {

Renewal::Renewal(ledger::UploadLedger &l, const util::Clock &clock, const ledger::FileRecord &rec,
                 const config::Policy &policy, int64_t grace_ms, int64_t steady_deadline, int64_t margin)
    : m_ledger(l), m_clock(clock), m_id(rec.id), m_holder(rec.holder), m_deadline_ms(policy.deadline_ms),
      m_stall_ms(policy.stall_ms), m_grace_ms(grace_ms), m_margin_ms(margin),
      m_every_ms(std::max<int64_t>(policy.deadline_ms / 4, 1)), m_steady_deadline(steady_deadline),
      m_last_progress(util::steady_ms()), m_last_renewal(clock.now_ms()) {}

void Renewal::begin() {
  std::lock_guard lock(m_mutex);
  m_last_progress = util::steady_ms();
}

int64_t Renewal::bound() const {
  std::lock_guard lock(m_mutex);
  if (m_stop) return 1;
  return std::min(m_steady_deadline, m_last_progress + m_stall_ms);
}

Status Renewal::progress() {
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
    m_stop = Error(Errc::state_changed, "file #" + std::to_string(m_id) +
                                            " is held by another sender now (its deadline was not renewed); "
                                            "not stored");
    return *m_stop;
  case ledger::RenewOutcome::not_uploading:
    break;
  }
  m_stop = Error(Errc::state_changed, "file #" + std::to_string(m_id) +
                                          " changed state during the upload (failed by repair or a sweep?); "
                                          "its deadline was not renewed; not stored");
  return *m_stop;
}

Error Renewal::explain(Error e) const {
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

bool Renewal::taken_over() const {
  std::lock_guard lock(m_mutex);
  return m_taken_over;
}

std::optional<ledger::RenewOutcome> Renewal::ask(int64_t now) {
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

Transfer::Transfer(ledger::UploaderLedger &ledger, store::ObjectStore &store, const UploadSettings &settings,
                   const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(settings), m_clock(clock) {}

std::unique_ptr<Renewal> Transfer::renewal(const ledger::FileRecord &rec, int64_t wall_at_reserve,
                                           int64_t steady_at_reserve) const {
  // Abort our own transfer before the row's deadline, with a margin, so no PUT can land
  // after repair and sweep have acted on the row. Measured on the monotonic clock: a wall-clock
  // step here changes nothing; the PUT lands at most one deadline length after the reserve,
  // or after the last renewal that committed (Renewal).
  int64_t margin = std::clamp<int64_t>(m_s.policy.deadline_ms / 10, 200, 30'000);
  int64_t steady_deadline = steady_at_reserve + (rec.upload_deadline_at - wall_at_reserve) - margin;
  return std::make_unique<Renewal>(m_ledger, m_clock, rec, m_s.policy, m_s.cleanup.grace_ms, steady_deadline,
                                   margin);
}

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

store::PutRequest Transfer::single_request(int fd, const ledger::FileRecord &rec, Renewal &renewal) const {
  store::PutRequest req;
  req.key = rec.object_key;
  req.body = {fd, 0, static_cast<uint64_t>(rec.size), rec.sha256, sent_counter(), &renewal};
  req.content_type = rec.object_content_type();
  req.metadata = object_metadata(m_s.options, rec, m_ledger.uuid());
  req.options = m_s.options;
  req.options.metadata.clear(); // sent above
  req.options.content_type.clear();
  req.deadline_steady_ms = renewal.bound(); // where it starts: the body's watch moves it
  return req;
}

Result<store::PutResult> Transfer::send(int fd, const ledger::FileRecord &rec, const Digests &d,
                                        Renewal &renewal, TransferNote &note) {
  if (d.parts.empty())
    return ours_if_landed(m_store, rec, renewal.explain(m_store.put(single_request(fd, rec, renewal))));
  store::ObjectOptions options = m_s.options;
  options.metadata.clear(); // sent in meta
  options.content_type.clear();
  store::StagedRequest staged{rec.object_key, rec.object_content_type(),
                              object_metadata(m_s.options, rec, m_ledger.uuid()), options};
  return ours_if_landed(m_store, rec, send_staged(fd, rec, d, staged, renewal, note));
}

Result<store::PutResult> Transfer::ours_if_landed(store::ObjectStore &via, const ledger::FileRecord &rec,
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
// Best effort: a staged upload left behind costs storage until reconcile finds it as
// stale (it lists incomplete uploads), so a failure here is said, not fatal.
void abort_or_warn(store::ObjectStore &store, const std::string &key, const std::string &upload_id) {
  auto a = store.abort_staged(key, upload_id);
  if (!a)
    util::log::warn("could not abort the staged upload " + upload_id + " of " + key + ": " +
                    a.error().message +
                    " (lodge reconcile reports it as stale_multipart; --apply aborts it)");
}

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

Result<store::PutResult> Transfer::send_staged(int fd, const ledger::FileRecord &rec, const Digests &d,
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
    if (m_ledger.set_multipart_upload_id(rec.id, id.value(), m_clock.now_ms()) ==
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

Result<std::optional<Transfer::Resumable>>
Transfer::stored_parts(int fd, const ledger::FileRecord &rec, const Digests &d, const std::string &handle) {
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

Result<std::vector<store::Part>> Transfer::put_parts(int fd, const ledger::FileRecord &rec, const Digests &d,
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

} // namespace lodge::ops
