#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <lodge/error.hpp>
#include <lodge/ops/status.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>
#include <variant>

namespace lodge::ops {

Health evaluate(const ledger::StatusReport &r, int64_t sweep_max_age_ms) {
  Health h;
  auto problem = [&](std::string s) {
    h.healthy = false;
    h.problems.push_back(std::move(s));
  };
  if (r.diverged)
    problem(
        "the ledger's history DIVERGED from the store's (restored or copied; the store's id marker is at #" +
        std::to_string(r.diverged->store_mark) + "): " +
        (r.diverged->reconciled_at ? "reconciled; run `lodge init --accept-diverged` when done"
                                   : "run `lodge reconcile`, then `lodge init --accept-diverged`"));
  if (r.dead_letters > 0)
    problem(std::to_string(r.dead_letters) + " cleanup task(s) dead-lettered (see lodge tasks)");
  if (r.overdue_uploading > 0)
    problem(std::to_string(r.overdue_uploading) + " upload(s) past their deadline (is repair running?)");
  if (r.expired_leases > 0)
    problem(std::to_string(r.expired_leases) + " cleanup task(s) with an expired lease (a sweep died?)");
  const auto &sweep = r.last_runs.contains("sweep") ? r.last_runs.at("sweep") : std::nullopt;
  if (sweep) {
    if (r.now - sweep->finished_at > sweep_max_age_ms)
      problem("no sweep for " + util::format_duration_ms(r.now - sweep->finished_at) + " (limit " +
              util::format_duration_ms(sweep_max_age_ms) + ")");
  } else if (r.now - r.ledger_created_at > sweep_max_age_ms) {
    problem("sweep has never run on this ledger (is cron set up?)");
  }
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
    jobs[name] = {
        {"started_at", run->started_at},      {"finished_at", run->finished_at},
        {"age_ms", r.now - run->finished_at}, {"outcome", run->outcome},
        {"worker_id", run->worker_id},        {"counts", counts.is_discarded() ? json::object() : counts}};
  }
  j["last_runs"] = jobs;
  j["diverged"] = r.diverged
                      ? json{{"detected_at", r.diverged->detected_at},
                             {"store_mark", r.diverged->store_mark},
                             {"sequence_before", r.diverged->sequence_before},
                             {"reconciled_at",
                              r.diverged->reconciled_at ? json(*r.diverged->reconciled_at) : json(nullptr)}}
                      : json(nullptr);
  j["healthy"] = h.healthy;
  j["problems"] = h.problems;
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
  auto gauge = [&](const char *name, const char *help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " gauge\n";
  };
  gauge("lodge_files", "File records by state.");
  o << "lodge_files{state=\"uploading\"} " << r.files_uploading << '\n'
    << "lodge_files{state=\"active\"} " << r.files_active << '\n'
    << "lodge_files{state=\"failed\"} " << r.files_failed << '\n'
    << "lodge_files{state=\"deleted\"} " << r.files_deleted << '\n';
  gauge("lodge_tasks", "Cleanup tasks by status.");
  for (const auto &[k, v] : r.tasks)
    o << "lodge_tasks{status=\"" << k << "\"} " << v << '\n';
  gauge("lodge_overdue_uploads", "Alive UPLOADING records past their deadline.");
  o << "lodge_overdue_uploads " << r.overdue_uploading << '\n';
  gauge("lodge_expired_leases", "PROCESSING tasks whose lease expired.");
  o << "lodge_expired_leases " << r.expired_leases << '\n';
  gauge("lodge_dead_letters", "Cleanup tasks that failed for good.");
  o << "lodge_dead_letters " << r.dead_letters << '\n';
  gauge("lodge_oldest_uploading_age_seconds", "Age of the oldest UPLOADING record.");
  o << "lodge_oldest_uploading_age_seconds " << seconds_text(r.oldest_uploading_age_ms.value_or(0)) << '\n';
  gauge("lodge_job_last_finished_timestamp_seconds", "When each job last finished.");
  for (const auto &[name, run] : r.last_runs)
    if (run)
      o << "lodge_job_last_finished_timestamp_seconds{job=\"" << name << "\"} "
        << seconds_text(run->finished_at) << '\n';
  gauge("lodge_healthy", "1 when status --check would pass.");
  o << "lodge_healthy " << (h.healthy ? 1 : 0) << '\n';
  return o.str();
}

namespace {
[[noreturn]] void write_failed(const std::string &path, const char *step, int err) {
  throw LodgeError(Errc::io_error, path + ": cannot write (" + step + "): " + std::strerror(err));
}
} // namespace

void write_file_atomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) write_failed(path, "open", errno);
  // Whatever fails, the temporary file goes and the old file stays as it was.
  auto give_up = [&](const char *step, int err, bool still_open) {
    if (still_open) ::close(fd);
    ::unlink(tmp.c_str());
    write_failed(path, step, err);
  };
  size_t off = 0;
  while (off < text.size()) {
    auto n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      give_up("write", errno, true);
    }
    off += static_cast<size_t>(n);
  }
  // A delayed write error (NFS, a full thin volume) shows only in fsync or close.
  if (::fsync(fd) != 0) give_up("fsync", errno, true);
  if (::close(fd) != 0) give_up("close", errno, false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("rename", errno, false);
}

} // namespace lodge::ops
