// Queue URLs: sqs://NAME, sqs+http(s)://HOST:PORT/ACCOUNT/NAME,
// amqp://USER[:PASSWORD]@HOST[:PORT]/[VHOST]?queue=NAME. Every message names the URL with its password
// replaced by "***": a URL comes from a configuration file or a command line, and errors end up in logs.

#include <cctype>
#include <lodge/mq/queue.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <optional>

namespace lodge::mq {

namespace {

// The longest suffix lodge adds to a queue's name ("-delay", "-dlq").
constexpr size_t k_suffix = 6;
// SQS: 1 to 80 of [A-Za-z0-9_-]; lodge's -dlq must fit too.
constexpr size_t k_sqs_name_max = 80 - 4;
// AMQP: a short string of up to 255 bytes; lodge keeps to the same safe characters plus '.'
// and ':' (names of the amq. prefix are the broker's own).
constexpr size_t k_amqp_name_max = 255 - k_suffix;

// The URL with the password of its user information replaced by "***" (a malformed one's
// too: a raw '/' or '?' in the password, an unclosed '[').
std::string redacted(std::string_view url) {
  return util::log::redact(url, url);
}

Error bad(const std::string &text, const std::string &why) {
  return Error(Errc::usage, "queue URL '" + util::escape_for_terminal(text) + "': " + why);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    int hi = hex_value(s[i + 1]);
    int lo = hex_value(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

bool name_chars_ok(std::string_view name, std::string_view extra) {
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_' &&
        extra.find(c) == std::string_view::npos)
      return false;
  return true;
}

std::optional<std::string> check_sqs_name(std::string_view name) {
  if (name.empty()) return "no queue name";
  if (name.size() > 5 && name.substr(name.size() - 5) == ".fifo")
    return "FIFO queues are not supported (lodge's messages need no order; use a standard queue)";
  if (name.size() > k_sqs_name_max)
    return "queue name longer than " + std::to_string(k_sqs_name_max) +
           " characters (SQS allows 80, and lodge adds -dlq)";
  if (!name_chars_ok(name, ""))
    return "queue name '" + std::string(name) + "': only letters, digits, '-' and '_'";
  return std::nullopt;
}

// host[:port] of an authority (a name or an IPv4 address); false when the port is not 1-65535.
bool split_host_port(std::string_view authority, std::string &host, int &port) {
  auto colon = authority.rfind(':');
  if (colon != std::string_view::npos) {
    auto p = util::parse_int(authority.substr(colon + 1));
    if (!p || *p < 1 || *p > 65535) return false;
    port = static_cast<int>(*p);
    host = std::string(authority.substr(0, colon));
  } else {
    host = std::string(authority);
  }
  return true;
}

Result<QueueUrl> parse_sqs_name(std::string_view rest, QueueUrl out) {
  if (rest.find_first_of("/?#@") != std::string_view::npos)
    return bad(out.text, "sqs://NAME names a queue only (a queue URL is sqs+https://HOST/ACCOUNT/NAME)");
  if (auto why = check_sqs_name(rest)) return bad(out.text, *why);
  out.name = std::string(rest);
  return out;
}

Result<QueueUrl> parse_sqs_url(std::string_view scheme, std::string_view rest, QueueUrl out) {
  if (rest.find_first_of("?#@") != std::string_view::npos)
    return bad(out.text, "expected " + std::string(scheme) +
                             "://HOST[:PORT]/ACCOUNT/NAME (no user, query or fragment)");
  auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash == 0)
    return bad(out.text, "expected " + std::string(scheme) + "://HOST[:PORT]/ACCOUNT/NAME");
  std::string host;
  int port = 0;
  if (!split_host_port(rest.substr(0, slash), host, port) || host.empty())
    return bad(out.text, "the host or port is not valid (a port is 1-65535)");
  auto path = rest.substr(slash + 1);
  auto second = path.find('/');
  if (second == std::string_view::npos || second == 0 || path.find('/', second + 1) != std::string_view::npos)
    return bad(out.text, "the path must be /ACCOUNT/NAME");
  auto name = path.substr(second + 1);
  if (auto why = check_sqs_name(name)) return bad(out.text, *why);
  out.name = std::string(name);
  out.endpoint = std::string(scheme.substr(4)) + "://" + std::string(rest.substr(0, slash)); // without "sqs+"
  out.queue_url = out.endpoint + "/" + std::string(path);
  return out;
}

Result<QueueUrl> parse_amqp(std::string_view rest, QueueUrl out) {
  out.broker = Broker::amqp;
  if (rest.find('#') != std::string_view::npos) return bad(out.text, "a fragment ('#') has no meaning here");
  auto query_at = rest.find('?');
  auto query = query_at == std::string_view::npos ? std::string_view{} : rest.substr(query_at + 1);
  auto head = rest.substr(0, query_at);
  auto slash = head.find('/');
  auto authority = head.substr(0, slash);
  auto at = authority.rfind('@');
  if (at == std::string_view::npos)
    return bad(out.text, "no user: expected amqp://USER[:PASSWORD]@HOST[:PORT]/[VHOST]?queue=NAME");
  auto userinfo = authority.substr(0, at);
  auto colon = userinfo.find(':');
  auto user = percent_decode(userinfo.substr(0, colon));
  auto password = colon == std::string_view::npos ? std::optional<std::string>("")
                                                  : percent_decode(userinfo.substr(colon + 1));
  if (!user || !password) return bad(out.text, "bad percent-encoding in the user or password");
  if (user->empty()) return bad(out.text, "the user is empty");
  out.user = *user;
  out.password = *password;
  if (!split_host_port(authority.substr(at + 1), out.host, out.port) || out.host.empty())
    return bad(out.text, "the host or port is not valid (a port is 1-65535)");
  if (slash != std::string_view::npos && slash + 1 < head.size()) {
    auto vhost_text = head.substr(slash + 1);
    if (vhost_text.find('/') != std::string_view::npos)
      return bad(out.text, "the virtual host is one path segment (write '/' inside it as %2F)");
    auto vhost = percent_decode(vhost_text);
    if (!vhost) return bad(out.text, "bad percent-encoding in the virtual host");
    out.vhost = *vhost;
  }
  std::string name;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    auto eq = param.find('=');
    auto key = param.substr(0, eq);
    if (key != "queue")
      return bad(out.text, "unknown parameter '" + std::string(key) + "' (the only one is queue=NAME)");
    auto value = percent_decode(eq == std::string_view::npos ? std::string_view{} : param.substr(eq + 1));
    if (!value) return bad(out.text, "bad percent-encoding in the queue name");
    name = *value;
  }
  if (name.empty()) return bad(out.text, "no queue: add ?queue=NAME");
  if (name.size() > k_amqp_name_max)
    return bad(out.text,
               "queue name longer than " + std::to_string(k_amqp_name_max) + " bytes (lodge adds -delay)");
  if (name.rfind("amq.", 0) == 0)
    return bad(out.text, "queue names starting with 'amq.' are the broker's own");
  if (!name_chars_ok(name, ".:"))
    return bad(out.text, "queue name '" + name + "': only letters, digits, '-', '_', '.' and ':'");
  out.name = name;
  return out;
}

} // namespace

Result<QueueUrl> parse_queue_url(std::string_view url) {
  QueueUrl out;
  out.text = redacted(url);
  auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos)
    return bad(out.text,
               "expected sqs://NAME, sqs+https://HOST/ACCOUNT/NAME or amqp://USER@HOST/VHOST?queue=NAME");
  auto scheme = url.substr(0, scheme_end);
  auto rest = url.substr(scheme_end + 3);
  if (scheme == "sqs") return parse_sqs_name(rest, std::move(out));
  if (scheme == "sqs+http" || scheme == "sqs+https") return parse_sqs_url(scheme, rest, std::move(out));
  if (scheme == "amqp") return parse_amqp(rest, std::move(out));
  if (scheme == "amqps") return bad(out.text, "amqps (AMQP over TLS) is not supported");
  return bad(out.text, "unknown scheme '" + std::string(scheme) + "' (sqs, sqs+http, sqs+https or amqp)");
}

} // namespace lodge::mq
