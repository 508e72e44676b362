// The JSON of `lodge list`. write_list_json is the listing's per-row cost: it appends runs
// of bytes that need no escaping whole, formats times and numbers by arithmetic (no
// gmtime, strftime or std::string per value) and copies object_options as it is stored
// when that text is already what nlohmann's dump of it would be (store::to_json wrote it).
#include <charconv>
#include <lodge/ops/read/list_json.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/util/clock.hpp>
#include <nlohmann/json.hpp>
#include <string_view>

namespace lodge::ops {

nlohmann::json list_json(const ledger::FileRecord &f) {
  auto opt = [](const auto &v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  auto time = [](std::optional<int64_t> ms) {
    return ms ? nlohmann::json(util::format_rfc3339_ms(*ms)) : nlohmann::json(nullptr);
  };
  return nlohmann::json{{"id", f.id},
                        {"owner", f.owner_id},
                        {"name", f.original_name},
                        {"path", f.relative_path},
                        {"prefix", f.run_prefix},
                        {"dedup", ledger::to_string(f.dedup_scope)},
                        {"object_key", f.object_key},
                        {"shares", opt(f.content_of)},
                        {"status", shown_status(f)},
                        {"upload_status", ledger::to_string(f.upload_status)},
                        {"deleted", f.is_deleted},
                        {"sha256", f.sha256},
                        {"size", f.size},
                        {"media_type", f.media_type},
                        {"content_type", f.object_content_type()},
                        {"object_options", f.object_options.empty()
                                               ? nlohmann::json::object()
                                               : nlohmann::json::parse(f.object_options)},
                        {"created_at", time(f.created_at)},
                        {"activated_at", time(f.activated_at)},
                        {"expires_at", time(f.expires_at)},
                        {"failure_reason", opt(f.failure_reason)}};
}

namespace {

using namespace std::string_view_literals;

constexpr std::string_view k_fffd = "\xEF\xBF\xBD";

// A byte a JSON string holds as it is: printable ASCII (and DEL) but '"' and '\\'.
constexpr bool plain(unsigned char c) {
  return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

// The end of the UTF-8 sequence starting at s[i] (a byte >= 0x80). well: whether it is one
// of the well-formed sequences of Unicode's table 3-7; if not, the end is where it went
// wrong: after a byte that cannot start one, else at the byte that broke it (or the end).
size_t utf8_end(std::string_view s, size_t i, bool &well) {
  const auto c = static_cast<unsigned char>(s[i]);
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF; // the bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    well = false;
    return i + 1;
  }
  size_t j = i + 1;
  for (; need > 0; --need, ++j) {
    if (j == s.size()) break;
    const auto d = static_cast<unsigned char>(s[j]);
    if (d < lo || d > hi) break;
    lo = 0x80, hi = 0xBF;
  }
  well = need == 0;
  return j;
}

// An ASCII byte that is not plain, as nlohmann's dump escapes it.
void put_escape(std::string &out, unsigned char c) {
  switch (c) {
  case '"':
    out += R"(\")"sv;
    return;
  case '\\':
    out += R"(\\)"sv;
    return;
  case '\b':
    out += R"(\b)"sv;
    return;
  case '\f':
    out += R"(\f)"sv;
    return;
  case '\n':
    out += R"(\n)"sv;
    return;
  case '\r':
    out += R"(\r)"sv;
    return;
  case '\t':
    out += R"(\t)"sv;
    return;
  default:
    break;
  }
  static constexpr char hex[] = "0123456789abcdef";
  const char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xF]};
  out.append(u, sizeof u);
}

// s as a JSON string, as nlohmann's dump(-1, ' ', false, replace) writes it: \b \f \n \r
// \t \" \\, other control characters as \u00xx, the rest as it is; each byte where a UTF-8
// sequence goes wrong becomes U+FFFD (a byte that cannot start one is replaced whole; one
// that breaks a sequence ends it and is read again), and so does a sequence cut by the end.
// Runs of plain bytes are appended whole.
void put_json_string(std::string &out, std::string_view s) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    size_t run = i;
    while (run < s.size() && plain(static_cast<unsigned char>(s[run])))
      ++run;
    out.append(s.data() + i, run - i);
    if (run == s.size()) break;
    i = run;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      put_escape(out, c);
      ++i;
      continue;
    }
    bool well = true;
    const size_t end = utf8_end(s, i, well);
    if (well)
      out.append(s.data() + i, end - i);
    else
      out += k_fffd;
    i = end;
  }
  out += '"';
}

// v's decimal digits into p[0, n), zero-padded.
void put_digits(char *p, int64_t v, int n) {
  for (int k = n - 1; k >= 0; --k, v /= 10)
    p[k] = static_cast<char>('0' + v % 10);
}

// 10000-01-01T00:00:00Z in ms: below it (and from 1970) the year has four digits.
constexpr int64_t k_year_10000_ms = 253402300800000;
constexpr int64_t k_day_ms = 86400000;

// ms as util::format_rfc3339_ms writes it ("2026-12-01T10:00:00.000Z"), quoted. From 1970
// to 9999 computed here (the civil date of the day number: the inverse of
// days_from_civil, H. Hinnant's chrono-compatible algorithms), else by util's.
void put_json_time(std::string &out, std::optional<int64_t> ms) {
  if (!ms) {
    out += "null"sv;
    return;
  }
  if (*ms < 0 || *ms >= k_year_10000_ms) {
    put_json_string(out, util::format_rfc3339_ms(*ms));
    return;
  }
  const int64_t z = *ms / k_day_ms + 719468; // days since 0000-03-01
  const int64_t era = z / 146097;
  const int64_t doe = z - era * 146097;                                      // [0, 146096]
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; // [0, 399]
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               // [0, 365], from March
  const int64_t mp = (5 * doy + 2) / 153;                                    // [0, 11], March is 0
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  const int64_t in_day = *ms % k_day_ms;
  char t[] = R"("0000-00-00T00:00:00.000Z")";
  put_digits(t + 1, year, 4);
  put_digits(t + 6, month, 2);
  put_digits(t + 9, day, 2);
  put_digits(t + 12, in_day / 3600000, 2);
  put_digits(t + 15, in_day / 60000 % 60, 2);
  put_digits(t + 18, in_day / 1000 % 60, 2);
  put_digits(t + 21, in_day % 1000, 3);
  out.append(t, sizeof t - 1);
}

void put_int(std::string &out, int64_t v) {
  char b[24];
  const auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, static_cast<size_t>(r.ptr - b));
}

// is_canonical_json's reader (list_json.hpp): a recursive descent that accepts only the
// bytes dump writes, nesting at most k_depth deep.
class Canonical {
public:
  explicit Canonical(std::string_view s) : m_s(s) {}
  [[nodiscard]] bool whole() { return value(0) && m_i == m_s.size(); }

private:
  static constexpr int k_depth = 32;

  [[nodiscard]] bool at(char c) const { return m_i < m_s.size() && m_s[m_i] == c; }
  // Steps over c when it is next.
  bool take(char c) {
    if (!at(c)) return false;
    ++m_i;
    return true;
  }

  bool value(int depth) {
    if (m_i == m_s.size() || depth > k_depth) return false;
    switch (m_s[m_i]) {
    case '{':
      return object(depth);
    case '[':
      return array(depth);
    case '"':
      return string(false);
    case 't':
      return word("true"sv);
    case 'f':
      return word("false"sv);
    case 'n':
      return word("null"sv);
    default:
      return number();
    }
  }

  bool object(int depth) {
    ++m_i;
    if (take('}')) return true;
    std::string_view last;
    for (bool first = true;; first = false) {
      const size_t start = m_i + 1;
      if (!at('"') || !string(true)) return false;
      const std::string_view key = m_s.substr(start, m_i - 1 - start);
      if (!first && !(last < key)) return false;
      last = key;
      if (!take(':') || !value(depth + 1)) return false;
      if (take('}')) return true;
      if (!take(',')) return false;
    }
  }

  bool array(int depth) {
    ++m_i;
    if (take(']')) return true;
    for (;;) {
      if (!value(depth + 1)) return false;
      if (take(']')) return true;
      if (!take(',')) return false;
    }
  }

  // A string at m_i (its opening quote); a key may have no escape.
  bool string(bool key) {
    for (++m_i; m_i < m_s.size();) {
      const auto c = static_cast<unsigned char>(m_s[m_i]);
      if (take('"')) return true;
      if (c < 0x20) return false;
      if (c >= 0x80) {
        bool well = true;
        m_i = utf8_end(m_s, m_i, well);
        if (!well) return false;
      } else if (c == '\\') {
        if (key || !escape()) return false;
      } else {
        ++m_i;
      }
    }
    return false;
  }

  // An escape at m_i, as dump writes it: the short forms, else \u00xx (lowercase) of a
  // control character that has none.
  bool escape() {
    if (m_i + 1 >= m_s.size()) return false;
    const char e = m_s[m_i + 1];
    if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
      m_i += 2;
      return true;
    }
    const std::string_view u = m_s.substr(m_i + 1, 5);
    if (u.size() != 5 || u.substr(0, 3) != "u00"sv || (u[3] != '0' && u[3] != '1')) return false;
    const char h = u[4];
    const bool digit = h >= '0' && h <= '9', letter = h >= 'a' && h <= 'f';
    if (!digit && !letter) return false;
    const int v = (u[3] - '0') * 16 + (digit ? h - '0' : h - 'a' + 10);
    if (v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r') return false;
    m_i += 6;
    return true;
  }

  bool word(std::string_view w) {
    if (m_s.substr(m_i, w.size()) != w) return false;
    m_i += w.size();
    return true;
  }

  bool number() {
    const bool minus = take('-');
    const size_t start = m_i;
    while (m_i < m_s.size() && m_s[m_i] >= '0' && m_s[m_i] <= '9')
      ++m_i;
    const size_t n = m_i - start;
    if (n == 0 || n > 18 || (n > 1 && m_s[start] == '0') || (minus && m_s[start] == '0')) return false;
    return !at('.') && !at('e') && !at('E');
  }

  std::string_view m_s;
  size_t m_i = 0;
};

void put_object_options(std::string &out, const std::string &text) {
  if (text.empty())
    out += "{}"sv;
  else if (is_canonical_json(text))
    out += text;
  else
    out += nlohmann::json::parse(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace

bool is_canonical_json(std::string_view text) {
  return Canonical(text).whole();
}

void write_list_json(std::string &out, const ledger::FileRecord &f) {
  // The keys in list_json's dump order: nlohmann's objects are sorted by key.
  out += R"({"activated_at":)"sv;
  put_json_time(out, f.activated_at);
  out += R"(,"content_type":)"sv;
  put_json_string(out, f.object_content_type());
  out += R"(,"created_at":)"sv;
  put_json_time(out, f.created_at);
  out += R"(,"dedup":)"sv;
  put_json_string(out, ledger::to_string(f.dedup_scope));
  out += f.is_deleted ? R"(,"deleted":true,"expires_at":)"sv : R"(,"deleted":false,"expires_at":)"sv;
  put_json_time(out, f.expires_at);
  out += R"(,"failure_reason":)"sv;
  if (f.failure_reason)
    put_json_string(out, *f.failure_reason);
  else
    out += "null"sv;
  out += R"(,"id":)"sv;
  put_int(out, f.id);
  out += R"(,"media_type":)"sv;
  put_json_string(out, f.media_type);
  out += R"(,"name":)"sv;
  put_json_string(out, f.original_name);
  out += R"(,"object_key":)"sv;
  put_json_string(out, f.object_key);
  out += R"(,"object_options":)"sv;
  put_object_options(out, f.object_options);
  out += R"(,"owner":)"sv;
  put_json_string(out, f.owner_id);
  out += R"(,"path":)"sv;
  put_json_string(out, f.relative_path);
  out += R"(,"prefix":)"sv;
  put_json_string(out, f.run_prefix);
  out += R"(,"sha256":)"sv;
  put_json_string(out, f.sha256);
  out += R"(,"shares":)"sv;
  if (f.content_of)
    put_int(out, *f.content_of);
  else
    out += "null"sv;
  out += R"(,"size":)"sv;
  put_int(out, f.size);
  out += R"(,"status":)"sv;
  put_json_string(out, shown_status(f));
  out += R"(,"upload_status":)"sv;
  put_json_string(out, ledger::to_string(f.upload_status));
  out += '}';
}

} // namespace lodge::ops
