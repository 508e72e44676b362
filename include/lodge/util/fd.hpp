#pragma once
// RAII owner of a POSIX file descriptor. Move-only.

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace lodge::util {

class Fd {
public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(const Fd &) = delete;
  Fd &operator=(const Fd &) = delete;
  Fd(Fd &&o) noexcept : m_fd(std::exchange(o.m_fd, -1)) {}
  Fd &operator=(Fd &&o) noexcept {
    if (this != &o) {
      reset();
      m_fd = std::exchange(o.m_fd, -1);
    }
    return *this;
  }
  ~Fd() { reset(); }
  [[nodiscard]] int get() const { return m_fd; }
  [[nodiscard]] bool valid() const { return m_fd >= 0; }
  void reset(int fd = -1);
  // Gives up ownership without closing (the caller closed it, or will).
  [[nodiscard]] int release() { return std::exchange(m_fd, -1); }

private:
  int m_fd = -1;
};

// Writes all n bytes (retrying short writes and EINTR); false with errno set on failure.
[[nodiscard]] bool write_all(int fd, const char *p, size_t n);

// The whole content of the file at `path` (or of the open `fd`), when it holds at most
// `limit` bytes; nullopt with errno set otherwise: EISDIR for a directory, EFBIG past the
// limit (where an endless input such as /dev/zero stops, instead of filling memory).
[[nodiscard]] std::optional<std::string> read_file_limited(const std::string &path, size_t limit);
[[nodiscard]] std::optional<std::string> read_fd_limited(int fd, size_t limit);

} // namespace lodge::util
