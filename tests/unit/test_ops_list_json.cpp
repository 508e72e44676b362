// write_list_json: the same bytes as list_json's dump, for hostile strings and every field.
#include <ctime>
#include <doctest/doctest.h>
#include <lodge/ops/read/list_json.hpp>
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

// A hostile object key without the bytes dump escapes (a key with an escape is not canonical).
std::string key(std::mt19937_64 &rnd) {
  std::string s = hostile(rnd);
  std::erase_if(s, [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == '"' || c == '\\'; });
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

namespace {

// ms of 00:00:00 UTC on that day (timegm: the C library's calendar, not list_json's).
int64_t day_start_ms(int year, int month, int day) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

void check_time(int64_t ms) {
  ledger::FileRecord f;
  f.created_at = ms;
  f.activated_at = ms;
  f.expires_at = ms;
  const std::string got = written(f);
  REQUIRE_MESSAGE(got == dumped(f), "ms ", ms);
}

} // namespace

TEST_CASE("write_list_json writes times as format_rfc3339_ms: day, month, year and range boundaries") {
  // Around the start of every year from 1970 to 9999 and of March (after a leap day or
  // not: the rules of 4, 100 and 400 years).
  for (int y = 1970; y <= 9999; ++y) {
    for (const int64_t at : {day_start_ms(y, 1, 1), day_start_ms(y, 3, 1)}) {
      check_time(at);
      if (at > 0) check_time(at - 1);
    }
  }
  // Every day boundary of a few years around 2000 and 2100.
  for (const int y : {1999, 2000, 2100}) {
    for (int64_t at = day_start_ms(y, 1, 1); at < day_start_ms(y + 1, 1, 1); at += int64_t{86400000}) {
      check_time(at);
      check_time(at - 1);
      check_time(at + 86399999 / 2);
    }
  }
  // The ends of the computed range and beyond it (util's own formatting).
  for (const int64_t at :
       {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{59999}, int64_t{3599999},
        int64_t{86399999}, int64_t{253402300799999}, int64_t{253402300800000}, int64_t{-1}, int64_t{-1000},
        int64_t{-86400001}, int64_t{-62135596800000}, int64_t{-62135596800001}})
    check_time(at);
  std::mt19937_64 rnd(4805);
  for (int k = 0; k < 20000; ++k)
    check_time(static_cast<int64_t>(rnd() % 253402300800000ULL));
}

TEST_CASE("write_list_json's object_options: copied when canonical, else parsed and dumped as list_json") {
  const std::vector<std::pair<std::string, bool>> texts = {
      {R"({})", true},
      {R"({"metadata":{"ci_ref":"main","commit":"c0"}})", true},
      {R"({"a":[1,-2,0,true,false,null,"x",[],{}],"b":{"c":"\"\\\b\f\n\r\t\u0000\u001f"}})", true},
      {"{\"k\":\"\x7f\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}", true},
      {R"({"m":-999999999999999999,"n":999999999999999999})", true},
      {R"("just a string")", true},
      {R"(7)", true},
      {R"({"b":1,"a":2})", false},              // keys out of order
      {R"({"a":1,"a":2})", false},              // a duplicate key
      {R"({"a": 1})", false},                   // whitespace
      {R"( {"a":1})", false},                   // whitespace
      {R"({"a":1} )", false},                   // whitespace
      {R"({"a":"\/"})", false},                 // an escape dump does not write
      {R"({"a":"\u00e9"})", false},             // an escape dump does not write
      {R"({"a":"\u001F"})", false},             // uppercase hex
      {R"({"a":"\u000a"})", false},             // \n has a short form
      {R"({"a":"\ud83d\ude00"})", false},       // a surrogate pair
      {R"({"\u0001":1})", false},               // an escape in a key
      {R"({"a":1.0})", false},                  // a float
      {R"({"a":1e3})", false},                  // a float
      {R"({"a":-0})", false},                   // dumped as 0
      {R"({"a":1000000000000000000})", false},  // 19 digits
      {R"({"a":18446744073709551616})", false}, // a float once parsed
      {R"([1,2,3])", true},
      {R"({"Z":1,"a":2,"\u00e9":3})", false},
      {"{\"Z\":1,\"a\":2,\"\xC3\xA9\":3}", true}, // byte order: 'Z' < 'a' < 0xC3
  };
  // (Not a structured binding: clang 14 cannot capture one, and CAPTURE captures.)
  for (const auto &entry : texts) {
    const std::string &text = entry.first;
    const bool canonical = entry.second;
    CAPTURE(text);
    CHECK(ops::is_canonical_json(text) == canonical);
    ledger::FileRecord f;
    f.object_options = text;
    CHECK(written(f) == dumped(f));
  }
  // Not JSON, or not well-formed UTF-8: not canonical; both throw nlohmann's parse error.
  for (const std::string bad : {R"({"a":)", R"({"a":01})", R"({"a":1,})", "{\"a\":\"\xC3\"}",
                                "{\"a\":\"\x01\"}", R"({"a":tru})", R"({a:1})", "[", "\"\\u00"}) {
    CAPTURE(bad);
    CHECK_FALSE(ops::is_canonical_json(bad));
    ledger::FileRecord f;
    f.object_options = bad;
    CHECK_THROWS_AS((void)dumped(f), nlohmann::json::parse_error);
    CHECK_THROWS_AS((void)written(f), nlohmann::json::parse_error);
  }
}

TEST_CASE("is_canonical_json: what it accepts, nlohmann's parse and dump write back unchanged") {
  // Dumps of random objects (canonical: accepted) and their one-byte mutations (accepted
  // only when still canonical, which parse and dump then confirm).
  std::mt19937_64 rnd(4806);
  const std::string alphabet = "{}[]\":,\\ 0123456789-.eEtrufalsn\x01\x7f\xC3\xA9";
  int accepted_mutants = 0;
  for (int k = 0; k < 3000; ++k) {
    nlohmann::json j = nlohmann::json::object();
    const auto n = rnd() % 4;
    for (size_t i = 0; i < n; ++i) {
      nlohmann::json v;
      switch (rnd() % 4) {
      case 0:
        v = hostile(rnd);
        break;
      case 1:
        v = static_cast<int64_t>(rnd() % 2000000) - 1000000;
        break;
      case 2:
        v = nlohmann::json::array({hostile(rnd), nullptr, rnd() % 2 == 0});
        break;
      default:
        v = nlohmann::json{{key(rnd), hostile(rnd)}};
      }
      j[std::string(1, static_cast<char>('a' + rnd() % 26))] = v;
    }
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    CAPTURE(text);
    CHECK(ops::is_canonical_json(text));
    std::string mutant = text;
    const size_t at = rnd() % mutant.size();
    switch (rnd() % 3) {
    case 0:
      mutant[at] = alphabet[rnd() % alphabet.size()];
      break;
    case 1:
      mutant.insert(at, 1, alphabet[rnd() % alphabet.size()]);
      break;
    default:
      mutant.erase(at, 1);
    }
    CAPTURE(mutant);
    if (!ops::is_canonical_json(mutant)) continue;
    ++accepted_mutants;
    CHECK(nlohmann::json::parse(mutant).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) ==
          mutant);
  }
  CHECK(accepted_mutants > 100);
}
