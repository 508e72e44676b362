// open_queue: the broker a URL names.

#include "backends.hpp"

namespace lodge::mq {

Result<std::unique_ptr<MessageQueue>> open_queue(const QueueUrl &url, const QueueOptions &options) {
  if (url.broker == Broker::amqp) return make_amqp_queue(url, options);
  http::TransportOptions t;
  t.connect_timeout_ms = std::min<int64_t>(options.timeout_ms, t.connect_timeout_ms);
  return make_sqs_queue(url, options, http::make_curl_transport(t));
}

} // namespace lodge::mq
