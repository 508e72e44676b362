#include <lodge/ops/activate.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>

namespace lodge::ops {

ledger::CommitTag commit_tag_for(const store::ObjectStore &store) {
  return store.capabilities().state_tags ? ledger::CommitTag::owed : ledger::CommitTag::none;
}

Status tag_committed(store::ObjectStore &store, const std::string &key, const std::string &object_options) {
  return store.mark_committed(key, store::from_json(object_options).tags);
}

PendingActivation::PendingActivation(ledger::UploadLedger &ledger, store::ObjectStore &store,
                                     const ledger::FileRecord &rec, ledger::CommitTag tag,
                                     std::unique_ptr<ledger::UploadLedger::PendingConfirm> confirm,
                                     const util::Clock &clock)
    : m_ledger(&ledger), m_store(&store), m_clock(&clock), m_id(rec.id), m_key(rec.object_key),
      m_options(rec.object_options), m_tag(tag), m_confirm(std::move(confirm)) {}

Activation PendingActivation::finish() {
  if (!m_confirm) throw LodgeError(Errc::internal, "an activation was finished twice");
  auto confirm = std::move(m_confirm);
  Activation a;
  a.confirm = confirm->wait();
  if (!a.active() || m_tag != ledger::CommitTag::owed) return a;
  a.tag_owed = true;
  // The row is ACTIVE and its task records the tag as owed: a failure here undoes nothing.
  if (auto t = tag_committed(*m_store, m_key, m_options); !t) {
    a.tag_error = t.error();
    util::log::warn("file #" + std::to_string(m_id) + " is stored, but tagging " +
                    util::escape_for_terminal(m_key) + " committed failed (" + t.error().message +
                    "); lodge sweep tags it later");
    return a;
  }
  // not_pending: a sweep holds the task (it tags again, harmlessly) or a delete made it its own.
  a.settled = m_ledger->settle(m_id, m_clock->now_ms()) == ledger::SettleOutcome::settled;
  return a;
}

PendingActivation activate_later(ledger::UploadLedger &ledger, store::ObjectStore &store,
                                 const ledger::FileRecord &rec, const store::PutResult &stored,
                                 std::optional<ledger::Retire> retire, ledger::Durable durable,
                                 const util::Clock &clock) {
  const ledger::CommitTag tag = commit_tag_for(store);
  auto confirm = ledger.confirm_later(rec.id, stored.etag, stored.version_id, clock.now_ms(), tag, retire,
                                      std::move(durable));
  return {ledger, store, rec, tag, std::move(confirm), clock};
}

Activation activate(ledger::UploadLedger &ledger, store::ObjectStore &store, const ledger::FileRecord &rec,
                    const store::PutResult &stored, const util::Clock &clock,
                    std::optional<ledger::Retire> retire) {
  return activate_later(ledger, store, rec, stored, retire, {}, clock).finish();
}

} // namespace lodge::ops
