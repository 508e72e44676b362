// credential_process: an external program prints the credentials
// (https://docs.aws.amazon.com/sdkref/latest/guide/feature-process-credentials.html).
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <lodge/aws/credential_chain.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/fd.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace lodge::aws {
namespace {
constexpr size_t k_max_output = 1 << 20; // a credentials document is a few hundred bytes

// The last non-empty line of a program's stderr, made safe to print.
std::string last_line(const std::string &err) {
  auto t = util::trim(err);
  auto nl = t.find_last_of('\n');
  auto line = nl == std::string::npos ? t : t.substr(nl + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return util::escape_for_terminal(util::trim(line));
}

struct Output {
  std::string out, err;
  int status = 0;
  bool timed_out = false;
};

Result<Output> run(const std::string &command, int64_t timeout_ms, const std::string &where) {
  std::array<int, 2> out{-1, -1}, err{-1, -1};
  if (::pipe2(out.data(), O_CLOEXEC) != 0 || ::pipe2(err.data(), O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) ::close(fd);
    return Error(Errc::config_invalid, where + ": cannot start it: " + std::strerror(e));
  }
  util::Fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, err_w.get(), 2);
  std::string sh = "/bin/sh", dash_c = "-c";
  std::string cmd = command;
  std::array<char *, 4> argv{sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Error(Errc::config_invalid, where + ": cannot start it: " + std::strerror(rc));
  out_w.reset();
  err_w.reset();

  Output o;
  int64_t deadline = util::steady_ms() + timeout_ms;
  std::array<pollfd, 2> fds{pollfd{out_r.get(), POLLIN, 0}, pollfd{err_r.get(), POLLIN, 0}};
  std::array<char, 4096> buf{};
  int open = 2;
  while (open > 0) {
    int64_t left = deadline - util::steady_ms();
    if (left <= 0) {
      o.timed_out = true;
      break;
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      auto got = ::read(fds[i].fd, buf.data(), buf.size());
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        fds[i].fd = -1;
        --open;
        continue;
      }
      auto &into = i == 0 ? o.out : o.err;
      if (into.size() < k_max_output) into.append(buf.data(), static_cast<size_t>(got));
    }
  }
  if (o.timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  o.status = status;
  return o;
}
} // namespace

Result<Credentials> parse_credentials_json(const std::string &body, const std::string &what) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return Error(Errc::config_invalid, what + ": the answer is not a JSON object");
  auto text = [&](const char *k) {
    auto it = doc.find(k);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string{};
  };
  Credentials c;
  c.access_key_id = text("AccessKeyId");
  c.secret_access_key = text("SecretAccessKey");
  c.session_token = text("SessionToken").empty() ? text("Token") : text("SessionToken");
  if (c.access_key_id.empty() || c.secret_access_key.empty())
    return Error(Errc::config_invalid, what + ": the answer has no " +
                                           (c.access_key_id.empty() ? "AccessKeyId" : "SecretAccessKey"));
  auto exp = text("Expiration");
  if (!exp.empty()) {
    auto ms = parse_iso8601_ms(exp);
    if (!ms)
      return Error(Errc::config_invalid,
                   what + ": Expiration '" + util::escape_for_terminal(exp) + "' is not an ISO 8601 time");
    c.expires_ms = *ms;
  }
  return c;
}

Result<Credentials> run_credential_process(const std::string &command, const std::string &where,
                                           int64_t timeout_ms) {
  auto o = run(command, timeout_ms, where);
  if (!o) return o.error();
  if (o->timed_out)
    return Error(Errc::config_invalid,
                 where + ": the program did not finish within " + std::to_string(timeout_ms / 1000) + " s");
  std::string err = last_line(o->err);
  if (WIFSIGNALED(o->status) || WEXITSTATUS(o->status) != 0) {
    std::string how = WIFSIGNALED(o->status) ? "was killed by signal " + std::to_string(WTERMSIG(o->status))
                                             : "exited with status " + std::to_string(WEXITSTATUS(o->status));
    return Error(Errc::config_invalid, where + ": the program " + how + (err.empty() ? "" : ": " + err));
  }
  auto doc = nlohmann::json::parse(o->out, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return Error(Errc::config_invalid, where + ": the program's output is not a JSON object");
  auto v = doc.find("Version");
  if (v == doc.end() || !v->is_number_integer() || v->get<int64_t>() != 1)
    return Error(Errc::config_invalid, where + ": the program's output must have \"Version\": 1");
  auto c = parse_credentials_json(o->out, where);
  if (c) c->source = where;
  return c;
}

} // namespace lodge::aws
