#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <lodge/util/strings.hpp>

namespace lodge::util {

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
    ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
    --e;
  return std::string(s.substr(b, e - b));
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && to_lower(s.substr(0, prefix.size())) == to_lower(prefix);
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string hex_encode(const unsigned char *data, size_t len) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; ++i) {
    out.push_back(k_digits[data[i] >> 4]);
    out.push_back(k_digits[data[i] & 0xF]);
  }
  return out;
}

std::string hex_encode(std::string_view bytes) {
  return hex_encode(reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size());
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
constexpr std::string_view k_b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
} // namespace

std::optional<std::string> hex_decode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = hex_value(hex[i]);
    int lo = hex_value(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) |
                 (static_cast<unsigned char>(bytes[i + 1]) << 8) | static_cast<unsigned char>(bytes[i + 2]);
    out.push_back(k_b64[(v >> 18) & 63]);
    out.push_back(k_b64[(v >> 12) & 63]);
    out.push_back(k_b64[(v >> 6) & 63]);
    out.push_back(k_b64[v & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest == 1) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    out.push_back(k_b64[(v >> 18) & 63]);
    out.push_back(k_b64[(v >> 12) & 63]);
    out += "==";
  } else if (rest == 2) {
    uint32_t v =
        (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out.push_back(k_b64[(v >> 18) & 63]);
    out.push_back(k_b64[(v >> 12) & 63]);
    out.push_back(k_b64[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '=') {
      if (i < text.size() - 2) return std::nullopt;
      ++pad;
      continue;
    }
    if (pad > 0) return std::nullopt;
    auto pos = k_b64.find(c);
    if (pos == std::string_view::npos) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

namespace {
// Length of the valid UTF-8 sequence at s[i] and its code point, or 0 when invalid.
size_t utf8_decode(std::string_view s, size_t i, uint32_t &cp) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  if ((b & 0xE0) == 0xC0) {
    len = 2;
    cp = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3;
    cp = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4;
    cp = b & 0x07;
  } else
    return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  static constexpr std::array<uint32_t, 5> k_min{0, 0, 0x80, 0x800, 0x10000};
  if (cp < k_min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool is_bidi_control(uint32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200E || cp == 0x200F ||
         cp == 0x061C;
}
} // namespace

std::string escape_for_terminal(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t len = utf8_decode(s, i, cp);
    if (len == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || is_bidi_control(cp)) {
      std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02X" : "\\u{%04X}", cp);
      out += buf;
    } else if (cp == '\\') {
      out += "\\\\";
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

bool has_dot_segment(std::string_view path) {
  for (const auto &seg : split(path, '/'))
    if (seg == "." || seg == "..") return true;
  return false;
}

std::optional<std::string> unsafe_path_reason(std::string_view path) {
  for (const auto &seg : split(path, '/')) {
    if (seg.empty()) return std::string("an empty segment ('//', or '/' at the start)");
    if (seg == "." || seg == "..") return "a '" + seg + "' segment";
  }
  char buf[64];
  for (size_t i = 0; i < path.size();) {
    uint32_t cp = 0;
    size_t len = utf8_decode(path, i, cp);
    if (len == 0) return std::string("invalid UTF-8");
    if (cp == '\\') return std::string("a backslash");
    if (cp == '%') return std::string("a '%' (percent-encoding is decoded by servers)");
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || is_bidi_control(cp)) {
      std::snprintf(buf, sizeof buf, "a control character (U+%04X)", cp);
      return std::string(buf);
    }
    // Folded by NFKC into '.', '..', '...', '/' or '\\' (one dot leader, fullwidth full stop...).
    static constexpr std::array<uint32_t, 8> k_folds{0x2024, 0x2025, 0x2026, 0xFE52,
                                                     0xFF0E, 0xFF0F, 0xFE68, 0xFF3C};
    if (std::find(k_folds.begin(), k_folds.end(), cp) != k_folds.end()) {
      std::snprintf(buf, sizeof buf, "U+%04X (read as '.', '/' or a backslash after folding)", cp);
      return std::string(buf);
    }
    i += len;
  }
  return std::nullopt;
}

std::string percent_encode(std::string_view s, bool keep_slash) {
  static constexpr char k_digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(k_digits[c >> 4]);
      out.push_back(k_digits[c & 0xF]);
    }
  }
  return out;
}

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::string plural(int64_t n, std::string_view one, std::string_view many) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(one);
  if (!many.empty()) return out.append(many);
  return out.append(one).append("s");
}

} // namespace lodge::util
