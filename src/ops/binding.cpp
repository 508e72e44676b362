// A ledger's binding to its store (binding.hpp).
#include <lodge/ops/binding.hpp>

namespace lodge::ops {

ledger::StoreBinding to_ledger(const store::Binding &b) {
  return {b.scheme, b.endpoint, b.location, b.root,
          b.state_tags ? ledger::k_tagging_state : ledger::k_tagging_none};
}

store::Binding from_ledger(const ledger::StoreBinding &b) {
  return {b.scheme, b.endpoint, b.location, b.root, b.tagging == ledger::k_tagging_state};
}

Error store_mismatch(const std::string &ledger, const ledger::StoreBinding &have,
                     const store::Binding &want) {
  auto had = store::describe(from_ledger(have));
  auto given = store::describe(want);
  return {Errc::store_mismatch, "the ledger " + ledger + " is bound to the store " + had + ", not " + given +
                                    " (the store given). A ledger serves one store: use " + had +
                                    ", or another ledger for this store (lodge --db OTHER init). If the data "
                                    "was moved to " +
                                    given +
                                    ", rebind with `lodge init --rebind-store` (only after moving the data)"};
}

std::optional<Error> binding_refusal(const std::string &ledger, const ledger::StoreBinding &have,
                                     const store::Binding &want) {
  const auto given = to_ledger(want);
  if (!have.same_store(given)) return store_mismatch(ledger, have, want);
  if (have.tagging.empty() || have.tagging == given.tagging) return std::nullopt;
  // The same store, tagged otherwise: an upload from here would leave objects another
  // host's lifecycle backstop expires (or tag nothing a backstop expects).
  const bool tags = have.tagging == ledger::k_tagging_state;
  return Error(
      Errc::store_mismatch,
      "the ledger " + ledger + " is bound to the store " + store::describe(want) +
          (tags
               ? " with state tags (its objects are tagged lodge-state pending, then committed once ACTIVE), "
                 "but this configuration does not tag them"
               : " without state tags, but this configuration tags its objects lodge-state") +
          ". Every host of a ledger must tag alike: " +
          (tags ? std::string(want.scheme == "s3" ? "set \"tag_state\": true in this host's configuration"
                                                  : "use a store that can tag objects")
                : std::string("remove \"tag_state\" from this host's configuration")) +
          ", or change the ledger's mode with `lodge init --rebind-store` from a host configured as every "
          "host will be");
}

BindingCheck check_binding(ledger::LedgerMeta &l, const std::string &ledger, const store::Binding &want) {
  auto have = l.store_binding();
  if (!have || (have->tagging.empty() && have->same_store(to_ledger(want)))) {
    auto r = l.bind_store(to_ledger(want), ledger::Rebind::no);
    if (r.written) return {true, r.previous.has_value()};
    have = r.previous; // another process recorded one meanwhile
  }
  if (have)
    if (auto refused = binding_refusal(ledger, *have, want)) throw LodgeError(*refused);
  return {};
}

InitReport init_binding(ledger::LedgerMeta &meta, ledger::IdBlockLedger &blocks, const std::string &ledger,
                        const InitRequest &req) {
  InitReport out;
  auto r = meta.bind_store(to_ledger(req.want), req.rebind ? ledger::Rebind::yes : ledger::Rebind::no);
  if (!r.written && r.previous)
    if (auto refused = binding_refusal(ledger, *r.previous, req.want)) throw LodgeError(*refused);
  // Filling in the tagging mode of a binding made before it was recorded is no rebind.
  if (r.written && r.previous &&
      !(r.previous->tagging.empty() && r.previous->same_store(to_ledger(req.want))))
    out.rebound_from = from_ledger(*r.previous);
  if (!req.accept_diverged) return out;
  switch (blocks.accept_divergence(req.now)) {
  case ledger::AcceptOutcome::not_diverged:
    throw LodgeError(Errc::usage, "init --accept-diverged: ledger " + ledger + " is not diverged");
  case ledger::AcceptOutcome::not_reconciled:
    throw LodgeError(Errc::ledger_diverged,
                     "init --accept-diverged refused: no `lodge reconcile` ran since the "
                     "divergence of " +
                         ledger + " was detected; run it first and read its report");
  case ledger::AcceptOutcome::accepted:
    out.divergence_accepted = true;
    break;
  }
  return out;
}

} // namespace lodge::ops
