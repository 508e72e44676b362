#include <chrono>
#include <lodge/util/clock.hpp>

namespace lodge::util {

int64_t SystemClock::now_ms() const {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

const Clock &system_clock() {
  static const SystemClock k_clock;
  return k_clock;
}

int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

} // namespace lodge::util
