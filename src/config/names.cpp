// Names a user may have misspelled (names.hpp).
#include <algorithm>
#include <lodge/config/config.hpp>
#include <lodge/config/names.hpp>

namespace lodge::config {
namespace {
size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
} // namespace

std::string nearest_name(const std::string &word, const std::vector<std::string> &known, size_t within) {
  std::string best;
  size_t best_d = within;
  for (const auto &k : known)
    if (const size_t d = edit_distance(word, k); d < best_d) {
      best_d = d;
      best = k;
    }
  return best;
}

std::vector<std::pair<std::string, std::string>>
unknown_environment(const std::map<std::string, std::string> &env) {
  const std::vector<std::string> known(std::begin(k_lodge_environment), std::end(k_lodge_environment));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto &entry : env) {
    const auto &name = entry.first;
    if (name.rfind("LODGE_", 0) != 0 || std::find(known.begin(), known.end(), name) != known.end()) continue;
    out.emplace_back(name, nearest_name(name, known, 4));
  }
  return out;
}

} // namespace lodge::config
