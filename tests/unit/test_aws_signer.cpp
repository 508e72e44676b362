#include "support.hpp"
#include "support/decode.hpp"

#include <filesystem>
#include <lodge/aws/signer.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;
namespace fs = std::filesystem;

namespace {
struct Vector {
  std::string name;
  aws::SignInput input;
  std::string body;
  nlohmann::json context;
};

std::string strip_trailing_newlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s;
}

Vector load(const fs::path &dir) {
  Vector v;
  v.name = dir.filename().string();
  v.context = nlohmann::json::parse(test::read_file((dir / "context.json").string()));
  std::string req = test::read_file((dir / "request.txt").string());
  auto blank = req.find("\n\n");
  std::string head = blank == std::string::npos ? req : req.substr(0, blank);
  v.body = blank == std::string::npos ? "" : req.substr(blank + 2);
  auto lines = util::split(head, '\n');
  const std::string &first = lines.at(0);
  auto sp = first.find(' ');
  auto proto = first.rfind(" HTTP/");
  v.input.method = first.substr(0, sp);
  std::string target = first.substr(sp + 1, proto - sp - 1);
  auto q = target.find('?');
  v.input.raw_path = target.substr(0, q);
  if (q != std::string::npos) {
    for (const auto &kv : util::split(target.substr(q + 1), '&')) {
      auto eq = kv.find('=');
      v.input.raw_query.emplace_back(test::uri_decode(kv.substr(0, eq)),
                                     eq == std::string::npos ? "" : test::uri_decode(kv.substr(eq + 1)));
    }
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto &line = lines[i];
    if (line.empty()) continue;
    if (line[0] == ' ' || line[0] == '\t') {
      v.input.headers.back().second += "\n" + line; // a continuation line
      continue;
    }
    auto colon = line.find(':');
    v.input.headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  v.input.payload_hash = crypto::sha256_hex(v.body);
  return v;
}

aws::Credentials creds(const nlohmann::json &ctx) {
  aws::Credentials c;
  c.access_key_id = ctx["credentials"]["access_key_id"];
  c.secret_access_key = ctx["credentials"]["secret_access_key"];
  if (ctx["credentials"].contains("token")) c.session_token = ctx["credentials"]["token"];
  return c;
}

int64_t epoch_ms(const std::string &iso) {
  std::tm tm{};
  strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

// S3 never normalizes paths: the *-normalized cases describe other services.
std::vector<fs::path> s3_cases() {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(std::string(LODGE_TEST_DATA) + "/sigv4")) {
    if (!e.is_directory()) continue;
    auto name = e.path().filename().string();
    if (name.size() > 11 && name.substr(name.size() - 11) == "-normalized") continue;
    out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}
} // namespace

TEST_CASE("SigV4 header signing matches every applicable published vector") {
  auto cases = s3_cases();
  CHECK(cases.size() >= 25);
  for (const auto &dir : cases) {
    auto v = load(dir);
    CAPTURE(v.name);
    auto c = creds(v.context);
    int64_t now = epoch_ms(v.context["timestamp"]);
    auto in = v.input;
    in.headers.emplace_back("X-Amz-Date", aws::amz_date(now));
    bool omit_token = v.context.value("omit_session_token", false);
    if (!c.session_token.empty() && !omit_token)
      in.headers.emplace_back("X-Amz-Security-Token", c.session_token);
    if (v.context.value("sign_body", false)) in.headers.emplace_back("X-Amz-Content-Sha256", in.payload_hash);
    auto s = aws::sign_header(in, c, v.context["region"].get<std::string>(),
                              v.context["service"].get<std::string>(), now);
    CHECK(s.canonical_request ==
          strip_trailing_newlines(test::read_file((dir / "header-canonical-request.txt").string())));
    CHECK(s.string_to_sign ==
          strip_trailing_newlines(test::read_file((dir / "header-string-to-sign.txt").string())));
    auto expected_sig = strip_trailing_newlines(test::read_file((dir / "header-signature.txt").string()));
    CHECK(s.authorization.substr(s.authorization.size() - 64) == expected_sig);
    auto signed_req = test::read_file((dir / "header-signed-request.txt").string());
    CHECK(signed_req.find("Authorization:" + s.authorization) != std::string::npos);
  }
}

TEST_CASE("SigV4 query presigning matches every applicable published vector") {
  for (const auto &dir : s3_cases()) {
    auto v = load(dir);
    CAPTURE(v.name);
    auto c = creds(v.context);
    int64_t now = epoch_ms(v.context["timestamp"]);
    bool omit_token = v.context.value("omit_session_token", false);
    aws::Signed dbg;
    auto q = aws::presign_query(v.input, c, v.context["region"].get<std::string>(),
                                v.context["service"].get<std::string>(), now,
                                v.context["expiration_in_seconds"].get<int64_t>(), !omit_token, &dbg);
    CHECK(dbg.canonical_request ==
          strip_trailing_newlines(test::read_file((dir / "query-canonical-request.txt").string())));
    CHECK(dbg.string_to_sign ==
          strip_trailing_newlines(test::read_file((dir / "query-string-to-sign.txt").string())));
    auto expected_sig = strip_trailing_newlines(test::read_file((dir / "query-signature.txt").string()));
    CHECK(q.substr(q.size() - 64) == expected_sig);
  }
}

TEST_CASE("S3 object keys are encoded once, slashes kept, never normalized") {
  CHECK(aws::canonical_uri("/bucket/a b/c+d=e&f:g%h~i/j") == "/bucket/a%20b/c%2Bd%3De%26f%3Ag%25h~i/j");
  CHECK(aws::canonical_uri("/bucket/caf\xC3\xA9/./x/../y//z") == "/bucket/caf%C3%A9/./x/../y//z");
  CHECK(aws::canonical_query({{"prefix", "dir/"}, {"list-type", "2"}, {"continuation-token", "a+b="}}) ==
        "continuation-token=a%2Bb%3D&list-type=2&prefix=dir%2F");
  CHECK(test::uri_decode("%E1%88%B4+x%zz") == "\xE1\x88\xB4+x%zz");
}

TEST_CASE("the signing key cache derives once per day and scope") {
  aws::SigningKeyCache cache;
  CHECK(cache.derivations() == 0);
  auto a = cache.get("secret", "20150830", "us-east-1", "s3");
  CHECK(a == aws::signing_key("secret", "20150830", "us-east-1", "s3"));
  for (int i = 0; i < 3; ++i)
    CHECK(cache.get("secret", "20150830", "us-east-1", "s3") == a);
  CHECK(cache.derivations() == 1); // the same day and scope: derived once
  CHECK(cache.get("secret", "20150831", "us-east-1", "s3") ==
        aws::signing_key("secret", "20150831", "us-east-1", "s3"));
  CHECK(cache.derivations() == 2); // a new day: derived again
  CHECK(cache.get("other", "20150831", "us-east-1", "s3") !=
        aws::signing_key("secret", "20150831", "us-east-1", "s3"));
  CHECK(cache.derivations() == 3); // another secret: never served the old key
}

TEST_CASE("signing many requests on one day derives the key once") {
  aws::SigningKeyCache cache;
  aws::Credentials c;
  c.access_key_id = "AKIDEXAMPLE";
  c.secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  aws::SignInput in;
  in.method = "GET";
  in.raw_path = "/";
  in.headers = {{"host", "example.amazonaws.com"}, {"x-amz-date", "20150830T123600Z"}};
  in.payload_hash = "UNSIGNED-PAYLOAD";
  const int64_t t = 1440938160000; // 2015-08-30T12:36:00Z
  auto first = aws::sign_header(in, c, "us-east-1", "s3", t, &cache);
  for (int i = 1; i < 10; ++i)
    CHECK(aws::sign_header(in, c, "us-east-1", "s3", t + i * 60'000, &cache).authorization.size() ==
          first.authorization.size());
  CHECK(cache.derivations() == 1);
  // The cached key signs exactly as a freshly derived one.
  CHECK(first.authorization == aws::sign_header(in, c, "us-east-1", "s3", t).authorization);
}
