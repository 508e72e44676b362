#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <lodge/config/ci.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/ops/read/select.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <set>

namespace lodge::ops {
namespace {

constexpr std::string_view k_glob_specials = "*?[{\\";

// The most matched prefixes handed to the ledger as a list of bound values (SQLite caps
// a statement's values at 32766); beyond, the ledger reads the prefixes under the glob's
// literal start and they are matched here, the order and the stream unchanged.
constexpr size_t k_max_bound_prefixes = 1000;

// The bytes every match of an anchored pattern starts with ("/builds/*/x": "builds/").
std::string literal_start(std::string_view anchored) {
  auto body = anchored.substr(1);
  return std::string(body.substr(0, body.find_first_of(k_glob_specials)));
}

// A prefix glob is anchored at the prefix's start, whether or not it was written with '/'.
std::string anchored_prefix_glob(const std::string &glob) {
  return !glob.empty() && glob.front() == '/' ? glob : "/" + glob;
}

// Reads `n` decimal digits at text[pos]; advances pos. -1 when they are not there.
int digits(std::string_view text, size_t &pos, size_t n) {
  if (pos + n > text.size()) return -1;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  pos += n;
  return v;
}

bool expect(std::string_view text, size_t &pos, char c) {
  if (pos >= text.size() || text[pos] != c) return false;
  ++pos;
  return true;
}

[[noreturn]] void bad(std::string_view flag, std::string_view text, std::string_view what) {
  throw LodgeError(Errc::usage, std::string(flag) + ": expected " + std::string(what) + ", got '" +
                                    util::escape_for_terminal(std::string(text)) + "'");
}

} // namespace

std::optional<int64_t> parse_rfc3339_ms(std::string_view text) {
  size_t pos = 0;
  std::tm tm{};
  int year = digits(text, pos, 4);
  if (year < 0 || !expect(text, pos, '-')) return std::nullopt;
  int month = digits(text, pos, 2);
  if (month < 1 || month > 12 || !expect(text, pos, '-')) return std::nullopt;
  int day = digits(text, pos, 2);
  static constexpr int k_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  // timegm would carry an impossible date over (2025-02-29 is 1 March): it is no date.
  if (day < 1 || day > k_days[month - 1] + (month == 2 && leap ? 1 : 0)) return std::nullopt;
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  if (pos == text.size()) return static_cast<int64_t>(timegm(&tm)) * 1000;
  if (text[pos] != 'T' && text[pos] != 't' && text[pos] != ' ') return std::nullopt;
  ++pos;
  int hour = digits(text, pos, 2);
  if (hour < 0 || hour > 23 || !expect(text, pos, ':')) return std::nullopt;
  int minute = digits(text, pos, 2);
  if (minute < 0 || minute > 59 || !expect(text, pos, ':')) return std::nullopt;
  int second = digits(text, pos, 2);
  if (second < 0 || second > 60) return std::nullopt; // 60: a leap second, as RFC 3339 allows
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  int64_t ms = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t begin = pos;
    int64_t scale = 100;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      ms += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == begin) return std::nullopt;
  }
  int64_t offset_min = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int oh = digits(text, pos, 2);
    if (oh < 0 || oh > 23 || !expect(text, pos, ':')) return std::nullopt;
    int om = digits(text, pos, 2);
    if (om < 0 || om > 59) return std::nullopt;
    offset_min = static_cast<int64_t>(sign) * (oh * 60 + om);
  } else {
    return std::nullopt; // a time without its offset names no instant
  }
  if (pos != text.size()) return std::nullopt;
  return (static_cast<int64_t>(timegm(&tm)) - offset_min * 60) * 1000 + ms;
}

int64_t parse_time_bound(std::string_view text, std::string_view flag, int64_t now_ms) {
  static constexpr std::string_view k_what =
      "an RFC 3339 time (2026-12-01T10:00:00Z, or a date) or a duration back from now (7d, 36h, 1h30m)";
  if (auto t = parse_rfc3339_ms(text)) return *t;
  // What starts like a date and is no RFC 3339 time is not taken for a duration; nor are
  // digits alone (1700000000: epoch seconds? a count of seconds back?), which name neither.
  if (text.size() >= 5 && text[4] == '-') bad(flag, text, k_what);
  if (text.find_first_not_of("0123456789") == std::string_view::npos) bad(flag, text, k_what);
  std::optional<int64_t> back;
  try {
    back = match::parse_filter_age(text, flag);
  } catch (const LodgeError &) {
    bad(flag, text, k_what);
  }
  if (!back) bad(flag, text, k_what); // "off" bounds nothing: leave the option out instead
  return now_ms - *back;
}

std::pair<std::string, std::string> parse_search_pair(std::string_view text, std::string_view flag,
                                                      bool lowercase_name) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) bad(flag, text, "NAME=VALUE");
  std::string name(text.substr(0, eq));
  if (lowercase_name) name = util::to_lower(name);
  return {name, std::string(text.substr(eq + 1))};
}

std::string parse_sha256_hex(std::string_view text, std::string_view flag) {
  std::string hex = util::to_lower(std::string(text));
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos)
    bad(flag, text, "64 hex digits (sha256sum's first column)");
  return hex;
}

std::vector<std::string> matching_prefixes(ledger::LedgerReports &l, const std::string &owner,
                                           const std::string &prefix_glob) {
  const std::string anchored = anchored_prefix_glob(prefix_glob);
  const match::Glob glob = match::Glob::compile(anchored);
  ledger::FileQuery q;
  q.owner = owner;
  if (auto start = literal_start(anchored); !start.empty()) q.prefix_start = start;
  std::set<std::string> out;
  l.prefix_summaries(q, [&](const ledger::PrefixSummary &p) {
    // The prefix "" (files uploaded without one) matches no pattern.
    if (!p.run_prefix.empty() && glob.matches(p.run_prefix)) out.insert(p.run_prefix);
    return true;
  });
  return {out.begin(), out.end()};
}

void resolve_short_commits(ledger::LedgerReports &l, ledger::FileQuery &q) {
  constexpr size_t k_min_abbrev = 4; // git's shortest abbreviation (MINIMUM_ABBREV)
  constexpr int k_shown = 10;
  for (auto &[name, value] : q.metadata) {
    if (name != config::k_ci_commit || value.size() < k_min_abbrev ||
        value.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      continue;
    const std::string hex = util::to_lower(value);
    auto found = l.metadata_values(q.owner, name, hex, k_shown + 1);
    if (found.size() == 1) {
      value = found.front();
      continue;
    }
    if (found.empty()) continue; // as given: nothing starts with it, nothing matches
    std::string names;
    for (size_t i = 0; i < found.size() && i < static_cast<size_t>(k_shown); ++i)
      names += (names.empty() ? "" : ", ") + util::escape_for_terminal(found[i]);
    if (found.size() > static_cast<size_t>(k_shown)) names += ", ...";
    throw LodgeError(Errc::usage, "--metadata " + name + "=" + util::escape_for_terminal(value) +
                                      ": short commit " + util::escape_for_terminal(value) +
                                      " is ambiguous: the recorded commits " + names +
                                      " start with it; give more digits");
  }
}

namespace {

using RowTest = std::function<bool(const ledger::FileRecord &)>;

// The rows of q that pass `passes`, to `visit`; q.limit counts the rows visited (read here
// past the ledger's own limit when `filtered_here` may drop rows).
void scan_passing(ledger::LedgerReports &l, ledger::FileQuery q, bool filtered_here, const RowTest &passes,
                  const RowTest &visit) {
  std::optional<int64_t> limit = q.limit;
  if (filtered_here) q.limit.reset();
  if (limit && *limit <= 0) return;
  int64_t seen = 0;
  l.scan_files(q, [&](const ledger::FileRecord &r) {
    if (!passes(r)) return true;
    if (!visit(r)) return false;
    ++seen;
    return !(filtered_here && limit && seen >= *limit);
  });
}

// The (owner, run prefix) of the newest alive ACTIVE row of q (its every field but latest,
// order and limit) that passes `passes`, newest by (created_at, id); nullopt when none.
std::optional<std::pair<std::string, std::string>>
newest_snapshot(ledger::LedgerReports &l, const ledger::FileQuery &q, const RowTest &passes) {
  ledger::FileQuery n = q;
  n.latest = false;
  n.include_dead = false;
  n.sort = ledger::FileSort::time;
  n.descending = true;
  n.limit.reset();
  n.after.reset();
  std::optional<std::pair<std::string, std::string>> out;
  l.scan_files(n, [&](const ledger::FileRecord &r) {
    if (r.is_deleted || r.upload_status != ledger::FileStatus::active || !passes(r)) return true;
    out = {r.owner_id, r.run_prefix};
    return false;
  });
  return out;
}

} // namespace

void select_files(ledger::LedgerReports &l, const Selection &s,
                  const std::function<bool(const ledger::FileRecord &)> &visit) {
  ledger::FileQuery q = s.query;
  resolve_short_commits(l, q);
  std::optional<match::Glob> path_glob;
  if (s.path_glob) {
    path_glob = match::Glob::compile(*s.path_glob);
    // An anchored glob's literal start ("/builds/7/**": "builds/7/") narrows the query.
    if (s.path_glob->size() > 1 && s.path_glob->front() == '/')
      if (auto start = literal_start(*s.path_glob); !start.empty() && !q.path_prefix) q.path_prefix = start;
  }
  std::set<std::string> prefixes_here; // matched prefixes checked here rather than bound
  if (s.prefix_glob) {
    auto prefixes = matching_prefixes(l, q.owner, *s.prefix_glob);
    if (q.run_prefix)
      prefixes.erase(std::remove_if(prefixes.begin(), prefixes.end(),
                                    [&](const std::string &p) { return p != *q.run_prefix; }),
                     prefixes.end());
    if (!q.run_prefixes.empty())
      prefixes.erase(std::remove_if(prefixes.begin(), prefixes.end(),
                                    [&](const std::string &p) {
                                      return std::find(q.run_prefixes.begin(), q.run_prefixes.end(), p) ==
                                             q.run_prefixes.end();
                                    }),
                     prefixes.end());
    if (prefixes.empty()) return; // no run_prefixes would mean every prefix
    if (prefixes.size() <= k_max_bound_prefixes) {
      q.run_prefixes = std::move(prefixes);
    } else {
      if (auto start = literal_start(anchored_prefix_glob(*s.prefix_glob)); !start.empty())
        q.prefix_start = start;
      q.run_prefixes.clear();
      prefixes_here.insert(prefixes.begin(), prefixes.end());
    }
  }
  // Whether a row the ledger read passes what is decided here.
  auto passes = [&](const ledger::FileRecord &r) {
    if (s.active_only && (r.is_deleted || r.upload_status != ledger::FileStatus::active)) return false;
    if (path_glob && !path_glob->matches(r.relative_path)) return false;
    return prefixes_here.empty() || prefixes_here.contains(r.run_prefix);
  };
  if (q.latest) {
    // The latest build: the snapshot (owner, run prefix) holding the newest matching alive
    // ACTIVE row, by (created_at, id) as prune times a snapshot; then, within it alone, the
    // newest row of each path (ledger's latest). A prune between the two reads may remove
    // the snapshot found: then the newest is looked for again.
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto newest = newest_snapshot(l, q, passes);
      if (!newest) return;
      ledger::FileQuery within = q;
      within.owner = newest->first;
      within.run_prefix = newest->second;
      within.run_prefixes.clear();
      within.prefix_start.reset();
      bool any = false;
      bool stopped = false;
      scan_passing(l, within, path_glob.has_value(), passes, [&](const ledger::FileRecord &r) {
        any = true;
        stopped = !visit(r);
        return !stopped;
      });
      if (any || stopped) return;
    }
    return;
  }
  scan_passing(l, q, path_glob.has_value() || s.active_only || !prefixes_here.empty(), passes, visit);
}

} // namespace lodge::ops
