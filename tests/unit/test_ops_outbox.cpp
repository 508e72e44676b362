// ops/outbox: the relay and the consumer over the ledger fake, the fake store and the fake
// broker: what is published and when, what a delivery comes to (once, twice, forged, held,
// failing), and the upload events' bodies. The ledger's side of each transition is the
// ledger contract's (tests/ledger/test_ledger_outbox.cpp), on SQLite and PostgreSQL.
#include "fake_queue.hpp"
#include "ops_fixture.hpp"
#include "support.hpp"

#include <doctest/doctest.h>
#include <lodge/ledger/outbox.hpp>
#include <lodge/ops/jobs/outbox.hpp>
#include <lodge/ops/jobs/repair.hpp>
#include <lodge/ops/jobs/sweep.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {

struct World : test::OpsWorld {
  test::FakeQueue broker;
  std::unique_ptr<test::FakeQueue> consumer_conn = broker.connection();

  World() { set_mode(ledger::CleanupVia::queue, {}); }

  void set_mode(ledger::CleanupVia via, std::vector<ledger::EventType> types) {
    ledger::OutboxSettings s;
    s.cleanup_via = via;
    s.event_types = std::move(types);
    REQUIRE(l.set_outbox_settings(s) == ledger::SetOutboxOutcome::set);
  }

  ops::RelayReport relay(bool events = false) {
    ops::RelayOptions o;
    o.cleanup = &broker;
    o.events = events ? &broker : nullptr;
    o.ledger_uuid = l.uuid();
    return ops::relay(l, l, o, clock);
  }

  ops::ConsumeReport consume(int64_t max = 0) {
    ops::ConsumeOptions o;
    o.queue = consumer_conn.get();
    o.ledger_uuid = l.uuid();
    o.worker_id = "c1";
    o.lease_ms = 5'000;
    o.cleanup = ops::CleanupSettings{k_grace_ms, 1'000, 8'000};
    o.max_messages = max;
    o.wait_ms = 0;
    return ops::consume(l, l, store, o, clock);
  }

  // Past every deadline and grace of the rows made so far.
  void later() { clock.advance(k_deadline_ms + k_grace_ms + 1); }
};

} // namespace

TEST_CASE("relay: only due cleanup events are published, each marked sent once the broker confirmed it") {
  World w;
  auto failed = w.failed("a.txt", "a"); // due now
  auto uploading = w.reserve("b.txt", "b");
  auto active = w.active("c.txt", "c");
  auto r = w.relay();
  CHECK(r.cleanup_published == 1);
  CHECK(r.cleanup_marked == 1);
  auto pub = w.broker.published();
  REQUIRE(pub.size() == 1);
  auto body = nlohmann::json::parse(pub[0].body);
  CHECK(body["type"] == "cleanup");
  CHECK(body["ledger"] == w.l.uuid());
  CHECK(body["record_id"] == failed.id);
  CHECK(body["key"] == failed.object_key);
  auto t = w.l.task_of(failed.id);
  CHECK(t.sent_at == w.now());
  CHECK(t.message_id == pub[0].message_id);
  // A second run finds nothing more to send; the UPLOADING row's event is not due yet.
  CHECK(w.relay().cleanup_published == 0);
  CHECK_FALSE(w.l.task_of(uploading.id).sent_at);
  CHECK_FALSE(w.l.task_of(active.id).sent_at);
}

TEST_CASE("relay: a ledger whose cleanup is sweep's publishes no cleanup event") {
  World w;
  w.set_mode(ledger::CleanupVia::tasks, {});
  (void)w.failed("a.txt", "a");
  CHECK(w.relay().cleanup_published == 0);
  CHECK(w.broker.published().empty());
}

TEST_CASE("relay + consume: a confirmed upload is never published; a failed one's object is deleted") {
  World w;
  auto ok = w.active("ok.txt", "1");
  auto bad = w.failed("bad.txt", "2");
  w.later();
  (void)w.relay();
  auto c = w.consume();
  CHECK(c.received == 1);
  CHECK(c.deleted == 1);
  CHECK(w.store.has(ok.object_key));
  CHECK_FALSE(w.store.has(bad.object_key));
  CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::success);
  CHECK(w.broker.acked().size() == 1);
  CHECK(w.broker.ready().empty());
  CHECK(w.broker.in_flight().empty());
}

TEST_CASE("consume: the same message delivered twice: the second delivery changes nothing") {
  World w;
  auto bad = w.failed("bad.txt", "2");
  (void)w.relay();
  w.broker.duplicate(w.broker.published().at(0).message_id);
  auto c = w.consume();
  CHECK(c.received == 2);
  CHECK(c.deleted == 1);
  CHECK(c.duplicates == 1);
  CHECK(w.store.count("remove_owned") == 1);
  CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::success);
  CHECK(w.broker.acked().size() == 2);
}

TEST_CASE("relay: a confirmation lost after the broker kept the message: published again, harmless") {
  World w;
  auto bad = w.failed("bad.txt", "2");
  w.broker.lose_confirms(1);
  auto first = w.relay();
  CHECK(first.failed == 1);
  CHECK_FALSE(w.l.task_of(bad.id).sent_at);
  auto second = w.relay();
  CHECK(second.cleanup_published == 1);
  CHECK(w.broker.published().size() == 2); // the duplicate
  auto c = w.consume();
  CHECK(c.deleted == 1);
  CHECK(c.duplicates == 1);
  CHECK_FALSE(w.store.has(bad.object_key));
}

TEST_CASE("consume: killed after the delete and before the ack: redelivered, converges") {
  World w;
  auto bad = w.failed("bad.txt", "2");
  (void)w.relay();
  // The consumer's work committed but its ack never reached the broker.
  w.consumer_conn->fail("ack", Error(Errc::storage_unavailable, "connection closed"), 1);
  auto c = w.consume();
  CHECK(c.deleted == 1);
  CHECK(c.errors.size() == 1);
  w.broker.return_unacked();
  auto again = w.consume();
  CHECK(again.duplicates == 1);
  CHECK(again.deleted == 0);
  CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::success);
  CHECK(w.broker.acked().size() == 1);
}

TEST_CASE("consume: an event published for a row confirmed since is acknowledged and the object kept") {
  World w;
  auto rec = w.reserve("late.txt", "3");
  w.put(rec);
  w.later(); // its task is due: the relay publishes it
  (void)w.relay();
  REQUIRE(w.broker.published().size() == 1);
  // The sender's confirm lands after all (the task is not held: confirm wins).
  REQUIRE(w.l.confirm(rec.id, "etag", "", w.now()) == ledger::ConfirmOutcome::confirmed);
  auto c = w.consume();
  CHECK(c.duplicates == 1);
  CHECK(c.deleted == 0);
  CHECK(w.store.has(rec.object_key));
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::ignored);
}

TEST_CASE("consume: a store that refuses deletes: retried with back-off, then dead-lettered in both places") {
  World w;
  auto bad = w.failed("bad.txt", "2", /*max_retries=*/2);
  (void)w.relay();
  w.store.fail("remove_owned", Error(Errc::storage_unavailable, "503"));
  for (int round = 0; round < 3; ++round) {
    auto c = w.consume();
    CHECK(c.received == 1);
    if (round < 2) {
      CHECK(c.retried == 1);
      CHECK(c.delayed == 1);
      auto delayed = w.broker.delayed();
      REQUIRE(delayed.size() == 1);
      CHECK(delayed[0].delay_ms >= 1'000); // the ledger's back-off, never a hot redelivery
      CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::retry);
      CHECK(w.l.task_of(bad.id).sent_at); // still in flight: the broker holds it
      w.clock.advance(10'000);
      w.broker.release_delayed();
    } else {
      CHECK(c.dead_lettered == 1);
    }
  }
  CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::failed);
  CHECK(w.broker.dead().size() == 1);
  CHECK(w.l.outbox_counts(w.now()).cleanup_dead == 1);
  // `lodge retry` revives it: a new, unsent event the relay publishes again.
  w.store.clear_failures();
  REQUIRE(w.l.retry_task(w.l.task_of(bad.id).id, w.now()) == ledger::RetryOutcome::requeued);
  CHECK_FALSE(w.l.task_of(bad.id).sent_at);
  CHECK(w.relay().cleanup_published == 1);
  CHECK(w.consume().deleted == 1);
  CHECK_FALSE(w.store.has(bad.object_key));
}

TEST_CASE("consume: forged, foreign or garbled messages delete nothing and go to the dead-letter queue") {
  World w;
  auto active = w.active("keep.txt", "4");
  auto bad = w.failed("bad.txt", "5");
  auto task = w.l.task_of(bad.id);
  auto msg = [&](const std::string &ledger, int64_t task_id, int64_t record_id, const std::string &key) {
    return nlohmann::json{
        {"type", "cleanup"}, {"ledger", ledger}, {"task_id", task_id}, {"record_id", record_id}, {"key", key}}
        .dump();
  };
  // Another tool's key under a real, due task's id; an ACTIVE row's key; another ledger; garbage.
  w.broker.inject(msg(w.l.uuid(), task.id, bad.id, "other-tool/file.bin"));
  w.broker.inject(msg(w.l.uuid(), w.l.task_of(active.id).id, active.id, active.object_key));
  w.broker.inject(msg("00000000-0000-4000-8000-000000000000", task.id, bad.id, bad.object_key));
  w.broker.inject("not json");
  auto c = w.consume();
  CHECK(c.received == 4);
  CHECK(c.rejected == 3);
  CHECK(c.duplicates == 1); // the ACTIVE row's: its task is IGNORED, nothing owed
  CHECK(c.deleted == 0);
  CHECK(w.store.count("remove_owned") == 0);
  CHECK(w.store.has(active.object_key));
  CHECK(w.store.has(bad.object_key));
  CHECK(w.broker.dead().size() == 3);
  CHECK(w.l.task_of(bad.id).status == ledger::TaskStatus::pending);
}

TEST_CASE("consume: a task another worker holds is handed back for after its lease, not run twice") {
  World w;
  auto bad = w.failed("bad.txt", "2");
  (void)w.relay();
  auto held = w.claim(bad.id, "sweeper", 5'000);
  auto c = w.consume();
  CHECK(c.delayed == 1);
  CHECK(c.deleted == 0);
  auto delayed = w.broker.delayed();
  REQUIRE(delayed.size() == 1);
  CHECK(delayed[0].delay_ms >= 5'000);
  CHECK(w.l.task_of(bad.id).lease_owner == "sweeper");
  (void)held;
}

TEST_CASE("upload events: one file.active per confirm, its body the row's, sent once") {
  World w;
  w.set_mode(ledger::CleanupVia::queue, {ledger::EventType::file_active, ledger::EventType::file_failed});
  auto a = w.active("docs/a.txt", "a");
  auto f = w.failed("b.txt", "b");
  auto r = w.relay(/*events=*/true);
  CHECK(r.events_published == 2);
  std::vector<nlohmann::json> events;
  for (const auto &m : w.broker.published()) {
    auto j = nlohmann::json::parse(m.body);
    if (j.contains("schema")) events.push_back(j);
  }
  REQUIRE(events.size() == 2);
  CHECK(events[0]["type"] == "file.active");
  CHECK(events[0]["record_id"] == a.id);
  CHECK(events[0]["path"] == "docs/a.txt");
  CHECK(events[0]["key"] == a.object_key);
  CHECK(events[0]["sha256"] == a.sha256);
  CHECK(events[0]["size"] == a.size);
  CHECK(events[0]["owner"] == "o");
  CHECK(events[0]["ledger"] == w.l.uuid());
  CHECK(events[0]["id"].get<std::string>().rfind(w.l.uuid() + ":event:", 0) == 0);
  CHECK(events[0]["id"] != events[1]["id"]);
  CHECK(events[1]["type"] == "file.failed");
  CHECK(events[1]["record_id"] == f.id);
  CHECK(w.l.outbox_counts(w.now()).events_unsent == 0);
  CHECK(w.relay(true).events_published == 0);
}

TEST_CASE("sweep on a queue-mode ledger leaves first deletes to the queue and runs the verify passes") {
  World w;
  config::Config cfg;
  cfg.policies["default"].grace_ms = test::OpsWorld::k_grace_ms;
  ops::RepairOptions ro;
  ro.config = &cfg;
  ops::SweepOptions so;
  so.worker_id = "sweep";
  so.cleanup = ops::CleanupSettings{test::OpsWorld::k_grace_ms, 1'000, 8'000};
  // An upload that died after its PUT: repair fails it, and its delete owes a verify pass.
  auto rec = w.reserve("late.txt", "1");
  (void)w.put(rec);
  w.later();
  REQUIRE(ops::repair(w.l, w.l, w.l, ro, w.clock).repaired == 1);
  w.clock.advance(test::OpsWorld::k_grace_ms + 1);
  auto first = ops::sweep(w.l, w.l, w.store, so, w.clock);
  CHECK(first.claimed == 0); // the first delete is the queue's
  CHECK(w.store.has(rec.object_key));
  CHECK(w.relay().cleanup_published == 1);
  auto c = w.consume();
  CHECK(c.deleted == 1);
  CHECK(c.verify_scheduled == 1);
  CHECK_FALSE(w.store.has(rec.object_key));
  REQUIRE(w.l.task_of(rec.id).verify_pass == ledger::k_verify_due);
  // The verify pass is sweep's: no message carries it, the relay publishes nothing.
  w.clock.t = w.l.task_of(rec.id).next_retry_at;
  CHECK(w.relay().cleanup_published == 0);
  auto verify = ops::sweep(w.l, w.l, w.store, so, w.clock);
  CHECK(verify.claimed == 1);
  CHECK(verify.verified == 1);
  CHECK(w.l.task_of(rec.id).status == ledger::TaskStatus::success);
}
