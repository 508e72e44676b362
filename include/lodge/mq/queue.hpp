#pragma once
// A message queue lodge publishes its outbox to and consumes cleanup events from: SQS (its
// JSON protocol, SigV4 with service "sqs") or RabbitMQ (AMQP 0-9-1 through rabbitmq-c).
// A backend only moves messages; what a message means (and every ledger rule) is ops'.
//
// Queues of one URL NAME: NAME (the events), NAME-delay (RabbitMQ only: a message waits
// there for its per-message expiration, then dead-letters back to NAME: a retry without
// hot redelivery), NAME-dlq (the dead letters).

#include <cstdint>
#include <lodge/error.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::aws {
class CredentialSource;
}

namespace lodge::mq {

enum class Broker { sqs, amqp };

// A parsed queue URL.
//  sqs://NAME                      the queue NAME at the SQS endpoint (QueueOptions)
//  sqs+http://HOST:PORT/ACCOUNT/NAME, sqs+https://...   a queue URL as SQS gives it
//  amqp://USER[:PASSWORD]@HOST[:PORT]/[VHOST]?queue=NAME   (amqps is not supported)
struct QueueUrl {
  Broker broker = Broker::sqs;
  std::string text;      // as given, for messages (the password replaced by "***")
  std::string name;      // the queue's name
  std::string endpoint;  // sqs: "http(s)://host:port" when given in the URL; amqp: unused
  std::string queue_url; // sqs: the full queue URL when given
  std::string host;      // amqp
  int port = 5672;       // amqp
  std::string vhost = "/";
  std::string user, password; // amqp
};
// USAGE error naming what is wrong for anything else.
[[nodiscard]] Result<QueueUrl> parse_queue_url(std::string_view url);

// What opening a queue needs beyond its URL (for SQS, resolve_sqs_options in mq/settings.hpp
// builds it from what the CLI read: the same credential chain and region as the S3 store).
struct QueueOptions {
  std::string region = "us-east-1";                   // sqs
  std::string endpoint;                               // sqs://NAME: e.g. http://127.0.0.1:PORT; "" = AWS's
  std::shared_ptr<aws::CredentialSource> credentials; // sqs
  int64_t timeout_ms = 30'000;                        // a connection, a request, a publisher confirmation
  // sqs: how long a received message stays invisible (ReceiveMessage's VisibilityTimeout,
  // rounded up to seconds); 0: the queue's own. AMQP has none: a delivery is held until
  // settled or its connection closes.
  int64_t visibility_timeout_ms = 0;
};

struct OutMessage {
  std::string dedup_id; // lodge's stable id of the event ("<ledger uuid>:task:<id>", ...)
  std::string body;     // JSON
};

struct Delivery {
  std::string body;
  std::string message_id;    // the broker's id ("" when none)
  std::string handle;        // SQS receipt handle; AMQP "CONNECTION:TAG" (its delivery tag)
  int64_t receive_count = 1; // SQS ApproximateReceiveCount; AMQP: 1, or 2 when redelivered
};

struct QueueCounts {
  std::optional<int64_t> ready;   // messages waiting in NAME
  std::optional<int64_t> delayed; // in flight or waiting (SQS not visible; AMQP NAME-delay)
  std::optional<int64_t> dead;    // messages in NAME-dlq
};

// One object is used by one thread at a time (a relay's or a consumer's loop); each holds its
// own connection.
class MessageQueue {
public:
  virtual ~MessageQueue() = default;
  // Creates NAME, NAME-delay (AMQP) and NAME-dlq when missing (idempotent).
  virtual Status ensure_queues() = 0;
  // Publishes each message and waits for the broker's confirmation (AMQP publisher
  // confirms; SQS SendMessageBatch's Successful entries). One result per message, in
  // order: the broker's message id, or the error for that message. A whole-batch failure
  // (unreachable) is an Err for each.
  [[nodiscard]] virtual std::vector<Result<std::string>> publish(const std::vector<OutMessage> &batch) = 0;
  // Up to `max` deliveries, waiting at most `wait_ms` for the first (0: do not wait).
  // Each must then be acknowledged, delayed or dead-lettered; one left alone comes back
  // after the visibility timeout (SQS) or when the connection closes (AMQP).
  [[nodiscard]] virtual Result<std::vector<Delivery>> receive(int max, int64_t wait_ms) = 0;
  virtual Status ack(const Delivery &d) = 0;
  // Delivered again no sooner than `delay_ms` from now: SQS ChangeMessageVisibility (capped
  // at 12 h); AMQP the message republished to NAME-delay with that expiration, confirmed,
  // then the original acknowledged.
  virtual Status delay(const Delivery &d, int64_t delay_ms) = 0;
  // The message published to NAME-dlq (with `reason`, confirmed), then the original acknowledged.
  virtual Status dead_letter(const Delivery &d, const std::string &reason) = 0;
  [[nodiscard]] virtual Result<QueueCounts> counts() = 0;
  [[nodiscard]] virtual const QueueUrl &url() const = 0;
};

[[nodiscard]] Result<std::unique_ptr<MessageQueue>> open_queue(const QueueUrl &url,
                                                               const QueueOptions &options);

} // namespace lodge::mq
