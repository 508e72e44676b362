#pragma once
// Which files `lodge upload` takes, in rclone's filtering dialect: include/exclude rules
// over the relative path lodge records, first matching rule wins; size and age bounds; and
// marker files that exclude their directory (--exclude-if-present). Pure: the walker asks,
// this answers; no file is opened here except the rule files handed to add_*_from.
//
// Patterns (glob_match) mean what rclone's mean (it turns them into Go regular expressions):
// `*` any run of characters but `/`, `**` any run including `/`, `?` one character but `/`,
// `[...]` a class as Go reads it (`[^...]` negated, and then it may take a `/`; `!` is a
// member; ranges, [:alpha:]-style names, \d \s \w and their capitals), `{a,b}`
// alternatives (which may nest, 32 levels at most, where rclone refuses any nesting), `\c`
// the character c for punctuation and space. A leading `/` anchors the pattern at the root;
// otherwise it matches the path's tail starting at a `/` boundary ("file.jpg" matches
// "a/file.jpg", not "afile.jpg"). Characters are Unicode code points of UTF-8 paths; a byte
// that is not UTF-8 is a character of its own. Refused, where rclone would read them with
// Go's regexp: `{{regexp}}`, a `\` before a letter, digit or non-ASCII character other than
// \d \s \w \D \S \W, and a `[` or `]` inside a class other than a [:name:]'s.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::match {

// A compiled pattern. compile() throws LodgeError(USAGE) naming the pattern on a bad one
// (unbalanced `[`, `{` or `}`, a trailing `\`, `***`, `{{regexp}}`).
class Glob {
public:
  [[nodiscard]] static Glob compile(std::string_view pattern);
  // Whether `path` (relative, no leading `/`; a directory ends in `/`) matches.
  [[nodiscard]] bool matches(std::string_view path) const;
  [[nodiscard]] const std::string &pattern() const { return m_pattern; }

  struct Seq;

private:
  Glob(std::string pattern, bool anchored, std::shared_ptr<const Seq> seq);
  std::string m_pattern;
  bool m_anchored = false;
  std::shared_ptr<const Seq> m_seq;
};

// The most a rule file (--filter-from, --include-from, --exclude-from) may hold: an
// endless input such as /dev/zero stops there.
inline constexpr size_t k_max_rule_file_bytes = size_t{16} << 20;
// Reads a rule file from an open descriptor (the CLI's stdin, "-") within that bound;
// LodgeError(USAGE) naming `source` when it cannot be read or holds more.
[[nodiscard]] std::string read_rule_fd(int fd, std::string_view source);

// Glob::compile(pattern).matches(path): for one-off checks (`lodge list --path-glob`).
// Throws LodgeError(USAGE) on a bad pattern.
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view path);

// The size and age bounds, inclusive at both ends as rclone's: --min-size 1K takes a file of
// exactly 1024 bytes, --max-age 2d one exactly two days old.
struct FilterBounds {
  std::optional<uint64_t> min_size;  // bytes
  std::optional<uint64_t> max_size;  // bytes
  std::optional<int64_t> min_age_ms; // the file's age is now - mtime
  std::optional<int64_t> max_age_ms;
};

// --min-size/--max-size values: a size (config::size_value: "10M", "512K", "1.5G"; a bare
// number is bytes), or "off" (nullopt). LodgeError(USAGE) naming `flag` otherwise.
[[nodiscard]] std::optional<uint64_t> parse_filter_size(std::string_view text, std::string_view flag);
// --min-age/--max-age values in ms: a duration (config::duration_value: "2d", "1h30m",
// "1.5h", "2w"), or "off" (nullopt). Absolute dates are refused. LodgeError(USAGE) otherwise.
[[nodiscard]] std::optional<int64_t> parse_filter_age(std::string_view text, std::string_view flag);

class Filter {
public:
  // Rules apply in the order they are added (the command line's order); the first that
  // matches decides. Bad patterns throw LodgeError(USAGE) naming the pattern (and the file
  // and line for rules read from a file).
  void add_include(std::string_view pattern); // --include; implies a last rule "- /**"
  void add_exclude(std::string_view pattern); // --exclude
  // --filter: "+ PAT", "- PAT", or "!" which clears every rule added so far. A "+" rule
  // does not imply "- /**" (rclone's difference between --filter "+ x" and --include x).
  void add_filter(std::string_view rule);
  // The *-from flags read a file: blank lines and lines starting with `#` or `;` are
  // skipped, the rest trimmed of surrounding whitespace. An unreadable file, a directory
  // or one larger than k_max_rule_file_bytes is LodgeError(USAGE) naming it.
  void add_include_from(const std::string &path);
  void add_exclude_from(const std::string &path);
  void add_filter_from(const std::string &path);
  // The same over text already read; `source` names it in errors ("-" for stdin).
  void add_include_lines(std::string_view text, std::string_view source);
  void add_exclude_lines(std::string_view text, std::string_view source);
  void add_filter_lines(std::string_view text, std::string_view source);

  // Throws LodgeError(USAGE) when the bounds select nothing (min above max).
  void set_bounds(const FilterBounds &bounds);
  [[nodiscard]] const FilterBounds &bounds() const { return m_bounds; }

  // --exclude-if-present NAME: a directory holding NAME, not a directory, is skipped with all
  // it holds. NAME is one path element; a trailing `/` asks for a directory of that name.
  void add_exclude_if_present(std::string_view name);
  [[nodiscard]] const std::vector<std::string> &marker_names() const { return m_markers; }
  // Whether a directory is excluded by a marker; `dir_has(name, want_dir)` says whether the
  // directory holds an entry `name` that is a directory exactly when want_dir (as rclone's,
  // a file, FIFO, device or link is a marker; a directory is not). Takes precedence over
  // every rule.
  [[nodiscard]] bool
  excluded_by_marker(const std::function<bool(std::string_view name, bool want_dir)> &dir_has) const;

  // Whether any rule, bound or marker is set: an inactive filter takes everything.
  [[nodiscard]] bool active() const;
  // Whether the rules take the file at `rel_path` (its name only; no bounds).
  [[nodiscard]] bool path_included(std::string_view rel_path) const;
  // The rules and the bounds: what the walker asks of each regular file.
  [[nodiscard]] bool file_included(std::string_view rel_path, uint64_t size, int64_t mtime_ms,
                                   int64_t now_ms) const;
  // Whether the directory at `rel_dir` (relative, "a/b" or "a/b/") can be skipped without
  // being opened: no file under it could be included. Rclone's directory rules: an exclude
  // ending in `/` or holding `**` prunes the directories it matches, an include keeps the
  // directories its pattern could reach, first match wins, no match keeps. The root ("")
  // is never pruned.
  [[nodiscard]] bool dir_excluded(std::string_view rel_dir) const;

  // The same decisions, saying why: nullopt when taken, else what excluded it as a user
  // reads it ("- *.o", "--max-size", "no --include matched", "--exclude-if-present .nobackup").
  [[nodiscard]] std::optional<std::string> path_exclusion(std::string_view rel_path) const;
  [[nodiscard]] std::optional<std::string> file_exclusion(std::string_view rel_path, uint64_t size,
                                                          int64_t mtime_ms, int64_t now_ms) const;
  [[nodiscard]] std::optional<std::string> dir_exclusion(std::string_view rel_dir) const;
  [[nodiscard]] std::optional<std::string>
  marker_exclusion(const std::function<bool(std::string_view name, bool want_dir)> &dir_has) const;

  // The rules in the order they apply, "+ pattern" / "- pattern", files then directories
  // (what --dump filters would show; for tests and debug output).
  [[nodiscard]] std::vector<std::string> describe() const;

private:
  struct Rule {
    bool include;
    Glob glob;
    std::string shown; // the rule as given ("- node_modules/"), for exclusion reasons
  };
  void add(bool include, std::string_view pattern);
  void add_dir_rules_for(bool include, std::string_view pattern, const std::string &shown);
  void add_rule_line(std::string_view line);
  void clear();

  std::vector<Rule> m_file_rules;
  std::vector<Rule> m_dir_rules;
  bool m_implied_exclude = false; // an --include was given: "- /**" closes both lists
  FilterBounds m_bounds;
  std::vector<std::string> m_markers;
};

} // namespace lodge::match
