// The ledger as a search index (`lodge list`'s filters, `lodge get`'s selection) and the
// retention writes (`lodge prune`): scan_files, prefix_summaries, shared_outside,
// prune_snapshot, soft_delete_expired.
#include "sql_ledger.hpp"

#include <string>

namespace lodge::ledger {
namespace {
[[noreturn]] void not_yet(const char *what) {
  throw LodgeError(Errc::internal, std::string(what) + " is not implemented on this ledger yet");
}
} // namespace

void SqlLedger::scan_files(const FileQuery &f, const std::function<bool(const FileRecord &)> &visit) {
  if (!f.run_prefixes.empty() || f.prefix_start || !f.metadata.empty() || !f.tags.empty() || f.since ||
      f.until || f.sha256 || f.min_size || f.max_size || f.expired_by || f.latest || f.sort != FileSort::id)
    not_yet("scan_files with these filters");
  std::string sql =
      std::string("SELECT ") + k_file_cols + " FROM file_upload WHERE (?1 = '*' OR owner_id = ?1)" +
      (f.run_prefix ? " AND run_prefix = ?2" : "") + (f.path ? " AND relative_path = ?3" : "") +
      (f.include_dead ? "" : " AND is_deleted = 0") + " ORDER BY id" + (f.descending ? " DESC" : "");
  auto st = q(sql);
  st.bind(1, f.owner);
  if (f.run_prefix) st.bind(2, *f.run_prefix);
  if (f.path) st.bind(3, *f.path);
  int64_t seen = 0;
  while (st.step()) {
    auto r = read_file(st);
    if (f.path_prefix && r.relative_path.compare(0, f.path_prefix->size(), *f.path_prefix) != 0) continue;
    if (f.limit && seen >= *f.limit) return;
    ++seen;
    if (!visit(r)) return;
  }
}

void SqlLedger::prefix_summaries(const FileQuery & /*q*/,
                                 const std::function<bool(const PrefixSummary &)> & /*visit*/) {
  not_yet("prefix_summaries");
}

std::vector<SharedRow> SqlLedger::shared_outside(const std::string & /*owner*/,
                                                 const std::string & /*run_prefix*/) {
  not_yet("shared_outside");
}

PruneOutcome SqlLedger::prune_snapshot(const std::string & /*owner*/, const std::string & /*run_prefix*/,
                                       int64_t /*created_until*/, const std::vector<int64_t> & /*keep_ids*/,
                                       int64_t /*now*/, int64_t /*grace_ms*/, int /*max_retries*/) {
  not_yet("prune_snapshot");
}

PruneOutcome SqlLedger::soft_delete_expired(int64_t /*now*/, int64_t /*grace_ms*/, int /*max_retries*/,
                                            int /*limit*/) {
  not_yet("soft_delete_expired");
}

} // namespace lodge::ledger
