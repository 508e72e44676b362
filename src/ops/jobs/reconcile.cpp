// reconcile: the store's listing and the ledger's rows compared in key order, in constant
// memory; what is found reported as found, and with --apply what is safe to apply applied.
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/jobs/job_run.hpp>
#include <lodge/ops/jobs/reconcile.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::ops {

nlohmann::json finding_json(const Finding &f) {
  return {{"kind", f.kind},
          {"key", f.key},
          {"record_id", f.record_id ? nlohmann::json(*f.record_id) : nlohmann::json(nullptr)},
          {"detail", f.detail},
          {"applied", f.applied}};
}

bool others_object(const std::string &kind) {
  return kind == "unmanaged" || kind == "foreign";
}

bool ReconcileReport::clean() const {
  for (const auto &[k, v] : counts)
    if (v > 0 && (strict || !others_object(k))) return false;
  return true;
}

namespace {
bool live_task(const std::optional<ledger::TaskRecord> &t) {
  using ledger::TaskStatus;
  return t && (t->status == TaskStatus::pending || t->status == TaskStatus::retry ||
               t->status == TaskStatus::processing);
}

// A state tag as a finding says it.
std::string tag_said(const std::string &tag) {
  return tag.empty() ? "with no state tag" : "tagged state=" + tag;
}

// Puts lodge's own state tag back on row r's object (committed for an ACTIVE row, pending
// for a failed one), with the tags the upload asked for, once its stamp is checked: this
// ledger and this row (I8; a tag another tool set is never replaced on an object not ours).
// Set Blob Tags and PutObjectTagging take no ETag condition: a blob written over the key
// between the HEAD and the tag would get lodge's tag. nullopt: done; else why not.
std::optional<std::string> restore_state_tag(const ledger::LedgerReports &reads, store::ObjectStore &s,
                                             const ledger::FileRecord &r, bool committed) {
  auto h = s.head(r.object_key);
  if (!h) return h.error().message;
  if (auto why = store::stamp_mismatch(h->metadata, reads.uuid(), r.id))
    return "the object is not this record's: " + *why;
  auto tags = store::from_json(r.object_options).tags;
  auto t = committed ? s.mark_committed(r.object_key, tags) : s.mark_pending(r.object_key, tags);
  if (!t) return t.error().message;
  return std::nullopt;
}

// Hashes the object as it streams in: nothing is stored, whatever its size.
std::optional<std::string> digest_of(store::ObjectStore &s, const std::string &key) {
  crypto::Sha256 h;
  auto r = s.read(key, [&](const char *p, size_t n) {
    h.update(p, n);
    return true;
  });
  if (!r) return std::nullopt;
  return crypto::to_hex(h.finish());
}
} // namespace

namespace {
// A row whose object alive rows share is in use whatever its own state (I5, shared).
bool in_use(const ledger::FileRecord &r) {
  return (r.upload_status == ledger::FileStatus::active && !r.is_deleted) || r.alive_sharers > 0;
}

// The rows under a key prefix in key order, read in pages so neither side of the comparison
// is ever held whole.
class RowCursor {
public:
  RowCursor(ledger::LedgerReports &reads, std::string prefix) : m_reads(reads), m_prefix(std::move(prefix)) {
    fill();
  }
  // The next row not yet taken; nullptr past the last.
  const ledger::FileRecord *peek() {
    if (m_pos >= m_page.size()) fill();
    return m_pos < m_page.size() ? &m_page[m_pos] : nullptr;
  }
  // Moves past the row peek() returned.
  void take() { ++m_pos; }

private:
  // Reads the page after the last key read.
  void fill() {
    m_page.clear();
    m_pos = 0;
    if (m_done) return;
    m_reads.rows_by_key(m_prefix, m_after, [&](const ledger::FileRecord &r) {
      m_page.push_back(r);
      return m_page.size() < 512;
    });
    if (m_page.empty())
      m_done = true;
    else
      m_after = m_page.back().object_key;
  }

  ledger::LedgerReports &m_reads;
  std::string m_prefix;
  std::vector<ledger::FileRecord> m_page;
  size_t m_pos = 0;
  std::string m_after; // the last key read
  bool m_done = false;
};

// One reconcile run: the store's listing and the ledger's rows walked side by side in key
// order, then the store's incomplete uploads; each mismatch a finding, reported as found.
class Reconciler {
public:
  Reconciler(ledger::ReconcileLedger &l, store::ObjectStore &s, const ReconcileOptions &o,
             const util::Clock &clock, const std::function<void(const Finding &)> &report)
      : m_l(l), m_s(s), m_o(o), m_clock(clock), m_report(report), m_prefix(s.key_prefix()),
        m_now(clock.now_ms()) {
    m_sum.strict = o.strict;
    for (const char *k : {"unmanaged", "dangling", "corrupt", "leftover", "stale_multipart", "foreign",
                          "diverged", "beyond_history", "unknown", "tag_mismatch", "stale_temp"})
      m_sum.counts[k] = 0;
  }

  // The whole run, in its order: divergence, objects against rows, incomplete uploads.
  ReconcileReport run() {
    check_divergence_first();
    m_meta_prefix = metadata_prefix(m_s);
    m_own_marker = id_marker_key(m_s, m_l.uuid());
    m_max_id = m_l.max_record_id();
    if (m_sum.diverged) report_divergence();
    if (!compare_objects() || !compare_staged() || !compare_temps()) return m_sum;
    if (m_sum.diverged) m_l.note_reconciled(m_clock.now_ms()); // the operator has the whole report now
    return m_sum;
  }

private:
  // Counts a finding and hands it to the caller.
  void found(const Finding &f) {
    ++m_sum.counts[f.kind];
    if (f.applied) ++m_sum.applied;
    m_report(f);
  }

  // Divergence first: it decides what may be applied, and moves the sequence past the
  // store's mark before max_id is read. Throws for --apply in a diverged ledger.
  void check_divergence_first() {
    auto div = check_divergence(m_l, m_s, m_clock);
    if (!div) throw LodgeError(div.error());
    m_sum.diverged = div.value().has_value();
    if (m_sum.diverged && m_o.apply && !m_o.roll_forward)
      refuse_if_diverged(div.value(), "reconcile --apply");
    m_apply_cleanup = m_o.apply && !m_sum.diverged;
    m_divergence = div.value();
  }

  // The diverged finding for the id marker, which says how far the store's ids went.
  void report_divergence() {
    m_sum.counts["confirmed_after_backup"] = 0;
    const auto &d = *m_divergence;
    found({"diverged", m_own_marker, std::nullopt,
           "the store's id marker says ids up to #" + std::to_string(d.store_mark) +
               " were reserved, but this ledger's last was #" + std::to_string(d.sequence_before) +
               ": it was restored from a backup or copied; objects stamped with its ids may be newer than it",
           false});
  }

  // Walks the store's listing and the rows side by side; false when the listing failed
  // (m_sum.error: what was found and applied so far is reported; the rest is not known).
  bool compare_objects() {
    RowCursor rows(m_l, m_prefix);
    auto listed = m_s.list(m_prefix, [&](const store::ObjectInfo &obj) {
      listed_object(obj, rows);
      return true;
    });
    if (!listed) {
      m_sum.error = listed.error();
      return false;
    }
    while (const auto *r = rows.peek()) {
      row_only(*r);
      rows.take();
    }
    return true;
  }

  // One listed object: the rows before its key have no object; the row at its key is compared with it.
  void listed_object(const store::ObjectInfo &obj, RowCursor &rows) {
    if (obj.key.compare(0, m_meta_prefix.size(), m_meta_prefix) == 0) {
      // lodge's own metadata (id markers): this ledger's is checked above; another's is
      // another ledger's business.
      if (obj.key != m_own_marker)
        found({"foreign", obj.key, std::nullopt,
               "id marker of another ledger (" + obj.key.substr(m_meta_prefix.size()) + "); never touched",
               false});
      return;
    }
    ++m_sum.objects;
    while (const auto *r = rows.peek()) {
      if (r->object_key < obj.key) {
        row_only(*r);
        rows.take();
        continue;
      }
      if (r->object_key == obj.key) {
        both(obj, *r);
        rows.take();
        return;
      }
      break;
    }
    object_only(obj);
  }

  // A row with no object: a finding only if its object is in use.
  void row_only(const ledger::FileRecord &r) {
    ++m_sum.rows;
    if (in_use(r))
      found({"dangling", r.object_key, r.id,
             (r.is_deleted ? "record #" + std::to_string(r.id) + ", shared by " +
                                 util::plural(r.alive_sharers, "alive record") + ","
                           : "ACTIVE record #" + std::to_string(r.id)) +
                 " has no object",
             false});
  }

  // Whose an object is, by its stamp: nullopt when this ledger's own row `expected_id`
  // (0: none) may claim it (store::stamp_mismatch); otherwise the report-only finding that
  // says why not (I8).
  std::optional<Finding> not_ours(const std::string &key, int64_t expected_id) {
    auto h = m_s.head(key);
    if (!h && h.error().code == Errc::not_found) return std::nullopt; // gone meanwhile
    if (!h) // a failed HEAD, unreadable metadata: whose it is cannot be told
      return Finding{"unknown", key, std::nullopt, h.error().message + "; never touched", false};
    if (!store::stamp_mismatch(h->metadata, m_l.uuid(), expected_id)) return std::nullopt;
    const auto seen = store::read_stamp(h->metadata);
    auto named = seen.record_id ? std::optional<int64_t>(seen.record_id) : std::nullopt;
    if (!seen.ledger)
      return Finding{"unmanaged", key, std::nullopt, "no lodge stamp: another tool wrote it; never touched",
                     false};
    if (*seen.ledger != m_l.uuid())
      return Finding{"foreign", key, named, "stamped by another ledger (" + *seen.ledger + "); never touched",
                     false};
    if (seen.record_id == 0) // this ledger's uuid, but no record id lodge would write
      return Finding{
          "unknown", key, std::nullopt,
          "stamped by this ledger with record " +
              (seen.record ? "'" + util::escape_for_terminal(*seen.record) + "'" : std::string("(none)")) +
              ", which is no record id: whose it is cannot be told; never touched",
          false};
    if (seen.record_id > m_max_id)
      return Finding{"beyond_history", key, named,
                     "record #" + std::to_string(seen.record_id) + " is newer than this ledger's last (#" +
                         std::to_string(m_max_id) +
                         "): was the ledger restored from an older copy? never touched",
                     false};
    return Finding{"diverged", key, named,
                   "stamped with record #" + std::to_string(seen.record_id) +
                       " of this ledger, which holds another key: the history diverged; never touched",
                   false};
  }

  // No row has this key: nothing proves it is ours and dead, so it is only reported.
  void object_only(const store::ObjectInfo &obj) {
    if (m_now - obj.last_modified_ms < m_o.older_than_ms) return; // may be an upload in flight
    if (auto f = not_ours(obj.key, 0)) found(*f);
  }

  // Another tool changed lodge's state tag (where the listing says it): an ACTIVE row's
  // object must be committed once its task no longer owes the tag, or a lifecycle backstop
  // rule expires it. --apply tags it committed again (stamp checked).
  // An object written over the key by another tool loses lodge's tag with its stamp: that
  // is the object not being the row's (corrupt), not a tag to put back.
  void active_tag(const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    if (!obj.state_tag || *obj.state_tag == "committed") return;
    if (live_task(m_l.find_task_for(r.id))) return; // still owed: sweep's `tag` decision sets it
    if (auto h = m_s.head(r.object_key); h) {
      if (auto why = store::stamp_mismatch(h->metadata, m_l.uuid(), r.id)) {
        found({"corrupt", r.object_key, r.id,
               "not ACTIVE record #" + std::to_string(r.id) + "'s object (" + *why +
                   "): written over by another tool",
               false});
        return;
      }
    }
    Finding f{"tag_mismatch", r.object_key, r.id,
              "ACTIVE record #" + std::to_string(r.id) + "'s object is " + tag_said(*obj.state_tag) +
                  ", not committed (another tool's doing): a lifecycle backstop rule would expire it",
              false};
    if (m_apply_cleanup) {
      auto why = restore_state_tag(m_l, m_s, r, true);
      f.applied = !why;
      if (why) f.detail += "; not re-tagged: " + *why;
    }
    found(f);
  }

  // A failed row's object lodge tagged pending (or, sent directly to Azure, left untagged);
  // another tool's tag (committed, or tags without a state) makes sweep's guarded delete
  // leave it for ever. --apply tags it pending again (stamp checked) and queues its task.
  // The store says what its guard would do. true: reported.
  bool failed_tag(const ledger::FileRecord &r) {
    if (r.upload_status != ledger::FileStatus::upload_failed || !m_s.capabilities().state_tags) return false;
    auto refusal = m_s.guard_refusal(r.object_key);
    if (!refusal || !refusal.value()) return false; // unreadable: a leftover; the guard decides
    Finding f{"tag_mismatch", r.object_key, r.id,
              "record #" + std::to_string(r.id) + " failed, but its object " + *refusal.value() +
                  " (another tool's doing): sweep's guarded delete leaves it; --apply tags it pending again "
                  "and queues it",
              false};
    if (m_apply_cleanup) {
      auto why = restore_state_tag(m_l, m_s, r, false);
      f.applied = !why && m_l.requeue_task_for(r.id, m_now, m_o.max_retries) == ledger::QueueOutcome::queued;
      if (why) f.detail += "; not re-tagged: " + *why;
    }
    found(f);
    return true;
  }

  // An object and the row at its key: what is found depends on whether the row uses it.
  void both(const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    ++m_sum.rows;
    if (in_use(r)) {
      object_in_use(obj, r);
      return;
    }
    if (m_sum.diverged && r.upload_status == ledger::FileStatus::uploading && !r.is_deleted) {
      confirmed_after_backup(r);
      return;
    }
    // A live task of this row, or of a path sharing its object (the last one deleted, within
    // its grace), still owns the object: no leftover until it ends (I8: no live task uses it).
    if (r.is_deleted && r.live_sharer_tasks == 0 && !live_task(m_l.find_task_for(r.id)))
      dead_rows_object(obj, r);
  }

  // An object in use: its size, its digest (with --verify) and its state tag are the row's.
  void object_in_use(const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    if (obj.size != static_cast<uint64_t>(r.size)) {
      found({"corrupt", r.object_key, r.id,
             "size " + std::to_string(obj.size) + " but the record says " + std::to_string(r.size), false});
      return;
    }
    if (m_o.verify) {
      auto d = digest_of(m_s, r.object_key);
      if (!d || *d != r.sha256) {
        found({"corrupt", r.object_key, r.id, "content does not hash to the recorded sha256", false});
        return;
      }
    }
    active_tag(obj, r);
  }

  // Restored from a backup taken while this upload ran: the other copy may have confirmed
  // it. Complete, and stamped with this row and its digest, it is kept (and activated with
  // --apply --roll-forward).
  void confirmed_after_backup(const ledger::FileRecord &r) {
    auto h = m_s.head(r.object_key);
    if (!h || h->size != static_cast<uint64_t>(r.size) ||
        store::stamp_mismatch(h->metadata, m_l.uuid(), r.id) || h->metadata[store::meta::sha256] != r.sha256)
      return;
    Finding f{"confirmed_after_backup", r.object_key, r.id,
              "record #" + std::to_string(r.id) +
                  " is UPLOADING here, but its object is complete and stamped with this record and digest "
                  "(confirmed after the backup); reconcile --apply --roll-forward makes it ACTIVE",
              false};
    // Activated as its upload would have been: on a store that tags objects, the tag
    // owed is recorded and set (the object is still tagged pending).
    if (m_o.apply && m_o.roll_forward)
      f.applied = activate(m_l, m_s, r, {h->etag, h->version_id}, m_clock).active();
    found(f);
  }

  // A dead row with no live task whose key still holds an object: a leftover (requeued with
  // --apply) if it is this row's, else reported and never touched.
  void dead_rows_object(const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    if (auto other = not_ours(r.object_key, r.id)) { // the exact key, but not this row's object
      found(*other);
      return;
    }
    if (obj.size != static_cast<uint64_t>(r.size)) { // this row's stamp, another writer's bytes
      found({"unmanaged", r.object_key, r.id,
             "stamped as record #" + std::to_string(r.id) + " but " + std::to_string(obj.size) +
                 " bytes, not the row's " + std::to_string(r.size) +
                 ": another tool wrote over it (in place, keeping the stamp); never touched",
             false});
      return;
    }
    if (failed_tag(r)) return;
    Finding f{"leftover", r.object_key, r.id,
              "record #" + std::to_string(r.id) + " is dead but its object remains", false};
    if (m_apply_cleanup)
      f.applied = m_l.requeue_task_for(r.id, m_now, m_o.max_retries) == ledger::QueueOutcome::queued;
    found(f);
  }

  // The store's own temporary files (file://: a part or object being written, an object a
  // delete moved aside) that a killed process left: no row names them, and lodge removes only
  // its own names whose last use is older than any deadline and grace allow (I8: nothing
  // else is touched). false when the listing failed (m_sum.error).
  bool compare_temps() {
    const int64_t before = m_now - m_o.temp_dead_after_ms;
    auto listed = m_s.list_temps([&](const store::StoreTemp &t) {
      if (t.since_ms >= before) return true; // may be in use
      Finding f{"stale_temp", t.name, std::nullopt,
                "a temporary file of " + util::plural(static_cast<int64_t>(t.size), "byte") +
                    " last in use " + util::format_duration_ms(m_now - t.since_ms) +
                    " ago, longer than the longest deadline and grace (" +
                    util::format_duration_ms(m_o.temp_dead_after_ms) + "): left by a killed process",
                false};
      // Deletion is sweep's for objects, which have rows and tasks; a temporary file has
      // neither, and its name and age are what prove it dead.
      if (m_apply_cleanup) {
        auto removed = m_s.remove_temp(t.name, before);
        f.applied = removed && removed.value();
        if (!removed) f.detail += "; not removed: " + removed.error().message;
      }
      found(f);
      return true;
    });
    if (!listed) {
      m_sum.error = listed.error();
      return false;
    }
    return true;
  }

  // Incomplete staged uploads whose record is no longer uploading. A store returns no stamp
  // for them (S3's ListMultipartUploads and ListParts carry no metadata), so the exact key
  // decides: only the row's own upload ever used it (its uuid is in the key). false when the
  // listing failed (m_sum.error); a store that cannot list them is noted as skipped.
  bool compare_staged() {
    auto mp = m_s.list_staged(m_prefix, [&](const store::StagedUpload &u) {
      staged_upload(u);
      return true;
    });
    if (!mp && mp.error().code == Errc::unsupported) {
      // A server that answered but cannot list incomplete uploads: everything else was
      // checked, and the summary says what was not.
      m_sum.counts.erase("stale_multipart");
      m_sum.skipped["stale_multipart"] = mp.error().message;
    } else if (!mp) {
      m_sum.error = mp.error();
      return false;
    }
    return true;
  }

  // A failed row's own staged upload whose cleanup is not due yet: the next upload of its
  // content may resume it (the revive takes a row whose task is PENDING and never claimed), so
  // it is no leftover until then.
  [[nodiscard]] bool resumable(const ledger::FileRecord &row, const std::string &handle) const {
    if (!row.is_deleted || row.upload_status != ledger::FileStatus::upload_failed ||
        row.multipart_upload_id != handle)
      return false;
    auto t = m_l.find_task_for(row.id);
    return t && t->status == ledger::TaskStatus::pending && t->lease_version == 0 && t->next_retry_at > m_now;
  }

  // One incomplete upload: reported unless its row is still uploading (or failed and still
  // resumable); aborted with --apply
  // when its row is dead, or when it is an ACTIVE row's orphan.
  void staged_upload(const store::StagedUpload &u) {
    std::optional<ledger::FileRecord> row;
    m_l.rows_by_key(u.key, "", [&](const ledger::FileRecord &r) {
      if (r.object_key == u.key) row = r;
      return false;
    });
    if (row && row->upload_status == ledger::FileStatus::uploading && !row->is_deleted) return;
    if (row && resumable(*row, u.handle)) return;
    if (!row) { // no row has this key: another tool's upload
      found({"unmanaged", u.key, std::nullopt,
             "incomplete upload " + u.handle + " with no record; never touched", false});
      return;
    }
    // At an ACTIVE row's key, an upload other than the one it completed is lodge's own
    // orphan: a create whose answer was lost and was retried (no process sends it a part
    // again: the row's upload is done). The one it completed is never listed as incomplete.
    // Its stamp cannot be read (S3 shows a create's metadata to no call before completion):
    // the exact key (its uuid issued to this row alone), the row alive and complete, and the
    // id not the recorded one are what justify the abort.
    const bool orphan = !row->is_deleted && row->upload_status == ledger::FileStatus::active &&
                        row->multipart_upload_id != u.handle;
    Finding f{"stale_multipart", u.key, row->id,
              "incomplete upload " + u.handle +
                  (orphan ? ", not the one ACTIVE record #" + std::to_string(row->id) +
                                " completed (a create whose answer was lost)"
                          : ""),
              false};
    // Aborted when the row of exactly this key is dead (I8), or is the orphan above.
    if (m_apply_cleanup && (row->is_deleted || orphan)) f.applied = m_s.abort_staged(u.key, u.handle).ok();
    found(f);
  }

  ledger::ReconcileLedger &m_l;
  store::ObjectStore &m_s;
  const ReconcileOptions &m_o;
  const util::Clock &m_clock;
  const std::function<void(const Finding &)> &m_report;
  ReconcileReport m_sum;
  const std::string m_prefix;
  const int64_t m_now;
  std::optional<ledger::Divergence> m_divergence;
  bool m_apply_cleanup = false; // --apply, and the ledger has not diverged
  std::string m_meta_prefix;    // where lodge's own metadata (id markers) is kept
  std::string m_own_marker;     // this ledger's id marker
  int64_t m_max_id = 0;         // the ledger's last record id, read after the divergence check
};
} // namespace

ReconcileReport reconcile(ledger::ReconcileLedger &l, ledger::LedgerMeta &log, store::ObjectStore &s,
                          const ReconcileOptions &o, const util::Clock &clock,
                          const std::function<void(const Finding &)> &report) {
  const int64_t started = clock.now_ms();
  auto sum = Reconciler(l, s, o, clock, report).run();
  record_run(log, "reconcile", o.worker_id, started, sum.clean() && !sum.error, job_counts(sum), clock);
  return sum;
}

nlohmann::json job_counts(const ReconcileReport &r) {
  nlohmann::json j{{"objects", r.objects},
                   {"rows", r.rows},
                   {"found", nlohmann::json(r.counts)},
                   {"skipped", nlohmann::json(r.skipped)},
                   {"applied", r.applied},
                   {"clean", r.clean() && !r.error}};
  j["diverged"] = r.diverged;
  if (r.error) { // as every failed run is recorded: the message, and the code apart
    j["error"] = r.error->message;
    j["code"] = std::string(r.error->name());
  }
  return j;
}

int exit_status(const ReconcileReport &r) {
  if (r.error) return errc_info(r.error->code).exit_code;
  return r.clean() ? errc_info(Errc::ok).exit_code : items_failed_status();
}

} // namespace lodge::ops
