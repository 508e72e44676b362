#include "support.hpp"

#include <lodge/ops/inspect.hpp>
#include <lodge/store/object_options.hpp>
#include <sstream>

using namespace lodge;

TEST_CASE("media types table: comments, several extensions, the first line naming one wins, lowercase") {
  std::istringstream in("# comment\n"
                        "text/css\t\t\tcss # trailing comment\n"
                        "text/javascript  es js mjs\n"
                        "application/x-other js\n"
                        "Image/PNG PNG\n"
                        "notatype foo\n"
                        "\n");
  auto t = ops::parse_media_types(in);
  CHECK(t.at("css") == "text/css");
  CHECK(t.at("mjs") == "text/javascript");
  CHECK(t.at("js") == "text/javascript");
  CHECK(t.at("png") == "image/png");
  CHECK_FALSE(t.contains("foo"));
  CHECK_FALSE(t.contains("comment"));
}

TEST_CASE("content type: the extension's when the content agrees, the detected one otherwise") {
  const std::map<std::string, std::string> t{
      {"css", "text/css"},
      {"js", "text/javascript"},
      {"json", "application/json"},
      {"svg", "image/svg+xml"},
      {"bin", "application/octet-stream"},
      {"woff2", "font/woff2"},
      {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
      {"bmp", "image/bmp"},
      {"png", "image/png"}};
  CHECK(ops::content_type_for(t, "css", "text/plain") == "text/css");
  CHECK(ops::content_type_for(t, "js", "text/plain") == "text/javascript");
  CHECK(ops::content_type_for(t, "json", "text/plain") == "application/json");
  CHECK(ops::content_type_for(t, "svg", "text/xml") == "image/svg+xml");
  CHECK(ops::content_type_for(t, "css", "application/x-empty") == "text/css");
  CHECK(ops::content_type_for(t, "woff2", "application/octet-stream") == "font/woff2");
  CHECK(ops::content_type_for(t, "docx", "application/zip") == t.at("docx"));
  CHECK(ops::content_type_for(t, "bmp", "image/x-ms-bmp") == "image/bmp");
  // Text named as binary, binary named as text, one kind named as another: the bytes win.
  CHECK(ops::content_type_for(t, "bin", "text/plain") == "text/plain");
  CHECK(ops::content_type_for(t, "css", "image/png") == "image/png");
  CHECK(ops::content_type_for(t, "png", "application/pdf") == "application/pdf");
  CHECK(ops::content_type_for(t, "", "text/plain") == "text/plain");
  CHECK(ops::content_type_for(t, "unknown", "image/png") == "image/png");
}

TEST_CASE("object options: merge, canonical JSON and back, assignments") {
  store::ObjectOptions policy;
  policy.metadata = {{"a", "1"}, {"b", "2"}};
  policy.tags = {{"t", "p"}};
  policy.sse = "aws:kms";
  policy.sse_kms_key_id = "k1";
  store::ObjectOptions flags;
  flags.metadata = {{"b", "3"}};
  flags.sse = "AES256";
  policy.merge(flags);
  CHECK(policy.metadata == std::map<std::string, std::string>{{"a", "1"}, {"b", "3"}});
  CHECK(policy.sse == "AES256");
  CHECK(policy.sse_kms_key_id.empty()); // never a KMS key with AES256
  auto text = store::to_json(policy);
  CHECK(text == R"({"metadata":{"a":"1","b":"3"},"sse":"AES256","tags":{"t":"p"}})");
  auto back = store::from_json(text);
  CHECK(store::to_json(back) == text);
  CHECK(store::to_json(store::ObjectOptions{}).empty());
  CHECK(store::from_json("").plain());
  CHECK_THROWS_AS((void)store::from_json(R"({"tags": 3})"), LodgeError);
  auto kv = store::parse_assignment("k=v=w", "--tag");
  REQUIRE(kv);
  CHECK(kv->first == "k");
  CHECK(kv->second == "v=w");
  CHECK_FALSE(store::parse_assignment("=v", "--tag"));
  CHECK_FALSE(store::parse_assignment("k", "--tag"));
  CHECK(store::s3_tagging({{"a b", "x/y"}, {"c", ""}}) == "a%20b=x%2Fy&c=");
}

TEST_CASE("object options: what every store needs is checked, each problem named") {
  auto why = [](const store::ObjectOptions &o) {
    auto s = store::validate(o, "upload");
    return s ? std::string() : s.error().message;
  };
  store::ObjectOptions ok;
  ok.content_type = "text/css; charset=utf-8";
  ok.metadata = {{"build_id", "42"}};
  ok.tags = {{"team", "ops"}, {"path", "a/b c+d=e.f_g:h@i"}};
  ok.storage_class = "STANDARD_IA";
  ok.sse = "aws:kms";
  ok.sse_kms_key_id = "arn:aws:kms:us-east-1:1:key/abc";
  ok.cache_control = "max-age=60, public";
  CHECK(why(ok).empty());
  auto with = [&](auto change) {
    store::ObjectOptions o = ok;
    change(o);
    return why(o);
  };
  CHECK(with([](auto &o) { o.metadata = {{"Bad", "x"}}; }).find("lowercase letters") != std::string::npos);
  CHECK(with([](auto &o) { o.metadata = {{"a-b", "x"}}; }).find("lowercase letters") != std::string::npos);
  CHECK(with([](auto &o) { o.metadata = {{"lodgeowner", "x"}}; }).find("lodge's own") != std::string::npos);
  CHECK(with([](auto &o) { o.metadata = {{"k", "a\nb"}}; }).find("printable ASCII") != std::string::npos);
  CHECK(with([](auto &o) {
          o.metadata = {{"k", std::string(1100, 'x')}};
        }).find("at most 1024") != std::string::npos);
  CHECK(with([](auto &o) { o.tags = {{"aws:x", "1"}}; }).find("AWS's own") != std::string::npos);
  CHECK(with([](auto &o) { o.tags = {{"lodge-state", "1"}}; }).find("lodge's own") != std::string::npos);
  CHECK(with([](auto &o) { o.tags = {{"", "1"}}; }).find("tag key") != std::string::npos);
  CHECK(with([](auto &o) {
          o.tags = {{"k", std::string(257, 'v')}};
        }).find("tag value") != std::string::npos);
  CHECK(with([](auto &o) { o.sse = "aes256"; }).find("AES256 or aws:kms") != std::string::npos);
  CHECK(with([](auto &o) { o.sse = "AES256"; }).find("needs sse aws:kms") != std::string::npos);
  CHECK(with([](auto &o) { o.storage_class = "a b"; }).find("STANDARD_IA") != std::string::npos);
  CHECK(with([](auto &o) { o.content_type = "text"; }).find("type/subtype") != std::string::npos);
  CHECK(with([](auto &o) { o.content_type = "text/plain; x=\x01"; }).find("type/subtype") !=
        std::string::npos);
  CHECK(with([](auto &o) { o.cache_control = "a\r\nb"; }).find("printable ASCII") != std::string::npos);
  CHECK(why(ok).empty());
  CHECK(with([](auto &o) {
          for (int i = 0; i < 11; ++i)
            o.tags["k" + std::to_string(i)] = "v";
        }).find("at most 10") != std::string::npos);
}
