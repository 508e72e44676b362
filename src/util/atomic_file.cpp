#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <lodge/util/atomic_file.hpp>
#include <random>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace lodge::util {
namespace {

// 16 hex digits: short and fixed-length, so a target name near NAME_MAX still gets a
// temporary sibling, and random, so concurrent writers of one target never share one.
std::string random_tag() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32U) | rd();
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(v));
  return tag;
}

std::string parent_of(const std::string &path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

bool proc_fd_links() {
  static const bool ok = ::access("/proc/self/fd", X_OK) == 0;
  return ok;
}

} // namespace

const char *file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFDIR:
    return "a directory";
  case S_IFLNK:
    return "a symlink";
  case S_IFIFO:
    return "a FIFO";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFSOCK:
    return "a socket";
  default:
    return "not a regular file";
  }
}

AtomicFile::AtomicFile(std::string target, Options options)
    : m_dir(AT_FDCWD), m_target(std::move(target)), m_options(std::move(options)), m_temp_dir(AT_FDCWD) {}

AtomicFile::AtomicFile(int dir, std::string name, Options options)
    : m_dir(dir), m_target(std::move(name)), m_options(std::move(options)),
      m_temp_dir(m_options.temp_dir.empty() ? dir : AT_FDCWD) {}

AtomicFile::AtomicFile(AtomicFile &&o) noexcept
    : m_dir(o.m_dir), m_target(std::move(o.m_target)), m_options(std::move(o.m_options)),
      m_temp_dir(o.m_temp_dir), m_temp(std::move(o.m_temp)), m_fd(std::move(o.m_fd)),
      m_open(std::exchange(o.m_open, false)), m_error(o.m_error) {}

AtomicFile &AtomicFile::operator=(AtomicFile &&o) noexcept {
  if (this != &o) {
    discard();
    m_dir = o.m_dir;
    m_target = std::move(o.m_target);
    m_options = std::move(o.m_options);
    m_temp_dir = o.m_temp_dir;
    m_temp = std::move(o.m_temp);
    m_fd = std::move(o.m_fd);
    m_open = std::exchange(o.m_open, false);
    m_error = o.m_error;
  }
  return *this;
}

// Where the temporary file goes, relative to m_temp_dir.
std::string AtomicFile::temp_directory() const {
  if (!m_options.temp_dir.empty()) return m_options.temp_dir;
  return m_dir == AT_FDCWD ? parent_of(m_target) : std::string(".");
}

bool AtomicFile::fail(const char *step, int err) {
  m_error = FileError{step, err};
  discard();
  return false;
}

bool AtomicFile::open() {
  discard();
  const auto mode = static_cast<mode_t>(m_options.mode);
  const std::string dir = temp_directory();
  if (m_options.anonymous && proc_fd_links()) {
    m_fd.reset(::openat(m_temp_dir, dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, mode));
    // A filesystem without O_TMPFILE gets a named file instead.
    if (!m_fd.valid() && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      return fail("open", errno);
  }
  if (!m_fd.valid()) {
    m_temp = dir + "/" + m_options.temp_prefix + random_tag() + ".tmp";
    m_fd.reset(
        ::openat(m_temp_dir, m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!m_fd.valid()) {
      m_temp.clear(); // not ours to remove
      return fail("open", errno);
    }
  }
  m_open = true;
  // lodge runs under umask 077: a file others must read gets its mode here, not from open(2).
  if (m_options.exact_mode && ::fchmod(m_fd.get(), mode) != 0) return fail("chmod", errno);
  return true;
}

bool AtomicFile::write(std::string_view bytes) {
  if (!write_all(m_fd.get(), bytes.data(), bytes.size())) return fail("write", errno);
  return true;
}

bool AtomicFile::commit() {
  if (m_options.replace && !replaceable_target()) return false;
  // A delayed write error (NFS, a full thin volume) shows only in fsync or close.
  if (m_options.durable && ::fsync(m_fd.get()) != 0) return fail("fsync", errno);
  // A named file is closed first, for close(2) to report what fsync did not; an anonymous
  // one is linked through its descriptor.
  if (!m_temp.empty() && ::close(m_fd.release()) != 0) return fail("close", errno);
  if (!publish()) return false;
  m_open = false;
  m_temp.clear();
  m_fd.reset(); // an anonymous file: linked, so its descriptor is no longer needed
  return !m_options.durable || sync_directory();
}

// Whether the target is absent or a regular file: rename(2) would replace a FIFO or a device
// node (as root, /dev/null for the whole machine) with a regular file, and a symlink rather
// than what it points to, which no operator means by "write the file there". Not followed.
bool AtomicFile::replaceable_target() {
  struct stat st {};
  if (::fstatat(m_dir, m_target.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT || fail("check the target", errno);
  if (S_ISREG(st.st_mode)) return true;
  fail("check the target", S_ISDIR(st.st_mode) ? EISDIR : EEXIST);
  m_error.found = file_kind(st.st_mode);
  return false;
}

// Gives the complete temporary file the target's name; false with m_error (the temporary
// file removed) on failure.
bool AtomicFile::publish() {
  if (m_temp.empty()) { // anonymous: link(2) through /proc is create-only
    const std::string self = "/proc/self/fd/" + std::to_string(m_fd.get());
    if (::linkat(AT_FDCWD, self.c_str(), m_dir, m_target.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
    if (errno != EEXIST || !m_options.replace) return fail("link", errno);
    // Replacing: a name of its own for the moment of the rename(2) over the target.
    m_temp = temp_directory() + "/" + m_options.temp_prefix + random_tag() + ".tmp";
    if (::linkat(AT_FDCWD, self.c_str(), m_temp_dir, m_temp.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      m_temp.clear(); // not ours to remove
      return fail("link", errno);
    }
  }
  // Here and nowhere else in lodge does a written file get its name.
  if (m_options.replace) {
    if (::renameat(m_temp_dir, m_temp.c_str(), m_dir, m_target.c_str()) != 0) return fail("rename", errno);
    return true;
  }
  if (::renameat2(m_temp_dir, m_temp.c_str(), m_dir, m_target.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL) return fail("rename", errno);
  // A filesystem without RENAME_NOREPLACE: link(2) is create-only as well.
  if (::linkat(m_temp_dir, m_temp.c_str(), m_dir, m_target.c_str(), 0) != 0) return fail("link", errno);
  ::unlinkat(m_temp_dir, m_temp.c_str(), 0);
  return true;
}

bool AtomicFile::sync_directory() {
  if (m_dir != AT_FDCWD) {
    if (::fsync(m_dir) != 0) return fail("fsync the directory", errno);
    return true;
  }
  Fd d(::open(parent_of(m_target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid() || ::fsync(d.get()) != 0) return fail("fsync the directory", errno);
  return true;
}

void AtomicFile::discard() {
  if (m_open && !m_temp.empty()) ::unlinkat(m_temp_dir, m_temp.c_str(), 0);
  m_open = false;
  m_temp.clear();
  m_fd.reset();
}

} // namespace lodge::util
