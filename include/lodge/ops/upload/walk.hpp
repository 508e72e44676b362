#pragma once
// The walk of an upload's inputs: paths as given, directories recursively, every entry
// reached as (parent fd, name) so nothing the walk checked is resolved again.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/util/fd.hpp>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace lodge::ops {

// A file the walk found, to be opened by a worker. Inside a directory walk it is named
// relative to its parent directory's open descriptor, and carries the identity the walk
// saw, so no path component is resolved again after the walk checked it.
struct InputFile {
  std::string path;                 // for messages and results
  std::shared_ptr<util::Fd> parent; // the directory holding `name`; null: `name` is a path as given
  std::string name;
  // Not empty: the walk passes over this entry on purpose, for this reason (a symbolic
  // link inside a directory, not followed); nothing is to be opened.
  std::string skipped;
  // Not empty: the filter leaves this entry out, for this reason ("- *.o"); nothing is to be
  // opened. A directory left out (pruned: never opened, or holding an --exclude-if-present
  // marker: nothing under it visited) is one entry whose path and relative_path end in '/'.
  std::string excluded;
  // Relative to the directory argument it was found under; "" for a path as given (then
  // the row records `path`, normalized: see sanitize_relative_path).
  std::string relative_path;
  bool has_identity = false; // dev/ino below were seen by the walk and must match at open
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t size = 0; // as the walk saw it (the progress line's total; the worker stats again)
};

// The filter the walk applies (match::Filter): a directory it rules out is never opened.
// Patterns see the relative path the row would record: inside a directory argument the
// path relative to it, for a path as given its sanitize_relative_path.
struct WalkFilter {
  const match::Filter *filter = nullptr; // null or inactive: everything is taken
  int64_t now_ms = 0;                    // a file's age for --min-age/--max-age is now_ms - its mtime
};

// What walk_inputs passes over, by identity (st_dev, st_ino), wherever it meets them.
struct WalkSkips {
  std::string ledger;     // the ledger file; it and its -wal, -shm, -journal are skipped
  std::string store_root; // a file:// store's root directory ("" for none)
  // What the filter leaves out goes to `visit` with `excluded` set.
  WalkFilter filter;
};

// Walks inputs: paths given are taken as given; directories recursively in sorted
// order, each opened with openat(parent, name, O_NOFOLLOW|O_DIRECTORY) and checked
// against what was listed; symlinks are not followed unless asked, and then a
// directory already on the current path (a cycle) is skipped with a warning; a symlink
// not followed goes to `visit` with `skipped` set. FIFOs,
// sockets and devices are never opened (they go to `visit` with an error). The ledger's
// files and a file:// store's root are skipped with a warning; what `skip.filter` leaves
// out goes to `visit` with `excluded` set. Visit returns false to stop.
void walk_inputs(const std::vector<std::string> &paths, bool follow_symlinks, const WalkSkips &skip,
                 const std::function<bool(const InputFile &file, const std::optional<Error> &error)> &visit);

} // namespace lodge::ops
