#pragma once
// Failpoints for crash and fault tests: LODGE_FAILPOINTS="name=action;..." with action
// crash | error | sleep:MS | pause:PATH. Inert until configure() is called with a spec;
// compiled out (hit() always false) when LODGE_WITH_FAILPOINTS is not defined.

#include <span>
#include <string>
#include <string_view>

namespace lodge::failpoint {

// Every name the code knows; an unknown name in a spec is a usage error.
[[nodiscard]] std::span<const std::string_view> known_names();

// Parses spec and arms the failpoints; each firing is appended as "pid name action" to
// log_path when it is not empty. Throws LodgeError(Errc::usage) on a bad spec.
void configure(std::string_view spec, const std::string &log_path);

// Fires `name` if armed: crash SIGKILLs the process, sleep and pause block, error
// returns true (the caller then raises the fault a real failure would). False otherwise.
[[nodiscard]] bool hit(std::string_view name);

} // namespace lodge::failpoint
