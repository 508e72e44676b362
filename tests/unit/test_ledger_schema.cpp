#include "support.hpp"

#include <cctype>
#include <filesystem>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/schema.hpp>
#include <lodge/ledger/sqlite.hpp>
#include <lodge/ops/read/status.hpp>
#include <sys/stat.h>

using namespace lodge;

namespace {
class FixedClock : public util::Clock {
public:
  explicit FixedClock(int64_t t) : m_t(t) {}
  [[nodiscard]] int64_t now_ms() const override { return m_t; }
  int64_t m_t;
};

std::unique_ptr<ledger::Ledger> open_at(const std::string &path,
                                        const util::Clock *clock = &util::system_clock()) {
  ledger::OpenOptions o;
  o.location = path;
  o.clock = clock;
  o.create = true;
  return ledger::open_ledger(o);
}

// A ledger at an older schema version, made from its frozen sample in tests/data/ledger.
void make_old_ledger(const std::string &path, const std::string &sample, int version) {
  test::write_file(path, ""); // an empty file is an empty database
  ledger::Db db(path, 1000);
  db.exec(test::read_file(std::string(LODGE_TEST_DATA) + "/ledger/" + sample));
  db.exec("INSERT INTO ledger_meta (key, value) VALUES ('uuid', '00000000-0000-4000-8000-000000000001'),"
          " ('created_at', '1'); PRAGMA user_version = " +
          std::to_string(version) + ";");
}

Errc open_error(const std::string &path) {
  try {
    (void)open_at(path);
  } catch (const LodgeError &e) {
    return e.error().code;
  }
  return Errc::ok;
}
} // namespace

TEST_CASE("a new ledger is created 0600 at the current version with WAL and FULL sync") {
  test::TempDir dir;
  auto path = dir.file("sub/ledger.db");
  auto l = open_at(path);
  CHECK(l->schema_version() == ledger::k_schema_version);
  CHECK(l->uuid().size() == 36);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  ledger::Db db(path, 1000);
  CHECK(db.query_text("PRAGMA journal_mode") == "wal");
  // Opening is idempotent and keeps the uuid.
  CHECK(open_at(path)->uuid() == l->uuid());
}

TEST_CASE("an older ledger is migrated on open and keeps its rows") {
  test::TempDir dir;
  auto path = dir.file("old.db");
  make_old_ledger(path, "schema_v1.sql", 1);
  {
    ledger::Db db(path, 1000);
    db.exec("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
            " upload_status, created_at, updated_at, upload_deadline_at) VALUES ('o', 'a.txt', 'k1', "
            "'text/plain',"
            " printf('%064d', 1), 3, 'default', 'ACTIVE', 1, 1, 2)");
  }
  auto l = open_at(path);
  CHECK(l->schema_version() == ledger::k_schema_version);
  auto r = l->status(10);
  CHECK(r.files_active == 1);
  l->record_job_run({"sweep", "w", 1, 2, "ok", "{}"});
  CHECK(l->status(10).last_runs.at("sweep").has_value());
}

TEST_CASE("a version-2 ledger gains verify_pass; its tasks keep their state and owe no pass") {
  test::TempDir dir;
  auto path = dir.file("v2.db");
  make_old_ledger(path, "schema_v3.sql", 2);
  {
    ledger::Db db(path, 1000);
    // Version 2 is version 3 without cleanup_task.verify_pass.
    db.exec("ALTER TABLE cleanup_task DROP COLUMN verify_pass;");
    db.exec(
        "INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
        " upload_status, is_deleted, created_at, updated_at, upload_deadline_at) VALUES ('o', 'a.txt', 'k1',"
        " 'text/plain', printf('%064d', 1), 3, 'default', 'UPLOAD_FAILED', 1, 1, 1, 2)");
    db.exec("INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,"
            " created_at, updated_at) VALUES (1, 'DELETE_OBJECT', 'k1', 'PENDING', 5, 3, 1, 1)");
  }
  auto l = open_at(path);
  CHECK(l->schema_version() == ledger::k_schema_version);
  auto t = l->find_task_for(1);
  REQUIRE(t);
  CHECK(t->status == ledger::TaskStatus::pending);
  CHECK(t->next_retry_at == 5);
  CHECK(t->verify_pass == ledger::k_verify_none);
}

TEST_CASE("read-only: a ledger too old says to run lodge init; a current one is read without writing") {
  test::TempDir dir;
  auto path = dir.file("ro.db");
  make_old_ledger(path, "schema_v3.sql", 3);
  ledger::OpenOptions o;
  o.location = path;
  o.read_only = true;
  try {
    (void)ledger::open_ledger(o);
    FAIL("a too-old ledger opened read-only");
  } catch (const LodgeError &e) {
    CHECK(e.error().code == Errc::ledger_unusable);
    CHECK(e.error().message.find("run `lodge init`") != std::string::npos);
  }
  { auto l = open_at(path); } // migrates
  auto r = ledger::open_ledger(o);
  CHECK(r->schema_version() == ledger::k_schema_version);
  CHECK(r->status(10).files_active == 0);
  CHECK_THROWS_AS(r->record_job_run({"sweep", "w", 1, 2, "ok", "{}"}), LodgeError);
}

TEST_CASE("a newer ledger is refused with LEDGER_TOO_NEW; garbage with LEDGER_UNUSABLE") {
  test::TempDir dir;
  auto path = dir.file("new.db");
  { auto l = open_at(path); }
  {
    ledger::Db db(path, 1000);
    db.exec("PRAGMA user_version = " + std::to_string(ledger::k_schema_version + 1));
  }
  CHECK(open_error(path) == Errc::ledger_too_new);

  auto junk = dir.file("junk.db");
  test::write_file(junk, std::string(4096, 'x'));
  CHECK(open_error(junk) == Errc::ledger_unusable);

  auto foreign = dir.file("foreign.db");
  test::write_file(foreign, "");
  {
    ledger::Db db(foreign, 1000);
    db.exec("CREATE TABLE t (x)");
  }
  CHECK(open_error(foreign) == Errc::ledger_unusable);
}

TEST_CASE("a ledger path that is a symlink is refused") {
  test::TempDir dir;
  { auto l = open_at(dir.file("real.db")); }
  REQUIRE(::symlink(dir.file("real.db").c_str(), dir.file("link.db").c_str()) == 0);
  CHECK(open_error(dir.file("link.db")) == Errc::ledger_unusable);
}

TEST_CASE("the schema rejects invalid state strings and enforces one alive row per digest") {
  test::TempDir dir;
  auto path = dir.file("l.db");
  { auto l = open_at(path); }
  ledger::Db db(path, 1000);
  db.exec("PRAGMA foreign_keys = ON");
  auto insert = [&](const std::string &status, const std::string &key, int deleted) {
    db.exec("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
            " upload_status, is_deleted, created_at, updated_at, upload_deadline_at) VALUES ('o', 'a', '" +
            key + "', 't', printf('%064d', 7), 1, 'default', '" + status + "', " + std::to_string(deleted) +
            ", 1, 1, 1)");
  };
  CHECK_THROWS_AS(insert("DONE", "k0", 0), LodgeError);
  CHECK_THROWS_AS(insert("UPLOAD_FAILED", "k0", 0), LodgeError); // failed rows never hold quota
  insert("ACTIVE", "k1", 0);
  CHECK_THROWS_AS(insert("UPLOADING", "k2", 0), LodgeError); // I4
  insert("UPLOAD_FAILED", "k3", 1);                          // dead rows may share the digest
  CHECK_THROWS_AS(
      db.exec(
          "INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at,"
          " max_retries, created_at, updated_at) VALUES (1, 'DELETE_OBJECT', 'k1', 'WAITING', 0, 3, 0, 0)"),
      LodgeError);
  CHECK_THROWS_AS(
      db.exec(
          "INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at,"
          " max_retries, created_at, updated_at) VALUES (999, 'DELETE_OBJECT', 'k1', 'PENDING', 0, 3, 0, 0)"),
      LodgeError); // foreign key
  db.exec(
      "INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,"
      " lease_version, created_at, updated_at) VALUES (1, 'DELETE_OBJECT', 'k1', 'PENDING', 0, 3, 5, 0, 0)");
  CHECK_THROWS_AS(db.exec("UPDATE cleanup_task SET lease_version = 4"),
                  LodgeError); // fencing never goes back
}

TEST_CASE("status figures on a hand-built ledger") {
  test::TempDir dir;
  auto path = dir.file("s.db");
  FixedClock clock(1'000'000);
  { auto l = open_at(path, &clock); }
  {
    ledger::Db db(path, 1000);
    db.exec(R"sql(
      INSERT INTO file_upload (id, owner_id, original_name, object_key, media_type, sha256, size, policy,
        upload_status, is_deleted, created_at, updated_at, upload_deadline_at) VALUES
        (1, 'o', 'a', 'k1', 't', printf('%064d', 1), 1, 'default', 'ACTIVE', 0, 1, 1, 10),
        (2, 'o', 'b', 'k2', 't', printf('%064d', 2), 1, 'default', 'ACTIVE', 1, 1, 1, 10),
        (3, 'o', 'c', 'k3', 't', printf('%064d', 3), 1, 'default', 'UPLOAD_FAILED', 1, 1, 1, 10),
        (4, 'o', 'd', 'k4', 't', printf('%064d', 4), 1, 'default', 'UPLOADING', 0, 900000, 900000, 950000),
        (5, 'o', 'e', 'k5', 't', printf('%064d', 5), 1, 'default', 'UPLOADING', 0, 990000, 990000, 2000000);
      INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,
        lease_until, created_at, updated_at) VALUES
        (1, 'DELETE_OBJECT', 'k1', 'IGNORED', 0, 3, NULL, 0, 0),
        (2, 'DELETE_OBJECT', 'k2', 'PROCESSING', 0, 3, 999000, 0, 0),
        (3, 'DELETE_OBJECT', 'k3', 'FAILED', 0, 3, NULL, 0, 0),
        (4, 'DELETE_OBJECT', 'k4', 'PENDING', 500, 3, NULL, 0, 0),
        (5, 'DELETE_OBJECT', 'k5', 'PENDING', 3000000, 3, NULL, 0, 0);
      INSERT INTO job_run (job, worker_id, started_at, finished_at, outcome, counts) VALUES
        ('sweep', 'w1', 100, 200, 'ok', '{"deleted":1}'), ('sweep', 'w2', 300, 400, 'failed', '{}');
    )sql");
  }
  auto l = open_at(path, &clock);
  auto r = l->status(1'000'000, 0);
  CHECK(r.files_active == 1);
  CHECK(r.files_deleted == 1);
  CHECK(r.files_failed == 1);
  CHECK(r.files_uploading == 2);
  CHECK(r.tasks["IGNORED"] == 1);
  CHECK(r.tasks["PENDING"] == 2);
  CHECK(r.tasks["SUCCESS"] == 0);
  CHECK(r.dead_letters == 1);
  CHECK(r.expired_leases == 1);
  CHECK(r.overdue_uploading == 1);
  CHECK(r.tasks_due == 1);
  CHECK(r.oldest_uploading_age_ms == 100'000);
  REQUIRE(r.last_runs.at("sweep").has_value());
  CHECK(r.last_runs.at("sweep")->worker_id == "w2");
  CHECK_FALSE(r.last_runs.at("repair").has_value());
  CHECK(r.last_success_at.at("sweep") == 200); // the failed run came after
  CHECK_FALSE(r.last_success_at.contains("repair"));
  CHECK(r.files_failed_since == 1);
  CHECK(l->status(1'000'000, 1'000'000).files_failed_since == 0);

  config::StatusSettings s;
  auto h = ops::evaluate(r, s);
  CHECK_FALSE(h.healthy);
  std::vector<std::string> codes;
  for (const auto &reason : h.reasons)
    codes.push_back(reason.code);
  CHECK(codes ==
        std::vector<std::string>{"dead_letters", "uploading_overdue", "lease_expired", "job_failed"});
  s.max_age_ms["sweep"] = 1000;
  auto clean = ledger::StatusReport{};
  clean.now = 10;
  clean.ledger_created_at = 5;
  CHECK(ops::evaluate(clean, s).healthy); // a young ledger gets time for its first sweep
  clean.now = 5000;
  CHECK_FALSE(ops::evaluate(clean, s).healthy); // an old one without any sweep does not
  s.required_jobs.clear();
  CHECK(ops::evaluate(clean, s).healthy); // unless no job is required
}

TEST_CASE(
    "a ledger migrated from the oldest version (and from v3, v4, v5) has exactly the schema of a new one") {
  static_assert(ledger::k_oldest_schema_version == 1, "add the frozen schema of the new oldest version");
  test::TempDir dir;
  // ALTER TABLE ADD COLUMN splices the column's text into the stored CREATE TABLE without
  // the layout or comments of schema.sql: compare the statements token by token.
  auto normalize = [](const std::string &sql) {
    std::string out;
    for (size_t i = 0; i < sql.size(); ++i) {
      if (sql.compare(i, 2, "--") == 0) {
        while (i < sql.size() && sql[i] != '\n')
          ++i;
      }
      char c = i < sql.size() ? sql[i] : ' ';
      if (std::isspace(static_cast<unsigned char>(c))) {
        if (!out.empty() && out.back() != ' ') out.push_back(' ');
        continue;
      }
      if ((c == ')' || c == ',') && !out.empty() && out.back() == ' ') out.pop_back();
      out.push_back(c);
      if (c == '(') {
        while (i + 1 < sql.size() && std::isspace(static_cast<unsigned char>(sql[i + 1])))
          ++i;
      }
    }
    while (!out.empty() && out.back() == ' ')
      out.pop_back();
    return out;
  };
  auto schema = [&normalize](const std::string &path) {
    ledger::Db db(path, 1000);
    std::vector<std::string> rows;
    ledger::Stmt st(db,
                    "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name");
    while (st.step())
      rows.push_back(st.col_text(0) + "|" + st.col_text(1) + "|" + st.col_text(2) + "|" +
                     normalize(st.col_text(3)));
    return rows;
  };
  auto fresh = dir.file("new.db");
  { auto l = open_at(fresh); }
  auto want = schema(fresh);
  REQUIRE(want.size() > 5);
  for (const auto &old_schema :
       {std::pair{"schema_v1.sql", 1}, std::pair{"schema_v3.sql", 3}, std::pair{"schema_v4.sql", 4},
        std::pair{"schema_v5.sql", 5}, std::pair{"schema_v6.sql", 6}}) {
    const char *sample = old_schema.first; // not a structured binding: INFO captures it
    const int version = old_schema.second;
    INFO("migrated from ", sample);
    auto old = dir.file(std::string(sample) + ".db");
    make_old_ledger(old, sample, version);
    { auto l = open_at(old); }
    auto got = schema(old);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      CHECK(got[i] == want[i]);
  }
}

TEST_CASE("v3 -> v4: rows take their name as relative path, no prefix, the owner de-dup scope") {
  test::TempDir dir;
  auto path = dir.file("v3.db");
  make_old_ledger(path, "schema_v3.sql", 3);
  {
    ledger::Db db(path, 1000);
    db.exec(R"sql(
      INSERT INTO file_upload (id, owner_id, original_name, object_key, media_type, sha256, size, policy,
        upload_status, is_deleted, created_at, updated_at, activated_at, upload_deadline_at) VALUES
        (1, 'o', 'a.txt', 'p/o/u1.txt', 't', printf('%064d', 1), 1, 'default', 'ACTIVE', 0, 1, 1, 2, 10),
        (2, 'o', 'a.txt', 'p/o/u2.txt', 't', printf('%064d', 2), 1, 'default', 'ACTIVE', 0, 1, 1, 3, 10),
        (3, 'o', 'b.txt', 'p/o/u3.txt', 't', printf('%064d', 1), 1, 'default', 'UPLOAD_FAILED', 1, 1, 1, NULL, 10);
    )sql");
  }
  auto l = open_at(path);
  CHECK(l->schema_version() == ledger::k_schema_version);
  auto r = l->find_file(3);
  REQUIRE(r);
  CHECK(r->relative_path == "b.txt");
  CHECK(r->run_prefix.empty());
  CHECK(r->dedup_scope == ledger::DedupScope::owner);
  // Found by the path they now have: newest first.
  auto found = l->find_by_path("o", "", "a.txt");
  REQUIRE(found.size() == 2);
  CHECK(found[0].id == 2);
  CHECK(found[1].id == 1);
  CHECK(l->find_by_path("o", "", "b.txt").empty()); // failed rows are not found
  // The migrated rows keep the old rule: a second alive 'owner' row of digest 1 is refused,
  // in any prefix; a 'prefix' row in another prefix is not theirs to refuse.
  ledger::Db db(path, 1000);
  auto insert = [&](const std::string &key, const std::string &prefix, const std::string &scope) {
    db.exec("INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,"
            " upload_status, created_at, updated_at, upload_deadline_at, relative_path, run_prefix,"
            " dedup_scope) VALUES ('o', 'c', '" +
            key + "', 't', printf('%064d', 1), 1, 'default', 'UPLOADING', 1, 1, 1, 'c', '" + prefix + "', '" +
            scope + "')");
  };
  CHECK_THROWS_AS(insert("k9", "other", "owner"), LodgeError);
  CHECK_THROWS_AS(insert("k9", "", "prefix"), LodgeError);
  insert("k10", "other", "prefix");
  CHECK_THROWS_AS(insert("k11", "other", "prefix"), LodgeError);
  insert("k12", "other", "none");
  insert("k13", "other", "none");
}

TEST_CASE(
    "only an open that may create makes a ledger: a missing path or an empty file is LEDGER_NOT_FOUND") {
  test::TempDir dir;
  ledger::OpenOptions o;
  o.location = dir.file("typo/ledger.db");
  CHECK(test::throws_errc([&] { (void)ledger::open_ledger(o); }, Errc::ledger_not_found,
                          "Run `lodge init --db " + o.location + "`"));
  CHECK_FALSE(std::filesystem::exists(dir.file("typo")));
  o.read_only = true;
  CHECK(test::throws_errc([&] { (void)ledger::open_ledger(o); }, Errc::ledger_not_found, o.location));
  CHECK_FALSE(std::filesystem::exists(dir.file("typo")));
  o.location = dir.file("empty.db");
  test::write_file(o.location, "");
  CHECK(test::throws_errc([&] { (void)ledger::open_ledger(o); }, Errc::ledger_not_found, "lodge init"));
  o.read_only = false;
  CHECK(test::throws_errc([&] { (void)ledger::open_ledger(o); }, Errc::ledger_not_found, "lodge init"));
  CHECK(errc_info(Errc::ledger_not_found).exit_code == 3);
  CHECK(errc_info(Errc::store_mismatch).exit_code == 2);
  o.create = true;
  auto l = ledger::open_ledger(o);
  CHECK(l->schema_version() == ledger::k_schema_version);
}

TEST_CASE("a ledger location is PostgreSQL as a postgres: or postgresql: URL or a libpq keyword string") {
  CHECK(ledger::is_postgres_location("postgres://lodge@db.example/lodge"));
  CHECK(ledger::is_postgres_location("postgresql://db.example:5432/lodge?sslmode=require"));
  CHECK(ledger::is_postgres_location("postgres:host=db.example dbname=lodge"));
  // A keyword string, as psql tells one (a '='), malformed ones included: never a file name.
  CHECK(ledger::is_postgres_location("host=db port=5432 dbname=lodge password=pw"));
  CHECK(ledger::is_postgres_location(" dbname = lodge"));
  CHECK(ledger::is_postgres_location("hots=db password='unterminated"));
  CHECK(ledger::is_postgres_location("data/a=b.db"));
  CHECK_FALSE(ledger::is_postgres_location("/var/lib/lodge/ledger.db"));
  CHECK_FALSE(ledger::is_postgres_location("/var/lib/a=b/ledger.db"));
  CHECK_FALSE(ledger::is_postgres_location("./a=b.db"));
  CHECK_FALSE(ledger::is_postgres_location("postgres.db"));
  CHECK_FALSE(ledger::is_postgres_location("./postgres://x"));
  CHECK_FALSE(ledger::is_postgres_location(""));
}

TEST_CASE("a URL of another scheme is refused as a ledger, and nothing is made of it") {
  ledger::OpenOptions o;
  o.location = "postgress://lodge:pw-in-url@db.example/lodge";
  o.create = true;
  try {
    (void)ledger::open_ledger(o);
    FAIL("opened");
  } catch (const LodgeError &e) {
    CHECK(e.error().code == Errc::config_invalid);
    CHECK(e.error().message.find("pw-in-url") == std::string::npos);
    CHECK(e.error().message.find("postgress://lodge:***@db.example/lodge") != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists("postgress:"));
}

TEST_CASE("the store binding: recorded once, kept unless rebound, read back by every connection") {
  test::TempDir dir;
  auto path = dir.file("l.db");
  auto l = open_at(path);
  CHECK_FALSE(l->store_binding().has_value());
  ledger::StoreBinding a{"s3", "http://127.0.0.1:9000", "bucket", "archive", "state"};
  ledger::StoreBinding b{"file", "", "/srv/x", "", "none"};
  auto r = l->bind_store(a, ledger::Rebind::no);
  CHECK(r.written);
  CHECK_FALSE(r.previous.has_value());
  r = l->bind_store(b, ledger::Rebind::no); // never silently rebinds
  CHECK_FALSE(r.written);
  CHECK(r.previous == a);
  r = l->bind_store(a, ledger::Rebind::yes); // the same store: nothing to write
  CHECK_FALSE(r.written);
  ledger::OpenOptions ro;
  ro.location = path;
  ro.read_only = true;
  CHECK(ledger::open_ledger(ro)->store_binding() == a);
  r = l->bind_store(b, ledger::Rebind::yes);
  CHECK(r.written);
  CHECK(r.previous == a);
  CHECK(open_at(path)->store_binding() == b);
}

TEST_CASE("v4 -> v5: the quota's counter starts from the alive rows the ledger has") {
  test::TempDir dir;
  auto path = dir.file("v4.db");
  make_old_ledger(path, "schema_v4.sql", 4);
  {
    ledger::Db db(path, 1000);
    db.exec(R"sql(
      INSERT INTO file_upload (id, owner_id, original_name, object_key, media_type, sha256, size, policy,
        upload_status, is_deleted, created_at, updated_at, activated_at, upload_deadline_at, relative_path) VALUES
        (1, 'o', 'a', 'p/o/u1/a', 't', printf('%064d', 1), 1, 'default', 'ACTIVE', 0, 1, 1, 2, 10, 'a'),
        (2, 'o', 'b', 'p/o/u2/b', 't', printf('%064d', 2), 1, 'default', 'UPLOADING', 0, 1, 1, NULL, 10, 'b'),
        (3, 'o', 'c', 'p/o/u3/c', 't', printf('%064d', 3), 1, 'default', 'UPLOAD_FAILED', 1, 1, 1, NULL, 10, 'c'),
        (4, 'p', 'a', 'p/p/u4/a', 't', printf('%064d', 1), 1, 'default', 'ACTIVE', 0, 1, 1, 2, 10, 'a');
    )sql");
  }
  auto l = open_at(path);
  CHECK(l->schema_version() == ledger::k_schema_version);
  ledger::Db db(path, 1000);
  CHECK(db.query_int("SELECT alive_files FROM owner_usage WHERE owner_id = 'o'") == 2);
  CHECK(db.query_int("SELECT alive_files FROM owner_usage WHERE owner_id = 'p'") == 1);
  // And follows the rows from then on: o's quota of 2 is full until one of its rows dies.
  ledger::ReserveRequest r;
  r.owner_id = "o";
  r.original_name = "d";
  r.media_type = "t";
  r.sha256 = std::string(63, '0') + "9";
  r.size = 1;
  r.policy = "default";
  r.deadline_ms = 10'000;
  r.max_files = 2;
  CHECK(l->reserve(r, 20).outcome == ledger::ReserveOutcome::quota_exceeded);
  REQUIRE(l->mark_failed(2, "gone", true, 20) == ledger::MarkFailedOutcome::failed);
  CHECK(l->reserve(r, 20).outcome == ledger::ReserveOutcome::reserved);
  CHECK(db.query_int("SELECT alive_files FROM owner_usage WHERE owner_id = 'o'") == 2);
}
