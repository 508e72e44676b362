#pragma once
// `lodge upload`, per file: validate, digest, reserve, PUT (single or multipart) before the
// deadline, confirm — or mark failed and compensate. One Uploader per worker thread,
// each with its own ledger connection, store connection and type detector.

#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/inspect.hpp>
#include <lodge/store/store.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::ops {

enum class UploadOutcome { active, duplicate, replayed, rejected, failed };
[[nodiscard]] const char *to_string(UploadOutcome o);

struct UploadSettings {
  config::Policy policy;
  std::string owner;
  std::optional<std::string> idempotency_key;
  uint64_t multipart_threshold = 64ULL << 20;
  uint64_t part_size = 16ULL << 20;
  int part_concurrency = 1;
  // Opens another connection to the same store, for parts sent in parallel.
  std::function<std::unique_ptr<store::ObjectStore>()> open_store;
  int max_retries = 8;
  int64_t lease_ms = 120'000;
  CleanupSettings cleanup;
  bool follow_symlinks = false;
  std::string worker_id;
};

struct FileResult {
  std::string file;
  UploadOutcome outcome = UploadOutcome::failed;
  std::optional<int64_t> id;
  std::string object_key;
  std::string sha256;
  uint64_t size = 0;
  std::string media_type;
  std::optional<Error> error;
};

class Uploader {
public:
  Uploader(ledger::Ledger &ledger, store::ObjectStore &store, UploadSettings settings,
           const util::Clock &clock);
  // Never throws for a per-file problem: every failure is in the result.
  [[nodiscard]] FileResult upload(const std::string &path);

private:
  // Fills r as it goes (upload() reports what it holds if this throws).
  FileResult upload_unguarded(const std::string &path, FileResult &r);
  // The PUT (single or multipart); returns its etag and version id.
  Result<store::PutResult> transfer(int fd, const ledger::FileRecord &rec, const Digests &d,
                                    int64_t steady_deadline);
  // Sends every part, up to part_concurrency at once; the first failure stops the rest.
  Result<std::vector<store::Part>> put_parts(int fd, const ledger::FileRecord &rec, const Digests &d,
                                             const std::string &upload_id, int64_t steady_deadline);
  void fail(FileResult &r, const ledger::FileRecord &rec, const Error &e, bool definite);

  ledger::Ledger &m_ledger;
  store::ObjectStore &m_store;
  UploadSettings m_s;
  const util::Clock &m_clock;
  MediaTypeDetector m_detector;
  std::vector<char> m_buf;                                        // the read buffer, reused for every file
  std::vector<std::unique_ptr<store::ObjectStore>> m_part_stores; // extra connections, kept
};

// Walks inputs: regular files as given; directories recursively in sorted order,
// never following symlinks unless asked and never opening FIFOs, sockets or devices
// (those are reported to `visit` with an error). Files that are one of `skip` (the
// ledger and its -wal/-shm: uploading them would race our own writes) are passed over.
// Visit returns false to stop.
void walk_inputs(
    const std::vector<std::string> &paths, bool follow_symlinks, const std::vector<std::string> &skip,
    const std::function<bool(const std::string &path, const std::optional<Error> &error)> &visit);

} // namespace lodge::ops
