#pragma once
// Which rows `lodge list` and `lodge get` take: the ledger's search (ledger::FileQuery:
// owner, prefix, metadata, tags, time, digest, size, latest, order, limit) plus what only
// lodge's one glob matcher decides: the relative path (`--path-glob`) and the run prefix
// (`--prefix-glob`). Rows stream to the caller as the ledger reads them; nothing here holds
// the result.

#include <cstdint>
#include <functional>
#include <lodge/ledger/ledger.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lodge::ops {

struct Selection {
  ledger::FileQuery query;
  // Rows whose relative path matches (match::Glob; an anchored pattern's literal start
  // narrows query.path_prefix).
  std::optional<std::string> path_glob;
  // Rows whose run prefix matches, the pattern anchored at the prefix's start
  // ("builds/*" takes "builds/7", not "old/builds/7" nor "builds/7/x"); among the prefixes
  // that hold alive rows (the snapshots prune sees).
  std::optional<std::string> prefix_glob;
  // Only alive ACTIVE rows (get: nothing else has bytes to fetch).
  bool active_only = false;
};

// Streams the selected rows to `visit` in the query's order until it returns false.
// query.limit counts rows visited. query.latest selects the latest build's files: of the
// snapshots (owner, run prefix: one upload's --prefix) holding a row that every other
// option selects, the one with the newest such alive ACTIVE row (created_at, then id, as
// prune times a snapshot), and of it alone the newest selected row of each relative path;
// a path that build did not upload is not taken from an older one. A bad glob is
// LodgeError(USAGE) naming it, before any row is read; a prefix glob that matches no prefix
// selects nothing.
void select_files(ledger::LedgerReports &l, const Selection &s,
                  const std::function<bool(const ledger::FileRecord &)> &visit);

// A short commit, as git takes one: each `cicommit` pair of q.metadata whose value is 4 or
// more hex digits (either case) becomes the one commit recorded (on a row of q.owner, any
// state) that starts with it; it stays as given when none does (and matches nothing).
// LodgeError(USAGE) "ambiguous", naming the candidates, when several different commits do.
// Fewer digits, or other characters, match exactly. select_files does this first.
void resolve_short_commits(ledger::LedgerReports &l, ledger::FileQuery &q);

// The run prefixes matching `prefix_glob` (as Selection::prefix_glob) among the prefixes
// of `owner` ("*": every owner) that hold alive rows, sorted, each once.
[[nodiscard]] std::vector<std::string> matching_prefixes(ledger::LedgerReports &l, const std::string &owner,
                                                         const std::string &prefix_glob);

// A --since/--until value: RFC 3339 ("2026-12-01T10:00:00Z", "2026-12-01T12:00:00+02:00",
// fractions of a second allowed; a date alone is its midnight UTC), or a duration back from
// `now_ms` in rclone's units ("7d", "36h", "1h30m", "2w"). Epoch milliseconds;
// LodgeError(USAGE) naming `flag` otherwise.
[[nodiscard]] int64_t parse_time_bound(std::string_view text, std::string_view flag, int64_t now_ms);

// An RFC 3339 date-time (or a date alone, midnight UTC) in epoch ms; nullopt when it is not one.
[[nodiscard]] std::optional<int64_t> parse_rfc3339_ms(std::string_view text);

// --metadata/--tag K=V: split at the first '=' (a metadata name lowercased, as upload
// records it). LodgeError(USAGE) naming `flag` without a name or '='.
[[nodiscard]] std::pair<std::string, std::string>
parse_search_pair(std::string_view text, std::string_view flag, bool lowercase_name);

// --sha256: 64 hex digits, returned lowercase; LodgeError(USAGE) naming `flag` otherwise.
[[nodiscard]] std::string parse_sha256_hex(std::string_view text, std::string_view flag);

} // namespace lodge::ops
