#pragma once
// RAII owner of a POSIX file descriptor. Move-only.

#include <cstddef>
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

} // namespace lodge::util
