// lodge list, and the selection options list and get share.
#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/match/filter.hpp>
#include <lodge/ops/read/list_json.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/ops/read/select.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>

namespace lodge::cli {
namespace {

// One line per row, as it comes: every column's width is fixed (a long value widens its own
// line only), so nothing is measured over the result.
void print_list_line(const ledger::FileRecord &f, bool every_owner) {
  std::string where = f.run_prefix.empty() ? "-" : f.run_prefix;
  std::string tail;
  if (every_owner) tail += "  [" + util::escape_for_terminal(f.owner_id) + "]";
  if (f.expires_at) tail += "  expires " + util::format_rfc3339_ms(*f.expires_at);
  if (f.failure_reason) tail += "  (" + util::escape_for_terminal(*f.failure_reason) + ")";
  std::printf("%-6lld %-13s %10s  %-12s %-40s %s%s\n", static_cast<long long>(f.id),
              ops::shown_status(f).c_str(), util::format_size(static_cast<uint64_t>(f.size)).c_str(),
              util::escape_for_terminal(where).c_str(), util::escape_for_terminal(f.relative_path).c_str(),
              util::escape_for_terminal(f.object_key).c_str(), tail.c_str());
}

} // namespace

bool SelectionCli::any() const {
  return !metadata.empty() || !tags.empty() || !since.empty() || !until.empty() || !sha256.empty() ||
         !min_size.empty() || !max_size.empty() || !sort.empty() || !limit.empty() || latest || reverse ||
         !prefix_glob.empty() || !path_glob.empty();
}

void add_selection_options(CLI::App *sub, SelectionCli &o) {
  sub->add_option("--metadata", o.metadata,
                  "Only files recorded with this metadata NAME=VALUE (repeatable: all of them)")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  sub->add_option("--tag", o.tags, "Only files recorded with this tag KEY=VALUE (repeatable: all of them)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  sub->add_option(
         "--since", o.since,
         "Only files created at or after T: RFC 3339 (2026-12-01T10:00:00Z, or a date) or a duration "
         "back from now (7d, 36h)")
      ->type_name("T");
  sub->add_option("--until", o.until, "Only files created at or before T (as --since)")->type_name("T");
  sub->add_option("--sha256", o.sha256, "Only files with this content (64 hex digits)")->type_name("HEX");
  sub->add_option("--min-size", o.min_size,
                  "Only files of at least SIZE (10M, 512K; see VALUES in lodge.conf(5))")
      ->type_name("SIZE");
  sub->add_option("--max-size", o.max_size, "Only files of at most SIZE (as --min-size)")->type_name("SIZE");
  choices(sub->add_option("--sort", o.sort, "Order by creation time, prefix and path, or size (default: id)"),
          {"time", "path", "size"});
  sub->add_flag("--reverse", o.reverse, "The order reversed (newest, last path, largest first)");
  sub->add_option("--limit", o.limit, "At most N files")->type_name("N");
  sub->add_flag(
      "--latest", o.latest,
      "Only the newest ACTIVE file of each relative path (among the files the other options select)");
  sub->add_option("--prefix-glob", o.prefix_glob,
                  "Only files under an upload prefix matching this pattern, anchored at the prefix's start "
                  "('builds/*/*'; lodge-filters(7))")
      ->type_name("GLOB");
  sub->add_option("--path-glob", o.path_glob,
                  "Only files whose relative path matches this pattern (lodge-filters(7): '*' stops at "
                  "'/', '**' crosses it, a leading '/' anchors)")
      ->type_name("GLOB");
}

ops::Selection make_selection(const SelectionCli &o, int64_t now_ms) {
  ops::Selection s;
  auto &q = s.query;
  for (const auto &m : o.metadata)
    q.metadata.push_back(ops::parse_search_pair(m, "--metadata", true));
  for (const auto &t : o.tags)
    q.tags.push_back(ops::parse_search_pair(t, "--tag", false));
  if (!o.since.empty()) q.since = ops::parse_time_bound(o.since, "--since", now_ms);
  if (!o.until.empty()) q.until = ops::parse_time_bound(o.until, "--until", now_ms);
  if (q.since && q.until && *q.since > *q.until)
    throw LodgeError(Errc::usage,
                     "--since " + o.since + " is after --until " + o.until + ": nothing is between");
  if (!o.sha256.empty()) q.sha256 = ops::parse_sha256_hex(o.sha256, "--sha256");
  q.min_size = flags::size_bound(o.min_size, "--min-size");
  q.max_size = flags::size_bound(o.max_size, "--max-size");
  if (q.min_size && q.max_size && *q.min_size > *q.max_size)
    throw LodgeError(Errc::usage, "--min-size " + o.min_size + " is above --max-size " + o.max_size);
  if (o.sort == "time")
    q.sort = ledger::FileSort::time;
  else if (o.sort == "path")
    q.sort = ledger::FileSort::path;
  else if (o.sort == "size")
    q.sort = ledger::FileSort::size;
  q.descending = o.reverse;
  if (!o.limit.empty())
    q.limit = flags::count(o.limit, "--limit", 1, INT64_MAX, "a number of files (1 or more)");
  q.latest = o.latest;
  if (!o.path_glob.empty()) {
    (void)match::Glob::compile(o.path_glob); // a bad pattern is USAGE before the ledger is opened
    s.path_glob = o.path_glob;
  }
  if (!o.prefix_glob.empty()) {
    (void)match::Glob::compile(o.prefix_glob);
    s.prefix_glob = o.prefix_glob;
  }
  return s;
}

Command add_list(CLI::App &app) {
  struct ListOptions {
    bool all = false;
    std::string prefix;
    bool prefix_given = false;
    SelectionCli sel;
  };
  auto o = std::make_shared<ListOptions>();
  auto *sub = app.add_subcommand(
      "list",
      "List and search an owner's files (alive ones; --all adds failed and deleted; --owner '*' every "
      "owner's)");
  sub->add_flag("--all", o->all, "Include failed and deleted files, with their reasons");
  empty_is_a_value(
      sub->add_option("--prefix", o->prefix, "Only files uploaded with this --prefix ('' for those without)"))
      ->each([o](const std::string &) { o->prefix_given = true; });
  add_selection_options(sub, o->sel);
  return {sub, [o](Context &ctx) {
            // '*' is no owner id: taken out before the configuration checks the owner.
            bool every_owner = ctx.g.owner == "*";
            if (every_owner) ctx.g.owner.clear();
            if (o->prefix_given) flags::run_prefix(o->prefix, "list: --prefix");
            ops::Selection s = make_selection(o->sel, util::system_clock().now_ms());
            s.query.owner = every_owner ? std::string("*") : ctx.owner();
            if (o->prefix_given) s.query.run_prefix = o->prefix;
            s.query.include_dead = o->all && !o->sel.latest; // --latest: alive ACTIVE rows only
            // --json: the lines gathered in one buffer and written when it is large (no flush
            // per row), as the text lines go through stdio's; a closed stdout is seen by
            // check_stdout at each write, as print_json's.
            std::string lines;
            auto write_lines = [&lines] {
              std::fwrite(lines.data(), 1, lines.size(), stdout);
              lines.clear();
              check_stdout();
            };
            ops::select_files(ctx.reader(), s, [&](const ledger::FileRecord &f) {
              if (ctx.g.json) {
                ops::write_list_json(lines, f);
                lines += '\n';
                if (lines.size() >= size_t{64} * 1024) write_lines();
              } else {
                print_list_line(f, every_owner);
              }
              return true;
            });
            if (!lines.empty()) write_lines();
            if (ctx.g.json) {
              std::fflush(stdout);
              check_stdout();
            }
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
