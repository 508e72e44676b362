#pragma once
// Failpoints for crash and fault tests: LODGE_FAILPOINTS="name=action;..." with action
// crash | error | sleep:MS | pause:PATH. Inert until configure() is called with a spec;
// compiled out (hit() always false) when LODGE_WITH_FAILPOINTS is not defined.

#include <span>
#include <string>
#include <string_view>

namespace lodge::failpoint {

// The actions a failpoint can take, as bits: crash, sleep and pause work at every point;
// error only where the site raises the failure a real fault would raise there.
enum Action : unsigned { crash = 1U << 0, error = 1U << 1, sleep = 1U << 2, pause = 1U << 3 };
inline constexpr unsigned k_universal = crash | sleep | pause;

struct Point {
  std::string_view name;
  unsigned actions;          // Action bits this point honours
  std::string_view on_error; // what `error` does there (empty when it refuses error)
};

// Every failpoint the code has, with what it accepts; a spec naming anything else is a
// usage error.
[[nodiscard]] std::span<const Point> table();
// The action names ("crash", "error", "sleep", "pause") in Action bit order.
[[nodiscard]] std::string_view action_name(Action a);

// Parses spec and arms the failpoints; each firing is appended as "pid name action" to
// log_path when it is not empty. Throws LodgeError(Errc::usage) on a bad spec: an unknown
// name, an unknown action, or an action the named point does not honour.
void configure(std::string_view spec, const std::string &log_path);

// Fires `name` if armed: crash SIGKILLs the process, sleep and pause block, error
// returns true (the caller then raises the fault a real failure would). False otherwise.
[[nodiscard]] bool hit(std::string_view name);

} // namespace lodge::failpoint
