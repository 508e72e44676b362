#include "cli.hpp"
#include "flags.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <lodge/config/names.hpp>
#include <lodge/config/owner.hpp>
#include <lodge/failpoint.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/http/version.hpp>
#include <lodge/ledger/version.hpp>
#include <lodge/ops/version.hpp>
#include <lodge/util/log.hpp>
#include <lodge/util/strings.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

namespace lodge::cli {

const config::Config &Context::cfg() {
  if (!m_cfg) {
    config::ConfigInputs in;
    if (!g.config.empty()) in.config_flag = g.config;
    in.env = env;
    auto flag = [&](const char *k, const std::string &v) {
      if (!v.empty()) in.flags[k] = v;
    };
    flag("ledger", g.db);
    flag("store", g.store);
    flag("endpoint", g.endpoint);
    flag("region", g.region);
    flag("ca_bundle", g.ca_bundle);
    flag("profile", g.profile);
    flag("owner", g.owner);
    flag("ledger_timeout", g.ledger_timeout);
    in.no_verify_ssl = g.no_verify_ssl;
    in.force_network_fs = g.force_network_fs;
    m_cfg = std::make_unique<config::Config>(config::load(in));
  }
  return *m_cfg;
}

std::optional<uint64_t> Context::rate_flag() {
  return flags::bwlimit(g.bwlimit);
}

void Context::note(const std::string &line) {
  if (!g.quiet) std::fprintf(stderr, "lodge: %s\n", line.c_str());
}

void Context::warn(const std::string &line) {
  if (!g.quiet) std::fprintf(stderr, "lodge: warning: %s\n", line.c_str());
}

std::string Context::owner() {
  return config::owner(cfg());
}

namespace {
std::atomic<int> g_signals{0};    // SIGINT, SIGTERM, SIGHUP received (a broken stdout counts as one)
std::atomic<bool> g_abort{false}; // the second: transfers in flight are aborted
std::atomic<bool> g_broken_pipe{false};
// The uploads in flight and the stop, one word (ops::StopWord): the first interruption's
// count is exactly the files begun before it, and none begins after it. Lock-free, so its
// stop() is safe in a signal handler.
class CliStop final : public ops::StopWord {
public:
  [[nodiscard]] bool broken_pipe() const override { return g_broken_pipe.load(); }
  [[nodiscard]] bool aborted() const override { return g_abort.load(); }
};
CliStop g_stop;
std::atomic<bool> g_announce{false};
std::atomic<bool> g_tty{false}; // stderr: a progress line to clear first

// Async-signal-safe: write(2) of a message built without allocation.
void say(const char *a, int64_t n, const char *b) {
  char buf[160];
  size_t len = 0;
  auto put = [&](const char *s) {
    while (*s && len < sizeof buf)
      buf[len++] = *s++;
  };
  put(a);
  if (n >= 0) {
    char digits[24];
    int d = 0;
    do {
      digits[d++] = static_cast<char>('0' + n % 10);
      n /= 10;
    } while (n > 0 && d < 23);
    while (d > 0 && len < sizeof buf)
      buf[len++] = digits[--d];
  }
  put(b);
  ssize_t ignored = ::write(2, buf, len);
  (void)ignored;
}

void note_interrupt(bool from_signal) {
  int n = ++g_signals;
  const int64_t f = g_stop.stop(); // no file begins from here on
  if (n >= 2) g_abort = true;
  if (!from_signal || !g_announce.load()) return;
  if (n == 1) {
    say(g_tty ? "\r\033[Klodge: finishing " : "lodge: finishing ", f,
        f == 1 ? " upload in flight (Ctrl-C again to abort it)\n"
               : " uploads in flight (Ctrl-C again to abort them)\n");
  } else if (n == 2) {
    say(g_tty ? "\r\033[Klodge: aborting the uploads in flight" : "lodge: aborting the uploads in flight", -1,
        "\n");
  }
}

extern "C" void on_interrupt(int /*signal*/) {
  note_interrupt(true);
}
} // namespace

bool interrupted() {
  return g_signals.load() > 0;
}

bool aborted() {
  return g_abort.load();
}

bool broken_pipe() {
  return g_broken_pipe.load();
}

ops::RunCancel &run_cancel() {
  return g_stop;
}

void check_stdout() {
  if (g_broken_pipe.load() || !std::ferror(stdout) || errno != EPIPE) return;
  // The reader went away (`lodge upload … | head -1`): stop as at a first Ctrl-C; the rest
  // is said on stderr.
  g_broken_pipe = true;
  note_interrupt(false);
}

void install_interrupt_handlers(bool announce) {
  g_announce = announce;
  g_tty = ::isatty(2) == 1;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  // A closed stdout is EPIPE on the write (check_stdout), not a silent death mid-upload.
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, nullptr);
  http::set_abort_flag(&g_abort);
}

void Context::print_json(const nlohmann::json &value, int indent) const {
  std::string line = value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  check_stdout();
}

namespace {

std::map<std::string, std::string> read_environment() {
  std::map<std::string, std::string> env;
  for (char **e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

int report(const Context &ctx, const Error &e) {
  // The last guard: a URL's password or a password= a library quoted never reaches either.
  const std::string redacted = util::log::redact(e.message);
  std::string msg = util::escape_for_terminal(redacted);
  std::fprintf(stderr, "lodge: error: %s (%s)\n", msg.c_str(), std::string(e.name()).c_str());
  if (ctx.g.json) {
    nlohmann::json j;
    j["error"] = {{"code", e.name()}, {"message", redacted}};
    ctx.print_json(j);
  }
  return e.exit_code();
}

// The global options, for every subcommand's --help: they are accepted after the command
// too (fallthrough), and a user reading `lodge upload --help` should not have to guess.
std::string global_options_help(CLI::App &app) {
  std::string out = "Global options (before or after the command; see lodge --help):\n";
  for (const auto *opt :
       app.get_options([](const CLI::Option *o) { return o->get_group() == "Global options"; })) {
    std::string name = opt->get_name(false, true);
    if (!opt->get_type_name().empty() && opt->get_expected_min() > 0) name += " " + opt->get_type_name();
    char line[512];
    std::snprintf(line, sizeof line, "  %-28s%s\n", name.c_str(), opt->get_description().c_str());
    out += line;
  }
  return out;
}

constexpr const char *k_empty_is_a_value = "lodge-empty-is-a-value";

bool takes_empty(CLI::Option *opt) {
  try {
    (void)opt->get_validator(k_empty_is_a_value);
    return true;
  } catch (const CLI::OptionNotFound &) {
    return false;
  }
}

void add_global_footer(CLI::App &sub, const std::string &text) {
  sub.footer(text);
  for (auto *nested : sub.get_subcommands([](const CLI::App *) { return true; }))
    add_global_footer(*nested, text);
}

// One warning per LODGE_* variable lodge does not know, with the nearest known name.
void warn_unknown_environment(const std::map<std::string, std::string> &env) {
  for (const auto &[name, best] : config::unknown_environment(env))
    std::fprintf(stderr, "lodge: warning: unknown environment variable %s, ignored%s\n",
                 util::escape_for_terminal(name).c_str(),
                 best.empty() ? "" : (" (did you mean " + best + "?)").c_str());
}

} // namespace

CLI::Option *empty_is_a_value(CLI::Option *opt) {
  return opt->check(
      CLI::Validator([](const std::string &) { return std::string(); }, "", k_empty_is_a_value));
}

void refuse_empty_values(CLI::App &app) {
  for (auto *opt : app.get_options([](const CLI::Option *o) { return o->nonpositional(); }))
    if (opt->get_expected_max() > 0 && !takes_empty(opt))
      opt->check(CLI::Validator(
          [](const std::string &v) {
            return v.empty() ? std::string("empty value: give a value, or leave the option out")
                             : std::string();
          },
          ""));
  for (auto *sub : app.get_subcommands([](const CLI::App *) { return true; }))
    refuse_empty_values(*sub);
}

// The whole command; main() only makes sure nothing escapes it.
int run(int argc, char **argv);

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "lodge: error: %s (INTERNAL)\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "lodge: error: unknown failure (INTERNAL)\n");
  }
  return exit_status(Errc::internal);
}

namespace {
// Declares the global options (before or after the command), each into its field of g.
void add_global_options(CLI::App &app, Globals &g) {
  app.add_option("--db", g.db,
                 "Ledger: a SQLite file, a postgres:// URL or a libpq keyword string (env LODGE_DB)")
      ->type_name("PATH")
      ->group("Global options");
  app.add_option("--ledger-timeout", g.ledger_timeout,
                 "PostgreSQL ledger: the longest wait for the server, e.g. 30s (env LODGE_LEDGER_TIMEOUT)")
      ->group("Global options");
  app.add_option("--config", g.config, "Configuration file (env LODGE_CONFIG)")
      ->type_name("FILE")
      ->group("Global options");
  app.add_option("--store", g.store,
                 "s3://bucket/prefix, az://container/prefix or file:///dir (env LODGE_STORE)")
      ->group("Global options");
  app.add_option("--owner", g.owner, "Owner of the files (env LODGE_OWNER)")->group("Global options");
  app.add_option("--endpoint", g.endpoint,
                 "S3 endpoint URL (env AWS_ENDPOINT_URL), or Azure blob endpoint (env LODGE_ENDPOINT)")
      ->group("Global options");
  app.add_option("--region", g.region, "S3 region (env AWS_REGION)")->group("Global options");
  app.add_option("--ca-bundle", g.ca_bundle, "CA bundle for TLS (env AWS_CA_BUNDLE)")
      ->type_name("FILE")
      ->group("Global options");
  app.add_option("--profile", g.profile,
                 "AWS profile of ~/.aws/config and ~/.aws/credentials (env AWS_PROFILE); `lodge config "
                 "--explain` shows what was used")
      ->group("Global options");
  app.add_flag("--no-verify-ssl", g.no_verify_ssl, "Do not verify TLS certificates (unsafe)")
      ->group("Global options");
  app.add_flag("--force-network-fs", g.force_network_fs, "Allow a ledger on a network filesystem")
      ->group("Global options");
  app.add_flag("--json", g.json, "Print JSON Lines on stdout")->group("Global options");
  app.add_flag("-q,--quiet", g.quiet, "Print only errors")->group("Global options");
  app.add_flag("-v,--verbose", g.verbose, "More diagnostics on stderr (-vv: debug)")->group("Global options");
}

// Declares every command, in the order lodge --help lists them; each has the global options' help.
std::vector<Command> add_commands(CLI::App &app) {
  std::vector<Command> commands{add_init(app),
                                add_status(app),
                                add_config(app),
                                add_upload(app),
                                add_reserve(app),
                                add_confirm(app),
                                add_list(app),
                                recorded_job("sweep", add_sweep(app)),
                                recorded_job("repair", add_repair(app)),
                                recorded_job("reconcile", add_reconcile(app)),
                                add_prune(app), // recorded_job inside: --owner '*' is taken first
                                recorded_job("relay", add_relay(app)),
                                recorded_job("consume", add_consume(app)),
                                add_delete(app),
                                add_tasks(app),
                                add_retry(app),
                                add_show(app),
                                add_get(app),
                                add_cat(app),
                                add_url(app),
                                add_lifecycle(app),
                                add_doctor(app),
                                add_completion(app),
                                add_debug(app)};
  refuse_empty_values(app);
  const std::string globals = global_options_help(app);
  for (auto &c : commands)
    add_global_footer(*c.app, globals);
  return commands;
}

// The usage error for a command line that did not parse: a misspelled command is named, with
// the nearest known one.
LodgeError usage_error(const CLI::ParseError &e, int argc, char **argv, CLI::App &app,
                       const std::vector<Command> &commands) {
  // A misspelled command: say which one was meant.
  if (argc > 1) {
    // The first word that is neither an option nor a global option's value.
    std::string first;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.empty() || a[0] != '-') {
        first = a;
        break;
      }
      auto *opt = a.find('=') == std::string::npos ? app.get_option_no_throw(a) : nullptr;
      if (opt && opt->get_expected_min() > 0) ++i;
    }
    std::vector<std::string> names;
    names.reserve(commands.size());
    for (const auto &c : commands)
      names.push_back(c.app->get_name());
    const bool is_command = std::find(names.begin(), names.end(), first) != names.end();
    const std::string best = config::nearest_name(first, names, 3);
    if (!first.empty() && !is_command && app.get_subcommands().empty()) {
      std::string msg = "unknown command '" + util::escape_for_terminal(first) + "'";
      if (!best.empty()) msg += "; did you mean '" + best + "'?";
      return LodgeError(Errc::usage, msg + " (see lodge --help)");
    }
  }
  return LodgeError(Errc::usage, e.what() + std::string(" (see lodge --help)"));
}

// Sets up diagnostics as the parsed options and the environment ask: the log's level and
// sink on stderr, warnings for unknown LODGE_* variables, the failpoints.
void set_up_diagnostics(const Context &ctx) {
  const auto &g = ctx.g;
  util::log::set_level(g.quiet          ? util::log::Level::error
                       : g.verbose >= 2 ? util::log::Level::debug
                       : g.verbose == 1 ? util::log::Level::info
                                        : util::log::Level::warn);
  util::log::set_sink([](util::log::Level lvl, std::string_view line) {
    const char *tag = lvl == util::log::Level::error  ? "error: "
                      : lvl == util::log::Level::warn ? "warning: "
                                                      : "";
    std::string s = "lodge: " + std::string(tag) + std::string(line) + "\n";
    std::fwrite(s.data(), 1, s.size(), stderr);
  });
  if (!g.quiet) warn_unknown_environment(ctx.env);
  if (auto it = ctx.env.find("LODGE_FAILPOINTS"); it != ctx.env.end() && !it->second.empty()) {
    auto log = ctx.env.find("LODGE_FAILPOINTS_LOG");
    failpoint::configure(it->second, log == ctx.env.end() ? std::string{} : log->second);
  }
}
// lodge --version: lodge's version and those of the libraries it runs with, each read from
// the library loaded (a shared library may be newer than the headers lodge was built with).
void print_version(const Context &ctx) {
  const http::CurlVersion curl = http::curl_version();
  const std::string sqlite = ledger::sqlite_version();
  const std::string libpq = ledger::libpq_version();
  const std::string libmagic = ops::libmagic_version();
  if (ctx.g.json) {
    ctx.print_json({{"lodge", LODGE_VERSION},
                    {"libraries",
                     {{"libcurl", {{"version", curl.version}, {"tls", curl.tls}}},
                      {"sqlite", sqlite},
                      {"libpq", libpq},
                      {"libmagic", libmagic}}}});
    return;
  }
  std::printf("lodge %s\n", LODGE_VERSION);
  std::string text = "libcurl " + curl.version;
  if (!curl.tls.empty()) text += " (" + curl.tls + ")";
  text += "\nSQLite " + sqlite + "\nlibpq " + libpq + "\nlibmagic " + libmagic + "\n";
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  check_stdout();
}
} // namespace

std::vector<Command> build_app(CLI::App &app, Globals &g, bool &version) {
  app.description("lodge: reliable uploads to S3-compatible, Azure or file:// storage, kept in a ledger");
  app.name("lodge");
  // --version is a plain flag, not CLI11's version flag, so that --json (before or after it)
  // applies: the command is then optional, and "no command given" is said in run().
  app.add_flag("--version", version,
               "Print lodge's version and those of the libraries it runs with (libcurl and its TLS "
               "backend, SQLite, libpq, libmagic); with --json, one object")
      ->group("Global options");
  app.require_subcommand(0, 1);
  app.fallthrough();
  add_global_options(app, g);
  return add_commands(app);
}

int run(int argc, char **argv) {
  ::umask(077);
  http::global_init();
  Context ctx;
  ctx.env = read_environment();
  ctx.stdout_tty = ::isatty(STDOUT_FILENO) != 0;
  ctx.stderr_tty = ::isatty(STDERR_FILENO) != 0;

  CLI::App app;
  bool version = false;
  std::vector<Command> commands = build_app(app, ctx.g, version);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
      if (e.get_exit_code() == 0) return app.exit(e); // --help
      throw usage_error(e, argc, argv, app, commands);
    }
    if (version) {
      print_version(ctx);
      return 0;
    }
    set_up_diagnostics(ctx);
    for (auto &c : commands)
      if (c.app->parsed()) return c.run(ctx);
    throw LodgeError(Errc::usage, "no command given (see lodge --help)");
  } catch (const LodgeError &e) {
    return report(ctx, e.error());
  } catch (const std::exception &e) {
    return report(ctx, Error(Errc::internal, e.what()));
  }
}

} // namespace lodge::cli
