#include <algorithm>
#include <lodge/ops/upload/concurrency.hpp>

namespace lodge::ops {

const char *to_string(LevelReason r) {
  switch (r) {
  case LevelReason::grew:
    return "grew";
  case LevelReason::probe:
    return "probe";
  case LevelReason::not_worth_it:
    return "not_worth_it";
  case LevelReason::throttled:
    return "throttled";
  case LevelReason::errors:
    return "errors";
  case LevelReason::bound:
    return "bound";
  }
  return "?";
}

ConcurrencyController::ConcurrencyController(ConcurrencyLimits limits)
    : m_limits(limits), m_max(std::clamp(limits.max, 1, k_max_level)),
      m_level(limits.fixed ? std::max(limits.start, 1) : std::clamp(limits.start, 1, m_max)),
      m_peak(m_level) {}

std::optional<LevelChange> ConcurrencyController::set(int to, LevelReason why, double gain) {
  to = std::clamp(to, 1, m_max);
  if (to == m_level) return std::nullopt;
  LevelChange c{m_level, to, why, gain, {}};
  m_settling = to > m_level;
  m_level = to;
  m_peak = std::max(m_peak, to);
  return c;
}

std::optional<LevelChange> ConcurrencyController::observe(const ConcurrencySample &s) {
  if (m_limits.fixed) return std::nullopt;
  const bool throttled = s.throttled > m_throttled;
  const bool failed = s.errors > m_errors;
  m_throttled = s.throttled;
  m_errors = s.errors;
  if (throttled || failed) {
    // One burst (every request in flight answering alike) is answered once: the requests
    // sent before the back-off still come back for a while.
    if (s.now_ms - m_backed_off_at >= m_limits.window_ms)
      return back_off(s, throttled ? LevelReason::throttled : LevelReason::errors);
    m_window = s; // a window with refusals in it says nothing about the level's throughput
    m_started = true;
    m_busy = s.busy;
    return std::nullopt;
  }
  m_busy = std::max(m_busy, s.busy);
  if (!m_started || (m_settling && m_busy >= m_level)) {
    // The first window starts here; after a rise, once every new slot is busy (the new
    // workers connected and took files): what came before is not judged.
    m_window = s;
    m_started = true;
    m_settling = false;
    m_busy = s.busy;
    return std::nullopt;
  }
  const int64_t elapsed = s.now_ms - m_window.now_ms;
  if (elapsed < m_limits.window_ms) return std::nullopt;
  const double units = static_cast<double>(s.files - m_window.files) +
                       static_cast<double>(s.bytes - m_window.bytes) / k_bytes_per_unit;
  if (units < m_level && elapsed < k_long_window_ms) return std::nullopt;
  m_window = s;
  const bool saturated = m_busy >= m_level;
  m_busy = s.busy;
  if (m_settling || !saturated) {
    m_settling = false;
    return std::nullopt;
  }
  return end_window(units * 1000.0 / static_cast<double>(elapsed));
}

std::optional<LevelChange> ConcurrencyController::back_off(const ConcurrencySample &s, LevelReason why) {
  m_backed_off_at = s.now_ms;
  m_window = s;
  m_settling = false;
  m_busy = s.busy;
  m_started = true;
  // No doubling again: from here the level only creeps up by probes (additive increase).
  hold();
  m_last_rate = 0;
  m_last_level = 0;
  return set(why == LevelReason::throttled ? m_level / 2 : m_level * 3 / 4, why, 0);
}

void ConcurrencyController::hold() {
  m_phase = Phase::holding;
  m_held_windows = 0;
}

std::optional<LevelChange> ConcurrencyController::grow(double rate, double gain, double needed, int next,
                                                       LevelReason why) {
  if (m_last_rate > 0 && gain < needed) {
    // The step did not pay: the level before it does as well, at less cost.
    hold();
    return set(m_last_level, LevelReason::not_worth_it, gain);
  }
  m_last_rate = rate;
  m_last_level = m_level;
  if (m_level >= m_max) {
    hold();
    return std::nullopt;
  }
  return set(next, why, gain);
}

std::optional<LevelChange> ConcurrencyController::end_window(double rate) {
  const double gain = m_last_rate > 0 ? rate / m_last_rate - 1 : 0;
  switch (m_phase) {
  case Phase::slow_start:
    return grow(rate, gain, k_double_gain, m_level * 2,
                m_last_rate > 0 ? LevelReason::grew : LevelReason::probe);
  case Phase::holding:
    m_last_rate = rate;
    m_last_level = m_level;
    if (++m_held_windows < k_probe_after || m_level >= m_max) return std::nullopt;
    m_phase = Phase::probing;
    return set(m_level + std::max(1, m_level / 4), LevelReason::probe, 0);
  case Phase::probing:
    return grow(rate, gain, k_probe_gain, m_level + std::max(1, m_level / 4), LevelReason::grew);
  }
  return std::nullopt;
}

std::optional<LevelChange> ConcurrencyController::lower_max(int max, std::string detail) {
  if (m_limits.fixed) return std::nullopt;
  m_max = std::clamp(std::min(m_max, max), 1, k_max_level);
  if (m_last_level > m_max) m_last_level = m_max;
  auto c = set(std::min(m_level, m_max), LevelReason::bound, 0);
  if (c) c->detail = std::move(detail);
  return c;
}

} // namespace lodge::ops
