#include <lodge/util/fs.hpp>

namespace lodge::util {
namespace {

constexpr FsType k_fs_types[] = {
    {0xEF53, "ext4", false},      {0x58465342, "xfs", false},     {0x9123683E, "btrfs", false},
    {0x01021994, "tmpfs", false}, {0x794C7630, "overlay", false}, {0x2FC12FC1, "zfs", false},
    {0xF2F52010, "f2fs", false},  {0x6969, "nfs", true},          {0x517B, "smb", true},
    {0xFF534D42, "cifs", true},   {0xFE534D42, "smb2", true},     {0x564C, "ncp", true},
    {0x65735546, "fuse", true},   {0x01021997, "9p", true},       {0x6B414653, "afs", true},
    {0x47504653, "gpfs", true},   {0x00C36400, "ceph", true},     {0x013111A8, "ibrix", true},
    {0x0BD00BD0, "lustre", true}, {0x19830326, "fhgfs", true},    {0x5346414F, "openafs", true},
};

} // namespace

std::span<const FsType> fs_types() {
  return k_fs_types;
}

namespace {
const FsType *find(unsigned long f_type) {
  for (const auto &t : fs_types())
    if (t.magic == f_type) return &t;
  return nullptr;
}
} // namespace

std::optional<std::string_view> fs_type_name(unsigned long f_type) {
  if (const auto *t = find(f_type)) return t->name;
  return std::nullopt;
}

std::optional<std::string_view> network_fs_name(unsigned long f_type) {
  if (const auto *t = find(f_type); t && t->network) return t->name;
  return std::nullopt;
}

} // namespace lodge::util
