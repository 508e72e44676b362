#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdio>
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
            auto rule = st->lifecycle_rule(*days).take();
            bool applied = false;
            std::optional<Error> refused;
            if (*apply) {
              if (rule.can_apply) {
                st->apply_lifecycle(rule).take();
                applied = true;
              } else {
                // Printed first, so the document is at hand; the refusal is the exit status.
                refused = Error(Errc::unsupported, "lodge cannot install the lifecycle rule of " +
                                                       st->describe() + ": " + rule.apply_hint);
              }
            }
            if (ctx.g.json) {
              ctx.print_json(nlohmann::json{{"format", rule.format},
                                            {"document", rule.document},
                                            {"can_apply", rule.can_apply},
                                            {"apply_hint", rule.apply_hint},
                                            {"applied", applied}});
            } else {
              // Only the document goes to stdout, so `lodge lifecycle > FILE` saves it whole.
              std::string doc = rule.document;
              if (doc.empty() || doc.back() != '\n') doc += '\n';
              std::fwrite(doc.data(), 1, doc.size(), stdout);
              std::fflush(stdout);
              if (!ctx.g.quiet && !refused) {
                std::string line = applied ? "lodge: installed on " + st->describe()
                                           : "lodge: to apply it: " + rule.apply_hint;
                std::fprintf(stderr, "%s\n", util::escape_for_terminal(line).c_str());
              }
            }
            if (refused) throw LodgeError(*refused);
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
