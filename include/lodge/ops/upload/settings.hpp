#pragma once
// An upload's settings from the configuration and what the command was given, assembled here
// once: for `lodge upload`'s run (with its concurrency, queue, filter and skips) and for the
// direct uploads (`lodge reserve`, `lodge confirm`). The caller parses its flags (their
// grammar is config's) and hands the values in; nothing here reads the environment or prints.

#include <cstdint>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/match/filter.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/ops/upload/upload.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lodge::ops {

// What a command was given for the objects it stores, over the policy's object options.
struct ObjectInputs {
  std::string content_type, storage_class, sse, sse_kms_key_id, cache_control;
  std::vector<std::string> metadata, tags; // NAME=VALUE each, as given (--metadata, --tag)
  // --ci-metadata: the CI job's names (config::ci_metadata), read from `env` (handed in).
  bool ci_metadata = false;
  const std::map<std::string, std::string> *env = nullptr;
};
// The policy's object options with the given ones over them, checked before anything is
// recorded: their shape here, what the store can keep by the store. --ci-metadata's values are
// over the policy's, and an explicit --metadata of the same name over them.
[[nodiscard]] store::ObjectOptions object_options(const ObjectInputs &in, const config::Policy &p);

// What an upload or a direct upload was given. The values of --part-size, --part-concurrency
// and --expire-after are read here, in the order the settings take them (config's grammar,
// USAGE naming the flag).
struct UploadInputs {
  std::string policy = "default";
  std::string prefix;     // checked by the caller
  bool with_owner = true; // confirm goes by the record's id alone
  std::string idempotency_key;
  std::string part_size, part_concurrency; // as given; "" for the configuration's
  std::string expire_after;                // a duration or "never"; "" for the policy's
  ObjectInputs object;
  bool follow_symlinks = false, checksum = false, replace = false, dry_run = false;
};

// A run's settings: the inputs over the configuration (over the store's own: the AWS
// profile's s3 keys), a store connection per worker from `open_store`.
[[nodiscard]] UploadSettings upload_settings(const config::Config &cfg, const UploadInputs &in,
                                             std::function<std::unique_ptr<store::ObjectStore>()> open_store);
// A direct upload's (reserve, confirm): no walk, no workers. The object options and the
// expiry are reserve's alone (`with_object`).
[[nodiscard]] UploadSettings direct_settings(const config::Config &cfg, const UploadInputs &in,
                                             bool with_object);

// The descriptors this process may open: as many as the hard limit allows (the soft limit
// raised to it). 1024 when it cannot be read (the usual soft limit).
[[nodiscard]] uint64_t open_file_limit();

// What fitting jobs x parts to the open-file limit lowered, for the caller to say.
struct FitNote {
  int jobs = 0, part_concurrency = 0;       // asked
  int to_jobs = 0, to_part_concurrency = 0; // used
  uint64_t limit = 0;
};
// A run's concurrency and queue: --jobs (`jobs`, 0: none) over the configuration's, fixed when
// someone chose it (--jobs, config jobs, LODGE_JOBS, the AWS profile's max_concurrent_requests),
// else adaptive from 8; the queue and jobs x part concurrency fitted to `open_files`
// descriptors (lowered, part concurrency first, never refused); the files the walk skips
// (the ledger's, a file:// store's root). spec.settings is set first.
[[nodiscard]] std::optional<FitNote> plan_run(RunSpec &spec, const config::Config &cfg, int jobs,
                                              uint64_t open_files);

// The filter flags: --include, --exclude, --filter and the *-from files as (flag without its
// dashes, value) in command-line order (the first matching rule wins), --exclude-if-present,
// the size and age bounds.
struct FilterInputs {
  std::vector<std::pair<std::string, std::string>> rules;
  std::vector<std::string> exclude_if_present;
  match::FilterBounds bounds;
  bool stdin_taken = false; // --files-from - reads stdin
};
// The run's filter; null when it leaves nothing out. A rule file "-" is stdin, read through
// `read_stdin` once; a second "-" (or one with --files-from -) is USAGE.
[[nodiscard]] std::shared_ptr<const match::Filter>
make_filter(const FilterInputs &in, const std::function<std::string()> &read_stdin);

// One idempotency key names one upload: USAGE unless the run is exactly one file.
void check_one_input(const std::vector<std::string> &paths, const std::string &files_from);

} // namespace lodge::ops
