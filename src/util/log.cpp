#include <atomic>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>
#include <regex>

namespace lodge::util::log {
namespace {
std::mutex g_mutex;
Sink g_sink;
std::atomic<int> g_level{static_cast<int>(Level::warn)};
} // namespace

void set_sink(Sink sink) {
  std::lock_guard lock(g_mutex);
  g_sink = std::move(sink);
}

void set_level(Level level) {
  g_level = static_cast<int>(level);
}

bool enabled(Level level) {
  return static_cast<int>(level) <= g_level.load();
}

void write(Level level, std::string_view message) {
  if (!enabled(level)) return;
  std::string line = redact(message);
  std::lock_guard lock(g_mutex);
  if (g_sink) g_sink(level, line);
}

std::string redact(std::string_view line) {
  static const std::regex k_auth(R"(((?:^|\n)\s*authorization\s*:\s*)[^\n]*)", std::regex::icase);
  static const std::regex k_token_header(R"(((?:^|\n)\s*x-amz-security-token\s*:\s*)[^\n]*)",
                                         std::regex::icase);
  static const std::regex k_query(R"(((?:X-Amz-Signature|X-Amz-Security-Token|X-Amz-Credential)=)[^&\s]*)",
                                  std::regex::icase);
  static const std::regex k_sig(R"((Signature=)[0-9a-fA-F]{16,})");
  // An Azure SAS token's signature (a query parameter named sig).
  static const std::regex k_sas(R"(((?:^|[?&\s])sig=)[^&\s]*)");
  std::string s(line);
  s = std::regex_replace(s, k_auth, "$1[REDACTED]");
  s = std::regex_replace(s, k_token_header, "$1[REDACTED]");
  s = std::regex_replace(s, k_query, "$1[REDACTED]");
  s = std::regex_replace(s, k_sig, "$1[REDACTED]");
  s = std::regex_replace(s, k_sas, "$1[REDACTED]");
  return s;
}

} // namespace lodge::util::log
