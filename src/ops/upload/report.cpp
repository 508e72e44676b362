// What an upload's results mean (report.hpp).
#include <lodge/ops/upload/report.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::ops {

bool no_file_found(const RunReport &rep) {
  return !rep.interrupted && rep.tally.files == rep.tally.skipped;
}

std::string no_files_message(const std::vector<std::string> &paths, const std::string &files_from,
                             const RunTally &t) {
  std::string sources;
  for (const auto &p : paths)
    sources += (sources.empty() ? "" : ", ") + ("'" + util::escape_for_terminal(p) + "'");
  if (!files_from.empty())
    sources += (sources.empty() ? "" : ", ") + std::string("--files-from ") +
               (files_from == "-" ? std::string("stdin") : "'" + util::escape_for_terminal(files_from) + "'");
  std::string left_out;
  if (t.excluded > 0) left_out += util::plural(t.excluded, "entry", "entries") + " excluded by the filters";
  if (t.skipped > 0)
    left_out += (left_out.empty() ? "" : ", ") + util::plural(t.skipped, "entry", "entries") + " skipped";
  return "upload: no file found in " + sources + (left_out.empty() ? "" : " (" + left_out + ")") +
         ": nothing was uploaded";
}

nlohmann::json result_json(const FileResult &r) {
  auto text = [](const std::string &v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json j;
  j["file"] = r.file;
  j["path"] = text(r.relative_path);
  j["outcome"] = to_string(r.outcome);
  j["id"] = r.id ? nlohmann::json(*r.id) : nlohmann::json(nullptr);
  j["object_key"] = text(r.object_key);
  j["sha256"] = text(r.sha256);
  j["size"] = r.size;
  j["media_type"] = text(r.media_type);
  j["content_type"] = text(r.content_type);
  if (r.outcome == UploadOutcome::duplicate) {
    j["unchanged"] = r.unchanged;
    j["shares"] = r.shares ? nlohmann::json(*r.shares) : nlohmann::json(nullptr);
  }
  if (r.resumed_bytes > 0) j["resumed_bytes"] = r.resumed_bytes;
  if (r.error && r.outcome != UploadOutcome::duplicate)
    j["error"] = {{"code", r.error->name()}, {"message", r.error->message}};
  else
    j["error"] = nullptr;
  if (r.outcome == UploadOutcome::skipped) j["reason"] = r.reason;
  return j;
}

nlohmann::json summary_json(const RunReport &rep, bool dry_run, const std::string &no_files_warning) {
  const auto &t = rep.tally;
  nlohmann::json sum{{"files", t.files},
                     {"active", t.active},
                     {"duplicate", t.duplicate},
                     {"replayed", t.replayed},
                     {"rejected", t.rejected},
                     {"failed", t.failed},
                     {"skipped", t.skipped},
                     {"in_progress", t.in_progress},
                     {"bytes", t.bytes},
                     {"seconds", static_cast<double>(rep.elapsed_ms) / 1000.0},
                     {"interrupted", rep.interrupted},
                     {"aborted", rep.aborted}};
  sum["excluded"] = t.excluded; // left out by the filters; always present
  if (!no_files_warning.empty())
    sum["warning"] = {{"code", errc_name(Errc::not_found)}, {"message", no_files_warning}};
  sum["concurrency"] = {{"level", rep.concurrency.level},
                        {"peak", rep.concurrency.peak},
                        {"adaptive", rep.concurrency.adaptive}};
  if (dry_run) {
    sum["dry_run"] = true;
    sum["planned"] = t.planned;
  }
  return nlohmann::json{{"summary", sum}};
}

nlohmann::json reservation_json(const DirectReservation &d, const char *word) {
  auto j = result_json(d.r);
  j["outcome"] = word;
  auto headers = [](const store::PresignedPut &put) {
    nlohmann::json h = nlohmann::json::object();
    for (const auto &[k, val] : put.headers)
      h[k] = val;
    return h;
  };
  if (d.put) {
    j["method"] = d.put->method;
    j["url"] = d.put->url;
    j["headers"] = headers(*d.put);
  }
  if (!d.parts.empty()) {
    j["parts"] = nlohmann::json::array();
    for (const auto &p : d.parts)
      j["parts"].push_back({{"number", p.number},
                            {"offset", p.offset},
                            {"size", p.size},
                            {"method", p.put.method},
                            {"url", p.put.url},
                            {"headers", headers(p.put)}});
  }
  if (d.put || !d.parts.empty()) j["expires_at"] = util::format_rfc3339_ms(d.url_expires_at);
  return j;
}

const char *reservation_word(bool reserved, const FileResult &r) {
  return reserved                                ? "reserved"
         : r.outcome == UploadOutcome::replayed  ? "replayed"
         : r.outcome == UploadOutcome::duplicate ? "duplicate"
         : r.outcome == UploadOutcome::rejected  ? "rejected"
                                                 : "failed";
}

int direct_exit_status(const FileResult &r) {
  if (!r.error || r.outcome == UploadOutcome::duplicate || r.outcome == UploadOutcome::active)
    return errc_info(Errc::ok).exit_code;
  const int c = r.error->exit_code();
  return c == errc_info(Errc::usage).exit_code || c > 1 ? c : errc_info(Errc::storage_error).exit_code;
}

int reservation_exit_status(bool reserved, const FileResult &r) {
  return reserved || r.outcome == UploadOutcome::replayed ? errc_info(Errc::ok).exit_code
                                                          : direct_exit_status(r);
}

} // namespace lodge::ops
