// lodge show, lodge get, lodge cat, lodge url.
#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <lodge/ops/read/restore.hpp>
#include <lodge/ops/read/retrieve.hpp>
#include <lodge/ops/read/text.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <utility>

namespace lodge::cli {
namespace {

// The row an ID|PATH argument names, of the owner and --prefix for a path.
ledger::FileRecord lookup(Context &ctx, const char *cmd, const std::string &token,
                          const std::string &prefix) {
  flags::run_prefix(prefix, std::string(cmd) + ": --prefix");
  auto ref = ops::parse_file_ref(token);
  std::string owner = ref.id ? std::string() : ctx.owner();
  return ops::find_record(ctx.reader(), ref, owner, prefix).take();
}

struct GetCli {
  std::string target;
  std::string output;
  std::string prefix;
  bool force = false;
  std::string bwlimit;
  SelectionCli sel;
};

// The rows a selection takes (ops::rows_to_restore), of the owner and --prefix when given.
std::vector<ledger::FileRecord> selected_rows(Context &ctx, const GetCli &o, bool prefix_given) {
  ops::Selection s = make_selection(o.sel, util::system_clock().now_ms());
  s.query.owner = ctx.owner();
  if (prefix_given) {
    flags::run_prefix(o.prefix, "get: --prefix");
    s.query.run_prefix = o.prefix;
  }
  return ops::rows_to_restore(ctx.reader(), s);
}

// Downloads rows one at a time as they come, printing each outcome, and counts them.
struct Fetcher {
  Fetcher(Context &c, store::ObjectStore &s, ops::Destination &d) : ctx(c), st(s), dest(d) {}
  Context &ctx;
  store::ObjectStore &st;
  ops::Destination &dest;
  ops::GetOptions go;
  ops::RestoreTally tally;

  // False once interrupted (the caller stops).
  bool fetch(const ledger::FileRecord &r) {
    if (interrupted()) return false;
    auto res = ops::get_file(st, r, dest, go);
    tally.add(res, r);
    if (ctx.g.json) {
      ctx.print_json(ops::get_json(res, r));
    } else if (res.outcome == ops::GetOutcome::failed) {
      std::fprintf(stderr, "lodge: error: %s: %s (%s)\n", res.file.c_str(),
                   util::escape_for_terminal(res.error->message).c_str(),
                   std::string(res.error->name()).c_str());
    } else if (!ctx.g.quiet) {
      std::printf("%-8s %s\n", ops::to_string(res.outcome), res.file.c_str());
    }
    return true;
  }

  // The summary, and the exit status.
  [[nodiscard]] int summary(bool many) const {
    const bool stopped = interrupted();
    const auto &t = tally;
    if (ctx.g.json)
      ctx.print_json(nlohmann::json{{"summary",
                                     {{"files", t.files},
                                      {"written", t.written},
                                      {"skipped", t.skipped},
                                      {"failed", t.failed},
                                      {"bytes", t.bytes},
                                      {"interrupted", stopped}}}});
    else if (!ctx.g.quiet && many)
      std::printf("get: %s, written %lld (%s), skipped %lld (identical), failed %lld\n",
                  util::plural(t.files, "file").c_str(), static_cast<long long>(t.written),
                  util::format_size(t.bytes).c_str(), static_cast<long long>(t.skipped),
                  static_cast<long long>(t.failed));
    return t.exit_status(stopped);
  }
};

} // namespace

Command add_show(CLI::App &app) {
  auto id = std::make_shared<int64_t>(0);
  auto *sub =
      app.add_subcommand("show", "Show one file record: state, times, key, digests, its cleanup task");
  sub->add_option("id", *id, "File id")->required();
  return {sub, [id](Context &ctx) {
            auto &l = ctx.reader();
            auto r = ops::find_record(l, ops::FileRef{*id, {}}, {}, {}).take();
            auto t = l.find_task_for(r.id);
            if (ctx.g.json)
              ctx.print_json(ops::show_json(r, t));
            else
              Context::print_text(ops::show_text(r, t));
            return exit_status(Errc::ok);
          }};
}

Command add_get(CLI::App &app) {
  auto o = std::make_shared<GetCli>();
  auto *sub = app.add_subcommand(
      "get", "Download a file by id or path, verified against its SHA-256, written atomically");
  sub->add_option("file", o->target, "File id, or its relative path (with --owner and --prefix)");
  sub->add_option("-o,--output", o->output,
                  "FILE, or DIR (existing, or ending in '/') to restore the relative path under")
      ->type_name("PATH");
  auto *prefix_opt = empty_is_a_value(sub->add_option(
      "--prefix", o->prefix,
      "The upload prefix the path is under; with no file, restore every ACTIVE file under it ('': the "
      "files uploaded without one)"));
  sub->add_flag("--force", o->force, "Replace an existing different file");
  flags::add_bwlimit_option(sub, o->bwlimit, "received");
  add_selection_options(sub, o->sel);
  return {sub, [o, prefix_opt](Context &ctx) {
            ctx.g.bwlimit = o->bwlimit;
            bool many = o->target.empty();
            bool selecting = o->sel.any();
            if (selecting && !many)
              throw LodgeError(Errc::usage, "get: name a file, or select files (--metadata, --latest, ...), "
                                            "not both");
            if (many && !selecting && prefix_opt->count() == 0)
              throw LodgeError(Errc::usage, "get: name a file (id or path), --prefix P to restore a whole "
                                            "prefix (--prefix '' for the files uploaded without one), or "
                                            "select files (--latest --metadata K=V, ...)");
            std::vector<ledger::FileRecord> rows;
            const bool whole_prefix = many && !selecting; // streamed: read in pages as it downloads
            if (selecting) {
              rows = selected_rows(ctx, *o, prefix_opt->count() > 0);
            } else if (whole_prefix) {
              flags::run_prefix(o->prefix, "get: --prefix");
              ops::require_any_under_prefix(ctx.reader(), ctx.owner(), o->prefix);
            } else {
              rows.push_back(lookup(ctx, "get", o->target, o->prefix));
              ops::require_active(rows.back()).take();
            }
            auto dest = ops::open_destination(o->output, many).take();
            auto st = ctx.open_store();
            install_interrupt_handlers(); // a signal stops the download and removes its temporary file
            Fetcher f(ctx, *st, dest);
            f.go.force = o->force;
            f.go.stop = [] { return interrupted(); };
            if (whole_prefix)
              ops::scan_active_under_prefix(ctx.reader(), ctx.owner(), o->prefix,
                                            [&](const ledger::FileRecord &r) { return f.fetch(r); });
            for (const auto &r : rows)
              if (!f.fetch(r)) break;
            return f.summary(many);
          }};
}

Command add_cat(CLI::App &app) {
  auto target = std::make_shared<std::string>();
  auto prefix = std::make_shared<std::string>();
  auto *sub = app.add_subcommand(
      "cat", "Write a file's bytes to stdout, verified (a mismatch is reported after the fact, exit 1)");
  sub->add_option("file", *target, "File id, or its relative path (with --owner and --prefix)")->required();
  sub->add_option("--prefix", *prefix, "The upload prefix the path is under");
  auto bwlimit = std::make_shared<std::string>();
  flags::add_bwlimit_option(sub, *bwlimit, "received");
  return {sub, [target, prefix, bwlimit](Context &ctx) {
            ctx.g.bwlimit = *bwlimit;
            auto r = lookup(ctx, "cat", *target, *prefix);
            ops::require_active(r).take();
            auto st = ctx.open_store();
            int write_err = 0;
            auto s = ops::read_verified(*st, r, [&](const char *p, size_t n) {
              while (n > 0) {
                ssize_t w = ::write(STDOUT_FILENO, p, n);
                if (w < 0 && errno == EINTR) continue;
                if (w < 0) {
                  write_err = errno;
                  return false;
                }
                p += w;
                n -= static_cast<size_t>(w);
              }
              return true;
            });
            if (write_err != 0)
              throw LodgeError(Errc::io_error,
                               "cat: writing to stdout: " + std::string(std::strerror(write_err)));
            std::move(s).take();
            return exit_status(Errc::ok);
          }};
}

Command add_url(CLI::App &app) {
  auto target = std::make_shared<std::string>();
  auto prefix = std::make_shared<std::string>();
  auto expires = std::make_shared<std::string>("1h");
  auto *sub = app.add_subcommand("url", "Print a presigned GET URL of a file (S3 stores)");
  sub->add_option("file", *target, "File id, or its relative path (with --owner and --prefix)")->required();
  sub->add_option("--prefix", *prefix, "The upload prefix the path is under");
  sub->add_option("--expires", *expires, "How long the URL works (default 1h, at most 7d)");
  return {sub, [target, prefix, expires](Context &ctx) {
            int64_t secs = flags::expires_seconds(*expires);
            auto r = lookup(ctx, "url", *target, *prefix);
            ops::require_active(r).take();
            auto st = ctx.open_store();
            auto url = st->presign_get(r.object_key, secs).take();
            if (ctx.g.json)
              ctx.print_json(nlohmann::json{
                  {"id", r.id}, {"object_key", r.object_key}, {"url", url}, {"expires_in", secs}});
            else
              std::printf("%s\n", url.c_str());
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
