#pragma once
// Readers the tests need of what lodge (or the kernel) writes, which lodge itself never
// reads back: the parts of an object key, percent-encoded metadata, a SigV4 query, a blob's
// tags, an error code's name, a process's start time. Kept here, out of lodge_core, so the library
// holds only what the program runs (lodge_testsupport, linked by the test binaries).

#include <cstdint>
#include <lodge/error.hpp>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::test {

struct ObjectKeyParts {
  std::string owner, run_prefix, uuid, relative_path;
  bool operator==(const ObjectKeyParts &) const = default;
};

// The parts of a key ledger::object_key_for made under `root`: nullopt for any other key.
// The uuid is the first segment after the owner that has a uuid's form (8-4-4-4-12
// lowercase hex): what precedes it is the run prefix (a run prefix with a segment of that
// form cannot be told apart), what follows it, non-empty, the relative path.
[[nodiscard]] std::optional<ObjectKeyParts> parse_object_key(std::string_view root, std::string_view key);

// util::percent_encode's inverse: decodes %XX escapes (either case); nullopt on a '%' not
// followed by two hex digits.
[[nodiscard]] std::optional<std::string> percent_decode(std::string_view s);

// aws::uri_encode's inverse: decodes %XX escapes (a '+' stays a '+'); bad escapes are kept.
[[nodiscard]] std::string uri_decode(std::string_view s);

// The tags of an Azure Get Blob Tags answer (<Tags><TagSet><Tag><Key>k</Key><Value>v</Value>...),
// azure::tags_xml's inverse; nullopt when it is not one.
[[nodiscard]] std::optional<std::map<std::string, std::string>> parse_blob_tags(std::string_view xml);

// The code whose stable name (errc_name) is `name`, or nullopt.
[[nodiscard]] std::optional<Errc> errc_from_name(std::string_view name);

// /proc/PID/stat's start time (field 22) of a live process; nullopt when there is no such
// process, or only its zombie.
[[nodiscard]] std::optional<int64_t> process_start_ticks(int64_t pid);

} // namespace lodge::test
