#pragma once
// The grace: how long after an upload's deadline (or a delete) its object may still be
// landing, so its cleanup waits that long. One rule for upload, sweep, repair and delete, and
// one set of cleanup settings from the configuration for all of them.

#include <cstdint>
#include <lodge/config/config.hpp>
#include <lodge/ops/cleanup.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

// The grace of `policy` when the configuration has that policy; otherwise (no policy
// known: a sweep's tasks do not record theirs; a row's policy since removed from the
// configuration) the longest grace of any policy: waiting longer is always the safe side.
[[nodiscard]] int64_t grace_for(const config::Config &c, const std::optional<std::string> &policy);

// The cleanup settings of a row of `policy` (every cleanup runs with them: upload's own
// compensation, sweep, consume): its grace as grace_for gives it (no policy: the longest),
// the retry back-off from the configuration's sweep settings, and who speaks in the log.
[[nodiscard]] CleanupSettings cleanup_settings(const config::Config &c,
                                               const std::optional<std::string> &policy = std::nullopt,
                                               CleanupSettings::Voice voice = CleanupSettings::Voice::job);

// The longest deadline plus the longest grace of any policy: once a temporary file of the
// store's was last in use that long ago, no upload or delete can still be using it.
[[nodiscard]] int64_t temp_dead_after(const config::Config &c);

} // namespace lodge::ops
