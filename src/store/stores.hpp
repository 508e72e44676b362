#pragma once
// Internal to the store layer: the backends' factories and small helpers.

#include <cerrno>
#include <lodge/store/store.hpp>
#include <unistd.h>

namespace lodge::store {

std::unique_ptr<ObjectStore> make_s3_store(const StoreOptions &o, const std::string &bucket,
                                           const std::string &prefix);
std::unique_ptr<ObjectStore> make_file_store(const std::string &url, const std::string &root);
std::unique_ptr<ObjectStore> with_failpoints(std::unique_ptr<ObjectStore> inner);

inline bool write_all(int fd, const char *p, size_t n) {
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

} // namespace lodge::store
