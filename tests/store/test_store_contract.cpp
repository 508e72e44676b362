// The object-store contract, run against whichever store the environment names:
//   LODGE_TEST_STORE=file                       a fresh directory per test
//   LODGE_TEST_STORE=s3 LODGE_TEST_S3_ENDPOINT=  a fresh bucket per test on that endpoint
//   LODGE_TEST_STORE=az LODGE_TEST_AZ_ENDPOINT=  a fresh container per test on that blob
//     endpoint (Azurite's http://127.0.0.1:PORT/devstoreaccount1, its well-known key)
//     (keys LODGE_TEST_S3_KEY_ID / LODGE_TEST_S3_SECRET, default "testing")
// Fault cases (suite "faults") need LODGE_TEST_PROXY_ENDPOINT, _RULES and _LOG (the
// fault-injecting proxy in tests/harness); suite "auth" needs LODGE_TEST_AUTH_*.
// LODGE_TEST_S3_LACKS declares what the server cannot do (comma-separated:
// conditional_create, conditional_delete, versioning, version_listing, multipart_listing,
// multipart_abort, part_listing); the cases that need it then assert the server's documented behaviour
// instead, and that the store reports the missing capability as absent. Nothing is skipped.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "support/admin.hpp"

#include <atomic>
#include <cstdlib>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <lodge/azure/client.hpp>
#include <lodge/crypto/md5.hpp>
#include <lodge/crypto/random.hpp>
#include <lodge/crypto/sha256.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/s3/client.hpp>
#include <lodge/store/store.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/strings.hpp>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <thread>
#include <unistd.h>

using namespace lodge;
namespace fs = std::filesystem;

namespace {
std::string env(const char *k) {
  const char *v = std::getenv(k);
  return v ? v : "";
}

bool is_s3() {
  return env("LODGE_TEST_STORE") == "s3";
}

bool is_az() {
  return env("LODGE_TEST_STORE") == "az";
}

// Whether the server under test is declared to lack a capability.
bool lacks(const std::string &what) {
  for (const auto &w : util::split(env("LODGE_TEST_S3_LACKS"), ','))
    if (w == what) return true;
  return false;
}

// The server's test keys: moto takes any, s3rver only its own (S3RVER/S3RVER).
aws::Credentials test_creds() {
  std::string id = env("LODGE_TEST_S3_KEY_ID"), secret = env("LODGE_TEST_S3_SECRET");
  return {id.empty() ? "testing" : id, secret.empty() ? "testing" : secret, "", "test"};
}

// A scratch file holding `content`, removed at the end of the test.
struct Source {
  std::string path;
  util::Fd fd;
  std::string sha;
  explicit Source(const std::string &content) {
    char tmpl[] = "/tmp/lodge-src-XXXXXX";
    int f = ::mkstemp(tmpl);
    REQUIRE(f >= 0);
    path = tmpl;
    fd.reset(f);
    REQUIRE(::write(f, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
    sha = crypto::sha256_hex(content);
  }
  ~Source() { ::unlink(path.c_str()); }
  [[nodiscard]] store::Body body() const {
    return {fd.get(), 0, static_cast<uint64_t>(::lseek(fd.get(), 0, SEEK_END)), sha};
  }
};

// What worker threads of a test saw go wrong, for the main thread to assert on.
class ThreadFailures {
public:
  void add(std::string what) {
    std::lock_guard lock(m_mutex);
    m_failures.push_back(std::move(what));
  }
  // Runs fn, recording an exception it throws instead of letting it end the process.
  template <class F> void guard(F &&fn) {
    try {
      fn();
    } catch (const std::exception &e) {
      add(e.what());
    }
  }
  [[nodiscard]] bool empty() const {
    std::lock_guard lock(m_mutex);
    return m_failures.empty();
  }
  [[nodiscard]] std::string text() const {
    std::lock_guard lock(m_mutex);
    std::string out;
    for (const auto &f : m_failures)
      out += f + "\n";
    return out;
  }

private:
  mutable std::mutex m_mutex;
  std::vector<std::string> m_failures;
};

struct Fixture {
  std::string bucket;
  fs::path dir;
  store::StoreOptions opts;

  Fixture() {
    if (is_s3()) {
      bucket = "t-" + crypto::random_uuid().substr(0, 18);
      opts.url = "s3://" + bucket + "/pre";
      opts.endpoint = env("LODGE_TEST_S3_ENDPOINT");
      REQUIRE_MESSAGE(!opts.endpoint.empty(), "LODGE_TEST_S3_ENDPOINT must be set");
      auto c = test_creds();
      opts.env = {{"AWS_ACCESS_KEY_ID", c.access_key_id}, {"AWS_SECRET_ACCESS_KEY", c.secret_access_key}};
      auto made = test::create_bucket(admin_config());
      REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
    } else if (is_az()) {
      bucket = "t-" + crypto::random_uuid().substr(0, 18);
      opts.url = "az://" + bucket + "/pre";
      opts.endpoint = env("LODGE_TEST_AZ_ENDPOINT");
      REQUIRE_MESSAGE(!opts.endpoint.empty(), "LODGE_TEST_AZ_ENDPOINT must be set");
      opts.env = {{"AZURE_STORAGE_ACCOUNT", azure::k_dev_account}, {"AZURE_STORAGE_KEY", azure::k_dev_key}};
      auto made = test::create_container(az_config());
      REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.error().message));
    } else {
      REQUIRE_MESSAGE(env("LODGE_TEST_STORE") == "file", "set LODGE_TEST_STORE=file, s3 or az");
      char tmpl[] = "/tmp/lodge-store-XXXXXX";
      REQUIRE(::mkdtemp(tmpl) != nullptr);
      dir = tmpl;
      opts.url = "file://" + dir.string();
    }
  }
  ~Fixture() {
    if (is_az()) (void)test::delete_container(az_config());
    if (!dir.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
  [[nodiscard]] std::unique_ptr<store::ObjectStore> open() const { return store::open_store(opts); }
  [[nodiscard]] s3::ClientConfig admin_config() const {
    s3::ClientConfig c;
    c.endpoint = opts.endpoint;
    c.bucket = bucket;
    c.credentials = test_creds();
    return c;
  }
  [[nodiscard]] s3::Client admin() const {
    return s3::Client(admin_config(), http::make_curl_transport({}), util::system_clock());
  }
  // The container's own client, for set-up and for looking behind the store.
  [[nodiscard]] azure::ClientConfig az_config() const {
    azure::ClientConfig c;
    c.account = azure::resolve_account(opts.env, opts.endpoint).value();
    c.container = bucket;
    return c;
  }
  [[nodiscard]] azure::Client az_admin() const {
    return azure::Client(az_config(), http::make_curl_transport({}), util::system_clock());
  }
  [[nodiscard]] std::string key(const std::string &k) const { return (is_s3() || is_az() ? "pre/" : "") + k; }
};

std::string get_all(store::ObjectStore &s, const std::string &key) {
  char tmpl[] = "/tmp/lodge-get-XXXXXX";
  util::Fd fd(::mkstemp(tmpl));
  ::unlink(tmpl);
  auto r = s.get(key, fd.get());
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  std::string out;
  ::lseek(fd.get(), 0, SEEK_SET);
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  return out;
}

// The stamp put_req writes: record #42 of a test ledger. remove_owned(k_ours) may remove it.
const store::Stamp k_ours{"contract-ledger", 42};

store::PutRequest put_req(const std::string &key, const Source &src) {
  store::PutRequest r;
  r.key = key;
  r.body = src.body();
  r.content_type = "text/plain";
  r.metadata = {
      {store::meta::ledger, k_ours.ledger_uuid}, {store::meta::record, "42"}, {store::meta::sha256, src.sha}};
  return r;
}

// remove_owned(key, k_ours, guard), required to succeed.
store::Removal remove_ours(store::ObjectStore &s, const std::string &key,
                           store::DeleteGuard guard = store::DeleteGuard::none) {
  auto r = s.remove_owned(key, k_ours, guard);
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
  return r.value();
}
} // namespace

TEST_SUITE("contract") {
  TEST_CASE("put, head and get round-trip bytes, type and metadata") {
    Fixture f;
    auto s = f.open();
    Source src("the quick brown fox\n");
    auto p = s->put(put_req(f.key("o/1.txt"), src));
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    auto h = s->head(f.key("o/1.txt"));
    REQUIRE(h.ok());
    CHECK(h->size == 20);
    CHECK(h->content_type == "text/plain");
    CHECK(h->metadata[store::meta::record] == "42");
    CHECK(h->metadata[store::meta::sha256] == src.sha);
    CHECK(get_all(*s, f.key("o/1.txt")) == "the quick brown fox\n");
    CHECK(s->head(f.key("o/none")).error().code == Errc::not_found);
  }

  TEST_CASE("flush after puts succeeds, on many connections at once, and the objects stay readable") {
    Fixture f;
    auto backend = store::open_backend(f.opts);
    constexpr int k_workers = 4;
    std::vector<std::unique_ptr<store::ObjectStore>> conns;
    for (int i = 0; i < k_workers; ++i)
      conns.push_back(backend->connect());
    Source src("durable bytes\n");
    std::vector<std::string> errors(k_workers);
    {
      std::vector<std::thread> threads;
      for (int i = 0; i < k_workers; ++i)
        threads.emplace_back([&, i] {
          for (int n = 0; n < 5; ++n) {
            auto key = f.key("flush/" + std::to_string(i) + "-" + std::to_string(n));
            auto p = conns[static_cast<size_t>(i)]->put(put_req(key, src));
            if (!p) errors[static_cast<size_t>(i)] = p.error().message;
            auto fl = conns[static_cast<size_t>(i)]->flush();
            if (!fl) errors[static_cast<size_t>(i)] = fl.error().message;
          }
        });
      for (auto &t : threads)
        t.join();
    }
    for (const auto &e : errors)
      CHECK_MESSAGE(e.empty(), e);
    CHECK(conns[0]->flush().ok()); // with nothing new written
    for (int i = 0; i < k_workers; ++i)
      CHECK(get_all(*conns[0], f.key("flush/" + std::to_string(i) + "-4")) == "durable bytes\n");
  }

  TEST_CASE("put is create-only") {
    Fixture f;
    auto s = f.open();
    Source a("first"), b("second");
    REQUIRE(s->put(put_req(f.key("k"), a)).ok());
    auto again = s->put(put_req(f.key("k"), b));
    if (lacks("conditional_create")) {
      // Declared: the server ignores If-None-Match and overwrites.
      CHECK(again.ok());
      CHECK(get_all(*s, f.key("k")) == "second");
      return;
    }
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == Errc::precondition_failed);
    CHECK(get_all(*s, f.key("k")) == "first");
  }

  TEST_CASE("small objects: created only when missing, replaced only under their current tag") {
    Fixture f;
    auto s = f.open();
    auto k = f.key(".lodge/marker");
    auto missing = s->get_small(k);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().code == Errc::not_found);
    auto t1 = s->put_small(k, "one", "");
    REQUIRE(t1.ok());
    auto got = s->get_small(k);
    REQUIRE(got.ok());
    CHECK(got.value().bytes == "one");
    if (lacks("conditional_create")) return; // declared: the server ignores the conditions
    auto recreate = s->put_small(k, "again", "");
    REQUIRE_FALSE(recreate.ok());
    CHECK(recreate.error().code == Errc::precondition_failed);
    auto t2 = s->put_small(k, "two", got.value().tag);
    REQUIRE(t2.ok());
    auto stale = s->put_small(k, "stale", got.value().tag);
    REQUIRE_FALSE(stale.ok());
    CHECK(stale.error().code == Errc::precondition_failed);
    CHECK(s->get_small(k).value().bytes == "two");
  }

  TEST_CASE("five concurrent conditional creates: exactly one wins") {
    Fixture f;
    // Threads only record what happened; every assertion runs on the main thread, where
    // doctest can report it (a REQUIRE on a worker thread aborts the whole binary).
    std::vector<std::unique_ptr<Source>> sources;
    for (int i = 0; i < 5; ++i)
      sources.push_back(std::make_unique<Source>("writer " + std::to_string(i)));
    std::atomic<int> ok{0}, pre{0};
    ThreadFailures failures;
    {
      std::vector<std::jthread> ts;
      for (int i = 0; i < 5; ++i) {
        ts.emplace_back([&, i] {
          failures.guard([&] {
            auto s = f.open();
            auto r = s->put(put_req(f.key("race"), *sources[static_cast<size_t>(i)]));
            if (r.ok())
              ++ok;
            else if (r.error().code == Errc::precondition_failed)
              ++pre;
            else
              failures.add("writer " + std::to_string(i) + ": " + r.error().message);
          });
        });
      }
    }
    CHECK_MESSAGE(failures.empty(), failures.text());
    if (lacks("conditional_create")) { // declared: every writer "wins", the last one stays
      CHECK(ok == 5);
      return;
    }
    CHECK(ok == 1);
    CHECK(pre == 4);
  }

  TEST_CASE("a listing says when each object was last modified (reconcile spares young ones)") {
    Fixture f;
    auto s = f.open();
    Source src("when");
    int64_t before = util::system_clock().now_ms();
    REQUIRE(s->put(put_req(f.key("lm/a.txt"), src)).ok());
    int64_t seen = 0;
    REQUIRE(s->list(f.key("lm/"), [&](const store::ObjectInfo &o) {
               seen = o.last_modified_ms;
               return true;
             }).ok());
    // Stores keep whole seconds; a minute either way allows for a server's clock.
    CHECK(seen > before - 60'000);
    CHECK(seen < before + 60'000);
  }

  TEST_CASE("deleting is idempotent; a missing key is success") {
    Fixture f;
    auto s = f.open();
    CHECK(remove_ours(*s, f.key("never/was")).removed == 0);
    Source src("x");
    REQUIRE(s->put(put_req(f.key("gone"), src)).ok());
    CHECK(remove_ours(*s, f.key("gone")).removed == 1);
    CHECK(s->head(f.key("gone")).error().code == Errc::not_found);
    CHECK(remove_ours(*s, f.key("gone")).removed == 0);
  }

  TEST_CASE("a 1,500-key listing comes back whole, across pages, in byte order") {
    Fixture f;
    std::vector<std::string> keys;
    for (int i = 0; i < 1500; ++i)
      keys.push_back(f.key("l/" + std::to_string(i * 7919 % 1500) + (i % 3 ? "-x" : "/y")));
    std::atomic<size_t> next{0};
    std::vector<std::unique_ptr<Source>> sources;
    for (int t = 0; t < 6; ++t)
      sources.push_back(std::make_unique<Source>("v"));
    ThreadFailures failures;
    {
      std::vector<std::jthread> ts;
      for (size_t t = 0; t < sources.size(); ++t) {
        ts.emplace_back([&, t] {
          failures.guard([&] {
            auto s = f.open();
            for (size_t i; failures.empty() && (i = next++) < keys.size();)
              if (auto r = s->put(put_req(keys[i], *sources[t])); !r.ok())
                failures.add("PUT " + keys[i] + ": " + r.error().message);
          });
        });
      }
    }
    REQUIRE_MESSAGE(failures.empty(), failures.text());
    auto s = f.open();
    Source other("o");
    REQUIRE(s->put(put_req(f.key("m/outside"), other)).ok());
    std::vector<std::string> listed;
    auto all = s->list(f.key("l/"), [&](const store::ObjectInfo &o) {
      listed.push_back(o.key);
      CHECK(o.size == 1);
      return true;
    });
    REQUIRE_MESSAGE(all.ok(), (all.ok() ? "" : all.error().message));
    std::sort(keys.begin(), keys.end());
    CHECK(listed == keys);
  }

  TEST_CASE("keys with spaces, unicode and + = & : % ~ round-trip") {
    Fixture f;
    auto s = f.open();
    for (std::string k : {"sp ace/a b.txt", "uni/caf\xC3\xA9-\xE2\x9C\x93.txt", "sym/a+b=c&d:e%f~g.txt"}) {
      CAPTURE(k);
      Source src("payload of " + k);
      auto p = s->put(put_req(f.key(k), src));
      REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
      CHECK(get_all(*s, f.key(k)) == "payload of " + k);
      bool seen = false;
      REQUIRE(s->list(f.key(k.substr(0, 3)), [&](const store::ObjectInfo &o) {
                 seen = seen || o.key == f.key(k);
                 return true;
               }).ok());
      CHECK(seen);
      CHECK(remove_ours(*s, f.key(k)).removed == 1);
      CHECK(s->head(f.key(k)).error().code == Errc::not_found);
    }
  }

  TEST_CASE("bytes that do not match the digest are refused as FILE_CHANGED") {
    Fixture f;
    auto s = f.open();
    Source src("actual bytes");
    auto req = put_req(f.key("changed"), src);
    req.body.sha256_hex = crypto::sha256_hex("reserved bytes");
    auto r = s->put(req);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::file_changed);
  }

  TEST_CASE("a 3-part multipart upload lands whole; an aborted one leaves nothing listed") {
    Fixture f;
    auto s = f.open();
    std::string content;
    content.reserve((10 << 20) + 1000);
    for (size_t i = 0; content.size() < (10U << 20) + 1000; ++i)
      content += std::to_string(i) + ",";
    Source src(content);
    const uint64_t part = 5 << 20;
    std::vector<store::Body> bodies;
    for (uint64_t off = 0; off < content.size(); off += part) {
      uint64_t n = std::min<uint64_t>(part, content.size() - off);
      bodies.push_back({src.fd.get(), off, n, crypto::sha256_hex(std::string_view(content).substr(off, n))});
    }
    REQUIRE(bodies.size() == 3);
    const store::StagedRequest big{
        f.key("mp/big"), "application/octet-stream", {{store::meta::record, "9"}}, {}};
    auto id = s->begin_staged(big);
    REQUIRE(id.ok());
    std::vector<store::Part> parts;
    for (size_t i = 0; i < bodies.size(); ++i) {
      auto p = s->put_part(f.key("mp/big"), id.value(), static_cast<int>(i + 1), bodies[i], 0);
      REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
      parts.push_back(p.value());
    }
    auto done = s->complete_staged(big, id.value(), parts, 0);
    REQUIRE_MESSAGE(done.ok(), (done.ok() ? "" : done.error().message));
    CHECK(crypto::sha256_hex(get_all(*s, f.key("mp/big"))) == src.sha);
    CHECK(s->head(f.key("mp/big"))->metadata[store::meta::record] == "9");

    auto id2 = s->begin_staged({f.key("mp/abandoned"), "application/octet-stream", {}, {}});
    REQUIRE(id2.ok());
    for (size_t i = 0; i < bodies.size(); ++i)
      REQUIRE(s->put_part(f.key("mp/abandoned"), id2.value(), static_cast<int>(i + 1), bodies[i], 0).ok());
    if (lacks("multipart_listing")) {
      auto l = s->list_staged(f.key("mp/"), [](const store::StagedUpload &) { return true; });
      REQUIRE_FALSE(l.ok());
      CHECK(l.error().code == Errc::unsupported);
      CHECK(s->support(store::Capability::staged_listing) == store::Support::absent);
      auto aborted = s->abort_staged(f.key("mp/abandoned"), id2.value());
      if (lacks("multipart_abort")) { // declared: a typed refusal, not "unreachable"
        REQUIRE_FALSE(aborted.ok());
        CHECK(aborted.error().code == Errc::unsupported);
        CHECK_FALSE(store::is_unreachable(aborted.error()));
      } else {
        CHECK(aborted.ok());
      }
      CHECK(s->head(f.key("mp/abandoned")).error().code == Errc::not_found);
      return;
    }
    int listed = 0;
    REQUIRE(s->list_staged(f.key("mp/"), [&](const store::StagedUpload &u) {
               CHECK(u.key == f.key("mp/abandoned"));
               ++listed;
               return true;
             }).ok());
    CHECK(listed == 1);
    REQUIRE(s->abort_staged(f.key("mp/abandoned"), id2.value()).ok());
    listed = 0;
    REQUIRE(s->list_staged(f.key("mp/"), [&](const store::StagedUpload &) {
               ++listed;
               return true;
             }).ok());
    CHECK(listed == 0);
    CHECK(s->head(f.key("mp/abandoned")).error().code == Errc::not_found);
  }

  TEST_CASE("list_parts: each part by number and size, with a digest of its bytes; a part sent again "
            "replaces it; a gone upload is NOT_FOUND") {
    Fixture f;
    auto s = f.open();
    const std::string key = f.key("lp/k");
    // Part 1 at S3's least size but the last; part 2 short, then sent again with other bytes.
    std::string one(5U << 20, '\0');
    for (size_t i = 0; i < one.size(); ++i)
      one[i] = static_cast<char>((i * 7919) >> 8);
    const std::string two(1000, 'b'), again(1000, 'c');
    Source src(one + two + again);
    auto body = [&](uint64_t offset, const std::string &bytes) {
      return store::Body{src.fd.get(), offset, bytes.size(), crypto::sha256_hex(bytes)};
    };
    // Each part proven by a digest the store vouches for: at least one, and each one given right.
    auto proven = [](const store::StoredPart &p, const std::string &bytes) {
      INFO("part " << p.number);
      CHECK((!p.md5_hex.empty() || !p.sha256_hex.empty()));
      if (!p.sha256_hex.empty()) CHECK(p.sha256_hex == crypto::sha256_hex(bytes));
      if (!p.md5_hex.empty()) {
        crypto::Md5 md5;
        md5.update(bytes);
        const auto d = md5.finish();
        CHECK(p.md5_hex == util::hex_encode(d.data(), d.size()));
      }
    };
    const store::StagedRequest req{key, "application/octet-stream", {{store::meta::record, "7"}}, {}};
    auto id = s->begin_staged(req);
    REQUIRE(id.ok());
    std::map<int, store::Part> sent;
    for (auto [n, b] : {std::pair{1, body(0, one)}, std::pair{2, body(one.size(), two)}}) {
      auto p = s->put_part(key, id.value(), n, b, 0);
      REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
      sent[n] = p.value();
    }
    auto listed = s->list_parts(key, id.value());
    if (lacks("part_listing")) { // declared: refused, never a listing of nothing
      REQUIRE_FALSE(listed.ok());
      return;
    }
    REQUIRE_MESSAGE(listed.ok(), (listed.ok() ? "" : listed.error().message));
    REQUIRE(listed->size() == 2);
    CHECK((listed.value()[0].number == 1 && listed.value()[0].size == one.size()));
    CHECK((listed.value()[1].number == 2 && listed.value()[1].size == two.size()));
    proven(listed.value()[0], one);
    proven(listed.value()[1], two);
    const std::string digest_before = listed.value()[1].md5_hex + listed.value()[1].sha256_hex;

    // Part 2 again with other bytes: listed once, with the new bytes' digest.
    auto p2 = s->put_part(key, id.value(), 2, body(one.size() + two.size(), again), 0);
    REQUIRE_MESSAGE(p2.ok(), (p2.ok() ? "" : p2.error().message));
    listed = s->list_parts(key, id.value());
    REQUIRE_MESSAGE(listed.ok(), (listed.ok() ? "" : listed.error().message));
    REQUIRE(listed->size() == 2);
    CHECK(listed.value()[1].number == 2);
    proven(listed.value()[1], again);
    CHECK(listed.value()[1].md5_hex + listed.value()[1].sha256_hex != digest_before);

    // Another staged upload of the same key is not listed as this one's.
    auto other = s->begin_staged(req);
    REQUIRE(other.ok());
    REQUIRE(s->put_part(key, other.value(), 3, body(0, one), 0).ok());
    listed = s->list_parts(key, id.value());
    REQUIRE(listed.ok());
    CHECK(listed->size() == 2);

    // Completed from what was listed (each part as list_parts names it): the last bytes sent.
    std::vector<store::Part> parts;
    for (const auto &p : listed.value())
      parts.push_back({p.number, p.etag, p.sha256_hex});
    auto done = s->complete_staged(req, id.value(), parts, 0);
    REQUIRE_MESSAGE(done.ok(), (done.ok() ? "" : done.error().message));
    CHECK(get_all(*s, key) == one + again);
    // Completed: the staged upload is gone.
    auto after = s->list_parts(key, id.value());
    REQUIRE_FALSE(after.ok());
    CHECK(after.error().code == Errc::not_found);

    // Aborted, or never begun: NOT_FOUND.
    const std::string key2 = f.key("lp/aborted");
    auto gone = s->begin_staged({key2, "application/octet-stream", {}, {}});
    REQUIRE(gone.ok());
    REQUIRE(s->put_part(key2, gone.value(), 1, body(0, one), 0).ok());
    REQUIRE(s->list_parts(key2, gone.value()).ok());
    REQUIRE(s->abort_staged(key2, gone.value()).ok());
    for (const auto &[k, h] :
         {std::pair{key2, gone.value()}, std::pair{f.key("lp/never"), std::string("0123abcd")}}) {
      auto l = s->list_parts(k, h);
      REQUIRE_FALSE(l.ok());
      CHECK_MESSAGE(l.error().code == Errc::not_found, l.error().message);
    }
  }

  TEST_CASE("remove_owned leaves what is not stamped as the row's, and then the key's staged uploads") {
    Fixture f;
    auto s = f.open();
    struct Case {
      const char *name;
      store::Metadata meta;
      const char *why;
    };
    const std::string ours = k_ours.ledger_uuid;
    for (const auto &c :
         {Case{"none", {}, "no lodge stamp"},
          Case{"ledger",
               {{store::meta::ledger, "another-ledger"}, {store::meta::record, "42"}},
               "another-ledger"},
          Case{"record", {{store::meta::ledger, ours}, {store::meta::record, "43"}}, "record #43"},
          Case{"garbage", {{store::meta::ledger, ours}, {store::meta::record, "42x"}}, "no record id"},
          Case{"padded", {{store::meta::ledger, ours}, {store::meta::record, "042"}}, "no record id"},
          Case{"half", {{store::meta::ledger, ours}}, "no record id"}}) {
      CAPTURE(c.name);
      const std::string body = std::string("written by ") + c.name;
      Source src(body);
      auto req = put_req(f.key(std::string("own/") + c.name), src);
      req.metadata = c.meta;
      REQUIRE(s->put(req).ok());
      auto r = remove_ours(*s, req.key, store::DeleteGuard::pending_only);
      CHECK(r.removed == 0);
      REQUIRE(r.kept.size() == 1);
      CHECK_MESSAGE(r.kept[0].find(c.why) != std::string::npos, r.kept[0]);
      CHECK(get_all(*s, req.key) == body);
    }
    // A staged upload at a key that keeps another's object stays too (its writer's, maybe).
    auto id = s->begin_staged({f.key("own/none"), "application/octet-stream", {}, {}});
    REQUIRE(id.ok());
    Source part("one part");
    REQUIRE(s->put_part(f.key("own/none"), id.value(), 1, part.body(), 0).ok());
    CHECK(remove_ours(*s, f.key("own/none")).kept.size() == 1);
    if (lacks("multipart_listing")) return;
    std::vector<std::string> left;
    REQUIRE(s->list_staged(f.key("own/"), [&](const store::StagedUpload &u) {
               left.push_back(u.key);
               return true;
             }).ok());
    // (Azure: uncommitted blocks of a committed blob are not listed as a staged upload.)
    if (!is_az()) CHECK(left == std::vector<std::string>{f.key("own/none")});
    CHECK(get_all(*s, f.key("own/none")) == "written by none");
  }

  TEST_CASE("remove_owned also aborts the key's incomplete multipart uploads") {
    Fixture f;
    auto s = f.open();
    auto id = s->begin_staged({f.key("mp2/k"), "application/octet-stream", {}, {}});
    REQUIRE(id.ok());
    auto other = s->begin_staged({f.key("mp2/k2"), "application/octet-stream", {}, {}});
    REQUIRE(other.ok());
    // A staged upload exists on every backend once a part is sent (Azure has none before).
    Source part("one part");
    REQUIRE(s->put_part(f.key("mp2/k"), id.value(), 1, part.body(), 0).ok());
    REQUIRE(s->put_part(f.key("mp2/k2"), other.value(), 1, part.body(), 0).ok());
    CHECK(remove_ours(*s, f.key("mp2/k")).kept.empty());
    if (lacks("multipart_listing")) { // declared: nothing can find the uploads to abort
      CHECK(s->support(store::Capability::staged_listing) == store::Support::absent);
      return;
    }
    std::vector<std::string> left;
    REQUIRE(s->list_staged(f.key("mp2/"), [&](const store::StagedUpload &u) {
               left.push_back(u.key);
               return true;
             }).ok());
    CHECK(left == std::vector<std::string>{f.key("mp2/k2")});
  }
}

namespace {
// plan_removal(key, k_ours, guard) for each key, required to succeed; then remove_planned.
std::vector<Result<store::Removal>> remove_planned(store::ObjectStore &s,
                                                   const std::vector<std::string> &keys) {
  std::vector<store::PlannedRemoval> plans;
  for (const auto &k : keys) {
    auto p = s.plan_removal(k, k_ours, store::DeleteGuard::pending_only);
    REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
    plans.push_back(p.value());
  }
  auto out = s.remove_planned(plans);
  REQUIRE(out.size() == keys.size());
  return out;
}
} // namespace

TEST_SUITE("contract") {
  TEST_CASE(
      "remove_planned removes what remove_owned would: ours, nothing else, a key twice, the staged uploads") {
    Fixture f;
    auto s = f.open();
    // S3 batches where the bucket was never versioned; the others go key by key.
    CHECK(s->batches_removals() == (is_s3() && !lacks("versioning")));
    Source a("ours, a"), b("ours, b"), c("another tool's");
    REQUIRE(s->put(put_req(f.key("pl/a"), a)).ok());
    REQUIRE(s->put(put_req(f.key("pl/b"), b)).ok());
    auto foreign = put_req(f.key("pl/c"), c);
    foreign.metadata = {};
    REQUIRE(s->put(foreign).ok());
    auto id = s->begin_staged({f.key("pl/b"), "application/octet-stream", {}, {}});
    REQUIRE(id.ok());
    Source part("one part");
    REQUIRE(s->put_part(f.key("pl/b"), id.value(), 1, part.body(), 0).ok());
    auto kept_id = s->begin_staged({f.key("pl/c"), "application/octet-stream", {}, {}});
    REQUIRE(kept_id.ok());
    REQUIRE(s->put_part(f.key("pl/c"), kept_id.value(), 1, part.body(), 0).ok());
    auto r =
        remove_planned(*s, {f.key("pl/a"), f.key("pl/b"), f.key("pl/c"), f.key("pl/none"), f.key("pl/a")});
    for (const auto &x : r)
      REQUIRE_MESSAGE(x.ok(), (x.ok() ? "" : x.error().message));
    CHECK(r[0]->removed == 1);
    CHECK(r[0]->kept.empty());
    CHECK(r[1]->removed == 1);
    CHECK(r[1]->kept.empty());
    CHECK(r[2]->removed == 0);
    REQUIRE(r[2]->kept.size() == 1);
    CHECK_MESSAGE(r[2]->kept[0].find("no lodge stamp") != std::string::npos, r[2]->kept[0]);
    CHECK(r[3]->removed == 0);
    CHECK(r[3]->kept.empty());
    CHECK(r[4]->removed == 0); // the second task at a key finds it gone
    CHECK(r[4]->kept.empty());
    CHECK(s->head(f.key("pl/a")).error().code == Errc::not_found);
    CHECK(s->head(f.key("pl/b")).error().code == Errc::not_found);
    CHECK(get_all(*s, f.key("pl/c")) == "another tool's");
    if (lacks("multipart_listing")) return;
    std::vector<std::string> left;
    REQUIRE(s->list_staged(f.key("pl/"), [&](const store::StagedUpload &u) {
               left.push_back(u.key);
               return true;
             }).ok());
    // The upload at the key that keeps another's object stays (Azure: uncommitted blocks of
    // a committed blob are not listed as a staged upload).
    if (!is_az()) CHECK(left == std::vector<std::string>{f.key("pl/c")});
  }
}

TEST_SUITE("contract") {
  TEST_CASE("the store learns the capabilities the server lacks, and deletes without them") {
    Fixture f;
    auto s = f.open();
    CHECK(s->support(store::Capability::version_listing) != store::Support::absent);
    Source src("capable?");
    REQUIRE(s->put(put_req(f.key("cap/k"), src)).ok());
    // remove_owned lists the key's versions and uploads: the answers teach the store.
    auto removed = s->remove_owned(f.key("cap/k"), k_ours, store::DeleteGuard::none);
    REQUIRE_MESSAGE(removed.ok(), (removed.ok() ? "" : removed.error().message));
    CHECK(s->head(f.key("cap/k")).error().code == Errc::not_found);
    auto listed = s->list_staged(f.key("cap/"), [](const store::StagedUpload &) { return true; });
    // (Not a structured binding: clang 14 cannot capture one, and CAPTURE captures.)
    for (const auto &entry : {std::pair{store::Capability::version_listing, "version_listing"},
                              std::pair{store::Capability::staged_listing, "multipart_listing"}}) {
      const char *name = entry.second;
      CAPTURE(name);
      CHECK(s->support(entry.first) == (lacks(name) ? store::Support::absent : store::Support::present));
    }
    CHECK(listed.ok() == !lacks("multipart_listing"));
    if (!listed.ok()) {
      CHECK(listed.error().code == Errc::unsupported);
      CHECK_FALSE(store::is_unreachable(listed.error()));
      // Learned for the run: a second connection to the same server knows it already.
      auto again = f.open();
      CHECK(again->support(store::Capability::staged_listing) == store::Support::absent);
    }
  }
}

// S3 alone: a file:// store has no versions.
TEST_SUITE("s3only") {
  TEST_CASE("on a versioned bucket, remove_owned removes its versions and leaves a delete marker") {
    Fixture f;
    if (lacks("versioning")) { // declared: the server refuses to turn versioning on
      CHECK_FALSE(test::set_versioning(f.admin_config(), true).ok());
      return;
    }
    REQUIRE(test::set_versioning(f.admin_config(), true).ok());
    auto s = f.open();
    Source a("v1"), b("v2");
    REQUIRE(s->put(put_req(f.key("ver/k"), a)).ok());
    auto admin = f.admin();
    REQUIRE(admin.delete_object(f.key("ver/k")).ok()); // leaves a delete marker
    REQUIRE(s->put(put_req(f.key("ver/k"), b)).ok());
    int before = 0;
    REQUIRE(admin
                .list_versions(f.key("ver/"),
                               [&](const s3::ListedVersion &) {
                                 ++before;
                                 return true;
                               })
                .ok());
    CHECK(before == 3);
    CHECK(remove_ours(*s, f.key("ver/k")).removed == 2);
    int after = 0;
    REQUIRE(admin
                .list_versions(f.key("ver/"),
                               [&](const s3::ListedVersion &) {
                                 ++after;
                                 return true;
                               })
                .ok());
    CHECK(after == 1); // the delete marker: no bytes, no stamp, never lodge's to remove
  }
}

// S3 alone: versions, and the conditional delete that makes the stamp check race-free.
TEST_SUITE("s3only") {
  TEST_CASE("a batched delete keeps an object written over after its plan read it (DeleteObjects' ETag)") {
    Fixture f;
    // Declared: a server without versioning or conditional deletes is not batched (the
    // contract case above asserts it), and could not keep the condition.
    if (lacks("versioning") || lacks("conditional_delete")) return;
    auto s = f.open();
    REQUIRE(s->batches_removals());
    Source mine("lodge's bytes"), other("ours too, untouched");
    REQUIRE(s->put(put_req(f.key("race/k"), mine)).ok());
    REQUIRE(s->put(put_req(f.key("race/other"), other)).ok());
    std::vector<store::PlannedRemoval> plans;
    for (const auto *k : {"race/k", "race/other"}) {
      auto p = s->plan_removal(f.key(k), k_ours, store::DeleteGuard::none);
      REQUIRE(p.ok());
      CHECK(p->present);
      CHECK_FALSE(p->per_object);
      plans.push_back(p.value());
    }
    // Between the HEAD and the delete another tool writes over the key.
    auto admin = f.admin();
    http::StringBody theirs("another tool's bytes");
    s3::PutOptions o;
    o.if_none_match = false;
    REQUIRE(admin.put_object(f.key("race/k"), theirs, o).ok());
    auto r = s->remove_planned(plans);
    REQUIRE(r.size() == 2);
    REQUIRE_MESSAGE(r[0].ok(), (r[0].ok() ? "" : r[0].error().message));
    CHECK(r[0]->removed == 0);
    REQUIRE(r[0]->kept.size() == 1); // looked at again, key by key: not ours now
    CHECK(r[0]->kept[0].find("no lodge stamp") != std::string::npos);
    CHECK(get_all(*s, f.key("race/k")) == "another tool's bytes");
    REQUIRE(r[1].ok());
    CHECK(r[1]->removed == 1);
    CHECK(s->head(f.key("race/other")).error().code == Errc::not_found);
  }

  TEST_CASE("a versioned bucket's deletes are not batched: each key's versions are read") {
    Fixture f;
    if (lacks("versioning")) return; // declared: the contract case above asserts it is not batched
    REQUIRE(test::set_versioning(f.admin_config(), true).ok());
    auto s = f.open();
    CHECK_FALSE(s->batches_removals());
  }

  TEST_CASE("on a versioned bucket, remove_owned removes only the stamped version") {
    Fixture f;
    if (lacks("versioning")) return; // declared: the versioned case above asserts the refusal
    REQUIRE(test::set_versioning(f.admin_config(), true).ok());
    auto s = f.open();
    Source mine("lodge's bytes");
    REQUIRE(s->put(put_req(f.key("ver/mixed"), mine)).ok());
    auto admin = f.admin();
    http::StringBody theirs("another tool's bytes");
    s3::PutOptions o;
    o.if_none_match = false;
    REQUIRE(admin.put_object(f.key("ver/mixed"), theirs, o).ok()); // a new current version, unstamped
    auto r = remove_ours(*s, f.key("ver/mixed"));
    CHECK(r.removed == 1);
    REQUIRE(r.kept.size() == 1);
    CHECK(r.kept[0].find("no lodge stamp") != std::string::npos);
    CHECK(get_all(*s, f.key("ver/mixed")) == "another tool's bytes");
    int versions = 0, markers = 0;
    REQUIRE(admin
                .list_versions(f.key("ver/"),
                               [&](const s3::ListedVersion &v) {
                                 ++(v.delete_marker ? markers : versions);
                                 return true;
                               })
                .ok());
    CHECK(versions == 1);
    CHECK(markers == 0);
  }

  TEST_CASE("a DELETE with If-Match on another ETag is refused and deletes nothing") {
    Fixture f;
    auto s = f.open();
    Source src("conditional");
    REQUIRE(s->put(put_req(f.key("cond/k"), src)).ok());
    auto admin = f.admin();
    auto d = admin.delete_object(f.key("cond/k"), "", "0123456789abcdef0123456789abcdef");
    if (lacks("conditional_delete")) { // declared: the server ignores the condition
      CHECK(d.ok());
      return;
    }
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().code == Errc::precondition_failed);
    CHECK(get_all(*s, f.key("cond/k")) == "conditional");
    auto h = s->head(f.key("cond/k"));
    REQUIRE(h.ok());
    CHECK(admin.delete_object(f.key("cond/k"), "", h->etag).ok());
    CHECK(s->head(f.key("cond/k")).error().code == Errc::not_found);
  }
}

// file:// alone: escaping the root is a file-system notion; S3 keys are opaque.// file:// alone: escaping the
// root is a file-system notion; S3 keys are opaque.
TEST_SUITE("fileonly") {
  TEST_CASE("file:// keeps a file written over the key, in place or renamed over it") {
    Fixture f;
    auto s = f.open();
    Source a("lodge's bytes"), b("lodge's again");
    REQUIRE(s->put(put_req("in/place", a)).ok());
    REQUIRE(s->put(put_req("re/named", b)).ok());
    // A plain write over the file: the inode, and with it lodge's attribute, stay.
    std::ofstream(f.dir / "in/place", std::ios::trunc) << "another tool's bytes";
    auto in_place = remove_ours(*s, "in/place");
    REQUIRE(in_place.kept.size() == 1);
    CHECK(in_place.kept[0].find("written over in place") != std::string::npos);
    // A file renamed over the key: a new inode with no stamp.
    std::ofstream(f.dir / "renamed.tmp") << "another tool's file";
    fs::rename(f.dir / "renamed.tmp", f.dir / "re/named");
    auto renamed = remove_ours(*s, "re/named");
    REQUIRE(renamed.kept.size() == 1);
    // (Where the filesystem keeps no user xattrs, lodge's stale sidecar is read: its digest differs.)
    CHECK((renamed.kept[0].find("no lodge stamp") != std::string::npos ||
           renamed.kept[0].find("written over in place") != std::string::npos));
    CHECK(get_all(*s, "in/place") == "another tool's bytes");
    CHECK(get_all(*s, "re/named") == "another tool's file");
    // Nothing was left aside under lodge's temporary folder.
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(f.dir / ".lodge-tmp", ec))
      CHECK_MESSAGE(e.path().filename().string().rfind("removing-", 0) != 0, e.path().string());
  }

  TEST_CASE("file:// refuses keys that would escape its root") {
    Fixture f;
    auto s = f.open();
    Source src("x");
    for (std::string k : {"../escape", "a/../../b", "/abs", "a//b", ".lodge-meta/x", ""}) {
      CAPTURE(k);
      auto r = s->put(put_req(k, src));
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == Errc::storage_error);
    }
    CHECK_FALSE(fs::exists(f.dir.parent_path() / "escape"));
  }

  TEST_CASE("a malformed metadata sidecar is METADATA_CORRUPT naming the field, never a crash") {
    Fixture f;
    auto s = f.open();
    Source src("bytes");
    REQUIRE(s->put(put_req("o/k.txt", src)).ok());
    fs::path object = f.dir / "o" / "k.txt";
    fs::path sidecar = f.dir / ".lodge-meta" / "o" / "k.txt.json";
    // Kept on the object's file: one step, no sidecar.
    char probe[4096];
    REQUIRE(::getxattr(object.c_str(), "user.lodge.meta", probe, sizeof probe) > 0);
    REQUIRE_FALSE(fs::exists(sidecar));
    struct Case {
      const char *json;
      const char *named;
    };
    // The attribute, then (as a store written before it keeps them) the sidecar.
    auto write_meta = [&](const std::string &json, bool in_xattr) {
      if (in_xattr) {
        REQUIRE(::setxattr(object.c_str(), "user.lodge.meta", json.data(), json.size(), 0) == 0);
      } else {
        ::removexattr(object.c_str(), "user.lodge.meta");
        fs::create_directories(sidecar.parent_path());
        std::ofstream(sidecar, std::ios::trunc) << json;
      }
    };
    for (bool in_xattr : {true, false})
      for (auto c :
           {Case{R"({"sha256": 5, "content_type": "text/plain"})", "'sha256'"},
            Case{R"({"sha256": "ab", "content_type": ["x"]})", "'content_type'"},
            Case{R"({"sha256": "ab", "metadata": {"lodge-record-id": 42}})", "'metadata.lodge-record-id'"},
            Case{R"({"metadata": "nope"})", "'metadata'"}, Case{R"([1, 2])", "not an object"},
            Case{R"({"sha256": )", "not valid JSON"}}) {
        CAPTURE(c.json);
        CAPTURE(in_xattr);
        write_meta(c.json, in_xattr);
        auto h = s->head("o/k.txt");
        REQUIRE_FALSE(h.ok());
        CHECK(h.error().code == Errc::metadata_corrupt);
        CHECK(h.error().message.find(c.named) != std::string::npos);
        CHECK(h.error().message.find("o/k.txt") != std::string::npos);
      }
    write_meta(R"({"sha256": "ab", "content_type": "text/plain"})", false);
    auto old = s->head("o/k.txt");
    REQUIRE(old.ok());
    CHECK(old->content_type == "text/plain"); // a sidecar-only object is still read
    write_meta(R"({"sha256": "cd", "content_type": "text/css"})", true);
    CHECK(s->head("o/k.txt")->content_type == "text/css"); // the attribute wins
  }

  TEST_CASE("a malformed multipart record fails that upload clearly and does not stop listings") {
    Fixture f;
    auto s = f.open();
    Source src("part bytes");
    auto id = s->begin_staged({"mp/k", "text/plain", {{store::meta::record, "1"}}, {}});
    REQUIRE(id.ok());
    auto part = s->put_part("mp/k", id.value(), 1, src.body(), 0);
    REQUIRE(part.ok());
    auto other = s->begin_staged({"mp/ok", "text/plain", {}, {}});
    REQUIRE(other.ok());
    fs::path record = f.dir / ".lodge-mpu" / id.value() / "upload.json";
    std::ofstream(record, std::ios::trunc) << R"({"key": "mp/k", "content_type": 7, "initiated_ms": 1})";
    auto done =
        s->complete_staged({"mp/k", "application/octet-stream", {}, {}}, id.value(), {part.value()}, 0);
    REQUIRE_FALSE(done.ok());
    CHECK(done.error().code == Errc::metadata_corrupt);
    CHECK(done.error().message.find("'content_type'") != std::string::npos);
    std::ofstream(record, std::ios::trunc) << R"({"key": ["mp/k"], "initiated_ms": "soon"})";
    std::vector<std::string> listed;
    REQUIRE(s->list_staged("mp/", [&](const store::StagedUpload &u) {
               listed.push_back(u.key);
               return true;
             }).ok());
    CHECK(listed == std::vector<std::string>{"mp/ok"});
    auto again =
        s->complete_staged({"mp/k", "application/octet-stream", {}, {}}, id.value(), {part.value()}, 0);
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == Errc::metadata_corrupt);
    CHECK(remove_ours(*s, "mp/ok").kept.empty());
  }

  TEST_CASE("a part that cannot be read fails the completion instead of being taken as empty") {
    Fixture f;
    auto s = f.open();
    Source a("first part;"), b("second part");
    auto id = s->begin_staged({"mp/read", "text/plain", {}, {}});
    REQUIRE(id.ok());
    auto p1 = s->put_part("mp/read", id.value(), 1, a.body(), 0);
    auto p2 = s->put_part("mp/read", id.value(), 2, b.body(), 0);
    REQUIRE((p1.ok() && p2.ok()));
    // A directory where the part should be: open(2) works, read(2) fails with EISDIR.
    fs::path part2 = f.dir / ".lodge-mpu" / id.value() / "part-00002";
    fs::remove(part2);
    fs::create_directory(part2);
    auto done = s->complete_staged({"mp/read", "application/octet-stream", {}, {}}, id.value(),
                                   {p1.value(), p2.value()}, 0);
    REQUIRE_FALSE(done.ok());
    CHECK(done.error().code == Errc::storage_unavailable);
    CHECK(done.error().message.find("part-00002") != std::string::npos);
    CHECK(s->head("mp/read").error().code == Errc::not_found);
  }

  TEST_CASE("a part changed after it was written, or parts that are not the stamped digest, are never "
            "completed") {
    Fixture f;
    auto s = f.open();
    Source a("first part;"), b("second part");
    const std::string whole = crypto::sha256_hex(std::string("first part;second part"));
    for (bool changed_part : {true, false}) {
      CAPTURE(changed_part);
      const std::string key = changed_part ? "mp/changed" : "mp/stamped";
      const store::StagedRequest req{
          key, "text/plain", {{store::meta::sha256, changed_part ? whole : std::string(64, '0')}}, {}};
      auto id = s->begin_staged(req);
      REQUIRE(id.ok());
      auto p1 = s->put_part(key, id.value(), 1, a.body(), 0);
      auto p2 = s->put_part(key, id.value(), 2, b.body(), 0);
      REQUIRE((p1.ok() && p2.ok()));
      CHECK(p1->sha256_hex == a.sha);
      if (changed_part) { // one byte, the same size, in place
        std::fstream part(f.dir / ".lodge-mpu" / id.value() / "part-00001", std::ios::in | std::ios::out);
        part.seekp(0);
        part << 'F';
      }
      auto done = s->complete_staged(req, id.value(), {p1.value(), p2.value()}, 0);
      REQUIRE_FALSE(done.ok());
      CHECK(done.error().code == Errc::content_mismatch);
      CHECK(done.error().message.find(changed_part ? "part 1" : "stamped with") != std::string::npos);
      CHECK(s->head(key).error().code == Errc::not_found);
      REQUIRE(s->abort_staged(key, id.value()).ok());
    }
  }

  // The inode number of the file at p.
  uint64_t inode_of(const fs::path &p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return static_cast<uint64_t>(st.st_ino);
  }

  TEST_CASE("temporary files: a killed writer's and deleter's are listed with when they were last used; "
            "removed only while that is before the time given") {
    Fixture f;
    auto s = f.open();
    Source a("an object");
    REQUIRE(s->put(put_req("t/obj", a)).ok()); // its temporary file had no name
    const fs::path tmp = f.dir / ".lodge-tmp";
    fs::create_directories(tmp);
    const int64_t now = util::system_clock().now_ms();
    for (const char *n : {".lodge-0123456789abcdef.tmp", "notes.txt", ".lodge-short.tmp"})
      std::ofstream(tmp / n) << "x";
    // A delete's moved-aside object names the inode whose stamp it read: this file's own, and
    // one that names another inode (a file another writer put at the key), never listed.
    std::ofstream(tmp / "aside") << "xy";
    const std::string removing = "removing-" + std::to_string(now - 60'000) + "-" +
                                 std::to_string(inode_of(tmp / "aside")) + "-" + crypto::random_uuid();
    fs::rename(tmp / "aside", tmp / removing);
    std::ofstream(tmp / "other") << "z";
    const std::string foreign = "removing-" + std::to_string(now - 60'000) + "-" +
                                std::to_string(inode_of(tmp / "notes.txt")) + "-" + crypto::random_uuid();
    fs::rename(tmp / "other", tmp / foreign);
    std::ofstream(tmp / ("removing-" + crypto::random_uuid())) << "legacy";
    std::vector<store::StoreTemp> listed;
    REQUIRE(s->list_temps([&](const store::StoreTemp &t) {
               listed.push_back(t);
               return true;
             }).ok());
    REQUIRE(listed.size() == 2);
    CHECK(listed[0].name == ".lodge-tmp/.lodge-0123456789abcdef.tmp");
    CHECK(listed[0].since_ms >= now - 5'000);
    CHECK(listed[0].size == 1);
    CHECK(listed[1].name == ".lodge-tmp/" + removing);
    CHECK(listed[1].since_ms == now - 60'000);
    CHECK(s->remove_temp(listed[1].name, now - 60'000).value() == false); // not before: in use
    CHECK(s->remove_temp(listed[0].name, now - 60'000).value() == false);
    CHECK(s->remove_temp(listed[1].name, now).value() == true);
    CHECK(s->remove_temp(listed[1].name, now).value() == false); // gone
    CHECK(s->remove_temp(".lodge-tmp/notes.txt", now + 60'000).error().code == Errc::storage_error);
    CHECK(s->remove_temp("t/obj", now + 60'000).error().code == Errc::storage_error);
    CHECK(s->remove_temp(".lodge-tmp/" + foreign, now + 60'000).error().code == Errc::storage_error);
    CHECK(fs::exists(tmp / "notes.txt"));
    CHECK(fs::exists(tmp / foreign));
    CHECK(fs::exists(f.dir / "t" / "obj"));
  }

  TEST_CASE("an unlistable uploads directory is an error, not an empty listing") {
    Fixture f;
    auto s = f.open();
    fs::remove_all(f.dir / ".lodge-mpu");
    std::ofstream(f.dir / ".lodge-mpu") << "not a directory";
    auto l = s->list_staged("", [](const store::StagedUpload &) { return true; });
    REQUIRE_FALSE(l.ok());
    CHECK(l.error().code == Errc::storage_unavailable);
    CHECK(l.error().message.find(".lodge-mpu") != std::string::npos);
    CHECK_FALSE(s->remove_owned("any/key", k_ours, store::DeleteGuard::none)
                    .ok()); // a delete that cannot see uploads does not claim success
  }
}

namespace {
// Rules for the proxy: a JSON list it re-reads whenever the file changes.
void set_rules(const std::string &rules_json) {
  std::string path = env("LODGE_TEST_PROXY_RULES");
  REQUIRE(!path.empty());
  std::string tmp = path + ".tmp";
  std::ofstream(tmp) << rules_json;
  REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0);
}

std::vector<nlohmann::json> proxy_log() {
  std::ifstream f(env("LODGE_TEST_PROXY_LOG"));
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

int count_log(const std::vector<nlohmann::json> &log, const std::string &method,
              const std::string &key_part) {
  int n = 0;
  for (const auto &e : log)
    if (e["method"] == method && e["path"].get<std::string>().find(key_part) != std::string::npos) ++n;
  return n;
}

struct ProxyFixture : Fixture {
  store::StoreOptions via_proxy;
  ProxyFixture() {
    via_proxy = opts;
    via_proxy.endpoint = env("LODGE_TEST_PROXY_ENDPOINT");
    REQUIRE(!via_proxy.endpoint.empty());
  }
};
} // namespace

TEST_SUITE("faults") {
  TEST_CASE("a PUT that meets two 503s succeeds on the third attempt") {
    ProxyFixture f;
    std::string key = f.key("f503/" + crypto::random_uuid());
    set_rules(R"([{"method": "PUT", "path_contains": ")" + key.substr(4) +
              R"(", "action": "503", "times": 2}])");
    // Both 503s are counted where the process's run reads them (StoreOptions::backpressure).
    auto o = f.via_proxy;
    o.backpressure = std::make_shared<util::Backpressure>();
    auto s = store::open_store(o);
    Source src("retried bytes");
    auto r = s->put(put_req(key, src));
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    CHECK(count_log(proxy_log(), "PUT", key.substr(4)) == 3);
    CHECK(o.backpressure->throttled.load() + o.backpressure->failed.load() == 2);
    CHECK(get_all(*f.open(), key) == "retried bytes");
    set_rules("[]");
  }

  TEST_CASE("a black-holed connection ends within the configured timeout") {
    ProxyFixture f;
    set_rules(R"([{"method": "HEAD", "path_contains": "hole", "action": "blackhole", "times": 10}])");
    auto o = f.via_proxy;
    o.low_speed_time_s = 2;
    o.max_attempts = 1;
    auto s = store::open_store(o);
    int64_t start = util::steady_ms();
    auto r = s->head(f.key("hole/k"));
    int64_t took = util::steady_ms() - start;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == Errc::storage_unavailable);
    CHECK(r.error().details.curl_code == 28);
    CHECK(took >= 1500);
    CHECK(took < 10000);
    set_rules("[]");
  }

  TEST_CASE("a reset mid-body is retried from offset 0 and the stored bytes hash to the source") {
    ProxyFixture f;
    std::string key = f.key("reset/" + crypto::random_uuid());
    set_rules(R"([{"method": "PUT", "path_contains": ")" + key.substr(4) +
              R"(", "action": "reset_mid_body", "bytes": 100000, "times": 1}])");
    std::string content(300000, '\0');
    for (size_t i = 0; i < content.size(); ++i)
      content[i] = static_cast<char>(i * 131 % 251);
    Source src(content);
    auto s = store::open_store(f.via_proxy);
    auto r = s->put(put_req(key, src));
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    auto log = proxy_log();
    CHECK(count_log(log, "PUT", key.substr(4)) == 2);
    CHECK(crypto::sha256_hex(get_all(*f.open(), key)) == src.sha);
    set_rules("[]");
  }
}

TEST_SUITE("faults") {
  TEST_CASE("a GET cut off mid-body is resumed, not repeated: the bytes read back exact") {
    ProxyFixture f;
    std::string key = f.key("cut/" + crypto::random_uuid());
    std::string content(300000, '\0');
    for (size_t i = 0; i < content.size(); ++i)
      content[i] = static_cast<char>(i * 131 % 251);
    Source src(content);
    REQUIRE(f.open()->put(put_req(key, src)).ok());
    set_rules(R"([{"method": "GET", "path_contains": ")" + key.substr(4) +
              R"(", "action": "cut_body", "bytes": 100000, "times": 1}])");
    auto s = store::open_store(f.via_proxy);
    std::string got;
    auto r = s->read(key, [&](const char *p, size_t n) {
      got.append(p, n);
      return true;
    });
    REQUIRE_MESSAGE(r.ok(), (r.ok() ? "" : r.error().message));
    CHECK(got.size() == content.size());
    CHECK(crypto::sha256_hex(got) == src.sha);
    std::vector<nlohmann::json> gets;
    for (const auto &e : proxy_log())
      if (e["method"] == "GET" && e["path"].get<std::string>().find(key.substr(4)) != std::string::npos)
        gets.push_back(e);
    REQUIRE(gets.size() == 2);
    CHECK(gets[0]["action"] == "cut_body");
    CHECK(gets[1].value("range", "") == "bytes=100000-");
    // get() into a file goes the same way.
    set_rules(R"([{"method": "GET", "path_contains": ")" + key.substr(4) +
              R"(", "action": "cut_body", "bytes": 65537, "times": 1}])");
    CHECK(crypto::sha256_hex(get_all(*s, key)) == src.sha);
    set_rules("[]");
  }
}

TEST_SUITE("auth") {
  TEST_CASE("a wrong secret is rejected when the server checks signatures; the right one works") {
    store::StoreOptions o;
    o.endpoint = env("LODGE_TEST_AUTH_ENDPOINT");
    o.url = "s3://" + env("LODGE_TEST_AUTH_BUCKET") + "/p";
    o.env = {{"AWS_ACCESS_KEY_ID", env("LODGE_TEST_AUTH_KEY_ID")},
             {"AWS_SECRET_ACCESS_KEY", env("LODGE_TEST_AUTH_SECRET")}};
    REQUIRE(!o.endpoint.empty());
    Source src("signed");
    auto good = store::open_store(o)->put(put_req("p/plain-key.txt", src));
    REQUIRE_MESSAGE(good.ok(), (good.ok() ? "" : good.error().message));
    o.env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret";
    auto bad = store::open_store(o)->put(put_req("p/other-key.txt", src));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == Errc::access_denied);
    CHECK(bad.error().details.http_status == 403);
    CHECK(bad.error().details.s3_code == "SignatureDoesNotMatch");
    CHECK(bad.error().message.find("not-the-secret") == std::string::npos);
  }
}

// Azure alone: what the write-up measured against Azurite, through the store and, where the
// store's answer is not enough, the container's own client looking behind it.
TEST_SUITE("azonly") {
  TEST_CASE("a conflicting create answers 409 BlobAlreadyExists or 412, and is PRECONDITION_FAILED") {
    Fixture f;
    auto s = f.open();
    Source a("first"), b("second");
    REQUIRE(s->put(put_req(f.key("exists"), a)).ok());
    auto again = s->put(put_req(f.key("exists"), b));
    REQUIRE_FALSE(again.ok());
    CHECK(again.error().code == Errc::precondition_failed);
    const long status = again.error().details.http_status;
    CHECK((status == 409 || status == 412));
    CHECK((again.error().details.s3_code == "BlobAlreadyExists" ||
           again.error().details.s3_code == "ConditionNotMet"));
    CHECK(get_all(*s, f.key("exists")) == "first");
  }

  TEST_CASE("five concurrent conditional creates: 1 winner, 4 PRECONDITION_FAILED, 1 blob") {
    Fixture f;
    std::vector<std::unique_ptr<Source>> sources;
    for (int i = 0; i < 5; ++i)
      sources.push_back(std::make_unique<Source>("writer " + std::to_string(i)));
    std::atomic<int> ok{0}, pre{0};
    ThreadFailures failures;
    {
      std::vector<std::jthread> ts;
      for (int i = 0; i < 5; ++i) {
        ts.emplace_back([&, i] {
          failures.guard([&] {
            auto s = f.open();
            auto r = s->put(put_req(f.key("g/race"), *sources[static_cast<size_t>(i)]));
            if (r.ok())
              ++ok;
            else if (r.error().code == Errc::precondition_failed)
              ++pre;
            else
              failures.add("writer " + std::to_string(i) + ": " + r.error().message);
          });
        });
      }
    }
    CHECK_MESSAGE(failures.empty(), failures.text());
    CHECK(ok == 1);
    CHECK(pre == 4);
    int blobs = 0;
    REQUIRE(f.az_admin()
                .list_blobs(f.key("g/"), azure::Include::uncommitted | azure::Include::versions,
                            [&](const azure::ListedBlob &) {
                              ++blobs;
                              return true;
                            })
                .ok());
    CHECK(blobs == 1);
  }

  TEST_CASE("guarded delete: a pending blob is deleted, a committed one is refused and stays") {
    Fixture f;
    auto s = f.open();
    Source a("pending"), b("committed");
    REQUIRE(s->put(put_req(f.key("j/pending"), a)).ok());
    REQUIRE(s->put(put_req(f.key("j/committed"), b)).ok());
    REQUIRE(s->mark_committed(f.key("j/committed"), {}).ok());
    CHECK(remove_ours(*s, f.key("j/pending"), store::DeleteGuard::pending_only).removed == 1);
    CHECK(s->head(f.key("j/pending")).error().code == Errc::not_found);
    auto refused = remove_ours(*s, f.key("j/committed"), store::DeleteGuard::pending_only);
    REQUIRE(refused.refused.has_value());
    CHECK(refused.refused->find("state=committed") != std::string::npos);
    CHECK(refused.removed == 0);
    CHECK(get_all(*s, f.key("j/committed")) == "committed");
    // Unguarded (a user-deleted ACTIVE row's object), it goes.
    CHECK(remove_ours(*s, f.key("j/committed")).removed == 1);
    CHECK(s->head(f.key("j/committed")).error().code == Errc::not_found);
  }

  TEST_CASE("guarded delete: a stamped blob with no tag at all (a direct upload's, its sender may not "
            "tag) counts as pending; one with any tag, or without lodge's stamp, stays") {
    Fixture f;
    auto s = f.open();
    auto admin = f.az_admin();
    const store::Metadata stamp{{store::meta::ledger, k_ours.ledger_uuid}, {store::meta::record, "42"}};
    auto place = [&](const std::string &name, const store::Metadata &m,
                     const std::map<std::string, std::string> &tags) {
      http::StringBody body(name);
      azure::WriteOptions o;
      o.metadata = m;
      o.tags = tags;
      REQUIRE(admin.put_blob(f.key(name), body, o).ok());
    };
    place("u/untagged", stamp, {});
    place("u/tagged", stamp, {{"team", "ci"}});
    place("u/unstamped", {{"owner", "another"}}, {});
    CHECK(remove_ours(*s, f.key("u/untagged"), store::DeleteGuard::pending_only).removed == 1);
    CHECK(s->head(f.key("u/untagged")).error().code == Errc::not_found);
    auto tagged = remove_ours(*s, f.key("u/tagged"), store::DeleteGuard::pending_only);
    CHECK(tagged.refused.has_value());
    CHECK(get_all(*s, f.key("u/tagged")) == "u/tagged");
    auto unstamped = remove_ours(*s, f.key("u/unstamped"), store::DeleteGuard::pending_only);
    CHECK(unstamped.kept.size() == 1);
    CHECK(get_all(*s, f.key("u/unstamped")) == "u/unstamped");
    // A missing blob is still success.
    CHECK(remove_ours(*s, f.key("u/untagged"), store::DeleteGuard::pending_only).removed == 0);
  }

  TEST_CASE(
      "a losing or abandoned staged upload leaves no uncommitted blocks after abort_staged / remove_owned") {
    Fixture f;
    auto s = f.open();
    auto admin = f.az_admin();
    std::vector<std::unique_ptr<Source>> parts;
    for (int i = 0; i < 3; ++i)
      parts.push_back(std::make_unique<Source>("block " + std::to_string(i)));
    auto stage = [&](const std::string &key) {
      auto h = s->begin_staged({key, "application/octet-stream", {}, {}});
      REQUIRE(h.ok());
      std::vector<store::Part> sent;
      for (int i = 0; i < 3; ++i) {
        auto p = s->put_part(key, h.value(), i + 1, parts[static_cast<size_t>(i)]->body(), 0);
        REQUIRE_MESSAGE(p.ok(), (p.ok() ? "" : p.error().message));
        sent.push_back(p.value());
      }
      auto blocks = admin.get_block_list(key, azure::BlockListType::uncommitted);
      REQUIRE(blocks.ok());
      CHECK(blocks->uncommitted.size() == 3);
      return std::make_pair(h.value(), sent);
    };
    auto gone = [&](const std::string &key) {
      auto blocks = admin.get_block_list(key, azure::BlockListType::all);
      if (blocks.ok()) {
        CHECK(blocks->uncommitted.empty());
        CHECK(blocks->committed.empty());
      } else {
        CHECK(blocks.error().code == Errc::not_found);
      }
      CHECK(s->head(key).error().code == Errc::not_found);
    };
    // Abandoned: abort_staged clears it, and list_staged saw it before.
    auto abandoned = stage(f.key("k/abandoned"));
    std::vector<std::string> listed;
    REQUIRE(s->list_staged(f.key("k/"), [&](const store::StagedUpload &u) {
               listed.push_back(u.key);
               CHECK(u.handle == abandoned.first);
               return true;
             }).ok());
    CHECK(listed == std::vector<std::string>{f.key("k/abandoned")});
    REQUIRE(s->abort_staged(f.key("k/abandoned"), abandoned.first).ok());
    gone(f.key("k/abandoned"));
    // Never committed, found by sweep: remove_owned (guarded) clears it.
    stage(f.key("k/swept"));
    CHECK(remove_ours(*s, f.key("k/swept"), store::DeleteGuard::pending_only).kept.empty());
    gone(f.key("k/swept"));
    // A loser: the name was taken first; its commit is refused and its 3 blocks stay on
    // the winner's blob until that blob is removed (never touched while it is someone's).
    Source winner("winner");
    REQUIRE(s->put(put_req(f.key("k/taken"), winner)).ok());
    auto loser = stage(f.key("k/taken"));
    auto lost = s->complete_staged({f.key("k/taken"), "application/octet-stream", {}, {}}, loser.first,
                                   loser.second, 0);
    REQUIRE_FALSE(lost.ok());
    CHECK(lost.error().code == Errc::precondition_failed);
    CHECK(get_all(*s, f.key("k/taken")) == "winner");
    REQUIRE(s->abort_staged(f.key("k/taken"), loser.first).ok());
    CHECK(get_all(*s, f.key("k/taken")) == "winner");
    CHECK(remove_ours(*s, f.key("k/taken"), store::DeleteGuard::pending_only).removed == 1);
    gone(f.key("k/taken"));
  }

  TEST_CASE("a block id carries the part's MD5; blocks of an earlier lodge (handle-NNNNNN) are listed as "
            "a staged upload, never continued, and cleared") {
    Fixture f;
    auto s = f.open();
    auto admin = f.az_admin();
    Source src("part one");
    const std::string key = f.key("ids/new");
    auto h = s->begin_staged({key, "application/octet-stream", {}, {}});
    REQUIRE(h.ok());
    auto p = s->put_part(key, h.value(), 1, src.body(), 0);
    REQUIRE(p.ok());
    auto blocks = admin.get_block_list(key, azure::BlockListType::uncommitted);
    REQUIRE(blocks.ok());
    REQUIRE(blocks->uncommitted.size() == 1);
    crypto::Md5 md5;
    md5.update(std::string_view("part one"));
    const auto d = md5.finish();
    const std::string md5_hex = util::hex_encode(d.data(), d.size());
    CHECK(util::base64_decode(blocks->uncommitted[0].name).value() == h.value() + "-000001-" + md5_hex);
    CHECK(p->etag == blocks->uncommitted[0].name);

    // The old form, as lodge staged blocks before: still a staged upload with its handle.
    const std::string old_key = f.key("ids/old"), old_handle = "00112233aabbccdd";
    for (int n = 1; n <= 2; ++n) {
      http::StringBody body("old " + std::to_string(n));
      REQUIRE(admin
                  .put_block(old_key, util::base64_encode(old_handle + "-00000" + std::to_string(n)), body,
                             crypto::md5_base64("old " + std::to_string(n)), 0)
                  .ok());
    }
    std::map<std::string, std::string> staged;
    REQUIRE(s->list_staged(f.key("ids/"), [&](const store::StagedUpload &u) {
               staged[u.key] = u.handle;
               return true;
             }).ok());
    CHECK(staged == std::map<std::string, std::string>{{key, h.value()}, {old_key, old_handle}});
    auto listed = s->list_parts(old_key, old_handle);
    REQUIRE_FALSE(listed.ok());
    CHECK(listed.error().code == Errc::not_found);
    REQUIRE(s->abort_staged(old_key, old_handle).ok());
    CHECK(admin.get_block_list(old_key, azure::BlockListType::all).error().code == Errc::not_found);
  }

  TEST_CASE("puts and staged commits are tagged state=pending; mark_committed makes it committed") {
    Fixture f;
    auto s = f.open();
    const auto az = f.az_config();
    Source src("tagged");
    REQUIRE(s->put(put_req(f.key("t/one"), src)).ok());
    CHECK(test::blob_tags(az, f.key("t/one")).value() ==
          std::map<std::string, std::string>{{"state", "pending"}});
    REQUIRE(s->mark_committed(f.key("t/one"), {}).ok());
    CHECK(test::blob_tags(az, f.key("t/one")).value() ==
          std::map<std::string, std::string>{{"state", "committed"}});
    const store::StagedRequest req{f.key("t/staged"), "text/plain", {{store::meta::record, "7"}}, {}};
    auto h = s->begin_staged(req);
    REQUIRE(h.ok());
    auto p = s->put_part(req.key, h.value(), 1, src.body(), 0);
    REQUIRE(p.ok());
    REQUIRE(s->complete_staged(req, h.value(), {p.value()}, 0).ok());
    CHECK(test::blob_tags(az, req.key).value() == std::map<std::string, std::string>{{"state", "pending"}});
    CHECK(s->head(req.key)->metadata[store::meta::record] == "7");
    CHECK(s->capabilities().guarded_delete);
    CHECK(s->capabilities().state_tags);
    // The marker lodge keeps for itself is never tagged pending (the backstop would expire it).
    REQUIRE(s->put_small(f.key(".lodge/marker"), "{}", "").ok());
    CHECK(test::blob_tags(az, f.key(".lodge/marker")).value().empty());
  }

  TEST_CASE("the backstop rule is Azure management-policy JSON lodge cannot apply itself") {
    Fixture f;
    auto s = f.open();
    auto rule = s->lifecycle_rule(3);
    REQUIRE(rule.ok());
    CHECK(rule->format == "azure-management-policy-json");
    CHECK_FALSE(rule->can_apply);
    auto doc = nlohmann::json::parse(rule->document);
    const auto &r = doc.at("rules").at(0);
    CHECK(
        r.at("definition").at("actions").at("baseBlob").at("delete").at("daysAfterModificationGreaterThan") ==
        3);
    CHECK(r.at("definition").at("filters").at("prefixMatch").at(0) == f.bucket + "/pre/");
    CHECK(r.at("definition").at("filters").at("blobIndexMatch").at(0).at("value") == "pending");
    CHECK(rule->apply_hint.find("az storage account management-policy create") != std::string::npos);
    CHECK_FALSE(s->apply_lifecycle(rule.value()).ok());
  }

  TEST_CASE("a presigned URL is a service SAS the service honours") {
    Fixture f;
    auto s = f.open();
    Source src("shared");
    REQUIRE(s->put(put_req(f.key("p/one"), src)).ok());
    auto url = s->presign_get(f.key("p/one"), 600);
    REQUIRE_MESSAGE(url.ok(), (url.ok() ? "" : url.error().message));
    CHECK(url->find("sig=") != std::string::npos);
    CHECK(url->find("sr=b") != std::string::npos);
    auto t = http::make_curl_transport({});
    http::Request req;
    req.method = "GET";
    req.url = url.value();
    auto r = t->perform(req);
    REQUIRE(r.ok());
    CHECK(r->status == 200);
    CHECK(r->body == "shared");
  }
}
