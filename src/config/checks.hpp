#pragma once
// Internal to the config layer: the checks that reading the configuration file
// (config_file.cpp) and layering it with the environment and the flags (config.cpp) share.

#include <cstdint>
#include <lodge/error.hpp>
#include <string>

namespace lodge::config {

// Throws LodgeError(CONFIG_INVALID) "<path>: <what>".
[[noreturn]] void bad(const std::string &path, const std::string &what);
// S3's bounds on one part (the last may be smaller); the same for every store lodge writes.
// Throws LodgeError(code) naming `name` when `bytes` is outside them.
[[nodiscard]] uint64_t part_size_value(uint64_t bytes, const std::string &name, Errc code);
// An owner id (or a segment of a run prefix): 1-128 characters of A-Z a-z 0-9 . _ -, not
// '.', '..' or '.lodge'.
[[nodiscard]] bool valid_owner(const std::string &s);
// bad(path, ...) unless `owner` is empty or a valid owner id.
void check_owner(const std::string &owner, const std::string &path);

} // namespace lodge::config
