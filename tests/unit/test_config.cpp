#include "support.hpp"

#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <nlohmann/json.hpp>

using namespace lodge;

namespace {
config::ConfigInputs inputs_with(const test::TempDir &dir, const std::string &json) {
  config::ConfigInputs in;
  test::write_file(dir.file("config.json"), json);
  in.config_flag = dir.file("config.json");
  in.env["HOME"] = dir.path().string();
  return in;
}

// A store key's value as `lodge config` shows it.
std::string shown(const config::Config &c, const char *key) {
  return config::to_json(c)[key].get<std::string>();
}

std::string error_of(const config::ConfigInputs &in) {
  try {
    (void)config::load(in);
  } catch (const LodgeError &e) {
    CHECK(e.error().code == Errc::config_invalid);
    CHECK(e.error().exit_code() == 2);
    return e.error().message;
  }
  return "(no error)";
}
} // namespace

TEST_CASE("the design's example configuration parses") {
  test::TempDir dir;
  auto in = inputs_with(dir, R"({
    "ledger": "/var/lib/lodge/ledger.db", "store": "s3://artifacts/lodge",
    "endpoint": "http://127.0.0.1:9000", "region": "us-east-1", "default_owner": "ci",
    "policies": {
      "default": { "max_size": "5GiB", "deadline": "15m", "grace": "5m" },
      "resume": { "max_size": "10MiB", "extensions": ["pdf", "doc", "docx"],
                  "media_types": ["application/pdf"], "max_files": 5, "deadline": "2m", "grace": "1m" } },
    "sweep": { "lease": "2m", "max_retries": 8, "backoff_base": "30s", "backoff_max": "1h" } })");
  auto c = config::load(in);
  CHECK(c.ledger == "/var/lib/lodge/ledger.db");
  CHECK(c.default_owner == "ci");
  const auto &r = c.policy("resume");
  CHECK(r.max_size == 10ULL << 20);
  CHECK(r.max_files == 5);
  CHECK(r.deadline_ms == 120'000);
  CHECK(r.stall_ms == 120'000); // the default
  CHECK(r.extensions == std::vector<std::string>{"pdf", "doc", "docx"});
  CHECK(c.sweep.lease_ms == 120'000);
  CHECK_THROWS_AS((void)c.policy("nope"), LodgeError);
}

TEST_CASE("precedence: flags over environment over file over defaults") {
  test::TempDir dir;
  auto in =
      inputs_with(dir, R"({"ledger": "/from/file.db", "region": "eu-west-1", "default_owner": "file"})");
  auto c = config::load(in);
  CHECK(c.ledger == "/from/file.db");
  CHECK(shown(c, "region") == "eu-west-1");
  CHECK(c.store.rfind("file://" + dir.path().string(), 0) == 0); // default under $HOME

  in.env["LODGE_DB"] = "/from/env.db";
  in.env["AWS_REGION"] = "ap-south-1";
  in.env["LODGE_OWNER"] = "env";
  c = config::load(in);
  CHECK(c.ledger == "/from/env.db");
  CHECK(shown(c, "region") == "ap-south-1");
  CHECK(c.default_owner == "env");

  in.flags["ledger"] = "/from/flag.db";
  in.flags["owner"] = "flag";
  c = config::load(in);
  CHECK(c.ledger == "/from/flag.db");
  CHECK(c.default_owner == "flag");
  CHECK(shown(c, "region") == "ap-south-1");
}

TEST_CASE("LODGE_CONFIG names the file when --config is absent; a missing explicit file is an error") {
  test::TempDir dir;
  test::write_file(dir.file("c.json"), R"({"region": "x-1"})");
  config::ConfigInputs in;
  in.env["HOME"] = dir.path().string();
  in.env["LODGE_CONFIG"] = dir.file("c.json");
  CHECK(shown(config::load(in), "region") == "x-1");
  in.config_flag = dir.file("missing.json");
  CHECK(error_of(in).find("missing.json") != std::string::npos);
}

TEST_CASE("a policy's stall: a duration (not zero), printed by lodge config") {
  test::TempDir dir;
  auto c = config::load(inputs_with(dir, R"({"policies": {"slow": {"deadline": "4s", "stall": "1500ms"}}})"));
  CHECK(c.policy("slow").stall_ms == 1'500);
  CHECK(c.policy("slow").deadline_ms == 4'000);
  CHECK(config::to_json(c)["policies"]["slow"]["stall"] == "1500ms");
  CHECK(config::to_json(c)["policies"]["slow"]["deadline"] == "4s");
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"stall": "0s"}}})")) ==
        "policies.p.stall: '0s' is too short (more than 0)");
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"stall": "never"}}})"))
            .rfind("policies.p.stall: expected a duration", 0) == 0);
}

TEST_CASE("each validation error names its key path") {
  test::TempDir dir;
  CHECK(error_of(inputs_with(dir, R"({"policies": {"resume": {"max_size": "10 megs"}}})")) ==
        "policies.resume.max_size: expected a size like 10MiB, got '10 megs'");
  CHECK(error_of(inputs_with(dir, R"({"policies": {"resume": {"deadline": "soon"}}})"))
            .rfind("policies.resume.deadline: expected a duration", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"polices": {}})")).rfind("polices: unknown key", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"max_file": 3}}})"))
            .rfind("policies.p.max_file: unknown key", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"max_files": -1}}})"))
            .rfind("policies.p.max_files:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"extensions": "pdf"}}})"))
            .rfind("policies.p.extensions:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"sweep": {"max_retries": "8"}})")).rfind("sweep.max_retries:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"sweep": {"leese": "1m"}})")).rfind("sweep.leese: unknown key", 0) ==
        0);
  CHECK(error_of(inputs_with(dir, R"({"default_owner": "../etc"})")).rfind("default_owner:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"store": "ftp://x"})")).rfind("store:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"part_size": "1MiB"})")).rfind("part_size:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"part_concurrency": 0})")).rfind("part_concurrency:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"([1, 2])")).find("expected a JSON object") != std::string::npos);
  CHECK(error_of(inputs_with(dir, R"({"ledger": )")).find("not valid JSON") != std::string::npos);
  // Found by fuzzing: a number too large for a double is a parse error too, not a crash.
  CHECK(error_of(inputs_with(dir, R"({"jobs": 3e388})")).find("not valid JSON") != std::string::npos);
}

TEST_CASE("a policy named in the file inherits defaults for what it leaves out") {
  test::TempDir dir;
  auto c = config::load(inputs_with(dir, R"({"policies": {"small": {"max_files": 2}}})"));
  CHECK(c.policy("small").max_size == 5ULL << 30);
  CHECK(c.policy("small").deadline_ms == 15 * 60'000);
  CHECK(c.policy("default").max_files == std::nullopt);
}

TEST_CASE("a store prefix or directory that a server would rewrite is refused, naming the URL") {
  test::TempDir dir;
  for (std::string url :
       {"s3://held/../evil", "s3://held/a/../p", "s3://held/./p", "s3://held/p/..", "s3://held/a//b",
        "s3://held//p", "s3://held/p//", "s3://held/%2e%2e/p", "s3://held/a%2Fb", "s3://held/a\\b",
        "s3://held/a\x01"
        "b",
        "s3://held/a\xFF"
        "b",
        "s3://held/\xEF\xBC\x8E\xEF\xBC\x8E/p", "file:///srv/../evil", "file:///srv/./s", "file:///srv//s",
        "file:///srv/%2e%2e", "file:////srv"}) {
    CAPTURE(url);
    config::ConfigInputs in;
    in.env["HOME"] = dir.path().string();
    in.flags["store"] = url;
    auto msg = error_of(in);
    CHECK(msg.rfind("store: ", 0) == 0);
    CHECK(msg.find(url) != std::string::npos);
  }
  for (std::string url : {"s3://held", "s3://held/", "s3://held/p", "s3://held/p/", "s3://held/a/b-c_d.e~f",
                          "file:///srv/lodge", "file:///srv/lodge/", "file:///"}) {
    CAPTURE(url);
    config::ConfigInputs in;
    in.env["HOME"] = dir.path().string();
    in.flags["store"] = url;
    CHECK(config::load(in).store == url);
  }
}

TEST_CASE("a busy_timeout SQLite cannot hold as int milliseconds is refused, naming the key") {
  test::TempDir dir;
  // 30d is 2592000000ms: cast to int it wrapped negative, which SQLite reads as "never wait".
  auto msg = error_of(inputs_with(dir, R"({"busy_timeout": "30d"})"));
  CHECK(msg.rfind("busy_timeout: '30d' is too long", 0) == 0);
  CHECK(msg.find("2147483647ms") != std::string::npos);
  CHECK(config::load(inputs_with(dir, R"({"busy_timeout": "24d"})")).busy_timeout_ms == 24LL * 86'400'000);
  CHECK(config::load(inputs_with(dir, R"({"busy_timeout": "2147483647ms"})")).busy_timeout_ms == 2147483647);
  CHECK(error_of(inputs_with(dir, R"({"busy_timeout": "2147483648ms"})")).rfind("busy_timeout:", 0) == 0);
}

TEST_CASE("ledger_timeout: 30s by default; the file, LODGE_LEDGER_TIMEOUT, then --ledger-timeout") {
  test::TempDir dir;
  auto in = inputs_with(dir, R"({})");
  CHECK(config::load(in).ledger_timeout_ms == 30'000);
  in = inputs_with(dir, R"({"ledger_timeout": "5s"})");
  CHECK(config::load(in).ledger_timeout_ms == 5'000);
  CHECK(config::to_json(config::load(in))["ledger_timeout"] == "5s");
  in.env["LODGE_LEDGER_TIMEOUT"] = "1500ms";
  CHECK(config::load(in).ledger_timeout_ms == 1'500);
  in.flags["ledger_timeout"] = "2m";
  CHECK(config::load(in).ledger_timeout_ms == 120'000);
  // PostgreSQL takes its timeouts as int milliseconds; 0 would mean "wait forever".
  CHECK(error_of(inputs_with(dir, R"({"ledger_timeout": "30d"})"))
            .rfind("ledger_timeout: '30d' is too long", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"ledger_timeout": "0"})")) ==
        "ledger_timeout: '0' is too short (more than 0)");
  in = inputs_with(dir, R"({})");
  in.env["LODGE_LEDGER_TIMEOUT"] = "soon";
  CHECK(error_of(in).rfind("LODGE_LEDGER_TIMEOUT: expected a duration like 15m or 500ms", 0) == 0);
  CHECK(error_of(in).find("got 'soon'") != std::string::npos);
  // The flag: the key's check, a usage error.
  in = inputs_with(dir, R"({})");
  in.flags["ledger_timeout"] = "0s";
  CHECK(test::throws_errc([&] { (void)config::load(in); }, Errc::usage,
                          "--ledger-timeout: '0s' is too short (more than 0)"));
}

TEST_CASE("durations that would overflow a wall-clock time are refused, naming the key") {
  test::TempDir dir;
  // 2562047h is about INT64_MAX ms: now + deadline used to overflow.
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"deadline": "2562047h"}}})"))
            .rfind("policies.p.deadline: '2562047h' is too long (at most 36500d)", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"grace": "36501d"}}})"))
            .rfind("policies.p.grace:", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"sweep": {"lease": "40000d"}})")).rfind("sweep.lease:", 0) == 0);
  CHECK(
      error_of(inputs_with(dir, R"({"sweep": {"backoff_max": "40000d"}})")).rfind("sweep.backoff_max:", 0) ==
      0);
  CHECK(config::load(inputs_with(dir, R"({"policies": {"p": {"deadline": "36500d"}}})"))
            .policy("p")
            .deadline_ms == 36'500LL * 86'400'000);
}

TEST_CASE(
    "allow_empty: the default policy allows empty files, a policy may refuse them; a non-bool is an error") {
  test::TempDir dir;
  auto c = config::load(inputs_with(dir, R"({"policies": {"resume": {"allow_empty": false}, "logs": {}}})"));
  CHECK(c.policy("default").allow_empty);
  CHECK(c.policy("logs").allow_empty);
  CHECK_FALSE(c.policy("resume").allow_empty);
  auto msg = error_of(inputs_with(dir, R"({"policies": {"resume": {"allow_empty": "no"}}})"));
  CHECK(msg.find("policies.resume.allow_empty") != std::string::npos);
  CHECK(msg.find("expected true or false") != std::string::npos);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"resume": {"allow_empty": 0}}})")).find("allow_empty") !=
        std::string::npos);
}

TEST_CASE("tag_state: off unless the file says true; shown by to_json; a non-bool is an error") {
  test::TempDir dir;
  CHECK(config::to_json(config::load(inputs_with(dir, "{}")))["tag_state"] == false);
  auto c = config::load(inputs_with(dir, R"({"tag_state": true})"));
  CHECK(c.store_config->tag_state() == false); // a file:// store never tags
  CHECK(config::to_json(c)["tag_state"] == true);
  auto s3 = inputs_with(dir, R"({"tag_state": true, "store": "s3://bucket/p"})");
  CHECK(config::load(s3).store_config->tag_state());
  auto msg = error_of(inputs_with(dir, R"({"tag_state": "yes"})"));
  CHECK(msg.rfind("tag_state:", 0) == 0);
  CHECK(msg.find("expected true or false") != std::string::npos);
}

TEST_CASE("a relative file:// store is made absolute from the current directory") {
  test::TempDir dir;
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  auto in = inputs_with(dir, "{}");
  in.flags["store"] = "file://./st";
  auto c = config::load(in);
  in.flags["store"] = "file://st/sub";
  auto c2 = config::load(in);
  in.flags["store"] = "file://../st";
  auto msg = error_of(in);
  std::filesystem::current_path(cwd);
  auto here = std::filesystem::canonical(dir.path()).string();
  CHECK(c.store == "file://" + here + "/st");
  CHECK(c2.store == "file://" + here + "/st/sub");
  CHECK(msg.find("'..' segment") != std::string::npos);
}

TEST_CASE("a policy's dedup is owner, prefix or none; prefix by default; anything else is named") {
  test::TempDir dir;
  auto c = config::load(inputs_with(
      dir, R"({"policies": {"q": {"dedup": "owner"}, "n": {"dedup": "none"}, "p": {"max_files": 3}}})"));
  CHECK(c.policy("q").dedup == "owner");
  CHECK(c.policy("n").dedup == "none");
  CHECK(c.policy("p").dedup == "prefix");
  CHECK(c.policy("default").dedup == "prefix");
  auto msg = error_of(inputs_with(dir, R"({"policies": {"p": {"dedup": "global"}}})"));
  CHECK(msg.rfind("policies.p.dedup:", 0) == 0);
  CHECK(msg.find("global") != std::string::npos);
  CHECK(error_of(inputs_with(dir, R"({"policies": {"p": {"dedup": 1}}})")).rfind("policies.p.dedup:", 0) ==
        0);
}

TEST_CASE("run prefixes: owner-id segments joined by '/'; the reason names what is wrong") {
  CHECK_FALSE(config::run_prefix_problem("builds/42").has_value());
  CHECK_FALSE(config::run_prefix_problem("a.b_c-d/e").has_value());
  auto why = [](const std::string &p) { return config::run_prefix_problem(p).value_or("(fine)"); };
  CHECK(why("").find("empty") != std::string::npos);
  CHECK(why("/builds").find("empty segment") != std::string::npos);
  CHECK(why("builds/").find("empty segment") != std::string::npos);
  CHECK(why("a//b").find("empty segment") != std::string::npos);
  CHECK(why("a/../b").find("'..'") != std::string::npos);
  CHECK(why("a/./b").find("'.'") != std::string::npos);
  CHECK(why("a b").find("'a b'") != std::string::npos);
  CHECK(why("caf\xC3\xA9").find("segment") != std::string::npos);
  CHECK(why(std::string(129, 'x')).find("segment") != std::string::npos);
  CHECK(why(std::string(600, 'x')).find("512") != std::string::npos);
}

TEST_CASE(
    "AWS_ENDPOINT_URL names an S3 endpoint: an az:// store keeps its own (LODGE_ENDPOINT, flag, file)") {
  test::TempDir dir;
  auto in = inputs_with(dir, "{}");
  in.env["AWS_ENDPOINT_URL"] = "http://127.0.0.1:9000";
  in.flags["store"] = "az://container/p";
  CHECK(config::load(in).store_config->endpoint().empty());
  in.flags["store"] = "s3://bucket/p";
  CHECK(config::load(in).store_config->endpoint() == "http://127.0.0.1:9000");
  in.flags["store"] = "az://container/p";
  in.env["LODGE_ENDPOINT"] = "http://127.0.0.1:10000/devstoreaccount1";
  CHECK(config::load(in).store_config->endpoint() == "http://127.0.0.1:10000/devstoreaccount1");
  auto file = inputs_with(dir, R"({"store": "az://cont/p", "endpoint": "http://127.0.0.1:7/acct"})");
  file.env["AWS_ENDPOINT_URL_S3"] = "http://127.0.0.1:9000";
  CHECK(config::load(file).store_config->endpoint() == "http://127.0.0.1:7/acct");
}

TEST_CASE("bwlimit and stats: the file's keys, LODGE_BWLIMIT and LODGE_STATS over them, null unset") {
  test::TempDir dir;
  auto c = config::load(inputs_with(dir, R"({"jobs": 2})"));
  CHECK_FALSE(c.bwlimit.has_value()); // unset: the limit is left to what comes after
  CHECK(c.stats_ms == 0);
  c = config::load(inputs_with(dir, R"({"bwlimit": "10M", "stats": "1m"})"));
  CHECK(c.bwlimit == 10ULL << 20);
  CHECK(c.stats_ms == 60'000);
  c = config::load(inputs_with(dir, R"({"bwlimit": "off", "stats": "off"})"));
  CHECK(c.bwlimit == 0U); // set, to no limit
  CHECK(c.stats_ms == 0);
  c = config::load(inputs_with(dir, R"({"bwlimit": null})")); // as `lodge config` shows it unset
  CHECK_FALSE(c.bwlimit.has_value());
  auto in = inputs_with(dir, R"({"bwlimit": "10M", "stats": "1m"})");
  in.env["LODGE_BWLIMIT"] = "512K";
  in.env["LODGE_STATS"] = "off";
  c = config::load(in);
  CHECK(c.bwlimit == 512ULL << 10);
  CHECK(c.stats_ms == 0);
  // What `lodge config` prints reads back as the same settings.
  auto j = config::to_json(c);
  CHECK(j["bwlimit"] == "512Ki");
  CHECK(j["stats"] == "off");
  CHECK(error_of(inputs_with(dir, R"({"bwlimit": "fast"})")).rfind("bwlimit: expected a rate", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"bwlimit": 10})")).rfind("bwlimit: expected a rate", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"stats": "500ms"})")) == "stats: '500ms' is too short (at least 1s)");
  CHECK(error_of(inputs_with(dir, R"({"stats": "2d"})")) == "stats: '2d' is too long (at most 1d)");
  CHECK(error_of(inputs_with(dir, R"({"stats": "soon"})")).rfind("stats: expected a duration", 0) == 0);
  in = inputs_with(dir, "{}");
  in.env["LODGE_BWLIMIT"] = "10MB";
  CHECK(error_of(in).rfind("LODGE_BWLIMIT: expected a rate", 0) == 0);
}

TEST_CASE(
    "transfer precedence: lodge's file and LODGE_JOBS over the AWS profile's s3 keys, it over defaults") {
  test::TempDir dir;
  test::write_file(dir.file("aws"),
                   "[profile ci]\ns3 =\n  max_concurrent_requests = 3\n  multipart_threshold = 6MB\n"
                   "  multipart_chunksize = 5MB\n  max_bandwidth = 1MB/s\n");
  const std::string at = "file " + dir.file("aws") + " [profile ci] s3.";
  auto with = [&](const std::string &json) {
    auto in = inputs_with(dir, json);
    in.env["AWS_CONFIG_FILE"] = dir.file("aws");
    in.flags["profile"] = "ci";
    return in;
  };
  // The profile below nothing of lodge's: it sets jobs, part_size, multipart_threshold.
  auto c = config::load(with(R"({"store": "s3://bkt/p"})"));
  CHECK(c.jobs == 3);
  CHECK(c.part_size == 5ULL << 20);
  CHECK(c.multipart_threshold == 6ULL << 20);
  CHECK(c.part_concurrency == 4);
  CHECK(c.store_bandwidth == 1ULL << 20);
  CHECK(c.sources.at("jobs") == at + "max_concurrent_requests");
  CHECK(c.sources.at("part_size") == at + "multipart_chunksize");
  CHECK(c.sources.at("multipart_threshold") == at + "multipart_threshold");
  CHECK(c.sources.at("part_concurrency") == "default");
  CHECK(c.sources.at("bandwidth") == at + "max_bandwidth");
  auto j = config::to_json(c);
  CHECK(j["sources"]["jobs"] == at + "max_concurrent_requests");
  CHECK(j["store_bandwidth"] == 1ULL << 20);

  // lodge's file over the profile; LODGE_JOBS over the file.
  auto f = config::load(with(R"({"store": "s3://bkt/p", "jobs": 5, "part_size": "32MiB"})"));
  CHECK(f.jobs == 5);
  CHECK(f.part_size == 32ULL << 20);
  CHECK(f.sources.at("jobs") == "file " + dir.file("config.json"));
  CHECK(f.sources.at("part_size") == "file " + dir.file("config.json"));
  CHECK(f.multipart_threshold == 6ULL << 20); // what the file left out still comes from the profile
  auto in = with(R"({"store": "s3://bkt/p", "jobs": 5})");
  in.env["LODGE_JOBS"] = "7";
  auto e = config::load(in);
  CHECK(e.jobs == 7);
  CHECK(e.sources.at("jobs") == "env LODGE_JOBS");

  // Another store reads no AWS profile: defaults.
  auto other = inputs_with(dir, R"({"store": "file:///tmp/x"})");
  other.env["AWS_CONFIG_FILE"] = dir.file("aws");
  auto d = config::load(other);
  CHECK(d.jobs == 8);
  CHECK(d.sources.at("jobs") == "default");
  CHECK(d.store_bandwidth == 0);
  CHECK_FALSE(d.sources.contains("bandwidth"));
}

TEST_CASE("--part-size and --part-concurrency are checked as the part_size and part_concurrency keys") {
  CHECK(config::parse_part_size("8MiB", "--part-size") == 8ULL << 20);
  CHECK(config::parse_part_size("64M", "--part-size") == 64ULL << 20);
  CHECK(test::throws_errc([] { (void)config::parse_part_size("4MiB", "--part-size"); }, Errc::usage,
                          "--part-size: S3 takes parts of 5MiB to 5GiB (got 4MiB)"));
  CHECK(test::throws_errc([] { (void)config::parse_part_size("6GiB", "--part-size"); }, Errc::usage,
                          "5MiB to 5GiB"));
  CHECK(test::throws_errc([] { (void)config::parse_part_size("8MB", "--part-size"); }, Errc::usage,
                          "--part-size: expected a size like 10MiB, got '8MB'"));
  CHECK(config::parse_part_concurrency("16", "--part-concurrency") == 16);
  for (const char *bad : {"0", "65", "x", ""})
    CHECK(test::throws_errc([&] { (void)config::parse_part_concurrency(bad, "--part-concurrency"); },
                            Errc::usage, "--part-concurrency: expected an integer from 1 to 64"));
  test::TempDir dir;
  CHECK(error_of(inputs_with(dir, R"({"part_size": "4MiB"})")).find("part_size: S3 takes parts of 5MiB") !=
        std::string::npos);
  CHECK(config::load(inputs_with(dir, R"({"part_size": "64M"})")).part_size == 64ULL << 20);
}

TEST_CASE("a key given twice in one object is refused, naming the file, the line and the key") {
  test::TempDir dir;
  const std::string file = dir.file("config.json");
  CHECK(
      error_of(inputs_with(dir, "{\"jobs\": 4,\n \"sweep\": {\"lease\": \"2m\",\n\n \"lease\": \"5m\"}}")) ==
      file + ":4: sweep.lease: given twice (a key appears once in its object)");
  CHECK(error_of(inputs_with(dir, "{\"jobs\": 4,\n\"policies\": {\"a\": {}},\n\"jobs\": 5}")) ==
        file + ":3: jobs: given twice (a key appears once in its object)");
  CHECK(error_of(
            inputs_with(dir, R"({"policies": {"a": {"deadline": "1m", "grace": "1m", "deadline": "2m"}}})"))
            .find(":1: policies.a.deadline: given twice") != std::string::npos);
  // A string value that looks like a key, or the same key in two objects, is no duplicate.
  auto c = config::load(inputs_with(
      dir, R"({"default_owner": "jobs", "policies": {"a": {"deadline": "1m"}, "b": {"deadline": "2m"}}})"));
  CHECK(c.policy("b").deadline_ms == 120'000);
}

TEST_CASE("every duration key reads the one grammar and its flag's range") {
  test::TempDir dir;
  auto c = config::load(inputs_with(dir, R"({"sweep": {"lease": "2w", "backoff_max": "1h30m"},
    "policies": {"p": {"expire_after": "2w", "deadline": "1.5h"}}, "in_progress_wait": "0"})"));
  CHECK(c.sweep.lease_ms == 14 * 86'400'000LL);
  CHECK(c.sweep.backoff_max_ms == 5'400'000);
  CHECK(c.policy("p").expire_after_ms == 14 * 86'400'000LL);
  CHECK(c.policy("p").deadline_ms == 5'400'000);
  CHECK(c.in_progress_wait_ms == 0); // as --in-progress-wait 0: do not wait
  CHECK(error_of(inputs_with(dir, R"({"sweep": {"lease": "0s"}})")) ==
        "sweep.lease: '0s' is too short (more than 0)");
  CHECK(error_of(inputs_with(dir, R"({"sweep": {"lease": "120"}})"))
            .rfind("sweep.lease: expected a duration", 0) == 0);
  CHECK(error_of(inputs_with(dir, R"({"in_progress_wait": "25h"})")) ==
        "in_progress_wait: '25h' is too long (at most 1d)");
}
