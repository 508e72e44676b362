#include <algorithm>
#include <atomic>
#include <cctype>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

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
  // A URL's password: scheme://user:PASSWORD@, up to the last '@' before a space or a quote
  // (a malformed URL's password may hold '/', '?', '[' or '@'); host:PORT/ is no password.
  static const std::regex k_userinfo(
      R"(([A-Za-z][A-Za-z0-9+.-]*://[^\s'"/?#@:\[]*:)(?![0-9]*(?:[/?#\s'"]|$))[^\s'"]*@)");
  // A password keyword's value (libpq's keyword strings, a URL query): quoted, up to its
  // closing quote or the end of an unterminated one, or bare.
  static const std::regex k_password(R"(((?:^|[^A-Za-z0-9_])password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'"]+))",
                                     std::regex::icase);
  // An Azure connection string's key or SAS.
  static const std::regex k_account_key(R"(((?:AccountKey|SharedAccessSignature)\s*=\s*)[^;\s'"]+)",
                                        std::regex::icase);
  std::string s(line);
  s = std::regex_replace(s, k_auth, "$1[REDACTED]");
  s = std::regex_replace(s, k_token_header, "$1[REDACTED]");
  s = std::regex_replace(s, k_query, "$1[REDACTED]");
  s = std::regex_replace(s, k_sig, "$1[REDACTED]");
  s = std::regex_replace(s, k_sas, "$1[REDACTED]");
  s = std::regex_replace(s, k_userinfo, "$1***@");
  s = std::regex_replace(s, k_password, "$1***");
  s = std::regex_replace(s, k_account_key, "$1***");
  return s;
}

namespace {
// Shorter values would match ordinary words of a message; the patterns above still apply.
constexpr size_t k_min_secret = 4;

void add_secret(std::vector<std::string> &out, std::string_view value) {
  if (value.size() < k_min_secret) return;
  out.emplace_back(value);
  // The percent-decoded form too, where it decodes (a library may quote either).
  std::string decoded;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '%' && i + 2 < value.size() && std::isxdigit(static_cast<unsigned char>(value[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(value[i + 2]))) {
      decoded += static_cast<char>(std::stoi(std::string(value.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      decoded += value[i];
    }
  }
  if (decoded != value && decoded.size() >= k_min_secret) out.push_back(decoded);
}

// The secrets a location holds, read leniently (it may be malformed): the password of a
// URL's user information (up to the last '@'), and each password= value, quoted or bare
// (up to a space, and up to a '&' as in a URL's query).
std::vector<std::string> secrets_of(std::string_view source) {
  std::vector<std::string> out;
  if (auto scheme = source.find("://"); scheme != std::string_view::npos) {
    auto start = scheme + 3;
    auto at = source.rfind('@');
    if (at != std::string_view::npos && at > start) {
      auto userinfo = source.substr(start, at - start);
      if (auto colon = userinfo.find(':'); colon != std::string_view::npos)
        add_secret(out, userinfo.substr(colon + 1));
    }
  }
  for (size_t at = source.find("password"); at != std::string_view::npos;
       at = source.find("password", at + 1)) {
    size_t i = at + 8;
    while (i < source.size() && std::isspace(static_cast<unsigned char>(source[i])))
      ++i;
    if (i >= source.size() || source[i] != '=') continue;
    ++i;
    while (i < source.size() && std::isspace(static_cast<unsigned char>(source[i])))
      ++i;
    auto value = source.substr(i);
    if (!value.empty() && value.front() == '\'') {
      size_t end = 1;
      while (end < value.size() && value[end] != '\'')
        end += value[end] == '\\' ? 2 : 1;
      add_secret(out, value.substr(1, std::min(end, value.size()) - 1));
      continue;
    }
    auto bare = value.substr(0, value.find_first_of(" \t\n"));
    add_secret(out, bare);
    add_secret(out, bare.substr(0, bare.find('&')));
  }
  // Longest first: a secret that holds another is replaced whole.
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.size() > b.size(); });
  return out;
}
} // namespace

std::string redact(std::string_view line, std::string_view source) {
  std::string s(line);
  for (const auto &secret : secrets_of(source))
    for (size_t at = s.find(secret); at != std::string::npos; at = s.find(secret, at + 3))
      s.replace(at, secret.size(), "***");
  return redact(s);
}

bool url_has_userinfo(std::string_view url) {
  auto scheme = url.find("://");
  return scheme != std::string_view::npos && url.find('@', scheme + 3) != std::string_view::npos;
}

} // namespace lodge::util::log
