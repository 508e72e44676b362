#pragma once
// The command line, a renderer: it parses arguments, hands the flags and the environment to
// the configuration and to ops, renders what ops returns and exits with the status ops
// decided. Only this layer reads argv and the environment, prints or exits.

#include <cstdio>
#include <functional>
#include <lodge/config/config.hpp>
#include <lodge/error.hpp>
#include <lodge/ledger/ledger.hpp>
#include <lodge/ledger/outbox.hpp>
#include <lodge/mq/queue.hpp>
#include <lodge/ops/read/select.hpp>
#include <lodge/ops/session.hpp>
#include <lodge/ops/upload/run.hpp>
#include <lodge/store/store.hpp>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace lodge::cli {

struct Globals {
  std::string db, config, store, endpoint, region, ca_bundle, owner, profile, ledger_timeout;
  // --bwlimit of a command that moves object bytes (upload, get, cat): each such command
  // sets it from its own option before it opens a store.
  std::string bwlimit;
  bool no_verify_ssl = false;
  bool force_network_fs = false;
  bool json = false;
  bool quiet = false;
  int verbose = 0;
};

// What every command gets: the parsed global options and the environment; what it opens
// (the ledger, the store) is ops::Session's, from the configuration.
class Context : public ops::Session {
public:
  Globals g;
  std::map<std::string, std::string> env;
  bool stdout_tty = false;
  bool stderr_tty = false;

  // The effective configuration (loaded once, on first use).
  const config::Config &cfg();
  // The owner: --owner, LODGE_OWNER, then the config's default_owner; usage error if none.
  std::string owner();
  // Prints one JSON value on stdout (one line unless indent >= 0). Strings that are not
  // valid UTF-8 (file names can be any bytes) are printed with U+FFFD, never refused.
  void print_json(const nlohmann::json &value, int indent = -1) const;
  // Writes text (a form ops made: a table, a record) to stdout as it is.
  static void print_text(const std::string &text) { std::fwrite(text.data(), 1, text.size(), stdout); }

protected:
  const config::Config &configuration() override { return cfg(); }
  [[nodiscard]] const std::map<std::string, std::string> &environment() const override { return env; }
  [[nodiscard]] std::optional<uint64_t> rate_flag() override;
  void note(const std::string &line) override;
  void warn(const std::string &line) override;

private:
  std::unique_ptr<config::Config> m_cfg;
};

using Action = std::function<int(Context &)>;

struct Command {
  CLI::App *app;
  Action run;
};

// The selection `list` and `get` share (cmd_list.cpp): the search options as given.
struct SelectionCli {
  std::vector<std::string> metadata, tags;
  std::string since, until, sha256, min_size, max_size, sort, limit, prefix_glob, path_glob;
  bool reverse = false;
  bool latest = false;
  // Whether any of them was given (get: a selection instead of a file).
  [[nodiscard]] bool any() const;
};
void add_selection_options(CLI::App *sub, SelectionCli &o);
// The options checked (USAGE naming the option on a bad value) and made an ops::Selection;
// the owner, --prefix and include_dead are the command's to set.
[[nodiscard]] ops::Selection make_selection(const SelectionCli &o, int64_t now_ms);

// A queue of the configuration (cleanup.queue, events.queue; `what` names the key in
// errors) opened: SQS with the AWS shared files' profile, region and credential chain.
// `visibility_ms`: how long a received message stays invisible on SQS (0: the queue's own).
[[nodiscard]] std::unique_ptr<mq::MessageQueue>
open_message_queue(Context &ctx, const std::string &url, const char *what, int64_t visibility_ms = 0);

// `lodge init`'s outbox: the cleanup mode and upload event types from --cleanup-via and
// --events, else the configuration's cleanup.via and events.types, recorded in the ledger
// once their queues exist (ensure_queues). IN_PROGRESS while cleanup events are in flight.
ledger::OutboxSettings apply_outbox_settings(Context &ctx, ledger::Ledger &l, const std::string &via_flag,
                                             const std::string &events_flag);

// `lodge debug queue publish|receive|counts URL`: a queue as a test sees it (a forged message
// published, a dead-letter queue read); hidden under `debug`.
Action add_debug_queue(CLI::App &debug);

// The whole command line in `app`: lodge's description, --version (into `version`), the global
// options (into `g`) and every command, in the order lodge --help lists them. run() parses with
// it; lodge_mangen (src/cli/mangen/) writes the man pages from the same tree.
std::vector<Command> build_app(CLI::App &app, Globals &g, bool &version);

// Each command adds its subcommand to the app and returns what runs it.
Command add_init(CLI::App &app);
Command add_status(CLI::App &app);
Command add_config(CLI::App &app);
Command add_upload(CLI::App &app);
Command add_reserve(CLI::App &app);
Command add_confirm(CLI::App &app);
Command add_list(CLI::App &app);
Command add_sweep(CLI::App &app);
Command add_repair(CLI::App &app);
Command add_reconcile(CLI::App &app);
Command add_delete(CLI::App &app);
Command add_tasks(CLI::App &app);
Command add_retry(CLI::App &app);
Command add_prune(CLI::App &app);
Command add_relay(CLI::App &app);
Command add_consume(CLI::App &app);
Command add_show(CLI::App &app);
Command add_get(CLI::App &app);
Command add_cat(CLI::App &app);
Command add_url(CLI::App &app);
Command add_lifecycle(CLI::App &app);
Command add_doctor(CLI::App &app);
Command add_debug(CLI::App &app);
// `lodge completion SHELL`: the script for `app`'s whole tree (completion.cpp).
Command add_completion(CLI::App &app);
[[nodiscard]] std::string completion_script(CLI::App &root, const std::string &shell);
// An option whose value is one of `values`: checked when parsed ("expected A, B or C, got 'X'"),
// and completed from the same list by `lodge completion`.
CLI::Option *choices(CLI::Option *opt, std::vector<std::string> values);
// The fixed values choices() gave an option (empty: any value), for completion and the man pages.
[[nodiscard]] std::vector<std::string> option_choices(CLI::Option *opt);
// A word for a POSIX shell: single-quoted, its own quotes closed and escaped.
[[nodiscard]] std::string shell_quote(const std::string &s);
// An option for which '' is a value with its own meaning (list and get --prefix '': the files
// uploaded without one). Every other option refuses an empty value (refuse_empty_values).
CLI::Option *empty_is_a_value(CLI::Option *opt);
// Gives every option that takes a value, in `app` and all its commands, the one check that an
// empty value is a usage error: '' is never taken for "not given" (an unset variable, as in
// --expire-after "$UNSET", would otherwise silently mean the default).
void refuse_empty_values(CLI::App &app);
// Wraps a job's command (sweep, repair, reconcile) so that every way it ends leaves a
// job_run: the command records its own outcome when it returns; an exception records a
// failed run carrying the error (so `status` does not show the last good run as the
// latest), then goes on to main. A --dry-run records nothing.
Command recorded_job(const char *job, Command c);
// A job's worker id in job_run and leases: host:pid.
[[nodiscard]] std::string default_worker();
// Cron mails whatever a job prints: a job says nothing on success unless asked (-v) or on a
// terminal.
[[nodiscard]] bool speak(const Context &ctx);

// The exit statuses (man/lodge.1 EXIT STATUS, README "Commands"), read from the Errc table so
// the two cannot drift apart.
[[nodiscard]] inline int exit_status(Errc code) {
  return errc_info(code).exit_code;
}
// "Some items failed or were found": the status every per-item code (a rejection,
// STATE_CHANGED, a dead letter's STORAGE_ERROR) has.
[[nodiscard]] inline int exit_items_failed() {
  return exit_status(Errc::storage_error);
}

// SIGINT, SIGTERM, SIGHUP, or a closed stdout: stop starting new work. A second signal
// also aborts the transfers in flight (http::set_abort_flag): aborted().
bool interrupted();
bool aborted();
bool broken_pipe(); // stdout's reader went away (EPIPE): exit 141, as a shell reports SIGPIPE
// Installs the handlers; `announce`: the first signal says how many uploads are finishing
// and how to abort them, the second that they are being aborted.
void install_interrupt_handlers(bool announce = false);
// An upload run's cancellation, stopped by the handlers above: the uploads in flight (files
// a worker took up and has not reported yet, a pending confirm included) and the stop are
// one atomic word (ops::StopWord), so the first interruption counts exactly the files begun
// before it, and no file begins after it.
[[nodiscard]] ops::RunCancel &run_cancel();
// After a write to stdout: notes EPIPE as an interruption.
void check_stdout();

int main(int argc, char **argv);

} // namespace lodge::cli
