#include <algorithm>
#include <lodge/ops/grace.hpp>

namespace lodge::ops {

int64_t grace_for(const config::Config &c, const std::optional<std::string> &policy) {
  if (policy) {
    auto it = c.policies.find(*policy);
    if (it != c.policies.end()) return it->second.grace_ms;
  }
  int64_t g = 0;
  for (const auto &entry : c.policies)
    g = std::max(g, entry.second.grace_ms);
  return g;
}

CleanupSettings cleanup_settings(const config::Config &c, const std::optional<std::string> &policy,
                                 CleanupSettings::Voice voice) {
  CleanupSettings s;
  s.grace_ms = grace_for(c, policy);
  s.backoff_base_ms = c.sweep.backoff_base_ms;
  s.backoff_max_ms = c.sweep.backoff_max_ms;
  s.voice = voice;
  return s;
}

int64_t temp_dead_after(const config::Config &c) {
  int64_t deadline = 0;
  for (const auto &entry : c.policies)
    deadline = std::max(deadline, entry.second.deadline_ms);
  return deadline + grace_for(c, std::nullopt);
}

} // namespace lodge::ops
