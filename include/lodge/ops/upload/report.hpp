#pragma once
// What an upload's results mean for the command that asked: a run that found no file, and a
// direct upload's word and exit status. Pure: the caller prints.

#include <lodge/ops/upload/direct.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lodge::ops {

// Whether the run found no file at all to upload (nothing but what it skipped: links,
// FIFOs; what the filters left out is not a file of the run).
[[nodiscard]] bool no_file_found(const RunReport &rep);
// What --if-no-files says: the sources named (`files_from` "-" is stdin), and what the
// filters left out of them.
[[nodiscard]] std::string no_files_message(const std::vector<std::string> &paths,
                                           const std::string &files_from, const RunTally &t);

// `lodge upload --json`: one file's result (reserve and confirm print it with their own word
// as the outcome), and the run's closing {"summary": ...}; `no_files_warning`: what
// --if-no-files warn said ("" when nothing).
[[nodiscard]] nlohmann::json result_json(const FileResult &r);
[[nodiscard]] nlohmann::json summary_json(const RunReport &rep, bool dry_run,
                                          const std::string &no_files_warning);

// `lodge reserve --json`: its result with `word` as the outcome, and the URL to send the
// bytes to (with its headers), or one per part, and when they expire.
[[nodiscard]] nlohmann::json reservation_json(const DirectReservation &d, const char *word);

// reserve's word for its result: reserved (a new reservation), replayed, duplicate, rejected
// or failed.
[[nodiscard]] const char *reservation_word(bool reserved, const FileResult &r);
// The exit status of one direct result (reserve, confirm): 0 when it went as asked, the
// error's own status when the whole command could not work (usage, storage, ledger), 1
// otherwise.
[[nodiscard]] int direct_exit_status(const FileResult &r);
// reserve's: 0 for a reservation or a replay, else direct_exit_status.
[[nodiscard]] int reservation_exit_status(bool reserved, const FileResult &r);

} // namespace lodge::ops
