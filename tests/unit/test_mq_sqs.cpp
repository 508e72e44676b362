// The SQS backend's requests and its reading of answers, against a scripted transport (the
// broker contract suite, tests/mq, runs it against moto_server).
#include "fake_transport.hpp"
#include "support.hpp"

#include <lodge/aws/credentials.hpp>
#include <mq/backends.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;
using nlohmann::json;

namespace {
class NoSleep final : public http::Sleeper {
public:
  void sleep_ms(int64_t ms) override { slept += ms; }
  int64_t slept = 0;
};

struct Sqs {
  testing::ScriptedTransport transport;
  NoSleep sleeper;
  std::unique_ptr<mq::MessageQueue> queue;

  explicit Sqs(const std::string &url = "sqs+http://127.0.0.1:4566/123456789012/events") {
    mq::QueueOptions o;
    o.region = "eu-west-1";
    aws::Credentials c;
    c.access_key_id = "AKID";
    c.secret_access_key = "secret";
    o.credentials = std::make_shared<aws::CredentialSource>(
        c, [c]() -> Result<aws::Credentials> { return c; }, util::system_clock());
    auto q = mq::make_sqs_queue(mq::parse_queue_url(url).value(), o,
                                std::make_unique<testing::ForwardingTransport>(transport), sleeper);
    REQUIRE(q.ok());
    queue = std::move(q).take();
  }
  [[nodiscard]] std::string header(size_t i, const std::string &name) const {
    for (const auto &[k, v] : transport.seen.at(i).headers)
      if (k == name) return v;
    return "";
  }
  [[nodiscard]] json body(size_t i) const { return json::parse(transport.bodies_sent.at(i)); }
};

testing::ScriptedTransport::Step answer(long status, std::string body) {
  testing::ScriptedTransport::Step st;
  st.status = status;
  st.body = std::move(body);
  return st;
}

std::vector<mq::OutMessage> batch(int n) {
  std::vector<mq::OutMessage> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    out.push_back({"u:task:" + std::to_string(i), "{\"n\":" + std::to_string(i) + "}"});
  return out;
}
} // namespace

TEST_CASE("sqs: SendMessageBatch is a signed JSON-protocol POST; one result per message, in order") {
  Sqs s;
  s.transport.script.push_back(
      answer(200, R"({"Successful":[{"Id":"m0","MessageId":"id-0"},{"Id":"m2","MessageId":"id-2"}],
               "Failed":[{"Id":"m1","SenderFault":true,"Code":"InvalidMessageContents","Message":"bad"}]})"));
  auto r = s.queue->publish(batch(3));
  REQUIRE(r.size() == 3);
  REQUIRE(r[0].ok());
  CHECK(r[0].value() == "id-0");
  REQUIRE(!r[1].ok());
  CHECK(r[1].error().code == Errc::storage_error);
  CHECK(r[1].error().message.find("InvalidMessageContents") != std::string::npos);
  CHECK(r[2].value() == "id-2");

  REQUIRE(s.transport.seen.size() == 1);
  const auto &req = s.transport.seen[0];
  CHECK(req.method == "POST");
  CHECK(req.url == "http://127.0.0.1:4566/");
  CHECK(s.header(0, "x-amz-target") == "AmazonSQS.SendMessageBatch");
  CHECK(s.header(0, "content-type") == "application/x-amz-json-1.0");
  CHECK(s.header(0, "host") == "127.0.0.1:4566");
  CHECK(s.header(0, "authorization").find("/eu-west-1/sqs/aws4_request") != std::string::npos);
  auto b = s.body(0);
  CHECK(b["QueueUrl"] == "http://127.0.0.1:4566/123456789012/events");
  REQUIRE(b["Entries"].size() == 3);
  CHECK(b["Entries"][1]["MessageBody"] == "{\"n\":1}");
  CHECK(b["Entries"][1]["MessageAttributes"]["lodge-dedup-id"]["StringValue"] == "u:task:1");
}

TEST_CASE("sqs: a batch of 23 goes as three calls of at most 10; a failed call fails only its messages") {
  Sqs s;
  auto ok = [](int from, int n) {
    json j{{"Successful", json::array()}};
    for (int i = 0; i < n; ++i)
      j["Successful"].push_back(
          {{"Id", "m" + std::to_string(i)}, {"MessageId", "id-" + std::to_string(from + i)}});
    return j.dump();
  };
  s.transport.script.push_back(answer(200, ok(0, 10)));
  s.transport.script.push_back(answer(403, R"({"__type":"com.amazonaws.sqs#AccessDenied","message":"no"})"));
  s.transport.script.push_back(answer(200, ok(20, 3)));
  auto r = s.queue->publish(batch(23));
  REQUIRE(r.size() == 23);
  CHECK(r[9].value() == "id-9");
  for (int i = 10; i < 20; ++i) {
    REQUIRE(!r[static_cast<size_t>(i)].ok());
    CHECK(r[static_cast<size_t>(i)].error().code == Errc::access_denied);
  }
  CHECK(r[22].value() == "id-22");
  CHECK(s.transport.seen.size() == 3); // an access error is not retried
}

TEST_CASE("sqs: receive long-polls and reads receive counts; delay caps at 12 h; errors by their code") {
  Sqs s;
  s.transport.script.push_back(
      answer(200, R"({"Messages":[{"MessageId":"m-1","ReceiptHandle":"rh-1","Body":"{}",
                 "Attributes":{"ApproximateReceiveCount":"3"}}]})"));
  auto got = s.queue->receive(25, 2500);
  REQUIRE(got.ok());
  REQUIRE(got.value().size() == 1);
  CHECK(got.value()[0].receive_count == 3);
  CHECK(got.value()[0].handle == "rh-1");
  CHECK(s.body(0)["MaxNumberOfMessages"] == 10);
  CHECK(s.body(0)["WaitTimeSeconds"] == 3);

  s.transport.script.push_back(answer(200, "{}"));
  REQUIRE(s.queue->delay(got.value()[0], 90LL * 24 * 3600 * 1000).ok());
  CHECK(s.header(1, "x-amz-target") == "AmazonSQS.ChangeMessageVisibility");
  CHECK(s.body(1)["VisibilityTimeout"] == 43200);

  s.transport.script.push_back(answer(
      400,
      R"({"__type":"com.amazonaws.sqs#ReceiptHandleIsInvalid","message":"The receipt handle is not valid"})"));
  auto a = s.queue->ack(got.value()[0]);
  REQUIRE(!a.ok());
  CHECK(a.error().code == Errc::not_found);
  CHECK(a.error().message.find("DeleteMessage events") != std::string::npos);

  s.transport.script.push_back(answer(503, R"({"__type":"com.amazonaws.sqs#ServiceUnavailable"})"));
  s.transport.script.push_back(answer(200, "{}"));
  REQUIRE(s.queue->ack(got.value()[0]).ok()); // retried once
  CHECK(s.transport.seen.size() == 5);
}

TEST_CASE("sqs: sqs://NAME asks for the queue URL once; dead_letter sends to NAME-dlq with the reason, then "
          "deletes") {
  Sqs s("sqs://events");
  s.transport.script.push_back(answer(200, R"({"QueueUrl":"https://sqs.example/1/events"})"));
  s.transport.script.push_back(
      answer(200, R"({"Messages":[{"MessageId":"m-1","ReceiptHandle":"rh-1","Body":"{\"a\":1}"}]})"));
  s.transport.script.push_back(answer(200, R"({"QueueUrl":"https://sqs.example/1/events-dlq"})"));
  s.transport.script.push_back(answer(200, R"({"MessageId":"d-1"})"));
  s.transport.script.push_back(answer(200, "{}"));
  auto got = s.queue->receive(1, 0);
  REQUIRE(got.ok());
  REQUIRE(got.value().size() == 1);
  CHECK(got.value()[0].receive_count == 1);
  REQUIRE(s.queue->dead_letter(got.value()[0], "forged").ok());
  REQUIRE(s.transport.seen.size() == 5);
  CHECK(s.transport.seen[0].url == "https://sqs.eu-west-1.amazonaws.com/");
  CHECK(s.body(0)["QueueName"] == "events");
  CHECK(s.body(2)["QueueName"] == "events-dlq");
  CHECK(s.header(3, "x-amz-target") == "AmazonSQS.SendMessage");
  CHECK(s.body(3)["QueueUrl"] == "https://sqs.example/1/events-dlq");
  CHECK(s.body(3)["MessageBody"] == "{\"a\":1}");
  CHECK(s.body(3)["MessageAttributes"]["lodge-reason"]["StringValue"] == "forged");
  CHECK(s.header(4, "x-amz-target") == "AmazonSQS.DeleteMessage");
  CHECK(s.body(4)["QueueUrl"] == "https://sqs.example/1/events");
  CHECK(s.body(4)["ReceiptHandle"] == "rh-1");
}
