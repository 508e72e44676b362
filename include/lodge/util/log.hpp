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
// X-Amz-Security-Token query values, x-amz-security-token headers, an Azure SAS's sig=, a
// URL's password (scheme://user:***@), a password= value (libpq's keyword strings, a URL's
// query), an Azure connection string's AccountKey= and SharedAccessSignature=.
[[nodiscard]] std::string redact(std::string_view line);
// redact(line), after replacing by *** every secret `source` holds wherever the line has it:
// the password of its URL user information and each password= value, raw and
// percent-decoded. For a library's message about `source` (a ledger location, a queue URL),
// which may quote a piece of one it could not parse ("invalid percent-encoded token: ...").
[[nodiscard]] std::string redact(std::string_view line, std::string_view source);
// Whether a URL (scheme://...) carries user information: an '@' anywhere after "://" (a
// malformed one's password may hold '/' or '?'). Endpoints refuse it: a password there
// would reach every message that names the endpoint, and the ledger's store binding.
[[nodiscard]] bool url_has_userinfo(std::string_view url);

} // namespace lodge::util::log
