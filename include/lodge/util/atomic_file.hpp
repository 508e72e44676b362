#pragma once
// A file that appears whole or not at all: its bytes go to a temporary file, and commit()
// publishes it at the target in one step (rename(2), or a create-only renameat2/link(2)).
// Destroyed without commit(), the temporary file is removed and the target is untouched.
// Every write-then-publish in lodge goes through here (file:// objects, sidecars and
// records; `lodge get`'s output; status's textfile), so a crash anywhere leaves either the
// old target or the new one, never a mixture.

#include <lodge/util/fd.hpp>
#include <string>
#include <string_view>

namespace lodge::util {

// The step of an AtomicFile that failed and its errno.
struct FileError {
  // "open", "chmod", "write", "fsync", "close", "check the target", "rename", "link",
  // "fsync the directory"
  const char *step = "";
  int err = 0;
  // "check the target": what is there instead of a regular file (file_kind), never replaced.
  const char *found = "";
};

// What a file of this st_mode is, as a message names it: "a FIFO", "a character device",
// "a block device", "a socket", "a symlink", "a directory", "a regular file".
[[nodiscard]] const char *file_kind(unsigned mode);

class AtomicFile {
public:
  struct Options {
    unsigned mode = 0600;    // given to open(2), so the umask applies...
    bool exact_mode = false; // ...unless set: then fchmod(2) gives exactly `mode`
    // commit() fsyncs the file before publishing it and its directory after. Off where
    // something later makes it durable (file:// objects: the store's flush()).
    bool durable = true;
    // Off: commit() never replaces an existing target (renameat2 RENAME_NOREPLACE, or
    // link(2) on a filesystem without it) and fails with EEXIST instead.
    bool replace = true;
    // The directory the temporary file is made in, on the target's filesystem; "" for the
    // target's own directory.
    std::string temp_dir;
    std::string temp_prefix = ".lodge-"; // the temporary file is prefix + 16 hex digits + ".tmp"
    // A file with no name (O_TMPFILE) where the filesystem and /proc allow it: a crash
    // while it is written leaves nothing behind. link(2) gives it the target's name; with
    // replace on and a target already there, it is linked at a temporary name and renamed
    // over the target (only a crash between those two calls leaves that name behind).
    bool anonymous = false;
  };

  // The target by path.
  AtomicFile(std::string target, Options options);
  // The target `name` in the open directory `dir` (borrowed: it must outlive this), so no
  // path is resolved again between the checks the caller made and the publish.
  AtomicFile(int dir, std::string name, Options options);
  AtomicFile(AtomicFile &&o) noexcept;
  AtomicFile &operator=(AtomicFile &&o) noexcept;
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;
  ~AtomicFile() { discard(); }

  // Creates the temporary file; false with error() on failure.
  [[nodiscard]] bool open();
  // The temporary file's descriptor, to write or set attributes on (valid after open()).
  [[nodiscard]] int fd() const { return m_fd.get(); }
  [[nodiscard]] bool write(std::string_view bytes);
  // Publishes the temporary file at the target (see Options); false with error() on
  // failure, the temporary file then removed. Only a regular file is ever replaced: anything
  // else at the target (a FIFO, a device, a directory, a symlink: lstat(2), just before the
  // rename) fails "check the target" with EISDIR or EEXIST and error().found, and stays. After a failure in
  // "fsync the directory" the target has been published but may not survive a crash.
  [[nodiscard]] bool commit();
  // Removes the temporary file, if not committed; the target is untouched.
  void discard();
  [[nodiscard]] const FileError &error() const { return m_error; }

private:
  bool fail(const char *step, int err);
  bool replaceable_target();
  bool publish();
  bool sync_directory();
  [[nodiscard]] std::string temp_directory() const;

  int m_dir = -1;       // the target's directory, or AT_FDCWD for a target by path
  std::string m_target; // relative to m_dir
  Options m_options;
  int m_temp_dir = -1; // m_dir, or AT_FDCWD when Options::temp_dir names the directory
  std::string m_temp;  // the temporary file's name relative to m_temp_dir; "" when anonymous
  Fd m_fd;
  bool m_open = false; // a temporary file exists (named or anonymous) and is not published
  FileError m_error;
};

} // namespace lodge::util
