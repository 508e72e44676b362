#include <algorithm>
#include <cerrno>
#include <cstring>
#include <lodge/error.hpp>
#include <lodge/ops/read/status.hpp>
#include <lodge/util/atomic_file.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

namespace lodge::ops {

namespace {
std::string ago(int64_t now, int64_t t) {
  return util::format_duration_ms(now - t) + " ago";
}

int64_t count_of(const nlohmann::json &counts, const char *key) {
  auto it = counts.find(key);
  return it != counts.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

// Why a job's last run failed, as one reason: the store out of reach, reconcile's
// findings, or the run's own error.
Reason failed_run(const ledger::JobRun &run, int64_t now) {
  auto counts = nlohmann::json::parse(run.counts_json, nullptr, false);
  if (!counts.is_object()) counts = nlohmann::json::object();
  std::string error =
      counts.contains("error") && counts["error"].is_string() ? counts["error"].get<std::string>() : "";
  std::string code =
      counts.contains("code") && counts["code"].is_string() ? counts["code"].get<std::string>() : "";
  std::string last = "the last " + run.job + " (" + ago(now, run.finished_at) + ")";
  int64_t unreachable = count_of(counts, "unreachable");
  if (code == "STORAGE_UNAVAILABLE" || code == "ACCESS_DENIED" || unreachable > 0)
    return {"store_unreachable",
            last + " could not reach the store: " +
                (!error.empty() ? error + " (" + code + ")"
                                : util::plural(unreachable, "task") + " got no answer or were refused")};
  if (run.job == "reconcile" && error.empty() && counts.contains("found") && counts["found"].is_object()) {
    std::string found;
    for (const auto &[kind, n] : counts["found"].items())
      if (n.is_number_integer() && n.get<int64_t>() > 0)
        found += (found.empty() ? "" : ", ") + std::to_string(n.get<int64_t>()) + " " + kind;
    if (!found.empty())
      return {"reconcile_findings", last + " found " + found + " (run `lodge reconcile` to list them)"};
  }
  if (!error.empty())
    return {"job_failed", last + " failed: " + error + (code.empty() ? "" : " (" + code + ")")};
  std::string what;
  if (int64_t n = count_of(counts, "retried"); n > 0) what = util::plural(n, "task") + " to retry";
  if (int64_t n = count_of(counts, "dead_lettered"); n > 0)
    what += (what.empty() ? "" : ", ") + std::to_string(n) + " dead-lettered";
  return {"job_failed", last + " failed" + (what.empty() ? "" : ": " + what) + " (see lodge tasks)"};
}
} // namespace

ledger::StatusReport read_status(ledger::LedgerReports &reads, ledger::OutboxLedger &outbox,
                                 const config::StatusSettings &s, int64_t now) {
  auto report = reads.status(now, now - s.upload_failed_window_ms);
  auto settings = outbox.outbox_settings();
  auto counts = outbox.outbox_counts(now);
  report.cleanup_via = ledger::to_string(settings.cleanup_via);
  for (auto t : settings.event_types)
    report.event_types.emplace_back(ledger::to_string(t));
  report.outbox_due_unsent = counts.cleanup_due_unsent;
  report.outbox_in_flight = counts.cleanup_in_flight;
  report.outbox_dead = counts.cleanup_dead;
  report.events_unsent = counts.events_unsent;
  return report;
}

Health evaluate(const ledger::StatusReport &r, const config::StatusSettings &s) {
  Health h;
  auto problem = [&](std::string code, std::string message) {
    h.healthy = false;
    h.reasons.push_back({std::move(code), std::move(message)});
  };
  if (r.diverged)
    problem(
        "ledger_diverged",
        "the ledger's history DIVERGED from the store's (restored or copied; the store's id marker is at #" +
            std::to_string(r.diverged->store_mark) + "): " +
            (r.diverged->reconciled_at ? "reconciled; run `lodge init --accept-diverged` when done"
                                       : "run `lodge reconcile`, then `lodge init --accept-diverged`"));
  if (r.dead_letters > 0)
    problem("dead_letters",
            util::plural(r.dead_letters, "cleanup task") + " dead-lettered (see lodge tasks)");
  if (r.overdue_uploading > 0)
    problem("uploading_overdue", util::plural(r.overdue_uploading, "upload") + " past " +
                                     (r.overdue_uploading == 1 ? "its" : "their") +
                                     " deadline (is repair running?)");
  if (r.expired_leases > 0)
    problem("lease_expired",
            util::plural(r.expired_leases, "cleanup task") + " with an expired lease (a sweep died?)");
  for (const char *job : config::k_jobs) {
    auto it = r.last_runs.find(job);
    const auto &run = it == r.last_runs.end() ? std::nullopt : it->second;
    auto limit = s.max_age_ms.find(job);
    int64_t max_age = limit == s.max_age_ms.end() ? 0 : limit->second;
    bool configured = std::find(s.required_jobs.begin(), s.required_jobs.end(), job) != s.required_jobs.end();
    // A ledger whose cleanup runs through a queue needs its relay and its consumers as a
    // task-table ledger needs sweep; one that records upload events needs its relay.
    const std::string_view name(job);
    bool by_outbox = (r.cleanup_via == "queue" && (name == "relay" || name == "consume")) ||
                     (!r.event_types.empty() && name == "relay");
    bool required = configured || by_outbox;
    if (run) {
      if (run->outcome != "ok") {
        auto reason = failed_run(*run, r.now);
        problem(std::move(reason.code), std::move(reason.message));
      }
      if (max_age > 0 && r.now - run->finished_at > max_age)
        problem("job_overdue", "no " + std::string(job) + " for " +
                                   util::format_duration_ms(r.now - run->finished_at) + " (limit " +
                                   util::format_duration_exact(max_age) + "; is cron running it?)");
    } else if (required && r.now - r.ledger_created_at > max_age) {
      problem("job_overdue", std::string(job) + " has never run on this ledger (required by " +
                                 (configured                 ? std::string("status.required_jobs")
                                  : r.cleanup_via == "queue" ? std::string("cleanup via a queue")
                                                             : std::string("upload events")) +
                                 "; is cron set up?)");
    }
  }
  if (r.files_failed_since > s.upload_failed_max)
    problem("upload_failed_rate", util::plural(r.files_failed_since, "upload") + " failed in the last " +
                                      util::format_duration_exact(r.now - r.failed_since) + " (limit " +
                                      std::to_string(s.upload_failed_max) + "; see lodge list --all)");
  return h;
}

nlohmann::json status_json(const ledger::StatusReport &r, const Health &h, const std::string &ledger_path) {
  using nlohmann::json;
  json j;
  j["ledger"] = ledger_path;
  j["ledger_uuid"] = r.ledger_uuid;
  j["schema_version"] = r.schema_version;
  json backend{{"kind", r.backend_kind}};
  for (const auto &field : r.backend)
    std::visit([&](const auto &x) { backend[field.first] = x; }, field.second);
  j["backend"] = backend;
  j["files"] = {{"uploading", r.files_uploading},
                {"active", r.files_active},
                {"failed", r.files_failed},
                {"deleted", r.files_deleted},
                {"alive", r.files_uploading + r.files_active}};
  json tasks = json::object();
  for (const auto &[k, v] : r.tasks)
    tasks[k] = v;
  j["tasks"] = tasks;
  j["tasks_due"] = r.tasks_due;
  j["overdue_uploading"] = r.overdue_uploading;
  j["expired_leases"] = r.expired_leases;
  j["dead_letters"] = r.dead_letters;
  j["oldest_uploading_age_ms"] = r.oldest_uploading_age_ms ? json(*r.oldest_uploading_age_ms) : json(nullptr);
  json jobs = json::object();
  for (const auto &[name, run] : r.last_runs) {
    if (!run) {
      jobs[name] = nullptr;
      continue;
    }
    json counts = json::parse(run->counts_json, nullptr, false);
    jobs[name] = {{"started_at", util::format_rfc3339_ms(run->started_at)},
                  {"finished_at", util::format_rfc3339_ms(run->finished_at)},
                  {"age_ms", r.now - run->finished_at},
                  {"outcome", run->outcome},
                  {"worker_id", run->worker_id},
                  {"counts", counts.is_discarded() ? json::object() : counts}};
  }
  j["last_runs"] = jobs;
  j["diverged"] = r.diverged
                      ? json{{"detected_at", util::format_rfc3339_ms(r.diverged->detected_at)},
                             {"store_mark", r.diverged->store_mark},
                             {"sequence_before", r.diverged->sequence_before},
                             {"reconciled_at", r.diverged->reconciled_at
                                                   ? json(util::format_rfc3339_ms(*r.diverged->reconciled_at))
                                                   : json(nullptr)}}
                      : json(nullptr);
  j["upload_failed_recent"] = {{"count", r.files_failed_since},
                               {"since", util::format_rfc3339_ms(r.failed_since)}};
  j["outbox"] = {{"cleanup_via", r.cleanup_via},
                 {"event_types", r.event_types},
                 {"cleanup_due_unsent", r.outbox_due_unsent},
                 {"cleanup_in_flight", r.outbox_in_flight},
                 {"cleanup_dead_lettered", r.outbox_dead},
                 {"events_unsent", r.events_unsent}};
  j["healthy"] = h.healthy;
  json reasons = json::array();
  json problems = json::array();
  for (const auto &reason : h.reasons) {
    reasons.push_back({{"code", reason.code}, {"message", reason.message}});
    problems.push_back(reason.message);
  }
  j["reasons"] = reasons;
  j["problems"] = problems; // the messages alone, as before reasons had codes
  return j;
}

namespace {
// Milliseconds as exact decimal seconds: a double in an ostream prints six significant
// digits, and a timestamp of 2026 as 1.79611e+09 is up to 5,000 s off.
std::string seconds_text(int64_t ms) {
  std::string sign = ms < 0 ? "-" : "";
  uint64_t m = ms < 0 ? static_cast<uint64_t>(-(ms + 1)) + 1 : static_cast<uint64_t>(ms);
  std::string frac = std::to_string(m % 1000);
  return sign + std::to_string(m / 1000) + "." + std::string(3 - frac.size(), '0') + frac;
}
} // namespace

std::string status_prometheus(const ledger::StatusReport &r, const Health &h) {
  std::ostringstream o;
  // One family at a time, HELP and TYPE first (the text exposition format); every value
  // an integer or exact decimal seconds, never a double's six digits.
  auto gauge = [&](const char *name, const char *help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " gauge\n";
  };
  gauge("lodge_files", "File records by state (DELETED: ACTIVE files deleted by the user).");
  o << "lodge_files{state=\"UPLOADING\"} " << r.files_uploading << '\n'
    << "lodge_files{state=\"ACTIVE\"} " << r.files_active << '\n'
    << "lodge_files{state=\"UPLOAD_FAILED\"} " << r.files_failed << '\n'
    << "lodge_files{state=\"DELETED\"} " << r.files_deleted << '\n';
  gauge("lodge_tasks", "Cleanup tasks by status.");
  for (const auto &[k, v] : r.tasks)
    o << "lodge_tasks{status=\"" << k << "\"} " << v << '\n';
  gauge("lodge_overdue_uploads", "Alive UPLOADING records past their deadline.");
  o << "lodge_overdue_uploads " << r.overdue_uploading << '\n';
  gauge("lodge_expired_leases", "PROCESSING tasks whose lease expired.");
  o << "lodge_expired_leases " << r.expired_leases << '\n';
  gauge("lodge_dead_letters", "Cleanup tasks that failed for good.");
  o << "lodge_dead_letters " << r.dead_letters << '\n';
  gauge("lodge_outbox_events", "Outbox events by kind and state (cleanup through a queue, upload events).");
  o << R"(lodge_outbox_events{kind="cleanup",state="due_unsent"} )" << r.outbox_due_unsent << '\n'
    << R"(lodge_outbox_events{kind="cleanup",state="in_flight"} )" << r.outbox_in_flight << '\n'
    << R"(lodge_outbox_events{kind="cleanup",state="dead_lettered"} )" << r.outbox_dead << '\n'
    << R"(lodge_outbox_events{kind="upload",state="unsent"} )" << r.events_unsent << '\n';
  gauge("lodge_upload_failed_recent",
        "Records that became UPLOAD_FAILED within status.upload_failed_window.");
  o << "lodge_upload_failed_recent " << r.files_failed_since << '\n';
  gauge("lodge_oldest_uploading_age_seconds", "Age of the oldest UPLOADING record.");
  o << "lodge_oldest_uploading_age_seconds " << seconds_text(r.oldest_uploading_age_ms.value_or(0)) << '\n';
  bool any_run = false;
  for (const auto &[name, run] : r.last_runs)
    any_run = any_run || run.has_value();
  if (any_run) {
    gauge("lodge_job_last_run_timestamp_seconds", "When each job's last run finished (Unix time).");
    for (const auto &[name, run] : r.last_runs)
      if (run)
        o << "lodge_job_last_run_timestamp_seconds{job=\"" << name << "\"} " << seconds_text(run->finished_at)
          << '\n';
    gauge("lodge_job_last_run_ok", "1 when each job's last run succeeded.");
    for (const auto &[name, run] : r.last_runs)
      if (run)
        o << "lodge_job_last_run_ok{job=\"" << name << "\"} " << (run->outcome == "ok" ? 1 : 0) << '\n';
  }
  if (!r.last_success_at.empty()) {
    gauge("lodge_job_last_success_timestamp_seconds",
          "When each job last finished successfully (Unix time).");
    for (const auto &[name, at] : r.last_success_at)
      o << "lodge_job_last_success_timestamp_seconds{job=\"" << name << "\"} " << seconds_text(at) << '\n';
  }
  gauge("lodge_health_reasons", "How many reasons of each code make status --check unhealthy.");
  for (const char *code : k_reason_codes) {
    auto n =
        std::count_if(h.reasons.begin(), h.reasons.end(), [&](const Reason &x) { return x.code == code; });
    o << "lodge_health_reasons{code=\"" << code << "\"} " << n << '\n';
  }
  gauge("lodge_health_ok", "1 when status --check passes.");
  o << "lodge_health_ok " << (h.healthy ? 1 : 0) << '\n';
  return o.str();
}

namespace {
[[noreturn]] void write_failed(const std::string &path, const util::FileError &e) {
  if (*e.found != '\0')
    throw LodgeError(Errc::io_error, path + " is " + e.found + ", not a regular file: not replaced");
  throw LodgeError(Errc::io_error, path + ": cannot write (" + e.step + "): " + std::strerror(e.err));
}
} // namespace

void write_file_atomically(const std::string &path, const std::string &text, unsigned mode) {
  util::AtomicFile::Options o;
  o.mode = mode;
  o.exact_mode = true; // lodge runs under umask 077: node_exporter must read the textfile
  util::AtomicFile f(path, o);
  // Whatever fails, the temporary file goes and the old file stays as it was.
  if (!f.open() || !f.write(text) || !f.commit()) write_failed(path, f.error());
}

} // namespace lodge::ops
