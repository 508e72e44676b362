#include "fake_transport.hpp"
#include "support.hpp"

#include <lodge/s3/client.hpp>

using namespace lodge;
using lodge::testing::ScriptedTransport;

namespace {
class RecordingSleeper final : public s3::Sleeper {
public:
  std::vector<int64_t> delays;
  void sleep_ms(int64_t ms) override { delays.push_back(ms); }
};

class FixedClock final : public util::Clock {
public:
  [[nodiscard]] int64_t now_ms() const override { return 1'440'938'160'000; }
};

struct Harness {
  ScriptedTransport *transport;
  RecordingSleeper sleeper;
  FixedClock clock;
  std::unique_ptr<s3::Client> client;
  explicit Harness(std::vector<ScriptedTransport::Step> script, int attempts = 4) {
    auto t = std::make_unique<ScriptedTransport>();
    t->script = std::move(script);
    transport = t.get();
    s3::ClientConfig cfg;
    cfg.endpoint = "http://127.0.0.1:9";
    cfg.bucket = "b";
    cfg.credentials = {"AKID", "SECRET", "", "test"};
    cfg.retry.max_attempts = attempts;
    client = std::make_unique<s3::Client>(cfg, std::move(t), clock, sleeper);
  }
};

const char *k_slowdown = "<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>";
} // namespace

TEST_CASE("a PUT that meets two 503s succeeds on the third attempt, body re-sent whole") {
  Harness h({{503, k_slowdown, {}}, {503, k_slowdown, {}}, {200, "", {{"etag", "\"e\""}}}});
  http::StringBody body("hello, world");
  s3::PutOptions o;
  o.sha256_hex = crypto::sha256_hex("hello, world");
  auto r = h.client->put_object("k", body, o);
  REQUIRE(r.ok());
  CHECK(r->etag == "\"e\"");
  REQUIRE(h.transport->seen.size() == 3);
  for (const auto &b : h.transport->bodies_sent)
    CHECK(b == "hello, world");
  CHECK(h.sleeper.delays.size() == 2);
  for (auto d : h.sleeper.delays)
    CHECK(d <= 10'000);
}

TEST_CASE("retries are bounded and the last error is typed") {
  Harness h({{503, k_slowdown, {{"x-amz-request-id", "R1"}}}, {503, k_slowdown, {}}, {503, k_slowdown, {}}},
            3);
  auto r = h.client->head_object("k");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::throttled);
  CHECK(r.error().details.http_status == 503);
  CHECK(r.error().details.s3_code == "SlowDown");
  CHECK(h.transport->seen.size() == 3);
  CHECK(h.sleeper.delays.size() == 2);
}

TEST_CASE("permanent answers are not retried") {
  Harness h(
      {{403, "<Error><Code>AccessDenied</Code><Message>no</Message><RequestId>Q</RequestId></Error>", {}}});
  auto r = h.client->head_object("k");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::access_denied);
  CHECK(r.error().details.request_id == "Q");
  CHECK(h.transport->seen.size() == 1);
  Harness p({{412, "", {}}});
  http::StringBody body("x");
  CHECK(p.client->put_object("k", body, {}).error().code == Errc::precondition_failed);
  CHECK(p.transport->seen.size() == 1);
}

TEST_CASE("transport failures are retried; ambiguity is remembered across attempts") {
  Harness h({{0, "", {}, 56, true}, {0, "", {}, 7, false}, {0, "", {}, 7, false}, {0, "", {}, 7, false}});
  http::StringBody body("x");
  auto r = h.client->put_object("k", body, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::storage_unavailable);
  CHECK(r.error().details.ambiguous);
  CHECK(h.transport->seen.size() == 4);
  Harness tls({{0, "", {}, 60, false}});
  CHECK_FALSE(tls.client->head_object("k").ok());
  CHECK(tls.transport->seen.size() == 1); // certificate problems do not heal
}

TEST_CASE("Retry-After is honoured within the cap") {
  Harness h({{503, k_slowdown, {{"retry-after", "3"}}}, {200, "", {}}});
  REQUIRE(h.client->head_object("k").ok());
  REQUIRE(h.sleeper.delays.size() == 1);
  CHECK(h.sleeper.delays[0] == 3000);
}

TEST_CASE("backoff is full jitter under an exponential cap") {
  s3::RetryPolicy p;
  p.base_delay_ms = 100;
  p.max_delay_ms = 1000;
  CHECK(p.delay_ms(1, UINT64_MAX) <= 100);
  CHECK(p.delay_ms(2, 200) == 200);
  CHECK(p.delay_ms(3, 401) == 0);
  CHECK(p.delay_ms(10, 1000) == 1000);
  CHECK(p.delay_ms(10, 1001) == 0);
}

TEST_CASE("requests are signed path-style with the payload hash and checksum") {
  Harness h({{200, "", {}}});
  http::StringBody body("abc");
  s3::PutOptions o;
  o.sha256_hex = crypto::sha256_hex("abc");
  o.content_type = "text/plain";
  o.metadata["lodge-record-id"] = "7";
  REQUIRE(h.client->put_object("own er/ü+x.txt", body, o).ok());
  const auto &req = h.transport->seen.at(0);
  CHECK(req.url == "http://127.0.0.1:9/b/own%20er/%C3%BC%2Bx.txt");
  auto header = [&](const std::string &n) {
    for (const auto &[k, v] : req.headers)
      if (k == n) return v;
    return std::string{};
  };
  CHECK(header("x-amz-content-sha256") == o.sha256_hex);
  CHECK(header("x-amz-checksum-sha256") == "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=");
  CHECK(header("if-none-match") == "*");
  CHECK(header("x-amz-meta-lodge-record-id") == "7");
  CHECK(header("authorization")
            .rfind("AWS4-HMAC-SHA256 Credential=AKID/20150830/us-east-1/s3/aws4_request", 0) == 0);
}

TEST_CASE("a missing key deletes fine; a missing bucket does not") {
  Harness h({{404, "<Error><Code>NoSuchKey</Code><Message>m</Message></Error>", {}},
             {404, "<Error><Code>NoSuchBucket</Code><Message>m</Message></Error>", {}}});
  CHECK(h.client->delete_object("k").ok());
  auto r = h.client->delete_object("k");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::not_found);
}

#include <lodge/util/log.hpp>

TEST_CASE("at debug level the canonical request is logged; secrets and signatures never are") {
  std::vector<std::string> lines;
  util::log::set_level(util::log::Level::debug);
  util::log::set_sink([&](util::log::Level, std::string_view l) { lines.emplace_back(l); });
  ScriptedTransport::Step ok{200, "", {}};
  auto t = std::make_unique<ScriptedTransport>();
  t->script = {ok};
  auto *seen = t.get();
  RecordingSleeper sleeper;
  FixedClock clock;
  s3::ClientConfig cfg;
  cfg.endpoint = "http://127.0.0.1:9";
  cfg.bucket = "b";
  cfg.credentials = {"AKIDLOG", "TOPSECRETKEY", "SESSIONTOKENVALUE", "test"};
  s3::Client client(cfg, std::move(t), clock, sleeper);
  REQUIRE(client.head_object("k").ok());
  util::log::set_sink({});
  util::log::set_level(util::log::Level::warn);
  std::string all;
  for (const auto &l : lines)
    all += l + "\n";
  CHECK(all.find("canonical request:\nHEAD\n/b/k") != std::string::npos);
  CHECK(all.find("string to sign:\nAWS4-HMAC-SHA256") != std::string::npos);
  CHECK(all.find("TOPSECRETKEY") == std::string::npos);
  CHECK(all.find("SESSIONTOKENVALUE") == std::string::npos);
  std::string auth;
  for (const auto &[k, v] : seen->seen.at(0).headers)
    if (k == "authorization") auth = v;
  REQUIRE(auth.size() > 64);
  CHECK(all.find(auth.substr(auth.size() - 64)) == std::string::npos);
}

TEST_CASE("delete_everything falls back to a plain delete when versions cannot be listed") {
  Harness h({{403, "<Error><Code>AccessDenied</Code><Message>no ListBucketVersions</Message></Error>", {}},
             {204, "", {}},
             {200,
              "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>",
              {}}});
  REQUIRE(h.client->delete_everything("k").ok());
  REQUIRE(h.transport->seen.size() == 3);
  CHECK(h.transport->seen[1].method == "DELETE");
  CHECK(h.transport->seen[1].url == "http://127.0.0.1:9/b/k");
  Harness other({{500, "<Error><Code>InternalError</Code><Message>x</Message></Error>", {}},
                 {500, "<Error><Code>InternalError</Code><Message>x</Message></Error>", {}},
                 {500, "<Error><Code>InternalError</Code><Message>x</Message></Error>", {}},
                 {500, "<Error><Code>InternalError</Code><Message>x</Message></Error>", {}}});
  CHECK_FALSE(other.client->delete_everything("k").ok()); // a failing store is not a reason to guess
}

TEST_CASE("a key with a '.' or '..' segment is refused before any request is sent") {
  // Path-style, "/b/../evil/k" would be resolved to bucket "evil" on the way.
  Harness h({});
  http::StringBody body("x");
  for (std::string key : {"../evil/k", "p/../../evil/k", "p/./k", "p/.."}) {
    CAPTURE(key);
    auto put = h.client->put_object(key, body, s3::PutOptions{});
    REQUIRE_FALSE(put.ok());
    CHECK(put.error().code == Errc::storage_error);
    CHECK(put.error().message.find(key) != std::string::npos);
    CHECK(h.client->head_object(key).error().code == Errc::storage_error);
    CHECK(h.client->delete_object(key).error().code == Errc::storage_error);
  }
  CHECK(h.transport->seen.empty());
}

namespace {
std::string header_of(const http::Request &r, const std::string &name) {
  for (const auto &[k, v] : r.headers)
    if (k == name) return v;
  return {};
}
} // namespace

TEST_CASE("a GET cut off mid-body is resumed with Range on the same ETag; each byte reaches the sink once") {
  using Step = ScriptedTransport::Step;
  Harness h({Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, 18, false, true},
             Step{206, "world", {{"content-range", "bytes 6-10/11"}, {"etag", "\"e1\""}}, 0, false, true}});
  std::string got;
  auto r = h.client->get_object("k", [&](const char *p, size_t n) {
    got.append(p, n);
    return true;
  });
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(got == "hello world");
  REQUIRE(h.transport->seen.size() == 2);
  CHECK(header_of(h.transport->seen[0], "range").empty());
  CHECK(header_of(h.transport->seen[1], "range") == "bytes=6-");
  CHECK(header_of(h.transport->seen[1], "if-match") == "\"e1\"");
}

TEST_CASE("a retried GET answered with the whole object again passes over what the sink has") {
  using Step = ScriptedTransport::Step;
  Harness h({Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, 18, false, true},
             Step{200, "hello world", {{"content-length", "11"}, {"etag", "\"e1\""}}, 0, false, true}});
  std::string got;
  auto r = h.client->get_object("k", [&](const char *p, size_t n) {
    got.append(p, n);
    return true;
  });
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  CHECK(got == "hello world");
}

TEST_CASE("a resumed GET that finds another object fails instead of mixing two objects") {
  using Step = ScriptedTransport::Step;
  Harness h({Step{200, "hello ", {{"content-length", "11"}, {"etag", "\"e1\""}}, 18, false, true},
             Step{206, "WORLD", {{"content-range", "bytes 6-10/11"}, {"etag", "\"e2\""}}, 0, false, true}});
  std::string got;
  auto r = h.client->get_object("k", [&](const char *p, size_t n) {
    got.append(p, n);
    return true;
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == Errc::storage_error);
  CHECK(r.error().message.find("changed") != std::string::npos);
  CHECK(got == "hello ");
  Harness wrong({Step{200, "hello ", {{"content-length", "11"}}, 18, false, true},
                 Step{206, "xxxxx", {{"content-range", "bytes 3-7/11"}}, 0, false, true}});
  got.clear();
  CHECK_FALSE(wrong.client
                  ->get_object("k",
                               [&](const char *p, size_t n) {
                                 got.append(p, n);
                                 return true;
                               })
                  .ok());
  CHECK(got == "hello ");
}

TEST_CASE("405 and 501 mean UNSUPPORTED: learned once, not retried, not unreachable") {
  const char *k_405 = "<Error><Code>MethodNotAllowed</Code><Message>no versions</Message></Error>";
  const char *k_501 = "<Error><Code>NotImplemented</Code><Message>no uploads</Message></Error>";
  Harness h({{405, k_405, {}}, {204, "", {}}, {501, k_501, {}}, {204, "", {}}});
  REQUIRE(h.client->delete_everything("k").ok());
  CHECK(h.client->support(s3::Feature::list_versions) == s3::Support::absent);
  CHECK(h.client->support(s3::Feature::list_uploads) == s3::Support::absent);
  // The second delete asks only for the delete itself.
  REQUIRE(h.client->delete_everything("k2").ok());
  REQUIRE(h.transport->seen.size() == 4);
  CHECK(h.transport->seen[3].method == "DELETE");
  CHECK(h.sleeper.delays.empty());
  auto l = h.client->list_multipart_uploads("", [](const s3::ListedUpload &) { return true; });
  REQUIRE_FALSE(l.ok());
  CHECK(l.error().code == Errc::unsupported);
  CHECK(h.transport->seen.size() == 4);
  Harness once({{501, k_501, {}}});
  auto e = once.client->list_multipart_uploads("", [](const s3::ListedUpload &) { return true; });
  CHECK(e.error().code == Errc::unsupported);
  CHECK(e.error().name() == "UNSUPPORTED");
  CHECK(once.transport->seen.size() == 1); // 501 was retried as "unavailable" before
}

TEST_CASE("state tags: x-amz-tagging on PutObject and CreateMultipartUpload, none when unset") {
  const char *k_initiate =
      "<InitiateMultipartUploadResult><UploadId>U1</UploadId></InitiateMultipartUploadResult>";
  Harness h({{200, "", {}}, {200, k_initiate, {}}, {200, "", {}}});
  http::StringBody body("abc");
  s3::PutOptions o;
  o.tagging = "lodge-state=pending";
  REQUIRE(h.client->put_object("k", body, o).ok());
  REQUIRE(h.client->create_multipart("k", o).value() == "U1");
  REQUIRE(h.client->put_object("k2", body, {}).ok());
  CHECK(header_of(h.transport->seen.at(0), "x-amz-tagging") == "lodge-state=pending");
  CHECK(header_of(h.transport->seen.at(1), "x-amz-tagging") == "lodge-state=pending");
  CHECK(h.transport->seen.at(1).url == "http://127.0.0.1:9/b/k?uploads=");
  CHECK(header_of(h.transport->seen.at(2), "x-amz-tagging").empty());
}

TEST_CASE("PutObjectTagging sends the tag set with Content-MD5; GetObjectTagging reads it back") {
  const char *k_tags = "<?xml version=\"1.0\"?><Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                       "<TagSet><Tag><Key>lodge-state</Key><Value>committed</Value></Tag>"
                       "<Tag><Key>other</Key><Value>a&amp;b</Value></Tag></TagSet></Tagging>";
  Harness h({{200, "", {}}, {200, k_tags, {}}, {404, "<Error><Code>NoSuchKey</Code></Error>", {}}});
  REQUIRE(h.client->put_object_tagging("dir/k", {{"lodge-state", "committed"}}).ok());
  const auto &put = h.transport->seen.at(0);
  CHECK(put.method == "PUT");
  CHECK(put.url == "http://127.0.0.1:9/b/dir/k?tagging=");
  CHECK(h.transport->bodies_sent.at(0) ==
        "<Tagging xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><TagSet><Tag><Key>lodge-state</Key>"
        "<Value>committed</Value></Tag></TagSet></Tagging>");
  CHECK(header_of(put, "content-md5") == "1g2HjlXPDXTOUjLJn8SOOA==");
  CHECK(header_of(put, "x-amz-checksum-sha256") == "/fGFFie4r2lKrUAT+MHuHcFhQD6Q2WmUhyaL6mWVfFQ=");
  CHECK(header_of(put, "authorization").find("content-md5") != std::string::npos); // signed
  auto tags = h.client->get_object_tagging("dir/k");
  REQUIRE(tags.ok());
  CHECK(tags.value() == std::map<std::string, std::string>{{"lodge-state", "committed"}, {"other", "a&b"}});
  CHECK(h.transport->seen.at(1).method == "GET");
  CHECK(h.transport->seen.at(1).url == "http://127.0.0.1:9/b/dir/k?tagging=");
  CHECK(h.client->get_object_tagging("gone").error().code == Errc::not_found);
}

TEST_CASE("bucket lifecycle: GET names NOT_FOUND only for no configuration; PUT carries Content-MD5") {
  const char *k_none = "<Error><Code>NoSuchLifecycleConfiguration</Code><Message>none</Message></Error>";
  const char *k_bucket = "<Error><Code>NoSuchBucket</Code><Message>no bucket</Message></Error>";
  const char *k_config = "<LifecycleConfiguration><Rule><ID>x</ID></Rule></LifecycleConfiguration>";
  const char *k_versioning = "<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>";
  Harness h({{404, k_none, {}},
             {404, k_bucket, {}},
             {200, k_config, {}},
             {200, "", {}},
             {200, k_versioning, {}},
             {200, "<GetBucketVersioningResponse/>", {}}});
  CHECK(h.client->get_bucket_lifecycle().error().code == Errc::not_found);
  auto missing_bucket = h.client->get_bucket_lifecycle();
  CHECK(missing_bucket.error().code == Errc::storage_error);
  CHECK(missing_bucket.error().details.s3_code == "NoSuchBucket");
  CHECK(h.client->get_bucket_lifecycle().value() == k_config);
  CHECK(h.transport->seen.at(0).url == "http://127.0.0.1:9/b/?lifecycle=");
  REQUIRE(h.client->put_bucket_lifecycle("<LifecycleConfiguration/>").ok());
  const auto &put = h.transport->seen.at(3);
  CHECK(put.method == "PUT");
  CHECK(put.url == "http://127.0.0.1:9/b/?lifecycle=");
  CHECK(h.transport->bodies_sent.at(3) == "<LifecycleConfiguration/>");
  CHECK(header_of(put, "content-md5") == "j9VfG/p/L54O4f1X84gDLQ==");
  CHECK(header_of(put, "x-amz-checksum-sha256") == "de89DinK3Gw5ZBExKLi0pSyYCmL7Nad0PqYZj/rjWGo=");
  CHECK(header_of(put, "content-type") == "application/xml");
  CHECK(h.client->get_versioning().value() == "Enabled");
  CHECK(h.client->get_versioning().value().empty()); // moto's answer for a bucket never versioned
}
