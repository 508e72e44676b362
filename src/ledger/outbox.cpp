// The outbox's names (ledger/outbox.hpp): what ledger_meta stores and messages carry.
#include <cstddef>
#include <iterator>
#include <lodge/ledger/outbox.hpp>

namespace lodge::ledger {

const char *to_string(CleanupVia v) {
  return v == CleanupVia::queue ? "queue" : "tasks";
}

std::optional<CleanupVia> parse_cleanup_via(std::string_view s) {
  for (auto v : {CleanupVia::tasks, CleanupVia::queue})
    if (s == to_string(v)) return v;
  return std::nullopt;
}

namespace {
// One name per type, in k_event_types' order (the schema's CHECK on outbox_event.event_type
// and the triggers name the same three).
constexpr const char *k_event_type_names[] = {"file.active", "file.deleted", "file.failed"};
static_assert(std::size(k_event_type_names) == std::size(k_event_types));
} // namespace

const char *to_string(EventType t) {
  return k_event_type_names[static_cast<size_t>(t)];
}

std::optional<EventType> parse_event_type(std::string_view s) {
  for (auto t : k_event_types)
    if (s == to_string(t)) return t;
  return std::nullopt;
}

} // namespace lodge::ledger
