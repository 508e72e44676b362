#include <cstdlib>
#include <lodge/crypto/sha256.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/ops/jobs.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>

namespace lodge::ops {

SweepSummary sweep(ledger::Ledger &l, store::ObjectStore &s, const SweepOptions &o,
                   const util::Clock &clock) {
  SweepSummary sum;
  if (o.dry_run) {
    sum.would_claim = static_cast<int64_t>(l.due_tasks(clock.now_ms(), o.limit).size());
    return sum;
  }
  // A restored ledger would delete objects confirmed after its backup: look first.
  auto diverged = check_divergence(l, s, clock);
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
    auto tasks = l.claim_due(clock.now_ms(), n, o.worker_id, o.lease_ms);
    if (tasks.empty()) break;
    sum.claimed += static_cast<int64_t>(tasks.size());
    if (failpoint::hit("sweep.after_claim"))
      throw LodgeError(Errc::internal,
                       "injected failure after claiming " + std::to_string(tasks.size()) + " tasks");
    auto results = run_claimed_batch(l, stores, tasks, o.cleanup, clock);
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
      }
      if (r.unreachable) ++sum.unreachable;
      if (!r.error.empty()) sum.errors.push_back("task " + std::to_string(t.id) + ": " + r.error);
    }
  }
  return sum;
}

RepairSummary repair(ledger::Ledger &l, const RepairOptions &o, const util::Clock &clock) {
  RepairSummary sum;
  if (!o.dry_run) refuse_if_diverged(l.id_blocks().diverged, "repair");
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
    auto rows = l.overdue_uploads(clock.now_ms(), n);
    if (rows.empty()) break;
    for (const auto &r : rows) {
      ++sum.examined;
      if (o.dry_run) continue;
      int64_t grace = grace_for(*o.config, r.policy);
      if (l.repair_row(r.id, clock.now_ms(), grace, o.max_retries) == ledger::RepairOutcome::repaired) {
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

ReconcileSummary reconcile(ledger::Ledger &l, store::ObjectStore &s, const ReconcileOptions &o,
                           const util::Clock &clock, const std::function<void(const Finding &)> &report) {
  ReconcileSummary sum;
  sum.strict = o.strict;
  for (const char *k : {"unmanaged", "dangling", "corrupt", "leftover", "stale_multipart", "foreign",
                        "diverged", "beyond_history", "unknown"})
    sum.counts[k] = 0;
  const std::string &prefix = s.key_prefix();
  const int64_t now = clock.now_ms();
  // Divergence first: it decides what may be applied, and moves the sequence past the
  // store's mark before max_id is read.
  auto div = check_divergence(l, s, clock);
  if (!div) throw LodgeError(div.error());
  sum.diverged = div.value().has_value();
  if (sum.diverged && o.apply && !o.roll_forward) refuse_if_diverged(div.value(), "reconcile --apply");
  const bool apply_cleanup = o.apply && !sum.diverged;
  const std::string meta_prefix = metadata_prefix(s);
  const std::string own_marker = id_marker_key(s, l.uuid());
  const int64_t max_id = l.max_record_id();
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
    l.rows_by_key(prefix, after, [&](const ledger::FileRecord &r) {
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

  auto row_only = [&](const ledger::FileRecord &r) {
    ++sum.rows;
    if (r.upload_status == ledger::FileStatus::active && !r.is_deleted)
      found({"dangling", r.object_key, r.id, "ACTIVE record #" + std::to_string(r.id) + " has no object",
             false});
  };

  // Whose an object is, by its stamp: nullopt when this ledger's own row `expected_id`
  // (0: none) may claim it; otherwise the report-only finding that says why not (I8).
  auto not_ours = [&](const std::string &key, int64_t expected_id) -> std::optional<Finding> {
    auto h = s.head(key);
    if (!h && h.error().code == Errc::not_found) return std::nullopt; // gone meanwhile
    if (!h) // a failed HEAD, unreadable metadata: whose it is cannot be told
      return Finding{"unknown", key, std::nullopt, h.error().message + "; never touched", false};
    const auto &meta = h->metadata;
    auto ledger_it = meta.find(store::meta::ledger);
    auto id_it = meta.find(store::meta::record);
    if (ledger_it == meta.end() || id_it == meta.end())
      return Finding{"unmanaged", key, std::nullopt, "no lodge stamp: another tool wrote it; never touched",
                     false};
    int64_t record_id = std::strtoll(id_it->second.c_str(), nullptr, 10);
    auto named = record_id ? std::optional<int64_t>(record_id) : std::nullopt;
    if (ledger_it->second != l.uuid())
      return Finding{"foreign", key, named,
                     "stamped by another ledger (" + ledger_it->second + "); never touched", false};
    if (record_id > max_id)
      return Finding{"beyond_history", key, named,
                     "record #" + std::to_string(record_id) + " is newer than this ledger's last (#" +
                         std::to_string(max_id) +
                         "): was the ledger restored from an older copy? never touched",
                     false};
    if (record_id != expected_id)
      return Finding{"diverged", key, named,
                     "stamped with record #" + std::to_string(record_id) +
                         " of this ledger, which holds another key: the history diverged; never touched",
                     false};
    return std::nullopt;
  };

  // No row has this key: nothing proves it is ours and dead, so it is only reported.
  auto object_only = [&](const store::ObjectInfo &obj) {
    if (now - obj.last_modified_ms < o.older_than_ms) return; // may be an upload in flight
    if (auto f = not_ours(obj.key, 0)) found(*f);
  };

  auto both = [&](const store::ObjectInfo &obj, const ledger::FileRecord &r) {
    ++sum.rows;
    if (r.upload_status == ledger::FileStatus::active && !r.is_deleted) {
      if (obj.size != static_cast<uint64_t>(r.size)) {
        found({"corrupt", r.object_key, r.id,
               "size " + std::to_string(obj.size) + " but the record says " + std::to_string(r.size), false});
      } else if (o.verify) {
        auto d = digest_of(s, r.object_key);
        if (!d || *d != r.sha256)
          found({"corrupt", r.object_key, r.id, "content does not hash to the recorded sha256", false});
      }
      return;
    }
    if (sum.diverged && r.upload_status == ledger::FileStatus::uploading && !r.is_deleted) {
      // Restored from a backup taken while this upload ran: the other copy may have
      // confirmed it. Complete, and stamped with this row and its digest, it is kept.
      auto h = s.head(r.object_key);
      if (!h || h->size != static_cast<uint64_t>(r.size) || foreign_stamp(h->metadata, l.uuid(), r.id) ||
          h->metadata[store::meta::sha256] != r.sha256)
        return;
      Finding f{"confirmed_after_backup", r.object_key, r.id,
                "record #" + std::to_string(r.id) +
                    " is UPLOADING here, but its object is complete and stamped with this record and digest "
                    "(confirmed after the backup); reconcile --apply --roll-forward makes it ACTIVE",
                false};
      // Activated as its upload would have been: on a store that tags objects, the tag
      // owed is recorded and set (the object is still tagged pending).
      if (o.apply && o.roll_forward) f.applied = activate(l, s, r, {h->etag, h->version_id}, clock).active();
      found(f);
      return;
    }
    if (r.is_deleted && !live_task(l.find_task_for(r.id))) {
      if (auto other = not_ours(r.object_key, r.id)) { // the exact key, but not this row's object
        found(*other);
        return;
      }
      Finding f{"leftover", r.object_key, r.id,
                "record #" + std::to_string(r.id) + " is dead but its object remains", false};
      if (apply_cleanup)
        f.applied = l.requeue_task_for(r.id, now, o.max_retries) == ledger::QueueOutcome::queued;
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

  // Incomplete staged uploads whose record is no longer uploading.
  auto mp = s.list_staged(prefix, [&](const store::StagedUpload &u) {
    std::optional<ledger::FileRecord> row;
    l.rows_by_key(u.key, "", [&](const ledger::FileRecord &r) {
      if (r.object_key == u.key) row = r;
      return false;
    });
    if (row && row->upload_status == ledger::FileStatus::uploading && !row->is_deleted) return true;
    if (!row) { // no row has this key: another tool's upload
      found({"unmanaged", u.key, std::nullopt,
             "incomplete upload " + u.handle + " with no record; never touched", false});
      return true;
    }
    Finding f{"stale_multipart", u.key, row->id, "incomplete upload " + u.handle, false};
    // Aborted only when the row of exactly this key is dead (I8); an ACTIVE row's is reported.
    if (apply_cleanup && row->is_deleted) f.applied = s.abort_staged(u.key, u.handle).ok();
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
  if (sum.diverged) l.note_reconciled(clock.now_ms()); // the operator has the whole report now
  return sum;
}

} // namespace lodge::ops
