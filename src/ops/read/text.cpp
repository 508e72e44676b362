// The text forms of `lodge status` and `lodge show` (text.hpp).
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/ops/read/text.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <map>
#include <type_traits>
#include <variant>

namespace lodge::ops {
namespace {

// printf's format, appended to `out`.
__attribute__((format(printf, 2, 3))) void appendf(std::string &out, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  if (n > 0) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<size_t>(n) + 1, fmt, again);
    out.resize(at + static_cast<size_t>(n));
  }
  va_end(again);
}

std::string ago(int64_t now, int64_t t) {
  return util::format_duration_ms(now - t) + " ago";
}

// "2026-12-01T11:30:00.123Z" (UTC), or "-".
std::string utc(const std::optional<int64_t> &ms) {
  return ms ? util::format_rfc3339_ms(*ms) : "-";
}

std::string text_or_dash(const std::optional<std::string> &s) {
  return s ? util::escape_for_terminal(*s) : "-";
}

} // namespace

std::string status_text(const ledger::StatusReport &r, const Health &h, const std::string &path,
                        bool verbose) {
  std::string out;
  appendf(out, "ledger            %s (schema %d)\n", util::escape_for_terminal(path).c_str(),
          r.schema_version);
  std::string backend = r.backend_kind;
  const char *sep = ": ";
  for (const auto &field : r.backend) {
    std::string value = std::visit(
        [](const auto &x) -> std::string {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>)
            return x;
          else if constexpr (std::is_same_v<T, bool>)
            return x ? "yes" : "no";
          else
            return std::to_string(x);
        },
        field.second);
    backend += sep + field.first + " " + value;
    sep = ", ";
  }
  if (verbose) appendf(out, "backend           %s\n", util::escape_for_terminal(backend).c_str());
  appendf(out, "files             uploading %lld, active %lld, failed %lld, deleted %lld\n",
          static_cast<long long>(r.files_uploading), static_cast<long long>(r.files_active),
          static_cast<long long>(r.files_failed), static_cast<long long>(r.files_deleted));
  // What is left to clean up, in the user's words: pending (will run) and failed (gave up).
  // The tasks themselves (IGNORED is every normal upload's) are internals: -v and --json.
  auto task = [&](ledger::TaskStatus st) {
    auto it = r.tasks.find(ledger::to_string(st));
    return it == r.tasks.end() ? int64_t{0} : it->second;
  };
  int64_t pending = task(ledger::TaskStatus::pending) + task(ledger::TaskStatus::retry) +
                    task(ledger::TaskStatus::processing);
  appendf(out, "cleanup           pending %lld, failed %lld\n", static_cast<long long>(pending),
          static_cast<long long>(task(ledger::TaskStatus::failed)));
  if (verbose) {
    appendf(out, "tasks             ");
    bool first = true;
    for (const auto &[k, v] : r.tasks) {
      std::string lower;
      for (char c : k)
        lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      appendf(out, "%s%s %lld", first ? "" : ", ", lower.c_str(), static_cast<long long>(v));
      first = false;
    }
    appendf(out, "\n");
    appendf(out, "tasks due         %lld\n", static_cast<long long>(r.tasks_due));
    appendf(out, "expired leases    %lld\n", static_cast<long long>(r.expired_leases));
  }
  appendf(out, "overdue uploads   %lld\n", static_cast<long long>(r.overdue_uploading));
  appendf(out, "oldest uploading  %s\n",
          r.oldest_uploading_age_ms ? util::format_duration_ms(*r.oldest_uploading_age_ms).c_str() : "-");
  bool outbox = r.cleanup_via != "tasks" || !r.event_types.empty();
  if (outbox) {
    std::string types;
    for (const auto &t : r.event_types)
      types += (types.empty() ? "" : ", ") + t;
    appendf(out, "cleanup via       %s; upload events: %s\n", r.cleanup_via.c_str(),
            types.empty() ? "none" : types.c_str());
    appendf(
        out,
        "outbox            cleanup due %lld, in flight %lld, dead-lettered %lld; upload events unsent %lld\n",
        static_cast<long long>(r.outbox_due_unsent), static_cast<long long>(r.outbox_in_flight),
        static_cast<long long>(r.outbox_dead), static_cast<long long>(r.events_unsent));
  }
  for (const char *job : config::k_jobs) {
    auto it = r.last_runs.find(job);
    bool outbox_job = std::string_view(job) == "relay" || std::string_view(job) == "consume";
    if (outbox_job && !outbox && (it == r.last_runs.end() || !it->second)) continue;
    if (it == r.last_runs.end() || !it->second)
      appendf(out, "last %-12s never\n", job);
    else
      appendf(out, "last %-12s %s (%s)\n", job, ago(r.now, it->second->finished_at).c_str(),
              it->second->outcome.c_str());
  }
  if (r.diverged)
    appendf(out, "diverged          yes: store's id marker at #%lld, ledger was at #%lld (%s)\n",
            static_cast<long long>(r.diverged->store_mark),
            static_cast<long long>(r.diverged->sequence_before),
            r.diverged->reconciled_at ? "reconciled since" : "not reconciled since");
  if (h.healthy) {
    appendf(out, "health            ok\n");
  } else {
    appendf(out, "health            UNHEALTHY\n");
    for (const auto &reason : h.reasons)
      appendf(out, "  - %s: %s\n", reason.code.c_str(), util::escape_for_terminal(reason.message).c_str());
  }
  return out;
}

std::string show_text(const ledger::FileRecord &r, const std::optional<ledger::TaskRecord> &t) {
  std::string out;
  auto line = [&out](const char *k, const std::string &v) { appendf(out, "%-20s %s\n", k, v.c_str()); };
  line("id", std::to_string(r.id));
  line("owner", util::escape_for_terminal(r.owner_id));
  line("path", util::escape_for_terminal(restore_path(r)));
  line("prefix", r.run_prefix.empty() ? "-" : util::escape_for_terminal(r.run_prefix));
  line("name", util::escape_for_terminal(r.original_name));
  line("status", shown_status(r));
  line("failure reason", text_or_dash(r.failure_reason));
  line("policy", util::escape_for_terminal(r.policy) + " (dedup " + ledger::to_string(r.dedup_scope) + ")");
  line("created", utc(r.created_at));
  line("activated", utc(r.activated_at));
  line("deleted", utc(r.deleted_at));
  line("updated", utc(r.updated_at));
  line("deadline", utc(r.upload_deadline_at));
  line("expires", utc(r.expires_at));
  // What the upload asked of the object: its metadata (--metadata, --ci-metadata's build)
  // and tags, "name=value" in name order.
  const auto options = store::from_json(r.object_options);
  auto pairs = [](const std::map<std::string, std::string> &m) {
    std::string said;
    for (const auto &[k, v] : m)
      said += (said.empty() ? "" : " ") + util::escape_for_terminal(k + "=" + v);
    return said.empty() ? std::string("-") : said;
  };
  line("metadata", pairs(options.metadata));
  line("tags", pairs(options.tags));
  line("key", util::escape_for_terminal(r.object_key));
  line("shares", r.content_of
                     ? "the object of #" + std::to_string(*r.content_of) + " (same content, stored once)"
                     : "-");
  line("size", std::to_string(r.size) + " (" + util::format_size(static_cast<uint64_t>(r.size)) + ")");
  line("sha256", r.sha256);
  line("media type", util::escape_for_terminal(r.media_type));
  line("etag", text_or_dash(r.etag));
  line("version id", text_or_dash(r.version_id));
  line("multipart upload id", text_or_dash(r.multipart_upload_id));
  line("idempotency key", text_or_dash(r.idempotency_key));
  if (!t) {
    line("task", "-");
    return out;
  }
  line("task", "#" + std::to_string(t->id) + " " + t->task_type + " " + ledger::to_string(t->status));
  line("task retries", std::to_string(t->retry_count) + " of " + std::to_string(t->max_retries));
  line("task next retry", utc(t->next_retry_at));
  line("task last error", text_or_dash(t->last_error));
  return out;
}

} // namespace lodge::ops
