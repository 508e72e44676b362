#pragma once
// Getting files back: `lodge show`, `get`, `cat` and `url`. A file is named by its record
// id or by its relative path (with the owner and --prefix); its bytes are checked against
// the ledger's size and SHA-256 while they stream, and `get` writes them atomically (a
// temporary file beside the target, fsync, rename), never following a symlink it did not
// create and never writing outside the output directory.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/fd.hpp>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

// A file argument on the command line: a token of digits is a record id; anything else
// a relative path, looked up by (owner, prefix, path).
struct FileRef {
  std::optional<int64_t> id;
  std::string path;
};
[[nodiscard]] FileRef parse_file_ref(const std::string &token);

// The row a reference names; NOT_FOUND (naming it) when there is none. An id names any
// owner's row; a path is looked up among the owner's rows under that prefix (the newest
// alive one when a path was uploaded more than once).
[[nodiscard]] Result<ledger::FileRecord> find_record(ledger::LedgerReports &l, const FileRef &ref,
                                                     const std::string &owner, const std::string &prefix);

// NOT_ACTIVE, naming the file and its state, unless the row is ACTIVE and alive.
[[nodiscard]] Status require_active(const ledger::FileRecord &r);

// What people see as a row's state: DELETED for a soft-deleted ACTIVE row, else its
// upload_status (UPLOADING, ACTIVE, UPLOAD_FAILED).
[[nodiscard]] std::string shown_status(const ledger::FileRecord &r);

// The path a row restores to under an output directory (its relative path).
[[nodiscard]] std::string restore_path(const ledger::FileRecord &r);

// Every alive ACTIVE row of the owner under the prefix, one per relative path (the newest
// when a path was uploaded more than once), in path order.
// The rows `filter` selects whose relative path matches `path_glob` (when given) by lodge's
// one matcher (match::glob_match: rclone's dialect, `*` stops at '/', `**` crosses it; see
// lodge-filters(7)). A bad pattern is LodgeError(USAGE) naming it, before the query.
[[nodiscard]] std::vector<ledger::FileRecord> list_files(ledger::LedgerReports &l,
                                                         const ledger::FileQuery &filter,
                                                         const std::optional<std::string> &path_glob);

[[nodiscard]] std::vector<ledger::FileRecord>
active_under_prefix(ledger::LedgerReports &l, const std::string &owner, const std::string &prefix);

// The same rows, streamed in that order to `visit` (false stops), never held whole: the
// ledger is read in pages of `page` rows (keyset: each after the last row of the one
// before) and each page's read is over before its rows are visited, so no read stays open
// while the caller downloads.
void scan_active_under_prefix(ledger::LedgerReports &l, const std::string &owner, const std::string &prefix,
                              const std::function<bool(const ledger::FileRecord &)> &visit,
                              int64_t page = 1000);

// `lodge show`: the row's history-relevant fields and its cleanup task's state.
[[nodiscard]] nlohmann::json show_json(const ledger::FileRecord &r,
                                       const std::optional<ledger::TaskRecord> &t);

using Sink = std::function<bool(const char *, size_t)>;

// Streams the row's object to sink, hashing as it goes. CONTENT_MISMATCH naming the file
// when the bytes' size or SHA-256 differ from the row's (the sink has seen them by then:
// a caller that must not keep a bad copy writes to a temporary file). A longer object is
// cut off as soon as it passes the recorded size.
[[nodiscard]] Status read_verified(store::ObjectStore &st, const ledger::FileRecord &r, const Sink &sink);

// Where `get` writes: the output directory (opened once) and how names are made in it.
struct Destination {
  util::Fd dir;
  std::string shown;       // the directory as the user named it ("" for the current one)
  std::string file_name;   // -o FILE: the one name to write; empty: derived from the row
  bool keep_paths = false; // restore relative paths (an output directory) or base names only
};

// -o as given: "" is the current directory (base names); an existing directory, a path
// ending in '/' or `many` (get --prefix) is an output directory (created when missing)
// that keeps relative paths; anything else is the file to write. IO_ERROR naming the
// path when it cannot be opened or created.
[[nodiscard]] Result<Destination> open_destination(const std::string &output, bool many);

enum class GetOutcome { written, skipped, failed };
[[nodiscard]] const char *to_string(GetOutcome o);

struct GetOptions {
  bool force = false;              // replace an existing different file
  std::function<bool()> stop = {}; // true: abort (the temporary file is removed)
};

struct GetResult {
  std::string file; // the output path, as shown to people
  GetOutcome outcome = GetOutcome::failed;
  std::optional<Error> error;
};

// Writes one ACTIVE row's bytes into the destination: a temporary file in the target
// directory, verified while written, fsync'd, renamed to its name (over an existing
// different file only with force; an identical one is skipped without a download), the
// directory fsync'd. Subdirectories of the relative path are created and traversed one
// component at a time with O_NOFOLLOW; an unsafe relative path is BAD_NAME. On any
// failure the temporary file is removed and nothing is left under the final name.
[[nodiscard]] GetResult get_file(store::ObjectStore &st, const ledger::FileRecord &r, Destination &dest,
                                 const GetOptions &opts);
// `lodge get --json`: one file's outcome.
[[nodiscard]] nlohmann::json get_json(const GetResult &res, const ledger::FileRecord &r);

} // namespace lodge::ops
