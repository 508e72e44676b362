#include <algorithm>
#include <cctype>
#include <lodge/ledger/protocol.hpp>

namespace lodge::ledger {

std::string object_key_for(const std::string &root, const std::string &owner, const std::string &run_prefix,
                           const std::string &uuid, const std::string &relative_path) {
  // The uuid stays: a key is unique to its row and never reused, whatever the path.
  return root + owner + "/" + (run_prefix.empty() ? "" : run_prefix + "/") + uuid + "/" + relative_path;
}

Decision decide_task(const TaskRecord &held, const std::optional<TaskRecord> &current,
                     const std::optional<FileRecord> &row, bool key_in_use, int64_t now, int64_t grace_ms) {
  if (!current || current->status != TaskStatus::processing || current->lease_version != held.lease_version)
    return {DecisionKind::lease_lost};
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
  // The object is in use while its row is alive or, for a dead row, while another alive row
  // shares it: then it stays, as an alive ACTIVE row's does. Whether the object is still
  // owed its committed tag is what the confirm recorded, never what the deciding host's
  // configuration says.
  if (row && (!row->is_deleted || key_in_use))
    return {current->tag_owed ? DecisionKind::tag : DecisionKind::ignore};
  return {DecisionKind::allow};
}

} // namespace lodge::ledger
