#pragma once
// The two brokers behind open_queue (private to the mq layer).

#include <lodge/http/retry.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/mq/queue.hpp>
#include <memory>

namespace lodge::mq {

// SQS over `transport` (make_curl_transport's in open_queue; a scripted one in unit tests).
[[nodiscard]] Result<std::unique_ptr<MessageQueue>>
make_sqs_queue(const QueueUrl &url, const QueueOptions &options, std::unique_ptr<http::Transport> transport,
               http::Sleeper &sleeper = http::real_sleeper());
// RabbitMQ through rabbitmq-c; connects on first use.
[[nodiscard]] Result<std::unique_ptr<MessageQueue>> make_amqp_queue(const QueueUrl &url,
                                                                    const QueueOptions &options);

} // namespace lodge::mq
