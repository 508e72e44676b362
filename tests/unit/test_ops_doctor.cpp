#include "support.hpp"

#include <lodge/ledger/inspect.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/ledger/sqlite.hpp>
#include <lodge/ops/read/doctor.hpp>
#include <lodge/util/clock.hpp>

using namespace lodge;

namespace {
const ops::doctor::Check *find(const std::vector<ops::doctor::Check> &checks, const std::string &name) {
  for (const auto &c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

void make_ledger(const std::string &path) {
  ledger::OpenOptions o;
  o.location = path;
  o.create = true;
  (void)ledger::open_ledger(o);
}
} // namespace

TEST_CASE("http dates: RFC 1123 as Date and Last-Modified carry it; anything else is nullopt") {
  CHECK(util::parse_http_date_ms("Tue, 01 Dec 2026 18:02:08 GMT") == 1'796'148'128'000);
  CHECK(util::parse_http_date_ms("Thu, 01 Jan 1970 00:00:00 GMT") == 0);
  CHECK_FALSE(util::parse_http_date_ms("").has_value());
  CHECK_FALSE(util::parse_http_date_ms("2026-12-01T18:02:08Z").has_value());
  auto skew = ops::doctor::clock_skew("Tue, 01 Dec 2026 18:02:08 GMT", 1'796'148'128'000 + 6 * 60'000);
  CHECK(skew.level == ops::doctor::Level::warn);
  CHECK(skew.message.find("360 s ahead of") != std::string::npos);
}

TEST_CASE("inspection: a ledger of any schema version is read through the driver seam, never migrated") {
  test::TempDir dir;
  auto path = dir.file("ledger.db");
  make_ledger(path);
  auto conn = ledger::open_to_inspect(path, 2000);
  CHECK(conn->schema_version() == ledger::k_schema_version);
  CHECK(conn->integrity_check() == "ok");
  conn.reset();
  {
    ledger::Db db(path, 2000);
    db.exec("PRAGMA user_version = " + std::to_string(ledger::k_schema_version + 1));
  }
  CHECK(ledger::open_to_inspect(path, 2000)->schema_version() == ledger::k_schema_version + 1);
  test::write_file(dir.file("junk.db"), std::string(8192, 'x'));
  CHECK(test::throws_errc([&] { (void)ledger::open_to_inspect(dir.file("junk.db"), 2000)->schema_version(); },
                          Errc::ledger_unusable, "junk.db"));
}

TEST_CASE("doctor's SQLite checks: schema and integrity through the seam, a newer ledger is not usable") {
  test::TempDir dir;
  auto path = dir.file("ledger.db");
  make_ledger(path);
  bool usable = false;
  auto checks = ops::doctor::sqlite_ledger(path, usable);
  CHECK(usable);
  REQUIRE(find(checks, "ledger.schema") != nullptr);
  CHECK(find(checks, "ledger.schema")->level == ops::doctor::Level::ok);
  REQUIRE(find(checks, "ledger.integrity") != nullptr);
  CHECK(find(checks, "ledger.integrity")->message == "PRAGMA quick_check: ok");
  {
    ledger::Db db(path, 2000);
    db.exec("PRAGMA user_version = " + std::to_string(ledger::k_schema_version + 1));
  }
  checks = ops::doctor::sqlite_ledger(path, usable);
  CHECK_FALSE(usable);
  REQUIRE(find(checks, "ledger.schema") != nullptr);
  CHECK(find(checks, "ledger.schema")->level == ops::doctor::Level::fail);
  CHECK(find(checks, "ledger.integrity") == nullptr); // not checked past a version it cannot read
  test::write_file(dir.file("junk.db"), std::string(8192, 'x'));
  checks = ops::doctor::sqlite_ledger(dir.file("junk.db"), usable);
  CHECK_FALSE(usable);
  REQUIRE(find(checks, "ledger.integrity") != nullptr);
  CHECK(find(checks, "ledger.integrity")->level == ops::doctor::Level::fail);
}
