// The HTTP pieces the S3 and Azure clients share, on the scripted transport with no
// service in between: the retry loop (http::with_retries), the resumable GET
// (http::resumable_get) and the error of a failed answer (http::error_for_answer).
#include "fake_transport.hpp"
#include "support.hpp"

#include <lodge/http/resumable_get.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/util/backpressure.hpp>
#include <memory>

using namespace lodge;
using lodge::testing::ScriptedTransport;
using Step = ScriptedTransport::Step;

namespace {

constexpr int k_recv_error = 56; // CURLE_RECV_ERROR: the connection dropped mid-body

class RecordingSleeper final : public http::Sleeper {
public:
  std::vector<int64_t> delays;
  void sleep_ms(int64_t ms) override { delays.push_back(ms); }
};

// A backend with no signing and no error codes of its own: what each client hands the loops.
struct Backend {
  ScriptedTransport transport;
  RecordingSleeper sleeper;
  http::RetryPolicy policy;

  explicit Backend(std::vector<Step> script, int attempts = 4) {
    transport.script = std::move(script);
    policy.max_attempts = attempts;
  }
  Result<http::Response> once(const http::Headers &extra, const http::Sink &sink,
                              const std::function<bool(const http::Response &)> &accept) {
    http::Request req;
    req.method = "GET";
    req.url = "http://127.0.0.1:9/b/k";
    req.headers = extra;
    req.sink = sink;
    req.accept = accept;
    auto r = transport.perform(req);
    if (!r) return r.error();
    if (r->status >= 300) return http::error_for_answer(r.value(), "GET k", {}, std::nullopt);
    return r;
  }
  Status get(std::string &got) {
    return http::resumable_get(
        policy, sleeper, {"GET k", "object"},
        [&](const char *p, size_t n) {
          got.append(p, n);
          return true;
        },
        [&](const http::Headers &extra, const http::Sink &sink,
            const std::function<bool(const http::Response &)> &accept) { return once(extra, sink, accept); });
  }
  Result<http::Response> send() {
    return http::with_retries(policy, sleeper, "PUT k", 0, [&] { return once({}, {}, {}); });
  }
};

std::string header_of(const http::Request &r, const std::string &name) {
  for (const auto &[k, v] : r.headers)
    if (k == name) return v;
  return {};
}

} // namespace

TEST_CASE("resumable_get resumes a cut body with Range and If-Match; each byte reaches the sink once") {
  Backend b(
      {Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
       Step{206, "wor", {{"content-range", "bytes 6-10/11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
       Step{206, "ld", {{"content-range", "bytes 9-10/11"}, {"etag", "\"e1\""}}, 0, false, true}});
  std::string got;
  auto r = b.get(got);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(got == "hello world");
  REQUIRE(b.transport.seen.size() == 3);
  CHECK(header_of(b.transport.seen[0], "range").empty());
  CHECK(header_of(b.transport.seen[0], "if-match").empty());
  CHECK(header_of(b.transport.seen[1], "range") == "bytes=6-");
  CHECK(header_of(b.transport.seen[1], "if-match") == "\"e1\"");
  CHECK(header_of(b.transport.seen[2], "range") == "bytes=9-");
  CHECK(b.sleeper.delays.size() == 2);
}

TEST_CASE("resumable_get passes over what the sink has when a server ignores Range") {
  Backend b({Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
             Step{200, "hello world", {{"content-length", "11"}, {"etag", "\"e1\""}}, 0, false, true}});
  std::string got;
  REQUIRE(b.get(got).ok());
  CHECK(got == "hello world");
}

TEST_CASE("resumable_get fails, never mixing bytes, when the validator or range changed mid-download") {
  SUBCASE("another ETag") {
    Backend b({Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
               Step{206, "WORLD", {{"content-range", "bytes 6-10/11"}, {"etag", "\"e2\""}}, 0, false, true}});
    std::string got;
    auto r = b.get(got);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::storage_error);
    CHECK(r.error().message == "GET k: the object changed between attempts (ETag \"e1\", then \"e2\")");
    CHECK(got == "hello ");
    CHECK(b.transport.seen.size() == 2); // not retried: another attempt would find the same
  }
  SUBCASE("another range") {
    Backend b({Step{200, "hello ", {{"content-length", "11"}}, k_recv_error, false, true},
               Step{206, "xxxxx", {{"content-range", "bytes 3-7/11"}}, 0, false, true}});
    std::string got;
    auto r = b.get(got);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("covers 'bytes 3-7/11', not bytes 6- of the object") != std::string::npos);
    CHECK(got == "hello ");
  }
  SUBCASE("another length") {
    Backend b({Step{200, "hello ", {{"content-length", "11"}}, k_recv_error, false, true},
               Step{200, "hello world!", {{"content-length", "12"}}, 0, false, true}});
    std::string got;
    REQUIRE_FALSE(b.get(got).ok());
    CHECK(got == "hello ");
  }
}

TEST_CASE("resumable_get reports a body that ends short of its Content-Length") {
  Backend b({Step{200, "hello", {{"content-length", "11"}}, 0, false, true}});
  std::string got;
  auto r = b.get(got);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::storage_error);
  CHECK(r.error().message == "GET k: the body ended after 5 of 11 bytes");
}

TEST_CASE("resumable_get: with the retry budget spent, the last error comes back") {
  Backend b(
      {Step{200, "he", {{"content-length", "11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
       Step{206, "ll", {{"content-range", "bytes 2-10/11"}, {"etag", "\"e1\""}}, k_recv_error, false, true},
       Step{503, "", {}}},
      3);
  std::string got;
  auto r = b.get(got);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::storage_unavailable);
  CHECK(r.error().details.http_status == 503);
  CHECK(r.error().message == "GET k: HTTP 503");
  CHECK(got == "hell");
  CHECK(b.transport.seen.size() == 3);
  CHECK(b.sleeper.delays.size() == 2);
}

TEST_CASE(
    "with_retries: the budget bounds the attempts and the last error comes back, ambiguous if any was") {
  Backend b({Step{0, "", {}, k_recv_error, true}, Step{500, "", {{"x-request", "2"}}}, Step{503, "", {}},
             Step{200, "", {}}},
            3);
  auto r = b.send();
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().details.http_status == 503); // the third, not the first
  CHECK(r.error().details.ambiguous);          // the first attempt's body may have been acted on
  CHECK(b.transport.seen.size() == 3);
  CHECK(b.sleeper.delays.size() == 2);
}

TEST_CASE("with_retries: success after transient failures; a permanent answer is not retried") {
  Backend ok({Step{503, "", {}}, Step{429, "", {{"retry-after", "2"}}}, Step{200, "done", {}}});
  auto r = ok.send();
  REQUIRE(r.ok());
  CHECK(r->body == "done");
  REQUIRE(ok.sleeper.delays.size() == 2);
  CHECK(ok.sleeper.delays[1] == 2000); // Retry-After, within the cap
  Backend denied({Step{403, "", {}}, Step{200, "", {}}});
  auto d = denied.send();
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == Errc::access_denied);
  CHECK(denied.transport.seen.size() == 1);
  CHECK(denied.sleeper.delays.empty());
}

TEST_CASE(
    "with_retries: counts each throttling answer and transient failure it sees, never a permanent one") {
  auto bp = std::make_shared<util::Backpressure>();
  // 429 and a 503 the service calls SlowDown are throttling; a 500 and a dropped connection
  // are transient failures; the success and a 404 are neither.
  Backend b({Step{429, "", {}}, Step{500, "", {}}, Step{0, "", {}, k_recv_error, true}, Step{200, "", {}}});
  b.policy.backpressure = bp;
  REQUIRE(b.send().ok());
  CHECK(bp->throttled.load() == 1);
  CHECK(bp->failed.load() == 2);
  Backend missing({Step{404, "", {}}});
  missing.policy.backpressure = bp;
  CHECK_FALSE(missing.send().ok());
  CHECK(bp->throttled.load() == 1);
  CHECK(bp->failed.load() == 2);
  // What a service's code says counts as what it names.
  http::Response slow;
  slow.status = 503;
  int calls = 0;
  auto r = http::with_retries(b.policy, b.sleeper, "PUT k", 0, [&]() -> Result<http::Response> {
    if (++calls == 1) return http::error_for_answer(slow, "PUT k", {"SlowDown", "", ""}, Errc::throttled);
    return http::Response{};
  });
  REQUIRE(r.ok());
  CHECK(bp->throttled.load() == 2);
}

TEST_CASE(
    "error_for_answer: the status decides unless the service's code names a class; 404 and 412 always") {
  http::Response r;
  r.status = 400;
  r.headers = {{"retry-after", "5"}};
  http::ServiceError said{"SlowDown", "Reduce your request rate.", "R1"};
  auto e = http::error_for_answer(r, "PUT k", said, Errc::throttled);
  CHECK(e.code == Errc::throttled);
  CHECK(e.message == "PUT k: HTTP 400 SlowDown: Reduce your request rate. (request id R1)");
  CHECK(e.details.http_status == 400);
  CHECK(e.details.s3_code == "SlowDown");
  CHECK(e.details.request_id == "R1");
  CHECK(e.details.retry_after_ms == 5000);
  CHECK(http::error_for_answer(r, "PUT k", {}, std::nullopt).code == Errc::storage_error);
  r.status = 404;
  CHECK(http::error_for_answer(r, "GET k", said, Errc::throttled).code == Errc::not_found);
  r.status = 412;
  CHECK(http::error_for_answer(r, "GET k", said, Errc::access_denied).code == Errc::precondition_failed);
  for (long status : {500L, 502L, 503L}) {
    r.status = status;
    auto u = http::error_for_answer(r, "GET k", {}, std::nullopt);
    CHECK(u.code == Errc::storage_unavailable);
    CHECK(http::is_transient(u));
  }
  r.status = 403;
  CHECK(http::error_for_answer(r, "GET k", {}, std::nullopt).code == Errc::access_denied);
  CHECK(http::error_for_answer(r, "GET k", {}, std::nullopt).message == "GET k: HTTP 403");
}
