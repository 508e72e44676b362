#include <array>
#include <lodge/error.hpp>

namespace lodge {
namespace {
constexpr std::array k_errcs{
    ErrcInfo{Errc::ok, "OK", 0, "Success."},
    ErrcInfo{Errc::usage, "USAGE", 2, "Bad command line: unknown option, missing argument."},
    ErrcInfo{Errc::config_invalid, "CONFIG_INVALID", 2,
             "The configuration file, environment or flags hold a bad value."},
    ErrcInfo{Errc::ledger_unusable, "LEDGER_UNUSABLE", 3,
             "The ledger cannot be opened: not a database, corrupt, unreadable, a symlink."},
    ErrcInfo{Errc::ledger_locked, "LEDGER_LOCKED", 3,
             "The ledger stayed locked by another process past the busy timeout."},
    ErrcInfo{Errc::ledger_too_new, "LEDGER_TOO_NEW", 3,
             "The ledger was written by a newer lodge (schema version too high)."},
    ErrcInfo{Errc::ledger_on_network_fs, "LEDGER_ON_NETWORK_FS", 3,
             "The ledger is on a network filesystem; refused unless --force-network-fs."},
    ErrcInfo{Errc::storage_unavailable, "STORAGE_UNAVAILABLE", 4,
             "The object store could not be reached or kept failing."},
    ErrcInfo{Errc::access_denied, "ACCESS_DENIED", 4,
             "The object store refused the credentials or the operation."},
    ErrcInfo{Errc::not_found, "NOT_FOUND", 1, "The object, bucket or record does not exist."},
    ErrcInfo{Errc::precondition_failed, "PRECONDITION_FAILED", 1,
             "A conditional request failed: the key already exists."},
    ErrcInfo{Errc::bad_digest, "BAD_DIGEST", 1, "The store computed a different checksum than the one sent."},
    ErrcInfo{Errc::throttled, "THROTTLED", 4, "The store kept asking to slow down (503 SlowDown, 429)."},
    ErrcInfo{Errc::storage_error, "STORAGE_ERROR", 1, "The store refused the request permanently."},
    ErrcInfo{Errc::quota_exceeded, "QUOTA_EXCEEDED", 1,
             "The owner already holds the policy's max_files alive files."},
    ErrcInfo{Errc::duplicate, "DUPLICATE", 0,
             "An alive file with the same content exists for this owner (not a failure)."},
    ErrcInfo{Errc::type_mismatch, "TYPE_MISMATCH", 1,
             "The file's extension does not match the media type detected from its content."},
    ErrcInfo{Errc::type_not_allowed, "TYPE_NOT_ALLOWED", 1,
             "The detected media type is not in the policy's media_types."},
    ErrcInfo{Errc::extension_not_allowed, "EXTENSION_NOT_ALLOWED", 1,
             "The file's extension is not in the policy's extensions."},
    ErrcInfo{Errc::too_large, "TOO_LARGE", 1, "The file is larger than the policy's max_size."},
    ErrcInfo{Errc::empty_file, "EMPTY_FILE", 1, "The file is empty."},
    ErrcInfo{Errc::bad_name, "BAD_NAME", 1,
             "The file name is unusable (empty, . or .., over 255 bytes, a backslash, control or bidi "
             "characters, invalid UTF-8, or what Unicode compatibility folding turns into a separator or "
             "a dot name); get restores by the same rule."},
    ErrcInfo{Errc::not_regular_file, "NOT_REGULAR_FILE", 1,
             "Not a regular file (directory, FIFO, socket, device, symlink)."},
    ErrcInfo{Errc::unreadable, "UNREADABLE", 1, "The file is missing or cannot be read."},
    ErrcInfo{Errc::file_changed, "FILE_CHANGED", 1, "The file changed while it was being uploaded."},
    ErrcInfo{Errc::state_changed, "STATE_CHANGED", 1,
             "The record changed state under us (for example repair failed it); never success."},
    ErrcInfo{Errc::idempotency_key_reused, "IDEMPOTENCY_KEY_REUSED", 1,
             "The idempotency key was used before for other content."},
    ErrcInfo{Errc::in_progress, "IN_PROGRESS", 1,
             "The upload with this idempotency key is still in progress."},
    ErrcInfo{Errc::deadline_exceeded, "DEADLINE_EXCEEDED", 1,
             "The transfer could not finish before the upload deadline."},
    ErrcInfo{Errc::interrupted, "INTERRUPTED", 130,
             "Interrupted by a signal; in-flight work was finished or failed cleanly."},
    ErrcInfo{Errc::unhealthy, "UNHEALTHY", 1, "status --check found a problem."},
    ErrcInfo{Errc::internal, "INTERNAL", 1, "A bug in lodge; please report it."},
    ErrcInfo{Errc::unsupported, "UNSUPPORTED", 1,
             "The store does not implement the operation (HTTP 405 or 501); lodge does without it."},
    ErrcInfo{Errc::metadata_corrupt, "METADATA_CORRUPT", 1,
             "An object's stored metadata cannot be read (not JSON, or a field of the wrong type)."},
    ErrcInfo{Errc::io_error, "IO_ERROR", 1,
             "A local file lodge writes (such as the Prometheus textfile) could not be written."},
    ErrcInfo{Errc::store_mismatch, "STORE_MISMATCH", 2,
             "The ledger is bound to another store; `lodge init --rebind-store` only after moving the data."},
    ErrcInfo{Errc::ledger_not_found, "LEDGER_NOT_FOUND", 3,
             "No ledger at that path; only `lodge init` creates one."},
    ErrcInfo{Errc::ledger_diverged, "LEDGER_DIVERGED", 3,
             "The ledger's history diverged from the store's (a restored or copied ledger); repair, sweep "
             "and reconcile --apply refuse until reconcile ran and init --accept-diverged cleared it."},
    ErrcInfo{Errc::not_active, "NOT_ACTIVE", 1,
             "The file is not ACTIVE (still uploading, failed or deleted): there is nothing to get."},
    ErrcInfo{Errc::content_mismatch, "CONTENT_MISMATCH", 1,
             "The object is not the one the ledger records: its bytes differ in size or SHA-256, or "
             "(lodge confirm) its stamp or Content-Type differs from the reservation's."},
    ErrcInfo{Errc::output_exists, "OUTPUT_EXISTS", 1,
             "A different file already exists where get would write it (--force replaces it)."},
    ErrcInfo{
        Errc::ledger_unavailable, "LEDGER_UNAVAILABLE", 3,
        "The ledger's database server cannot be reached, did not answer within ledger_timeout, or the "
        "connection was lost: the transaction rolled back, except a COMMIT left without an answer, which "
        "may have committed (an upload is then reported failed, never active; repair decides)."},
};
} // namespace

std::span<const ErrcInfo> all_errcs() {
  return k_errcs;
}

const ErrcInfo &errc_info(Errc code) {
  return k_errcs.at(static_cast<size_t>(code));
}

} // namespace lodge
