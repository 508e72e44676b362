// Queue URLs: what each form gives, and a USAGE error naming what is wrong for anything else
// (never the password).
#include "support.hpp"

#include <lodge/mq/queue.hpp>
#include <string>

using namespace lodge;

namespace {
mq::QueueUrl parsed(const std::string &url) {
  auto r = mq::parse_queue_url(url);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  return r.value();
}

// The error of a URL that must not parse; checks it is USAGE and names `why`.
void refused(const std::string &url, const std::string &why) {
  CAPTURE(url);
  auto r = mq::parse_queue_url(url);
  REQUIRE(!r.ok());
  CHECK(r.error().code == Errc::usage);
  CHECK_MESSAGE(r.error().message.find(why) != std::string::npos, r.error().message);
  CHECK(r.error().message.find("s3cr3t") == std::string::npos);
}
} // namespace

TEST_CASE("queue URL: sqs://NAME and sqs+http(s) queue URLs") {
  auto a = parsed("sqs://lodge-events");
  CHECK(a.broker == mq::Broker::sqs);
  CHECK(a.name == "lodge-events");
  CHECK(a.endpoint.empty());
  CHECK(a.queue_url.empty());
  CHECK(a.text == "sqs://lodge-events");

  auto b = parsed("sqs+http://127.0.0.1:4566/123456789012/lodge_events");
  CHECK(b.broker == mq::Broker::sqs);
  CHECK(b.name == "lodge_events");
  CHECK(b.endpoint == "http://127.0.0.1:4566");
  CHECK(b.queue_url == "http://127.0.0.1:4566/123456789012/lodge_events");

  auto c = parsed("sqs+https://sqs.eu-west-1.amazonaws.com/123456789012/events");
  CHECK(c.endpoint == "https://sqs.eu-west-1.amazonaws.com");
  CHECK(c.queue_url == "https://sqs.eu-west-1.amazonaws.com/123456789012/events");
  CHECK(c.name == "events");

  CHECK(parsed("sqs://" + std::string(76, 'q')).name.size() == 76);
}

TEST_CASE("queue URL: amqp://USER[:PASSWORD]@HOST[:PORT]/[VHOST]?queue=NAME") {
  auto a = parsed("amqp://lodge:s3cr3t@rabbit.example:5673/prod?queue=lodge.events");
  CHECK(a.broker == mq::Broker::amqp);
  CHECK(a.user == "lodge");
  CHECK(a.password == "s3cr3t");
  CHECK(a.host == "rabbit.example");
  CHECK(a.port == 5673);
  CHECK(a.vhost == "prod");
  CHECK(a.name == "lodge.events");
  CHECK(a.text == "amqp://lodge:***@rabbit.example:5673/prod?queue=lodge.events");

  auto b = parsed("amqp://lodge@127.0.0.1/?queue=q");
  CHECK(b.port == 5672);
  CHECK(b.vhost == "/");
  CHECK(b.password.empty());
  CHECK(b.text == "amqp://lodge@127.0.0.1/?queue=q");

  CHECK(parsed("amqp://lodge@h?queue=q").vhost == "/");
  CHECK(parsed("amqp://lodge@h/%2F?queue=q").vhost == "/");
  CHECK(parsed("amqp://lodge@h/a%2Fb?queue=q").vhost == "a/b");
  auto c = parsed("amqp://us%40er:p%3Aw%40d@h/?queue=q");
  CHECK(c.user == "us@er");
  CHECK(c.password == "p:w@d");
}

TEST_CASE("queue URL: each mistake is a USAGE error saying what is wrong, never with the password") {
  refused("lodge-events", "expected sqs://NAME");
  refused("http://host/q", "unknown scheme 'http'");
  refused("amqps://u:s3cr3t@h/?queue=q", "amqps (AMQP over TLS) is not supported");
  refused("sqs://", "no queue name");
  refused("sqs://a/b", "sqs://NAME names a queue only");
  refused("sqs://bad name", "only letters, digits, '-' and '_'");
  refused("sqs://" + std::string(77, 'q'), "longer than 76");
  refused("sqs://events.fifo", "FIFO queues are not supported");
  refused("sqs+http://127.0.0.1:4566/events", "the path must be /ACCOUNT/NAME");
  refused("sqs+http://127.0.0.1:4566/1/2/events", "the path must be /ACCOUNT/NAME");
  refused("sqs+http://127.0.0.1:99999/1/events", "port is 1-65535");
  refused("sqs+https:///1/events", "expected sqs+https://HOST[:PORT]/ACCOUNT/NAME");
  refused("amqp://rabbit/?queue=q", "no user");
  refused("amqp://:s3cr3t@rabbit/?queue=q", "the user is empty");
  refused("amqp://u:s3cr3t@rabbit/", "no queue: add ?queue=NAME");
  refused("amqp://u:s3cr3t@rabbit/?queue=", "no queue: add ?queue=NAME");
  refused("amqp://u:s3cr3t@rabbit/?queue=q&durable=1", "unknown parameter 'durable'");
  refused("amqp://u:s3cr3t@rabbit:0/?queue=q", "port is 1-65535");
  refused("amqp://u:s3cr3t@rabbit:http/?queue=q", "port is 1-65535");
  refused("amqp://u:s3cr3t@rabbit/a/b?queue=q", "one path segment");
  refused("amqp://u:s3cr3t@rabbit/?queue=amq.gen", "'amq.' are the broker's own");
  refused("amqp://u:s3cr3t@rabbit/?queue=a%20b", "only letters, digits");
  refused("amqp://u:s3%zzcr3t@rabbit/?queue=q", "bad percent-encoding");
  refused("amqp://u:s3cr3t@rabbit/?queue=" + std::string(250, 'q'), "longer than 249");
  // The URL as the error shows it: the password replaced.
  auto r = mq::parse_queue_url("amqp://u:s3cr3t@rabbit/");
  REQUIRE(!r.ok());
  CHECK(r.error().message.find("amqp://u:***@rabbit/") != std::string::npos);
}
