#include <array>
#include <cerrno>
#include <fcntl.h>
#include <lodge/util/fd.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace lodge::util {

void Fd::reset(int fd) {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = fd;
}

bool write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::optional<std::string> read_fd_limited(int fd, size_t limit) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return std::nullopt;
  }
  std::string text;
  std::array<char, 65536> buf{};
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) return text;
    if (text.size() + static_cast<size_t>(n) > limit) {
      errno = EFBIG;
      return std::nullopt;
    }
    text.append(buf.data(), static_cast<size_t>(n));
  }
}

std::optional<std::string> read_file_limited(const std::string &path, size_t limit) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return std::nullopt;
  auto text = read_fd_limited(fd.get(), limit);
  int e = errno;
  fd.reset();
  errno = e; // as the read left it, not the close
  return text;
}

} // namespace lodge::util
