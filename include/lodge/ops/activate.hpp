#pragma once
// The one way a row becomes ACTIVE. The uploader (after its PUT), `lodge confirm` of a
// direct upload (after its checks) and `reconcile --apply --roll-forward` (an object
// complete and stamped for an UPLOADING row of a restored ledger) all activate a row here:
// the confirm transaction, recording on the row's task whether the object is owed the
// committed tag (commit_tag_for); then, once it committed, the tag and the settle of the
// task. A crash or a failed tag in between leaves the task PENDING with tag_owed set, and
// the sweep that claims it sets the tag (ledger::DecisionKind::tag), whatever its host.
//
// Split in two for the uploader's pipelined confirms (activate_later, then finish()), so a
// group-committing ledger still commits many confirms in one batch; activate() is both.

#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <memory>
#include <optional>
#include <string>

namespace lodge::ops {

// Whether a confirm into `store` owes the object the committed tag: the store tags objects
// (Capabilities::state_tags, which the ledger's binding records and every host's store must
// match). The one place that decides it.
[[nodiscard]] ledger::CommitTag commit_tag_for(const store::ObjectStore &store);

// Tags the object at `key` committed, with the user tags its row recorded
// (`object_options`, store::to_json): the tag set is replaced whole. What the activation
// and a sweep's `tag` decision both write.
[[nodiscard]] Status tag_committed(store::ObjectStore &store, const std::string &key,
                                   const std::string &object_options);

struct Activation {
  ledger::ConfirmOutcome confirm = ledger::ConfirmOutcome::row_not_uploading;
  bool tag_owed = false;          // confirmed owing the committed tag (the store tags objects)
  std::optional<Error> tag_error; // owed, and tagging failed: the task keeps it for a sweep
  bool settled = false;           // owed, tagged, and the task ended IGNORED here
  [[nodiscard]] bool active() const { return confirm == ledger::ConfirmOutcome::confirmed; }
};

// A row's confirm, queued; finish() completes the activation.
class PendingActivation {
public:
  PendingActivation(ledger::UploadLedger &ledger, store::ObjectStore &store, const ledger::FileRecord &rec,
                    ledger::CommitTag tag, std::unique_ptr<ledger::UploadLedger::PendingConfirm> confirm,
                    const util::Clock &clock);
  // Waits for the confirm's commit; confirmed and owing the tag: tags the object committed,
  // then settles the task (a failed tag is warned about and left to sweep; the row stays
  // ACTIVE). Throws what the confirm threw (ledger::NotDurable: nothing was written). Once.
  [[nodiscard]] Activation finish();

private:
  ledger::UploadLedger *m_ledger;
  store::ObjectStore *m_store;
  const util::Clock *m_clock;
  int64_t m_id;
  std::string m_key, m_options;
  ledger::CommitTag m_tag;
  std::unique_ptr<ledger::UploadLedger::PendingConfirm> m_confirm;
};

// Queues the confirm of `rec` (UPLOADING) with the object `stored` names (etag, version id):
// on a group-committing ledger it commits with a later batch, behind `durable` (the store's
// flush); on any other ledger at once. `retire`: upload --replace.
[[nodiscard]] PendingActivation activate_later(ledger::UploadLedger &ledger, store::ObjectStore &store,
                                               const ledger::FileRecord &rec, const store::PutResult &stored,
                                               std::optional<ledger::Retire> retire, ledger::Durable durable,
                                               const util::Clock &clock);

// activate_later(...).finish(): confirm, tag, settle, now.
[[nodiscard]] Activation activate(ledger::UploadLedger &ledger, store::ObjectStore &store,
                                  const ledger::FileRecord &rec, const store::PutResult &stored,
                                  const util::Clock &clock,
                                  std::optional<ledger::Retire> retire = std::nullopt);

} // namespace lodge::ops
