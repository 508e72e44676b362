// UploadLedger::reserve_batch on both databases, alone and through a pool's group commit:
// each reserve exactly as reserve() makes it, in order (a later one sees the earlier ones'
// rows), one that fails undone alone, and the quota and I4 held across batches racing.
#include "support.hpp"

#include <lodge/error.hpp>
#include <mutex>
#include <thread>
#include <vector>

using namespace lodge;
using ledger::ReserveOutcome;
using test::LedgerFixture;
using test::request;

namespace {
// A name long enough that the key for it is refused (BAD_NAME, thrown inside reserve).
std::string too_long_name() {
  return std::string(ledger::k_max_key_bytes, 'n') + ".txt";
}

int64_t alive_rows(ledger::Ledger &l, const std::string &owner) {
  return static_cast<int64_t>(l.list_files({.owner = owner}).size());
}

// What both ways of reaching the ledger must answer for one batch.
void check_one_batch(LedgerFixture &e, ledger::Ledger &via) {
  auto a = request("o", "a1");
  a.original_name = "a.txt";
  auto same = request("o", "a1"); // a's content at another path: a holds it
  same.original_name = "same.txt";
  auto bad = request("o", "b2");
  bad.original_name = too_long_name();
  auto c = request("o", "c3");
  c.original_name = "c.txt";
  auto out = via.reserve_batch({a, same, bad, c}, e.now());
  REQUIRE(out.size() == 4);
  REQUIRE(out[0]);
  CHECK(out[0].value().outcome == ReserveOutcome::reserved);
  REQUIRE(out[1]);
  CHECK(out[1].value().outcome == ReserveOutcome::in_progress);
  CHECK(out[1].value().record.id == out[0].value().record.id);
  REQUIRE_FALSE(out[2]);
  CHECK(out[2].error().code == Errc::bad_name);
  REQUIRE(out[3]);
  CHECK(out[3].value().outcome == ReserveOutcome::reserved);
  // Committed, each row with its task; nothing of the refused one.
  for (size_t i : {size_t{0}, size_t{3}}) {
    auto row = e.row(out[i].value().record.id);
    CHECK(row.upload_status == ledger::FileStatus::uploading);
    CHECK(e.task_of(row.id).status == ledger::TaskStatus::pending);
  }
  CHECK(alive_rows(*e.l, "o") == 2);
}
} // namespace

TEST_SUITE_BEGIN("sqlonly");

TEST_CASE("reserve_batch: each reserve as reserve() makes it, in order; one that throws is undone alone") {
  LedgerFixture e;
  check_one_batch(e, *e.l);
}

TEST_CASE("reserve_batch through a pool's worker (group-committed on SQLite): the same answers") {
  LedgerFixture e;
  auto pool = e.pool();
  auto w = pool->worker();
  check_one_batch(e, *w);
}

TEST_CASE(
    "reserve_batch: the quota counts the batch's own rows, and a reserve past the id block goes alone") {
  LedgerFixture e;
  std::vector<ledger::ReserveRequest> reqs;
  for (const char *seed : {"q1", "q2", "q3"}) {
    auto r = request("o", seed);
    r.original_name = std::string(seed) + ".txt";
    r.max_files = 2;
    reqs.push_back(r);
  }
  auto out = e.l->reserve_batch(reqs, e.now());
  REQUIRE(out.size() == 3);
  CHECK(out[0].value().outcome == ReserveOutcome::reserved);
  CHECK(out[1].value().outcome == ReserveOutcome::reserved);
  CHECK(out[2].value().outcome == ReserveOutcome::quota_exceeded);

  // The next id is the block's last: the first gets it, the second is rolled back alone.
  const int64_t next = out[1].value().record.id + 1;
  std::vector<ledger::ReserveRequest> more;
  for (const char *seed : {"i1", "i2"}) {
    auto r = request("p", seed);
    r.original_name = std::string(seed) + ".txt";
    r.id_limit = next;
    more.push_back(r);
  }
  auto got = e.l->reserve_batch(more, e.now());
  REQUIRE(got.size() == 2);
  CHECK(got[0].value().outcome == ReserveOutcome::reserved);
  CHECK(got[0].value().record.id <= next);
  CHECK(got[1].value().outcome == ReserveOutcome::id_limit_reached);
  CHECK(alive_rows(*e.l, "p") == 1);
}

TEST_CASE("reserve_batch: batches racing over the same contents and one quota keep I4 and the quota") {
  LedgerFixture e;
  auto pool = e.pool();
  constexpr int k_threads = 4, k_batches = 5, k_each = 6;
  std::mutex mu;
  std::vector<int64_t> reserved_shared; // rows reserved for the one content every batch holds
  int64_t reserved_quota = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&, t] {
      auto w = pool->worker();
      for (int b = 0; b < k_batches; ++b) {
        std::vector<ledger::ReserveRequest> reqs;
        for (int i = 0; i < k_each; ++i) {
          const std::string n = std::to_string(t) + "x" + std::to_string(b) + "x" + std::to_string(i);
          auto r = request(i % 2 == 0 ? "shared" : "quota", i % 2 == 0 ? "5a" : n);
          r.original_name = n + ".txt";
          if (i % 2 == 1) r.max_files = 7;
          reqs.push_back(r);
        }
        auto out = w->reserve_batch(reqs, e.now());
        std::lock_guard g(mu);
        for (size_t i = 0; i < out.size(); ++i) {
          REQUIRE(out[i]);
          if (out[i].value().outcome != ReserveOutcome::reserved) continue;
          if (i % 2 == 0)
            reserved_shared.push_back(out[i].value().record.id);
          else
            ++reserved_quota;
        }
      }
    });
  for (auto &th : threads)
    th.join();
  // One alive row for the content (I4); the quota's seven and no more.
  CHECK(reserved_shared.size() == 1);
  CHECK(alive_rows(*e.l, "shared") == 1);
  CHECK(reserved_quota == 7);
  CHECK(alive_rows(*e.l, "quota") == 7);
}

TEST_SUITE_END();
