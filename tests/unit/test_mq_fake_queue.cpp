// The fake broker behaves as the real ones do where ops relies on it (tests/mq checks the
// real ones): settled messages leave, unsettled ones come back, a lost confirmation still
// leaves the message with the broker.
#include "fake_queue.hpp"
#include "support.hpp"

using namespace lodge;

TEST_CASE("fake queue: publish, receive, ack, delay, dead letter, lost confirmation") {
  test::FakeQueue q;
  auto consumer = q.connection();
  REQUIRE(q.ensure_queues().ok());
  auto ids = q.publish({{"a", "{\"n\":1}"}, {"b", "{\"n\":2}"}, {"c", "{\"n\":3}"}});
  REQUIRE(ids.size() == 3);
  for (const auto &id : ids)
    REQUIRE(id.ok());

  auto got = consumer->receive(10, 0);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 3);
  CHECK(got->at(0).body == "{\"n\":1}");
  CHECK(got->at(0).message_id == ids[0].value());
  REQUIRE(consumer->ack(got->at(0)).ok());
  CHECK(consumer->ack(got->at(0)).error().code == Errc::not_found); // settled once
  REQUIRE(consumer->delay(got->at(1), 5000).ok());
  REQUIRE(consumer->dead_letter(got->at(2), "forged").ok());
  auto c = q.counts();
  REQUIRE(c.ok());
  CHECK(c->ready == 0);
  CHECK(c->delayed == 1);
  CHECK(c->dead == 1);
  CHECK(q.dead().at(0).dead_reason == "forged");
  CHECK(q.delayed().at(0).delay_ms == 5000);

  q.release_delayed();
  auto again = consumer->receive(10, 0);
  REQUIRE(again->size() == 1);
  CHECK(again->at(0).receive_count == 2);
  q.return_unacked();
  CHECK(q.ready().size() == 1);

  q.lose_confirms(1);
  auto lost = q.publish({{"d", "{}"}});
  REQUIRE(!lost.at(0).ok());
  CHECK(lost.at(0).error().details.ambiguous);
  CHECK(q.ready().size() == 2); // the broker has it anyway

  q.fail("publish", Error(Errc::storage_unavailable, "down"), 1);
  auto failed = q.publish({{"e", "{}"}, {"f", "{}"}});
  CHECK(!failed.at(0).ok());
  CHECK(!failed.at(1).ok());
  CHECK(q.ready().size() == 2);
  CHECK(q.publish({{"e", "{}"}}).at(0).ok());
}
