#pragma once
// One file of an upload: the file as the uploader opened and checked it (OpenedFile), and what
// became of it (FileResult, its UploadOutcome), which every room of an upload fills in turn.

#include <cstdint>
#include <lodge/error.hpp>
#include <lodge/ledger/records.hpp>
#include <lodge/util/fd.hpp>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <utility>

namespace lodge::ops {

// skipped: the walk passed over it on purpose (a symlink not followed); not a failure.
// planned: --dry-run found nothing against it, and would upload it.
// in_progress: another sender holds the same content (a direct reservation, or another
// process past the run's wait for it); nothing was sent. Counts as a failure.
enum class UploadOutcome { active, duplicate, replayed, rejected, failed, skipped, planned, in_progress };
[[nodiscard]] const char *to_string(UploadOutcome o);

struct FileResult {
  std::string file;
  std::string relative_path; // what the row records, once it is known
  UploadOutcome outcome = UploadOutcome::failed;
  std::optional<int64_t> id;
  std::string object_key;
  std::string sha256;
  uint64_t size = 0;
  std::string media_type;   // detected from the content (what the policy checks)
  std::string content_type; // what the object is stored with
  bool unchanged = false;   // a duplicate the stat cache found: the file was not read
  // A duplicate whose row shares another row's object (de-duplication at another path):
  // that row's id. The path is restorable by its own row (`id`).
  std::optional<int64_t> shares;
  // A staged upload resumed from an earlier, interrupted upload of the same content: the
  // bytes of the parts already stored and found equal to the file's, not sent again.
  uint64_t resumed_bytes = 0;
  std::optional<Error> error;
  std::string reason; // why it was skipped (outcome skipped)
};

// r, ended with the outcome `o` for the reason `e` (a rejection, a failure).
[[nodiscard]] inline FileResult refused(FileResult r, UploadOutcome o, Error e) {
  r.outcome = o;
  r.error = std::move(e);
  return r;
}

// A file opened for upload and past every check made before its bytes are read.
struct OpenedFile {
  util::Fd fd;
  struct stat st {};
  int64_t stat_taken_ms = 0; // when st was taken (a stat as recent as that is racily clean)
  std::string name;          // the display name the row records
  std::string ext;
  ledger::FileStat file_stat; // st as the stat cache records it
  // Whether the file still is what st saw: size, mtime and ctime (a write, a truncate, a
  // rename over it, a touch back to the old mtime all move ctime), inode and device.
  [[nodiscard]] bool unchanged() const;
};

} // namespace lodge::ops
