// The PostgreSQL driver's pure parts (src/ledger/pg.hpp): placeholder translation, how a
// location is shown, the advisory-lock hash, SQLSTATE mapping. The parts that need a
// server are in tests/pg (CTest: pg_driver).
#include "support.hpp"

#include <ledger/pg.hpp>

using namespace lodge;
using namespace lodge::ledger;

TEST_CASE("pg: ?N becomes $N, ?10 stays ten and not ?1 followed by 0") {
  CHECK(pg::translate_placeholders("SELECT a FROM t WHERE b = ?1 AND c = ?2") ==
        "SELECT a FROM t WHERE b = $1 AND c = $2");
  CHECK(pg::translate_placeholders("VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)") ==
        "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)");
  CHECK(pg::translate_placeholders("x = ?10") == "x = $10");
  CHECK(pg::translate_placeholders("SELECT 1") == "SELECT 1");
  CHECK(pg::max_placeholder("VALUES (?1, ?10, ?2)") == 10);
  CHECK(pg::max_placeholder("x = ?3 OR y = ?3") == 3);
  CHECK(pg::max_placeholder("SELECT 1") == 0);
  for (const char *bad : {"x = ?", "x = ? AND y = ?1", "x = ?0", "x = ?a"}) {
    CAPTURE(bad);
    auto e = test::thrown_error([&] { (void)pg::translate_placeholders(bad); });
    REQUIRE(e);
    CHECK(e->code == Errc::internal);
  }
}

TEST_CASE("pg: a location is shown without its password") {
  CHECK(pg::display_location("postgres://alice:s3cret@db.example:5433/ledger") ==
        "postgres://alice@db.example:5433/ledger");
  CHECK(pg::display_location("postgresql://alice:s3cret@db.example/ledger?sslmode=require&password=x2") ==
        "postgres://alice@db.example/ledger");
  CHECK(pg::display_location("host=db.example port=5432 dbname=ledger user=bob password=hunter2") ==
        "postgres://bob@db.example:5432/ledger");
  CHECK(pg::display_location("postgres:///ledger?host=/var/run/postgresql") ==
        "postgres://%2Fvar%2Frun%2Fpostgresql/ledger");
  for (const char *loc : {"postgres://alice:s3cret@db.example:5433/ledger",
                          "host=h password='hunter2' dbname=d", "postgres://h/d?password=x2"}) {
    CAPTURE(loc);
    auto shown = pg::display_location(loc);
    CHECK(shown.find("s3cret") == std::string::npos);
    CHECK(shown.find("hunter2") == std::string::npos);
    CHECK(shown.find("x2") == std::string::npos);
  }
  CHECK(pg::display_location("postgres://[::1") == "postgres (unparsable location)");
}

TEST_CASE("pg: the owner lock hash is FNV-1a 32 over the bytes, as an int4") {
  CHECK(pg::fnv1a32("") == 2166136261U);
  CHECK(pg::fnv1a32("a") == 0xe40c292cU);
  CHECK(pg::fnv1a32("foobar") == 0xbf9cf968U);
  CHECK(pg::lock_key_hash("a") == static_cast<int32_t>(0xe40c292cU));
  CHECK(pg::lock_key_hash("a") < 0); // the high bit set: a negative int4, as PostgreSQL takes it
}

TEST_CASE("pg: SQLSTATEs map onto lodge's codes and keep the SQLSTATE") {
  struct Row {
    const char *state;
    bool lost;
    Errc code;
  };
  for (const Row &r :
       {Row{"40001", false, Errc::ledger_locked}, Row{"40P01", false, Errc::ledger_locked},
        Row{"55P03", false, Errc::ledger_locked}, Row{"57014", false, Errc::ledger_unavailable},
        Row{"08006", false, Errc::ledger_unavailable}, Row{"57P01", false, Errc::ledger_unavailable},
        Row{"", true, Errc::ledger_unavailable}, Row{"23505", true, Errc::ledger_unavailable},
        Row{"22021", false, Errc::bad_name}, Row{"22P05", false, Errc::bad_name},
        Row{"3D000", false, Errc::ledger_not_found}, Row{"42P01", false, Errc::ledger_not_found},
        Row{"23505", false, Errc::internal}, Row{"42601", false, Errc::internal}}) {
    CAPTURE(r.state);
    CAPTURE(r.lost);
    Error e = pg::map_error(r.state, r.lost, "the server's words", "postgres://u@h/db");
    CHECK(e.code == r.code);
    CHECK(e.details.sqlstate == r.state);
    CHECK(e.message.find("postgres://u@h/db") != std::string::npos);
    CHECK(e.message.find("the server's words") != std::string::npos);
  }
  CHECK(pg::map_error("22021", false, "m", "w").message.find("only UTF-8 text") != std::string::npos);
  CHECK(pg::map_error("42P01", false, "m", "w").message.find("lodge init") != std::string::npos);
  CHECK(pg::map_error("23505", false, "m", "w").message.find("23505") != std::string::npos);
  CHECK(pg::is_transient("40001"));
  CHECK(pg::is_transient("40P01"));
  CHECK_FALSE(pg::is_transient("55P03"));
  CHECK_FALSE(pg::is_transient(""));
}

TEST_CASE("pg: one ledger_timeout bounds connect, keepalives, statements and lock waits") {
  auto b = pg::bounds_for(30'000, 10'000);
  CHECK(b.connect_timeout_s == 30);
  CHECK(b.keepalives_idle_s == 15);
  CHECK(b.keepalives_interval_s == 5);
  CHECK(b.keepalives_count == 3);
  CHECK(b.keepalives_idle_s + b.keepalives_count * b.keepalives_interval_s == 30);
  CHECK(b.tcp_user_timeout_ms == 30'000);
  CHECK(b.statement_timeout_ms == 30'000);
  CHECK(b.lock_timeout_ms == 10'000); // busy_timeout, shorter
  // Sub-second and odd values: whole seconds rounded up, libpq's 2 s minimum, at least 1 s
  // between probes; a lock wait never past the bound.
  b = pg::bounds_for(1'500, 60'000);
  CHECK(b.connect_timeout_s == 2);
  CHECK(b.keepalives_idle_s == 1);
  CHECK(b.keepalives_interval_s == 1);
  CHECK(b.tcp_user_timeout_ms == 1'500);
  CHECK(b.statement_timeout_ms == 1'500);
  CHECK(b.lock_timeout_ms == 1'500);
  CHECK(pg::bounds_for(2'001, 100).connect_timeout_s == 3);
  // The client waits for the longer of the two server-side bounds, plus the margin; a
  // session with no statement_timeout (0) is still bounded by ledger_timeout.
  CHECK(pg::answer_wait_ms(2'000, 2'000) == 2'000 + pg::k_answer_margin_ms);
  CHECK(pg::answer_wait_ms(2'000, 0) == 2'000 + pg::k_answer_margin_ms);
  CHECK(pg::answer_wait_ms(2'000, 7'000) == 7'000 + pg::k_answer_margin_ms);
}
