#pragma once
// A byte range of a file as an HTTP body, hashed as it is read so the caller can tell
// whether the bytes that left are the bytes that were reserved.

#include <cerrno>
#include <lodge/crypto/sha256.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/store/store.hpp>
#include <unistd.h>

namespace lodge::store {

class FileRangeBody final : public http::BodySource {
public:
  explicit FileRangeBody(const Body &b)
      : m_fd(b.fd), m_offset(b.offset), m_size(b.size), m_sent(b.sent), m_watch(b.watch) {}
  [[nodiscard]] uint64_t size() const override { return m_size; }
  void rewind() override {
    if (m_sent) m_sent->fetch_sub(m_pos, std::memory_order_relaxed);
    m_pos = 0;
    m_hash.reset();
    m_short = false;
  }
  int64_t read(char *buf, size_t n) override {
    if (m_pos >= m_size) return 0;
    size_t want = static_cast<size_t>(std::min<uint64_t>(n, m_size - m_pos));
    ssize_t got;
    do {
      got = ::pread(m_fd, buf, want, static_cast<off_t>(m_offset + m_pos));
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
      m_short = got == 0; // the file shrank under us
      return -1;
    }
    m_hash.update(buf, static_cast<size_t>(got));
    m_pos += static_cast<uint64_t>(got);
    if (m_sent) m_sent->fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
    if (m_watch) m_watch->on_bytes(static_cast<uint64_t>(got));
    return got;
  }
  [[nodiscard]] const util::TransferWatch *watch() const override { return m_watch; }
  // The digest of what the last attempt read (complete only when it read everything).
  [[nodiscard]] std::string sent_sha256_hex() { return crypto::to_hex(m_hash.finish()); }
  [[nodiscard]] bool shrank() const { return m_short; }

private:
  int m_fd;
  uint64_t m_offset;
  uint64_t m_size;
  uint64_t m_pos = 0;
  bool m_short = false;
  std::atomic<uint64_t> *m_sent;
  util::TransferWatch *m_watch;
  crypto::Sha256 m_hash;
};

} // namespace lodge::store
