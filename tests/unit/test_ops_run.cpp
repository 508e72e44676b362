// The upload run (ops::run_upload) on the ledger fake and the fake store: the exit status
// of every mix of outcomes, cancellation, the bound on waiting for another sender, and the
// order in which the observer hears of it all. No network, no real sleeping.
#include "fake_store.hpp"
#include "manual_clock.hpp"
#include "ops_fixture.hpp"
#include "support.hpp"
#include "support/fake_ledger.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <lodge/crypto/sha256.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

using namespace lodge;

namespace {

// Every event, in order, as text: "result NAME OUTCOME", "progress DONE/TOTAL", "finish".
class Recorder final : public ops::RunObserver {
public:
  std::vector<std::string> events;
  std::vector<ops::FileResult> results;
  std::vector<ops::LevelChange> levels;
  std::optional<ops::RunReport> report;
  std::function<void(const ops::FileResult &)> after_result;

  void on_recovered(int64_t n) override { events.push_back("recovered " + std::to_string(n)); }
  void on_result(const ops::FileResult &r) override {
    auto slash = r.file.rfind('/');
    events.push_back("result " + r.file.substr(slash + 1) + " " + ops::to_string(r.outcome));
    results.push_back(r);
    if (after_result) after_result(r);
  }
  void on_progress(const ops::RunProgress &p) override {
    events.push_back("progress " + std::to_string(p.files_done) + "/" + std::to_string(p.files_total));
  }
  void on_concurrency(const ops::LevelChange &c) override {
    events.push_back("concurrency " + std::to_string(c.from) + " -> " + std::to_string(c.to) + " " +
                     ops::to_string(c.why));
    levels.push_back(c);
  }
  void on_finish(const ops::RunReport &r) override {
    events.emplace_back("finish");
    report = r;
  }
};

// The fakes, files in a temporary directory, and a run over them.
struct World {
  test::TempDir dir;
  test::ManualClock clock;
  test::FakeLedger l;
  test::FakeLedgerPool pool{l};
  test::FakeStore store;
  config::Config cfg;
  ops::StopWord cancel;
  int64_t paused_ms = 0;
  std::function<void()> on_pause;
  ops::RunSpec spec;
  // What the store's retry loop would count (StoreOptions::backpressure).
  std::shared_ptr<util::Backpressure> backpressure = std::make_shared<util::Backpressure>();

  World() {
    spec.settings.policy.name = "default";
    spec.settings.owner = "o";
    spec.settings.worker_id = "test";
    spec.settings.open_store = [this]() -> std::unique_ptr<store::ObjectStore> { return store.connection(); };
    spec.jobs = 2;
    spec.recover = false;
  }

  std::string file(const std::string &name, const std::string &content) {
    test::write_file(dir.file(name), content);
    return dir.file(name);
  }

  ops::RunReport run(Recorder &obs) {
    ops::RunDeps deps{l,
                      [this] { return pool.worker(); },
                      store,
                      [this]() -> std::unique_ptr<store::ObjectStore> { return store.connection(); },
                      cfg,
                      clock,
                      cancel,
                      [this](int64_t ms) {
                        paused_ms += ms;
                        clock.advance(ms);
                        if (on_pause) on_pause();
                      },
                      backpressure};
    return ops::run_upload(spec, deps, obs);
  }

  // An UPLOADING row of `content`, as another sender (`holder`) reserved it.
  ledger::FileRecord held(const std::string &name, const std::string &content, const std::string &holder,
                          int64_t deadline_ms = 3'600'000) {
    ledger::ReserveRequest r;
    r.owner_id = "o";
    r.original_name = name;
    r.relative_path = name;
    r.media_type = "text/plain";
    r.sha256 = crypto::sha256_hex(content);
    r.size = static_cast<int64_t>(content.size());
    r.policy = "default";
    r.deadline_ms = deadline_ms;
    r.grace_ms = 1'000;
    r.max_retries = 8;
    r.holder = holder;
    auto res = l.reserve(r, clock.now_ms());
    REQUIRE(res.outcome == ledger::ReserveOutcome::reserved);
    return res.record;
  }

  // The other sender finishes: its object stored with lodge's stamp, its row confirmed.
  void finish_held(const ledger::FileRecord &rec) {
    auto p = test::stamped_put(rec, l.uuid(), rec.id);
    REQUIRE(store.put(p));
    REQUIRE(l.confirm(rec.id, "etag", "", clock.now_ms()) == ledger::ConfirmOutcome::confirmed);
  }
};

// A live sender on another host: never judged gone here, so only the bound ends the wait.
const std::string k_foreign_holder = "boot=b pidns=1 pid=4242 start=7 host=elsewhere";

ops::RunReport report_of(const ops::RunTally &t, bool interrupted = false, bool broken_pipe = false) {
  ops::RunReport r;
  r.tally = t;
  r.interrupted = interrupted;
  r.broken_pipe = broken_pipe;
  return r;
}

} // namespace

TEST_CASE("exit status: every mix of outcomes") {
  struct Row {
    const char *what;
    ops::RunTally t;
    bool interrupted = false;
    bool broken_pipe = false;
    ops::RunExit want;
    int status;
  };
  auto tally = [](std::map<std::string, int64_t> m) {
    ops::RunTally t;
    t.active = m["active"];
    t.duplicate = m["duplicate"];
    t.replayed = m["replayed"];
    t.rejected = m["rejected"];
    t.failed = m["failed"];
    t.skipped = m["skipped"];
    t.planned = m["planned"];
    t.in_progress = m["in_progress"];
    t.storage_failures = m["storage"];
    t.ledger_failures = m["ledger"];
    t.files =
        t.active + t.duplicate + t.replayed + t.rejected + t.failed + t.skipped + t.planned + t.in_progress;
    return t;
  };
  const std::vector<Row> rows = {
      {"nothing at all", tally({}), false, false, ops::RunExit::ok, 0},
      {"all stored", tally({{"active", 3}}), false, false, ops::RunExit::ok, 0},
      {"duplicates, replays, skips", tally({{"duplicate", 1}, {"replayed", 1}, {"skipped", 2}}), false, false,
       ops::RunExit::ok, 0},
      {"a dry run's plan", tally({{"planned", 4}}), false, false, ops::RunExit::ok, 0},
      {"one rejected", tally({{"active", 1}, {"rejected", 1}}), false, false, ops::RunExit::items_failed, 1},
      {"one failed", tally({{"active", 1}, {"failed", 1}}), false, false, ops::RunExit::items_failed, 1},
      {"one in progress elsewhere", tally({{"active", 1}, {"in_progress", 1}}), false, false,
       ops::RunExit::items_failed, 1},
      {"only in progress", tally({{"in_progress", 2}}), false, false, ops::RunExit::items_failed, 1},
      {"every failure the ledger's, nothing done", tally({{"failed", 2}, {"ledger", 2}}), false, false,
       ops::RunExit::ledger_unusable, 3},
      {"the ledger's, and a file stored", tally({{"active", 1}, {"failed", 1}, {"ledger", 1}}), false, false,
       ops::RunExit::items_failed, 1},
      {"the ledger's and another failure", tally({{"failed", 2}, {"ledger", 1}}), false, false,
       ops::RunExit::items_failed, 1},
      {"the ledger's and one in progress", tally({{"failed", 1}, {"ledger", 1}, {"in_progress", 1}}), false,
       false, ops::RunExit::items_failed, 1},
      {"every failure the store unreachable", tally({{"failed", 3}, {"storage", 3}}), false, false,
       ops::RunExit::storage_unavailable, 4},
      {"the store unreachable, duplicates found", tally({{"duplicate", 1}, {"failed", 1}, {"storage", 1}}),
       false, false, ops::RunExit::storage_unavailable, 4},
      {"the store unreachable, one stored", tally({{"active", 1}, {"failed", 1}, {"storage", 1}}), false,
       false, ops::RunExit::items_failed, 1},
      {"the store unreachable, one rejected", tally({{"rejected", 1}, {"failed", 1}, {"storage", 1}}), false,
       false, ops::RunExit::items_failed, 1},
      {"the store unreachable and another failure", tally({{"failed", 2}, {"storage", 1}}), false, false,
       ops::RunExit::items_failed, 1},
      {"interrupted", tally({{"active", 1}}), true, false, ops::RunExit::interrupted, 130},
      {"interrupted with failures", tally({{"failed", 2}, {"storage", 2}}), true, false,
       ops::RunExit::interrupted, 130},
      {"stdout closed", tally({{"active", 1}}), true, true, ops::RunExit::broken_pipe, 141},
      {"a broken pipe is said only when interrupted", tally({{"active", 1}}), false, true, ops::RunExit::ok,
       0},
  };
  for (const auto &row : rows) {
    CAPTURE(row.what);
    auto rep = report_of(row.t, row.interrupted, row.broken_pipe);
    CHECK(ops::run_exit(rep) == row.want);
    CHECK(ops::exit_status(rep) == row.status);
  }
  CHECK(ops::is_ledger_failure(Error(Errc::ledger_locked, "x")));
  CHECK(ops::is_ledger_failure(Error(Errc::ledger_unavailable, "x")));
  CHECK_FALSE(ops::is_ledger_failure(Error(Errc::storage_unavailable, "x")));
}

TEST_CASE("run: the observer hears every result, each followed by a snapshot, then the finish") {
  World w;
  w.spec.paths = {w.file("a.txt", "alpha\n"), w.file("b.txt", "beta\n"), w.dir.file("missing.txt")};
  w.spec.progress_interval_ms = 3'600'000; // snapshots after results only
  Recorder obs;
  auto rep = w.run(obs);

  REQUIRE(obs.events.size() == 7);
  std::multiset<std::string> results;
  for (size_t i = 0; i < 6; i += 2) {
    CHECK(obs.events[i].rfind("result ", 0) == 0);
    results.insert(obs.events[i]);
    // Each result is followed by the snapshot that counts it.
    CHECK(obs.events[i + 1].rfind("progress " + std::to_string(i / 2 + 1) + "/", 0) == 0);
  }
  CHECK(results == std::multiset<std::string>{"result a.txt active", "result b.txt active",
                                              "result missing.txt rejected"});
  CHECK(obs.events.back() == "finish");
  REQUIRE(obs.report);
  CHECK(obs.report->tally.files == rep.tally.files);
  CHECK(rep.tally.files == 3);
  CHECK(rep.tally.active == 2);
  CHECK(rep.tally.rejected == 1);
  CHECK(rep.tally.bytes == 11);
  CHECK_FALSE(rep.interrupted);
  CHECK(ops::exit_status(rep) == 1);
  // One ledger per worker that took a file (a worker connects once it has one): two workers,
  // so one or two.
  CHECK(w.pool.handed() >= 1);
  CHECK(w.pool.handed() <= 2);
  for (const auto &r : obs.results)
    if (r.outcome == ops::UploadOutcome::active)
      CHECK(w.l.row(*r.id).upload_status == ledger::FileStatus::active);
}

TEST_CASE("run: a worker connects once it has a file: eight workers for one file open one ledger") {
  World w;
  w.spec.jobs = 8;
  w.spec.paths = {w.file("only.txt", "alone\n")};
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == 1);
  CHECK(w.pool.handed() == 1);
}

TEST_CASE("run: with no progress wanted, no snapshots; a files-from stream is read") {
  World w;
  std::istringstream list(w.file("a.txt", "alpha\n") + "\n\n" + w.file("b.txt", "beta\n") + "\n");
  w.spec.files_from_stream = &list;
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == 2);
  CHECK(obs.events.size() == 3);
  CHECK(obs.events.back() == "finish");
}

TEST_CASE("run: a stop after N files starts nothing new, and the files in flight finish") {
  World w;
  // More than two workers can have in flight: each takes up a batch of small files at once,
  // and leaves as many confirms pending.
  w.spec.settings.batch_files = ops::Uploader::k_batch_files;
  for (int i = 0; i < 100; ++i)
    w.spec.paths.push_back(w.file("f" + std::to_string(i) + ".txt", "content " + std::to_string(i)));
  w.spec.jobs = 2;
  Recorder obs;
  int64_t in_flight_at_stop = -1;
  size_t reported_at_stop = 0;
  obs.after_result = [&](const ops::FileResult &) {
    if (obs.results.size() == 3 && in_flight_at_stop < 0) {
      in_flight_at_stop = w.cancel.stop();
      reported_at_stop = obs.results.size();
    }
  };
  auto rep = w.run(obs);

  CHECK(rep.interrupted);
  CHECK(ops::exit_status(rep) == 130);
  REQUIRE(in_flight_at_stop >= 0);
  // Exactly the files in flight at the stop were reported after it; none began later.
  CHECK(obs.results.size() == reported_at_stop + static_cast<size_t>(in_flight_at_stop));
  CHECK(obs.results.size() < 100);
  CHECK(w.l.count("reserve") == obs.results.size());
  // Each one finished: no row is left UPLOADING.
  for (const auto &row : w.l.list_files({.owner = "o", .include_dead = true}))
    CHECK(row.upload_status == ledger::FileStatus::active);
  CHECK_FALSE(w.cancel.begin_file());
}

TEST_CASE("run: content a live sender elsewhere holds is waited for up to the bound, then in_progress") {
  World w;
  const std::string content = "held content\n";
  auto other = w.held("other/doc.txt", content, k_foreign_holder);
  w.spec.paths = {w.file("doc.txt", content)};
  w.spec.in_progress_wait_ms = 30'000;
  Recorder obs;
  const int64_t start = w.clock.now_ms();
  auto rep = w.run(obs);

  REQUIRE(obs.results.size() == 1);
  const auto &r = obs.results[0];
  CHECK(r.outcome == ops::UploadOutcome::in_progress);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::in_progress);
  CHECK(r.error->message.find("being uploaded by pid 4242 on elsewhere") != std::string::npos);
  CHECK(rep.tally.in_progress == 1);
  CHECK(ops::exit_status(rep) == 1);
  // Waited the bound, not the sender's hour-long deadline.
  CHECK(w.clock.now_ms() - start >= 30'000);
  CHECK(w.clock.now_ms() - start <= 30'000 + 1'000);
  CHECK(w.paused_ms <= 30'000);
  CHECK(w.l.row(other.id).upload_status == ledger::FileStatus::uploading);
}

TEST_CASE("run: a direct reservation's content is reported in_progress at once, naming it") {
  World w;
  const std::string content = "reserved for a curl\n";
  const int64_t until = w.clock.now_ms() + 3'600'000;
  auto other = w.held("doc.txt", content, "direct until=" + std::to_string(until), 4'500'000);
  w.spec.paths = {w.file("doc.txt", content)};
  Recorder obs;
  auto rep = w.run(obs);

  REQUIRE(obs.results.size() == 1);
  CHECK(obs.results[0].outcome == ops::UploadOutcome::in_progress);
  REQUIRE(obs.results[0].error);
  CHECK(obs.results[0].error->message == "held by direct reservation #" + std::to_string(other.id) +
                                             " until " + util::format_utc(until, "%Y-%m-%dT%H:%M:%SZ"));
  CHECK(w.paused_ms == 0); // never waited
  CHECK(ops::exit_status(rep) == 1);
}

TEST_CASE("run: a sender that finishes within the bound makes the waiting file a duplicate") {
  World w;
  const std::string content = "soon done\n";
  auto other = w.held("doc.txt", content, k_foreign_holder);
  w.spec.paths = {w.file("doc.txt", content)};
  int pauses = 0;
  w.on_pause = [&] {
    if (++pauses == 3) w.finish_held(other);
  };
  Recorder obs;
  auto rep = w.run(obs);

  REQUIRE(obs.results.size() == 1);
  CHECK(obs.results[0].outcome == ops::UploadOutcome::duplicate);
  // The same row, or a row of this path sharing its object.
  CHECK((obs.results[0].id == other.id || obs.results[0].shares == other.id));
  CHECK(rep.tally.duplicate == 1);
  CHECK(ops::exit_status(rep) == 0);
  CHECK(w.paused_ms < 30'000);
}

namespace {
// What each PUT saw of the ledger as it began, and whether the worker's next reserve began
// while that PUT was held in flight.
struct PutWatch {
  std::mutex mutex;
  std::condition_variable cv;
  int reserves_begun = 0;
  int puts = 0;
  int max_reserved_ahead = 0; // reserves begun minus PUTs begun, at a PUT's start
  int overlapped = 0;         // PUTs during which the next file's reserve began
  std::vector<std::string> problems;

  // Counts each reserve as it begins (before_next is one-shot: it re-arms itself).
  void arm(test::FakeLedger &l) {
    l.before_next("reserve", [this, &l] {
      {
        std::lock_guard lock(mutex);
        ++reserves_begun;
      }
      cv.notify_all();
      arm(l);
    });
  }
};
} // namespace

TEST_CASE("run: a PUT begins only after its row and task committed; the next files are reserved meanwhile, "
          "one batch of small files in one transaction") {
  World w;
  constexpr int k_files = 6;
  w.spec.settings.batch_files = ops::Uploader::k_batch_files; // not left to the measured times
  for (int i = 0; i < k_files; ++i)
    w.spec.paths.push_back(w.file("f" + std::to_string(i) + ".txt", "content " + std::to_string(i)));
  w.spec.jobs = 1;
  PutWatch watch;
  watch.arm(w.l);
  w.store.on_put = [&](const std::string &key) {
    std::optional<ledger::FileRecord> row;
    w.l.rows_by_key(key, "", [&](const ledger::FileRecord &r) {
      if (r.object_key == key) row = r;
      return !row;
    });
    auto task = row ? w.l.find_task_for(row->id) : std::nullopt;
    std::unique_lock lock(watch.mutex);
    if (!row || row->upload_status != ledger::FileStatus::uploading)
      watch.problems.push_back("PUT of " + key + " before its row was reserved");
    if (!task || task->status != ledger::TaskStatus::pending)
      watch.problems.push_back("PUT of " + key + " before its task was committed");
    const int n = ++watch.puts;
    watch.max_reserved_ahead = std::max(watch.max_reserved_ahead, watch.reserves_begun - n);
    if (n == k_files) return;
    // Held in flight until the worker begins the next file's reserve (never, unpipelined).
    if (watch.cv.wait_for(lock, std::chrono::seconds(10), [&] { return watch.reserves_begun > n; }))
      ++watch.overlapped;
  };
  Recorder obs;
  auto rep = w.run(obs);

  CHECK(rep.tally.active == k_files);
  CHECK(watch.problems.empty());
  CHECK(watch.puts == k_files);
  CHECK(watch.overlapped == k_files - 1);
  // The six small files were reserved together, in one ledger transaction, before the first
  // PUT; each then waits for the PUTs ahead of it, a batch's bytes at most.
  CHECK(w.l.count("reserve_batch") == 1);
  CHECK(w.l.count("reserve") == k_files);
  CHECK(watch.max_reserved_ahead == k_files - 1);
  // One worker: results in the files' order.
  REQUIRE(obs.results.size() == static_cast<size_t>(k_files));
  for (int i = 0; i < k_files; ++i)
    CHECK(obs.events[static_cast<size_t>(i)] == "result f" + std::to_string(i) + ".txt active");
}

TEST_CASE("run: files that together pass a batch's bytes are reserved one at a time, one ahead at most") {
  World w;
  w.spec.settings.batch_files = ops::Uploader::k_batch_files;
  constexpr int k_files = 4;
  // Each over half a batch's bytes: no two fit in one, so each waits for one PUT at most.
  const std::string big(ops::Uploader::k_batch_bytes / 2 + 1, 'x');
  for (int i = 0; i < k_files; ++i)
    w.spec.paths.push_back(w.file("f" + std::to_string(i) + ".txt", big + std::to_string(i)));
  w.spec.jobs = 1;
  PutWatch watch;
  watch.arm(w.l);
  w.store.on_put = [&](const std::string &) {
    std::unique_lock lock(watch.mutex);
    const int n = ++watch.puts;
    watch.max_reserved_ahead = std::max(watch.max_reserved_ahead, watch.reserves_begun - n);
  };
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == k_files);
  CHECK(w.l.count("reserve_batch") == 0);
  CHECK(w.l.count("reserve") == k_files);
  CHECK(watch.max_reserved_ahead <= 1);
}

TEST_CASE("run: a batch holds as many files as a worker's PUTs send in one ask of the ledger") {
  using ops::batch_size_for;
  CHECK(batch_size_for(0, 2'000, 16) == 1); // nothing measured yet
  CHECK(batch_size_for(300, 0, 16) == 1);
  CHECK(batch_size_for(300, 2'000, 16) == 7);    // a store on this machine: the ledger's wait rules
  CHECK(batch_size_for(20'000, 1'500, 16) == 1); // S3's latency rules: one by one
  CHECK(batch_size_for(10, 100'000, 16) == 16);  // never more than the most
}

TEST_CASE("run: a file whose content is the PUT in flight waits for it and is its duplicate, in order") {
  World w;
  w.spec.paths = {w.file("a.txt", "alpha\n"), w.file("b.txt", "beta\n"), w.file("c.txt", "beta\n"),
                  w.file("d.txt", "delta\n")};
  w.spec.jobs = 1;
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == 3);
  CHECK(rep.tally.duplicate == 1);
  CHECK(obs.events == std::vector<std::string>{"result a.txt active", "result b.txt active",
                                               "result c.txt duplicate", "result d.txt active", "finish"});
}

TEST_CASE("run: a PUT that fails on the sender fails its row, and the next files go on") {
  World w;
  w.spec.paths = {w.file("a.txt", "alpha\n"), w.file("b.txt", "beta\n"), w.file("c.txt", "gamma\n")};
  w.spec.jobs = 1;
  w.store.fail("put", Error(Errc::storage_error, "injected refusal"), 1);
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.failed == 1);
  CHECK(rep.tally.active == 2);
  REQUIRE(obs.results.size() == 3);
  CHECK(obs.events[0] == "result a.txt failed");
  REQUIRE(obs.results[0].id);
  CHECK(w.l.row(*obs.results[0].id).upload_status == ledger::FileStatus::upload_failed);
  CHECK_FALSE(w.store.has(obs.results[0].object_key));
}

TEST_CASE("run: adaptive: a store asking to slow down brings the level down, and every file still goes") {
  World w;
  constexpr int k_files = 30;
  for (int i = 0; i < k_files; ++i)
    w.spec.paths.push_back(w.file("f" + std::to_string(i) + ".txt", "content " + std::to_string(i)));
  w.spec.jobs_fixed = false;
  w.spec.jobs = 8;
  // The first PUTs are answered 503 SlowDown once each and go through on the retry: the
  // retry loop counts the answers, the files never see them.
  std::atomic<int> puts{0};
  w.store.on_put = [&](const std::string &) {
    if (++puts <= 3) w.backpressure->throttled.fetch_add(1);
  };
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == k_files);
  CHECK(rep.concurrency.adaptive);
  CHECK(rep.concurrency.peak == 8);
  CHECK(rep.concurrency.level < 8);
  REQUIRE_FALSE(obs.levels.empty());
  CHECK(obs.levels[0].from == 8);
  CHECK(obs.levels[0].to == 4);
  CHECK(obs.levels[0].why == ops::LevelReason::throttled);
  CHECK(rep.concurrency.changes == static_cast<int>(obs.levels.size()));
}

TEST_CASE("run: adaptive: files failing THROTTLED bring the level down; a fixed run never moves") {
  World w;
  for (int i = 0; i < 12; ++i)
    w.spec.paths.push_back(w.file("f" + std::to_string(i) + ".txt", "content " + std::to_string(i)));
  w.spec.jobs = 8;
  SUBCASE("adaptive") {
    w.spec.jobs_fixed = false;
    w.store.fail("put", Error(Errc::throttled, "HTTP 503 SlowDown"), 2);
    Recorder obs;
    auto rep = w.run(obs);
    CHECK(rep.tally.failed == 2);
    CHECK(rep.tally.active == 10);
    CHECK(rep.concurrency.level < 8);
    REQUIRE_FALSE(obs.levels.empty());
    CHECK(obs.levels[0].why == ops::LevelReason::throttled);
  }
  SUBCASE("fixed") {
    w.store.fail("put", Error(Errc::throttled, "HTTP 503 SlowDown"), 2);
    w.backpressure->throttled = 5;
    Recorder obs;
    auto rep = w.run(obs);
    CHECK(rep.tally.failed == 2);
    CHECK_FALSE(rep.concurrency.adaptive);
    CHECK(rep.concurrency.level == 8);
    CHECK(rep.concurrency.peak == 8);
    CHECK(obs.levels.empty());
  }
}

TEST_CASE("run: adaptive: a large file takes a slot per part it sends at once") {
  World w;
  // Four files of four 1 KiB parts, four parts at once each: at the start level (8), two files.
  w.spec.settings.multipart_threshold = 1024;
  w.spec.settings.part_size = 1024;
  w.spec.settings.part_concurrency = 4;
  for (int i = 0; i < 4; ++i)
    w.spec.paths.push_back(
        w.file("big" + std::to_string(i) + ".bin", std::string(4096, static_cast<char>('a' + i))));
  w.spec.jobs_fixed = false;
  w.spec.jobs = 8;
  std::mutex mutex;
  std::condition_variable cv;
  int in_flight = 0, most = 0, arrived = 0;
  // Each part is held until all sixteen have arrived, or a second passed: past the level, the
  // other two files' parts would arrive too; within it, they wait for the first two files.
  w.store.on_put_part = [&](int) {
    std::unique_lock lock(mutex);
    most = std::max(most, ++in_flight);
    ++arrived;
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(1), [&] { return arrived == 16; });
    --in_flight;
  };
  Recorder obs;
  auto rep = w.run(obs);
  CHECK(rep.tally.active == 4);
  CHECK(rep.concurrency.peak == 8);
  CHECK(most == 8);
}
