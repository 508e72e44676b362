// write_list_json: the same bytes as list_json's dump, for hostile strings and every field.
#include <doctest/doctest.h>
#include <lodge/ops/read/retrieve.hpp>
#include <nlohmann/json.hpp>
#include <random>

using namespace lodge;

namespace {

std::string dumped(const ledger::FileRecord &f) {
  return ops::list_json(f).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string written(const ledger::FileRecord &f) {
  std::string out;
  ops::write_list_json(out, f);
  return out;
}

// Bytes from a pool weighted toward what escaping and UTF-8 decoding get wrong.
std::string hostile(std::mt19937_64 &rnd) {
  static const std::vector<std::string> pieces = {"\"",
                                                  "\\",
                                                  "\b",
                                                  "\f",
                                                  "\n",
                                                  "\r",
                                                  "\t",
                                                  std::string(1, '\0'),
                                                  "\x01",
                                                  "\x1f",
                                                  "\x7f",
                                                  "/",
                                                  "a",
                                                  "Z",
                                                  "é",
                                                  "€",
                                                  "😀",
                                                  "\xC3",
                                                  "\xE2\x82",
                                                  "\xF0\x9F\x98",
                                                  "\x80",
                                                  "\xBF",
                                                  "\xC0\xAF",
                                                  "\xC1\x81",
                                                  "\xE0\x80\x80",
                                                  "\xE0\xA0\x80",
                                                  "\xED\xA0\x80",
                                                  "\xED\x9F\xBF",
                                                  "\xF4\x90\x80\x80",
                                                  "\xF4\x8F\xBF\xBF",
                                                  "\xF5",
                                                  "\xFF",
                                                  "\xF0\x80\x80\x80",
                                                  "\xF0\x90\x80\x80",
                                                  " "};
  std::string s;
  const auto n = rnd() % 12;
  for (size_t i = 0; i < n; ++i) {
    if (rnd() % 4 == 0)
      s += static_cast<char>(rnd() & 0xFF);
    else
      s += pieces[rnd() % pieces.size()];
  }
  return s;
}

} // namespace

TEST_CASE("write_list_json writes list_json's dump byte for byte") {
  std::mt19937_64 rnd(48);
  for (int k = 0; k < 20000; ++k) {
    ledger::FileRecord f;
    f.id = k % 3 == 0 ? INT64_MAX - k : static_cast<int64_t>(rnd() % 1000000);
    f.owner_id = hostile(rnd);
    f.original_name = hostile(rnd);
    f.relative_path = hostile(rnd);
    f.run_prefix = k % 5 == 0 ? "" : hostile(rnd);
    f.dedup_scope = k % 2 ? ledger::DedupScope::owner : ledger::DedupScope::none;
    f.object_key = hostile(rnd);
    if (k % 3 == 1) f.content_of = static_cast<int64_t>(rnd() >> 1);
    f.media_type = hostile(rnd);
    f.sha256 = k % 2 ? std::string(64, 'a') : hostile(rnd);
    f.size = k % 4 == 0 ? INT64_MAX : static_cast<int64_t>(rnd() % 100000);
    f.upload_status = static_cast<ledger::FileStatus>(k % 3);
    if (k % 3 == 2) f.failure_reason = hostile(rnd);
    f.is_deleted = k % 7 == 0;
    f.created_at = static_cast<int64_t>(rnd() % 4000000000000ULL);
    if (k % 2) f.activated_at = f.created_at + 5;
    if (k % 5 == 1) f.expires_at = f.created_at + 86400000;
    if (k % 3 == 0) f.content_type = hostile(rnd);
    if (k % 4 == 1) {
      nlohmann::json o{{"metadata", {{"x-" + std::to_string(k), hostile(rnd)}}},
                       {"cache_control", "no-cache"}};
      f.object_options = o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } else if (k % 4 == 2) {
      f.object_options = "{}";
    }
    const std::string want = dumped(f);
    const std::string got = written(f);
    REQUIRE_MESSAGE(got == want, "row ", k);
  }
}

TEST_CASE("write_list_json escapes as nlohmann: controls, quotes, and U+FFFD for invalid UTF-8") {
  ledger::FileRecord f;
  f.relative_path = std::string("a\"b\\c\x01\x1f\x7f\n\xC3(\xE2\x82\xF0\x9F\x98\x80\xFF");
  const std::string got = written(f);
  CHECK(got == dumped(f));
  CHECK(got.find(R"("path":"a\"b\\c\u0001\u001f)"
                 "\x7f"
                 R"(\n)"
                 "\xEF\xBF\xBD("
                 "\xEF\xBF\xBD\xF0\x9F\x98\x80\xEF\xBF\xBD\"") != std::string::npos);
}
