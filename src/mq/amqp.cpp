// RabbitMQ (AMQP 0-9-1) through rabbitmq-c: one connection and one channel per queue
// object, opened on first use. Publishes are persistent (delivery mode 2), mandatory, to
// the default exchange, on a channel in confirm mode: a message counts as sent only when
// the broker's basic.ack for it arrived; a basic.nack, or a basic.return (no such queue)
// before the ack, is that message's error. Receiving is a consumer with a prefetch limit.
//
// Any failure closes the connection (the broker hands every unacknowledged delivery out
// again) and the next call opens a new one. A delivery's handle names the connection it
// came on ("GENERATION:TAG"): a delivery tag only means something on its own channel, so a
// handle from a connection since closed is refused rather than acknowledging another message.
//
// The delay queue (NAME-delay) dead-letters expired messages back to NAME. RabbitMQ expires
// per-message TTLs only at the head of a queue, so a message may wait behind a longer delay
// queued before it: it comes back later than asked, never sooner.

#include "backends.hpp"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <array>
#include <atomic>
#include <deque>
#include <lodge/crypto/random.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <sys/time.h>

namespace lodge::mq {

namespace {

constexpr amqp_channel_t k_channel = 1;
constexpr int k_frame_max = 131'072;
constexpr uint16_t k_prefetch_max = 100;
constexpr size_t k_reason_max = 1024;
constexpr int64_t k_close_timeout_ms = 2000;

// Connections opened by this process: a handle names its connection by this number, so a
// handle of any closed connection (of this queue object or another) is refused.
std::atomic<int64_t> g_connections{0};

struct ConnectionDeleter {
  void operator()(amqp_connection_state_t_ *c) const { amqp_destroy_connection(c); }
};
using Connection = std::unique_ptr<amqp_connection_state_t_, ConnectionDeleter>;

struct EnvelopeOwner {
  amqp_envelope_t e{};
  EnvelopeOwner() = default;
  EnvelopeOwner(const EnvelopeOwner &) = delete;
  EnvelopeOwner &operator=(const EnvelopeOwner &) = delete;
  ~EnvelopeOwner() { amqp_destroy_envelope(&e); }
};

struct MessageOwner {
  amqp_message_t m{};
  MessageOwner() = default;
  MessageOwner(const MessageOwner &) = delete;
  MessageOwner &operator=(const MessageOwner &) = delete;
  ~MessageOwner() { amqp_destroy_message(&m); }
};

std::string to_string(amqp_bytes_t b) {
  return b.len == 0 ? std::string{} : std::string(static_cast<const char *>(b.bytes), b.len);
}

amqp_bytes_t bytes_of(const std::string &s) {
  amqp_bytes_t b;
  b.len = s.size();
  b.bytes =
      const_cast<char *>(s.data()); // NOLINT(cppcoreguidelines-pro-type-const-cast): rabbitmq-c only reads it
  return b;
}

timeval timeval_of(int64_t ms) {
  ms = std::max<int64_t>(ms, 0);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

// A string-valued table entry.
amqp_table_entry_t text_entry(const char *key, const std::string &value) {
  amqp_table_entry_t e{};
  e.key = amqp_cstring_bytes(key);
  e.value.kind = AMQP_FIELD_KIND_UTF8;
  e.value.value.bytes = bytes_of(value);
  return e;
}

// What a publish is waiting for: the broker's ack of each tag, or its return before it.
struct Pending {
  size_t index;
  std::string message_id;
};

class AmqpQueue final : public MessageQueue {
public:
  AmqpQueue(QueueUrl url, QueueOptions options) : m_url(std::move(url)), m_options(std::move(options)) {}
  AmqpQueue(const AmqpQueue &) = delete;
  AmqpQueue &operator=(const AmqpQueue &) = delete;
  ~AmqpQueue() override { close(true); }

  Status ensure_queues() override {
    if (auto c = connect(); !c) return c.error();
    if (auto s = declare(m_url.name + "-dlq", nullptr); !s) return s;
    if (auto s = declare(m_url.name, nullptr); !s) return s;
    // Expired messages of NAME-delay go back to NAME through the default exchange.
    std::string target = m_url.name;
    std::string exchange;
    std::array<amqp_table_entry_t, 2> entries{text_entry("x-dead-letter-exchange", exchange),
                                              text_entry("x-dead-letter-routing-key", target)};
    amqp_table_t args{static_cast<int>(entries.size()), entries.data()};
    return declare(m_url.name + "-delay", &args);
  }

  std::vector<Result<std::string>> publish(const std::vector<OutMessage> &batch) override {
    std::vector<Outgoing> out;
    out.reserve(batch.size());
    for (const auto &m : batch)
      out.push_back({m.body, crypto::random_uuid(), m.dedup_id, "", ""});
    return publish_to(m_url.name, out);
  }

  Result<std::vector<Delivery>> receive(int max, int64_t wait_ms) override {
    std::vector<Delivery> out;
    if (max <= 0) return out;
    if (auto c = connect(); !c) return c.error();
    if (auto s = start_consumer(max); !s) return s.error();
    int64_t deadline = util::steady_ms() + std::max<int64_t>(wait_ms, 0);
    while (static_cast<int>(out.size()) < max) {
      if (!m_buffered.empty()) {
        out.push_back(std::move(m_buffered.front()));
        m_buffered.pop_front();
        ++m_unsettled;
        continue;
      }
      // The first waits up to wait_ms; the rest only take what has already arrived.
      int64_t left = out.empty() ? deadline - util::steady_ms() : 0;
      auto got = next_delivery(left);
      if (!got) return got.error();
      if (!got.value()) break;
    }
    return out;
  }

  Status ack(const Delivery &d) override {
    auto tag = tag_of(d);
    if (!tag) return tag.error();
    if (amqp_basic_ack(m_conn.get(), k_channel, tag.value(), 0) != AMQP_STATUS_OK)
      return fail(Errc::storage_unavailable, "acknowledging a message: the connection failed");
    if (m_unsettled > 0) --m_unsettled;
    return ok_status();
  }

  Status delay(const Delivery &d, int64_t delay_ms) override {
    if (auto tag = tag_of(d); !tag) return tag.error();
    std::vector<Outgoing> one{{d.body, d.message_id, "", std::to_string(std::max<int64_t>(delay_ms, 0)), ""}};
    auto r = publish_to(m_url.name + "-delay", one);
    if (!r.at(0)) return r.at(0).error();
    return ack(d);
  }

  Status dead_letter(const Delivery &d, const std::string &reason) override {
    if (auto tag = tag_of(d); !tag) return tag.error();
    std::vector<Outgoing> one{{d.body, d.message_id, "", "", reason.substr(0, k_reason_max)}};
    auto r = publish_to(m_url.name + "-dlq", one);
    if (!r.at(0)) return r.at(0).error();
    return ack(d);
  }

  Result<QueueCounts> counts() override {
    if (auto c = connect(); !c) return c.error();
    QueueCounts c;
    auto ready = message_count(m_url.name);
    if (!ready) return ready.error();
    auto delayed = message_count(m_url.name + "-delay");
    if (!delayed) return delayed.error();
    auto dead = message_count(m_url.name + "-dlq");
    if (!dead) return dead.error();
    c.ready = ready.value();
    c.delayed = delayed.value();
    c.dead = dead.value();
    return c;
  }

  [[nodiscard]] const QueueUrl &url() const override { return m_url; }

private:
  struct Outgoing {
    std::string body;
    std::string message_id;
    std::string dedup_id;
    std::string expiration; // ms, "" when none
    std::string reason;     // a dead letter's, "" when none
  };

  [[nodiscard]] std::string where() const {
    return "AMQP " + m_url.host + ":" + std::to_string(m_url.port) + " (" + m_url.text + ")";
  }

  // Closes the connection (the broker requeues what it had delivered) and returns the error.
  Error fail(Errc code, const std::string &what) {
    close(false);
    return Error(code, where() + ": " + what);
  }
  Error fail_reply(const amqp_rpc_reply_t &r, const std::string &what) {
    Errc code = Errc::storage_unavailable;
    std::string text;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
      text = amqp_error_string2(r.library_error);
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) {
      uint16_t reply_code = 0;
      if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const auto *m = static_cast<const amqp_connection_close_t *>(r.reply.decoded);
        reply_code = m->reply_code;
        text = to_string(m->reply_text);
      } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const auto *m = static_cast<const amqp_channel_close_t *>(r.reply.decoded);
        reply_code = m->reply_code;
        text = to_string(m->reply_text);
      }
      if (reply_code == AMQP_ACCESS_REFUSED || reply_code == AMQP_NOT_ALLOWED) code = Errc::access_denied;
      if (reply_code == AMQP_NOT_FOUND) code = Errc::not_found;
      if (reply_code == AMQP_PRECONDITION_FAILED) code = Errc::precondition_failed;
    } else {
      text = "no reply";
    }
    return fail(code, what + ": " + text);
  }

  // Politely (channel.close, connection.close: each waits for its answer) only while the
  // connection is healthy; after a failure the socket is just dropped.
  void close(bool polite) {
    if (polite && m_conn && m_open) {
      // A broker that stopped answering must not hold the caller for two full RPC timeouts.
      timeval tv = timeval_of(std::min<int64_t>(m_options.timeout_ms, k_close_timeout_ms));
      (void)amqp_set_rpc_timeout(m_conn.get(), &tv);
      (void)amqp_channel_close(m_conn.get(), k_channel, AMQP_REPLY_SUCCESS);
      (void)amqp_connection_close(m_conn.get(), AMQP_REPLY_SUCCESS);
    }
    m_open = false;
    m_conn.reset();
    m_consuming = false;
    m_buffered.clear();
    m_unsettled = 0;
    m_prefetch = 0;
  }

  Status connect() {
    if (m_conn) return ok_status();
    m_generation = ++g_connections;
    m_next_seq = 1;
    m_conn.reset(amqp_new_connection());
    if (!m_conn) return Error(Errc::internal, where() + ": out of memory");
    amqp_socket_t *socket = amqp_tcp_socket_new(m_conn.get()); // owned by the connection
    if (!socket) return fail(Errc::internal, "cannot create a socket");
    timeval tv = timeval_of(m_options.timeout_ms);
    (void)amqp_set_handshake_timeout(m_conn.get(), &tv);
    (void)amqp_set_rpc_timeout(m_conn.get(), &tv);
    int status = amqp_socket_open_noblock(socket, m_url.host.c_str(), m_url.port, &tv);
    if (status != AMQP_STATUS_OK)
      return fail(Errc::storage_unavailable, std::string("cannot connect: ") + amqp_error_string2(status));
    m_open = true;
    auto login = amqp_login(m_conn.get(), m_url.vhost.c_str(), 0, k_frame_max, 0, AMQP_SASL_METHOD_PLAIN,
                            m_url.user.c_str(), m_url.password.c_str());
    if (login.reply_type != AMQP_RESPONSE_NORMAL) {
      // RabbitMQ closes the socket on a refused login before it can say why.
      if (login.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
          login.library_error == AMQP_STATUS_CONNECTION_CLOSED)
        return fail(Errc::access_denied,
                    "login as '" + m_url.user + "' to virtual host '" + m_url.vhost +
                        "' refused (wrong user or password, or no access to the virtual host)");
      return fail_reply(login, "login as '" + m_url.user + "' to virtual host '" + m_url.vhost + "'");
    }
    if (!amqp_channel_open(m_conn.get(), k_channel))
      return fail_reply(amqp_get_rpc_reply(m_conn.get()), "channel.open");
    if (!amqp_confirm_select(m_conn.get(), k_channel))
      return fail_reply(amqp_get_rpc_reply(m_conn.get()), "confirm.select");
    return ok_status();
  }

  Status declare(const std::string &queue, const amqp_table_t *args) {
    amqp_table_t none = amqp_empty_table;
    if (!amqp_queue_declare(m_conn.get(), k_channel, bytes_of(queue), 0, 1, 0, 0, args ? *args : none))
      return fail_reply(amqp_get_rpc_reply(m_conn.get()), "declaring queue " + queue);
    return ok_status();
  }

  Result<int64_t> message_count(const std::string &queue) {
    auto *ok = amqp_queue_declare(m_conn.get(), k_channel, bytes_of(queue), 1, 0, 0, 0, amqp_empty_table);
    if (!ok) return fail_reply(amqp_get_rpc_reply(m_conn.get()), "counting queue " + queue);
    return static_cast<int64_t>(ok->message_count);
  }

  // The broker sends a consumer at most its prefetch count of unacknowledged messages: the
  // deliveries the caller holds unsettled plus the `max` it asks for now (so holding some
  // never starves the next receive), up to k_prefetch_max beyond those held. The limit is
  // the channel's (global): RabbitMQ applies a changed per-consumer limit only to consumers
  // started after it, a channel's at once.
  Status start_consumer(int max) {
    auto prefetch = static_cast<uint16_t>(
        std::min<int64_t>(UINT16_MAX, m_unsettled + std::clamp<int64_t>(max, 1, k_prefetch_max)));
    if (prefetch > m_prefetch) {
      if (!amqp_basic_qos(m_conn.get(), k_channel, 0, prefetch, 1))
        return fail_reply(amqp_get_rpc_reply(m_conn.get()), "basic.qos");
      m_prefetch = prefetch;
    }
    if (m_consuming) return ok_status();
    if (!amqp_basic_consume(m_conn.get(), k_channel, bytes_of(m_url.name), amqp_empty_bytes, 0, 0, 0,
                            amqp_empty_table))
      return fail_reply(amqp_get_rpc_reply(m_conn.get()), "consuming queue " + m_url.name);
    m_consuming = true;
    return ok_status();
  }

  [[nodiscard]] Delivery delivery_of(uint64_t tag, bool redelivered, const amqp_message_t &m) const {
    Delivery d;
    d.body = to_string(m.body);
    if ((m.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0)
      d.message_id = to_string(m.properties.message_id);
    d.handle = std::to_string(m_generation) + ":" + std::to_string(tag);
    d.receive_count = redelivered ? 2 : 1;
    return d;
  }

  // One delivery into m_buffered, waiting up to wait_ms; false when none came.
  Result<bool> next_delivery(int64_t wait_ms) {
    EnvelopeOwner env;
    amqp_maybe_release_buffers(m_conn.get());
    timeval tv = timeval_of(wait_ms);
    auto r = amqp_consume_message(m_conn.get(), &env.e, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      m_buffered.push_back(delivery_of(env.e.delivery_tag, env.e.redelivered != 0, env.e.message));
      return true;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
      return false;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      // Another method came first (the broker closing the channel, a consumer cancelled).
      amqp_frame_t frame;
      if (amqp_simple_wait_frame(m_conn.get(), &frame) != AMQP_STATUS_OK)
        return fail(Errc::storage_unavailable, "receiving: the connection failed");
      if (frame.frame_type == AMQP_FRAME_METHOD && (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                                                    frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
                                                    frame.payload.method.id == AMQP_BASIC_CANCEL_METHOD)) {
        amqp_rpc_reply_t closed{};
        closed.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION;
        closed.reply = frame.payload.method;
        return fail_reply(closed, "receiving from " + m_url.name);
      }
      return false; // a stray frame (a late confirmation): nothing delivered this time
    }
    return fail_reply(r, "receiving from " + m_url.name);
  }

  std::vector<Result<std::string>> publish_to(const std::string &queue, const std::vector<Outgoing> &batch) {
    std::vector<Result<std::string>> out(batch.size(),
                                         Result<std::string>(Error(Errc::internal, "not published")));
    if (batch.empty()) return out;
    if (auto c = connect(); !c) {
      for (auto &r : out)
        r = c.error();
      return out;
    }
    std::map<uint64_t, Pending> pending;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (auto s = send_one(queue, batch[i]); !s) {
        for (size_t j = i; j < batch.size(); ++j)
          out[j] = s.error();
        Error sent = s.error(); // those already written may have reached the broker
        sent.details.ambiguous = true;
        for (auto &[tag, p] : pending)
          out[p.index] = sent;
        return out;
      }
      pending.emplace(m_next_seq++, Pending{i, batch[i].message_id});
    }
    await_confirms(queue, pending, out);
    return out;
  }

  Status send_one(const std::string &queue, const Outgoing &m) {
    amqp_basic_properties_t props{};
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = 2; // persistent
    props.message_id = bytes_of(m.message_id);
    if (!m.expiration.empty()) {
      props._flags |= AMQP_BASIC_EXPIRATION_FLAG;
      props.expiration = bytes_of(m.expiration);
    }
    std::vector<amqp_table_entry_t> headers;
    if (!m.dedup_id.empty()) headers.push_back(text_entry("lodge-dedup-id", m.dedup_id));
    if (!m.reason.empty()) headers.push_back(text_entry("lodge-reason", m.reason));
    if (!headers.empty()) {
      props._flags |= AMQP_BASIC_HEADERS_FLAG;
      props.headers = amqp_table_t{static_cast<int>(headers.size()), headers.data()};
    }
    int status = amqp_basic_publish(m_conn.get(), k_channel, amqp_empty_bytes, bytes_of(queue), 1, 0, &props,
                                    bytes_of(m.body));
    if (status != AMQP_STATUS_OK)
      return fail(Errc::storage_unavailable, "publishing to " + queue + ": " + amqp_error_string2(status));
    return ok_status();
  }

  // Reads frames until every pending tag is acknowledged or refused, or the time is up.
  void await_confirms(const std::string &queue, std::map<uint64_t, Pending> &pending,
                      std::vector<Result<std::string>> &out) {
    std::map<std::string, Error> returned; // message id -> why the broker returned it
    int64_t deadline = util::steady_ms() + m_options.timeout_ms;
    auto settle = [&](uint64_t tag, bool multiple, bool acked) {
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->first == tag || (multiple && it->first < tag)) {
          auto r = returned.find(it->second.message_id);
          if (r != returned.end())
            out[it->second.index] = r->second;
          else if (acked)
            out[it->second.index] = it->second.message_id;
          else
            out[it->second.index] = Error(Errc::storage_unavailable,
                                          where() + ": the broker refused (nack) a message to " + queue);
          it = pending.erase(it);
        } else {
          ++it;
        }
      }
    };
    while (!pending.empty()) {
      amqp_frame_t frame;
      timeval tv = timeval_of(deadline - util::steady_ms());
      int status = amqp_simple_wait_frame_noblock(m_conn.get(), &frame, &tv);
      if (status != AMQP_STATUS_OK) {
        ErrorDetails d;
        d.ambiguous = true; // the broker may have the message; only its confirmation is missing
        Error e(Errc::storage_unavailable,
                where() + ": no confirmation from the broker for a message to " + queue + ": " +
                    amqp_error_string2(status),
                d);
        close(false);
        for (auto &[tag, p] : pending)
          out[p.index] = e;
        return;
      }
      if (frame.frame_type != AMQP_FRAME_METHOD) continue;
      switch (frame.payload.method.id) {
      case AMQP_BASIC_ACK_METHOD: {
        const auto *m = static_cast<const amqp_basic_ack_t *>(frame.payload.method.decoded);
        settle(m->delivery_tag, m->multiple != 0, true);
        break;
      }
      case AMQP_BASIC_NACK_METHOD: {
        const auto *m = static_cast<const amqp_basic_nack_t *>(frame.payload.method.decoded);
        settle(m->delivery_tag, m->multiple != 0, false);
        break;
      }
      case AMQP_BASIC_RETURN_METHOD: {
        const auto *m = static_cast<const amqp_basic_return_t *>(frame.payload.method.decoded);
        std::string why = std::to_string(m->reply_code) + " " + to_string(m->reply_text);
        MessageOwner msg;
        auto r = amqp_read_message(m_conn.get(), frame.channel, &msg.m, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
          return fail_all(fail_reply(r, "reading a returned message"), pending, out);
        returned.emplace(to_string(msg.m.properties.message_id),
                         Error(Errc::not_found, where() + ": the broker returned a message to " + queue +
                                                    ": " + why +
                                                    " (is the queue declared? lodge init creates it)"));
        break;
      }
      case AMQP_BASIC_DELIVER_METHOD: { // a consumer's delivery in between: kept for receive
        const auto *m = static_cast<const amqp_basic_deliver_t *>(frame.payload.method.decoded);
        uint64_t tag = m->delivery_tag;
        bool redelivered = m->redelivered != 0;
        MessageOwner msg;
        auto r = amqp_read_message(m_conn.get(), frame.channel, &msg.m, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
          return fail_all(fail_reply(r, "reading a delivery"), pending, out);
        m_buffered.push_back(delivery_of(tag, redelivered, msg.m));
        break;
      }
      case AMQP_CHANNEL_CLOSE_METHOD:
      case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_rpc_reply_t closed{};
        closed.reply_type = AMQP_RESPONSE_SERVER_EXCEPTION;
        closed.reply = frame.payload.method;
        return fail_all(fail_reply(closed, "publishing to " + queue), pending, out);
      }
      default:
        break;
      }
    }
  }

  static void fail_all(const Error &e, std::map<uint64_t, Pending> &pending,
                       std::vector<Result<std::string>> &out) {
    for (auto &[tag, p] : pending)
      out[p.index] = e;
    pending.clear();
  }

  Result<uint64_t> tag_of(const Delivery &d) {
    auto colon = d.handle.find(':');
    auto gen = util::parse_int(d.handle.substr(0, colon));
    auto tag = util::parse_int(colon == std::string::npos ? std::string{} : d.handle.substr(colon + 1));
    if (!gen || !tag || tag.value_or(0) <= 0)
      return Error(Errc::usage, where() + ": not a delivery handle: '" + d.handle + "'");
    if (!m_conn || *gen != m_generation)
      return Error(Errc::not_found,
                   where() +
                       ": the delivery came on a connection since closed (the broker delivers it again)");
    return static_cast<uint64_t>(*tag);
  }

  QueueUrl m_url;
  QueueOptions m_options;
  Connection m_conn;
  bool m_open = false; // the socket is open (close it politely)
  bool m_consuming = false;
  int64_t m_generation = 0; // this connection's number (g_connections)
  int64_t m_unsettled = 0;  // deliveries handed out and not yet settled on this connection
  uint16_t m_prefetch = 0;  // the consumer's current basic.qos
  uint64_t m_next_seq = 1;  // the next publish's confirm tag on this channel
  std::deque<Delivery> m_buffered;
};

} // namespace

Result<std::unique_ptr<MessageQueue>> make_amqp_queue(const QueueUrl &url, const QueueOptions &options) {
  return std::unique_ptr<MessageQueue>(std::make_unique<AmqpQueue>(url, options));
}

} // namespace lodge::mq
