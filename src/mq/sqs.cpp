// SQS through its JSON protocol (AWS JSON 1.0: POST / with X-Amz-Target AmazonSQS.ACTION),
// signed with SigV4 (service "sqs") by the aws layer's signer and credential source, sent
// through the libcurl transport and the HTTP retry loop every store backend uses.
//
// Retries re-send a whole call: a SendMessageBatch whose answer was lost may be delivered
// twice, which the outbox's at-least-once rules already allow (consumers are idempotent).
// Queue URLs are asked for once (GetQueueUrl; CreateQueue's answer in ensure_queues) and kept.

#include "backends.hpp"

#include <algorithm>
#include <lodge/aws/credentials.hpp>
#include <lodge/aws/signer.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>

namespace lodge::mq {

namespace {

using nlohmann::json;

constexpr int k_batch_max = 10;                // SendMessageBatch and ReceiveMessage take at most 10
constexpr int64_t k_long_poll_max_s = 20;      // ReceiveMessage's WaitTimeSeconds limit
constexpr int64_t k_visibility_max_s = 43'200; // 12 h, ChangeMessageVisibility's limit
constexpr size_t k_reason_max = 1024;          // a dead letter's reason, as a message attribute

int64_t ceil_seconds(int64_t ms) {
  return ms <= 0 ? 0 : (ms + 999) / 1000;
}

// The class an SQS error code names, where it names one (else the HTTP status decides).
std::optional<Errc> errc_for_code(const std::string &c) {
  if (c == "QueueDoesNotExist" || c == "AWS.SimpleQueueService.NonExistentQueue" ||
      c == "ReceiptHandleIsInvalid" || c == "MessageNotInflight" || c == "InvalidReceiptHandle")
    return Errc::not_found;
  if (c == "AccessDenied" || c == "AccessDeniedException" || c == "InvalidClientTokenId" ||
      c == "SignatureDoesNotMatch" || c == "IncompleteSignature" || c == "UnrecognizedClientException" ||
      c == "InvalidSecurity" || c == "KmsAccessDenied")
    return Errc::access_denied;
  if (c == "ThrottlingException" || c == "RequestThrottled" || c == "OverLimit") return Errc::throttled;
  if (c == "QueueAlreadyExists" || c == "QueueNameExists") return Errc::precondition_failed;
  if (c == "InternalError" || c == "ServiceUnavailable") return Errc::storage_unavailable;
  return std::nullopt;
}

// "com.amazonaws.sqs#QueueDoesNotExist" -> "QueueDoesNotExist".
std::string short_code(const std::string &type) {
  auto hash = type.rfind('#');
  return hash == std::string::npos ? type : type.substr(hash + 1);
}

json string_attribute(const std::string &value) {
  return json{{"DataType", "String"}, {"StringValue", value}};
}

class SqsQueue final : public MessageQueue {
public:
  SqsQueue(QueueUrl url, QueueOptions options, std::string endpoint, std::string host,
           std::unique_ptr<http::Transport> transport, http::Sleeper &sleeper)
      : m_url(std::move(url)), m_options(std::move(options)), m_endpoint(std::move(endpoint)),
        m_host(std::move(host)), m_transport(std::move(transport)), m_sleeper(sleeper) {
    if (!m_url.queue_url.empty()) {
      m_queue_url = m_url.queue_url;
      m_dlq_url = m_url.queue_url + "-dlq"; // the same account and endpoint; the name is last
    }
  }

  Status ensure_queues() override {
    auto dlq = call("CreateQueue", json{{"QueueName", m_url.name + "-dlq"}}, m_url.name + "-dlq");
    if (!dlq) return dlq.error();
    auto main = call("CreateQueue", json{{"QueueName", m_url.name}}, m_url.name);
    if (!main) return main.error();
    m_dlq_url = dlq->value("QueueUrl", m_dlq_url);
    m_queue_url = main->value("QueueUrl", m_queue_url);
    return ok_status();
  }

  std::vector<Result<std::string>> publish(const std::vector<OutMessage> &batch) override {
    std::vector<Result<std::string>> out;
    out.reserve(batch.size());
    for (size_t start = 0; start < batch.size(); start += k_batch_max) {
      size_t end = std::min(batch.size(), start + static_cast<size_t>(k_batch_max));
      publish_chunk(batch, start, end, out);
    }
    return out;
  }

  Result<std::vector<Delivery>> receive(int max, int64_t wait_ms) override {
    std::vector<Delivery> out;
    if (max <= 0) return out;
    auto queue = queue_url();
    if (!queue) return queue.error();
    int64_t wait_s = std::min(ceil_seconds(wait_ms), k_long_poll_max_s);
    json req{{"QueueUrl", queue.value()},
             {"MaxNumberOfMessages", std::min(max, k_batch_max)},
             {"WaitTimeSeconds", wait_s},
             {"AttributeNames", json::array({"ApproximateReceiveCount"})},
             {"MessageSystemAttributeNames", json::array({"ApproximateReceiveCount"})}};
    if (m_options.visibility_timeout_ms > 0)
      req["VisibilityTimeout"] = std::min(ceil_seconds(m_options.visibility_timeout_ms), k_visibility_max_s);
    auto r = call("ReceiveMessage", req, m_url.name, wait_s * 1000);
    if (!r) return r.error();
    for (const auto &m : r->value("Messages", json::array())) {
      Delivery d;
      d.body = m.value("Body", "");
      d.message_id = m.value("MessageId", "");
      d.handle = m.value("ReceiptHandle", "");
      auto attrs = m.value("Attributes", json::object());
      d.receive_count = util::parse_int(attrs.value("ApproximateReceiveCount", "1")).value_or(1);
      out.push_back(std::move(d));
    }
    return out;
  }

  Status ack(const Delivery &d) override {
    auto queue = queue_url();
    if (!queue) return queue.error();
    auto r =
        call("DeleteMessage", json{{"QueueUrl", queue.value()}, {"ReceiptHandle", d.handle}}, m_url.name);
    if (!r) return r.error();
    return ok_status();
  }

  Status delay(const Delivery &d, int64_t delay_ms) override {
    auto queue = queue_url();
    if (!queue) return queue.error();
    auto r = call("ChangeMessageVisibility",
                  json{{"QueueUrl", queue.value()},
                       {"ReceiptHandle", d.handle},
                       {"VisibilityTimeout", std::min(ceil_seconds(delay_ms), k_visibility_max_s)}},
                  m_url.name);
    if (!r) return r.error();
    return ok_status();
  }

  Status dead_letter(const Delivery &d, const std::string &reason) override {
    auto dlq = dlq_url();
    if (!dlq) return dlq.error();
    json attrs{
        {"lodge-reason", string_attribute(reason.empty() ? "unspecified" : reason.substr(0, k_reason_max))}};
    if (!d.message_id.empty()) attrs["lodge-message-id"] = string_attribute(d.message_id);
    auto sent = call("SendMessage",
                     json{{"QueueUrl", dlq.value()}, {"MessageBody", d.body}, {"MessageAttributes", attrs}},
                     m_url.name + "-dlq");
    if (!sent) return sent.error();
    return ack(d);
  }

  Result<QueueCounts> counts() override {
    auto queue = queue_url();
    if (!queue) return queue.error();
    auto main = call("GetQueueAttributes",
                     json{{"QueueUrl", queue.value()},
                          {"AttributeNames", json::array({"ApproximateNumberOfMessages",
                                                          "ApproximateNumberOfMessagesNotVisible",
                                                          "ApproximateNumberOfMessagesDelayed"})}},
                     m_url.name);
    if (!main) return main.error();
    QueueCounts c;
    auto attrs = main->value("Attributes", json::object());
    auto number = [&](const json &a, const char *name) {
      return util::parse_int(a.value(name, "0")).value_or(0);
    };
    c.ready = number(attrs, "ApproximateNumberOfMessages");
    c.delayed = number(attrs, "ApproximateNumberOfMessagesNotVisible") +
                number(attrs, "ApproximateNumberOfMessagesDelayed");
    auto dlq = dlq_url();
    if (!dlq) return dlq.error();
    auto dead = call(
        "GetQueueAttributes",
        json{{"QueueUrl", dlq.value()}, {"AttributeNames", json::array({"ApproximateNumberOfMessages"})}},
        m_url.name + "-dlq");
    if (!dead) return dead.error();
    c.dead = number(dead->value("Attributes", json::object()), "ApproximateNumberOfMessages");
    return c;
  }

  [[nodiscard]] const QueueUrl &url() const override { return m_url; }

private:
  void publish_chunk(const std::vector<OutMessage> &batch, size_t start, size_t end,
                     std::vector<Result<std::string>> &out) {
    auto queue = queue_url();
    json entries = json::array();
    for (size_t i = start; i < end; ++i) {
      json e{{"Id", "m" + std::to_string(i - start)}, {"MessageBody", batch[i].body}};
      if (!batch[i].dedup_id.empty())
        e["MessageAttributes"] = json{{"lodge-dedup-id", string_attribute(batch[i].dedup_id)}};
      entries.push_back(std::move(e));
    }
    Result<json> r =
        queue ? call("SendMessageBatch", json{{"QueueUrl", queue.value()}, {"Entries", entries}}, m_url.name)
              : Result<json>(queue.error());
    if (!r) {
      for (size_t i = start; i < end; ++i)
        out.emplace_back(r.error());
      return;
    }
    std::map<std::string, Result<std::string>> by_id;
    for (const auto &s : r->value("Successful", json::array()))
      by_id.emplace(s.value("Id", ""), s.value("MessageId", ""));
    for (const auto &f : r->value("Failed", json::array())) {
      std::string code = f.value("Code", "");
      Errc errc = errc_for_code(code).value_or(f.value("SenderFault", true) ? Errc::storage_error
                                                                            : Errc::storage_unavailable);
      by_id.emplace(f.value("Id", ""), Error(errc, "SQS SendMessageBatch " + m_url.name + ": " + code + ": " +
                                                       f.value("Message", "")));
    }
    for (size_t i = start; i < end; ++i) {
      auto it = by_id.find("m" + std::to_string(i - start));
      if (it == by_id.end())
        out.emplace_back(Error(Errc::storage_error, "SQS SendMessageBatch " + m_url.name +
                                                        ": no answer for message " + std::to_string(i)));
      else
        out.push_back(it->second);
    }
  }

  Result<std::string> queue_url() {
    if (m_queue_url.empty()) {
      auto r = call("GetQueueUrl", json{{"QueueName", m_url.name}}, m_url.name);
      if (!r) return r.error();
      m_queue_url = r->value("QueueUrl", "");
    }
    return m_queue_url;
  }
  Result<std::string> dlq_url() {
    if (m_dlq_url.empty()) {
      auto r = call("GetQueueUrl", json{{"QueueName", m_url.name + "-dlq"}}, m_url.name + "-dlq");
      if (!r) return r.error();
      m_dlq_url = r->value("QueueUrl", "");
    }
    return m_dlq_url;
  }

  // One action, retried by the HTTP retry loop; its JSON answer.
  Result<json> call(const std::string &action, const json &body, const std::string &queue,
                    int64_t wait_ms = 0) {
    std::string what = "SQS " + action + " " + queue + " at " + m_endpoint;
    std::string text = body.dump();
    int64_t deadline = util::steady_ms() + m_options.timeout_ms + wait_ms;
    auto r = http::with_retries(m_retry, m_sleeper, what, deadline,
                                [&] { return send_once(action, text, what, deadline); });
    if (!r) return r.error();
    if (r->body.empty()) return json::object();
    auto parsed = json::parse(r->body, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object())
      return Error(Errc::storage_error, what + ": the answer is not a JSON object");
    return parsed;
  }

  Result<http::Response> send_once(const std::string &action, const std::string &text,
                                   const std::string &what, int64_t deadline) {
    int64_t now = util::system_clock().now_ms();
    aws::SignInput in;
    in.method = "POST";
    in.raw_path = "/";
    in.payload_hash = crypto::sha256_hex(text);
    in.headers = {{"host", m_host},
                  {"x-amz-date", aws::amz_date(now)},
                  {"x-amz-target", "AmazonSQS." + action},
                  {"content-type", "application/x-amz-json-1.0"}};
    auto creds = m_options.credentials->current();
    if (!creds->session_token.empty()) in.headers.emplace_back("x-amz-security-token", creds->session_token);
    auto s = aws::sign_header(in, *creds, m_options.region, "sqs", now, &m_keys);
    http::StringBody body(text);
    http::Request req;
    req.method = "POST";
    req.url = m_endpoint + "/";
    req.headers = in.headers;
    req.headers.emplace_back("authorization", s.authorization);
    req.body = &body;
    req.deadline_steady_ms = deadline;
    auto r = m_transport->perform(req);
    if (!r) {
      Error e = r.error();
      e.message = what + ": " + e.message;
      return e;
    }
    if (r->status >= 300) return error_from(r.value(), what);
    return r;
  }

  static Error error_from(const http::Response &r, const std::string &what) {
    http::ServiceError said;
    said.request_id = r.header("x-amzn-requestid");
    auto parsed = json::parse(r.body, nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) {
      said.code = short_code(parsed.value("__type", ""));
      said.message = parsed.value("message", parsed.value("Message", ""));
    }
    return http::error_for_answer(r, what, said, errc_for_code(said.code));
  }

  QueueUrl m_url;
  QueueOptions m_options;
  std::string m_endpoint; // scheme://host[:port]
  std::string m_host;     // host[:port], as signed
  std::unique_ptr<http::Transport> m_transport;
  http::Sleeper &m_sleeper;
  http::RetryPolicy m_retry;
  aws::SigningKeyCache m_keys;
  std::string m_queue_url, m_dlq_url;
};

} // namespace

Result<std::unique_ptr<MessageQueue>> make_sqs_queue(const QueueUrl &url, const QueueOptions &options,
                                                     std::unique_ptr<http::Transport> transport,
                                                     http::Sleeper &sleeper) {
  if (!options.credentials)
    return Error(Errc::config_invalid, "queue " + url.text + ": no AWS credentials for SQS");
  std::string endpoint = !url.endpoint.empty()       ? url.endpoint
                         : !options.endpoint.empty() ? options.endpoint
                                                     : "https://sqs." + options.region + ".amazonaws.com";
  while (!endpoint.empty() && endpoint.back() == '/')
    endpoint.pop_back();
  if (util::log::url_has_userinfo(endpoint)) // not echoed: the password would be
    return Error(Errc::config_invalid,
                 "queue " + url.text +
                     ": the SQS endpoint (AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL) has user "
                     "information (user:password@ before the host), which is refused");
  auto scheme_end = endpoint.find("://");
  std::string scheme = scheme_end == std::string::npos ? "" : endpoint.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    return Error(Errc::config_invalid, "queue " + url.text +
                                           ": the SQS endpoint must be http(s)://HOST[:PORT], got '" +
                                           util::escape_for_terminal(endpoint) + "'");
  std::string host = endpoint.substr(scheme_end + 3);
  if (host.empty() || host.find('/') != std::string::npos)
    return Error(Errc::config_invalid, "queue " + url.text +
                                           ": the SQS endpoint must be http(s)://HOST[:PORT], got '" +
                                           util::escape_for_terminal(endpoint) + "'");
  return std::unique_ptr<MessageQueue>(
      std::make_unique<SqsQueue>(url, options, endpoint, host, std::move(transport), sleeper));
}

} // namespace lodge::mq
