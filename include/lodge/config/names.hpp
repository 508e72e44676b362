#pragma once
// Names a user may have misspelled: the nearest known one (a command, an environment
// variable), and the LODGE_* variables of an environment that lodge does not know.

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lodge::config {

// The first of `known` nearest `word` by edit distance, fewer than `within` edits away; ""
// when none is.
[[nodiscard]] std::string nearest_name(const std::string &word, const std::vector<std::string> &known,
                                       size_t within);
// Each LODGE_* variable of `env` that is none of k_lodge_environment, with the nearest known
// name within 3 edits ("" when none is).
[[nodiscard]] std::vector<std::pair<std::string, std::string>>
unknown_environment(const std::map<std::string, std::string> &env);

} // namespace lodge::config
