#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <fstream>
#include <lodge/ops/grace.hpp>
#include <lodge/ops/holder.hpp>
#include <lodge/util/clock.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace lodge::ops {
namespace {
std::string read_first_line(const std::string &path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return util::trim(line);
}

struct Stat {
  bool zombie = false;
  int64_t start = 0;
};

// Fields 3 (state) and 22 (starttime) of /proc/PID/stat, read after the last ')' (the
// command name may hold spaces and parentheses); nullopt when /proc shows no such process.
std::optional<Stat> read_stat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ss.str();
  auto close = s.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(s.substr(close + 1));
  std::string f;
  Stat st;
  for (int i = 3; i <= 22; ++i) { // the fields after ')' start with field 3 (state)
    if (!(fields >> f)) return std::nullopt;
    if (i == 3) st.zombie = f == "Z" || f == "X";
  }
  try {
    st.start = std::stoll(f);
  } catch (const std::exception &) {
    return std::nullopt;
  }
  return st;
}

// The start time of a live (not zombie) process.
std::optional<int64_t> read_start_ticks(int64_t pid) {
  auto st = read_stat(pid);
  if (!st || st->zombie) return std::nullopt;
  return st->start;
}

std::optional<Holder> probe() {
  Holder h;
  h.boot_id = read_first_line("/proc/sys/kernel/random/boot_id");
  std::array<char, 256> buf{};
  auto n = ::readlink("/proc/self/ns/pid", buf.data(), buf.size() - 1);
  if (n > 0) h.pid_ns = std::string(buf.data(), static_cast<size_t>(n));
  // "pid:[4026531836]" -> "4026531836"
  auto open = h.pid_ns.find('['), close = h.pid_ns.find(']');
  h.pid_ns = open != std::string::npos && close > open ? h.pid_ns.substr(open + 1, close - open - 1) : "";
  h.pid = ::getpid();
  auto t = read_start_ticks(h.pid);
  std::array<char, HOST_NAME_MAX + 1> host{};
  if (::gethostname(host.data(), host.size() - 1) == 0) h.host = host.data();
  for (auto &c : h.host)
    if (c == ' ' || c < 0x20) c = '_';
  if (h.boot_id.empty() || h.pid_ns.empty() || !t || h.boot_id.find(' ') != std::string::npos)
    return std::nullopt;
  h.start_ticks = *t;
  return h;
}
} // namespace

std::string Holder::scope() const {
  return "boot=" + boot_id + " pidns=" + pid_ns + " ";
}

std::string Holder::text() const {
  return scope() + "pid=" + std::to_string(pid) + " start=" + std::to_string(start_ticks) + " host=" + host;
}

std::optional<Holder> parse_holder(const std::string &text) {
  std::istringstream in(text);
  std::string word;
  Holder h;
  bool pid = false, start = false;
  try {
    while (in >> word) {
      auto eq = word.find('=');
      if (eq == std::string::npos) return std::nullopt;
      auto k = word.substr(0, eq), v = word.substr(eq + 1);
      if (k == "boot")
        h.boot_id = v;
      else if (k == "pidns")
        h.pid_ns = v;
      else if (k == "pid")
        pid = (h.pid = std::stoll(v)) > 0;
      else if (k == "start")
        start = (h.start_ticks = std::stoll(v)) >= 0;
      else if (k == "host")
        h.host = v;
    }
  } catch (const std::exception &) {
    return std::nullopt;
  }
  if (h.boot_id.empty() || h.pid_ns.empty() || !pid || !start) return std::nullopt;
  return h;
}

const std::optional<Holder> &this_process() {
  static const std::optional<Holder> me = probe();
  return me;
}

HolderState holder_state(const std::optional<std::string> &holder) {
  const auto &me = this_process();
  if (!holder || !me) return HolderState::not_ours;
  auto h = parse_holder(*holder);
  if (!h || h->boot_id != me->boot_id || h->pid_ns != me->pid_ns) return HolderState::not_ours;
  // kill(pid, 0) sees every process of the namespace, even where /proc hides other users'
  // (hidepid): ESRCH is the only proof that none has that pid.
  if (::kill(static_cast<pid_t>(h->pid), 0) != 0 && errno == ESRCH) return HolderState::gone;
  auto stat = read_stat(h->pid);
  if (!stat) return HolderState::alive; // there, but /proc will not say more: never judged gone
  // A zombie (killed, not reaped: it sends nothing), or another process under the same pid.
  return stat->zombie || stat->start != h->start_ticks ? HolderState::gone : HolderState::alive;
}

namespace {
// Fails row r now when its sender is provably gone (as repair would at its deadline).
bool fail_if_gone(ledger::RepairLedger &l, const ledger::FileRecord &r, const config::Config &c,
                  int max_retries, const util::Clock &clock) {
  if (!c.fail_killed_runs || holder_state(r.holder) != HolderState::gone) return false;
  if (l.id_blocks().diverged) return false; // a restored copy: the row may be ACTIVE in the other
  auto h = parse_holder(*r.holder);
  std::string reason = "INTERRUPTED: the process that was uploading it (pid " + std::to_string(h->pid) +
                       " on this host) is gone";
  return l.fail_abandoned(r.id, *r.holder, reason, clock.now_ms(), grace_for(c, r.policy), max_retries) ==
         ledger::RepairOutcome::repaired;
}
} // namespace

RecoverSummary recover_abandoned(ledger::RepairLedger &l, const config::Config &c, int max_retries,
                                 const util::Clock &clock, const std::function<bool()> &history_ok) {
  RecoverSummary sum;
  const auto &me = this_process();
  // A diverged ledger (restored from a backup) holds rows whose confirm happened in the
  // other copy's history: a gone sender proves nothing there.
  if (!me || !c.fail_killed_runs || l.id_blocks().diverged) return sum;
  std::optional<bool> ours; // history_ok(), asked once, only when there is something to fail
  for (const auto &r : l.held_uploads(me->scope(), 10'000)) {
    ++sum.examined;
    if (holder_state(r.holder) != HolderState::gone) continue;
    if (!ours) ours = !history_ok || history_ok();
    if (!*ours) break;
    if (fail_if_gone(l, r, c, max_retries, clock)) {
      ++sum.failed;
      util::log::info("file #" + std::to_string(r.id) + " (" + r.relative_path +
                      "): its upload process is gone; failed now, not at its deadline");
    }
  }
  return sum;
}

bool wait_for_upload(ledger::WaitLedger &l, int64_t id, const config::Config &c, int max_retries,
                     const util::Clock &clock, const std::function<bool()> &stop) {
  return wait_for_holder(l, id, c, max_retries, clock, INT64_MAX, stop, {}).settled;
}

std::optional<int64_t> direct_until(const std::optional<std::string> &holder) {
  constexpr std::string_view k_direct = "direct until=";
  if (!holder || holder->rfind(k_direct, 0) != 0) return std::nullopt;
  std::string_view rest = std::string_view(*holder).substr(k_direct.size());
  return util::parse_int(rest.substr(0, rest.find(' '))); // " parts=N" may follow
}

std::string describe_holder(const ledger::FileRecord &row) {
  auto utc = [](int64_t ms) { return util::format_utc(ms, "%Y-%m-%dT%H:%M:%SZ"); };
  if (auto until = direct_until(row.holder))
    return "held by direct reservation #" + std::to_string(row.id) + " until " + utc(*until);
  if (auto h = row.holder ? parse_holder(*row.holder) : std::nullopt)
    return "being uploaded by pid " + std::to_string(h->pid) + " on " + h->host + " (its deadline " +
           utc(row.upload_deadline_at) + ")";
  return "being uploaded by another process (its deadline " + utc(row.upload_deadline_at) + ")";
}

HolderWait wait_for_holder(ledger::WaitLedger &l, int64_t id, const config::Config &c, int max_retries,
                           const util::Clock &clock, int64_t until_ms, const std::function<bool()> &stop,
                           const std::function<void(int64_t ms)> &pause) {
  int64_t pause_ms = 20;
  while (true) {
    auto row = l.find_file(id);
    if (!row || row->is_deleted || row->upload_status != ledger::FileStatus::uploading) return {true, {}};
    if (fail_if_gone(l, *row, c, max_retries, clock)) return {true, {}};
    const int64_t now = clock.now_ms();
    if (direct_until(row->holder) || now > row->upload_deadline_at || now >= until_ms || (stop && stop()))
      return {false, describe_holder(*row)};
    // Another process is sending it: its confirm (or failure) is a write to the ledger we
    // cannot be told of, so look again, less often as the wait grows.
    const int64_t ms = std::min(pause_ms, std::max<int64_t>(until_ms - now, 1));
    if (pause)
      pause(ms);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    pause_ms = std::min<int64_t>(pause_ms * 2, 500);
  }
}

} // namespace lodge::ops
