// rclone's filter rules over Glob (glob.cpp): --include, --exclude, --filter and their
// -from files, the directory rules a file rule implies, the size and age bounds and
// --exclude-if-present, and which rule decides for a path.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/util/fd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace lodge::match {
namespace {

bool is_off(std::string_view text) {
  return text.size() == 3 && (text[0] | 0x20) == 'o' && (text[1] | 0x20) == 'f' && (text[2] | 0x20) == 'f';
}

// s without the white space at either end.
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
