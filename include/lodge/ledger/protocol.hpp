#pragma once
// The protocol's rules, written once as pure functions: the object key's format and its
// parser, what a cleanup worker may do with the task it holds, and when a task
// dead-letters. SqlLedger calls them inside its transactions, on the row and task it read
// under the locks its write holds; no backend decides any of this itself.

#include <cstdint>
#include <lodge/ledger/records.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace lodge::ledger {

// S3's limit on a key's length, in bytes.
inline constexpr size_t k_max_key_bytes = 1024;

// The key reserve() gives a new row: <root><owner>/[<run_prefix>/]<uuid>/<relative_path>
// (root is the store's key prefix, "" or ending in '/').
[[nodiscard]] std::string object_key_for(const std::string &root, const std::string &owner,
                                         const std::string &run_prefix, const std::string &uuid,
                                         const std::string &relative_path);

// Whether a confirm owes the object the committed tag (the store tags objects: Azure, S3
// with tag_state; ops::commit_tag_for decides it). Owed, the row's task outlives the confirm
// with cleanup_task.tag_owed set until the tag is set (settle, or a sweep's `tag` decision):
// a crash or a failed tag in between leaves a task that finishes it, never an ACTIVE object
// still tagged pending for a lifecycle rule to expire.
enum class CommitTag { none, owed };

// What a cleanup worker's task comes to, decided on the task as read under the lock and
// its row (file_upload row first, then the task: the lock order).
enum class DecisionKind {
  lease_lost,                 // the task is not ours any more: change nothing
  ignore,                     // the row is alive and ACTIVE: the task becomes IGNORED
  tag,                        // alive and ACTIVE, its object owed the committed tag: the worker tags it
  allow,                      // the row is dead: delete the object
  postpone,                   // the row is UPLOADING and may still be confirmed: PENDING at `due`
  fail_overdue_then_postpone, // overdue: fail the row (as repair would), PENDING at `due`, a verify pass owed
  fail_overdue_then_allow,    // overdue and past its grace: fail the row, verify pass owed, delete now
};

struct Decision {
  DecisionKind kind = DecisionKind::lease_lost;
  int64_t due = 0;         // postpone kinds: the task's next_retry_at (after now)
  int64_t verify_pass = 0; // postpone kinds: the task's verify_pass then
};

// `held`: the task as the worker claimed it (its lease_version); `current`: the task as it
// is now, read under the lock; `row`: its file_upload row; `key_in_use`: another alive row
// uses the row's key (shares its object), read under the same lock. A row still UPLOADING
// and not overdue: postponed to deadline + grace (never due again within this run). An
// overdue UPLOADING row is failed right here, as repair_row would, and the task owes a
// verify pass; postponed to deadline + grace when that is still ahead, allowed otherwise.
// A dead row (or none) whose key no alive row uses: allowed. An alive ACTIVE row, or a dead
// one whose key is in use (I5 for shared objects: the object is then alive and ACTIVE for
// this task): ignored, or `tag` when the task records that its object is still owed the
// committed tag (`current->tag_owed`).
[[nodiscard]] Decision decide_task(const TaskRecord &held, const std::optional<TaskRecord> &current,
                                   const std::optional<FileRecord> &row, bool key_in_use, int64_t now,
                                   int64_t grace_ms);

// A failed attempt of a task that has already failed retry_count times: FAILED (a dead
// letter) rather than RETRY when this attempt makes more than max_retries failures.
[[nodiscard]] constexpr bool dead_letters(int64_t retry_count, int64_t max_retries) {
  return retry_count + 1 > max_retries;
}

} // namespace lodge::ledger
