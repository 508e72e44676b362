// `lodge doctor`'s checks of the ledger (doctor_ledger.hpp).
#include <lodge/ops/binding.hpp>
#include <lodge/ops/read/doctor_ledger.hpp>

namespace lodge::ops::doctor {
namespace {

Check fail(std::string name, std::string message, std::string fix) {
  return Check{std::move(name), Level::fail, std::move(message), std::move(fix)};
}

std::string with_code(const LodgeError &e) {
  return e.error().message + " (" + std::string(e.error().name()) + ")";
}

// The ledger's binding against the configured store.
Check binding_check(Session &session) {
  try {
    auto have = session.reader().store_binding();
    auto want = session.store_binding();
    if (!have)
      return {"ledger.binding", Level::warn, "the ledger is bound to no store yet",
              "run `lodge init` with the store the ledger serves (the first command using a store binds it)"};
    if (auto refused = binding_refusal(session.ledger_shown(), *have, want))
      return fail(
          "ledger.binding", refused->message,
          "use the store the ledger is bound to, configured as it records, or another ledger for this "
          "store");
    return {"ledger.binding", Level::ok, "bound to " + store::describe(want), ""};
  } catch (const LodgeError &e) {
    return fail("ledger.binding", with_code(e), "fix the ledger or the store URL first");
  }
}

} // namespace

std::vector<Check> ledger_checks(Session &session, const config::Config &cfg) {
  const auto &loc = cfg.ledger;
  std::vector<Check> out;
  bool usable = false;
  if (ledger::is_postgres_location(loc)) {
    try {
      auto l = session.open_ledger(true);
      out.push_back({"ledger.location", Level::ok, ledger::shown_location(loc) + " (PostgreSQL)", ""});
      out.push_back(
          {"ledger.schema", Level::ok, "schema version " + std::to_string(l->schema_version()), ""});
      usable = true;
    } catch (const LodgeError &e) {
      out.push_back(
          fail("ledger.location", ledger::shown_location(loc) + ": " + with_code(e),
               e.error().code == Errc::ledger_not_found
                   ? "create it with `lodge init`"
                   : "check the server is up and the URL, user and password (PGPASSWORD, ~/.pgpass)"));
    }
  } else {
    out = sqlite_ledger(loc, usable);
  }
  if (usable && !cfg.store.empty()) out.push_back(binding_check(session));
  return out;
}

} // namespace lodge::ops::doctor
