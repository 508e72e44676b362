// The uploader against a fake store: parts go up in parallel over separate connections,
// and every outcome leaves the ledger in the state the protocol promises.
#include "support.hpp"

#include <condition_variable>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/upload.hpp>
#include <lodge/util/log.hpp>
#include <mutex>
#include <stdexcept>

using namespace lodge;

namespace {
// Shared by every connection: counts parts in flight and remembers the most at once.
struct PartBoard {
  std::mutex mutex;
  std::condition_variable cv;
  int in_flight = 0;
  int most = 0;
  std::vector<int> numbers;
};

class PartStore : public store::ObjectStore {
public:
  explicit PartStore(PartBoard &b) : m_board(b) {}
  [[nodiscard]] std::string describe() const override { return "fake://"; }
  [[nodiscard]] const std::string &key_prefix() const override { return m_prefix; }
  Result<store::PutResult> put(const store::PutRequest &) override { return store::PutResult{"e", ""}; }
  Result<store::ObjectInfo> head(const std::string &k) override { return Error(Errc::not_found, k); }
  Status read(const std::string &, const std::function<bool(const char *, size_t)> &) override {
    return ok_status();
  }
  Status remove_all(const std::string &) override { return ok_status(); }
  Status list(const std::string &, const std::function<bool(const store::ObjectInfo &)> &) override {
    return ok_status();
  }
  Result<std::string> begin_multipart(const std::string &, const std::string &,
                                      const store::Metadata &) override {
    return std::string("upload-1");
  }
  Result<store::Part> put_part(const std::string &, const std::string &, int n, const store::Body &b,
                               int64_t) override {
    std::unique_lock lock(m_board.mutex);
    ++m_board.in_flight;
    m_board.most = std::max(m_board.most, m_board.in_flight);
    m_board.numbers.push_back(n);
    m_board.cv.notify_all();
    // Hold the part until a second one is in flight (or give up after a while, which
    // the test then reports as no parallelism).
    m_board.cv.wait_for(lock, std::chrono::seconds(2), [&] { return m_board.most >= 2; });
    --m_board.in_flight;
    return store::Part{n, "etag-" + std::to_string(n), b.sha256_hex};
  }
  Result<store::PutResult> complete_multipart(const std::string &, const std::string &,
                                              const std::vector<store::Part> &parts, int64_t) override {
    completed = parts;
    return store::PutResult{"final", ""};
  }
  Status abort_multipart(const std::string &, const std::string &) override { return ok_status(); }
  Status list_multipart(const std::string &,
                        const std::function<bool(const store::UploadInfo &)> &) override {
    return ok_status();
  }
  std::vector<store::Part> completed;

private:
  PartBoard &m_board;
  std::string m_prefix;
};
} // namespace

TEST_CASE("a multipart upload sends parts in parallel and completes them in order") {
  test::TempDir dir;
  ledger::OpenOptions o;
  o.path = dir.file("l.db");
  auto l = ledger::open_sqlite_ledger(o);
  PartBoard board;
  PartStore main_store(board);
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = 3;
  s.open_store = [&board]() -> std::unique_ptr<store::ObjectStore> {
    return std::make_unique<PartStore>(board);
  };
  std::string content;
  for (int i = 0; i < 5000; ++i)
    content.push_back(static_cast<char>('a' + i % 26));
  test::write_file(dir.file("big.txt"), content);
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  REQUIRE_MESSAGE(r.outcome == ops::UploadOutcome::active, (r.error ? r.error->message : ""));
  CHECK(board.most >= 2);
  CHECK(board.numbers.size() == 5);
  REQUIRE(main_store.completed.size() == 5);
  for (int i = 0; i < 5; ++i)
    CHECK(main_store.completed[static_cast<size_t>(i)].number == i + 1);
  auto row = l->find_file(*r.id);
  CHECK(row->upload_status == "ACTIVE");
  CHECK(row->multipart_upload_id == "upload-1");
  CHECK(l->find_task_for(*r.id)->status == "IGNORED");
}

namespace {
// A connection whose part uploads throw (a bug or bad_alloc deep in a store), on whichever
// thread sends the part.
class ThrowingPartStore final : public PartStore {
public:
  using PartStore::PartStore;
  Result<store::Part> put_part(const std::string &, const std::string &, int, const store::Body &,
                               int64_t) override {
    throw std::runtime_error("part store exploded");
  }
  Status abort_multipart(const std::string &, const std::string &id) override {
    aborted.push_back(id);
    return ok_status();
  }
  std::vector<std::string> aborted;
};
} // namespace

TEST_CASE("an exception in a part thread fails the upload and aborts the multipart upload") {
  test::TempDir dir;
  ledger::OpenOptions o;
  o.path = dir.file("l.db");
  auto l = ledger::open_sqlite_ledger(o);
  PartBoard board;
  ThrowingPartStore main_store(board);
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = 3;
  s.open_store = [&board]() -> std::unique_ptr<store::ObjectStore> {
    return std::make_unique<ThrowingPartStore>(board);
  };
  test::write_file(dir.file("big.txt"), std::string(5000, 'x'));
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  REQUIRE(r.error);
  CHECK(r.error->code == Errc::internal);
  CHECK(r.error->message.find("part store exploded") != std::string::npos);
  CHECK(main_store.aborted == std::vector<std::string>{"upload-1"});
  auto row = l->find_file(*r.id);
  CHECK(row->upload_status == "UPLOAD_FAILED");
}

namespace {
// Parts fail, and so does the abort that follows: the upload id must not vanish silently.
class AbortFailsStore final : public PartStore {
public:
  using PartStore::PartStore;
  Result<store::Part> put_part(const std::string &k, const std::string &, int, const store::Body &,
                               int64_t) override {
    return Error(Errc::storage_error, "PUT part of " + k + ": refused");
  }
  Status abort_multipart(const std::string &k, const std::string &) override {
    return Error(Errc::storage_unavailable, "DELETE " + k + ": connection reset");
  }
};
} // namespace

TEST_CASE("a failed abort of a multipart upload is logged with its key and upload id") {
  test::TempDir dir;
  ledger::OpenOptions o;
  o.path = dir.file("l.db");
  auto l = ledger::open_sqlite_ledger(o);
  PartBoard board;
  AbortFailsStore main_store(board);
  ops::UploadSettings s;
  s.policy.name = "default";
  s.owner = "o";
  s.multipart_threshold = 1024;
  s.part_size = 1024;
  s.part_concurrency = 1;
  test::write_file(dir.file("big.txt"), std::string(3000, 'y'));
  std::vector<std::string> warnings;
  util::log::set_level(util::log::Level::warn);
  util::log::set_sink([&](util::log::Level lvl, std::string_view line) {
    if (lvl == util::log::Level::warn) warnings.emplace_back(line);
  });
  ops::Uploader up(*l, main_store, s, util::system_clock());
  auto r = up.upload(dir.file("big.txt"));
  util::log::set_sink(nullptr);
  REQUIRE(r.outcome == ops::UploadOutcome::failed);
  CHECK(r.error->code == Errc::storage_error);
  std::string key = l->find_file(*r.id)->object_key;
  bool said = false;
  for (const auto &w : warnings)
    said = said || (w.find("upload-1") != std::string::npos && w.find(key) != std::string::npos &&
                    w.find("connection reset") != std::string::npos);
  CHECK_MESSAGE(said, "warnings: ", warnings.size());
}
