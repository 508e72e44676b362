#pragma once
// Diagnostics. Core code logs through here and never prints; the CLI installs the sink
// (stderr) and the level. Every line passes through redact() before it reaches the sink.

#include <functional>
#include <string>
#include <string_view>

namespace lodge::util::log {

enum class Level { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

using Sink = std::function<void(Level, std::string_view)>;

void set_sink(Sink sink);
void set_level(Level level);
[[nodiscard]] bool enabled(Level level);
void write(Level level, std::string_view message);

inline void error(std::string_view m) {
  write(Level::error, m);
}
inline void warn(std::string_view m) {
  write(Level::warn, m);
}
inline void info(std::string_view m) {
  write(Level::info, m);
}
inline void debug(std::string_view m) {
  write(Level::debug, m);
}

// Removes secrets from a line: Authorization header values, X-Amz-Signature and
// X-Amz-Security-Token query values, x-amz-security-token headers, an Azure SAS's sig=.
[[nodiscard]] std::string redact(std::string_view line);

} // namespace lodge::util::log
