// `lodge lifecycle` (lifecycle.hpp).
#include <lodge/ops/lifecycle.hpp>

namespace lodge::ops {

LifecycleReport lifecycle(store::ObjectStore &st, int days, bool apply) {
  LifecycleReport out;
  out.rule = st.lifecycle_rule(days).take();
  if (!apply) return out;
  if (out.rule.can_apply) {
    st.apply_lifecycle(out.rule).take();
    out.applied = true;
  } else {
    out.refused = Error(Errc::unsupported, "lodge cannot install the lifecycle rule of " + st.describe() +
                                               ": " + out.rule.apply_hint);
  }
  return out;
}

} // namespace lodge::ops
