#include "support.hpp"
#include "support/decode.hpp"

#include <csignal>
#include <lodge/ops/holder.hpp>
#include <sys/wait.h>
#include <unistd.h>

using namespace lodge;

TEST_CASE("holder: this process is alive; a reaped child, a zombie and another boot are told apart") {
  const auto &me = ops::this_process();
  REQUIRE(me); // Linux with /proc
  CHECK(me->pid == ::getpid());
  auto parsed = ops::parse_holder(me->text());
  REQUIRE(parsed);
  CHECK(parsed->text() == me->text());
  CHECK(ops::holder_state(me->text()) == ops::HolderState::alive);
  CHECK(ops::holder_state(std::nullopt) == ops::HolderState::not_ours);

  // A process that existed and is gone: first a zombie (killed, not reaped), then reaped.
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ops::Holder h = *me;
  h.pid = child;
  // Its start time as /proc has it: the holder a reserve in that process would record.
  ops::Holder probe = h;
  auto started = test::process_start_ticks(child);
  REQUIRE(started);
  probe.start_ticks = *started;
  REQUIRE(ops::holder_state(probe.text()) == ops::HolderState::alive);
  h.start_ticks = probe.start_ticks + 1; // another process that got the same pid later
  CHECK(ops::holder_state(h.text()) == ops::HolderState::gone);
  ::kill(child, SIGKILL);
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0); // a zombie now
  CHECK(ops::holder_state(probe.text()) == ops::HolderState::gone);
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  CHECK(ops::holder_state(probe.text()) == ops::HolderState::gone);

  ops::Holder other_boot = *me;
  other_boot.boot_id = "00000000-0000-4000-8000-000000000000";
  other_boot.pid = child;
  CHECK(ops::holder_state(other_boot.text()) == ops::HolderState::not_ours);
  ops::Holder other_ns = probe;
  other_ns.pid_ns = "1";
  CHECK(ops::holder_state(other_ns.text()) == ops::HolderState::not_ours);

  CHECK_FALSE(ops::parse_holder("pid=1 start=2"));
  CHECK_FALSE(ops::parse_holder("boot=b pidns=1 pid=x start=2"));
  CHECK_FALSE(ops::parse_holder("garbage"));
  CHECK(ops::holder_state(std::string("garbage")) == ops::HolderState::not_ours);
}
