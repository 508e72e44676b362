#pragma once
// A ledger's binding to its store: the one store it serves, and whether that store's objects
// carry state tags. `lodge init` records it (or rebinds it, after the data moved); the first
// store connection of every other command checks it. These decide and record; the caller says
// what happened.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <optional>
#include <string>

namespace lodge::ops {

// store::Binding as the ledger keeps it, and back.
[[nodiscard]] ledger::StoreBinding to_ledger(const store::Binding &b);
[[nodiscard]] store::Binding from_ledger(const ledger::StoreBinding &b);

// STORE_MISMATCH (exit 2) for the ledger `ledger` (its location as shown) bound to `have`,
// another store than `want`.
[[nodiscard]] Error store_mismatch(const std::string &ledger, const ledger::StoreBinding &have,
                                   const store::Binding &want);
// Why a ledger bound to `have` refuses `want`: another store, or the same store tagged
// otherwise (a tagging mode not recorded yet refuses nothing). None: it serves `want`.
[[nodiscard]] std::optional<Error>
binding_refusal(const std::string &ledger, const ledger::StoreBinding &have, const store::Binding &want);

// What the first store connection of a run found.
struct BindingCheck {
  // Whether this check recorded `want`: a ledger made before bindings existed serves the
  // store its first use names; one bound before tagging modes were records this store's.
  bool recorded = false;
  // Recorded over a binding that had no tagging mode (the mode is what was added).
  bool mode_added = false;
};
// Checks the ledger's binding against `want`; records it where the ledger has none (or has
// this store without a tagging mode); throws the refusal (STORE_MISMATCH) otherwise.
[[nodiscard]] BindingCheck check_binding(ledger::LedgerMeta &l, const std::string &ledger,
                                         const store::Binding &want);

// What `lodge init` asks of the binding and of a diverged ledger.
struct InitRequest {
  store::Binding want;
  bool rebind = false;          // --rebind-store: replace another store's binding
  bool accept_diverged = false; // --accept-diverged
  int64_t now = 0;
};
// What it did.
struct InitReport {
  // The binding --rebind-store replaced (filling in a binding's tagging mode is no rebind).
  std::optional<store::Binding> rebound_from;
  bool divergence_accepted = false;
};
// Records the binding (or rebinds it when asked), refusing another store or tagging mode
// otherwise (STORE_MISMATCH); then, when asked, clears a divergence: USAGE when the ledger is
// not diverged, LEDGER_DIVERGED when no reconcile ran since it was detected.
[[nodiscard]] InitReport init_binding(ledger::LedgerMeta &meta, ledger::IdBlockLedger &blocks,
                                      const std::string &ledger, const InitRequest &req);

} // namespace lodge::ops
