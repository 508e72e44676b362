// The message-queue contract, run against the broker the environment names (each case on
// queues of its own, named afresh):
//   LODGE_TEST_MQ=sqs  LODGE_TEST_SQS_ENDPOINT=http://127.0.0.1:PORT   (moto_server)
//   LODGE_TEST_MQ=amqp LODGE_TEST_AMQP_URL=amqp://USER:PASS@127.0.0.1:PORT/   (RabbitMQ)
// and for SQS's signatures a moto that checks them: LODGE_TEST_SQS_SIGNED_ENDPOINT with an
// IAM key of its own in LODGE_TEST_SQS_KEY_ID and LODGE_TEST_SQS_SECRET.
// tests/harness/brokers.py starts either and sets these (CTest's mq_contract_sqs and
// mq_contract_amqp). Waiting for a broker is a bounded poll of the broker itself, never a
// fixed sleep.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN

#include <cstdlib>
#include <doctest/doctest.h>
#include <lodge/aws/credentials.hpp>
#include <lodge/crypto/random.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace lodge;

namespace {

std::string env(const char *k) {
  const char *v = std::getenv(k);
  return v ? v : "";
}

bool is_sqs() {
  return env("LODGE_TEST_MQ") == "sqs";
}

std::string fresh_name() {
  return "lodge-c-" + crypto::random_uuid().substr(0, 8);
}

std::string url_for(const std::string &name) {
  if (is_sqs()) return "sqs://" + name;
  return env("LODGE_TEST_AMQP_URL") + "?queue=" + name;
}

mq::QueueOptions options(int64_t visibility_ms = 0, const std::string &key_id = "testing",
                         const std::string &secret = "testing") {
  mq::QueueOptions o;
  o.endpoint = env("LODGE_TEST_SQS_ENDPOINT");
  aws::Credentials c;
  c.access_key_id = key_id;
  c.secret_access_key = secret;
  o.credentials = std::make_shared<aws::CredentialSource>(
      c, [c]() -> Result<aws::Credentials> { return c; }, util::system_clock());
  o.timeout_ms = 10'000;
  o.visibility_timeout_ms = visibility_ms;
  return o;
}

std::unique_ptr<mq::MessageQueue> open(const std::string &url, const mq::QueueOptions &o = options()) {
  auto parsed = mq::parse_queue_url(url);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  auto q = mq::open_queue(parsed.value(), o);
  REQUIRE_MESSAGE(q.ok(), q.error().message);
  return std::move(q).take();
}

std::unique_ptr<mq::MessageQueue> fresh_queue(std::string &name, const mq::QueueOptions &o = options()) {
  name = fresh_name();
  auto q = open(url_for(name), o);
  auto s = q->ensure_queues();
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  return q;
}

// Receives until `want` deliveries came or `limit_ms` passed (each receive waits up to 1 s).
std::vector<mq::Delivery> receive_all(mq::MessageQueue &q, size_t want, int64_t limit_ms = 20'000) {
  std::vector<mq::Delivery> got;
  int64_t end = util::steady_ms() + limit_ms;
  while (got.size() < want && util::steady_ms() < end) {
    auto r = q.receive(10, 1000);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    for (auto &d : r.value())
      got.push_back(std::move(d));
  }
  return got;
}

std::vector<mq::OutMessage> messages(int n, const std::string &tag) {
  std::vector<mq::OutMessage> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    out.push_back({"ledger:task:" + tag + std::to_string(i),
                   R"({"type":"cleanup","task_id":)" + std::to_string(i) + R"(,"tag":")" + tag + "\"}"});
  return out;
}

// Polls counts until `pred` holds or 20 s passed; the last counts.
template <class Pred> mq::QueueCounts await_counts(mq::MessageQueue &q, Pred pred) {
  mq::QueueCounts c;
  int64_t end = util::steady_ms() + 20'000;
  do {
    auto r = q.counts();
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    c = r.value();
    if (pred(c)) return c; // each counts() is a round trip to the broker: the poll's pace
  } while (util::steady_ms() < end);
  return c;
}

} // namespace

TEST_CASE("publish a batch: each message confirmed with an id, received once, and ack removes it") {
  std::string name;
  auto q = fresh_queue(name);
  auto batch = messages(12, "a"); // more than one SQS batch of 10
  auto ids = q->publish(batch);
  REQUIRE(ids.size() == batch.size());
  std::set<std::string> distinct;
  for (const auto &id : ids) {
    REQUIRE_MESSAGE(id.ok(), id.error().message);
    CHECK(!id.value().empty());
    distinct.insert(id.value());
  }
  CHECK(distinct.size() == batch.size());

  auto got = receive_all(*q, batch.size());
  REQUIRE(got.size() == batch.size());
  std::set<std::string> bodies, sent, got_ids;
  for (const auto &m : batch)
    sent.insert(m.body);
  for (const auto &d : got) {
    bodies.insert(d.body);
    got_ids.insert(d.message_id);
    CHECK(d.receive_count == 1);
    CHECK(!d.handle.empty());
  }
  CHECK(bodies == sent);
  CHECK(got_ids == distinct); // the id publish gave is the one a consumer sees
  for (const auto &d : got) {
    auto a = q->ack(d);
    REQUIRE_MESSAGE(a.ok(), a.error().message);
  }
  auto c = await_counts(*q, [](const mq::QueueCounts &k) { return k.ready == 0 && k.delayed == 0; });
  CHECK(c.ready == 0);
  CHECK(c.delayed == 0);
  CHECK(c.dead == 0);
  // Acknowledged messages never come back (not even after a new connection).
  q.reset();
  auto again = open(url_for(name));
  auto none = again->receive(10, 1000);
  REQUIRE(none.ok());
  CHECK(none.value().empty());
}

TEST_CASE("a message received and never settled is delivered again") {
  std::string name;
  // SQS: a one-second visibility timeout; AMQP: the connection closes.
  auto o = options(1000);
  auto q = fresh_queue(name, o);
  auto ids = q->publish(messages(1, "b"));
  REQUIRE(ids.at(0).ok());
  auto first = receive_all(*q, 1);
  REQUIRE(first.size() == 1);
  CHECK(first[0].receive_count == 1);
  if (!is_sqs()) q = open(url_for(name), o); // the old connection closes
  auto second = receive_all(*q, 1);
  REQUIRE(second.size() == 1);
  CHECK(second[0].body == first[0].body);
  CHECK(second[0].message_id == ids.at(0).value());
  CHECK(second[0].receive_count == 2);
  CHECK(second[0].handle != first[0].handle);
  if (!is_sqs()) { // a delivery tag of a closed connection acknowledges nothing
    auto stale = q->ack(first[0]);
    REQUIRE(!stale.ok());
    CHECK(stale.error().code == Errc::not_found);
  }
  REQUIRE(q->ack(second[0]).ok());
}

TEST_CASE("delay keeps a message away for the delay, then it comes back") {
  std::string name;
  auto q = fresh_queue(name);
  REQUIRE(q->publish(messages(1, "c")).at(0).ok());
  auto got = receive_all(*q, 1);
  REQUIRE(got.size() == 1);
  const int64_t delay_ms = 2000;
  int64_t start = util::steady_ms();
  auto s = q->delay(got[0], delay_ms);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  auto c = q->counts();
  REQUIRE(c.ok());
  CHECK(c.value().ready == 0);
  CHECK(c.value().delayed == 1); // SQS: not visible; AMQP: in NAME-delay
  auto early = q->receive(10, 500);
  REQUIRE(early.ok());
  CHECK(early.value().empty());
  auto back = receive_all(*q, 1);
  int64_t waited = util::steady_ms() - start;
  REQUIRE(back.size() == 1);
  CHECK(back[0].body == got[0].body);
  CHECK(back[0].message_id == got[0].message_id);
  // Not sooner than asked (a broker's clock granularity aside: SQS counts whole seconds).
  CHECK(waited >= delay_ms - 250);
  REQUIRE(q->ack(back[0]).ok());
  auto after = await_counts(*q, [](const mq::QueueCounts &k) { return k.ready == 0 && k.delayed == 0; });
  CHECK(after.delayed == 0);
}

TEST_CASE("dead_letter moves a message to NAME-dlq, with counts showing it") {
  std::string name;
  auto q = fresh_queue(name);
  REQUIRE(q->publish(messages(2, "d")).at(1).ok());
  auto got = receive_all(*q, 2);
  REQUIRE(got.size() == 2);
  auto s = q->dead_letter(got[0], "forged: no such task in ledger 1234");
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  REQUIRE(q->ack(got[1]).ok());
  auto c = await_counts(*q, [](const mq::QueueCounts &k) { return k.dead == 1 && k.ready == 0; });
  CHECK(c.dead == 1);
  CHECK(c.ready == 0);
  // The dead letter is the message itself, read from NAME-dlq as a queue of its own.
  auto dlq = open(url_for(name + "-dlq"));
  auto dead = receive_all(*dlq, 1);
  REQUIRE(dead.size() == 1);
  CHECK(dead[0].body == got[0].body);
  REQUIRE(dlq->ack(dead[0]).ok());
}

TEST_CASE("ensure_queues twice changes nothing, messages included") {
  std::string name;
  auto q = fresh_queue(name);
  REQUIRE(q->publish(messages(1, "e")).at(0).ok());
  auto again = open(url_for(name));
  auto s = again->ensure_queues();
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  REQUIRE(q->ensure_queues().ok());
  auto c = await_counts(*again, [](const mq::QueueCounts &k) { return k.ready == 1; });
  CHECK(c.ready == 1);
  CHECK(c.dead == 0);
}

TEST_CASE("a queue never created: publish and receive say so") {
  auto q = open(url_for(fresh_name()));
  auto ids = q->publish(messages(2, "f"));
  REQUIRE(ids.size() == 2);
  for (const auto &id : ids) {
    REQUIRE(!id.ok());
    CHECK(id.error().code == Errc::not_found);
  }
  auto c = q->counts();
  REQUIRE(!c.ok());
  CHECK(c.error().code == Errc::not_found);
}

TEST_CASE("an unreachable broker: a clear error, and no password in it") {
  std::string url =
      is_sqs() ? "sqs://lodge-unreachable" : "amqp://lodge:s3cr3t-pw@127.0.0.1:1/?queue=lodge-unreachable";
  auto o = options();
  o.endpoint = "http://127.0.0.1:1";
  o.timeout_ms = 3000;
  auto q = open(url, o);
  auto s = q->ensure_queues();
  REQUIRE(!s.ok());
  CHECK(s.error().code == Errc::storage_unavailable);
  CHECK(s.error().message.find("127.0.0.1:1") != std::string::npos);
  CHECK(s.error().message.find("s3cr3t-pw") == std::string::npos);
  auto ids = q->publish(messages(2, "g"));
  REQUIRE(ids.size() == 2);
  CHECK(!ids[0].ok());
  CHECK(!ids[1].ok());
  auto r = q->receive(1, 0);
  CHECK(!r.ok());
}

TEST_CASE("amqp: a wrong password is ACCESS_DENIED, and the password is not in the message") {
  if (is_sqs()) return; // moto checks no signatures here; the store's auth suite covers SigV4
  std::string base = env("LODGE_TEST_AMQP_URL");
  auto at = base.find('@');
  auto colon = base.find(':', 7);
  std::string url = base.substr(0, colon + 1) + "wrong-pw-xyz" + base.substr(at) + "?queue=q";
  auto q = open(url);
  auto s = q->ensure_queues();
  REQUIRE(!s.ok());
  CHECK(s.error().code == Errc::access_denied);
  CHECK(s.error().message.find("wrong-pw-xyz") == std::string::npos);
  CHECK(q->url().text.find("wrong-pw-xyz") == std::string::npos);
}

TEST_CASE(
    "sqs: every request is signed for service sqs (a moto that checks signatures), a wrong secret refused") {
  if (!is_sqs()) return;
  std::string endpoint = env("LODGE_TEST_SQS_SIGNED_ENDPOINT");
  REQUIRE_MESSAGE(!endpoint.empty(),
                  "LODGE_TEST_SQS_SIGNED_ENDPOINT is not set (tests/harness/brokers.py sets it)");
  auto good = options(0, env("LODGE_TEST_SQS_KEY_ID"), env("LODGE_TEST_SQS_SECRET"));
  good.endpoint = endpoint;
  std::string name;
  auto q = fresh_queue(name, good);
  auto ids = q->publish(messages(2, "s"));
  REQUIRE_MESSAGE(ids.at(1).ok(), ids.at(1).error().message);
  auto got = receive_all(*q, 2);
  REQUIRE(got.size() == 2);
  REQUIRE(q->delay(got[0], 1000).ok());
  REQUIRE(q->dead_letter(got[1], "signed").ok());
  auto c = q->counts();
  REQUIRE_MESSAGE(c.ok(), c.error().message);
  CHECK(c.value().dead == 1);

  auto bad = options(0, env("LODGE_TEST_SQS_KEY_ID"), "not-the-secret");
  bad.endpoint = endpoint;
  auto refused = open(url_for(name), bad);
  auto r = refused->receive(1, 0);
  REQUIRE(!r.ok());
  CHECK(r.error().code == Errc::access_denied);
  CHECK(r.error().message.find("not-the-secret") == std::string::npos);
}
