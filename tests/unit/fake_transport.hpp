#pragma once
// The one scripted, recording fake of http::Transport for unit tests: answers each attempt
// from a script (statuses, bodies, transport failures, streamed bodies) and keeps every
// request and the body it sent.

#include <lodge/http/transport.hpp>
#include <string>
#include <vector>

namespace lodge::testing {

// Records every attempt and answers from a script.
class ScriptedTransport final : public http::Transport {
public:
  struct Step {
    long status = 200;
    std::string body;
    http::Headers headers;
    int curl_error = 0; // when set, a transport failure
    bool ambiguous = false;
    bool stream = false; // a 2xx body streamed to the sink; with curl_error, cut off after it
  };
  std::vector<Step> script;
  std::vector<http::Request> seen;
  std::vector<std::string> bodies_sent;

  Result<http::Response> perform(const http::Request &req) override {
    seen.push_back(req);
    std::string sent;
    if (req.body) {
      req.body->rewind();
      char buf[7];
      int64_t n;
      while ((n = req.body->read(buf, sizeof buf)) > 0)
        sent.append(buf, static_cast<size_t>(n));
    }
    bodies_sent.push_back(sent);
    Step s = script.at(seen.size() - 1);
    if (s.stream && req.sink) {
      http::Response head;
      head.status = s.status;
      head.headers = s.headers;
      if (req.accept && !req.accept(head)) return Error(Errc::storage_error, "answer refused");
      if (!s.body.empty() && !req.sink(s.body.data(), s.body.size()))
        return Error(Errc::internal, "sink failed");
      if (!s.curl_error) return head;
    }
    if (s.curl_error) {
      ErrorDetails d;
      d.curl_code = s.curl_error;
      d.ambiguous = s.ambiguous;
      return Error(Errc::storage_unavailable, "transport failure", d);
    }
    http::Response r;
    r.status = s.status;
    r.body = s.body;
    r.headers = s.headers;
    return r;
  }
};

// A transport that hands every request to one ScriptedTransport (for code that makes a
// new transport per call).
class ForwardingTransport final : public http::Transport {
public:
  explicit ForwardingTransport(ScriptedTransport &to) : m_to(to) {}
  Result<http::Response> perform(const http::Request &req) override { return m_to.perform(req); }

private:
  ScriptedTransport &m_to;
};

} // namespace lodge::testing
