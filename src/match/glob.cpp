// rclone's glob dialect: a pattern read into a sequence of nodes (literals, '?', '*', '**',
// classes as Go's regexp reads them, brace alternatives) and matched against a path by
// sets of positions, without backtracking. Glob and glob_match of lodge/match/filter.hpp.
#include <algorithm>
#include <array>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lodge::match {
namespace {

// A byte that is not part of valid UTF-8 becomes a character of its own, above Unicode,
// so any file name can be matched (and a pattern can name such a byte literally).
constexpr char32_t k_raw_byte_base = 0x110000;
constexpr char32_t k_max_char = k_raw_byte_base + 0xFF;

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1FU) : len == 3 ? (b & 0x0FU) : (b & 0x07U);
    bool ok = len != 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xC0U) == 0x80;
      cp = (cp << 6) | (c & 0x3FU);
    }
    // Overlong forms, surrogates and values past Unicode are not UTF-8 either.
    static constexpr std::array<char32_t, 5> k_min_for_len{0, 0, 0x80, 0x800, 0x10000};
    if (ok && (cp < k_min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (!ok) {
      out.push_back(k_raw_byte_base + b);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

using Ranges = std::vector<std::pair<char32_t, char32_t>>;

Ranges complement(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  char32_t next = 0;
  for (auto [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = std::max<char32_t>(next, hi + 1);
  }
  if (next <= k_max_char) out.emplace_back(next, k_max_char);
  return out;
}

// \d \s \w (and the capitals, their complements), as Go's regexp reads them.
std::optional<Ranges> perl_class(char32_t c) {
  Ranges r;
  switch (c) {
  case 'd':
  case 'D':
    r = {{'0', '9'}};
    break;
  case 's':
  case 'S':
    r = {{'\t', '\n'}, {'\f', '\r'}, {' ', ' '}};
    break;
  case 'w':
  case 'W':
    r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    break;
  default:
    return std::nullopt;
  }
  return c >= 'a' ? r : complement(std::move(r));
}

// [:name:] (and [:^name:]) inside a bracket class.
std::optional<Ranges> ascii_class(std::u32string_view name) {
  static const std::array<std::pair<std::u32string_view, Ranges>, 12> k_classes{{
      {U"alnum", {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}}},
      {U"alpha", {{'A', 'Z'}, {'a', 'z'}}},
      {U"ascii", {{0, 0x7F}}},
      {U"blank", {{'\t', '\t'}, {' ', ' '}}},
      {U"cntrl", {{0, 0x1F}, {0x7F, 0x7F}}},
      {U"digit", {{'0', '9'}}},
      {U"graph", {{'!', '~'}}},
      {U"lower", {{'a', 'z'}}},
      {U"print", {{' ', '~'}}},
      {U"punct", {{'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'}}},
      {U"space", {{'\t', '\r'}, {' ', ' '}}},
      {U"upper", {{'A', 'Z'}}},
  }};
  bool negated = !name.empty() && name[0] == '^';
  if (negated) name.remove_prefix(1);
  if (name == U"word") return negated ? complement(*perl_class('w')) : *perl_class('w');
  if (name == U"xdigit") {
    Ranges r{{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
    return negated ? complement(std::move(r)) : r;
  }
  for (const auto &[n, r] : k_classes)
    if (n == name) return negated ? complement(r) : r;
  return std::nullopt;
}

enum class Kind { literal, any, star, globstar, cls, alt };

struct Node {
  Kind kind = Kind::literal;
  char32_t ch = 0;
  bool negated = false;                // cls
  Ranges ranges;                       // cls
  std::vector<Glob::Seq> alternatives; // alt
};

} // namespace

struct Glob::Seq {
  std::vector<Node> nodes;
};

namespace {

// Braces nest this deep at most: each level is a recursion in the parser and the matcher.
constexpr int k_max_brace_depth = 32;

[[noreturn]] void bad_pattern(std::string_view pattern, const std::string &why) {
  // A hostile pattern may be megabytes long: its start names it.
  constexpr size_t k_shown = 200;
  std::string shown(pattern.substr(0, k_shown));
  if (pattern.size() > k_shown) shown += "... (" + std::to_string(pattern.size()) + " bytes)";
  throw LodgeError(Errc::usage, "bad filter pattern '" + shown + "': " + why);
}

// A recursive-descent reader of one pattern into a Seq.
class Parser {
public:
  explicit Parser(std::string_view pattern) : m_pattern(pattern), m_text(decode(pattern)) {}

  Glob::Seq parse_top() {
    Glob::Seq seq = parse_seq(false);
    if (m_pos < m_text.size()) bad_pattern(m_pattern, "'}' without its '{'");
    return seq;
  }

private:
  [[nodiscard]] bool more() const { return m_pos < m_text.size(); }
  [[nodiscard]] char32_t peek() const { return m_text[m_pos]; }

  // Up to the end, or (inside braces) up to the ',' or '}' that ends this alternative.
  Glob::Seq parse_seq(bool in_braces) {
    Glob::Seq seq;
    while (more()) {
      char32_t c = peek();
      if (in_braces && (c == ',' || c == '}')) break;
      if (c == '}') bad_pattern(m_pattern, "'}' without its '{'");
      if (c == ']') bad_pattern(m_pattern, "']' without its '['");
      seq.nodes.push_back(parse_node());
    }
    return seq;
  }

  Node parse_node() {
    char32_t c = m_text[m_pos++];
    Node n;
    switch (c) {
    case '\\':
      return parse_escape(/*in_class=*/false, n);
    case '*': {
      size_t stars = 1;
      while (more() && peek() == '*') {
        ++stars;
        ++m_pos;
      }
      if (stars > 2) bad_pattern(m_pattern, "more than two '*' in a row");
      n.kind = stars == 1 ? Kind::star : Kind::globstar;
      return n;
    }
    case '?':
      n.kind = Kind::any;
      return n;
    case '[':
      return parse_class();
    case '{':
      return parse_braces();
    default:
      n.ch = c;
      return n;
    }
  }

  // rclone hands `\c` to Go's regexp, which reads a letter or digit as an escape of its
  // own (\n, \b, \pL, \1...) and refuses a non-ASCII one: only \d \s \w and their
  // capitals mean here what they mean there, so any other is refused.
  Node parse_escape(bool in_class, Node &n) {
    if (!more()) bad_pattern(m_pattern, in_class ? "'[' without its ']'" : "a '\\' with nothing to escape");
    char32_t c = m_text[m_pos++];
    if (auto r = perl_class(c)) {
      n.kind = Kind::cls;
      n.ranges = std::move(*r);
      return n;
    }
    bool alnum = (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (alnum || c >= 0x80)
      bad_pattern(m_pattern, R"(a '\' escapes punctuation or a space, or is one of \d \s \w \D \S \W)");
    n.ch = c;
    return n;
  }

  // After '[': members up to the closing ']', as Go's regexp reads them (rclone hands the
  // class to it): '^' first negates, '!' is a member. rclone finds the class's end by
  // counting '[' and ']' (a '\' does not escape them there); a class whose end the two
  // readings place differently ("[]x]", "[\]]", "[a[b]c]") is refused.
  Node parse_class() {
    const size_t counted_end = rclone_class_end();
    Node n;
    n.kind = Kind::cls;
    if (more() && peek() == '^') {
      n.negated = true;
      ++m_pos;
    }
    bool first = true;
    while (true) {
      if (!more()) bad_pattern(m_pattern, "'[' without its ']'");
      char32_t c = peek();
      if (c == ']' && !first) break;
      first = false;
      if (c == '[' && m_pos + 1 < m_text.size() && m_text[m_pos + 1] == ':') {
        parse_named(n);
        continue;
      }
      auto lo = parse_member(n);
      if (!lo) continue; // \d and friends
      char32_t hi = *lo;
      if (more() && peek() == '-' && m_pos + 1 < m_text.size() && m_text[m_pos + 1] != ']') {
        ++m_pos;
        auto h = parse_member(n);
        if (!h) bad_pattern(m_pattern, "a class escape cannot end a range");
        hi = *h;
        if (hi < *lo) bad_pattern(m_pattern, "a range runs backwards");
      }
      n.ranges.emplace_back(*lo, hi);
    }
    if (m_pos != counted_end)
      bad_pattern(m_pattern, "a '[' or ']' inside a class other than a [:name:]'s (match them outside a "
                             "class, as \\[ and \\])");
    ++m_pos; // the ']'
    return n;
  }

  // Where rclone ends the class that starts at m_pos: the ']' that balances the '[' before it.
  [[nodiscard]] size_t rclone_class_end() const {
    size_t depth = 1;
    for (size_t i = m_pos; i < m_text.size(); ++i) {
      if (m_text[i] == '[') ++depth;
      if (m_text[i] == ']' && --depth == 0) return i;
    }
    bad_pattern(m_pattern, "'[' without its ']'");
  }

  // One character of a class, or nullopt when it was \d-style (its ranges added to n).
  std::optional<char32_t> parse_member(Node &n) {
    char32_t c = m_text[m_pos++];
    if (c != '\\') return c;
    Node tmp;
    parse_escape(/*in_class=*/true, tmp);
    if (tmp.kind == Kind::cls) {
      n.ranges.insert(n.ranges.end(), tmp.ranges.begin(), tmp.ranges.end());
      return std::nullopt;
    }
    return tmp.ch;
  }

  void parse_named(Node &n) {
    std::u32string_view rest(m_text);
    rest.remove_prefix(m_pos + 2);
    auto end = rest.find(U":]");
    std::optional<Ranges> r;
    if (end != std::u32string_view::npos) r = ascii_class(rest.substr(0, end));
    if (!r) bad_pattern(m_pattern, "unknown character class after '[:'");
    n.ranges.insert(n.ranges.end(), r->begin(), r->end());
    m_pos += 2 + end + 2;
  }

  Node parse_braces() {
    if (more() && peek() == '{') bad_pattern(m_pattern, "regular expressions ('{{...}}') are not supported");
    if (++m_depth > k_max_brace_depth)
      bad_pattern(m_pattern, "braces nest more than " + std::to_string(k_max_brace_depth) + " levels deep");
    Node n;
    n.kind = Kind::alt;
    while (true) {
      n.alternatives.push_back(parse_seq(true));
      if (!more()) bad_pattern(m_pattern, "'{' without its '}'");
      if (m_text[m_pos++] == '}') break;
    }
    --m_depth;
    return n;
  }

  std::string_view m_pattern;
  std::u32string m_text;
  size_t m_pos = 0;
  int m_depth = 0; // of braces
};

// As in Go's regexp, a class may take a '/': [^x], \W and [!-0] do ('?' and '*' never).
bool class_matches(const Node &n, char32_t c) {
  bool in = std::any_of(n.ranges.begin(), n.ranges.end(),
                        [c](const auto &r) { return r.first <= c && c <= r.second; });
  return in != n.negated;
}

using Positions = std::vector<char>; // [i]: the pattern so far can end just before path[i]

Positions run(const Glob::Seq &seq, const std::u32string &path, Positions cur);

Positions step(const Node &n, const std::u32string &path, const Positions &cur) {
  const size_t len = path.size();
  Positions next(len + 1, 0);
  switch (n.kind) {
  case Kind::literal:
  case Kind::any:
  case Kind::cls:
    for (size_t i = 0; i < len; ++i) {
      if (!cur[i]) continue;
      char32_t c = path[i];
      bool ok = n.kind == Kind::literal ? c == n.ch : n.kind == Kind::any ? c != '/' : class_matches(n, c);
      if (ok) next[i + 1] = 1;
    }
    break;
  case Kind::star: { // any run without '/'
    bool on = false;
    for (size_t i = 0; i <= len; ++i) {
      on = (on && i > 0 && path[i - 1] != '/') || cur[i];
      next[i] = on ? 1 : 0;
    }
    break;
  }
  case Kind::globstar: { // any run at all
    bool on = false;
    for (size_t i = 0; i <= len; ++i) {
      on = on || cur[i];
      next[i] = on ? 1 : 0;
    }
    break;
  }
  case Kind::alt:
    for (const auto &alt : n.alternatives) {
      Positions out = run(alt, path, cur);
      for (size_t i = 0; i <= len; ++i)
        next[i] = static_cast<char>(next[i] | out[i]);
    }
    break;
  }
  return next;
}

// Every node keeps a set of positions, so matching costs pattern length x path length
// however many stars a pattern holds: no backtracking to blow up on hostile names.
Positions run(const Glob::Seq &seq, const std::u32string &path, Positions cur) {
  for (const auto &n : seq.nodes) {
    cur = step(n, path, cur);
    if (std::none_of(cur.begin(), cur.end(), [](char v) { return v != 0; })) break;
  }
  return cur;
}

} // namespace

Glob::Glob(std::string pattern, bool anchored, std::shared_ptr<const Seq> seq)
    : m_pattern(std::move(pattern)), m_anchored(anchored), m_seq(std::move(seq)) {}

Glob Glob::compile(std::string_view pattern) {
  bool anchored = !pattern.empty() && pattern.front() == '/';
  std::string_view body = anchored ? pattern.substr(1) : pattern;
  Parser parser(body);
  auto seq = std::make_shared<const Seq>(parser.parse_top());
  return Glob(std::string(pattern), anchored, std::move(seq));
}

bool Glob::matches(std::string_view path) const {
  std::u32string p = decode(path);
  Positions start(p.size() + 1, 0);
  start[0] = 1;
  // Unanchored: the pattern may begin at any element of the path.
  if (!m_anchored)
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] == '/') start[i + 1] = 1;
  Positions end = run(*m_seq, p, std::move(start));
  return end[p.size()] != 0;
}

bool glob_match(std::string_view pattern, std::string_view path) {
  return Glob::compile(pattern).matches(path);
}

} // namespace lodge::match
