#include "fake_transport.hpp"
#include "support.hpp"

#include <lodge/azure/client.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>

using namespace lodge;
using lodge::testing::ScriptedTransport;

namespace {
class NoSleep final : public http::Sleeper {
public:
  int sleeps = 0;
  void sleep_ms(int64_t) override { ++sleeps; }
};

class FixedClock final : public util::Clock {
public:
  [[nodiscard]] int64_t now_ms() const override { return 1'700'000'000'000; }
};

struct Harness {
  ScriptedTransport *transport;
  NoSleep sleeper;
  FixedClock clock;
  std::unique_ptr<azure::Client> client;
  explicit Harness(std::vector<ScriptedTransport::Step> script, bool sas = false) {
    auto t = std::make_unique<ScriptedTransport>();
    t->script = std::move(script);
    transport = t.get();
    azure::ClientConfig cfg;
    cfg.account.name = "devstoreaccount1";
    cfg.account.endpoint = "http://127.0.0.1:9/devstoreaccount1";
    if (sas)
      cfg.account.sas = "sv=2021-12-02&sp=rwdt&sig=SECRET";
    else
      cfg.account.key = *util::base64_decode(azure::k_dev_key);
    cfg.container = "c";
    client = std::make_unique<azure::Client>(std::move(cfg), std::move(t), clock, sleeper);
  }
  [[nodiscard]] std::string header(size_t i, const std::string &name) const {
    for (const auto &[k, v] : transport->seen.at(i).headers)
      if (util::to_lower(k) == name) return v;
    return {};
  }
};

ScriptedTransport::Step error_step(long status, const std::string &code) {
  return {status,
          "<?xml version=\"1.0\"?><Error><Code>" + code + "</Code><Message>m\nRequestId:r</Message></Error>",
          {{"x-ms-error-code", code}, {"x-ms-request-id", "req-1"}}};
}
} // namespace

TEST_CASE("azure client: a conditional Put Blob sends the create-only headers, signed") {
  Harness h({{201, "", {{"etag", "\"0x1\""}}}});
  http::StringBody body("hello world");
  azure::WriteOptions o;
  o.content_type = "text/plain";
  o.content_md5 = "XrY7u+Ae7tCTyyK7j1rNww==";
  o.metadata = {{"lodgerecord", "42"}};
  o.tags = {{"state", "pending"}};
  auto r = h.client->put_blob("dir/my file.txt", body, o);
  REQUIRE(r);
  CHECK(r->etag == "\"0x1\"");
  const auto &req = h.transport->seen.at(0);
  CHECK(req.method == "PUT");
  CHECK(req.url == "http://127.0.0.1:9/devstoreaccount1/c/dir/my%20file.txt");
  CHECK(h.header(0, "if-none-match") == "*");
  CHECK(h.header(0, "x-ms-tags") == "state=pending");
  CHECK(h.header(0, "x-ms-blob-type") == "BlockBlob");
  CHECK(h.header(0, "x-ms-meta-lodgerecord") == "42");
  CHECK(h.header(0, "x-ms-version") == "2021-12-02");
  CHECK(h.header(0, "authorization").rfind("SharedKey devstoreaccount1:", 0) == 0);
}

TEST_CASE("azure client: 409 BlobAlreadyExists and 412 ConditionNotMet are both PRECONDITION_FAILED") {
  for (auto step : {error_step(409, "BlobAlreadyExists"), error_step(412, "ConditionNotMet")}) {
    Harness h({step});
    http::StringBody body("x");
    auto r = h.client->put_blob("k", body, {});
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::precondition_failed);
    CHECK(r.error().details.request_id == "req-1");
    CHECK(r.error().message.find("RequestId") == std::string::npos);
    CHECK(h.transport->seen.size() == 1); // never retried
  }
  Harness other({error_step(409, "LeaseIdMissing")});
  http::StringBody body("x");
  auto r = other.client->put_blob("k", body, {});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::storage_error);
  CHECK(r.error().details.s3_code == "LeaseIdMissing");
}

TEST_CASE("azure client: 503 ServerBusy is retried; 403 AuthenticationFailed is not") {
  Harness h({error_step(503, "ServerBusy"), {200, "", {{"content-length", "3"}, {"x-ms-tag-count", "1"}}}});
  auto p = h.client->get_properties("k");
  REQUIRE(p);
  CHECK(p->size == 3);
  CHECK(p->tag_count == 1);
  CHECK(h.sleeper.sleeps == 1);
  Harness denied({error_step(403, "AuthenticationFailed")});
  auto d = denied.client->get_properties("k");
  REQUIRE_FALSE(d);
  CHECK(d.error().code == Errc::access_denied);
  CHECK(denied.transport->seen.size() == 1);
}

TEST_CASE("azure client: Delete Blob names snapshots and the tag condition; 404 is success") {
  Harness h({{404, "", {{"x-ms-error-code", "BlobNotFound"}}}, error_step(412, "ConditionNotMet")});
  CHECK(h.client->delete_blob("k", {azure::k_if_pending, "", ""}));
  CHECK(h.header(0, "x-ms-delete-snapshots") == "include");
  CHECK(h.header(0, "x-ms-if-tags") == "\"state\" = 'pending'");
  auto s = h.client->delete_blob("k", {azure::k_if_pending, "", ""});
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::precondition_failed);
  Harness gone({{404, "", {{"x-ms-error-code", "ContainerNotFound"}}}});
  auto g = gone.client->delete_blob("k");
  REQUIRE_FALSE(g);
  CHECK(g.error().code == Errc::not_found);
}

TEST_CASE("azure client: a GET cut off mid-body resumes with Range and If-Match on the first ETag") {
  Harness h({{200, "hel", {{"content-length", "5"}, {"etag", "\"0x9\""}}, 56, false, true},
             {206, "lo", {{"content-range", "bytes 3-4/5"}, {"etag", "\"0x9\""}}, 0, false, true}});
  std::string got;
  auto s = h.client->get_blob("k", [&](const char *p, size_t n) {
    got.append(p, n);
    return true;
  });
  REQUIRE(s);
  CHECK(got == "hello");
  CHECK(h.header(1, "range") == "bytes=3-");
  CHECK(h.header(1, "if-match") == "\"0x9\"");
}

TEST_CASE("azure client: List Blobs pages by marker with the includes asked for") {
  Harness h({{200,
              "<EnumerationResults><Blobs><Blob><Name>p/a</Name><Properties><Etag>e</Etag><Content-Length>1"
              "</Content-Length></Properties></Blob></Blobs><NextMarker>m2</NextMarker></EnumerationResults>",
              {}},
             {200,
              "<EnumerationResults><Blobs><Blob><Name>p/b</Name><Properties><Etag>e</Etag><Content-Length>2"
              "</Content-Length></Properties></Blob></Blobs><NextMarker/></EnumerationResults>",
              {}}});
  std::vector<std::string> names;
  auto s = h.client->list_blobs("p/", azure::Include::metadata | azure::Include::uncommitted,
                                [&](const azure::ListedBlob &b) {
                                  names.push_back(b.name);
                                  return true;
                                });
  REQUIRE(s);
  CHECK(names == std::vector<std::string>{"p/a", "p/b"});
  CHECK(h.transport->seen.at(0).url.find("include=metadata%2Cuncommittedblobs") != std::string::npos);
  CHECK(h.transport->seen.at(1).url.find("marker=m2") != std::string::npos);
}

TEST_CASE("azure client: a SAS credential goes in the query, never an Authorization header") {
  Harness h({{200, "", {{"content-length", "0"}}}}, true);
  REQUIRE(h.client->get_properties("k"));
  CHECK(h.header(0, "authorization").empty());
  CHECK(h.transport->seen.at(0).url ==
        "http://127.0.0.1:9/devstoreaccount1/c/k?sv=2021-12-02&sp=rwdt&sig=SECRET");
  auto url = h.client->presign_get("k", 60);
  REQUIRE_FALSE(url);
  CHECK(url.error().code == Errc::unsupported);
}

TEST_CASE("a SAS's sig= and a Shared Key Authorization never reach a log line") {
  std::string line = util::log::redact("GET http://h/c/k?sv=2021-12-02&sig=abc%2Bdef%3D&se=x\n"
                                       "authorization: SharedKey acct:c2lnbmF0dXJl");
  CHECK(line.find("abc%2Bdef") == std::string::npos);
  CHECK(line.find("c2lnbmF0dXJl") == std::string::npos);
  CHECK(line.find("sig=[REDACTED]&se=x") != std::string::npos);
  CHECK(util::log::redact("?sig=zz") == "?sig=[REDACTED]");
}
