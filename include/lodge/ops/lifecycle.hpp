#pragma once
// `lodge lifecycle`: the store's lifecycle rule that backs up sweep (it expires objects still
// tagged pending), and its installation when asked and the store allows it.

#include <lodge/error.hpp>
#include <lodge/store/store.hpp>
#include <optional>

namespace lodge::ops {

struct LifecycleReport {
  store::LifecycleRule rule;
  bool applied = false;
  // Asked to install a rule lodge cannot install (UNSUPPORTED, with the rule's hint): the
  // caller shows the rule first, so the document is at hand, then fails with this.
  std::optional<Error> refused;
};
[[nodiscard]] LifecycleReport lifecycle(store::ObjectStore &st, int days, bool apply);

} // namespace lodge::ops
