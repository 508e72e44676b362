// The text of an upload run's progress (run_text.hpp).
#include <cmath>
#include <cstdio>
#include <lodge/ops/upload/run_text.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

namespace lodge::ops {
namespace {

// Bytes sent per second, averaged since the run began.
double average_rate(const RunProgress &p) {
  const double secs = static_cast<double>(p.elapsed_ms) / 1000.0;
  return secs > 0 ? static_cast<double>(p.bytes_sent) / secs : 0;
}

// "3/40 files": `known` false while the walk runs, when the total is a lower bound ("40+").
std::string files_of(const RunProgress &p, bool known) {
  return std::to_string(p.files_done) + "/" + std::to_string(p.files_total) + (known ? "" : "+") +
         (p.files_total == 1 && known ? " file" : " files");
}

// The hashing pass of big files, which sends nothing for a while: ", hashing X of Y", or ""
// while nothing big is being hashed.
std::string hashing_of(const RunProgress &p) {
  if (p.hashing == 0 || p.hashing_size < (8ULL << 20)) return "";
  return ", hashing " + util::format_size(p.hashed) + " of " + util::format_size(p.hashing_size);
}

// A throughput change in words: "up 80%", "down 3%".
std::string change_of(double gain) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s %.0f%%", gain < 0 ? "down" : "up", std::abs(gain) * 100.0);
  return buf;
}

} // namespace

std::string stats_line(const RunProgress &p, bool final) {
  const bool known = p.total_final || final;
  const std::string plus = known ? "" : "+";
  const double rate = average_rate(p);
  std::string line = std::string("lodge: ") + (final ? "done: " : "") + files_of(p, known) + ", " +
                     util::format_size(p.bytes_sent) + "/" + util::format_size(p.bytes_total) + plus +
                     " sent, " + util::format_size(static_cast<uint64_t>(rate)) + "/s, elapsed " +
                     util::format_duration_ms(p.elapsed_ms);
  if (final) return line;
  line += hashing_of(p);
  std::string eta = "-";
  if (p.total_final && rate > 0 && p.bytes_total > p.bytes_sent)
    eta = util::format_duration_ms(
        static_cast<int64_t>(static_cast<double>(p.bytes_total - p.bytes_sent) / rate * 1000.0));
  return line + ", ETA " + eta + ", " + std::to_string(p.in_flight) + " in flight";
}

std::string level_change_line(const LevelChange &c) {
  std::string why;
  switch (c.why) {
  case LevelReason::grew:
    why = "throughput " + change_of(c.gain);
    break;
  case LevelReason::probe:
    why = "trying more";
    break;
  case LevelReason::not_worth_it:
    why = "throughput " + change_of(c.gain) + " at " + std::to_string(c.from) + ": not worth it";
    break;
  case LevelReason::throttled:
    why = "the store asked to slow down";
    break;
  case LevelReason::errors:
    why = "requests failed";
    break;
  case LevelReason::bound:
    why = util::escape_for_terminal(c.detail);
    break;
  }
  return "lodge: concurrency: " + std::to_string(c.from) + " -> " + std::to_string(c.to) + " (" + why + ")";
}

std::string concurrency_of(const RunConcurrency &c) {
  if (!c.adaptive) return ", concurrency " + std::to_string(c.level) + " (fixed)";
  return ", concurrency " + std::to_string(c.level) + " (adaptive, peak " + std::to_string(c.peak) + ")";
}

std::string progress_line(const RunProgress &p) {
  const bool walked = p.total_final; // until then the totals are lower bounds, said with a "+"
  std::string line = files_of(p, walked);
  if (p.bytes_total > 0) line += " (" + util::format_size(p.bytes_total) + (walked ? "" : "+") + ")";
  line += ", " + util::format_size(p.bytes_sent) + " sent, " +
          util::format_size(static_cast<uint64_t>(average_rate(p))) + "/s";
  if (const auto hashing = hashing_of(p); !hashing.empty())
    line += hashing + (p.hashing > 1 ? " (" + std::to_string(p.hashing) + " files)" : "");
  if (walked && p.files_left > 0 && p.queued_done > 0)
    line += ", ETA " + util::format_duration_ms(p.elapsed_ms * p.files_left / p.queued_done);
  return line;
}

} // namespace lodge::ops
