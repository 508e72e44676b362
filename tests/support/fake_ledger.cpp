// The ledger fake (fake_ledger.hpp). Each method is SqlLedger's transaction of the same name
// (src/ledger/sql_*.cpp) done on the maps under one lock: the same preconditions, the same
// outcomes, the same fields written; the rules are the protocol's own (ledger::decide_task,
// ledger::dead_letters, ledger::object_key_for). The ledger contract (tests/ledger, run with
// LODGE_TEST_LEDGER=fake) holds it to SqlLedger's behaviour.
#include "fake_ledger.hpp"

#include <algorithm>
#include <lodge/ledger/protocol.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/store/object_options.hpp>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>

namespace lodge::test {
using namespace ledger;

namespace {
const char *const k_ops[] = {"schema_version",
                             "status",
                             "record_job_run",
                             "store_binding",
                             "bind_store",
                             "reserve",
                             "set_multipart_upload_id",
                             "renew",
                             "confirm",
                             "find_unchanged",
                             "record_stat",
                             "settle",
                             "mark_failed",
                             "fail_resumable",
                             "find_file",
                             "scan_files",
                             "prefix_summaries",
                             "shared_outside",
                             "prune_snapshot",
                             "soft_delete_expired",
                             "find_by_path",
                             "find_task_for",
                             "claim_due",
                             "claim_task",
                             "decide",
                             "ignore_task",
                             "end_tag",
                             "finish",
                             "decide_many",
                             "finish_many",
                             "due_tasks",
                             "scan_tasks",
                             "retry_task",
                             "overdue_uploads",
                             "repair_row",
                             "held_uploads",
                             "fail_abandoned",
                             "soft_delete",
                             "mark_missing",
                             "rows_by_key",
                             "max_record_id",
                             "requeue_task_for",
                             "dead_letter",
                             "id_blocks",
                             "begin_id_block",
                             "end_id_block",
                             "record_divergence",
                             "note_reconciled",
                             "accept_divergence",
                             "outbox_settings",
                             "set_outbox_settings",
                             "unsent_due_tasks",
                             "mark_tasks_sent",
                             "claim_sent_task",
                             "unsent_events",
                             "mark_events_sent",
                             "outbox_counts",
                             "claim_due_not_queued"};

void known_op(const std::string &op) {
  if (std::find(std::begin(k_ops), std::end(k_ops), op) == std::end(k_ops))
    throw std::logic_error("FakeLedger: no ledger call named '" + op + "'");
}

std::string row_state(const FileRecord &r) {
  std::string s = to_string(r.upload_status);
  if (r.is_deleted && r.upload_status != FileStatus::upload_failed) s += "+deleted";
  return s;
}

std::string task_state(const TaskRecord &t) {
  return std::string(to_string(t.status)) + (t.tag_owed ? "+tag_owed" : "") + (t.sent_at ? "+sent" : "");
}

void clear_lease(TaskRecord &t) {
  t.lease_owner.reset();
  t.lease_until.reset();
}

bool alive_active(const FileRecord *r) {
  return r && !r->is_deleted && r->upload_status == FileStatus::active;
}

bool starts_with(const std::string &s, const std::string &start) {
  return s.compare(0, start.size(), start) == 0;
}

// Whether the row's object_options hold every (name, value) of `want` in `kind`
// ("metadata" or "tags"): what the ledger's file_attr records at reserve.
bool has_attrs(const FileRecord &r, const std::vector<std::pair<std::string, std::string>> &want, bool tags) {
  if (want.empty()) return true;
  auto o = store::from_json(r.object_options);
  const auto &m = tags ? o.tags : o.metadata;
  return std::all_of(want.begin(), want.end(), [&](const auto &kv) {
    auto it = m.find(kv.first);
    return it != m.end() && it->second == kv.second;
  });
}

// Every field of q but latest, sort and limit (SqlLedger's WHERE).
bool matches(const FileQuery &q, const FileRecord &r) {
  if (q.owner != "*" && r.owner_id != q.owner) return false;
  if (q.run_prefix && r.run_prefix != *q.run_prefix) return false;
  if (!q.run_prefixes.empty() &&
      std::find(q.run_prefixes.begin(), q.run_prefixes.end(), r.run_prefix) == q.run_prefixes.end())
    return false;
  if (q.prefix_start && !starts_with(r.run_prefix, *q.prefix_start)) return false;
  if (q.path_prefix && !starts_with(r.relative_path, *q.path_prefix)) return false;
  if (q.path && r.relative_path != *q.path) return false;
  if (!q.include_dead && r.is_deleted) return false;
  if ((q.since && r.created_at < *q.since) || (q.until && r.created_at > *q.until)) return false;
  if (q.sha256 && r.sha256 != *q.sha256) return false;
  if ((q.min_size && r.size < *q.min_size) || (q.max_size && r.size > *q.max_size)) return false;
  if (q.expired_by && (r.is_deleted || !r.expires_at || *r.expires_at > *q.expired_by)) return false;
  if (q.unexpired_at && r.expires_at && *r.expires_at <= *q.unexpired_at) return false;
  return has_attrs(r, q.metadata, false) && has_attrs(r, q.tags, true);
}

// q's order: its sort key, then id; reversed whole when descending.
bool ordered_before(const FileQuery &q, const FileRecord &a, const FileRecord &b) {
  auto key = [&](const FileRecord &r) {
    switch (q.sort) {
    case FileSort::time:
      return std::make_tuple(r.created_at, std::string(), std::string(), r.id);
    case FileSort::path:
      return std::make_tuple(int64_t{0}, r.run_prefix, r.relative_path, r.id);
    case FileSort::size:
      return std::make_tuple(r.size, std::string(), std::string(), r.id);
    case FileSort::id:
      break;
    }
    return std::make_tuple(int64_t{0}, std::string(), std::string(), r.id);
  };
  return q.descending ? key(b) < key(a) : key(a) < key(b);
}

// A uuid of its own per row, predictable: 00000000-0000-4000-8000-<id, 12 digits>.
std::string uuid_for(int64_t id) {
  std::string digits = std::to_string(id);
  return "00000000-0000-4000-8000-" + std::string(12 - std::min<size_t>(12, digits.size()), '0') + digits;
}
} // namespace

// The ledger itself, shared by every connection to it.
struct FakeLedger::State {
  std::mutex mutex;
  std::string location;
  std::string uuid = "f4ce0000-0000-4000-8000-000000000001";
  std::map<int64_t, FileRecord> rows;  // by id
  std::map<int64_t, TaskRecord> tasks; // by task id
  int64_t sequence = 0;                // the highest record id issued
  int64_t next_task = 1;
  int64_t block_end = 0, block_intent = 0;
  std::optional<Divergence> diverged;
  std::optional<StoreBinding> binding;
  std::vector<JobRun> runs;
  OutboxSettings outbox;
  std::vector<FakeEvent> events; // by id

  std::vector<Script> scripts;
  std::vector<LedgerTransition> transitions;
  std::vector<std::string> calls;
  std::vector<int64_t> abandoned;
  bool defer = false;
};

FakeLedger::FakeLedger(std::string location) : m_s(std::make_shared<State>()) {
  m_s->location = std::move(location);
}

FakeLedger::FakeLedger(std::shared_ptr<State> state) : m_s(std::move(state)) {}

std::unique_ptr<FakeLedger> FakeLedger::connect() const {
  return std::unique_ptr<FakeLedger>(new FakeLedger(m_s));
}

const std::string &FakeLedger::location() const {
  return m_s->location;
}

const std::string &FakeLedger::uuid() const {
  return m_s->uuid;
}

// --- scripting and records ---

void FakeLedger::fail_next(const std::string &op, Errc code, int times) {
  known_op(op);
  std::lock_guard lock(m_s->mutex);
  m_s->scripts.push_back({op, Script::Kind::fail, code, times, {}});
}

void FakeLedger::lose_answer(const std::string &op, int times) {
  known_op(op);
  std::lock_guard lock(m_s->mutex);
  m_s->scripts.push_back({op, Script::Kind::lose, Errc::ledger_unavailable, times, {}});
}

void FakeLedger::before_next(const std::string &op, std::function<void()> fn) {
  known_op(op);
  std::lock_guard lock(m_s->mutex);
  m_s->scripts.push_back({op, Script::Kind::before, Errc::ledger_unavailable, 1, std::move(fn)});
}

void FakeLedger::defer_confirms(bool on) {
  std::lock_guard lock(m_s->mutex);
  m_s->defer = on;
}

std::vector<LedgerTransition> FakeLedger::transitions() const {
  std::lock_guard lock(m_s->mutex);
  return m_s->transitions;
}

std::vector<std::string> FakeLedger::history(std::optional<int64_t> record_id) const {
  std::vector<std::string> out;
  for (const auto &t : transitions())
    if (!record_id || t.record_id == *record_id) out.push_back(t.text());
  return out;
}

std::vector<std::string> FakeLedger::calls() const {
  std::lock_guard lock(m_s->mutex);
  return m_s->calls;
}

size_t FakeLedger::count(const std::string &op) const {
  auto all = calls();
  return static_cast<size_t>(std::count(all.begin(), all.end(), op));
}

std::vector<int64_t> FakeLedger::abandoned_confirms() const {
  std::lock_guard lock(m_s->mutex);
  return m_s->abandoned;
}

std::vector<JobRun> FakeLedger::job_runs() const {
  std::lock_guard lock(m_s->mutex);
  return m_s->runs;
}

FileRecord FakeLedger::row(int64_t id) const {
  std::lock_guard lock(m_s->mutex);
  auto it = m_s->rows.find(id);
  if (it == m_s->rows.end()) throw std::logic_error("FakeLedger: no row #" + std::to_string(id));
  return it->second;
}

TaskRecord FakeLedger::task_of(int64_t record_id) const {
  std::lock_guard lock(m_s->mutex);
  for (const auto &[id, t] : m_s->tasks)
    if (t.record_id == record_id) return t;
  throw std::logic_error("FakeLedger: no task of row #" + std::to_string(record_id));
}

std::vector<FakeEvent> FakeLedger::events() const {
  std::lock_guard lock(m_s->mutex);
  return m_s->events;
}

void FakeLedger::edit_task(int64_t record_id, const std::function<void(TaskRecord &)> &change) {
  std::lock_guard lock(m_s->mutex);
  auto *t = task_for(record_id);
  if (!t) throw std::logic_error("FakeLedger: no task of row #" + std::to_string(record_id));
  change(*t);
}

bool FakeLedger::take(const std::string &op, Script::Kind kind, Errc *code) {
  for (auto it = m_s->scripts.begin(); it != m_s->scripts.end(); ++it) {
    if (it->op != op || it->kind != kind) continue;
    if (code) *code = it->code;
    if (--it->times <= 0) m_s->scripts.erase(it);
    return true;
  }
  return false;
}

template <class F> auto FakeLedger::call(const char *op, F &&body) -> decltype(body()) {
  std::function<void()> before;
  {
    std::lock_guard lock(m_s->mutex);
    for (auto it = m_s->scripts.begin(); it != m_s->scripts.end(); ++it)
      if (it->op == op && it->kind == Script::Kind::before) {
        before = std::move(it->fn);
        m_s->scripts.erase(it);
        break;
      }
  }
  if (before) before(); // outside the lock: it may call this ledger
  std::lock_guard lock(m_s->mutex);
  m_s->calls.emplace_back(op);
  Errc code = Errc::ledger_unavailable;
  if (take(op, Script::Kind::fail, &code))
    throw LodgeError(code, std::string("ledger fake-ledger: ") + op + " failed (injected)");
  if constexpr (std::is_void_v<decltype(body())>) {
    body();
    if (take(op, Script::Kind::lose))
      throw LodgeError(Errc::ledger_unavailable,
                       std::string("ledger fake-ledger: no answer to ") + op + " (injected; it committed)");
  } else {
    auto out = body();
    if (take(op, Script::Kind::lose))
      throw LodgeError(Errc::ledger_unavailable,
                       std::string("ledger fake-ledger: no answer to ") + op + " (injected; it committed)");
    return out;
  }
}

// --- state, with the lock held ---

FileRecord *FakeLedger::row_at(int64_t id) {
  auto it = m_s->rows.find(id);
  return it == m_s->rows.end() ? nullptr : &it->second;
}

TaskRecord *FakeLedger::task_for(int64_t record_id) {
  for (auto &[id, t] : m_s->tasks)
    if (t.record_id == record_id) return &t;
  return nullptr;
}

TaskRecord *FakeLedger::task_at(int64_t task_id) {
  auto it = m_s->tasks.find(task_id);
  return it == m_s->tasks.end() ? nullptr : &it->second;
}

TaskRecord *FakeLedger::held(const TaskRecord &t) {
  auto *cur = task_at(t.id);
  return cur && cur->status == TaskStatus::processing && cur->lease_version == t.lease_version ? cur
                                                                                               : nullptr;
}

void FakeLedger::set_row(const char *op, FileRecord &r, const std::function<void(FileRecord &)> &change) {
  const FileRecord before = r;
  change(r);
  m_s->transitions.push_back({op, r.id, "row", row_state(before), row_state(r)});
  record_events(&before, r);
}

void FakeLedger::set_task(const char *op, TaskRecord &t, const std::function<void(TaskRecord &)> &change) {
  std::string from = task_state(t);
  const TaskStatus was = t.status;
  change(t);
  // Made PENDING: a new outbox event, never sent (every SQL that sets PENDING clears them).
  if (t.status == TaskStatus::pending && was != TaskStatus::pending) {
    t.sent_at.reset();
    t.message_id.reset();
  }
  m_s->transitions.push_back({op, t.record_id, "task", from, task_state(t)});
}

void FakeLedger::record_events(const FileRecord *before, const FileRecord &after) {
  // The schema's triggers (schema.sql): AFTER INSERT of an ACTIVE row; AFTER UPDATE that
  // makes a row ACTIVE or UPLOAD_FAILED, or deletes an ACTIVE one.
  auto write = [&](EventType type) {
    if (std::find(m_s->outbox.event_types.begin(), m_s->outbox.event_types.end(), type) ==
        m_s->outbox.event_types.end())
      return;
    FakeEvent e;
    e.id = static_cast<int64_t>(m_s->events.size()) + 1;
    e.type = type;
    e.record_id = after.id;
    e.occurred_at = after.updated_at;
    m_s->events.push_back(e);
  };
  const bool was_active = before && before->upload_status == FileStatus::active;
  if (after.upload_status == FileStatus::active && !was_active) write(EventType::file_active);
  if (after.upload_status == FileStatus::upload_failed &&
      (!before || before->upload_status != FileStatus::upload_failed))
    write(EventType::file_failed);
  if (before && was_active && after.upload_status == FileStatus::active && !before->is_deleted &&
      after.is_deleted)
    write(EventType::file_deleted);
}

bool FakeLedger::key_in_use(const std::string &key, int64_t except_id) const {
  // A shared row's object_key is the shared object's (as SqlLedger reads it): one comparison
  // covers the row that wrote the object and every row sharing it.
  return std::any_of(m_s->rows.begin(), m_s->rows.end(), [&](const auto &e) {
    return e.first != except_id && !e.second.is_deleted && e.second.object_key == key;
  });
}

bool FakeLedger::due(const TaskRecord &t, int64_t now) {
  return ((t.status == TaskStatus::pending || t.status == TaskStatus::retry) && t.next_retry_at <= now) ||
         (t.status == TaskStatus::processing && t.lease_until && *t.lease_until < now);
}

QueueOutcome FakeLedger::ensure_pending_task(const char *op, int64_t record_id, const std::string &key,
                                             int64_t due_at, int max_retries, bool verify, int64_t now) {
  const int64_t pass = verify ? k_verify_owed : k_verify_none;
  auto *t = task_for(record_id);
  if (!t) {
    TaskRecord n;
    n.id = m_s->next_task++;
    n.record_id = record_id;
    n.task_type = "DELETE_OBJECT";
    n.object_key = key;
    n.status = TaskStatus::pending;
    n.next_retry_at = due_at;
    n.max_retries = max_retries;
    n.verify_pass = pass;
    n.created_at = n.updated_at = now;
    m_s->transitions.push_back({op, record_id, "task", "", task_state(n)});
    m_s->tasks[n.id] = n;
    return QueueOutcome::queued;
  }
  if (t->status == TaskStatus::processing) return QueueOutcome::held;
  if (t->status == TaskStatus::pending || t->status == TaskStatus::retry) {
    set_task(op, *t, [&](TaskRecord &x) {
      x.next_retry_at = std::max(x.next_retry_at, due_at);
      x.verify_pass = std::max(x.verify_pass, pass);
      x.tag_owed = false;
      x.updated_at = now;
    });
    return QueueOutcome::queued;
  }
  set_task(op, *t, [&](TaskRecord &x) {
    x.status = TaskStatus::pending;
    x.next_retry_at = due_at;
    x.retry_count = 0;
    x.last_error.reset();
    clear_lease(x);
    x.verify_pass = pass;
    x.tag_owed = false;
    x.updated_at = now;
  });
  return QueueOutcome::queued;
}

bool FakeLedger::fail_overdue_row(const char *op, int64_t id, int64_t now, const std::string &by) {
  auto *r = row_at(id);
  if (!r || r->upload_status != FileStatus::uploading || r->is_deleted || r->upload_deadline_at >= now)
    return false;
  set_row(op, *r, [&](FileRecord &x) {
    x.upload_status = FileStatus::upload_failed;
    x.is_deleted = true;
    x.deleted_at = x.updated_at = now;
    x.failure_reason = "DEADLINE_EXCEEDED: not confirmed before its deadline (" + by + ")";
  });
  return true;
}

void FakeLedger::retire_others(const char *op, int64_t id, const Retire &retire, int64_t now) {
  const FileRecord n = *row_at(id);
  for (auto &[old_id, o] : m_s->rows) {
    if (old_id == id || o.owner_id != n.owner_id || o.run_prefix != n.run_prefix ||
        o.relative_path != n.relative_path || !alive_active(&o))
      continue;
    set_row(op, o, [&](FileRecord &x) {
      x.is_deleted = true;
      x.deleted_at = x.updated_at = now;
    });
    (void)ensure_pending_task(op, old_id, o.object_key, now + retire.grace_ms, retire.max_retries, false,
                              now);
  }
}

// --- the ledger's calls ---

int FakeLedger::schema_version() {
  return call("schema_version", [] { return k_schema_version; });
}

StatusReport FakeLedger::status(int64_t /*now*/, int64_t /*failed_since*/) {
  throw std::logic_error("FakeLedger: status not modelled (its figures are the ledger contract's)");
}

void FakeLedger::record_job_run(const JobRun &run) {
  call("record_job_run", [&] { m_s->runs.push_back(run); });
}

std::optional<StoreBinding> FakeLedger::store_binding() {
  return call("store_binding", [&] { return m_s->binding; });
}

BindResult FakeLedger::bind_store(const StoreBinding &b, Rebind rebind) {
  return call("bind_store", [&] {
    BindResult out;
    out.previous = m_s->binding;
    if (!m_s->binding || rebind == Rebind::yes ||
        (m_s->binding->same_store(b) && m_s->binding->tagging.empty() && !b.tagging.empty())) {
      if (!m_s->binding || !(*m_s->binding == b)) {
        m_s->binding = b;
        out.written = true;
      }
    }
    return out;
  });
}

std::optional<ReserveResult> FakeLedger::dedup_answer(const ReserveRequest &req,
                                                      std::optional<FileRecord> &share) {
  if (req.dedup == DedupScope::none) return std::nullopt;
  ReserveResult res;
  const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
  // The path's current row: the newest alive ACTIVE one (activated_at, then id).
  const FileRecord *current = nullptr;
  for (const auto &[id, r] : m_s->rows)
    if (r.owner_id == req.owner_id && r.run_prefix == req.run_prefix && r.relative_path == path &&
        alive_active(&r) &&
        (!current || std::make_pair(r.activated_at.value_or(0), r.id) >
                         std::make_pair(current->activated_at.value_or(0), current->id)))
      current = &r;
  if (current && current->sha256 == req.sha256) {
    res.outcome = ReserveOutcome::duplicate;
    res.record = *current;
    return res;
  }
  if (req.share_with) {
    const auto *s = row_at(*req.share_with);
    if (!alive_active(s) || s->sha256 != req.sha256 || s->owner_id != req.owner_id) {
      res.outcome = ReserveOutcome::share_gone;
      return res;
    }
    share = *s;
    return std::nullopt;
  }
  // Of the alive rows of this content in the scope: this run prefix first, then ACTIVE, then the oldest.
  const FileRecord *alive = nullptr;
  auto rank = [&](const FileRecord &r) {
    return std::make_tuple(r.run_prefix == req.run_prefix ? 0 : 1,
                           r.upload_status == FileStatus::active ? 0 : 1, r.id);
  };
  for (const auto &[id, r] : m_s->rows)
    if (r.owner_id == req.owner_id && r.sha256 == req.sha256 && !r.is_deleted &&
        (req.dedup == DedupScope::owner || r.run_prefix == req.run_prefix) &&
        (!alive || rank(r) < rank(*alive)))
      alive = &r;
  if (!alive) return std::nullopt;
  res.record = *alive;
  res.outcome =
      alive->upload_status == FileStatus::uploading ? ReserveOutcome::in_progress : ReserveOutcome::shareable;
  return res;
}

std::vector<Result<ReserveResult>> FakeLedger::reserve_batch(const std::vector<ReserveRequest> &reqs,
                                                             int64_t now) {
  {
    std::lock_guard lock(m_s->mutex);
    m_s->calls.emplace_back("reserve_batch");
  }
  return UploadLedger::reserve_batch(reqs, now);
}

ReserveResult FakeLedger::reserve(const ReserveRequest &req, int64_t now) {
  return call("reserve", [&] {
    ReserveResult res;
    // The idempotency replay. A key whose earlier attempt is dead is taken over, once the
    // reservation is known to be written (below).
    FileRecord *prior = nullptr;
    if (req.idempotency_key)
      for (auto &[id, r] : m_s->rows)
        if (r.owner_id == req.owner_id && r.idempotency_key == req.idempotency_key) prior = &r;
    if (prior) {
      res.record = *prior;
      if (prior->sha256 != req.sha256) {
        res.outcome = ReserveOutcome::key_reused;
        return res;
      }
      if (alive_active(prior)) {
        res.outcome = ReserveOutcome::replayed;
        return res;
      }
      if (!prior->is_deleted && prior->upload_status == FileStatus::uploading) {
        res.outcome = ReserveOutcome::in_progress;
        return res;
      }
      res.record = {};
    }
    std::optional<FileRecord> share;
    if (auto dedup = dedup_answer(req, share)) return *dedup;
    if (req.max_files) {
      const auto alive = std::count_if(m_s->rows.begin(), m_s->rows.end(), [&](const auto &e) {
        return e.second.owner_id == req.owner_id && !e.second.is_deleted;
      });
      if (alive >= *req.max_files) {
        res.outcome = ReserveOutcome::quota_exceeded;
        return res;
      }
    }
    // Resume replaces only the insert.
    if (req.resume && !share)
      if (auto revived = revive_resumable(req, now, prior)) return *revived;
    const int64_t id = m_s->sequence + 1;
    const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
    const std::string key = object_key_for(req.key_prefix, req.owner_id, req.run_prefix, uuid_for(id), path);
    if (key.size() > k_max_key_bytes)
      throw LodgeError(Errc::bad_name, "the object key for '" + path + "' would be " +
                                           std::to_string(key.size()) + " bytes; the store allows " +
                                           std::to_string(k_max_key_bytes));
    // Past the id block the store's marker covers: rolled back, nothing written.
    if (req.id_limit && id > *req.id_limit) {
      res.outcome = ReserveOutcome::id_limit_reached;
      return res;
    }
    FileRecord r;
    r.id = id;
    r.owner_id = req.owner_id;
    r.original_name = req.original_name;
    r.relative_path = path;
    r.run_prefix = req.run_prefix;
    r.dedup_scope = req.dedup;
    r.object_key = share ? share->object_key : key;
    r.content_of = share ? std::optional(share->stamp_id()) : std::nullopt;
    r.media_type = req.media_type;
    r.sha256 = req.sha256;
    r.size = req.size;
    r.policy = req.policy;
    r.upload_status = share ? FileStatus::active : FileStatus::uploading;
    r.idempotency_key = req.idempotency_key;
    r.etag = share ? share->etag : std::nullopt;
    r.version_id = share ? share->version_id : std::nullopt;
    r.created_at = r.updated_at = now;
    r.activated_at = share ? std::optional(now) : std::nullopt;
    r.upload_deadline_at = now + req.deadline_ms;
    r.holder = share ? std::nullopt : req.holder;
    if (!req.content_type.empty()) r.content_type = req.content_type;
    r.object_options = req.object_options;
    r.stat = req.stat;
    r.expires_at = req.expires_at;
    res.outcome = share ? ReserveOutcome::shared : ReserveOutcome::reserved;
    res.record = r;
    if (req.dry_run) { // rolled back: the id is no one's
      res.record.id = 0;
      return res;
    }
    if (prior) {
      prior->idempotency_key.reset();
      prior->updated_at = now;
    }
    m_s->sequence = id;
    m_s->rows[id] = r;
    m_s->transitions.push_back({"reserve", id, "row", "", row_state(r)});
    record_events(nullptr, r);
    // Every row has its task; a shared row's has nothing to do while the row is alive.
    TaskRecord t;
    t.id = m_s->next_task++;
    t.record_id = id;
    t.task_type = "DELETE_OBJECT";
    t.object_key = r.object_key;
    t.status = share ? TaskStatus::ignored : TaskStatus::pending;
    t.next_retry_at = share ? now : r.upload_deadline_at + req.grace_ms;
    t.max_retries = req.max_retries;
    t.created_at = t.updated_at = now;
    m_s->tasks[t.id] = t;
    m_s->transitions.push_back({"reserve", id, "task", "", task_state(t)});
    if (share && req.retire) retire_others("reserve", id, *req.retire, now);
    return res;
  });
}

std::optional<ReserveResult> FakeLedger::revive_resumable(const ReserveRequest &req, int64_t now,
                                                          FileRecord *prior) {
  const std::string &path = req.relative_path.empty() ? req.original_name : req.relative_path;
  const std::string &content_type = req.content_type.empty() ? req.media_type : req.content_type;
  FileRecord *found = nullptr; // the newest (highest id) resumable row
  TaskRecord *task = nullptr;
  for (auto &[id, r] : m_s->rows) {
    auto *t = task_for(id);
    if (r.owner_id == req.owner_id && r.run_prefix == req.run_prefix && r.relative_path == path &&
        r.sha256 == req.sha256 && r.size == req.size && r.upload_status == FileStatus::upload_failed &&
        !r.content_of && r.multipart_upload_id && r.object_key.starts_with(req.key_prefix) &&
        r.object_content_type() == content_type && r.object_options == req.object_options &&
        !(r.holder && r.holder->starts_with("direct ")) && t && t->status == TaskStatus::pending &&
        t->lease_version == 0) {
      found = &r;
      task = t;
    }
  }
  if (!found) return std::nullopt;
  const int64_t deadline = now + req.deadline_ms;
  auto revive = [&](FileRecord &x) {
    x.upload_status = FileStatus::uploading;
    x.is_deleted = false;
    x.deleted_at.reset();
    x.failure_reason.reset();
    x.holder = req.holder;
    x.upload_deadline_at = deadline;
    x.updated_at = now;
    x.stat = req.stat;
    x.original_name = req.original_name;
    x.policy = req.policy;
    x.dedup_scope = req.dedup;
    x.idempotency_key = req.idempotency_key;
    x.expires_at = req.expires_at;
  };
  ReserveResult res;
  res.outcome = ReserveOutcome::resumed;
  res.cleanup_due_before = task->next_retry_at;
  if (req.dry_run) { // rolled back: nothing written
    res.record = *found;
    revive(res.record);
    return res;
  }
  if (prior) {
    prior->idempotency_key.reset();
    prior->updated_at = now;
  }
  set_row("reserve", *found, revive);
  set_task("reserve", *task, [&](TaskRecord &x) {
    x.next_retry_at = deadline + req.grace_ms; // never claimed: no lease, no retries to clear
    x.max_retries = req.max_retries;           // an owed verify pass stays owed
    x.tag_owed = false;
    x.last_error.reset();
    x.updated_at = now;
  });
  res.record = *found;
  return res;
}

SetUploadIdOutcome FakeLedger::set_multipart_upload_id(int64_t id, const std::string &upload_id,
                                                       int64_t now) {
  return call("set_multipart_upload_id", [&] {
    auto *r = row_at(id);
    if (!r || r->upload_status != FileStatus::uploading || r->is_deleted)
      return SetUploadIdOutcome::not_uploading;
    r->multipart_upload_id = upload_id;
    r->updated_at = now;
    return SetUploadIdOutcome::recorded;
  });
}

RenewOutcome FakeLedger::renew(int64_t id, const std::string &holder, int64_t new_deadline,
                               int64_t new_not_before, int64_t now) {
  return call("renew", [&] {
    auto *r = row_at(id);
    if (!r || r->upload_status != FileStatus::uploading || r->is_deleted) return RenewOutcome::not_uploading;
    if (r->holder != holder) return RenewOutcome::not_holder;
    if (r->upload_deadline_at <= now) return RenewOutcome::past_deadline;
    set_row("renew", *r, [&](FileRecord &x) {
      x.upload_deadline_at = new_deadline;
      x.updated_at = now;
    });
    auto *t = task_for(id);
    if (t && (t->status == TaskStatus::pending || t->status == TaskStatus::retry))
      set_task("renew", *t, [&](TaskRecord &x) {
        x.next_retry_at = new_not_before;
        x.updated_at = now;
      });
    return RenewOutcome::renewed;
  });
}

ConfirmOutcome FakeLedger::confirm_locked(int64_t id, const std::string &etag, const std::string &version_id,
                                          int64_t now, CommitTag tag, std::optional<Retire> retire) {
  auto *r = row_at(id);
  if (!r || r->upload_status != FileStatus::uploading || r->is_deleted)
    return ConfirmOutcome::row_not_uploading;
  auto *t = task_for(id);
  // A task a sweep holds: its cleanup may be under way; the row stays UPLOADING.
  if (!t || (t->status != TaskStatus::pending && t->status != TaskStatus::retry))
    return ConfirmOutcome::task_held;
  set_row("confirm", *r, [&](FileRecord &x) {
    x.upload_status = FileStatus::active;
    x.activated_at = x.updated_at = now;
    x.etag = etag;
    x.version_id = version_id.empty() ? std::nullopt : std::optional(version_id);
  });
  set_task("confirm", *t, [&](TaskRecord &x) {
    x.updated_at = now;
    if (tag == CommitTag::owed) {
      x.tag_owed = true; // stays PENDING, due as it was
      return;
    }
    x.status = TaskStatus::ignored;
    x.tag_owed = false;
    clear_lease(x);
  });
  if (retire) retire_others("confirm", id, *retire, now);
  return ConfirmOutcome::confirmed;
}

ConfirmOutcome FakeLedger::confirm(int64_t id, const std::string &etag, const std::string &version_id,
                                   int64_t now, CommitTag tag, std::optional<Retire> retire) {
  return call("confirm", [&] { return confirm_locked(id, etag, version_id, now, tag, retire); });
}

// A deferred confirm: it runs (its Durable first, then confirm()) when waited for.
class FakeLedger::Deferred final : public Ledger::PendingConfirm {
public:
  Deferred(FakeLedger &l, std::function<ConfirmOutcome()> run, int64_t id)
      : m_l(&l), m_run(std::move(run)), m_id(id) {}
  Deferred(const Deferred &) = delete;
  Deferred &operator=(const Deferred &) = delete;
  ~Deferred() override {
    if (m_run) {
      std::lock_guard lock(m_l->m_s->mutex);
      m_l->m_s->abandoned.push_back(m_id);
    }
  }
  [[nodiscard]] ConfirmOutcome wait() override {
    auto run = std::move(m_run);
    m_run = nullptr;
    return run();
  }

private:
  FakeLedger *m_l;
  std::function<ConfirmOutcome()> m_run;
  int64_t m_id;
};

std::unique_ptr<Ledger::PendingConfirm> FakeLedger::confirm_later(int64_t id, const std::string &etag,
                                                                  const std::string &version_id, int64_t now,
                                                                  CommitTag tag, std::optional<Retire> retire,
                                                                  Durable durable) {
  bool defer = false;
  {
    std::lock_guard lock(m_s->mutex);
    defer = m_s->defer;
  }
  if (!defer) return Ledger::confirm_later(id, etag, version_id, now, tag, retire, std::move(durable));
  auto run = [this, id, etag, version_id, now, tag, retire, make = std::move(durable.make)] {
    if (make)
      if (auto s = make(); !s) throw NotDurable(s.error());
    return confirm(id, etag, version_id, now, tag, retire);
  };
  return std::make_unique<Deferred>(*this, run, id);
}

std::optional<FileRecord> FakeLedger::find_unchanged(const std::string &owner, const std::string &run_prefix,
                                                     const std::string &relative_path, const FileStat &stat,
                                                     int64_t size) {
  return call("find_unchanged", [&] {
    std::optional<FileRecord> newest; // by id
    for (const auto &[id, r] : m_s->rows)
      if (r.owner_id == owner && r.run_prefix == run_prefix && r.relative_path == relative_path &&
          alive_active(&r) && r.size == size && r.stat == stat)
        newest = r;
    return newest;
  });
}

bool FakeLedger::record_stat(int64_t id, const FileStat &stat, int64_t now) {
  return call("record_stat", [&] {
    auto *r = row_at(id);
    if (!alive_active(r)) return false;
    r->stat = stat;
    r->updated_at = now;
    return true;
  });
}

SettleOutcome FakeLedger::settle(int64_t record_id, int64_t now) {
  return call("settle", [&] {
    auto *t = task_for(record_id);
    if (!alive_active(row_at(record_id)) || !t ||
        (t->status != TaskStatus::pending && t->status != TaskStatus::retry))
      return SettleOutcome::not_pending;
    set_task("settle", *t, [&](TaskRecord &x) {
      x.status = TaskStatus::ignored;
      x.tag_owed = false;
      x.updated_at = now;
      clear_lease(x);
    });
    return SettleOutcome::settled;
  });
}

MarkFailedOutcome FakeLedger::mark_failed(int64_t id, const std::string &reason, bool run_now, int64_t now) {
  return call("mark_failed", [&] {
    auto *r = row_at(id);
    if (!r || r->upload_status != FileStatus::uploading) return MarkFailedOutcome::not_uploading;
    set_row("mark_failed", *r, [&](FileRecord &x) {
      x.upload_status = FileStatus::upload_failed;
      x.is_deleted = true;
      x.failure_reason = reason;
      x.deleted_at = x.updated_at = now;
    });
    auto *t = task_for(id);
    if (!t) return MarkFailedOutcome::failed;
    const bool waiting = t->status == TaskStatus::pending || t->status == TaskStatus::retry;
    if (run_now && waiting) {
      t->next_retry_at = now;
      t->updated_at = now;
    } else if (!run_now && (waiting || t->status == TaskStatus::processing) &&
               t->verify_pass == k_verify_none) {
      // Not definite: the object may still land after the delete; a second pass is owed.
      t->verify_pass = k_verify_owed;
      t->updated_at = now;
    }
    return MarkFailedOutcome::failed;
  });
}

MarkFailedOutcome FakeLedger::fail_resumable(int64_t id, const std::string &reason, int64_t due_at,
                                             int64_t now) {
  return call("fail_resumable", [&] {
    auto *r = row_at(id);
    if (!r || r->upload_status != FileStatus::uploading || r->is_deleted)
      return MarkFailedOutcome::not_uploading;
    set_row("fail_resumable", *r, [&](FileRecord &x) {
      x.upload_status = FileStatus::upload_failed;
      x.is_deleted = true;
      x.failure_reason = reason;
      x.deleted_at = x.updated_at = now;
    });
    // Definite: no verify pass. A task a sweep holds is left to its decide.
    auto *t = task_for(id);
    if (t && (t->status == TaskStatus::pending || t->status == TaskStatus::retry))
      set_task("fail_resumable", *t, [&](TaskRecord &x) {
        x.next_retry_at = due_at;
        x.updated_at = now;
      });
    return MarkFailedOutcome::failed;
  });
}

std::optional<FileRecord> FakeLedger::find_file(int64_t id) {
  return call("find_file", [&]() -> std::optional<FileRecord> {
    auto *r = row_at(id);
    return r ? std::optional(*r) : std::nullopt;
  });
}

void FakeLedger::scan_files(const FileQuery &q, const std::function<bool(const FileRecord &)> &visit) {
  // Read under the lock, visited outside it (the visitor may call the ledger).
  auto rows = call("scan_files", [&] {
    std::vector<FileRecord> out;
    for (const auto &[id, r] : m_s->rows)
      if (matches(q, r) && (!q.latest || alive_active(&r))) out.push_back(r);
    if (q.latest) { // the newest by (activated_at, id) per (owner, relative_path)
      std::map<std::pair<std::string, std::string>, FileRecord> newest;
      for (auto &r : out) {
        auto [it, fresh] = newest.try_emplace({r.owner_id, r.relative_path}, r);
        if (!fresh && std::make_pair(r.activated_at.value_or(0), r.id) >
                          std::make_pair(it->second.activated_at.value_or(0), it->second.id))
          it->second = r;
      }
      out.clear();
      for (auto &[k, r] : newest)
        out.push_back(std::move(r));
    }
    if (q.after) // after latest's choice, as the ledger's outer query applies it
      std::erase_if(out, [&](const FileRecord &r) { return !ordered_before(q, *q.after, r); });
    std::sort(out.begin(), out.end(),
              [&](const FileRecord &a, const FileRecord &b) { return ordered_before(q, a, b); });
    if (q.limit && static_cast<int64_t>(out.size()) > *q.limit)
      out.resize(static_cast<size_t>(std::max<int64_t>(0, *q.limit)));
    return out;
  });
  for (const auto &r : rows)
    if (!visit(r)) return;
}

void FakeLedger::prefix_summaries(const FileQuery &q,
                                  const std::function<bool(const PrefixSummary &)> &visit) {
  auto sums = call("prefix_summaries", [&] {
    FileQuery alive = q;
    alive.include_dead = false;
    std::map<std::pair<std::string, std::string>, PrefixSummary> by;
    for (const auto &[id, r] : m_s->rows) {
      if (!matches(alive, r) || r.upload_status == FileStatus::upload_failed) continue;
      auto &s = by[{r.owner_id, r.run_prefix}];
      s.owner_id = r.owner_id;
      s.run_prefix = r.run_prefix;
      if (r.upload_status == FileStatus::uploading) {
        ++s.uploading;
        continue;
      }
      ++s.files;
      s.bytes += r.size;
      s.newest_at = std::max(s.newest_at, r.created_at);
    }
    std::vector<PrefixSummary> out;
    out.reserve(by.size());
    for (auto &[k, s] : by)
      out.push_back(std::move(s));
    return out;
  });
  for (const auto &s : sums)
    if (!visit(s)) return;
}

std::vector<std::string> FakeLedger::metadata_values(const std::string &owner, const std::string &name,
                                                     const std::string &start, int limit) {
  return call("metadata_values", [&] {
    std::set<std::string> values;
    for (const auto &[id, r] : m_s->rows) {
      if ((owner != "*" && r.owner_id != owner) || r.object_options.empty()) continue;
      auto o = store::from_json(r.object_options);
      if (auto it = o.metadata.find(name); it != o.metadata.end() && starts_with(it->second, start))
        values.insert(it->second);
    }
    std::vector<std::string> out(values.begin(), values.end());
    if (out.size() > static_cast<size_t>(std::max(0, limit)))
      out.resize(static_cast<size_t>(std::max(0, limit)));
    return out;
  });
}

std::vector<SharedRow> FakeLedger::shared_outside(const std::string &owner, const std::string &run_prefix,
                                                  std::optional<int64_t> unexpired_at) {
  return call("shared_outside", [&] {
    auto gone = [&](const FileRecord &x) {
      return x.is_deleted || (unexpired_at && x.expires_at && *x.expires_at <= *unexpired_at);
    };
    std::vector<SharedRow> out;
    for (const auto &[id, r] : m_s->rows) {
      if (gone(r) || r.owner_id != owner || r.run_prefix != run_prefix) continue;
      std::set<std::pair<std::string, std::string>> sharers;
      for (const auto &[oid, o] : m_s->rows)
        if (oid != id && !gone(o) && o.object_key == r.object_key &&
            (o.owner_id != owner || o.run_prefix != run_prefix))
          sharers.emplace(o.owner_id, o.run_prefix);
      for (const auto &[so, sp] : sharers)
        out.push_back({id, so, sp});
    }
    return out;
  });
}

std::vector<FileRecord> FakeLedger::find_by_path(const std::string &owner, const std::string &run_prefix,
                                                 const std::string &relative_path) {
  return call("find_by_path", [&] {
    std::vector<FileRecord> out;
    for (const auto &[id, r] : m_s->rows)
      if (r.owner_id == owner && r.run_prefix == run_prefix && r.relative_path == relative_path &&
          alive_active(&r))
        out.push_back(r);
    std::sort(out.begin(), out.end(), [](const FileRecord &a, const FileRecord &b) {
      return std::make_pair(a.activated_at.value_or(0), a.id) >
             std::make_pair(b.activated_at.value_or(0), b.id);
    });
    return out;
  });
}

std::optional<TaskRecord> FakeLedger::find_task_for(int64_t record_id) {
  return call("find_task_for", [&]() -> std::optional<TaskRecord> {
    auto *t = task_for(record_id);
    return t ? std::optional(*t) : std::nullopt;
  });
}

// --- cleanup tasks ---

std::optional<TaskRecord> FakeLedger::claim_locked(TaskRecord &t, int64_t now, const std::string &worker,
                                                   int64_t lease_ms) {
  if (!due(t, now)) return std::nullopt;
  set_task("claim", t, [&](TaskRecord &x) {
    x.status = TaskStatus::processing;
    x.lease_owner = worker;
    x.lease_until = now + lease_ms;
    ++x.lease_version;
    x.updated_at = now;
  });
  return t;
}

std::vector<TaskRecord> FakeLedger::claim_due_locked(int64_t now, int limit, const std::string &worker,
                                                     int64_t lease_ms,
                                                     const std::function<bool(const TaskRecord &)> &which) {
  std::vector<TaskRecord *> ready;
  for (auto &[id, t] : m_s->tasks)
    if (due(t, now) && which(t)) ready.push_back(&t);
  std::stable_sort(ready.begin(), ready.end(), [](const TaskRecord *a, const TaskRecord *b) {
    return a->next_retry_at < b->next_retry_at;
  });
  std::vector<TaskRecord> out;
  for (auto *t : ready) {
    if (static_cast<int>(out.size()) >= limit) break;
    out.push_back(*claim_locked(*t, now, worker, lease_ms));
  }
  return out;
}

std::vector<TaskRecord> FakeLedger::claim_due(int64_t now, int limit, const std::string &worker,
                                              int64_t lease_ms) {
  return call("claim_due", [&] {
    return claim_due_locked(now, limit, worker, lease_ms, [](const TaskRecord &) { return true; });
  });
}

std::optional<TaskRecord> FakeLedger::claim_task(int64_t task_id, int64_t now, const std::string &worker,
                                                 int64_t lease_ms) {
  return call("claim_task", [&]() -> std::optional<TaskRecord> {
    auto *t = task_at(task_id);
    return t ? claim_locked(*t, now, worker, lease_ms) : std::nullopt;
  });
}

TaskDecision FakeLedger::decide_locked(const TaskRecord &t, int64_t now, int64_t grace_ms) {
  std::optional<FileRecord> row;
  if (auto *r = row_at(t.record_id)) row = *r;
  std::optional<TaskRecord> cur;
  if (auto *c = task_at(t.id)) cur = *c;
  // A dead row's object stays while another alive row uses its key (decide_task's rule).
  const bool in_use = row && row->is_deleted && key_in_use(t.object_key, row->id);
  const Decision d = decide_task(t, cur, row, in_use, now, grace_ms);
  auto postpone = [&] {
    set_task("decide", *task_at(t.id), [&](TaskRecord &x) {
      x.status = TaskStatus::pending;
      x.next_retry_at = d.due;
      clear_lease(x);
      x.verify_pass = d.verify_pass;
      x.updated_at = now;
    });
  };
  switch (d.kind) {
  case DecisionKind::lease_lost:
    return TaskDecision::lease_lost;
  case DecisionKind::postpone:
    postpone();
    return TaskDecision::postponed;
  case DecisionKind::fail_overdue_then_postpone:
    (void)fail_overdue_row("decide", t.record_id, now, "sweep");
    postpone();
    return TaskDecision::postponed;
  case DecisionKind::fail_overdue_then_allow: {
    (void)fail_overdue_row("decide", t.record_id, now, "sweep");
    auto *x = task_at(t.id);
    x->verify_pass = d.verify_pass;
    x->updated_at = now;
    return TaskDecision::allowed;
  }
  case DecisionKind::ignore:
    set_task("decide", *task_at(t.id), [&](TaskRecord &x) {
      x.status = TaskStatus::ignored;
      x.tag_owed = false;
      clear_lease(x);
      x.updated_at = now;
    });
    return TaskDecision::ignored;
  case DecisionKind::tag:
    return TaskDecision::tag; // nothing written: the lease holds the task meanwhile
  case DecisionKind::allow:
    break;
  }
  return TaskDecision::allowed;
}

TaskDecision FakeLedger::decide(const TaskRecord &t, int64_t now, int64_t grace_ms) {
  return call("decide", [&] { return decide_locked(t, now, grace_ms); });
}

TaskFinish FakeLedger::ignore_locked(const TaskRecord &t, int64_t now, const std::string &reason) {
  auto *cur = held(t);
  if (!cur) return TaskFinish::lease_lost;
  set_task("ignore_task", *cur, [&](TaskRecord &x) {
    x.status = TaskStatus::ignored;
    x.tag_owed = false;
    clear_lease(x);
    if (!reason.empty()) x.last_error = reason;
    x.updated_at = now;
  });
  return TaskFinish::success;
}

TaskFinish FakeLedger::ignore_task(const TaskRecord &t, int64_t now, const std::string &reason) {
  return call("ignore_task", [&] { return ignore_locked(t, now, reason); });
}

TaskFinish FakeLedger::end_tag_locked(const TaskRecord &t, int64_t due_at, int64_t now) {
  auto *cur = held(t);
  if (!cur) return TaskFinish::lease_lost;
  // A row deleted while the tag was set: the task is the delete's again.
  const bool alive = alive_active(row_at(t.record_id));
  set_task("end_tag", *cur, [&](TaskRecord &x) {
    x.status = alive ? TaskStatus::ignored : TaskStatus::pending;
    if (!alive) x.next_retry_at = due_at;
    x.tag_owed = false;
    clear_lease(x);
    x.updated_at = now;
  });
  return TaskFinish::success;
}

TaskFinish FakeLedger::end_tag(const TaskRecord &t, int64_t due_at, int64_t now) {
  return call("end_tag", [&] { return end_tag_locked(t, due_at, now); });
}

TaskFinish FakeLedger::finish_locked(const TaskRecord &t, bool succeeded, const std::string &error,
                                     int64_t next_retry_at, int64_t now) {
  auto *cur = held(t);
  if (!cur) return TaskFinish::lease_lost;
  TaskFinish result = TaskFinish::success;
  set_task("finish", *cur, [&](TaskRecord &x) {
    clear_lease(x);
    x.updated_at = now;
    if (succeeded && x.verify_pass == k_verify_owed) {
      result = TaskFinish::verify_scheduled; // the delete of an upload that may still land: once more, later
      x.status = TaskStatus::pending;
      x.verify_pass = k_verify_due;
      x.next_retry_at = next_retry_at;
      x.last_error.reset();
    } else if (succeeded) {
      x.status = TaskStatus::success;
      x.last_error.reset();
    } else {
      const bool dead = dead_letters(x.retry_count, x.max_retries);
      result = dead ? TaskFinish::dead_letter : TaskFinish::retry;
      x.status = dead ? TaskStatus::failed : TaskStatus::retry;
      ++x.retry_count;
      x.next_retry_at = next_retry_at;
      x.last_error = error;
    }
  });
  return result;
}

TaskFinish FakeLedger::finish(const TaskRecord &t, bool succeeded, const std::string &error,
                              int64_t next_retry_at, int64_t now) {
  return call("finish", [&] { return finish_locked(t, succeeded, error, next_retry_at, now); });
}

std::vector<TaskDecision> FakeLedger::decide_many(const std::vector<TaskRecord> &tasks, int64_t now,
                                                  int64_t grace_ms) {
  return call("decide_many", [&] {
    std::vector<TaskDecision> out;
    out.reserve(tasks.size());
    for (const auto &t : tasks)
      out.push_back(decide_locked(t, now, grace_ms));
    return out;
  });
}

std::vector<TaskFinish> FakeLedger::finish_many(const std::vector<TaskEnd> &ends, int64_t now) {
  return call("finish_many", [&] {
    std::vector<TaskFinish> out;
    out.reserve(ends.size());
    for (const auto &e : ends) {
      switch (e.kind) {
      case TaskEnd::Kind::finish:
        out.push_back(finish_locked(e.task, e.succeeded, e.error, e.next_retry_at, now));
        break;
      case TaskEnd::Kind::ignore:
        out.push_back(ignore_locked(e.task, now, e.error));
        break;
      case TaskEnd::Kind::tagged:
        out.push_back(end_tag_locked(e.task, e.next_retry_at, now));
        break;
      case TaskEnd::Kind::dead_letter:
        out.push_back(dead_letter_locked(e.task, e.error, now) == DeadLetterOutcome::dead_lettered
                          ? TaskFinish::dead_letter
                          : TaskFinish::lease_lost);
        break;
      }
    }
    return out;
  });
}

std::vector<TaskRecord> FakeLedger::due_tasks(int64_t now, int limit) {
  return call("due_tasks", [&] {
    std::vector<TaskRecord> out;
    for (const auto &[id, t] : m_s->tasks)
      if (due(t, now)) out.push_back(t);
    std::stable_sort(out.begin(), out.end(), [](const TaskRecord &a, const TaskRecord &b) {
      return a.next_retry_at < b.next_retry_at;
    });
    if (out.size() > static_cast<size_t>(std::max(limit, 0)))
      out.resize(static_cast<size_t>(std::max(limit, 0)));
    return out;
  });
}

void FakeLedger::scan_tasks(std::optional<TaskStatus> status,
                            const std::function<bool(const TaskRecord &)> &visit) {
  // Read under the lock, visited outside it (the visitor may call the ledger).
  auto tasks = call("scan_tasks", [&] {
    std::vector<TaskRecord> out;
    for (const auto &[id, t] : m_s->tasks)
      if (!status || t.status == *status) out.push_back(t);
    return out;
  });
  for (const auto &t : tasks)
    if (!visit(t)) return;
}

RetryOutcome FakeLedger::retry_task(int64_t task_id, int64_t now) {
  return call("retry_task", [&] {
    auto *t = task_at(task_id);
    if (!t || t->status != TaskStatus::failed) return RetryOutcome::not_failed;
    set_task("retry_task", *t, [&](TaskRecord &x) {
      x.status = TaskStatus::pending;
      x.retry_count = 0;
      x.next_retry_at = x.updated_at = now;
      clear_lease(x);
    });
    return RetryOutcome::requeued;
  });
}

// --- repair ---

std::vector<FileRecord> FakeLedger::overdue_uploads(int64_t now, int limit) {
  return call("overdue_uploads", [&] {
    std::vector<FileRecord> out;
    for (const auto &[id, r] : m_s->rows)
      if (r.upload_status == FileStatus::uploading && !r.is_deleted && r.upload_deadline_at < now)
        out.push_back(r);
    std::stable_sort(out.begin(), out.end(), [](const FileRecord &a, const FileRecord &b) {
      return a.upload_deadline_at < b.upload_deadline_at;
    });
    if (out.size() > static_cast<size_t>(std::max(limit, 0)))
      out.resize(static_cast<size_t>(std::max(limit, 0)));
    return out;
  });
}

RepairOutcome FakeLedger::repair_row(int64_t id, int64_t now, int64_t grace_ms, int max_retries) {
  return call("repair_row", [&] {
    auto *r = row_at(id);
    if (!r || !fail_overdue_row("repair_row", id, now, "repair")) return RepairOutcome::not_overdue;
    // Failed by deadline, not definitely: the delete owes a verify pass.
    (void)ensure_pending_task("repair_row", id, r->object_key,
                              std::max(now, r->upload_deadline_at + grace_ms), max_retries, true, now);
    return RepairOutcome::repaired;
  });
}

std::vector<FileRecord> FakeLedger::held_uploads(const std::string &holder_prefix, int limit) {
  return call("held_uploads", [&] {
    std::vector<FileRecord> out;
    for (const auto &[id, r] : m_s->rows)
      if (r.upload_status == FileStatus::uploading && !r.is_deleted && r.holder &&
          r.holder->compare(0, holder_prefix.size(), holder_prefix) == 0 &&
          out.size() < static_cast<size_t>(std::max(limit, 0)))
        out.push_back(r);
    return out;
  });
}

RepairOutcome FakeLedger::fail_abandoned(int64_t id, const std::string &holder, const std::string &reason,
                                         int64_t now, int64_t grace_ms, int max_retries) {
  return call("fail_abandoned", [&] {
    auto *r = row_at(id);
    if (!r || r->is_deleted || r->upload_status != FileStatus::uploading || r->holder != holder)
      return RepairOutcome::not_overdue;
    set_row("fail_abandoned", *r, [&](FileRecord &x) {
      x.upload_status = FileStatus::upload_failed;
      x.is_deleted = true;
      x.deleted_at = x.updated_at = now;
      x.failure_reason = reason;
    });
    // Due at the earlier of the grace after the sender's end and the grace after the deadline.
    const int64_t due_at = std::min(now + grace_ms, std::max(now, r->upload_deadline_at + grace_ms));
    (void)ensure_pending_task("fail_abandoned", id, r->object_key, due_at, max_retries, true, now);
    auto *t = task_for(id);
    if ((t->status == TaskStatus::pending || t->status == TaskStatus::retry) && t->next_retry_at > due_at) {
      t->next_retry_at = due_at;
      t->updated_at = now;
    }
    return RepairOutcome::repaired;
  });
}

DeleteOutcome FakeLedger::soft_delete(int64_t id, const std::string &owner, int64_t now, int64_t grace_ms,
                                      int max_retries) {
  return call("soft_delete", [&] {
    auto *r = row_at(id);
    if (!r || r->owner_id != owner) return DeleteOutcome::not_found;
    if (!alive_active(r)) return DeleteOutcome::not_active;
    set_row("soft_delete", *r, [&](FileRecord &x) {
      x.is_deleted = true;
      x.deleted_at = x.updated_at = now;
    });
    (void)ensure_pending_task("soft_delete", id, r->object_key, now + grace_ms, max_retries, false, now);
    return DeleteOutcome::deleted;
  });
}

MissingOutcome FakeLedger::mark_missing(int64_t id, const std::string &reason, int64_t now, int64_t grace_ms,
                                        int max_retries) {
  return call("mark_missing", [&] {
    auto *r = row_at(id);
    if (!alive_active(r)) return MissingOutcome::not_active;
    set_row("mark_missing", *r, [&](FileRecord &x) {
      x.is_deleted = true;
      x.deleted_at = x.updated_at = now;
      x.failure_reason = reason;
    });
    (void)ensure_pending_task("mark_missing", id, r->object_key, now + grace_ms, max_retries, false, now);
    return MissingOutcome::marked_missing;
  });
}

void FakeLedger::soft_delete_locked(const char *op, FileRecord &r, int64_t now, int64_t grace_ms,
                                    int max_retries) {
  set_row(op, r, [&](FileRecord &x) {
    x.is_deleted = true;
    x.deleted_at = x.updated_at = now;
  });
  (void)ensure_pending_task(op, r.id, r.object_key, now + grace_ms, max_retries, false, now);
}

PruneOutcome FakeLedger::prune_snapshot(const std::string &owner, const std::string &run_prefix,
                                        int64_t created_until, const std::vector<int64_t> &keep_ids,
                                        int64_t now, int64_t grace_ms, int max_retries) {
  return call("prune_snapshot", [&] {
    PruneOutcome out;
    for (auto &[id, r] : m_s->rows) {
      if (!alive_active(&r) || r.owner_id != owner || r.run_prefix != run_prefix ||
          r.created_at > created_until || std::find(keep_ids.begin(), keep_ids.end(), id) != keep_ids.end())
        continue;
      soft_delete_locked("prune_snapshot", r, now, grace_ms, max_retries);
      ++out.deleted;
      out.bytes += r.size;
    }
    return out;
  });
}

PruneOutcome FakeLedger::soft_delete_expired(int64_t now, int64_t grace_ms, int max_retries, int limit) {
  return call("soft_delete_expired", [&] {
    PruneOutcome out;
    for (auto &[id, r] : m_s->rows) {
      if (out.deleted >= limit) break;
      if (!alive_active(&r) || !r.expires_at || *r.expires_at > now) continue;
      soft_delete_locked("soft_delete_expired", r, now, grace_ms, max_retries);
      ++out.deleted;
      out.bytes += r.size;
    }
    return out;
  });
}

// --- reconcile ---

void FakeLedger::rows_by_key(const std::string &prefix, const std::string &after,
                             const std::function<bool(const FileRecord &)> &visit) {
  // Read under the lock, visited outside it (the visitor may call the ledger).
  auto rows = call("rows_by_key", [&] {
    std::vector<FileRecord> out;
    for (const auto &entry : m_s->rows) {
      const FileRecord &r = entry.second;
      if (r.content_of || r.object_key.compare(0, prefix.size(), prefix) != 0) continue;
      if (!after.empty() && after >= prefix && r.object_key <= after) continue;
      FileRecord c = r;
      c.alive_sharers = std::count_if(m_s->rows.begin(), m_s->rows.end(), [&](const auto &e) {
        return e.second.content_of && e.second.object_key == r.object_key && !e.second.is_deleted;
      });
      c.live_sharer_tasks = std::count_if(m_s->tasks.begin(), m_s->tasks.end(), [&](const auto &e) {
        const auto &t = e.second;
        const FileRecord *s = row_at(t.record_id);
        return s && s->content_of && s->object_key == r.object_key &&
               (t.status == TaskStatus::pending || t.status == TaskStatus::retry ||
                t.status == TaskStatus::processing);
      });
      out.push_back(std::move(c));
    }
    std::sort(out.begin(), out.end(),
              [](const FileRecord &a, const FileRecord &b) { return a.object_key < b.object_key; });
    return out;
  });
  for (const auto &r : rows)
    if (!visit(r)) return;
}

int64_t FakeLedger::max_record_id() {
  return call("max_record_id", [&] { return m_s->sequence; });
}

QueueOutcome FakeLedger::requeue_task_for(int64_t record_id, int64_t now, int max_retries) {
  return call("requeue_task_for", [&] {
    auto *r = row_at(record_id);
    if (!r || !r->is_deleted) return QueueOutcome::not_dead;
    return ensure_pending_task("requeue_task_for", record_id, r->object_key, now, max_retries, false, now);
  });
}

DeadLetterOutcome FakeLedger::dead_letter_locked(const TaskRecord &t, const std::string &error, int64_t now) {
  auto *cur = held(t);
  if (!cur) return DeadLetterOutcome::lease_lost;
  set_task("dead_letter", *cur, [&](TaskRecord &x) {
    x.status = TaskStatus::failed;
    x.last_error = error;
    clear_lease(x);
    x.updated_at = now;
  });
  return DeadLetterOutcome::dead_lettered;
}

DeadLetterOutcome FakeLedger::dead_letter(const TaskRecord &t, const std::string &error, int64_t now) {
  return call("dead_letter", [&] { return dead_letter_locked(t, error, now); });
}

// --- id blocks and divergence ---

IdBlockState FakeLedger::id_blocks() {
  return call("id_blocks", [&] {
    IdBlockState s;
    s.sequence = m_s->sequence;
    s.block_end = m_s->block_end;
    s.block_intent = std::max(m_s->block_end, m_s->block_intent);
    s.diverged = m_s->diverged;
    return s;
  });
}

BlockOutcome FakeLedger::begin_id_block(int64_t expected_intent, int64_t new_intent, int64_t /*now*/) {
  return call("begin_id_block", [&] {
    const int64_t cur = std::max(m_s->block_end, m_s->block_intent);
    if (cur != expected_intent || new_intent <= cur) return BlockOutcome::moved;
    m_s->block_intent = new_intent;
    return BlockOutcome::begun;
  });
}

void FakeLedger::end_id_block(int64_t end, int64_t /*now*/) {
  call("end_id_block", [&] { m_s->block_end = std::max(m_s->block_end, end); });
}

bool FakeLedger::record_divergence(int64_t store_mark, int64_t now) {
  return call("record_divergence", [&] {
    const bool fresh = !m_s->diverged;
    const int64_t before = m_s->sequence;
    m_s->sequence = std::max(m_s->sequence, store_mark); // no id at or below the mark is issued again
    m_s->block_end = std::max(store_mark, m_s->block_end);
    m_s->block_intent = std::max(m_s->block_end, m_s->block_intent);
    if (fresh) {
      m_s->diverged = Divergence{};
      m_s->diverged->detected_at = now;
      m_s->diverged->sequence_before = before;
    }
    m_s->diverged->store_mark = store_mark;
    m_s->diverged->reconciled_at.reset();
    return fresh;
  });
}

void FakeLedger::note_reconciled(int64_t now) {
  call("note_reconciled", [&] {
    if (m_s->diverged) m_s->diverged->reconciled_at = now;
  });
}

AcceptOutcome FakeLedger::accept_divergence(int64_t /*now*/) {
  return call("accept_divergence", [&] {
    if (!m_s->diverged) return AcceptOutcome::not_diverged;
    if (!m_s->diverged->reconciled_at) return AcceptOutcome::not_reconciled;
    m_s->diverged.reset();
    return AcceptOutcome::accepted;
  });
}

} // namespace lodge::test

namespace lodge::test {
using namespace ledger;

// --- the outbox ---

namespace {
bool waiting(const TaskRecord &t) {
  return t.status == TaskStatus::pending || t.status == TaskStatus::retry;
}
bool ended(const TaskRecord &t) {
  return t.status == TaskStatus::success || t.status == TaskStatus::ignored || t.status == TaskStatus::failed;
}
// The relay's: due, never sent, a first delete.
bool relayable(const TaskRecord &t, int64_t now) {
  return waiting(t) && t.next_retry_at <= now && !t.sent_at && t.verify_pass < k_verify_due && !t.tag_owed;
}
} // namespace

OutboxSettings FakeLedger::outbox_settings() {
  return call("outbox_settings", [&] { return m_s->outbox; });
}

SetOutboxOutcome FakeLedger::set_outbox_settings(const OutboxSettings &s) {
  return call("set_outbox_settings", [&] {
    if (s.cleanup_via != m_s->outbox.cleanup_via &&
        std::any_of(m_s->tasks.begin(), m_s->tasks.end(),
                    [](const auto &e) { return e.second.sent_at && !ended(e.second); }))
      return SetOutboxOutcome::in_flight;
    // Kept as SqlLedger reads them back: in k_event_types' order, each type once.
    m_s->outbox = {s.cleanup_via, {}};
    for (auto type : k_event_types)
      if (std::find(s.event_types.begin(), s.event_types.end(), type) != s.event_types.end())
        m_s->outbox.event_types.push_back(type);
    return SetOutboxOutcome::set;
  });
}

std::vector<TaskRecord> FakeLedger::unsent_due_tasks(int64_t now, int limit) {
  return call("unsent_due_tasks", [&] {
    std::vector<TaskRecord> out;
    for (const auto &[id, t] : m_s->tasks)
      if (relayable(t, now) && static_cast<int>(out.size()) < limit) out.push_back(t);
    return out;
  });
}

int64_t FakeLedger::mark_tasks_sent(const std::vector<SentMark> &marks, int64_t now) {
  return call("mark_tasks_sent", [&] {
    int64_t n = 0;
    for (const auto &m : marks) {
      auto *t = task_at(m.id);
      if (!t || !waiting(*t) || t->sent_at) continue;
      set_task("mark_tasks_sent", *t, [&](TaskRecord &x) {
        x.sent_at = now;
        x.message_id = m.message_id;
      });
      ++n;
    }
    return n;
  });
}

EventClaim FakeLedger::claim_sent_task(int64_t task_id, int64_t now, const std::string &worker,
                                       int64_t lease_ms) {
  return call("claim_sent_task", [&] {
    EventClaim out;
    auto *t = task_at(task_id);
    if (!t) return out; // done: no such task
    out.task = *t;
    if (t->verify_pass >= k_verify_due) return out; // done: the delete was; the verify is sweep's
    if (auto claimed = claim_locked(*t, now, worker, lease_ms)) {
      out.kind = EventClaimKind::claimed;
      out.task = claimed;
      return out;
    }
    out.task = *t;
    if (t->status == TaskStatus::processing) {
      out.kind = EventClaimKind::held;
      out.retry_at = t->lease_until.value_or(now);
    } else if (waiting(*t) && t->sent_at) {
      out.kind = EventClaimKind::not_due;
      out.retry_at = t->next_retry_at;
    }
    return out; // otherwise done: ended, or a new unsent event the relay publishes when due
  });
}

std::vector<UploadEvent> FakeLedger::unsent_events(int limit) {
  return call("unsent_events", [&] {
    std::vector<UploadEvent> out;
    for (const auto &e : m_s->events) {
      if (e.sent_at) continue;
      if (static_cast<int>(out.size()) >= limit) break;
      UploadEvent u;
      u.id = e.id;
      u.type = e.type;
      u.occurred_at = e.occurred_at;
      u.row = *row_at(e.record_id);
      out.push_back(std::move(u));
    }
    return out;
  });
}

int64_t FakeLedger::mark_events_sent(const std::vector<SentMark> &marks, int64_t now) {
  return call("mark_events_sent", [&] {
    int64_t n = 0;
    for (const auto &m : marks) {
      if (m.id < 1 || m.id > static_cast<int64_t>(m_s->events.size())) continue;
      auto &e = m_s->events[static_cast<size_t>(m.id - 1)];
      if (e.sent_at) continue;
      e.sent_at = now;
      e.message_id = m.message_id;
      ++n;
    }
    return n;
  });
}

OutboxCounts FakeLedger::outbox_counts(int64_t now) {
  return call("outbox_counts", [&] {
    OutboxCounts c;
    auto oldest = [&](int64_t at) { c.oldest_unsent_at = std::min(c.oldest_unsent_at.value_or(at), at); };
    for (const auto &[id, t] : m_s->tasks) {
      if (relayable(t, now)) {
        ++c.cleanup_due_unsent;
        oldest(t.next_retry_at);
      }
      if (t.sent_at && !ended(t)) ++c.cleanup_in_flight;
      if (t.sent_at && t.status == TaskStatus::failed) ++c.cleanup_dead;
    }
    for (const auto &e : m_s->events)
      if (!e.sent_at) {
        ++c.events_unsent;
        oldest(e.occurred_at);
      }
    return c;
  });
}

std::vector<TaskRecord> FakeLedger::claim_due_not_queued(int64_t now, int limit, const std::string &worker,
                                                         int64_t lease_ms) {
  return call("claim_due_not_queued", [&] {
    return claim_due_locked(now, limit, worker, lease_ms,
                            [](const TaskRecord &t) { return t.verify_pass == k_verify_due || t.tag_owed; });
  });
}

} // namespace lodge::test
