// `lodge completion bash|zsh|fish`: a completion script generated, at run time, from the very
// CLI::App tree that parses the command line, so it cannot drift from `lodge --help`: the
// commands are the visible subcommands, the options their options (and the global ones, which
// fall through to every command), the fixed values those of choices() (the validator that
// also checks them), and a path is completed where the option's type name says FILE, DIR or
// PATH.

#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace lodge::cli {

namespace {
constexpr const char *k_choices_validator = "lodge-choices";

std::string join(const std::vector<std::string> &v, const std::string &sep) {
  std::string out;
  for (const auto &s : v) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}
} // namespace

CLI::Option *choices(CLI::Option *opt, std::vector<std::string> values) {
  std::string said;
  for (size_t i = 0; i < values.size(); ++i)
    said += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  CLI::Validator check(
      [values, said](const std::string &in) -> std::string {
        if (std::find(values.begin(), values.end(), in) != values.end()) return "";
        return "expected " + said + ", got '" + in + "'";
      },
      "{" + join(values, ",") + "}", k_choices_validator);
  return opt->check(check);
}

std::vector<std::string> option_choices(CLI::Option *opt) {
  std::vector<std::string> values;
  try {
    // The validator choices() added: its description is the set, "{A,B,C}".
    auto desc = opt->get_validator(k_choices_validator)->get_description();
    std::stringstream in(desc.substr(1, desc.size() - 2));
    for (std::string v; std::getline(in, v, ',');)
      values.push_back(v);
  } catch (const CLI::OptionNotFound &) {
    // no fixed set
  }
  return values;
}

std::string shell_quote(const std::string &s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {

// What a completion needs to know of one option.
struct Opt {
  std::vector<std::string> shorts; // without the dash
  std::vector<std::string> longs;  // without the dashes
  std::string help;
  std::string type_name;
  bool takes_value = false;
  bool path = false;
  bool dir = false;
  std::vector<std::string> values; // a fixed set; empty: any value
};

// One command: `lodge`, `lodge upload`, `lodge debug failpoints`.
struct Cmd {
  std::vector<std::string> path; // "lodge", "upload", …
  std::string help;
  std::vector<const Cmd *> subs;
  std::vector<Opt> options; // its own and those falling through from its parents
  bool positional = false;  // takes words that are not options
  bool positional_path = false;
  std::vector<std::string> positional_values; // a fixed set (choices())
  std::string positional_name;
  [[nodiscard]] std::string name() const { return join(path, " "); }
  [[nodiscard]] std::string ident() const { return "_" + join(path, "_"); }
};

bool is_path_type(const std::string &t) {
  return t == "FILE" || t == "PATH" || t == "DIR";
}

Opt describe_option(CLI::Option *o) {
  Opt out;
  out.shorts = o->get_snames();
  out.longs = o->get_lnames();
  out.help = o->get_description();
  out.type_name = o->get_type_name();
  out.takes_value = o->get_expected_max() > 0;
  out.path = is_path_type(out.type_name);
  out.dir = out.type_name == "DIR";
  out.values = option_choices(o);
  return out;
}

// --name and -n forms of an option.
std::vector<std::string> flag_names(const Opt &o) {
  std::vector<std::string> out;
  for (const auto &s : o.shorts)
    out.push_back("-" + s);
  for (const auto &l : o.longs)
    out.push_back("--" + l);
  return out;
}

// Every visible command, depth first, parents before children.
class Tree {
public:
  explicit Tree(CLI::App &root) { add(root, {root.get_name()}, {}); }
  [[nodiscard]] const std::vector<std::unique_ptr<Cmd>> &commands() const { return m_cmds; }

private:
  const Cmd *add(CLI::App &app, std::vector<std::string> path, const std::vector<Opt> &inherited) {
    auto cmd = std::make_unique<Cmd>();
    cmd->path = std::move(path);
    cmd->help = app.get_description();
    std::vector<Opt> own;
    for (auto *o : app.get_options()) {
      if (o->nonpositional()) {
        own.push_back(describe_option(o));
      } else {
        cmd->positional = true;
        cmd->positional_path = cmd->positional_path || is_path_type(o->get_type_name());
        cmd->positional_name = o->get_name();
        cmd->positional_values = describe_option(o).values;
      }
    }
    cmd->options = own;
    // The parents' options are accepted after the command too, unless it has its own of that
    // name (each command has its own --help).
    auto has = [&own](const std::string &name) {
      return std::any_of(own.begin(), own.end(), [&name](const Opt &o) {
        auto names = flag_names(o);
        return std::find(names.begin(), names.end(), name) != names.end();
      });
    };
    if (app.get_fallthrough())
      for (const auto &o : inherited)
        if (auto names = flag_names(o); std::none_of(names.begin(), names.end(), has))
          cmd->options.push_back(o);
    auto *raw = cmd.get();
    m_cmds.push_back(std::move(cmd));
    // Hidden commands (no group) are left out, as lodge --help leaves them out.
    for (auto *sub : app.get_subcommands([](const CLI::App *s) { return !s->get_group().empty(); })) {
      auto child_path = raw->path;
      child_path.push_back(sub->get_name());
      raw->subs.push_back(add(*sub, child_path, raw->options));
    }
    return raw;
  }
  std::vector<std::unique_ptr<Cmd>> m_cmds;
};

std::string bash_kind(const Opt &o) {
  if (!o.takes_value) return "flag";
  if (!o.values.empty()) return "choice:" + join(o.values, " ");
  if (o.dir) return "dir";
  if (o.path) return "path";
  return "value";
}

// The bash function reads the tree from these tables; the walk itself is fixed text.
constexpr const char *k_bash_body = R"BASH(
_lodge() {
    local words=() cword=0 glue=0 i w
    # Bash splits at COMP_WORDBREAKS (= and :); '--status=FAILED' and 'aws:kms' are one word.
    for ((i = 0; i <= COMP_CWORD && i < ${#COMP_WORDS[@]}; i++)); do
        w=${COMP_WORDS[i]}
        if ((i > 1)) && { ((glue)) || [[ $w == "=" || $w == ":" ]]; }; then
            words[${#words[@]} - 1]+=$w
        else
            words+=("$w")
        fi
        if [[ $w == "=" || $w == ":" ]]; then glue=1; else glue=0; fi
        ((i == COMP_CWORD)) && cword=$((${#words[@]} - 1))
    done
    local cur=${words[cword]} cmd=lodge skip=0 kind sub
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if ((skip)); then skip=0; continue; fi
        case $w in
        --*=*) continue ;;
        -?*)
            kind=$(_lodge_kind "$cmd" "$w")
            [[ -n $kind && $kind != flag ]] && skip=1
            continue
            ;;
        esac
        for sub in $(_lodge_subcommands "$cmd"); do
            if [[ $w == "$sub" ]]; then cmd+=" $w"; break; fi
        done
    done
    local value_of=""
    if ((skip)); then
        value_of=${words[cword - 1]}
    elif [[ $cur == --*=* ]]; then
        value_of=${cur%%=*}
        cur=${cur#*=}
    fi
    COMPREPLY=()
    if [[ -n $value_of ]]; then
        kind=$(_lodge_kind "$cmd" "$value_of")
        case $kind in
        path) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
        dir) compopt -o filenames 2>/dev/null; mapfile -t COMPREPLY < <(compgen -d -- "$cur") ;;
        choice:*) mapfile -t COMPREPLY < <(compgen -W "${kind#choice:}" -- "$cur") ;;
        esac
    elif [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$(_lodge_options "$cmd")" -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -W "$(_lodge_subcommands "$cmd") $(_lodge_positional_values "$cmd")" -- "$cur")
        if _lodge_positional_path "$cmd"; then
            compopt -o filenames 2>/dev/null
            mapfile -t -O ${#COMPREPLY[@]} COMPREPLY < <(compgen -f -- "$cur")
        fi
    fi
    # Readline replaces only what follows the last '=' or ':' of the word.
    if [[ $cur == *[=:]* && $COMP_WORDBREAKS == *:* ]]; then
        local lead=${cur%"${cur##*[=:]}"}
        for i in "${!COMPREPLY[@]}"; do COMPREPLY[i]=${COMPREPLY[i]#"$lead"}; done
    fi
}
complete -F _lodge lodge
)BASH";

std::string bash_script(const Tree &tree) {
  std::ostringstream s;
  s << "# bash completion for lodge; generated by `lodge completion bash` from lodge's own command tree.\n"
       "# Install: lodge completion bash > ~/.local/share/bash-completion/completions/lodge\n\n";
  s << "_lodge_subcommands() {\n    case $1 in\n";
  for (const auto &c : tree.commands()) {
    if (c->subs.empty()) continue;
    std::vector<std::string> names;
    for (const auto *sub : c->subs)
      names.push_back(sub->path.back());
    s << "    " << shell_quote(c->name()) << ") echo " << shell_quote(join(names, " ")) << " ;;\n";
  }
  s << "    esac\n}\n\n_lodge_options() {\n    case $1 in\n";
  for (const auto &c : tree.commands()) {
    std::vector<std::string> names;
    for (const auto &o : c->options)
      for (const auto &n : flag_names(o))
        names.push_back(n);
    s << "    " << shell_quote(c->name()) << ") echo " << shell_quote(join(names, " ")) << " ;;\n";
  }
  s << "    esac\n}\n\n# flag, value, path, dir or choice:VALUES\n_lodge_kind() {\n    case $1/$2 in\n";
  for (const auto &c : tree.commands())
    for (const auto &o : c->options) {
      std::vector<std::string> keys;
      for (const auto &n : flag_names(o))
        keys.push_back(shell_quote(c->name() + "/" + n));
      s << "    " << join(keys, " | ") << ") echo " << shell_quote(bash_kind(o)) << " ;;\n";
    }
  s << "    esac\n}\n\n_lodge_positional_path() {\n    case $1 in\n";
  for (const auto &c : tree.commands())
    if (c->positional_path) s << "    " << shell_quote(c->name()) << ") return 0 ;;\n";
  s << "    esac\n    return 1\n}\n\n_lodge_positional_values() {\n    case $1 in\n";
  for (const auto &c : tree.commands())
    if (!c->positional_values.empty())
      s << "    " << shell_quote(c->name()) << ") echo " << shell_quote(join(c->positional_values, " "))
        << " ;;\n";
  s << "    esac\n}\n" << k_bash_body;
  return s.str();
}

// Text inside a zsh _arguments spec: brackets and colons escaped; the whole is single-quoted.
std::string zsh_escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    if (c == '[' || c == ']' || c == ':' || c == '\\') out += '\\';
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out;
}

std::string zsh_action(const Opt &o) {
  const std::string msg = zsh_escape(o.type_name.empty() ? "VALUE" : o.type_name);
  if (!o.values.empty()) {
    std::vector<std::string> v;
    for (const auto &x : o.values)
      v.push_back(zsh_escape(x));
    return ":" + msg + ":(" + join(v, " ") + ")";
  }
  if (o.dir) return ":" + msg + ":_files -/";
  if (o.path) return ":" + msg + ":_files";
  return ":" + msg + ": ";
}

void zsh_function(std::ostringstream &s, const Cmd &c) {
  s << c.ident() << "() {\n";
  if (!c.subs.empty()) s << "    local curcontext=$curcontext state line\n    typeset -A opt_args\n";
  // A command with subcommands stops at the first word that is not an option (-A): the words
  // after it, global options included, are the subcommand's to complete (its function knows
  // the global options too), not this function's, which would offer only its own.
  s << "    _arguments" << (c.subs.empty() ? "" : " -C -A '-*'") << " -s \\\n";
  for (const auto &o : c.options) {
    const std::string help = "[" + zsh_escape(o.help) + "]";
    for (const auto &n : flag_names(o)) {
      const bool is_long = n.rfind("--", 0) == 0;
      s << "        '*" << n << (o.takes_value && is_long ? "=" : "") << help
        << (o.takes_value ? zsh_action(o) : "") << "' \\\n";
    }
  }
  if (!c.subs.empty()) {
    s << "        '1: :->command' \\\n        '*:: :->argument'\n";
    s << "    case $state in\n    command)\n        local -a commands=(\n";
    for (const auto *sub : c.subs)
      s << "            '" << zsh_escape(sub->path.back()) << ":" << zsh_escape(sub->help) << "'\n";
    s << "        )\n        _describe -t commands 'lodge command' commands ;;\n    argument)\n"
         "        case $line[1] in\n";
    for (const auto *sub : c.subs)
      s << "        " << sub->path.back() << ") " << sub->ident() << " ;;\n";
    s << "        esac ;;\n    esac\n}\n\n";
  } else if (c.positional) {
    const std::string name = zsh_escape(c.positional_name);
    std::vector<std::string> values;
    for (const auto &v : c.positional_values)
      values.push_back(zsh_escape(v));
    const std::string action = c.positional_path ? "_files"
                               : !values.empty() ? "(" + join(values, " ") + ")"
                                                 : " ";
    s << "        '*:" << name << ":" << action << "'\n}\n\n";
  } else {
    s << "        && return 0\n}\n\n";
  }
}

std::string zsh_script(const Tree &tree) {
  std::ostringstream s;
  s << "#compdef lodge\n# zsh completion for lodge; generated by `lodge completion zsh` from lodge's own "
       "command tree.\n# Install: lodge completion zsh > \"${fpath[1]}/_lodge\" (or any directory in "
       "$fpath)\n\n";
  for (const auto &c : tree.commands())
    zsh_function(s, *c);
  s << "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n    _lodge \"$@\"\nelse\n"
       "    compdef _lodge lodge\nfi\n";
  return s.str();
}

// Single-quoted for fish (which knows \' and \\ there).
std::string fish_quoted(const std::string &text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string fish_script(const Tree &tree) {
  std::ostringstream s;
  s << "# fish completion for lodge; generated by `lodge completion fish` from lodge's own command tree.\n"
       "# Install: lodge completion fish > ~/.config/fish/completions/lodge.fish\n\n";
  s << "function __lodge_subcommands\n    switch $argv[1]\n";
  for (const auto &c : tree.commands()) {
    if (c->subs.empty()) continue;
    s << "        case " << fish_quoted(c->name()) << "\n            printf '%s\\n'";
    for (const auto *sub : c->subs)
      s << " " << fish_quoted(sub->path.back());
    s << "\n";
  }
  s << "    end\nend\n\nfunction __lodge_takes_value\n    switch $argv[1]/$argv[2]\n";
  for (const auto &c : tree.commands()) {
    std::vector<std::string> keys;
    for (const auto &o : c->options)
      if (o.takes_value)
        for (const auto &n : flag_names(o))
          keys.push_back(fish_quoted(c->name() + "/" + n));
    if (!keys.empty()) s << "        case " << join(keys, " ") << "\n            return 0\n";
  }
  s << "    end\n    return 1\nend\n\n";
  s << R"FISH(# The command the words before the cursor name: 'lodge', 'lodge upload', ...
function __lodge_command
    set -l cmd lodge
    set -l skip 0
    set -l words (commandline -opc)
    set -e words[1]
    for w in $words
        if test $skip = 1
            set skip 0
            continue
        end
        switch $w
            case '--*=*'
                continue
            case '-?*'
                __lodge_takes_value $cmd $w; and set skip 1
                continue
        end
        if contains -- $w (__lodge_subcommands $cmd)
            set cmd "$cmd $w"
        end
    end
    echo $cmd
end

function __lodge_is
    test (__lodge_command) = "$argv[1]"
end

complete -c lodge -f
)FISH";
  for (const auto &c : tree.commands()) {
    const std::string cond = "-n " + fish_quoted("__lodge_is " + shell_quote(c->name()));
    for (const auto *sub : c->subs)
      s << "complete -c lodge " << cond << " -a " << fish_quoted(sub->path.back()) << " -d "
        << fish_quoted(sub->help) << "\n";
    if (c->positional_path) s << "complete -c lodge " << cond << " -F\n";
    if (!c->positional_values.empty())
      s << "complete -c lodge " << cond << " -a " << fish_quoted(join(c->positional_values, " ")) << "\n";
    for (const auto &o : c->options) {
      s << "complete -c lodge " << cond;
      for (const auto &n : o.shorts)
        s << " -s " << fish_quoted(n);
      for (const auto &n : o.longs)
        s << " -l " << fish_quoted(n);
      if (o.takes_value) {
        if (!o.values.empty())
          s << " -x -a " << fish_quoted(join(o.values, " "));
        else if (o.dir)
          s << " -x -a '(__fish_complete_directories)'";
        else if (o.path)
          s << " -r -F";
        else
          s << " -x";
      }
      s << " -d " << fish_quoted(o.help) << "\n";
    }
  }
  return s.str();
}

} // namespace

std::string completion_script(CLI::App &root, const std::string &shell) {
  const Tree tree(root);
  if (shell == "bash") return bash_script(tree);
  if (shell == "zsh") return zsh_script(tree);
  if (shell == "fish") return fish_script(tree);
  throw LodgeError(Errc::usage, "completion: expected bash, zsh or fish, got '" + shell + "'");
}

Command add_completion(CLI::App &app) {
  auto shell = std::make_shared<std::string>();
  auto *sub = app.add_subcommand(
      "completion", "Print a completion script for bash, zsh or fish (see README, \"Shell completion\")");
  choices(sub->add_option("shell", *shell, "The shell: bash, zsh or fish")->required(),
          {"bash", "zsh", "fish"});
  // The root, whose tree the script describes: it outlives every command's run.
  CLI::App *root = &app;
  return {sub, [shell, root](Context & /*ctx*/) {
            const std::string script = completion_script(*root, *shell);
            std::fwrite(script.data(), 1, script.size(), stdout);
            std::fflush(stdout);
            check_stdout();
            return exit_status(Errc::ok);
          }};
}

} // namespace lodge::cli
