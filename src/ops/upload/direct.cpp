// Direct uploads (see lodge/ops/upload/direct.hpp): the reservation a presigned URL is handed
// out for, and `lodge confirm`'s checks of what the client sent before the upload's activation.

#include <algorithm>
#include <cstring>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/direct.hpp>
#include <lodge/ops/upload/transfer.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::ops {
namespace {

// The holder of a direct reservation: not a process of this host (so killed-run recovery
// never judges it), but the URL's expiry, which `confirm --all-due` goes by.
constexpr std::string_view k_direct_holder = "direct until=";

// With parts (reserve --parts) the holder goes on: " parts=<part size>".
constexpr std::string_view k_parts_holder = " parts=";

std::optional<int64_t> direct_until(const ledger::FileRecord &rec) {
  if (!rec.holder || rec.holder->rfind(k_direct_holder, 0) != 0) return std::nullopt;
  std::string_view rest = std::string_view(*rec.holder).substr(k_direct_holder.size());
  return util::parse_int(rest.substr(0, rest.find(' ')));
}

// The part size of a reservation with parts; 0 for one presigned PUT.
uint64_t direct_part_size(const ledger::FileRecord &rec) {
  if (!rec.holder || !rec.multipart_upload_id) return 0;
  auto at = rec.holder->find(k_parts_holder);
  if (at == std::string::npos) return 0;
  auto n = util::parse_int(std::string_view(*rec.holder).substr(at + k_parts_holder.size()));
  return n && *n > 0 ? static_cast<uint64_t>(*n) : 0;
}

// Why a store cannot take this file as parts of `part_size` through presigned URLs.
std::optional<Error> parts_refusal(const store::ObjectStore &store, const std::string &shown, uint64_t size,
                                   uint64_t part_size) {
  const auto caps = store.capabilities();
  if (!caps.presign_parts)
    return Error(Errc::unsupported,
                 shown + ": " + store.describe() +
                     " cannot sign a URL per part (reserve --parts needs an S3 store, or an "
                     "Azure one with the account key)");
  if (size == 0)
    return Error(Errc::usage, shown + ": an empty file has no parts (reserve it without --parts)");
  if (size > part_size && part_size < caps.min_part_size)
    return Error(Errc::usage, shown + ": --part-size " + util::format_size(part_size) + " is below the " +
                                  util::format_size(caps.min_part_size) +
                                  " every part but the last must have on " + store.describe());
  if (caps.max_part_size > 0 && size > caps.max_part_size && part_size > caps.max_part_size)
    return Error(Errc::usage, shown + ": --part-size " + util::format_size(part_size) + " is above the " +
                                  util::format_size(caps.max_part_size) + " a part may have on " +
                                  store.describe());
  const uint64_t count = (size + part_size - 1) / part_size;
  if (caps.max_parts > 0 && count > static_cast<uint64_t>(caps.max_parts))
    return Error(Errc::usage, shown + " would be " + std::to_string(count) + " parts of " +
                                  util::format_size(part_size) + "; " + store.describe() + " takes at most " +
                                  std::to_string(caps.max_parts) + " (a larger --part-size)");
  return std::nullopt;
}

void describe(FileResult &r, const ledger::FileRecord &rec) {
  r.file = rec.relative_path;
  r.relative_path = rec.relative_path;
  r.id = rec.id;
  r.object_key = rec.object_key;
  r.sha256 = rec.sha256;
  r.size = static_cast<uint64_t>(rec.size);
  r.media_type = rec.media_type;
  r.content_type = rec.object_content_type();
}
} // namespace

DirectUploads::DirectUploads(ledger::UploaderLedger &ledger, store::ObjectStore &store,
                             UploadSettings settings, const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(std::move(settings)), m_clock(clock),
      m_reservation(m_ledger, m_store, m_s, m_clock), m_failure(m_ledger, m_store, m_s, m_clock) {}

// What confirm refuses of an object that was sent: the row fails now, but its object is not
// deleted while the URL is valid. Whoever holds the URL may PUT again until it expires; the
// URL is create-only, so while this object occupies the key nothing else can land there,
// and deleting it would free the key for a retry that lands after the task is done (a
// leftover for reconcile). So the task owes a verify pass (a PUT begun before the expiry may
// still arrive after the delete) and is due at the URL's expiry plus the grace; past the
// expiry the delete runs at once, through sweep's path (I8's stamp check), as for any
// failure that cleans up itself.
void DirectUploads::fail_sent(const ledger::FileRecord &rec, const Error &e, int64_t url_until) {
  const int64_t now = m_clock.now_ms();
  // fail_abandoned's task is due at the earlier of now + `grace` and deadline + `grace`: the
  // sender here ends when the URL expires (before the deadline), so its grace runs from there.
  const int64_t grace = std::max<int64_t>(0, url_until - now) + m_s.cleanup.grace_ms;
  const bool expired = now >= url_until;
  try {
    if (m_ledger.fail_abandoned(rec.id, rec.holder.value_or(""), std::string(e.name()) + ": " + e.message,
                                now, expired ? 0 : grace, m_s.max_retries) != ledger::RepairOutcome::repaired)
      return; // no longer UPLOADING as reserved: whoever moved it on owns the cleanup
  } catch (const LodgeError &le) {
    util::log::error("could not mark file #" + std::to_string(rec.id) + " failed: " + le.error().message +
                     "; repair will");
    return;
  }
  if (expired) m_failure.clean_up_now(rec);
}

Result<std::string> DirectUploads::check(const DirectRequest &d, FileResult &r) {
  const std::string shown = util::escape_for_terminal(d.name);
  if (!m_s.policy.media_types.empty())
    return Error(Errc::usage, shown + ": policy " + m_s.policy.name +
                                  " checks the media type detected from the content, which a direct "
                                  "upload never shows lodge; use lodge upload, or a policy without "
                                  "media_types");
  if (d.size == 0 && !m_s.policy.allow_empty)
    return Error(Errc::empty_file,
                 shown + " is empty; policy " + m_s.policy.name + " does not allow empty files");
  if (d.size > m_s.policy.max_size)
    return Error(Errc::too_large, shown + " is " + std::to_string(d.size) + " bytes; policy " +
                                      m_s.policy.name + " allows " + std::to_string(m_s.policy.max_size));
  if (d.part_size > 0) {
    if (auto e = parts_refusal(m_store, shown, d.size, d.part_size)) return *e;
  } else if (auto most = m_store.capabilities().max_presigned_put; most > 0 && d.size > most)
    return Error(Errc::too_large, shown + " is " + std::to_string(d.size) + " bytes; one presigned PUT to " +
                                      m_store.describe() + " carries at most " + util::format_size(most) +
                                      " (reserve it with --parts, or send it with lodge upload)");
  auto name = sanitize_display_name(d.name);
  if (!name) return name.error();
  auto rel = sanitize_relative_path(d.name);
  if (!rel) return rel.error();
  r.relative_path = rel.value();
  if (auto key = ledger::object_key_for(m_store.key_prefix(), m_s.owner, m_s.run_prefix, std::string(36, '0'),
                                        r.relative_path);
      key.size() > ledger::k_max_key_bytes)
    return Error(Errc::bad_name, shown + ": its object key would be " + std::to_string(key.size()) +
                                     " bytes, more than the " + std::to_string(ledger::k_max_key_bytes) +
                                     " a store allows (a shorter name or --prefix)");
  const std::string ext = extension_of(name.value());
  if (auto s = check_extension(m_s.policy, ext); !s) return s.error();
  // Nothing of the content is seen: the type the extension names, unless given.
  r.content_type = m_s.options.content_type.empty() ? content_type_for(ext, "application/octet-stream")
                                                    : m_s.options.content_type;
  r.media_type = r.content_type;
  return name;
}

DirectReservation DirectUploads::reserve(const DirectRequest &d) {
  DirectReservation out;
  FileResult &r = out.r;
  r.file = d.name;
  r.size = d.size;
  r.sha256 = d.sha256;
  auto name = check(d, r);
  if (!name) {
    r = refused(r, UploadOutcome::rejected, name.error());
    return out;
  }
  const int64_t now = m_clock.now_ms();
  ledger::ReserveRequest req = m_reservation.request(name.value(), r);
  // A PUT begun just before the URL expires may take the policy's deadline to arrive.
  req.deadline_ms = d.expires_s * 1000 + m_s.policy.deadline_ms;
  req.holder = std::string(k_direct_holder) + std::to_string(now + d.expires_s * 1000);
  if (d.part_size > 0) *req.holder += std::string(k_parts_holder) + std::to_string(d.part_size);
  Reserved got = m_reservation.reserve(req, r);
  if (got.done) {
    r = *got.done;
    replay(out, got.res.record);
    return out;
  }
  const auto &rec = got.res.record;
  describe(r, rec);
  if (d.part_size > 0) {
    auto parts = presign_parts(rec, d.part_size, d.expires_s, true);
    if (!parts) {
      // Nothing can have been sent without the URLs: the row fails at once, definitely (its
      // cleanup aborts a staged upload begun).
      m_failure.fail(r, rec, parts.error(), true);
      return out;
    }
    out.parts = std::move(parts.value());
  } else {
    auto put = presign(rec, d.expires_s);
    if (!put) {
      // Nothing can have been sent without a URL: the row fails at once, definitely.
      m_failure.fail(r, rec, put.error(), true);
      return out;
    }
    out.put = put.value();
  }
  out.url_expires_at = now + d.expires_s * 1000;
  r.outcome = UploadOutcome::planned; // reserved: the bytes are the client's to send
  out.reserved = true;
  return out;
}

void DirectUploads::replay(DirectReservation &out, const ledger::FileRecord &rec) {
  FileResult &r = out.r;
  // A replay of a reservation still open hands out its URL again, expiring with it.
  auto until = direct_until(rec);
  // The same key's reservation still open is answered in_progress by the ledger (an
  // upload of it is under way): here that is the replay the key asks for.
  const bool same_key = m_s.idempotency_key && rec.idempotency_key == m_s.idempotency_key;
  if (!((r.outcome == UploadOutcome::replayed ||
         (same_key && r.error && r.error->code == Errc::in_progress)) &&
        rec.upload_status == ledger::FileStatus::uploading && !rec.is_deleted && until &&
        *until - m_clock.now_ms() >= 1000))
    return;
  r.outcome = UploadOutcome::replayed;
  r.error.reset();
  describe(r, rec);
  int64_t left_s = (*until - m_clock.now_ms()) / 1000;
  if (const uint64_t part_size = direct_part_size(rec); part_size > 0) {
    auto parts = presign_parts(rec, part_size, left_s, false);
    if (!parts) {
      r = refused(r, UploadOutcome::failed, parts.error());
      return;
    }
    out.parts = std::move(parts.value());
  } else {
    auto put = presign(rec, left_s);
    if (!put) {
      r = refused(r, UploadOutcome::failed, put.error());
      return;
    }
    out.put = put.value();
  }
  out.url_expires_at = *until;
}

Result<store::PresignedPut> DirectUploads::presign(const ledger::FileRecord &rec, int64_t expires_s) {
  store::ObjectOptions o = m_s.options;
  o.metadata.clear(); // in object_metadata
  o.content_type.clear();
  return m_store.presign_put({rec.object_key, static_cast<uint64_t>(rec.size), rec.sha256,
                              rec.object_content_type(), object_metadata(m_s.options, rec, m_ledger.uuid()),
                              o, expires_s});
}

store::StagedRequest DirectUploads::direct_staged(const ledger::FileRecord &rec) const {
  store::ObjectOptions o = m_s.options;
  o.metadata.clear(); // in object_metadata
  o.content_type.clear();
  store::StagedRequest req{rec.object_key, rec.object_content_type(),
                           object_metadata(m_s.options, rec, m_ledger.uuid()), o};
  // The client sends the parts without their digests: none is asked of each part; the
  // whole object's SHA-256 is verified by confirm.
  req.part_checksums = false;
  return req;
}

Result<std::vector<DirectPart>> DirectUploads::presign_parts(const ledger::FileRecord &rec,
                                                             uint64_t part_size, int64_t expires_s,
                                                             bool begin) {
  std::string handle = rec.multipart_upload_id.value_or("");
  if (begin) {
    auto id = m_store.begin_staged(direct_staged(rec));
    if (!id) return id.error();
    // The handle is on the row before any URL is handed out, so cleanup can find it.
    if (m_ledger.set_multipart_upload_id(rec.id, id.value(), m_clock.now_ms()) ==
        ledger::SetUploadIdOutcome::not_uploading) {
      (void)m_store.abort_staged(rec.object_key, id.value());
      return Error(Errc::state_changed, "file #" + std::to_string(rec.id) + " changed state before its URLs");
    }
    handle = id.value();
  }
  if (handle.empty())
    return Error(Errc::internal, "file #" + std::to_string(rec.id) + " has no staged upload");
  std::vector<DirectPart> out;
  const auto size = static_cast<uint64_t>(rec.size);
  for (uint64_t offset = 0; offset < size; offset += part_size) {
    DirectPart p;
    p.number = static_cast<int>(out.size()) + 1;
    p.offset = offset;
    p.size = std::min(part_size, size - offset);
    auto put = m_store.presign_part({rec.object_key, handle, p.number, p.size, {}, expires_s});
    if (!put) return put.error();
    p.put = put.value();
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<FileResult> DirectUploads::complete_parts(FileResult &r, const ledger::FileRecord &rec,
                                                        uint64_t part_size, int64_t url_until) {
  const std::string what = "file #" + std::to_string(rec.id);
  const std::string &handle = *rec.multipart_upload_id;
  auto h = m_store.head(rec.object_key);
  if (h) return std::nullopt; // completed before: checked as one PUT's object
  if (h.error().code != Errc::not_found) return refused(r, UploadOutcome::failed, h.error());
  const int64_t now = m_clock.now_ms();
  auto listed = m_store.list_parts(rec.object_key, handle);
  const auto size = static_cast<uint64_t>(rec.size);
  const uint64_t count = (size + part_size - 1) / part_size;
  if (!listed) {
    if (listed.error().code != Errc::not_found) return refused(r, UploadOutcome::failed, listed.error());
    // Gone because a concurrent confirm completed it since the HEAD above.
    if (m_store.head(rec.object_key)) return std::nullopt;
    // Azure has no staged upload until its first block: none sent yet looks like one gone.
    // While the URLs are valid nothing is decided (a gone one takes no part either).
    if (now < url_until)
      return refused(r, UploadOutcome::failed,
                     Error(Errc::not_found, what + ": no part of " + std::to_string(count) +
                                                " uploaded yet (its URLs are valid for " +
                                                util::format_duration_ms(url_until - now) + " more)"));
    // The staged upload is gone and nothing was completed: nothing can be stored now.
    m_failure.fail(
        r, rec, Error(Errc::not_found, what + ": its staged upload is gone (" + listed.error().message + ")"),
        false);
    return r;
  }
  std::optional<std::string> why;
  std::vector<store::Part> parts;
  for (const auto &p : listed.value()) {
    const uint64_t offset = static_cast<uint64_t>(p.number - 1) * part_size;
    if (p.number < 1 || static_cast<uint64_t>(p.number) > count) {
      why = "it holds part " + std::to_string(p.number) + "; " + std::to_string(count) + " were reserved";
      break;
    }
    if (const uint64_t want = std::min(part_size, size - offset); p.size != want) {
      why = "its part " + std::to_string(p.number) + " is " + std::to_string(p.size) + " bytes, reserved " +
            std::to_string(want);
      break;
    }
    parts.push_back({p.number, p.etag, {}});
  }
  if (why) {
    Error e(Errc::content_mismatch, what + ": the parts uploaded are not the ones reserved (" + *why + ")");
    fail_sent(rec, e, url_until);
    return refused(r, UploadOutcome::failed, e);
  }
  if (parts.size() < count) {
    std::string have = std::to_string(parts.size()) + " of " + std::to_string(count) + " parts";
    if (now < url_until)
      return refused(r, UploadOutcome::failed,
                     Error(Errc::not_found, what + ": " + have + " uploaded yet (its URLs are valid for " +
                                                util::format_duration_ms(url_until - now) + " more)"));
    m_failure.fail(
        r, rec, Error(Errc::not_found, what + ": its upload URLs expired with " + have + " uploaded"), false);
    return r;
  }
  // Create-only, as the uploader completes: another object at the key stays.
  if (auto done = m_store.complete_staged(direct_staged(rec), handle, parts, 0); !done) {
    // A concurrent confirm completed it first: its object is checked as one PUT's.
    if (m_store.head(rec.object_key)) return std::nullopt;
    return refused(r, UploadOutcome::failed, done.error());
  }
  return std::nullopt;
}

FileResult DirectUploads::confirm(int64_t id) {
  FileResult r;
  r.file = "#" + std::to_string(id);
  r.id = id;
  auto found = m_ledger.find_file(id);
  if (!found)
    return refused(r, UploadOutcome::failed, Error(Errc::not_found, "no file #" + std::to_string(id)));
  const ledger::FileRecord rec = *found;
  describe(r, rec);
  const std::string what = "file #" + std::to_string(id);
  if (rec.upload_status == ledger::FileStatus::active && !rec.is_deleted) {
    r.outcome = UploadOutcome::active; // confirmed before: the same answer
    return r;
  }
  if (rec.upload_status != ledger::FileStatus::uploading || rec.is_deleted)
    return refused(
        r, UploadOutcome::failed,
        Error(Errc::state_changed, what + " is not awaiting confirmation: it is " +
                                       (rec.is_deleted ? std::string("deleted") : "failed") +
                                       (rec.failure_reason ? " (" + *rec.failure_reason + ")" : "")));
  auto until = direct_until(rec);
  if (!until)
    return refused(r, UploadOutcome::failed,
                   Error(Errc::usage, what + " is being sent by lodge upload, not a direct upload: nothing "
                                             "to confirm"));
  const int64_t now = m_clock.now_ms();
  if (now >= rec.upload_deadline_at)
    return refused(
        r, UploadOutcome::failed,
        Error(Errc::state_changed, what + " passed its deadline before it was confirmed; not "
                                          "stored (lodge repair fails it, sweep removes what was sent)"));
  if (const uint64_t part_size = direct_part_size(rec); part_size > 0)
    if (auto done = complete_parts(r, rec, part_size, *until)) return *done;
  auto h = m_store.head(rec.object_key);
  if (!h) {
    if (h.error().code != Errc::not_found) return refused(r, UploadOutcome::failed, h.error());
    if (now < *until)
      return refused(r, UploadOutcome::failed,
                     Error(Errc::not_found, what + ": nothing was uploaded yet (its URL is valid for " +
                                                util::format_duration_ms(*until - now) + " more)"));
    // The URL expired with nothing there. A PUT begun before the expiry may still land:
    // the cleanup waits for the grace, as repair's would.
    m_failure.fail(r, rec, Error(Errc::not_found, what + ": its upload URL expired and nothing was uploaded"),
                   false);
    return r;
  }
  std::optional<std::string> why = object_differs(h.value(), rec, m_ledger.uuid(), true);
  // The type it is served with (lodge url, a browser): S3 signs Content-Type in, but Azure's
  // SAS cannot pin it, so a sender could store text/html for a text/plain reservation.
  if (!why && h->content_type != rec.object_content_type())
    why = "it was sent as Content-Type '" + util::escape_for_terminal(h->content_type) + "', reserved '" +
          util::escape_for_terminal(rec.object_content_type()) + "'";
  if (!why) {
    if (m_store.capabilities().verifies_checksums && h->sha256_hex == rec.sha256) {
      // The server refused any other bytes and says which it kept.
    } else {
      // The bytes themselves: a checksum the server did not verify proves nothing.
      crypto::Sha256 hash;
      uint64_t n = 0;
      auto read = m_store.read(rec.object_key, [&](const char *p, size_t len) {
        hash.update(p, len);
        n += len;
        return true;
      });
      if (!read) return refused(r, UploadOutcome::failed, read.error());
      std::string got = crypto::to_hex(hash.finish());
      if (n != static_cast<uint64_t>(rec.size))
        why = "it read back as " + std::to_string(n) + " bytes, reserved " + std::to_string(rec.size);
      else if (got != rec.sha256)
        why = "its SHA-256 is " + got + ", reserved " + rec.sha256;
    }
  }
  if (why) {
    // Not the reserved bytes: the row fails now; its object stays while the URL is valid.
    Error e(Errc::content_mismatch, what + ": the object uploaded is not the one reserved (" + *why + ")");
    fail_sent(rec, e, *until);
    return refused(r, UploadOutcome::failed, e);
  }
  // The upload's own activation: the committed tag (with the row's tags) as any upload's.
  const auto confirmed = activate(m_ledger, m_store, rec, {h->etag, h->version_id}, m_clock).confirm;
  // Another confirm of the same reservation (a second host, a retried cron line) may have
  // activated it since it was read: the object this one verified is the row's, so its answer
  // is the same. (The key is the row's alone and the object create-only.)
  if (confirmed != ledger::ConfirmOutcome::confirmed)
    if (auto now_rec = m_ledger.find_file(id);
        now_rec && now_rec->upload_status == ledger::FileStatus::active && !now_rec->is_deleted) {
      r.outcome = UploadOutcome::active;
      return r;
    }
  switch (confirmed) {
  case ledger::ConfirmOutcome::confirmed:
    break;
  case ledger::ConfirmOutcome::row_not_uploading:
    return refused(r, UploadOutcome::failed,
                   Error(Errc::state_changed, what + " changed state while it was checked (failed by repair "
                                                     "or a sweep past its deadline?); not stored"));
  case ledger::ConfirmOutcome::task_held:
    return refused(r, UploadOutcome::failed,
                   Error(Errc::state_changed, what + " could not be confirmed: a sweep is already cleaning "
                                                     "it up (past its deadline?); not stored"));
  }
  r.outcome = UploadOutcome::active;
  return r;
}

std::vector<FileResult> DirectUploads::confirm_due(int limit) {
  std::vector<FileResult> out;
  for (const auto &rec : m_ledger.held_uploads(std::string(k_direct_holder), limit)) {
    auto until = direct_until(rec);
    const int64_t now = m_clock.now_ms();
    if (!until || *until > now) continue; // its URL may still be used
    if (now >= rec.upload_deadline_at) {
      // Past its deadline: failed as repair fails it, its cleanup due after the grace.
      FileResult r;
      describe(r, rec);
      if (m_ledger.repair_row(rec.id, now, m_s.cleanup.grace_ms, m_s.max_retries) ==
          ledger::RepairOutcome::repaired)
        out.push_back(refused(r, UploadOutcome::failed,
                              Error(Errc::deadline_exceeded, "file #" + std::to_string(rec.id) +
                                                                 " was not confirmed before its deadline")));
      continue;
    }
    out.push_back(confirm(rec.id));
  }
  return out;
}

} // namespace lodge::ops
