// lodge lifecycle: the rule ops::lifecycle read (and installed), rendered.
#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <lodge/ops/lifecycle.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::cli {

Command add_lifecycle(CLI::App &app) {
  auto days = std::make_shared<int>(1);
  auto apply = std::make_shared<bool>(false);
  auto *sub = app.add_subcommand(
      "lifecycle", "Print the store's lifecycle rule that backs up sweep (--apply: install it)");
  sub->add_option("--days", *days, "Days after which the rule acts (default 1)")->check(CLI::Range(1, 36500));
  sub->add_flag("--apply", *apply, "Install the rule (S3: merged with the bucket's other rules)");
  return {sub, [days, apply](Context &ctx) {
            // The rule is about the store alone: no ledger is opened, none is needed.
            auto st = ctx.open_store_unbound();
            const auto report = ops::lifecycle(*st, *days, *apply);
            const auto &rule = report.rule;
            if (ctx.g.json) {
              ctx.print_json(nlohmann::json{{"format", rule.format},
                                            {"document", rule.document},
                                            {"can_apply", rule.can_apply},
                                            {"apply_hint", rule.apply_hint},
                                            {"applied", report.applied}});
            } else {
              // Only the document goes to stdout, so `lodge lifecycle > FILE` saves it whole.
              std::string doc = rule.document;
              if (doc.empty() || doc.back() != '\n') doc += '\n';
              std::fwrite(doc.data(), 1, doc.size(), stdout);
              std::fflush(stdout);
              if (!ctx.g.quiet && !report.refused) {
                std::string line = report.applied ? "lodge: installed on " + st->describe()
                                                  : "lodge: to apply it: " + rule.apply_hint;
                std::fprintf(stderr, "%s\n", util::escape_for_terminal(line).c_str());
              }
            }
            if (report.refused) throw LodgeError(*report.refused);
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
