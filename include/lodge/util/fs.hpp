#pragma once
// Filesystem types by their statfs(2) f_type: one table for every part of lodge that names a
// filesystem or refuses one (the SQLite ledger driver refuses a network filesystem, `lodge
// doctor` names the filesystem and warns on a network one), so the two never disagree.

#include <optional>
#include <span>
#include <string_view>

namespace lodge::util {

struct FsType {
  unsigned long magic; // statfs(2) f_type (linux/magic.h and the filesystems' own headers)
  std::string_view name;
  // SQLite's POSIX locks and WAL shared memory cannot be trusted there: the file may be
  // shared by hosts whose locks do not see each other.
  bool network;
};

// Every filesystem type lodge knows by name, local and network.
[[nodiscard]] std::span<const FsType> fs_types();
// The name of the filesystem type `f_type`, or nullopt when it is not in the table.
[[nodiscard]] std::optional<std::string_view> fs_type_name(unsigned long f_type);
// The name of the network filesystem type `f_type`, or nullopt (a local type, or unknown).
[[nodiscard]] std::optional<std::string_view> network_fs_name(unsigned long f_type);

} // namespace lodge::util
