#pragma once
// `lodge doctor`: checks, before a scheduled run fails, what would make it fail. Each check
// is one line (ok, warn or fail, its name, what was found and, unless ok, the fix). Nothing
// is changed but one probe object under the store's <root>/.lodge/, written then removed.

#include <cstdint>
#include <functional>
#include <lodge/store/store.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops::doctor {

enum class Level { ok, warn, fail };

struct Check {
  std::string name; // "ledger.schema", "store.reachable", ...
  Level level = Level::ok;
  std::string message;
  std::string fix; // "" when ok
};

[[nodiscard]] const char *level_name(Level l);

// Below this much free space next to the ledger: warn.
inline constexpr uint64_t k_min_free_bytes = 256ULL << 20;
// A WAL file larger than this: warn (checkpoints are being starved by long readers).
inline constexpr uint64_t k_max_wal_bytes = 64ULL << 20;
// Clock skew against the store's Date header: warn past 5 minutes, fail past 15 (SigV4
// requests are refused past 15).
inline constexpr int64_t k_skew_warn_ms = int64_t{5} * 60 * 1000;
inline constexpr int64_t k_skew_fail_ms = int64_t{15} * 60 * 1000;

// The checks of a SQLite ledger file at `path` that need no open ledger: it exists, its
// filesystem and free space, its schema version against this lodge's, PRAGMA quick_check,
// the WAL's size. `usable` is set when the ledger can be opened by this lodge (then the
// caller may go on to the binding check).
[[nodiscard]] std::vector<Check> sqlite_ledger(const std::string &path, bool &usable);

// The check of the filesystem a SQLite ledger's directory `dir` is on, by its statfs(2)
// f_type: warn on a network filesystem (util::network_fs_name, the table the SQLite driver
// refuses by), else ok, naming the type.
[[nodiscard]] Check filesystem(const std::string &dir, unsigned long f_type);

// The clock check: `server_date` is a response's Date header ("" when none came), `local_ms`
// this host's wall clock when it came.
[[nodiscard]] Check clock_skew(const std::string &server_date, int64_t local_ms);

// The store checks through its own interface: reachable with these credentials (a signed
// LIST), then a probe object `probe_key` put and removed (and, on the way, whether version
// listing and staged-upload listing are supported); then the bucket's versioning (where the
// store has one) against lodge's noncurrent-version rule, and whether lodge's lifecycle
// backstop is installed (where lodge can tell; where it cannot, how to install it).
[[nodiscard]] std::vector<Check> store_checks(store::ObjectStore &st, const std::string &probe_key);

} // namespace lodge::ops::doctor
