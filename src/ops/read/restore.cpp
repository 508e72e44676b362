// What `lodge get` restores of many files (restore.hpp).
#include <lodge/ops/read/restore.hpp>
#include <lodge/util/strings.hpp>
#include <map>

namespace lodge::ops {

std::vector<ledger::FileRecord> rows_to_restore(ledger::LedgerReports &l, Selection s) {
  s.active_only = true;
  std::vector<ledger::FileRecord> rows;
  std::map<std::string, int64_t> by_path;
  std::optional<std::string> clash;
  select_files(l, s, [&](const ledger::FileRecord &r) {
    auto [it, fresh] = by_path.emplace(restore_path(r), r.id);
    if (!fresh) {
      clash = "get: files #" + std::to_string(it->second) + " and #" + std::to_string(r.id) +
              " both restore to '" + util::escape_for_terminal(it->first) +
              "': add --latest, or narrow the selection (--prefix, --prefix-glob)";
      return false;
    }
    rows.push_back(r);
    return true;
  });
  if (clash) throw LodgeError(Errc::usage, *clash);
  if (rows.empty())
    throw LodgeError(Errc::not_found,
                     "get: no ACTIVE file of owner " + s.query.owner + " matches the selection");
  return rows;
}

void require_any_under_prefix(ledger::LedgerReports &l, const std::string &owner, const std::string &prefix) {
  bool any = false;
  scan_active_under_prefix(l, owner, prefix, [&](const ledger::FileRecord &) {
    any = true;
    return false;
  });
  if (!any)
    throw LodgeError(Errc::not_found, "no ACTIVE file of owner " + owner + " under prefix '" +
                                          util::escape_for_terminal(prefix) + "'");
}

void RestoreTally::add(const GetResult &res, const ledger::FileRecord &r) {
  ++files;
  if (res.outcome == GetOutcome::written) {
    ++written;
    bytes += static_cast<uint64_t>(r.size);
  } else if (res.outcome == GetOutcome::skipped) {
    ++skipped;
  } else {
    ++failed;
    if (res.error && store::is_unreachable(*res.error)) ++unreachable;
    last_error = res.error;
  }
}

int RestoreTally::exit_status(bool interrupted) const {
  if (interrupted) return errc_info(Errc::interrupted).exit_code;
  if (failed == 0) return errc_info(Errc::ok).exit_code;
  if (files == 1 && last_error) return last_error->exit_code();
  if (unreachable == failed && written + skipped == 0) return errc_info(Errc::storage_unavailable).exit_code;
  return errc_info(Errc::storage_error).exit_code;
}

} // namespace lodge::ops
