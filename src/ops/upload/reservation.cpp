// A file's reservation (see lodge/ops/upload/reservation.hpp): the reserve transaction, asked
// again while a duplicate's copy is missing, a shared row is gone or this process's own upload
// of the same content is still in flight, and what its last answer means for the file.
#include <algorithm>
#include <chrono>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/ops/upload/reservation.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <thread>
#include <utility>

namespace lodge::ops {

namespace {
// The failure_reason of a row whose object a would-be duplicate's HEAD found missing.
constexpr const char *k_object_missing = "object missing from the store";

// A row's expiry (upload --expire-after, a policy's expire_after), counted from the reserve
// that records it: a long run's last files expire as long after their upload as its first.
std::optional<int64_t> expiry_at(const UploadSettings &s, int64_t reserve_ms) {
  if (!s.expire_after_ms) return std::nullopt;
  return reserve_ms + *s.expire_after_ms;
}
} // namespace

std::optional<std::string> object_differs(const store::ObjectInfo &h, const ledger::FileRecord &rec,
                                          const std::string &ledger_uuid, bool full) {
  auto stamp = [&](const char *name, const std::string &want) -> std::optional<std::string> {
    auto it = h.metadata.find(name);
    if (it == h.metadata.end()) return full ? std::optional(std::string(name) + " is missing") : std::nullopt;
    if (it->second == want) return std::nullopt;
    return std::string(name) + " is '" + util::escape_for_terminal(it->second) + "', not '" + want + "'";
  };
  if (h.size != static_cast<uint64_t>(rec.size))
    return "its size is " + std::to_string(h.size) + ", not " + std::to_string(rec.size);
  if (auto l = stamp(store::meta::ledger, ledger_uuid)) return l;
  if (auto id = stamp(store::meta::record, std::to_string(rec.stamp_id()))) return id;
  if (full) return stamp(store::meta::sha256, rec.sha256);
  return std::nullopt;
}

Reservation::Reservation(ledger::UploaderLedger &ledger, store::ObjectStore &store,
                         const UploadSettings &settings, const util::Clock &clock)
    : m_ledger(ledger), m_store(store), m_s(settings), m_clock(clock),
      m_id_blocks(settings.id_blocks ? settings.id_blocks : std::make_shared<IdBlocks>()) {
  // The content type is recorded in its own column; the rest as the row's JSON.
  store::ObjectOptions rest = m_s.options;
  rest.content_type.clear();
  m_options_json = store::to_json(rest);
}

ledger::ReserveRequest Reservation::request(const std::string &name, const FileResult &r) const {
  ledger::ReserveRequest req;
  req.owner_id = m_s.owner;
  req.original_name = name;
  req.relative_path = r.relative_path;
  req.run_prefix = m_s.run_prefix;
  req.dedup = ledger::parse_dedup_scope(m_s.policy.dedup).value_or(ledger::DedupScope::prefix);
  req.key_prefix = m_store.key_prefix();
  req.media_type = r.media_type;
  req.sha256 = r.sha256;
  req.size = static_cast<int64_t>(r.size);
  req.policy = m_s.policy.name;
  req.max_files = m_s.policy.max_files;
  req.grace_ms = m_s.cleanup.grace_ms; // ops::grace_for of the run's policy
  req.max_retries = m_s.max_retries;
  req.idempotency_key = m_s.idempotency_key;
  req.content_type = r.content_type;
  req.object_options = m_options_json;
  // A path whose new content is already stored elsewhere is shared, and --replace retires
  // the path's older rows then as confirm does otherwise.
  if (m_s.replace) req.retire = ledger::Retire{m_s.cleanup.grace_ms, m_s.max_retries};
  return req;
}

template <class Ask> auto Reservation::timed(Ask &&ask) {
  const auto t0 = std::chrono::steady_clock::now();
  auto out = ask();
  const int64_t took =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  m_wait_us = m_wait_us == 0 ? took : (7 * m_wait_us + took) / 8;
  return out;
}

std::vector<Asked> Reservation::ask_batch(std::vector<ledger::ReserveRequest> reqs) {
  const int64_t wall = m_clock.now_ms();
  const int64_t steady = util::steady_ms();
  for (auto &req : reqs)
    req.expires_at = expiry_at(m_s, wall);
  auto answers =
      timed([&] { return m_id_blocks->reserve_batch(m_ledger, m_store, std::move(reqs), wall, m_clock); });
  std::vector<Asked> out;
  out.reserve(answers.size());
  for (auto &a : answers)
    out.push_back(Asked{std::move(a), wall, steady});
  return out;
}

Reserved Reservation::reserve(const ledger::ReserveRequest &req, const FileResult &r,
                              const std::function<void(const ledger::FileRecord &)> &own_duplicate,
                              const std::function<void()> &settle_own, std::optional<Asked> first) {
  // A duplicate is reported, and an object shared, only once the object is verified in the
  // store. A row whose object is gone is retired (soft-deleted, its task harmless) and the
  // reservation is made again, which then finds the next alive copy or makes a new row.
  // Bounded: each round retires one row, and a third missing copy in a row is reported, not
  // chased.
  Reserved out;
  auto end = [&out](FileResult done) {
    out.done = std::move(done);
    return out;
  };
  ledger::ReserveRequest ask = req;
  int missing = 0;
  int waits = 0;
  for (int round = 0;; ++round) {
    auto reserved = [&]() -> Result<ledger::ReserveResult> {
      if (first && round == 0) { // asked already, with the others of its batch
        out.wall_at_reserve = first->wall_at_reserve;
        out.steady_at_reserve = first->steady_at_reserve;
        return std::move(first->res);
      }
      out.wall_at_reserve = m_clock.now_ms();
      out.steady_at_reserve = util::steady_ms();
      ask.expires_at = expiry_at(m_s, out.wall_at_reserve);
      // A dry run asks the ledger alone (its transaction rolled back): no id block is begun.
      if (m_s.dry_run) return m_ledger.reserve(ask, out.wall_at_reserve);
      return timed(
          [&] { return m_id_blocks->reserve(m_ledger, m_store, ask, out.wall_at_reserve, m_clock); });
    }();
    if (!reserved) return end(refused(r, UploadOutcome::failed, reserved.error()));
    out.res = reserved.value();
    const auto &res = out.res;
    if (res.outcome == ledger::ReserveOutcome::share_gone && round < 8) {
      ask.share_with.reset(); // deleted meanwhile: look again
      continue;
    }
    if (res.outcome == ledger::ReserveOutcome::in_progress && wait_for_own(res.record, waits++, settle_own))
      continue;
    if (res.outcome != ledger::ReserveOutcome::duplicate && res.outcome != ledger::ReserveOutcome::shareable)
      break;
    const auto &dup = res.record;
    auto present = check_duplicate(dup);
    if (present && res.outcome == ledger::ReserveOutcome::shareable) {
      ask.share_with = dup.id; // the path gets its own row, sharing the verified object
      continue;
    }
    if (present) {
      // A file that is its own row's content under a stat the cache does not know (a row
      // older than the cache, a touched file): recorded, so the next run need not read it.
      if (own_duplicate) own_duplicate(dup);
      FileResult d = r;
      d.outcome = UploadOutcome::duplicate;
      d.id = dup.id;
      d.shares = dup.content_of;
      d.object_key = dup.object_key;
      d.error =
          Error(Errc::duplicate, "same content as file #" + std::to_string(dup.id) + " of owner " +
                                     m_s.owner + (dup.run_prefix.empty() ? "" : " under " + dup.run_prefix));
      return end(std::move(d));
    }
    if (m_s.dry_run && present.error().code == Errc::not_found) {
      FileResult d = r;
      d.outcome = UploadOutcome::planned; // its copy is missing: a real run uploads it anew
      return end(std::move(d));
    }
    if (present.error().code != Errc::not_found || missing == 2) {
      FileResult d = refused(r, UploadOutcome::failed, present.error());
      if (d.error->code == Errc::not_found)
        d.error->message =
            "three copies of the same content in a row were missing from the store (the last: " +
            d.error->message + "); not uploaded this time, retry it";
      return end(std::move(d));
    }
    ++missing;
    if (m_ledger.mark_missing(dup.id, k_object_missing, m_clock.now_ms(), m_s.cleanup.grace_ms,
                              m_s.max_retries) == ledger::MissingOutcome::marked_missing)
      util::log::warn("file #" + std::to_string(dup.id) + " (" + util::escape_for_terminal(dup.object_key) +
                      ") is missing from the store: marked deleted (" + k_object_missing + "); uploading " +
                      util::escape_for_terminal(r.file) + " anew");
  }
  out.done = answer(out.res, r);
  return out;
}

std::optional<FileResult> Reservation::answer(const ledger::ReserveResult &res, const FileResult &r) const {
  const auto &rec = res.record;
  FileResult d = r;
  switch (res.outcome) {
  case ledger::ReserveOutcome::duplicate:
  case ledger::ReserveOutcome::shareable:
    break; // answered in reserve's loop
  case ledger::ReserveOutcome::shared:
    // Stored once, restorable by this path too: the path's row shares the object. A dry run's
    // row was rolled back: it names none.
    d.outcome = UploadOutcome::duplicate;
    if (!m_s.dry_run) d.id = rec.id;
    d.shares = rec.content_of;
    d.object_key = rec.object_key;
    d.error = Error(Errc::duplicate, "same content as file #" + std::to_string(*rec.content_of) +
                                         (m_s.dry_run ? "; a real run shares its object"
                                                      : "; stored once, shared by this path's row"));
    return d;
  case ledger::ReserveOutcome::share_gone:
    return refused(d, UploadOutcome::failed,
                   Error(Errc::state_changed, "every stored copy of the same content was deleted while this "
                                              "file was being reserved; retry it"));
  case ledger::ReserveOutcome::replayed:
    d.outcome = UploadOutcome::replayed;
    d.id = rec.id;
    d.object_key = rec.object_key;
    return d;
  case ledger::ReserveOutcome::quota_exceeded:
    return refused(d, UploadOutcome::rejected,
                   Error(Errc::quota_exceeded, "owner " + m_s.owner + " already has " +
                                                   util::plural(m_s.policy.max_files.value_or(0), "file") +
                                                   ", the most policy " + m_s.policy.name + " allows"));
  case ledger::ReserveOutcome::key_reused:
    d.id = rec.id;
    return refused(d, UploadOutcome::rejected,
                   Error(Errc::idempotency_key_reused,
                         "idempotency key '" + util::escape_for_terminal(*m_s.idempotency_key) +
                             "' was used for other content (file #" + std::to_string(rec.id) + ")"));
  case ledger::ReserveOutcome::in_progress:
    d.id = rec.id;
    return refused(d, UploadOutcome::failed,
                   Error(Errc::in_progress, "an upload of the same content (file #" + std::to_string(rec.id) +
                                                ") is still in progress; retry later"));
  case ledger::ReserveOutcome::id_limit_reached: // IdBlocks advances and retries: never seen here
    return refused(d, UploadOutcome::failed,
                   Error(Errc::internal, "no record id inside the id marker's block"));
  case ledger::ReserveOutcome::reserved:
  case ledger::ReserveOutcome::resumed:
    break;
  }
  return std::nullopt;
}

std::optional<FileResult> Reservation::unchanged(const FileResult &r, const std::string &ext,
                                                 const ledger::FileStat &stat) {
  const auto scope = ledger::parse_dedup_scope(m_s.policy.dedup).value_or(ledger::DedupScope::prefix);
  // The stat cache: this path's row whose file is exactly what it was then maps the file
  // to that row without reading it (its object checked as any duplicate's is).
  if (m_s.checksum || scope == ledger::DedupScope::none || m_s.idempotency_key) return std::nullopt;
  auto cached =
      m_ledger.find_unchanged(m_s.owner, m_s.run_prefix, r.relative_path, stat, static_cast<int64_t>(r.size));
  if (!cached || !check_media_type(m_s.policy, ext, cached->media_type) || !check_duplicate(*cached))
    return std::nullopt;
  FileResult d = r;
  d.outcome = UploadOutcome::duplicate;
  d.unchanged = true;
  d.id = cached->id;
  d.shares = cached->content_of;
  d.object_key = cached->object_key;
  d.sha256 = cached->sha256;
  d.media_type = cached->media_type;
  d.content_type = cached->object_content_type();
  d.error = Error(Errc::duplicate, "unchanged since it was stored as file #" + std::to_string(cached->id) +
                                       " (not read again; --checksum reads it)");
  return d;
}

bool Reservation::wait_for_own(const ledger::FileRecord &uploading, int waits,
                               const std::function<void()> &settle_own) {
  // The same content is being uploaded by this very run (another path of the tree, on this
  // worker or another): its confirm is near, so this file waits for it and then shares its
  // object, instead of failing "in progress". Bounded by that row's deadline.
  const auto &me = this_process();
  if (!me || uploading.holder != me->text() || m_clock.now_ms() >= uploading.upload_deadline_at) return false;
  if (settle_own) settle_own(); // it may be this worker's own PUT in flight, or its pending confirm
  if (waits > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2 << std::min(waits, 6), 100)));
  return true;
}

Status Reservation::check_duplicate(const ledger::FileRecord &existing) {
  // A re-run's unchanged files are proven by listing (one request per 1,000 keys); what a
  // listing does not prove, a missing object above all, is HEADed as before.
  if (m_s.listings && m_s.listings->proves(m_store, existing, m_ledger.uuid())) return ok_status();
  std::string what =
      "file #" + std::to_string(existing.id) + " (" + util::escape_for_terminal(existing.object_key) + ")";
  auto h = m_store.head(existing.object_key);
  if (!h) {
    Error e = h.error();
    if (e.code == Errc::not_found) return e;
    // Never a duplicate, never a deletion: whether the copy is there is unknown.
    e.message = "cannot check that " + what + ", of the same content, is in the store: " + e.message;
    return e;
  }
  // The stamp is checked where the store returns one; an object that is another one (a
  // foreign write, a restored ledger's reused key) is no copy of this file. A shared
  // object's stamp names the row that wrote it (object_differs compares stamp_id()).
  if (auto why = object_differs(h.value(), existing, m_ledger.uuid(), false))
    return Error(Errc::storage_error, "the object of " + what +
                                          ", of the same content, is not the one its row recorded (" + *why +
                                          "); not reported as a duplicate: run lodge reconcile");
  return ok_status();
}

} // namespace lodge::ops
