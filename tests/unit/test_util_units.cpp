#include "support.hpp"
#include "support/decode.hpp"

#include <lodge/error.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/units.hpp>

using namespace lodge;

TEST_CASE("exact sizes and durations read back as the same value") {
  CHECK(util::format_size_exact(10ULL << 20) == "10MiB");
  CHECK(util::format_size_exact(5ULL << 30) == "5GiB");
  CHECK(util::format_size_exact(1536) == "1536B");
  CHECK(util::format_size_exact(1) == "1B");
  CHECK(util::format_duration_exact(90'000) == "90s");
  CHECK(util::format_duration_exact(120'000) == "2m");
  CHECK(util::format_duration_exact(1500) == "1500ms");
  CHECK(util::format_duration_exact(86'400'000) == "1d");
  CHECK(util::format_duration_exact(3'600'000) == "1h");
  for (uint64_t v : {1ULL, 1000ULL, 1024ULL, 1536ULL, 6ULL << 20, (5ULL << 30) + 1, 1ULL << 40, 3ULL << 41})
    CHECK(util::parse_size(util::format_size_exact(v)) == v);
  for (int64_t v : {int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{90'000}, int64_t{5'400'000},
                    int64_t{86'400'000} * 30, int64_t{1'234'567}})
    CHECK(util::parse_duration_ms(util::format_duration_exact(v)) == v);
}

TEST_CASE("one size grammar: a number, a binary unit in any spelling or none, and a bare number is bytes") {
  CHECK(util::parse_size("10MiB") == 10ULL << 20);
  CHECK(util::parse_size("5GiB") == 5ULL << 30);
  CHECK(util::parse_size("512") == 512U);
  CHECK(util::parse_size("0") == 0U);
  CHECK(util::parse_size("100B") == 100U);
  CHECK(util::parse_size("100b") == 100U);
  // --part-size 64M was refused while --min-size 10M was accepted: every spelling, every flag.
  for (const char *s :
       {"64M", "64m", "64Mi", "64mi", "64MiB", "64mib", "64MIB", "67108864", "65536K", "0.0625G", "0.0625g"})
    CHECK_MESSAGE(util::parse_size(s) == 64ULL << 20, std::string(s));
  CHECK(util::parse_size("1.5G") == 3ULL << 29);
  CHECK(util::parse_size("1.5K") == 1536U);
  CHECK(util::parse_size("1.1B") == 1U); // a fraction of a byte is dropped
  CHECK(util::parse_size("1T") == 1ULL << 40);
  CHECK(util::parse_size("1P") == 1ULL << 50);
  CHECK(util::parse_size("18446744073709551615") == UINT64_MAX);
  // SI units are refused, with what to write instead: one meaning for every size.
  for (const char *s : {"1KB",
                        "1GB",
                        "16mb",
                        "1g b",
                        "",
                        "M",
                        "iB",
                        "B",
                        "-1",
                        "+1",
                        "-1B",
                        "1e3",
                        "inf",
                        "nan",
                        "1.",
                        ".5",
                        "1.2.3",
                        "10 MiB",
                        " 10M",
                        "10M ",
                        "10X",
                        "10MiBs",
                        "0x10",
                        "1_000",
                        "18446744073709551616",
                        "16384P",
                        "99999999999999999999TiB"})
    CHECK_MESSAGE(!util::parse_size(s), std::string(s));
  CHECK(util::size_unit_hint("1GB") ==
        "sizes are binary: write 1GiB (KiB, MiB, GiB, TiB are powers of 1024), or the exact number of bytes");
  CHECK(util::size_unit_hint("16mb").value_or("").find("write 16MiB") != std::string::npos);
  CHECK_FALSE(util::size_unit_hint("10parsecs"));
  CHECK_FALSE(util::size_unit_hint("10M"));
}

TEST_CASE("one duration grammar: numbers each with a unit ms s m h d w M y; 0 alone is zero") {
  CHECK(util::parse_duration_ms("500ms") == 500);
  CHECK(util::parse_duration_ms("90s") == 90'000);
  CHECK(util::parse_duration_ms("15m") == 900'000);
  CHECK(util::parse_duration_ms("2h") == 7'200'000);
  CHECK(util::parse_duration_ms("1d") == 86'400'000);
  // 2w worked for --keep-within and --since, not for --expire-after or --lease.
  CHECK(util::parse_duration_ms("2w") == 14 * 86'400'000LL);
  CHECK(util::parse_duration_ms("1M") == 30 * 86'400'000LL);
  CHECK(util::parse_duration_ms("1y") == 365 * 86'400'000LL);
  CHECK(util::parse_duration_ms("1h30m") == 5'400'000);
  CHECK(util::parse_duration_ms("1w2d") == 9 * 86'400'000LL);
  CHECK(util::parse_duration_ms("1.5h") == 5'400'000);
  CHECK(util::parse_duration_ms("1.5s") == 1'500);
  CHECK(util::parse_duration_ms("0.0005s") == 0); // a fraction of a millisecond is dropped
  CHECK(util::parse_duration_ms("0") == 0);
  CHECK(util::parse_duration_ms("0s") == 0);
  // A number without its unit is no duration (seconds? minutes?), nor is anything else.
  for (const char *s : {"",           "15",
                        "1700000000", "1.5",
                        "1h30",       "s",
                        "ms",         "1H",
                        "2W",         "1hh",
                        "1h 30m",     " 1h",
                        "1h ",        "-1s",
                        "+1s",        "1e3s",
                        "inf",        "1.s",
                        ".5s",        "1x",
                        "300000000y", "99999999999999999999s"})
    CHECK_MESSAGE(!util::parse_duration_ms(s), std::string(s));
}

TEST_CASE("terminal escaping neutralises control and bidi characters") {
  CHECK(util::escape_for_terminal("plain.pdf") == "plain.pdf");
  CHECK(util::escape_for_terminal("a\x1b[31mb") == "a\\x1B[31mb");
  CHECK(util::escape_for_terminal("evil\xE2\x80\xAEpdf.exe") == "evil\\u{202E}pdf.exe");
  CHECK(util::escape_for_terminal("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(util::escape_for_terminal("bad\xFF") == "bad\\xFF");
}

TEST_CASE("hex and base64 round-trip") {
  CHECK(util::hex_encode(std::string("\x01\xab", 2)) == "01ab");
  CHECK(util::hex_decode("01AB") == std::string("\x01\xab", 2));
  CHECK_FALSE(util::hex_decode("0g"));
  for (std::string s : {"", "a", "ab", "abc", "abcd"})
    CHECK(util::base64_decode(util::base64_encode(s)) == s);
  CHECK(util::base64_encode("hello") == "aGVsbG8=");
}

TEST_CASE("every error code has a distinct UPPER_SNAKE name and round-trips") {
  for (const auto &e : all_errcs()) {
    CHECK(test::errc_from_name(e.name) == e.code);
    CHECK(&errc_info(e.code) == &e);
    for (char c : e.name)
      CHECK(((c >= 'A' && c <= 'Z') || c == '_'));
  }
  CHECK(errc_info(Errc::quota_exceeded).exit_code == 1);
  CHECK(errc_info(Errc::usage).exit_code == 2);
  CHECK(errc_info(Errc::ledger_unusable).exit_code == 3);
  CHECK(errc_info(Errc::storage_unavailable).exit_code == 4);
  CHECK(errc_info(Errc::duplicate).exit_code == 0);
}

TEST_CASE("secrets are redacted from log lines") {
  auto s =
      util::log::redact("GET /?X-Amz-Signature=abcdef0123&x=1\nAuthorization: AWS4-HMAC-SHA256 "
                        "Credential=AKID/x, Signature=0123456789abcdef0123\nx-amz-security-token: SECRET");
  CHECK(s.find("abcdef0123") == std::string::npos);
  CHECK(s.find("AKID") == std::string::npos);
  CHECK(s.find("SECRET") == std::string::npos);
  CHECK(s.find("x=1") != std::string::npos);
}

#ifdef LODGE_WITH_FAILPOINTS
TEST_CASE("failpoint specs: unknown names and bad actions are usage errors") {
  auto configure = [](const char *spec) { return [spec] { failpoint::configure(spec, ""); }; };
  CHECK(test::throws_errc(configure("upload.after_reserv=crash"), Errc::usage,
                          "unknown failpoint 'upload.after_reserv'"));
  CHECK(test::throws_errc(configure("store.put=explode"), Errc::usage, "bad action 'explode' for store.put"));
  CHECK(test::throws_errc(configure("store.put"), Errc::usage, "'store.put' is not name=action"));
  failpoint::configure("store.put=error; store.delete=sleep:1", "");
  CHECK(failpoint::hit("store.put"));
  CHECK_FALSE(failpoint::hit("store.delete"));
  CHECK_FALSE(failpoint::hit("store.head"));
  failpoint::configure("", "");
  CHECK_FALSE(failpoint::hit("store.put"));
}

TEST_CASE("every failpoint accepts exactly the actions its table line declares") {
  const auto points = failpoint::table();
  REQUIRE(!points.empty());
  for (const auto &p : points) {
    std::string name(p.name);
    INFO("failpoint ", name);
    // crash, sleep and pause have a meaning everywhere.
    CHECK((p.actions & failpoint::k_universal) == failpoint::k_universal);
    // A point that takes error says what the site does then; one that refuses it says nothing.
    CHECK(((p.actions & failpoint::error) != 0) == !p.on_error.empty());
    for (const char *action : {"crash", "sleep:1", "pause:/nonexistent"})
      CHECK_NOTHROW(failpoint::configure(name + "=" + action, ""));
    if (p.actions & failpoint::error)
      CHECK_NOTHROW(failpoint::configure(name + "=error", ""));
    else
      CHECK(test::throws_errc([&] { failpoint::configure(name + "=error", ""); }, Errc::usage,
                              name + "=error: " + name + " does not take error"));
    size_t same = 0;
    for (const auto &q : points)
      same += q.name == p.name ? 1 : 0;
    CHECK(same == 1);
  }
  failpoint::configure("", "");
}

TEST_CASE("the failpoints the crash and recovery tests use are all there") {
  for (const char *name :
       {"upload.after_reserve", "upload.after_put", "upload.confirm", "upload.mark_failed",
        "sweep.after_claim", "sweep.after_delete", "repair.before_commit", "store.put", "store.delete"}) {
    INFO(name);
    CHECK_NOTHROW(failpoint::configure(std::string(name) + "=crash", ""));
  }
  failpoint::configure("", "");
}
#else
TEST_CASE("a build without failpoints refuses every spec instead of testing nothing") {
  CHECK(test::throws_errc([] { failpoint::configure("store.put=error", ""); }, Errc::usage,
                          "built without failpoints"));
  CHECK(test::throws_errc([] { failpoint::configure("no.such=crash", ""); }, Errc::usage,
                          "built without failpoints"));
  CHECK_NOTHROW(failpoint::configure("", ""));
  CHECK_FALSE(failpoint::hit("store.put"));
}
#endif

TEST_CASE("unsafe path segments are named; plain ones pass") {
  CHECK(util::unsafe_path_reason("a/b/c.d") == std::nullopt);
  CHECK(util::unsafe_path_reason("caf\xC3\xA9/x y+z") == std::nullopt);
  CHECK(util::unsafe_path_reason("...") == std::nullopt);
  CHECK(util::unsafe_path_reason("a/../b") == "a '..' segment");
  CHECK(util::unsafe_path_reason("./b") == "a '.' segment");
  CHECK(util::unsafe_path_reason("a//b")->find("empty segment") != std::string::npos);
  CHECK(util::unsafe_path_reason("")->find("empty segment") != std::string::npos);
  CHECK(util::unsafe_path_reason("%2e%2e")->find("'%'") != std::string::npos);
  CHECK(util::unsafe_path_reason("a\\b") == "a backslash");
  CHECK(util::unsafe_path_reason("a\nb")->find("control") != std::string::npos);
  CHECK(util::unsafe_path_reason("a\xC2\x85"
                                 "b")
            ->find("control") != std::string::npos);
  CHECK(util::unsafe_path_reason("a\xE2\x80\xAE"
                                 "b")
            ->find("control") != std::string::npos);
  CHECK(util::unsafe_path_reason("a\xFF") == "invalid UTF-8");
  CHECK(util::unsafe_path_reason("\xEF\xBC\x8E\xEF\xBC\x8E")->find("U+FF0E") != std::string::npos);
  CHECK(util::has_dot_segment("p/../x"));
  CHECK(util::has_dot_segment("./x"));
  CHECK(util::has_dot_segment("x/."));
  CHECK_FALSE(util::has_dot_segment("p/.x/..y/x."));
}

TEST_CASE("percent-encoding keeps unreserved bytes (and '/' when asked) and round-trips any bytes") {
  CHECK(util::percent_encode("a-b_c.d~e/f g", true) == "a-b_c.d~e/f%20g");
  CHECK(util::percent_encode("a/b", false) == "a%2Fb");
  std::string any = "r\xC3\xA9sum\xC3\xA9 100%+=&:\x01\xFF/x";
  auto enc = util::percent_encode(any, true);
  for (char c : enc)
    CHECK((c > 0x20 && c < 0x7F));
  CHECK(test::percent_decode(enc) == any);
  CHECK(test::percent_decode("%e2%82%AC") == std::string("\xE2\x82\xAC"));
  CHECK_FALSE(test::percent_decode("50%").has_value());
  CHECK_FALSE(test::percent_decode("%4").has_value());
  CHECK_FALSE(test::percent_decode("%zz").has_value());
}
