#pragma once
// What every room of an upload is given besides its ledger role (ledger::UploaderLedger): its
// settings (UploadSettings) and the counters a run's progress line reads (Progress). The uploader
// (upload.hpp), the rooms it works through and direct uploads (direct.hpp) share them.

#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ops/cleanup.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/upload/listing_cache.hpp>
#include <lodge/store/store.hpp>
#include <memory>
#include <optional>
#include <string>

namespace lodge::ops {

// What a run's progress line shows besides finished files, shared by its workers: the
// bytes sent so far (parts included, counted as they leave; a retried attempt's are taken
// back) and the hashing pass of files still being read before their reservation.
struct Progress {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> hashed{0};       // bytes hashed so far of the files being hashed now
  std::atomic<uint64_t> hashing_size{0}; // the sizes of those files
  std::atomic<int> hashing{0};           // how many files are being hashed now
  // Files whose bytes are stored and checked, counted then (their confirms may still be
  // pending): an adaptive run's throughput, not held back by confirms settled in batches.
  std::atomic<uint64_t> stored{0};
};

struct UploadSettings {
  config::Policy policy;
  std::string owner;
  std::optional<std::string> idempotency_key;
  // The run's --prefix (checked with config::run_prefix_problem), "" for none: keys are
  // <root>/<owner>/[<run_prefix>/]<uuid>/<relative path>.
  std::string run_prefix;
  uint64_t multipart_threshold = 64ULL << 20;
  uint64_t part_size = 16ULL << 20;
  int part_concurrency = 1;
  // Opens another connection to the same store, for parts sent in parallel.
  std::function<std::unique_ptr<store::ObjectStore>()> open_store;
  // Opens another connection to the same ledger, for the sender thread (send_ahead): a PUT in
  // flight there renews its row through it as its bytes flow. Null: such a PUT is not renewed.
  std::function<std::shared_ptr<ledger::UploadLedger>()> open_ledger;
  int max_retries = 8;
  int64_t lease_ms = 120'000;
  CleanupSettings cleanup;
  bool follow_symlinks = false;
  std::string worker_id;
  // The run's id blocks, shared by its workers (one is made per Reservation when unset).
  std::shared_ptr<IdBlocks> id_blocks;
  // The run's listings, shared by its workers: a would-be duplicate's object proven there by
  // a listing is not HEADed (ListingCache). Null: each one is HEADed.
  std::shared_ptr<ListingCache> listings;
  // What the objects carry: the policy's options with the flags over them, validated and
  // accepted by the store before the run starts.
  store::ObjectOptions options;
  // Each row reserved expires this long after its reserve (ReserveRequest::expires_at);
  // nullopt: never.
  std::optional<int64_t> expire_after_ms;
  bool checksum = false; // --checksum: every file read and hashed; the stat cache not asked
  bool replace = false;  // --replace: a new file at a path retires the path's older rows once ACTIVE
  bool dry_run = false;  // --dry-run: decide, write nothing (neither ledger nor store)
  std::shared_ptr<Progress> progress; // null: nobody is watching
  // Pipelined (upload_next): a file's single PUT goes out on a sender thread over its own
  // connection (open_store) while the worker opens, hashes and reserves the next file, so
  // the ledger's commit and the hash hide behind the request's wait. At most one file per
  // Uploader, or one batch of small files (Uploader::upload_batch), is reserved and not yet
  // sent (a deadline runs from its reserve: it waits for one PUT, or for the batch's PUTs
  // ahead of it, about one ask of the ledger's time); a PUT begins only after its reserve
  // committed (I2). Parts stay on the worker.
  bool send_ahead = false;
  // The files a batch holds at most (Uploader::batch_limit); 0: as the worker's measured PUT
  // and ledger times say.
  size_t batch_files = 0;
};

} // namespace lodge::ops
