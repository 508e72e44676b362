#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/records.hpp>

namespace lodge::ledger {

const char *to_string(DedupScope s) {
  switch (s) {
  case DedupScope::owner:
    return "owner";
  case DedupScope::prefix:
    return "prefix";
  case DedupScope::none:
    return "none";
  }
  return "?";
}

std::optional<DedupScope> parse_dedup_scope(std::string_view s) {
  for (auto v : {DedupScope::owner, DedupScope::prefix, DedupScope::none})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

std::string object_key_for(const std::string &root, const std::string &owner, const std::string &run_prefix,
                           const std::string &uuid, const std::string &relative_path) {
  // The uuid stays: a key is unique to its row and never reused, whatever the path.
  return root + owner + "/" + (run_prefix.empty() ? "" : run_prefix + "/") + uuid + "/" + relative_path;
}

} // namespace lodge::ledger
