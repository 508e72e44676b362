#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <lodge/error.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/util/strings.hpp>
#include <map>
#include <mutex>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace lodge::failpoint {
namespace {

// One line per point, named <component>.<step> after the durable step it precedes or
// follows. A point that accepts `error` says what the site then does; the site must do it.
constexpr std::array k_points{
    Point{"upload.after_walk", k_universal, ""},
    Point{"upload.before_read", k_universal | error,
          "reading the file fails (UNREADABLE: rejected); never hit when the stat cache answers"},
    Point{"upload.while_hashing", k_universal, ""},
    Point{"upload.before_reserve", k_universal, ""},
    Point{"upload.after_reserve", k_universal, ""},
    Point{"upload.before_put", k_universal | error, "the PUT fails before a byte is sent (definite)"},
    Point{"upload.after_put", k_universal | error,
          "the object landed but its answer was lost (ambiguous: cleanup waits for the grace)"},
    Point{"upload.confirm", k_universal | error, "the confirm transaction fails (the row stays UPLOADING)"},
    Point{"upload.mark_failed", k_universal | error, "marking the row failed fails (left to repair)"},
    Point{"upload.between_parts", k_universal | error, "the second part fails (definite)"},
    Point{"upload.after_part", k_universal, ""},
    Point{"sweep.after_claim", k_universal | error,
          "the run fails after its claim (an exception: the run is recorded failed, leases expire)"},
    Point{"sweep.after_delete", k_universal | error,
          "the delete happened but its answer was lost (the task is retried)"},
    Point{"relay.after_publish", k_universal | error,
          "the broker confirmed the batch but the relay stops before marking it sent (published again "
          "next run: a duplicate its consumers find owes nothing)"},
    Point{"consume.before_ack", k_universal | error,
          "the task's end is committed but the message is not acknowledged (delivered again: it finds "
          "the task ended)"},
    Point{"repair.before_commit", k_universal | error, "the repair transaction fails (rolled back)"},
    Point{"store.put", k_universal | error, "the store refuses the PUT or multipart create (503)"},
    Point{"store.after_create", k_universal | error,
          "a staged upload's create reached the server but its answer was lost: the retried create "
          "makes a second one and the first is never recorded (S3, file://: left incomplete)"},
    Point{"store.delete", k_universal | error, "the store refuses the delete or multipart abort (503)"},
    Point{"store.head", k_universal | error,
          "the store refuses the HEAD (503), also the one a delete reads the stamp with"},
    Point{"store.list", k_universal | error, "the store refuses the listing (503)"},
    Point{"store.tag", k_universal | error,
          "the store refuses to tag an object committed (503): the task keeps the tag owed"},
};

enum class Kind { crash, error, sleep, pause };
struct Armed {
  Kind kind;
  std::string arg; // ms for sleep, path for pause
  std::string text;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Armed, std::less<>> armed;
  std::string log_path;
};

Registry &registry() {
  static Registry r;
  return r;
}

[[maybe_unused]] void log_firing(const std::string &path, std::string_view name, std::string_view action) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  std::string line = std::to_string(::getpid()) + " " + std::string(name) + " " + std::string(action) + "\n";
  // One write(2) per line keeps lines from concurrent processes whole (O_APPEND).
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
  ::close(fd);
}
} // namespace

std::span<const Point> table() {
  return k_points;
}

std::string_view action_name(Action a) {
  switch (a) {
  case crash:
    return "crash";
  case error:
    return "error";
  case sleep:
    return "sleep";
  case pause:
    return "pause";
  }
  return "?";
}

void configure(std::string_view spec, const std::string &log_path) {
  auto &r = registry();
  std::lock_guard lock(r.mutex);
  r.armed.clear();
  r.log_path = log_path;
#ifndef LODGE_WITH_FAILPOINTS
  // A test that sets failpoints on a build without them would silently test nothing.
  if (!util::trim(spec).empty())
    throw LodgeError(Errc::usage, "LODGE_FAILPOINTS is set but this lodge was built without failpoints");
#endif
  for (const auto &item : util::split(spec, ';')) {
    auto entry = util::trim(item);
    if (entry.empty()) continue;
    auto eq = entry.find('=');
    if (eq == std::string::npos)
      throw LodgeError(Errc::usage, "LODGE_FAILPOINTS: '" + entry + "' is not name=action");
    std::string name = entry.substr(0, eq);
    std::string action = entry.substr(eq + 1);
    const Point *point = nullptr;
    for (const auto &p : k_points)
      if (p.name == name) point = &p;
    if (!point) throw LodgeError(Errc::usage, "LODGE_FAILPOINTS: unknown failpoint '" + name + "'");
    Armed a{Kind::error, "", action};
    Action bit = error;
    if (action == "crash") {
      a.kind = Kind::crash;
      bit = crash;
    } else if (action == "error") {
      a.kind = Kind::error;
      bit = error;
    } else if (action.rfind("sleep:", 0) == 0 && util::parse_int(action.substr(6))) {
      a.kind = Kind::sleep;
      a.arg = action.substr(6);
      bit = sleep;
    } else if (action.rfind("pause:", 0) == 0 && action.size() > 6) {
      a.kind = Kind::pause;
      a.arg = action.substr(6);
      bit = pause;
    } else {
      throw LodgeError(Errc::usage, "LODGE_FAILPOINTS: bad action '" + action + "' for " + name +
                                        " (crash, error, sleep:MS, pause:PATH)");
    }
    if ((point->actions & bit) == 0)
      throw LodgeError(Errc::usage, "LODGE_FAILPOINTS: " + name + "=" + action + ": " + name +
                                        " does not take " + std::string(action_name(bit)) +
                                        " (it has no fault of that kind to inject)");
    r.armed.insert_or_assign(name, std::move(a));
  }
}

bool hit(std::string_view name) {
#ifndef LODGE_WITH_FAILPOINTS
  (void)name;
  return false;
#else
  auto &r = registry();
  Armed a;
  std::string log_path;
  {
    std::lock_guard lock(r.mutex);
    if (r.armed.empty()) return false;
    auto it = r.armed.find(name);
    if (it == r.armed.end()) return false;
    a = it->second;
    log_path = r.log_path;
  }
  log_firing(log_path, name, a.text);
  switch (a.kind) {
  case Kind::crash:
    ::kill(::getpid(), SIGKILL);
    break;
  case Kind::error:
    return true;
  case Kind::sleep:
    std::this_thread::sleep_for(std::chrono::milliseconds(*util::parse_int(a.arg)));
    break;
  case Kind::pause: {
    struct stat st {};
    while (::stat(a.arg.c_str(), &st) != 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    break;
  }
  }
  return false;
#endif
}

} // namespace lodge::failpoint
