#include <algorithm>
#include <functional>
#include <lodge/crypto/random.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/ops/activate.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/threads.hpp>
#include <mutex>

namespace lodge::ops {

const char *to_string(CleanupOutcome o) {
  switch (o) {
  case CleanupOutcome::deleted:
    return "deleted";
  case CleanupOutcome::ignored:
    return "ignored";
  case CleanupOutcome::postponed:
    return "postponed";
  case CleanupOutcome::retried:
    return "retried";
  case CleanupOutcome::dead_lettered:
    return "dead_lettered";
  case CleanupOutcome::lease_lost:
    return "lease_lost";
  case CleanupOutcome::kept:
    return "kept";
  }
  return "?";
}

void CleanupTally::add(const CleanupResult &r) {
  switch (r.outcome) {
  case CleanupOutcome::deleted:
    ++deleted;
    if (r.verify_scheduled) ++verify_scheduled;
    break;
  case CleanupOutcome::ignored:
    ++ignored;
    break;
  case CleanupOutcome::postponed:
    ++postponed;
    break;
  case CleanupOutcome::retried:
    ++retried;
    break;
  case CleanupOutcome::dead_lettered:
    ++dead_lettered;
    break;
  case CleanupOutcome::lease_lost:
    ++lease_lost;
    break;
  case CleanupOutcome::kept:
    ++kept;
    break;
  }
  if (r.unreachable) ++unreachable;
}

int64_t cleanup_backoff_ms(const CleanupSettings &s, int64_t retry_count, uint64_t random) {
  int64_t cap = std::max<int64_t>(s.backoff_base_ms, 1);
  for (int64_t i = 0; i < retry_count && cap < s.backoff_max_ms; ++i)
    cap *= 2;
  cap = std::min(cap, s.backoff_max_ms);
  // Full jitter, but never less than half the base: a retry "at once" would only hammer
  // a store that just failed.
  int64_t floor = std::min(cap, s.backoff_base_ms / 2);
  return floor + static_cast<int64_t>(random % static_cast<uint64_t>(cap - floor + 1));
}

namespace {
// What the store work on one decided task leaves for the ledger: a final result (nothing
// to write), or one TaskEnd and what its TaskFinish then means.
// The ledger's row of a record, as work_on reads it (from one thread at a time).
using RowLookup = std::function<std::optional<ledger::FileRecord>(int64_t)>;

struct TaskWork {
  std::optional<CleanupResult> done;
  ledger::TaskEnd end;
  enum class Then { tagged, guard_refused, not_ours, deleted, failed } then = Then::failed;
  std::string error;
  bool unreachable = false;
};

TaskWork finished(CleanupOutcome o) {
  TaskWork w;
  w.done = CleanupResult{o, {}};
  return w;
}

// A failed store call: the task is retried after a backoff (or dead-lettered past its retries).
TaskWork failed_attempt(const ledger::TaskRecord &task, const CleanupSettings &s, const util::Clock &clock,
                        const Error &error) {
  TaskWork w;
  w.then = TaskWork::Then::failed;
  w.error = error.message;
  w.unreachable = store::is_unreachable(error);
  w.end.kind = ledger::TaskEnd::Kind::finish;
  w.end.task = task;
  w.end.succeeded = false;
  w.end.error = error.message;
  w.end.next_retry_at =
      clock.now_ms() + cleanup_backoff_ms(s, task.retry_count, crypto::random_below(UINT64_MAX));
  return w;
}

// The task ends IGNORED; `error` (why an object was left) becomes its last_error.
TaskWork ignore(const ledger::TaskRecord &task, TaskWork::Then then, std::string error = {}) {
  TaskWork w;
  w.then = then;
  w.error = std::move(error);
  w.end.kind = ledger::TaskEnd::Kind::ignore;
  w.end.task = task;
  w.end.error = w.error;
  return w;
}

// The row is alive and ACTIVE and its task records the committed tag as owed (the
// activation's own tagging failed, or its process died first): tag it, then the task is
// done (end_tag: or the delete's again, if the row was deleted meanwhile).
TaskWork commit_tag(const RowLookup &find_row, store::ObjectStore &store, const ledger::TaskRecord &task,
                    const CleanupSettings &s, const util::Clock &clock) {
  // The tag set is replaced whole: the tags the upload asked for are written again.
  auto row = find_row(task.record_id);
  auto t = tag_committed(store, task.object_key, row ? row->object_options : std::string());
  if (!t) return failed_attempt(task, s, clock, t.error());
  TaskWork w = ignore(task, TaskWork::Then::tagged);
  w.end.kind = ledger::TaskEnd::Kind::tagged;
  w.end.next_retry_at = clock.now_ms() + s.grace_ms; // as a user's delete schedules it
  return w;
}

// The guard kept the object: it is this failed row's by its stamp, but someone tagged it
// other than pending since (lodge tags only ACTIVE rows' objects committed). Nothing is
// deleted: the automatic path never overrides a tag (the guard is the one check the store
// enforces by itself, and a tag set on purpose is not undone unattended); reconcile reports
// it (tag_mismatch) and its --apply, the operator's call, tags it pending again and queues
// the task. The row is re-checked (it is dead: UPLOAD_FAILED never comes back) and the task
// ends IGNORED, the reason its last_error.
TaskWork refused_by_guard(const RowLookup &find_row, const ledger::TaskRecord &task, const std::string &why) {
  auto row = find_row(task.record_id);
  if (!row || row->upload_status != ledger::FileStatus::upload_failed)
    return finished(CleanupOutcome::lease_lost); // cannot happen: the next sweep decides again
  return ignore(task, TaskWork::Then::guard_refused,
                "not deleted: " + why + ", though record #" + std::to_string(task.record_id) +
                    " failed (a tag set by someone else since: sweep does not override it; lodge reconcile "
                    "--apply tags it pending again)");
}

// The work a decision settles without a removal (the tag is set here); nullopt when the
// ledger allowed the delete, which follows.
std::optional<TaskWork> without_removal(const RowLookup &find_row, store::ObjectStore &store,
                                        const ledger::TaskRecord &task, ledger::TaskDecision decision,
                                        const CleanupSettings &s, const util::Clock &clock) {
  switch (decision) {
  case ledger::TaskDecision::lease_lost:
    return finished(CleanupOutcome::lease_lost);
  case ledger::TaskDecision::ignored:
    return finished(CleanupOutcome::ignored);
  case ledger::TaskDecision::postponed:
    return finished(CleanupOutcome::postponed);
  case ledger::TaskDecision::tag:
    return commit_tag(find_row, store, task, s, clock);
  case ledger::TaskDecision::allowed:
    break;
  }
  return std::nullopt;
}

// What the store is asked for an allowed task: remove_owned's key, stamp and guard.
struct RemovalAsk {
  store::Stamp stamp;
  store::DeleteGuard guard = store::DeleteGuard::none;
  std::optional<ledger::FileRecord> row; // read here; its deadline and creation never change
};

RemovalAsk ask_for(const RowLookup &find_row, const std::string &ledger_uuid,
                   const ledger::TaskRecord &task) {
  // I8: the key is this row's, but an object there is only ours to delete if its stamp
  // names this ledger and the row that wrote it; remove_owned checks each object (and
  // version) and deletes on the condition that it is still the one checked. A missing
  // object is success (a no-op unless an incomplete upload of this very key remains).
  // A row sharing another row's object: the stamp names the row that wrote it.
  RemovalAsk a;
  a.row = find_row(task.record_id);
  a.stamp = {ledger_uuid, a.row ? a.row->stamp_id() : task.record_id};
  // A failed upload's object was never tagged committed: its delete is guarded, so a
  // committed object (a confirmed upload) can never be deleted by it, even by mistake.
  // A user-deleted ACTIVE row's object is committed: its delete is not guarded.
  const bool failed_row = a.row && a.row->upload_status == ledger::FileStatus::upload_failed;
  a.guard = failed_row ? store::DeleteGuard::pending_only : store::DeleteGuard::none;
  return a;
}

// What the removal's answer makes of the task.
TaskWork after_removal(const RowLookup &find_row, const ledger::TaskRecord &task, const RemovalAsk &ask,
                       Result<store::Removal> removed, const CleanupSettings &s, const util::Clock &clock) {
  if (failpoint::hit("sweep.after_delete") && removed) {
    // The delete happened but its answer was lost (a timeout): the task is retried, and
    // the retry finds nothing left to delete.
    ErrorDetails lost;
    lost.curl_code = 28; // CURLE_OPERATION_TIMEDOUT
    removed = Error(Errc::storage_unavailable, "DELETE " + task.object_key + ": no answer (injected)", lost);
  }
  if (!removed) return failed_attempt(task, s, clock, removed.error());
  if (!removed->kept.empty()) {
    std::string what;
    for (const auto &k : removed->kept)
      what += (what.empty() ? "" : "; ") + k;
    return ignore(task, TaskWork::Then::not_ours,
                  "not deleted (not record #" + std::to_string(ask.stamp.record_id) + " of this ledger, " +
                      ask.stamp.ledger_uuid + "): " + what);
  }
  if (removed->refused) return refused_by_guard(find_row, task, *removed->refused);
  TaskWork w;
  w.then = TaskWork::Then::deleted;
  w.end.kind = ledger::TaskEnd::Kind::finish;
  w.end.task = task;
  w.end.succeeded = true;
  w.end.next_retry_at = verify_pass_due(ask.row ? &*ask.row : nullptr, clock.now_ms(), s.grace_ms);
  return w;
}

// The store work for a task the ledger decided on: the stamped delete (or the tag).
TaskWork work_on(const RowLookup &find_row, const std::string &ledger_uuid, store::ObjectStore &store,
                 const ledger::TaskRecord &task, ledger::TaskDecision decision, const CleanupSettings &s,
                 const util::Clock &clock) {
  if (auto w = without_removal(find_row, store, task, decision, s, clock)) return std::move(*w);
  auto ask = ask_for(find_row, ledger_uuid, task);
  auto removed = store.remove_owned(task.object_key, ask.stamp, ask.guard);
  return after_removal(find_row, task, ask, std::move(removed), s, clock);
}

// What the ledger's end of the task makes of the store work; said in the log.
CleanupResult conclude(const TaskWork &w, ledger::TaskFinish f, CleanupSettings::Voice voice) {
  const auto &task = w.end.task;
  const std::string id = std::to_string(task.id);
  const bool upload = voice == CleanupSettings::Voice::upload;
  // The upload's words: the file (its id is the user's) and its object, never the task.
  const std::string file = "file #" + std::to_string(task.record_id);
  if (f == ledger::TaskFinish::lease_lost) { // only a failed store call's error is said then
    if (w.then == TaskWork::Then::failed)
      util::log::warn(upload ? file + ": its object " + task.object_key + " could not be removed (" +
                                   w.error + "); sweep will"
                             : "task " + id + " (" + task.object_key + ") lost its lease after: " + w.error);
    return {CleanupOutcome::lease_lost, w.then == TaskWork::Then::failed ? w.error : std::string(),
            w.unreachable};
  }
  switch (w.then) {
  case TaskWork::Then::tagged:
    util::log::info("tagged " + task.object_key + " committed" + (upload ? "" : " (task " + id + ")"));
    return {CleanupOutcome::ignored, {}};
  case TaskWork::Then::guard_refused:
  case TaskWork::Then::not_ours:
    util::log::warn(upload ? file + ": " + task.object_key + " is left in place: " + w.error
                           : "task " + id + " (" + task.object_key +
                                 ") ignored, the object left in place: " + w.error);
    return {CleanupOutcome::kept, w.error};
  case TaskWork::Then::deleted: {
    CleanupResult r{CleanupOutcome::deleted, {}};
    if (f == ledger::TaskFinish::verify_scheduled) {
      r.verify_scheduled = true;
      util::log::info("deleted " + task.object_key + (upload ? "" : " (task " + id + ")") +
                      "; a verify pass follows, in case a late upload still lands");
    } else {
      util::log::info((task.verify_pass == ledger::k_verify_due ? "verified " : "deleted ") +
                      task.object_key + (upload ? "" : " (task " + id + ")"));
    }
    return r;
  }
  case TaskWork::Then::failed:
    break;
  }
  if (f == ledger::TaskFinish::dead_letter) {
    util::log::error(upload ? file + ": its object " + task.object_key + " could not be removed: " + w.error +
                                  " (see lodge tasks)"
                            : "task " + id + " (" + task.object_key + ") dead-lettered: " + w.error);
    return {CleanupOutcome::dead_lettered, w.error, w.unreachable};
  }
  util::log::warn(upload ? file + ": its object " + task.object_key + " could not be removed yet (" +
                               w.error + "); sweep will retry"
                         : "task " + id + " (" + task.object_key + ") will be retried: " + w.error);
  return {CleanupOutcome::retried, w.error, w.unreachable};
}

// One task's end on its own: the single-item ledger call.
ledger::TaskFinish end_one(ledger::TaskLedger &ledger, const ledger::TaskEnd &e, int64_t now) {
  switch (e.kind) {
  case ledger::TaskEnd::Kind::ignore:
    return ledger.ignore_task(e.task, now, e.error);
  case ledger::TaskEnd::Kind::tagged:
    return ledger.end_tag(e.task, e.next_retry_at, now);
  case ledger::TaskEnd::Kind::dead_letter:
    return ledger.dead_letter(e.task, e.error, now) == ledger::DeadLetterOutcome::dead_lettered
               ? ledger::TaskFinish::dead_letter
               : ledger::TaskFinish::lease_lost;
  case ledger::TaskEnd::Kind::finish:
    break;
  }
  return ledger.finish(e.task, e.succeeded, e.error, e.next_retry_at, now);
}

// The deletes of `work` made durable in the store before any of their tasks is finished
// (file:// removes without a directory fsync; one flush covers a batch). If the flush
// fails, each delete is a failed attempt: its task is retried and finds nothing, or the
// object again.
void make_deletes_durable(store::ObjectStore &store, const std::vector<TaskWork *> &work,
                          const CleanupSettings &s, const util::Clock &clock) {
  bool any = false;
  for (auto *w : work)
    any = any || (!w->done && w->then == TaskWork::Then::deleted);
  if (!any) return;
  auto f = store.flush();
  if (f) return;
  for (auto *w : work)
    if (!w->done && w->then == TaskWork::Then::deleted) *w = failed_attempt(w->end.task, s, clock, f.error());
}

// Runs lane(0..lanes-1), one thread each (lane 0 on this one), and joins them all before an
// exception of any is rethrown.
void in_lanes(size_t lanes, const std::function<void(size_t)> &lane) {
  if (lanes <= 1) {
    lane(0);
    return;
  }
  util::ThreadGroup group;
  for (size_t k = 1; k < lanes; ++k)
    group.spawn([&lane, k] { lane(k); });
  std::exception_ptr mine;
  try {
    lane(0);
  } catch (...) {
    mine = std::current_exception();
  }
  group.join();
  if (mine) std::rethrow_exception(mine);
}
} // namespace

int64_t verify_pass_due(const ledger::FileRecord *row, int64_t now, int64_t grace_ms) {
  int64_t deadline_len = row ? std::max<int64_t>(0, row->upload_deadline_at - row->created_at) : 0;
  return now + deadline_len + grace_ms;
}

CleanupResult run_claimed_task(ledger::CleanupLedger &l, store::ObjectStore &store,
                               const ledger::TaskRecord &task, const CleanupSettings &s,
                               const util::Clock &clock) {
  auto w = work_on([&l](int64_t id) { return l.find_file(id); }, l.uuid(), store, task,
                   l.decide(task, clock.now_ms(), s.grace_ms), s, clock);
  if (w.done) return *w.done;
  make_deletes_durable(store, {&w}, s, clock);
  return conclude(w, end_one(l, w.end, clock.now_ms()), s.voice);
}

std::vector<CleanupResult> run_claimed_batch(ledger::CleanupLedger &l, store::ObjectStore &store,
                                             const std::vector<ledger::TaskRecord> &tasks,
                                             const CleanupSettings &s, const util::Clock &clock) {
  return run_claimed_batch(l, std::vector<store::ObjectStore *>{&store}, tasks, s, clock);
}

std::vector<CleanupResult> run_claimed_batch(ledger::CleanupLedger &l,
                                             const std::vector<store::ObjectStore *> &stores,
                                             const std::vector<ledger::TaskRecord> &tasks,
                                             const CleanupSettings &s, const util::Clock &clock) {
  if (stores.empty()) throw LodgeError(Errc::internal, "run_claimed_batch: no store connection");
  auto decisions = l.decide_many(tasks, clock.now_ms(), s.grace_ms);
  if (decisions.size() != tasks.size())
    throw LodgeError(Errc::internal, "decide_many returned " + std::to_string(decisions.size()) +
                                         " decisions for " + std::to_string(tasks.size()) + " tasks");
  // The store work of the batch, spread over the connections (one thread each); the
  // ledger's reads it needs go one at a time over the ledger's one connection.
  std::vector<TaskWork> work(tasks.size());
  std::mutex reads;
  const RowLookup find_row = [&](int64_t id) {
    std::lock_guard lock(reads);
    return l.find_file(id);
  };
  const std::string &uuid = l.uuid();
  // Where the store batches its deletes, each lane reads its keys (plan_removal) and the
  // first connection then deletes what they planned, in as few requests as it can.
  const bool planned = stores.front()->batches_removals();
  std::vector<std::optional<RemovalAsk>> asks(tasks.size());
  std::vector<std::optional<store::PlannedRemoval>> plans(tasks.size());
  const size_t lanes = std::min(stores.size(), tasks.size());
  // Each lane then makes its own deletes durable (a flush covers what its connection did;
  // concurrent flushes of one file:// store share one syncfs).
  auto lane = [&](size_t k) {
    std::vector<TaskWork *> theirs;
    for (size_t i = k; i < tasks.size(); i += lanes) {
      if (!planned) {
        work[i] = work_on(find_row, uuid, *stores[k], tasks[i], decisions[i], s, clock);
        theirs.push_back(&work[i]);
      } else if (auto w = without_removal(find_row, *stores[k], tasks[i], decisions[i], s, clock)) {
        work[i] = std::move(*w);
      } else {
        asks[i] = ask_for(find_row, uuid, tasks[i]);
        auto p = stores[k]->plan_removal(tasks[i].object_key, asks[i]->stamp, asks[i]->guard);
        if (p)
          plans[i] = std::move(p.value());
        else
          work[i] = after_removal(find_row, tasks[i], *asks[i], p.error(), s, clock);
      }
    }
    make_deletes_durable(*stores[k], theirs, s, clock);
  };
  in_lanes(lanes, lane);
  if (planned) {
    std::vector<size_t> at;
    std::vector<store::PlannedRemoval> batch;
    for (size_t i = 0; i < plans.size(); ++i)
      if (plans[i]) {
        at.push_back(i);
        batch.push_back(std::move(*plans[i]));
      }
    auto removed = stores.front()->remove_planned(batch);
    if (removed.size() != batch.size())
      throw LodgeError(Errc::internal, "remove_planned returned " + std::to_string(removed.size()) +
                                           " results for " + std::to_string(batch.size()) + " keys");
    std::vector<TaskWork *> theirs;
    for (size_t j = 0; j < at.size(); ++j) {
      const size_t i = at[j];
      work[i] = after_removal(find_row, tasks[i], *asks[i], std::move(removed[j]), s, clock);
      theirs.push_back(&work[i]);
    }
    make_deletes_durable(*stores.front(), theirs, s, clock);
  }

  std::vector<ledger::TaskEnd> ends;
  std::vector<size_t> ending; // the index in `work` of each end
  for (size_t i = 0; i < work.size(); ++i) {
    if (work[i].done) continue;
    ends.push_back(work[i].end);
    ending.push_back(i);
  }
  auto finishes = l.finish_many(ends, clock.now_ms());
  if (finishes.size() != ends.size())
    throw LodgeError(Errc::internal, "finish_many returned " + std::to_string(finishes.size()) +
                                         " outcomes for " + std::to_string(ends.size()) + " tasks");
  std::vector<CleanupResult> out(tasks.size());
  for (size_t i = 0; i < work.size(); ++i)
    if (work[i].done) out[i] = *work[i].done;
  for (size_t j = 0; j < ends.size(); ++j)
    out[ending[j]] = conclude(work[ending[j]], finishes[j], s.voice);
  return out;
}

} // namespace lodge::ops
