#include <chrono>
#include <cstdio>
#include <ctime>
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

std::string format_utc(int64_t epoch_ms, const char *format) {
  auto t = static_cast<std::time_t>(epoch_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  size_t n = std::strftime(buf, sizeof buf, format, &tm);
  return std::string(buf, n);
}

std::string format_rfc3339_ms(int64_t ms) {
  std::string secs = format_utc(ms, "%Y-%m-%dT%H:%M:%S");
  char out[64];
  std::snprintf(out, sizeof out, "%s.%03lldZ", secs.c_str(),
                static_cast<long long>(((ms % 1000) + 1000) % 1000));
  return out;
}

std::optional<int64_t> parse_http_date_ms(const std::string &s) {
  std::tm tm{};
  if (!strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S", &tm)) return std::nullopt;
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

} // namespace lodge::util
