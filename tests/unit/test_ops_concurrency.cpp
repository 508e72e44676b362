// The adaptive concurrency controller (ops::ConcurrencyController), driven by samples with
// their time: a simulated store whose throughput is a function of the level, windows of
// whatever length a test chooses. No clock, no threads.
#include "support.hpp"

#include <functional>
#include <lodge/ops/upload/concurrency.hpp>
#include <lodge/ops/upload/open_files.hpp>
#include <vector>

using namespace lodge;

namespace {

// A run against a store that finishes rate(level) files a second: each step is one window
// (the controller's own length), its files and bytes added as they would have finished.
struct Sim {
  ops::ConcurrencyController c;
  std::function<double(int)> rate;
  ops::ConcurrencySample s;
  std::vector<ops::LevelChange> changes;
  uint64_t bytes_per_file = 16ULL * 1024;

  Sim(ops::ConcurrencyLimits l, std::function<double(int)> r) : c(l), rate(std::move(r)) {
    feed(); // the run's first sample starts the first window
  }
  void feed() {
    if (auto ch = c.observe(s)) changes.push_back(*ch);
  }
  // One window at the current level: long enough, and enough files, to end it.
  void plain_window(int64_t ms) {
    const auto files = static_cast<uint64_t>(rate(c.level()) * static_cast<double>(ms) / 1000.0);
    s.now_ms += ms;
    s.files += files;
    s.bytes += files * bytes_per_file;
    s.busy = c.level(); // every slot in use
    feed();
  }
  // One judged window: after a rise, the unjudged one first.
  void window(int64_t ms = 150) {
    if (c.settling()) plain_window(ms);
    plain_window(ms);
  }
  void windows(int n) {
    for (int i = 0; i < n; ++i)
      window();
  }
  void throttle(uint64_t answers = 1) {
    s.now_ms += 1;
    s.throttled += answers;
    feed();
  }
  void fail(uint64_t errors = 1) {
    s.now_ms += 1;
    s.errors += errors;
    feed();
  }
};

// A latency-bound store: every request takes 20 ms, whatever the level (W4's sink).
double latency_bound(int level) {
  return level * 50.0;
}

// A store that saturates at `knee` in flight: more adds nothing.
std::function<double(int)> saturating(int knee) {
  return [knee](int level) { return std::min(level, knee) * 50.0; };
}

} // namespace

TEST_CASE("concurrency: starts at 8 and doubles while the throughput grows") {
  Sim sim({}, latency_bound);
  CHECK(sim.c.level() == 8);
  sim.window();
  REQUIRE(sim.changes.size() == 1);
  CHECK(sim.changes[0].from == 8);
  CHECK(sim.changes[0].to == 16);
  CHECK(sim.changes[0].why == ops::LevelReason::probe); // nothing to compare the first window with
  sim.window();
  REQUIRE(sim.changes.size() == 2);
  CHECK(sim.changes[1].to == 32);
  CHECK(sim.changes[1].why == ops::LevelReason::grew);
  CHECK(sim.changes[1].gain == doctest::Approx(1.0).epsilon(0.02)); // twice the level, twice the files
  sim.windows(3);
  CHECK(sim.c.level() == 256);
  CHECK(sim.c.peak() == 256);
}

TEST_CASE("concurrency: a window ends only when long enough and every slot turned over once") {
  Sim sim({}, latency_bound);
  sim.s.now_ms += 50; // too short, however much finished
  sim.s.files += 100;
  sim.feed();
  CHECK(sim.changes.empty());
  Sim slow({}, latency_bound);
  slow.s.busy = 8;
  slow.s.now_ms += 250; // long enough, but fewer files than the level (8)
  slow.s.files += 5;
  slow.feed();
  CHECK(slow.changes.empty());
  // A long window ends with what it has.
  slow.s.now_ms += ops::ConcurrencyController::k_long_window_ms;
  slow.feed();
  REQUIRE(slow.changes.size() == 1);
  CHECK(slow.changes[0].to == 16);
  // Big files: each MiB sent counts as a file finished.
  Sim big({}, latency_bound);
  big.s.busy = 8;
  big.s.now_ms += 250;
  big.s.bytes += 16ULL << 20;
  big.feed();
  REQUIRE(big.changes.size() == 1);
  CHECK(big.changes[0].to == 16);
}

TEST_CASE("concurrency: the first window after a rise is not judged (its workers are still connecting)") {
  Sim sim({}, latency_bound);
  sim.window();
  REQUIRE(sim.c.level() == 16);
  CHECK(sim.c.settling());
  // The new workers open their connections: the window does no better than 8 did.
  sim.rate = [](int) { return 400.0; };
  sim.plain_window(150);
  CHECK(sim.c.level() == 16); // not judged: no way back to 8
  CHECK_FALSE(sim.c.settling());
  sim.rate = latency_bound;
  sim.plain_window(150);
  CHECK(sim.c.level() == 32);
  CHECK(sim.changes.back().why == ops::LevelReason::grew);
}

TEST_CASE("concurrency: no rise while the level is not all in use (fewer files than slots)") {
  Sim sim({}, latency_bound);
  for (int i = 0; i < 20; ++i) {
    sim.s.now_ms += 150;
    sim.s.files += 3;
    sim.s.bytes += 4ULL << 20;
    sim.s.busy = 3; // three files at a time, the walk finding no more
    sim.feed();
  }
  CHECK(sim.changes.empty());
  CHECK(sim.c.level() == 8);
  // Once the slots fill, it grows.
  sim.window();
  CHECK(sim.c.level() == 16);
}

TEST_CASE("concurrency: holds the level that paid once growing stops paying") {
  Sim sim({}, saturating(40));
  sim.windows(3); // 8 -> 16 -> 32 -> 64
  REQUIRE(sim.c.level() == 64);
  sim.window(); // 64 does 25% more than 32 (40 vs 32): still pays
  CHECK(sim.c.level() == 128);
  sim.window(); // 128 does no more than 64: back to 64
  CHECK(sim.c.level() == 64);
  CHECK(sim.changes.back().why == ops::LevelReason::not_worth_it);
  CHECK(sim.changes.back().gain == doctest::Approx(0.0).epsilon(0.02));
  const auto n = sim.changes.size();
  // Held: nothing moves until the probe, which does not pay either and comes back.
  sim.windows(ops::ConcurrencyController::k_probe_after - 1);
  CHECK(sim.changes.size() == n);
  CHECK(sim.c.level() == 64);
  sim.window();
  REQUIRE(sim.changes.size() == n + 1);
  CHECK(sim.changes.back().why == ops::LevelReason::probe);
  CHECK(sim.c.level() == 80);
  sim.window();
  CHECK(sim.c.level() == 64);
  CHECK(sim.changes.back().why == ops::LevelReason::not_worth_it);
  CHECK(sim.c.peak() == 128);
}

TEST_CASE("concurrency: a probe that pays is kept and the next step tried") {
  Sim sim({}, saturating(12));
  sim.windows(2); // 8 -> 16 (12 vs 8: +50%) -> 32
  REQUIRE(sim.c.level() == 32);
  sim.window(); // 32 no better than 16
  REQUIRE(sim.c.level() == 16);
  // The store gets faster: probes now pay, by a quarter at a time.
  sim.rate = latency_bound;
  sim.windows(ops::ConcurrencyController::k_probe_after);
  CHECK(sim.c.level() == 20);
  sim.window();
  CHECK(sim.c.level() == 25);
  CHECK(sim.changes.back().why == ops::LevelReason::grew);
}

TEST_CASE("concurrency: a throttling answer halves the level at once, one burst once") {
  Sim sim({}, latency_bound);
  sim.windows(3);
  REQUIRE(sim.c.level() == 64);
  sim.throttle(5);
  REQUIRE(sim.changes.back().why == ops::LevelReason::throttled);
  CHECK(sim.c.level() == 32);
  // More answers of the same burst (within a window): no further cut.
  sim.throttle(3);
  sim.throttle(1);
  CHECK(sim.c.level() == 32);
  // A later one halves again; then no doubling, only probes.
  sim.s.now_ms += 300;
  sim.throttle();
  CHECK(sim.c.level() == 16);
  sim.windows(ops::ConcurrencyController::k_probe_after);
  CHECK(sim.c.level() == 20);
  CHECK(sim.changes.back().why == ops::LevelReason::probe);
  // Down to 1, never below.
  for (int i = 0; i < 10; ++i) {
    sim.s.now_ms += 1000;
    sim.throttle();
  }
  CHECK(sim.c.level() == 1);
}

TEST_CASE("concurrency: errors take a quarter off") {
  Sim sim({}, latency_bound);
  sim.windows(2);
  REQUIRE(sim.c.level() == 32);
  sim.fail();
  CHECK(sim.c.level() == 24);
  CHECK(sim.changes.back().why == ops::LevelReason::errors);
  sim.s.now_ms += 1000;
  sim.fail(2);
  CHECK(sim.c.level() == 18);
}

TEST_CASE("concurrency: never above 256, nor above the open-file bound") {
  Sim sim({8, 1000, false, 100}, latency_bound); // asked for more than 256
  CHECK(sim.c.max() == ops::k_max_level);
  sim.windows(30);
  CHECK(sim.c.level() == 256);
  CHECK(sim.c.peak() == 256);
  // A small open-file limit: what fits of jobs x (parts + a worker's own descriptors).
  auto fit = ops::fit_adaptive(ops::k_start_level, ops::k_max_level, 4, 400);
  REQUIRE(fit.jobs == 400 / (4 + ops::k_worker_descriptors));
  Sim small({8, fit.jobs, false, 100}, latency_bound);
  small.windows(30);
  CHECK(small.c.level() == fit.jobs);
  CHECK(small.c.peak() == fit.jobs);
  // The bound lowered while running (a worker could not connect): the level follows.
  auto ch = small.c.lower_max(10, "no more connections");
  REQUIRE(ch);
  CHECK(ch->to == 10);
  CHECK(ch->why == ops::LevelReason::bound);
  CHECK(ch->detail == "no more connections");
  small.windows(30);
  CHECK(small.c.level() <= 10);
}

TEST_CASE("concurrency: a fixed level never moves") {
  Sim sim({8, 256, true, 100}, latency_bound);
  sim.windows(10);
  sim.throttle();
  sim.fail();
  CHECK_FALSE(sim.c.lower_max(2, "x"));
  CHECK(sim.c.level() == 8);
  CHECK(sim.c.peak() == 8);
  CHECK(sim.changes.empty());
}
