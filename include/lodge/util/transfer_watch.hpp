#pragma once
// A transfer's bound that its own progress may move (an upload whose record's deadline is
// renewed while its bytes flow): told of the bytes as they are read to be sent, asked by
// when the transfer must have ended. Knows nothing of lodge.

#include <cstdint>

namespace lodge::util {

class TransferWatch {
public:
  virtual ~TransferWatch() = default;
  // `n` more bytes were read to be sent, on the thread sending them (it may block there
  // briefly: a renewal). Thread-safe: the threads of one file's parts share one watch.
  virtual void on_bytes(uint64_t n) = 0;
  // The monotonic time (util::steady_ms) by which the transfer must have ended, as of now; a
  // time already past once it must stop at once. Cheap: asked between every two chunks.
  [[nodiscard]] virtual int64_t bound_ms() const = 0;
};

} // namespace lodge::util
