// An upload's settings from the configuration and the command's inputs (settings.hpp).
#include <algorithm>
#include <lodge/config/ci.hpp>
#include <lodge/config/owner.hpp>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/id_blocks.hpp>
#include <lodge/ops/upload/listing_cache.hpp>
#include <lodge/ops/upload/open_files.hpp>
#include <lodge/ops/upload/settings.hpp>
#include <lodge/store/object_options.hpp>
#include <lodge/util/strings.hpp>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace lodge::ops {

store::ObjectOptions object_options(const ObjectInputs &in, const config::Policy &p) {
  store::ObjectOptions given;
  given.content_type = in.content_type;
  given.storage_class = in.storage_class;
  given.sse = in.sse;
  given.sse_kms_key_id = in.sse_kms_key_id;
  given.cache_control = in.cache_control;
  if (in.ci_metadata)
    given.metadata = config::ci_metadata(in.env ? *in.env : std::map<std::string, std::string>{}).take();
  for (const auto &m : in.metadata) {
    auto kv = store::parse_assignment(m, "--metadata");
    if (!kv) throw LodgeError(kv.error());
    given.metadata[util::to_lower(kv->first)] = kv->second;
  }
  for (const auto &tag : in.tags) {
    auto kv = store::parse_assignment(tag, "--tag");
    if (!kv) throw LodgeError(kv.error());
    given.tags[kv->first] = kv->second;
  }
  store::ObjectOptions out = p.object;
  out.merge(given);
  if (auto v = store::validate(out, "upload"); !v) throw LodgeError(v.error());
  return out;
}

namespace {
// What a run and a direct upload share: the policy, names, and the cleanup a failure owes.
UploadSettings common_settings(const config::Config &cfg, const UploadInputs &in, const char *worker) {
  UploadSettings s;
  s.policy = cfg.policy(in.policy);
  s.run_prefix = in.prefix;
  if (in.with_owner) s.owner = config::owner(cfg);
  if (!in.idempotency_key.empty()) s.idempotency_key = in.idempotency_key;
  s.max_retries = cfg.sweep.max_retries;
  s.lease_ms = cfg.sweep.lease_ms;
  s.cleanup = cleanup_settings(cfg, in.policy);
  s.worker_id = std::string(worker) + "-" + std::to_string(::getpid());
  return s;
}

void set_object(UploadSettings &s, const UploadInputs &in) {
  s.options = object_options(in.object, s.policy);
  // "never" clears the policy's; a duration past zero, at most a century (it is added to a
  // wall-clock time), as the policy's expire_after.
  if (in.expire_after == "never")
    s.expire_after_ms = std::nullopt;
  else if (!in.expire_after.empty())
    s.expire_after_ms = config::duration_value(in.expire_after, "--expire-after", Errc::usage);
  else
    s.expire_after_ms = s.policy.expire_after_ms;
}
} // namespace

UploadSettings upload_settings(const config::Config &cfg, const UploadInputs &in,
                               std::function<std::unique_ptr<store::ObjectStore>()> open_store) {
  UploadSettings s = common_settings(cfg, in, "upload");
  s.id_blocks = std::make_shared<IdBlocks>(); // one per run, shared by the workers
  // Duplicates verified by listing, not a HEAD each; not on file://, where a HEAD is a
  // local stat and a listing walks directories.
  if (store::file_store_root(cfg.store).empty()) s.listings = std::make_shared<ListingCache>();
  s.multipart_threshold = cfg.multipart_threshold;
  s.part_size = in.part_size.empty() ? cfg.part_size : config::parse_part_size(in.part_size, "--part-size");
  s.part_concurrency = in.part_concurrency.empty()
                           ? cfg.part_concurrency
                           : config::parse_part_concurrency(in.part_concurrency, "--part-concurrency");
  s.open_store = std::move(open_store);
  s.follow_symlinks = in.follow_symlinks;
  set_object(s, in);
  s.checksum = in.checksum;
  s.replace = in.replace;
  s.dry_run = in.dry_run;
  return s;
}

UploadSettings direct_settings(const config::Config &cfg, const UploadInputs &in, bool with_object) {
  UploadSettings s = common_settings(cfg, in, "direct");
  if (with_object) set_object(s, in);
  return s;
}

uint64_t open_file_limit() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX / 2 : static_cast<uint64_t>(rl.rlim_cur);
}

namespace {
// What the process holds besides the queue and the workers: stdio, the main ledger and
// store connections, the log.
constexpr uint64_t k_reserved_descriptors = 64;
} // namespace

std::optional<FitNote> plan_run(RunSpec &spec, const config::Config &cfg, int jobs, uint64_t open_files) {
  spec.jobs = jobs > 0 ? jobs : cfg.jobs;
  // Nobody chose the jobs (--jobs, the config's jobs, LODGE_JOBS, the AWS profile's
  // max_concurrent_requests): the run adapts its level, from 8.
  const auto source = cfg.sources.find("jobs");
  spec.jobs_fixed = jobs > 0 || (source != cfg.sources.end() && source->second != "default");
  // A PostgreSQL ledger has no files here to keep out of the upload.
  spec.skips = {ledger::is_postgres_location(cfg.ledger) ? std::string() : cfg.ledger,
                store::file_store_root(cfg.store),
                {}};
  // Each directory with a file waiting in the queue stays open (files are opened relative to
  // it): queue at most a quarter of the descriptors (measured: 1024 queued files in 1024
  // directories hold 1050 descriptors).
  spec.queue_capacity = static_cast<size_t>(std::clamp<uint64_t>(open_files / 4, 16, 1024));
  // jobs x part concurrency within what the queue leaves of the limit. An adaptive run: its
  // start fitted so, and its bound the most workers that fit (at most 256).
  const uint64_t used = spec.queue_capacity + k_reserved_descriptors;
  const uint64_t budget = open_files > used ? open_files - used : 0;
  auto fit = spec.jobs_fixed ? fit_open_files(spec.jobs, spec.settings.part_concurrency, budget)
                             : fit_adaptive(spec.jobs, k_max_level, spec.settings.part_concurrency, budget);
  if (!spec.jobs_fixed) spec.max_jobs = fit.jobs;
  if (!fit.lowered) return std::nullopt;
  const int fitted = std::min(spec.jobs, fit.jobs); // an adaptive run's bound is at least its start
  FitNote note{spec.jobs, spec.settings.part_concurrency, fitted, fit.part_concurrency, open_files};
  spec.jobs = fitted;
  spec.settings.part_concurrency = fit.part_concurrency;
  return note;
}

std::shared_ptr<const match::Filter> make_filter(const FilterInputs &in,
                                                 const std::function<std::string()> &read_stdin) {
  auto f = std::make_shared<match::Filter>();
  bool stdin_used = in.stdin_taken;
  auto from = [&](const std::string &flag, const std::string &file,
                  void (match::Filter::*lines)(std::string_view, std::string_view),
                  void (match::Filter::*path)(const std::string &)) {
    if (file != "-") return (f.get()->*path)(file);
    if (stdin_used)
      throw LodgeError(Errc::usage,
                       "upload: --" + flag +
                           " -: stdin is already read (by --files-from - or another filter file)");
    stdin_used = true;
    (f.get()->*lines)(read_stdin(), "-");
  };
  for (const auto &[flag, v] : in.rules) {
    if (flag == "include")
      f->add_include(v);
    else if (flag == "exclude")
      f->add_exclude(v);
    else if (flag == "filter")
      f->add_filter(v);
    else if (flag == "filter-from")
      from(flag, v, &match::Filter::add_filter_lines, &match::Filter::add_filter_from);
    else if (flag == "include-from")
      from(flag, v, &match::Filter::add_include_lines, &match::Filter::add_include_from);
    else if (flag == "exclude-from")
      from(flag, v, &match::Filter::add_exclude_lines, &match::Filter::add_exclude_from);
  }
  for (const auto &m : in.exclude_if_present)
    f->add_exclude_if_present(m);
  f->set_bounds(in.bounds);
  if (!f->active()) return nullptr;
  return f;
}

void check_one_input(const std::vector<std::string> &paths, const std::string &files_from) {
  if (paths.size() != 1 || !files_from.empty())
    throw LodgeError(Errc::usage, "upload: --idempotency-key takes exactly one file (got " +
                                      std::string(files_from.empty() ? "several paths" : "--files-from") +
                                      ")");
  struct stat st {};
  if (::stat(paths[0].c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw LodgeError(Errc::usage, "upload: --idempotency-key takes exactly one file, and " +
                                      util::escape_for_terminal(paths[0]) + " is a directory");
}

} // namespace lodge::ops
