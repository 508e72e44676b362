#pragma once
// The grace: how long after an upload's deadline (or a delete) its object may still be
// landing, so its cleanup waits that long. One rule for upload, sweep, repair and delete.

#include <cstdint>
#include <lodge/config/config.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

// The grace of `policy` when the configuration has that policy; otherwise (no policy
// known: a sweep's tasks do not record theirs; a row's policy since removed from the
// configuration) the longest grace of any policy: waiting longer is always the safe side.
[[nodiscard]] int64_t grace_for(const config::Config &c, const std::optional<std::string> &policy);

} // namespace lodge::ops
