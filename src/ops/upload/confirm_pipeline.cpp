// The confirm pipeline (see lodge/ops/upload/confirm_pipeline.hpp): a PUT sent ahead on the
// sender thread and landed, a stored file's confirm queued and settled in the files' order.
#include <algorithm>
#include <chrono>
#include <lodge/failpoint.hpp>
#include <lodge/ops/upload/confirm_pipeline.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <utility>

namespace lodge::ops {

// A file whose single PUT runs on the sender thread: what landing it needs once it ended.
struct ConfirmPipeline::Flight {
  FileResult r;
  OpenedFile f;
  ledger::FileRecord rec;
  std::unique_ptr<Renewal> renewal;
  Result<store::PutResult> put = Error(Errc::internal, "the PUT did not run");
  util::TaskThread *sender = nullptr; // runs this flight's PUT until it is waited for
  uint64_t ticket = 0;                // the PUT's on the sender
  int64_t took_us = 0;                // how long the PUT itself took, on the sender

  Flight() = default;
  Flight(const Flight &) = delete;
  Flight &operator=(const Flight &) = delete;
  // A flight dropped before it landed (the worker unwinding) waits for its PUT, which uses
  // this flight's members.
  ~Flight() {
    if (sender == nullptr) return;
    try {
      sender->wait(ticket);
    } catch (...) { // the task catches everything: nothing is thrown here
    }
  }
};

ConfirmPipeline::ConfirmPipeline(ledger::UploaderLedger &ledger, store::ObjectStore &store,
                                 const UploadSettings &settings, const util::Clock &clock, Transfer &transfer,
                                 RowFailure &failure)
    : m_ledger(ledger), m_store(store), m_s(settings), m_clock(clock), m_transfer(transfer),
      m_failure(failure) {}

ConfirmPipeline::~ConfirmPipeline() = default;

bool ConfirmPipeline::can_send_ahead(const Digests &d) {
  if (!m_s.send_ahead || !d.parts.empty() || m_s.dry_run || !m_s.open_store) return false;
  if (!m_send_store && !m_send_store_failed) {
    try {
      m_send_store = m_s.open_store();
    } catch (const LodgeError &e) {
      m_send_store_failed = true;
      util::log::warn("sending each file after the next one's reserve is off: " + e.error().message);
    }
  }
  return m_send_store != nullptr;
}

ledger::UploadLedger *ConfirmPipeline::sender_ledger() {
  if (!m_send_ledger && !m_send_ledger_failed) {
    if (!m_s.open_ledger) {
      m_send_ledger_failed = true;
    } else {
      try {
        m_send_ledger = m_s.open_ledger();
      } catch (const LodgeError &e) {
        m_send_ledger_failed = true;
        util::log::warn("a PUT sent ahead is not renewed while its bytes flow: " + e.error().message);
      }
    }
  }
  return m_send_ledger.get();
}

void ConfirmPipeline::send_ahead(FileResult &r, OpenedFile &f, const ledger::FileRecord &rec,
                                 std::unique_ptr<Renewal> renewal) {
  auto fl = std::make_unique<Flight>();
  fl->r = r;
  fl->f = std::move(f);
  fl->rec = rec;
  fl->renewal = std::move(renewal);
  // Made here, on the worker: the sender touches its own connection and the file alone.
  store::PutRequest req = m_transfer.single_request(fl->f.fd.get(), fl->rec, *fl->renewal);
  // Its bytes renew its row from the sender thread, through the sender's own ledger.
  fl->renewal->renew_through([this] { return sender_ledger(); });
  Flight *raw = fl.get();
  store::ObjectStore &via = *m_send_store;
  // One thread per worker sends every flight: a thread made per file cost more CPU than its PUT.
  if (!m_sender) m_sender = std::make_unique<util::TaskThread>();
  raw->sender = m_sender.get();
  // Queued behind the PUT already in the air, if any: it starts the moment that one ends.
  raw->ticket = m_sender->post([raw, &via, req = std::move(req)] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      raw->renewal->begin();
      raw->put = Transfer::ours_if_landed(via, raw->rec, raw->renewal->explain(via.put(req)));
      raw->took_us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
              .count();
    } catch (const LodgeError &e) {
      raw->put = e.error();
    } catch (const std::exception &e) {
      raw->put = Error(Errc::internal, "sending " + raw->rec.object_key + ": " + e.what());
    }
  });
  m_flights.push_back(std::move(fl));
  land_flights(1);
}

void ConfirmPipeline::land_flights(size_t keep) {
  while (m_flights.size() > keep) {
    std::unique_ptr<Flight> fl = std::move(m_flights.front());
    m_flights.pop_front();
    land(*fl);
  }
}

void ConfirmPipeline::land(Flight &fl) {
  fl.sender->wait(fl.ticket); // the task catches everything: nothing to rethrow
  fl.sender = nullptr;
  if (fl.put && fl.took_us > 0) m_put_us = m_put_us == 0 ? fl.took_us : (7 * m_put_us + fl.took_us) / 8;
  const TransferNote note;
  auto ended = after_transfer(fl.r, fl.f, fl.rec, std::move(fl.put), *fl.renewal, note);
  if (!ended) return; // its confirm is pending, in m_tails
  Tail t;
  t.r = *ended;
  t.done = std::move(*ended);
  m_tails.push_back(std::move(t));
}

std::optional<FileResult> ConfirmPipeline::after_transfer(FileResult &r, const OpenedFile &f,
                                                          const ledger::FileRecord &rec,
                                                          Result<store::PutResult> put,
                                                          const Renewal &renewal, const TransferNote &note) {
  r.resumed_bytes = note.resumed_bytes;
  if (put) {
    // The bytes sent were checked against the digest; a file that grew or was rewritten
    // since we measured it is still not the file the user meant.
    // (ctime too: the row's stat must be the file its bytes came from.)
    if (!f.unchanged())
      put = Error(Errc::file_changed,
                  util::escape_for_terminal(r.file) + " changed while it was being uploaded");
  }
  if (!put) {
    const auto &e = put.error();
    if (renewal.taken_over()) {
      // Another sender holds the row now: its state and its staged upload are its own.
      r.outcome = UploadOutcome::failed;
      r.error = e;
      return r;
    }
    std::optional<int64_t> kept_until;
    if (note.staged_kept) {
      // Kept one grace for the next run to resume; a resumed row failing again keeps the time
      // its cleanup had: a file re-sent more often than the grace would otherwise never see
      // its staged upload cleaned up.
      kept_until = m_clock.now_ms() + m_s.cleanup.grace_ms;
      if (note.cleanup_due_before) kept_until = std::min(*kept_until, *note.cleanup_due_before);
    }
    m_failure.fail(r, rec, e, !e.details.ambiguous, kept_until);
    return r;
  }
  // Stored and checked: the confirm is queued and left pending (upload_next's caller learns
  // of it once it committed), with at most k_pending_confirms others.
  if (m_s.progress) m_s.progress->stored.fetch_add(1, std::memory_order_relaxed);
  Tail t;
  t.r = r;
  t.rec = rec;
  begin_tail(t, put.value());
  m_tails.push_back(std::move(t));
  settle_tails(k_pending_confirms);
  return std::nullopt;
}

void ConfirmPipeline::settle_all() {
  land_flights(0);
  settle_tails(0);
}

void ConfirmPipeline::end(FileResult r) {
  // The earlier files' first: results keep the files' order.
  settle_all();
  m_done.push_back(std::move(r));
}

std::vector<FileResult> ConfirmPipeline::take_done() {
  return std::exchange(m_done, {});
}

std::vector<FileResult> ConfirmPipeline::finish() {
  m_done.clear();
  settle_all();
  return take_done();
}

void ConfirmPipeline::begin_tail(Tail &t, const store::PutResult &put) {
  FileResult &r = t.r;
  const auto &rec = t.rec;
  try {
    if (failpoint::hit("upload.after_put")) {
      // What a real fault here looks like: the object landed, its answer was lost (a
      // timeout). Ambiguous, so the cleanup waits for the grace instead of running now.
      ErrorDetails lost;
      lost.curl_code = 28; // CURLE_OPERATION_TIMEDOUT
      lost.ambiguous = true;
      m_failure.fail(
          r, rec, Error(Errc::storage_unavailable, "PUT " + rec.object_key + ": no answer (injected)", lost),
          false);
      t.done = r;
      return;
    }
    if (failpoint::hit("upload.confirm")) {
      // The confirmation itself failed: the row stays UPLOADING with its task pending;
      // repair and sweep take it from here. Never reported as success.
      r.outcome = UploadOutcome::failed;
      r.error =
          Error(Errc::internal, "could not record the upload as active (injected); repair will clean it up");
      t.done = r;
      return;
    }
    std::optional<ledger::Retire> retire;
    if (m_s.replace) retire = ledger::Retire{m_s.cleanup.grace_ms, m_s.max_retries};
    // The object is durable before its row says so: file:// writes without fsync, and the
    // confirm waits for a store flush, one for every confirm of its group-commit batch (one
    // syncfs). A failed flush leaves the object perhaps stored (settle_front).
    ledger::Durable durable;
    if (const void *domain = m_store.flush_domain()) {
      durable.domain = domain;
      durable.make = m_store.flusher(); // not this connection: it may run after it is closed
    }
    t.pending.emplace(activate_later(m_ledger, m_store, rec, put, retire, std::move(durable), m_clock));
  } catch (const LodgeError &e) {
    r.outcome = UploadOutcome::failed;
    r.error = e.error();
    t.done = r;
  } catch (const std::exception &e) {
    r.outcome = UploadOutcome::failed;
    r.error = Error(Errc::internal, e.what());
    t.done = r;
  }
}

void ConfirmPipeline::settle_tails(size_t keep) {
  while (m_tails.size() > keep)
    settle_front();
}

void ConfirmPipeline::settle_front() {
  Tail &t = m_tails.front();
  FileResult &r = t.r;
  const auto &rec = t.rec;
  auto end = [&] {
    m_done.push_back(std::move(r));
    m_tails.pop_front();
  };
  if (t.done) {
    r = std::move(*t.done);
    end();
    return;
  }
  try {
    switch (t.pending->finish().confirm) {
    case ledger::ConfirmOutcome::confirmed:
      break;
    case ledger::ConfirmOutcome::row_not_uploading:
      r.outcome = UploadOutcome::failed;
      r.error =
          Error(Errc::state_changed,
                "file #" + std::to_string(rec.id) +
                    " changed state during the upload (failed by repair or a sweep past its deadline?); "
                    "not stored");
      end();
      return;
    case ledger::ConfirmOutcome::task_held:
      r.outcome = UploadOutcome::failed;
      r.error = Error(Errc::state_changed,
                      "file #" + std::to_string(rec.id) +
                          " could not be confirmed: a sweep is already cleaning it up (past its "
                          "deadline?); not stored");
      end();
      return;
    }
    r.outcome = UploadOutcome::active;
  } catch (const ledger::NotDurable &e) {
    // The store could not make the object durable: the row stays unconfirmed, the object
    // perhaps stored, so its cleanup waits for the grace.
    Error err = e.error();
    err.details.ambiguous = true;
    m_failure.fail(r, rec, err, false);
  } catch (const LodgeError &e) {
    r.outcome = UploadOutcome::failed;
    r.error = e.error();
  } catch (const std::exception &e) {
    r.outcome = UploadOutcome::failed;
    r.error = Error(Errc::internal, e.what());
  }
  end();
}

} // namespace lodge::ops
