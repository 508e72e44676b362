#pragma once
// The owner a command acts for: --owner, LODGE_OWNER, then the file's default_owner (load()
// leaves whichever wins in Config::default_owner). One check, for the CLI and for ops.

#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <string>

namespace lodge::config {

// USAGE when none was given.
[[nodiscard]] inline const std::string &owner(const Config &c) {
  if (c.default_owner.empty())
    throw LodgeError(Errc::usage,
                     "no owner: pass --owner, set LODGE_OWNER, or set default_owner in the config");
  return c.default_owner;
}

} // namespace lodge::config
