#include <lodge/crypto/sha256.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/jobs.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::ops {

SweepSummary sweep(SweepLedger l, store::ObjectStore &s, const SweepOptions &o, const util::Clock &clock) {
  SweepSummary sum;
  if (o.dry_run) {
    sum.would_claim = static_cast<int64_t>(l.tasks.due_tasks(clock.now_ms(), o.limit).size());
    return sum;
  }
  // A restored ledger would delete objects confirmed after its backup: look first.
  auto diverged = check_divergence({l.reads, l.blocks}, s, clock);
  if (!diverged) throw LodgeError(diverged.error());
  refuse_if_diverged(diverged.value(), "sweep");
  std::vector<std::unique_ptr<store::ObjectStore>> extra;
  std::vector<store::ObjectStore *> stores{&s};
  for (int i = 1; i < o.jobs && o.open_store; ++i) {
    extra.push_back(o.open_store());
    stores.push_back(extra.back().get());
  }
  int64_t started = util::steady_ms();
  while (sum.claimed < o.limit) {
    if (o.max_runtime_ms > 0 && util::steady_ms() - started >= o.max_runtime_ms) break;
    int n = static_cast<int>(std::min<int64_t>(o.batch, o.limit - sum.claimed));
    auto tasks = l.tasks.claim_due(clock.now_ms(), n, o.worker_id, o.lease_ms);
    if (tasks.empty()) break;
    sum.claimed += static_cast<int64_t>(tasks.size());
    if (failpoint::hit("sweep.after_claim"))
      throw LodgeError(Errc::internal,
                       "injected failure after claiming " + std::to_string(tasks.size()) + " tasks");
    auto results = run_claimed_batch({l.tasks, l.reads}, stores, tasks, o.cleanup, clock);
    for (size_t i = 0; i < tasks.size(); ++i) {
      const auto &t = tasks[i];
      const auto &r = results[i];
      switch (r.outcome) {
      case CleanupOutcome::deleted:
        ++sum.deleted;
        if (r.verify_scheduled) ++sum.verify_scheduled;
        if (t.verify_pass == ledger::k_verify_due) ++sum.verified;
        break;
      case CleanupOutcome::ignored:
        ++sum.ignored;
        break;
      case CleanupOutcome::postponed:
        ++sum.postponed;
        break;
      case CleanupOutcome::retried:
        ++sum.retried;
        break;
      case CleanupOutcome::dead_lettered:
        ++sum.dead_lettered;
        break;
      case CleanupOutcome::lease_lost:
        ++sum.lease_lost;
        break;
      case CleanupOutcome::kept:
        ++sum.kept;
        break;
      }
      if (r.unreachable) ++sum.unreachable;
      if (!r.error.empty()) sum.errors.push_back("task " + std::to_string(t.id) + ": " + r.error);
    }
  }
  return sum;
}

RepairSummary repair(RepairLedger l, const RepairOptions &o, const util::Clock &clock) {
  RepairSummary sum;
  if (!o.dry_run) refuse_if_diverged(l.blocks.id_blocks().diverged, "repair");
  if (!o.dry_run && !o.config)
    throw LodgeError(Errc::internal, "repair: no configuration to take the grace from");
  if (!o.dry_run) {
    // Rows of killed runs on this host first: they need not wait for their deadline.
    auto a = recover_abandoned(l, *o.config, o.max_retries, clock);
    sum.examined += a.examined;
    sum.repaired += a.failed;
    sum.abandoned = a.failed;
    sum.skipped += a.examined - a.failed;
  }
  while (sum.examined < o.limit) {
    int n = static_cast<int>(std::min<int64_t>(o.batch, o.limit - sum.examined));
    auto rows = l.recovery.overdue_uploads(clock.now_ms(), n);
    if (rows.empty()) break;
    for (const auto &r : rows) {
      ++sum.examined;
      if (o.dry_run) continue;
      int64_t grace = grace_for(*o.config, r.policy);
      if (l.recovery.repair_row(r.id, clock.now_ms(), grace, o.max_retries) ==
          ledger::RepairOutcome::repaired) {
        ++sum.repaired;
        util::log::info("repaired file #" + std::to_string(r.id) + " (" + r.object_key + ")");
      } else {
        ++sum.skipped;
      }
    }
    if (o.dry_run) break;
  }
  return sum;
}

bool others_object(const std::string &kind) {
  return kind == "unmanaged" || kind == "foreign";
}

bool ReconcileSummary::clean() const {
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

ReconcileSummary reconcile(ReconcileLedger l, store::ObjectStore &s, const ReconcileOptions &o,
                           const util::Clock &clock, const std::function<void(const Finding &)> &report) {
  ReconcileSummary sum;
  sum.strict = o.strict;
  for (const char *k : {"unmanaged", "dangling", "corrupt", "leftover", "stale_multipart", "foreign",
                        "diverged", "beyond_history", "unknown", "tag_mismatch"})
    sum.counts[k] = 0;
  const std::string &prefix = s.key_prefix();
  const int64_t now = clock.now_ms();
  // Divergence first: it decides what may be applied, and moves the sequence past the
  // store's mark before max_id is read.
  auto div = check_divergence({l.reads, l.blocks}, s, clock);
  if (!div) throw LodgeError(div.error());
  sum.diverged = div.value().has_value();
  if (sum.diverged && o.apply && !o.roll_forward) refuse_if_diverged(div.value(), "reconcile --apply");
  const bool apply_cleanup = o.apply && !sum.diverged;
  const std::string meta_prefix = metadata_prefix(s);
  const std::string own_marker = id_marker_key(s, l.reads.uuid());
  const int64_t max_id = l.reads.max_record_id();
  auto found = [&](const Finding &f) {
    ++sum.counts[f.kind];
    if (f.applied) ++sum.applied;
    report(f);
  };
  if (sum.diverged) {
    sum.counts["confirmed_after_backup"] = 0;
    const auto &d = *div.value();
    found({"diverged", own_marker, std::nullopt,
           "the store's id marker says ids up to #" + std::to_string(d.store_mark) +
               " were reserved, but this ledger's last was #" + std::to_string(d.sequence_before) +
               ": it was restored from a backup or copied; objects stamped with its ids may be newer than it",
           false});
  }

  // The ledger side is read in pages by key so neither side is ever held whole.
  std::vector<ledger::FileRecord> page;
  size_t pos = 0;
  std::string after;
  bool ledger_done = false;
  auto fill = [&] {
    page.clear();
    pos = 0;
    if (ledger_done) return;
    l.reads.rows_by_key(prefix, after, [&](const ledger::FileRecord &r) {
      page.push_back(r);
      return page.size() < 512;
    });
    if (page.empty())
      ledger_done = true;
    else
      after = page.back().object_key;
  };
  fill();
  auto next_row = [&]() -> const ledger::FileRecord * {
    if (pos >= page.size()) fill();
    return pos < page.size() ? &page[pos] : nullptr;
  };

  // A row whose object alive rows share is in use whatever its own state (I5, shared).
  auto in_use = [](const ledger::FileRecord &r) {
    return (r.upload_status == ledger::FileStatus::active && !r.is_deleted) || r.alive_sharers > 0;
  };
  auto row_only = [&](const ledger::FileRecord &r) {
    ++sum.rows;
    if (in_use(r))
      found({"dangling", r.object_key, r.id,
             (r.is_deleted ? "record #" + std::to_string(r.id) + ", shared by " +
                                 util::plural(r.alive_sharers, "alive record") + ","
                           : "ACTIVE record #" + std::to_string(r.id)) +
                 " has no object",
             false});
  };

  // Whose an object is, by its stamp: nullopt when this ledger's own row `expected_id`
  // (0: none) may claim it (store::stamp_mismatch); otherwise the report-only finding that
  // says why not (I8).
  auto not_ours = [&](const std::string &key, int64_t expected_id) -> std::optional<Finding> {
    auto h = s.head(key);
    if (!h && h.error().code == Errc::not_found) return std::nullopt; // gone meanwhile
    if (!h) // a failed HEAD, unreadable metadata: whose it is cannot be told
      return Finding{"unknown", key, std::nullopt, h.error().message + "; never touched", false};
    if (!store::stamp_mismatch(h->metadata, l.reads.uuid(), expected_id)) return std::nullopt;
    const auto seen = store::read_stamp(h->metadata);
    auto named = seen.record_id ? std::optional<int64_t>(seen.record_id) : std::nullopt;
    if (!seen.ledger)
      return Finding{"unmanaged", key, std::nullopt, "no lodge stamp: another tool wrote it; never touched",
                     false};
    if (*seen.ledger != l.reads.uuid())
      return Finding{"foreign", key, named, "stamped by another ledger (" + *seen.ledger + "); never touched",
                     false};
    if (seen.record_id == 0) // this ledger's uuid, but no record id lodge would write
      return Finding{
          "unknown", key, std::nullopt,
          "stamped by this ledger with record " +
              (seen.record ? "'" + util::escape_for_terminal(*seen.record) + "'" : std::string("(none)")) +
              ", which is no record id: whose it is cannot be told; never touched",
          false};
    if (seen.record_id > max_id)
      return Finding{"beyond_history", key, named,
                     "record #" + std::to_string(seen.record_id) + " is newer than this ledger's last (#" +
                         std::to_string(max_id) +
                         "): was the ledger restored from an older copy? never touched",
                     false};
    return Finding{"diverged", key, named,
                   "stamped with record #" + std::to_string(seen.record_id) +
                       " of this ledger, which holds another key: the history diverged; never touched",
                   false};
  };

  // No row has this key: nothing proves it is ours and dead, so it is only reported.
  auto object_only = [&](const store::ObjectInfo &obj) {
    if (now - obj.last_modified_ms < o.older_than_ms) return; // may be an upload in flight
    if (auto f = not_ours(obj.key, 0)) found(*f);
  };

  // Another tool changed lodge's state tag (where the listing says it): an ACTIVE row's
  // object must be committed once its task no longer owes the tag, or a lifecycle backstop
  // rule expires it. --apply tags it committed again (stamp checked).
  // An object written over the key by another tool loses lodge's tag with its stamp: that
  // is the object not being the row's (corrupt), not a tag to put back.
  auto active_tag = [&](const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    if (!obj.state_tag || *obj.state_tag == "committed") return;
    if (live_task(l.reads.find_task_for(r.id))) return; // still owed: sweep's `tag` decision sets it
    if (auto h = s.head(r.object_key); h) {
      if (auto why = store::stamp_mismatch(h->metadata, l.reads.uuid(), r.id)) {
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
    if (apply_cleanup) {
      auto why = restore_state_tag(l.reads, s, r, true);
      f.applied = !why;
      if (why) f.detail += "; not re-tagged: " + *why;
    }
    found(f);
  };

  // A failed row's object lodge tagged pending (or, sent directly to Azure, left untagged);
  // another tool's tag (committed, or tags without a state) makes sweep's guarded delete
  // leave it for ever. --apply tags it pending again (stamp checked) and queues its task.
  // The store says what its guard would do. true: reported.
  auto failed_tag = [&](const ledger::FileRecord &r) {
    if (r.upload_status != ledger::FileStatus::upload_failed || !s.capabilities().state_tags) return false;
    auto refusal = s.guard_refusal(r.object_key);
    if (!refusal || !refusal.value()) return false; // unreadable: a leftover; the guard decides
    Finding f{"tag_mismatch", r.object_key, r.id,
              "record #" + std::to_string(r.id) + " failed, but its object " + *refusal.value() +
                  " (another tool's doing): sweep's guarded delete leaves it; --apply tags it pending again "
                  "and queues it",
              false};
    if (apply_cleanup) {
      auto why = restore_state_tag(l.reads, s, r, false);
      f.applied = !why && l.tasks.requeue_task_for(r.id, now, o.max_retries) == ledger::QueueOutcome::queued;
      if (why) f.detail += "; not re-tagged: " + *why;
    }
    found(f);
    return true;
  };

  auto both = [&](const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    ++sum.rows;
    if (in_use(r)) {
      if (obj.size != static_cast<uint64_t>(r.size)) {
        found({"corrupt", r.object_key, r.id,
               "size " + std::to_string(obj.size) + " but the record says " + std::to_string(r.size), false});
        return;
      }
      if (o.verify) {
        auto d = digest_of(s, r.object_key);
        if (!d || *d != r.sha256) {
          found({"corrupt", r.object_key, r.id, "content does not hash to the recorded sha256", false});
          return;
        }
      }
      active_tag(obj, r);
      return;
    }
    if (sum.diverged && r.upload_status == ledger::FileStatus::uploading && !r.is_deleted) {
      // Restored from a backup taken while this upload ran: the other copy may have
      // confirmed it. Complete, and stamped with this row and its digest, it is kept.
      auto h = s.head(r.object_key);
      if (!h || h->size != static_cast<uint64_t>(r.size) ||
          store::stamp_mismatch(h->metadata, l.reads.uuid(), r.id) ||
          h->metadata[store::meta::sha256] != r.sha256)
        return;
      Finding f{"confirmed_after_backup", r.object_key, r.id,
                "record #" + std::to_string(r.id) +
                    " is UPLOADING here, but its object is complete and stamped with this record and digest "
                    "(confirmed after the backup); reconcile --apply --roll-forward makes it ACTIVE",
                false};
      // Activated as its upload would have been: on a store that tags objects, the tag
      // owed is recorded and set (the object is still tagged pending).
      if (o.apply && o.roll_forward)
        f.applied = activate(l.uploads, s, r, {h->etag, h->version_id}, clock).active();
      found(f);
      return;
    }
    if (r.is_deleted && !live_task(l.reads.find_task_for(r.id))) {
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
      if (apply_cleanup)
        f.applied = l.tasks.requeue_task_for(r.id, now, o.max_retries) == ledger::QueueOutcome::queued;
      found(f);
    }
  };

  auto listed = s.list(prefix, [&](const store::ObjectInfo &obj) {
    if (obj.key.compare(0, meta_prefix.size(), meta_prefix) == 0) {
      // lodge's own metadata (id markers): this ledger's is checked above; another's is
      // another ledger's business.
      if (obj.key != own_marker)
        found({"foreign", obj.key, std::nullopt,
               "id marker of another ledger (" + obj.key.substr(meta_prefix.size()) + "); never touched",
               false});
      return true;
    }
    ++sum.objects;
    while (const auto *r = next_row()) {
      if (r->object_key < obj.key) {
        row_only(*r);
        ++pos;
        continue;
      }
      if (r->object_key == obj.key) {
        both(obj, *r);
        ++pos;
        return true;
      }
      break;
    }
    object_only(obj);
    return true;
  });
  if (!listed) { // what was found and applied so far is reported; the rest is not known
    sum.error = listed.error();
    return sum;
  }
  while (const auto *r = next_row()) {
    row_only(*r);
    ++pos;
  }

  // Incomplete staged uploads whose record is no longer uploading. A store returns no stamp
  // for them (S3's ListMultipartUploads and ListParts carry no metadata), so the exact key
  // decides: only the row's own upload ever used it (its uuid is in the key).
  auto mp = s.list_staged(prefix, [&](const store::StagedUpload &u) {
    std::optional<ledger::FileRecord> row;
    l.reads.rows_by_key(u.key, "", [&](const ledger::FileRecord &r) {
      if (r.object_key == u.key) row = r;
      return false;
    });
    if (row && row->upload_status == ledger::FileStatus::uploading && !row->is_deleted) return true;
    if (!row) { // no row has this key: another tool's upload
      found({"unmanaged", u.key, std::nullopt,
             "incomplete upload " + u.handle + " with no record; never touched", false});
      return true;
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
    if (apply_cleanup && (row->is_deleted || orphan)) f.applied = s.abort_staged(u.key, u.handle).ok();
    found(f);
    return true;
  });
  if (!mp && mp.error().code == Errc::unsupported) {
    // A server that answered but cannot list incomplete uploads: everything else was
    // checked, and the summary says what was not.
    sum.counts.erase("stale_multipart");
    sum.skipped["stale_multipart"] = mp.error().message;
  } else if (!mp) {
    sum.error = mp.error();
    return sum;
  }
  if (sum.diverged) l.blocks.note_reconciled(clock.now_ms()); // the operator has the whole report now
  return sum;
}

} // namespace lodge::ops
