#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/units.hpp>
#include <utility>

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

namespace {

bool is_off(std::string_view text) {
  return text.size() == 3 && (text[0] | 0x20) == 'o' && (text[1] | 0x20) == 'f' && (text[2] | 0x20) == 'f';
}

// One number+unit pair of a duration, in ms; nullopt when unreadable.
std::string_view trim(std::string_view s) {
  static constexpr std::string_view k_space = " \t\r\n\v\f";
  auto b = s.find_first_not_of(k_space);
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(k_space);
  return s.substr(b, e - b + 1);
}

// The rule text read, or the error of the read that failed (errno) naming `source`.
std::string rule_text_or_throw(std::optional<std::string> text, std::string_view source) {
  if (text) return std::move(*text);
  int err = errno;
  std::string name = "filter file '" + std::string(source) + "'";
  if (err == EFBIG)
    throw LodgeError(Errc::usage, name + " holds more than " + std::to_string(k_max_rule_file_bytes >> 20) +
                                      " MiB: not a list of rules");
  throw LodgeError(Errc::usage, "cannot read " + name + ": " + std::strerror(err));
}

std::string read_rule_file(const std::string &path) {
  return rule_text_or_throw(util::read_file_limited(path, k_max_rule_file_bytes), path);
}

} // namespace

std::string read_rule_fd(int fd, std::string_view source) {
  return rule_text_or_throw(util::read_fd_limited(fd, k_max_rule_file_bytes), source);
}

namespace {

// Calls fn(line) for each line that is not blank or a comment, naming source:line in the
// error fn throws.
template <class Fn> void for_each_rule_line(std::string_view text, std::string_view source, Fn fn) {
  size_t number = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view raw = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++number;
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    try {
      fn(line);
    } catch (const LodgeError &e) {
      throw LodgeError(e.error().code,
                       std::string(source) + ":" + std::to_string(number) + ": " + e.error().message);
    }
  }
}

// rclone's directory globs for a file glob (its globToDirGlobs): the directories a matching
// file could lie in, each ending in '/', or {"/**"} (every directory) when it cannot tell.
// As rclone's, an unanchored "a/b/*.jpg" gives "a/b/" and "a/": x/ is not walked to find
// x/a/b/c.jpg, although that path matches the file rule.
std::vector<std::string> dir_globs(std::string glob) {
  auto too_hard = [&glob] {
    // rclone's test, which does not read escapes: "{{", "}}", or braces around a '/' or '**'.
    if (glob.find("{{") != std::string::npos || glob.find("}}") != std::string::npos) return true;
    size_t open = std::string::npos;
    for (size_t i = 0; i < glob.size(); ++i) {
      if (glob[i] == '{') open = i;
      if (glob[i] != '}' || open == std::string::npos) continue;
      std::string_view inner = std::string_view(glob).substr(open + 1, i - open - 1);
      if (inner.find('/') != std::string_view::npos || inner.find("**") != std::string_view::npos)
        return true;
      open = std::string::npos;
    }
    // Nested braces, which rclone refuses.
    int depth = 0;
    for (size_t i = 0; i < glob.size(); ++i) {
      if (glob[i] == '\\')
        ++i;
      else if (glob[i] == '{' && ++depth > 1)
        return true;
      else if (glob[i] == '}')
        --depth;
    }
    return false;
  };
  if (too_hard()) return {"/**"};
  std::string squashed;
  for (char c : glob)
    if (c != '/' || squashed.empty() || squashed.back() != '/') squashed.push_back(c);
  glob = std::move(squashed);
  std::vector<std::string> out;
  while (true) {
    auto slash = glob.rfind('/');
    auto stars = glob.rfind("**");
    std::string what;
    if (stars != std::string::npos && (slash == std::string::npos || stars > slash)) {
      slash = stars;
      what = "**";
    }
    if (slash == std::string::npos) break;
    glob.resize(slash);
    std::string dir = glob + what + "/";
    if (out.empty() || out.back() != dir) out.push_back(std::move(dir));
  }
  if (out.empty()) out.emplace_back("/**");
  return out;
}

} // namespace

std::optional<uint64_t> parse_filter_size(std::string_view text, std::string_view flag) {
  if (is_off(text)) return std::nullopt;
  return config::size_value(std::string(text), std::string(flag), Errc::usage);
}

std::optional<int64_t> parse_filter_age(std::string_view text, std::string_view flag) {
  if (is_off(text)) return std::nullopt;
  return config::duration_value(std::string(text), std::string(flag), Errc::usage, config::k_any_duration);
}

void Filter::add(bool include, std::string_view pattern) {
  std::string glob(pattern);
  bool dir_rule = !glob.empty() && glob.back() == '/';
  bool file_rule = !dir_rule;
  // Excluding "dir/" excludes it and all it holds, as "dir/**" does.
  if (dir_rule && !include) glob += "**";
  if (glob.find("**") != std::string::npos) dir_rule = file_rule = true;
  Glob compiled = Glob::compile(glob);
  std::string shown = (include ? "+ " : "- ") + std::string(pattern);
  if (file_rule) {
    // An include keeps the directories it could reach; an exclude of a file pattern rules
    // no directory out, except "*", which excludes every file anywhere.
    if (include || glob == "*") add_dir_rules_for(include, glob, shown);
    m_file_rules.push_back({include, compiled, shown});
  }
  if (dir_rule) m_dir_rules.push_back({include, std::move(compiled), shown});
}

void Filter::add_dir_rules_for(bool include, std::string_view pattern, const std::string &shown) {
  for (auto &dir : dir_globs(std::string(pattern))) {
    if (dir == "/") continue; // the root is always walked
    bool seen = std::any_of(m_dir_rules.begin(), m_dir_rules.end(),
                            [&](const Rule &r) { return r.include == include && r.glob.pattern() == dir; });
    if (!seen) m_dir_rules.push_back({include, Glob::compile(dir), shown});
  }
}

void Filter::clear() {
  m_file_rules.clear();
  m_dir_rules.clear();
}

void Filter::add_include(std::string_view pattern) {
  add(true, pattern);
  m_implied_exclude = true;
}

void Filter::add_exclude(std::string_view pattern) {
  add(false, pattern);
}

void Filter::add_rule_line(std::string_view line) {
  if (line == "!") {
    clear();
  } else if (line.substr(0, 2) == "+ ") {
    add(true, line.substr(2));
  } else if (line.substr(0, 2) == "- ") {
    add(false, line.substr(2));
  } else {
    throw LodgeError(Errc::usage, "malformed filter rule '" + std::string(line) +
                                      "': write '+ PATTERN', '- PATTERN' or '!'");
  }
}

void Filter::add_filter(std::string_view rule) {
  add_rule_line(rule);
}

void Filter::add_include_lines(std::string_view text, std::string_view source) {
  for_each_rule_line(text, source, [this](std::string_view line) { add(true, line); });
  m_implied_exclude = true;
}

void Filter::add_exclude_lines(std::string_view text, std::string_view source) {
  for_each_rule_line(text, source, [this](std::string_view line) { add(false, line); });
}

void Filter::add_filter_lines(std::string_view text, std::string_view source) {
  for_each_rule_line(text, source, [this](std::string_view line) { add_rule_line(line); });
}

void Filter::add_include_from(const std::string &path) {
  add_include_lines(read_rule_file(path), path);
}

void Filter::add_exclude_from(const std::string &path) {
  add_exclude_lines(read_rule_file(path), path);
}

void Filter::add_filter_from(const std::string &path) {
  add_filter_lines(read_rule_file(path), path);
}

void Filter::set_bounds(const FilterBounds &bounds) {
  if (bounds.min_size && bounds.max_size && *bounds.min_size > *bounds.max_size)
    throw LodgeError(Errc::usage, "--min-size " + std::to_string(*bounds.min_size) +
                                      " bytes is more than --max-size " + std::to_string(*bounds.max_size) +
                                      " bytes: no file could be taken");
  if (bounds.min_age_ms && bounds.max_age_ms && *bounds.min_age_ms > *bounds.max_age_ms)
    throw LodgeError(Errc::usage, "--min-age is more than --max-age: no file could be taken");
  if ((bounds.min_age_ms && *bounds.min_age_ms < 0) || (bounds.max_age_ms && *bounds.max_age_ms < 0))
    throw LodgeError(Errc::usage, "--min-age and --max-age cannot be negative");
  m_bounds = bounds;
}

void Filter::add_exclude_if_present(std::string_view name) {
  std::string_view base = name;
  if (!base.empty() && base.back() == '/') base.remove_suffix(1);
  if (base.empty() || base == "." || base == ".." || base.find('/') != std::string_view::npos ||
      base.find('\0') != std::string_view::npos)
    throw LodgeError(Errc::usage, "--exclude-if-present '" + std::string(name) +
                                      "': give one file name (or a directory name ending in '/')");
  m_markers.emplace_back(name);
}

std::optional<std::string>
Filter::marker_exclusion(const std::function<bool(std::string_view, bool)> &dir_has) const {
  for (const auto &m : m_markers) {
    bool want_dir = m.back() == '/';
    std::string_view name(m);
    if (want_dir) name.remove_suffix(1);
    if (dir_has(name, want_dir)) return "--exclude-if-present " + m;
  }
  return std::nullopt;
}

bool Filter::excluded_by_marker(const std::function<bool(std::string_view, bool)> &dir_has) const {
  return marker_exclusion(dir_has).has_value();
}

bool Filter::active() const {
  return !m_file_rules.empty() || !m_dir_rules.empty() || m_implied_exclude || !m_markers.empty() ||
         m_bounds.min_size || m_bounds.max_size || m_bounds.min_age_ms || m_bounds.max_age_ms;
}

namespace {
// What the implied last rule of an --include says when it decides.
constexpr const char *k_not_included = "no --include matched";
} // namespace

std::optional<std::string> Filter::path_exclusion(std::string_view rel_path) const {
  for (const auto &r : m_file_rules)
    if (r.glob.matches(rel_path)) return r.include ? std::nullopt : std::optional(r.shown);
  return m_implied_exclude ? std::optional<std::string>(k_not_included) : std::nullopt;
}

bool Filter::path_included(std::string_view rel_path) const {
  return !path_exclusion(rel_path);
}

std::optional<std::string> Filter::file_exclusion(std::string_view rel_path, uint64_t size, int64_t mtime_ms,
                                                  int64_t now_ms) const {
  if (m_bounds.min_size && size < *m_bounds.min_size) return "--min-size";
  if (m_bounds.max_size && size > *m_bounds.max_size) return "--max-size";
  int64_t age = now_ms - mtime_ms;
  if (m_bounds.min_age_ms && age < *m_bounds.min_age_ms) return "--min-age";
  if (m_bounds.max_age_ms && age > *m_bounds.max_age_ms) return "--max-age";
  return path_exclusion(rel_path);
}

bool Filter::file_included(std::string_view rel_path, uint64_t size, int64_t mtime_ms, int64_t now_ms) const {
  return !file_exclusion(rel_path, size, mtime_ms, now_ms);
}

std::optional<std::string> Filter::dir_exclusion(std::string_view rel_dir) const {
  std::string dir(rel_dir);
  while (!dir.empty() && dir.back() == '/')
    dir.pop_back();
  if (dir.empty()) return std::nullopt;
  dir.push_back('/');
  for (const auto &r : m_dir_rules)
    if (r.glob.matches(dir)) return r.include ? std::nullopt : std::optional(r.shown);
  return m_implied_exclude ? std::optional<std::string>(k_not_included) : std::nullopt;
}

bool Filter::dir_excluded(std::string_view rel_dir) const {
  return dir_exclusion(rel_dir).has_value();
}

std::vector<std::string> Filter::describe() const {
  std::vector<std::string> out;
  auto list = [&out](const std::vector<Rule> &rules, const char *prefix) {
    for (const auto &r : rules)
      out.push_back(std::string(prefix) + (r.include ? "+ " : "- ") + r.glob.pattern());
  };
  list(m_file_rules, "");
  if (m_implied_exclude) out.emplace_back("- /**");
  list(m_dir_rules, "dir ");
  if (m_implied_exclude) out.emplace_back("dir - /**");
  return out;
}

} // namespace lodge::match
