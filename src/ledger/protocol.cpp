#include <algorithm>
#include <cctype>
#include <lodge/ledger/protocol.hpp>

namespace lodge::ledger {

std::string object_key_for(const std::string &root, const std::string &owner, const std::string &run_prefix,
                           const std::string &uuid, const std::string &relative_path) {
  // The uuid stays: a key is unique to its row and never reused, whatever the path.
  return root + owner + "/" + (run_prefix.empty() ? "" : run_prefix + "/") + uuid + "/" + relative_path;
}

namespace {
bool uuid_form(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}
} // namespace

std::optional<ObjectKeyParts> parse_object_key(std::string_view root, std::string_view key) {
  if (key.substr(0, root.size()) != root) return std::nullopt;
  key.remove_prefix(root.size());
  auto slash = key.find('/');
  if (slash == 0 || slash == std::string_view::npos) return std::nullopt;
  ObjectKeyParts p;
  p.owner = std::string(key.substr(0, slash));
  size_t seg = slash + 1;
  while (seg < key.size()) {
    auto end = key.find('/', seg);
    if (end == std::string_view::npos) return std::nullopt; // a uuid is never the last segment
    auto s = key.substr(seg, end - seg);
    if (uuid_form(s)) {
      if (end + 1 >= key.size()) return std::nullopt; // no relative path
      p.run_prefix = seg > slash + 1 ? std::string(key.substr(slash + 1, seg - slash - 2)) : std::string();
      p.uuid = std::string(s);
      p.relative_path = std::string(key.substr(end + 1));
      return p;
    }
    seg = end + 1;
  }
  return std::nullopt;
}

Decision decide_task(const TaskRecord &held, const std::optional<TaskRecord> &current,
                     const std::optional<FileRecord> &row, int64_t now, int64_t grace_ms) {
  if (!current || current->status != TaskStatus::processing || current->lease_version != held.lease_version)
    return {DecisionKind::lease_lost};
  // object_key is UNIQUE, so the task's own row is the only one that can use the key:
  // the object is in use exactly when that row is alive.
  if (row && !row->is_deleted && row->upload_status == FileStatus::uploading) {
    // Postponed to deadline + grace, which is ahead of now in both branches: the task is
    // not due again within this run (it used to be re-claimed at once, up to --limit
    // times, for a row past its grace that repair had not reached yet).
    const int64_t due = std::max(now + 1, row->upload_deadline_at + grace_ms);
    if (row->upload_deadline_at >= now) return {DecisionKind::postpone, due, current->verify_pass};
    // Overdue: failed here, as repair would. The failure is by deadline, not definite:
    // the delete owes a verify pass.
    if (now < row->upload_deadline_at + grace_ms)
      return {DecisionKind::fail_overdue_then_postpone, due, k_verify_owed};
    return {DecisionKind::fail_overdue_then_allow, 0, k_verify_owed};
  }
  // Whether the object is still owed its committed tag is what the confirm recorded, never
  // what the deciding host's configuration says.
  if (row && !row->is_deleted) return {current->tag_owed ? DecisionKind::tag : DecisionKind::ignore};
  return {DecisionKind::allow};
}

} // namespace lodge::ledger
