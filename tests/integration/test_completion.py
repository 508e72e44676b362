"""`lodge completion bash|zsh|fish`: the scripts are generated from the binary's own command
tree. The bash one is sourced in a real bash and its function called as bash's programmable
completion calls it (COMP_WORDS split at COMP_WORDBREAKS, COMP_CWORD, COMP_LINE, COMP_POINT);
the fish one answers `complete -C` in a real fish; the zsh one must parse (`zsh -n`). And
nothing `lodge --help` or a command's --help lists may be missing from a script."""

import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, help_commands, help_options, main  # noqa: E402

TASK_STATUSES = ["PENDING", "PROCESSING", "RETRY", "SUCCESS", "FAILED", "IGNORED", "all"]

# A real zsh's completion, captured: an interactive zsh on a pty (zsh/zpty) with compinit and the
# script loaded, compadd wrapped to print each match, the line typed and TAB pressed.
ZSH_INIT = r"""
PROMPT=
autoload -U compinit
compinit -u -d "$ZCOMPDUMP"
source "$LODGE_SCRIPT"
bindkey '^I' complete-word
null-line() { echo -E - $'\0' }
compprefuncs=( null-line )
comppostfuncs=( null-line exit )
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
compadd() {
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return $?
    fi
    typeset -a __hits
    builtin compadd -A __hits "$@"
    [[ -n $__hits ]] || return
    local h
    for h in $__hits; do echo -E - "MATCH:$h"; done
}
echo ok
"""
ZSH_DRIVER = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "source ${(q)1}"
local line
repeat 20; do
    zpty -r z line
    [[ $line == ok* ]] && break
done
zpty -w z "$2"$'\t'
integer tog=0
while zpty -r z line; do
    [[ $line == *MATCH:* ]] && print -r -- ${${line#*MATCH:}%$'\r'}
    [[ $line == *$'\0'* ]] && (( tog++ ))
    (( tog >= 2 )) && break
done
zpty -d z
"""


def bash_words(line):
    """COMP_WORDS as bash makes them: blanks separate words, and '=' and ':' (in the default
    COMP_WORDBREAKS) are words of their own; a line ending in a blank completes an empty word."""
    words = []
    for w in line.split():
        words.extend(t for t in re.split(r"([=:])", w) if t != "")
    if line.endswith(" "):
        words.append("")
    return words


class Completion(LodgeTestCase):
    def script(self, shell):
        r = self.lodge("completion", shell, db=False)
        self.assertEqual(r.rc, 0, r)
        path = self.write(f"lodge.{shell}", r.out)
        return path

    def bash_complete(self, line, cwd=None):
        """What bash offers for the word at the end of `line` (COMPREPLY, sorted)."""
        script = self.script("bash")
        words = bash_words(line)
        driver = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
                  'COMP_LINE=$LINE; COMP_POINT=${#LINE}; '
                  '_lodge lodge "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; '
                  'printf "%s\\n" "${COMPREPLY[@]}"')
        env = dict(self.env, LINE=line)
        p = subprocess.run(["bash", "--norc", "--noprofile", "-c", driver, "bash", script] + words,
                           capture_output=True, text=True, env=env, cwd=cwd or self.dir, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        return sorted(x for x in p.stdout.split("\n") if x)

    def test_bash_completes_commands_options_and_fixed_values(self):
        self.assertEqual(self.bash_complete("lodge up"), ["upload"])
        self.assertEqual(self.bash_complete("lodge upload --ex"),
                         ["--exclude", "--exclude-from", "--exclude-if-present", "--expire-after"])
        self.assertEqual(self.bash_complete("lodge tasks --status "), sorted(TASK_STATUSES))
        self.assertEqual(self.bash_complete("lodge tasks --status P"), ["PENDING", "PROCESSING"])
        # --status=VALUE: bash splits at '=', and readline replaces only what follows it.
        self.assertEqual(self.bash_complete("lodge tasks --status=F"), ["FAILED"])
        self.assertEqual(self.bash_complete("lodge tasks --status="), sorted(TASK_STATUSES))
        # ...and at ':': after "aws:" only "kms" is left to insert.
        self.assertEqual(self.bash_complete("lodge upload --sse aws:"), ["kms"])
        self.assertEqual(self.bash_complete("lodge upload --sse "), ["AES256", "aws:kms"])
        # The global options fall through to every command, and a global option's value before
        # the command is skipped, not taken for the command.
        self.assertEqual(self.bash_complete("lodge upload --js"), ["--json"])
        self.assertEqual(self.bash_complete("lodge --db ledger.db --owner ci up"), ["upload"])
        self.assertEqual(self.bash_complete("lodge --owner up"), [])  # a value, not a command
        self.assertEqual(self.bash_complete("lodge completion "), ["bash", "fish", "zsh"])
        # A flag takes no value: what follows is a path again.
        self.assertNotIn("--jobs", self.bash_complete("lodge tasks --"))
        self.assertIn("--status", self.bash_complete("lodge tasks --"))

    def test_bash_completes_paths_where_an_argument_is_a_path(self):
        work = os.path.join(self.dir, "work")
        os.makedirs(os.path.join(work, "alps"))
        for name in ("alpha.txt", "beta.txt", "ignore-list"):
            with open(os.path.join(work, name), "w") as f:
                f.write("x")
        self.assertEqual(self.bash_complete("lodge upload al", cwd=work), ["alpha.txt", "alps"])
        self.assertEqual(self.bash_complete("lodge upload --jobs 2 b", cwd=work), ["beta.txt"])
        self.assertEqual(self.bash_complete("lodge upload --exclude-from ig", cwd=work), ["ignore-list"])
        self.assertEqual(self.bash_complete("lodge --config al", cwd=work), ["alpha.txt", "alps"])
        self.assertEqual(self.bash_complete("lodge get 1 -o al", cwd=work), ["alpha.txt", "alps"])
        # Not where the argument is no path: a pattern, an id, a command.
        self.assertEqual(self.bash_complete("lodge upload --exclude al", cwd=work), [])
        self.assertEqual(self.bash_complete("lodge show al", cwd=work), [])
        self.assertEqual(self.bash_complete("lodge al", cwd=work), [])

    def test_the_status_values_completed_are_the_ones_lodge_accepts(self):
        r = self.lodge("tasks", "--status", "DONE", db=False)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("expected PENDING, PROCESSING, RETRY, SUCCESS, FAILED, IGNORED or all, got 'DONE'", r.err)
        r = self.lodge("completion", "tcsh", db=False)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("expected bash, zsh or fish, got 'tcsh'", r.err)

    def test_every_command_and_option_of_the_help_is_in_every_script(self):
        top = self.lodge("--help", db=False)
        self.assertEqual(top.rc, 0, top)
        commands = help_commands(top.out)
        self.assertIn("upload", commands)
        self.assertIn("completion", commands)
        self.assertGreaterEqual(len(commands), 20, top.out)
        scripts = {}
        for shell in ("bash", "zsh", "fish"):
            with open(self.script(shell)) as f:
                scripts[shell] = f.read()
        bash_subcommands = re.search(r"^    'lodge'\) echo '([^']*)' ;;$", scripts["bash"], re.M)
        self.assertIsNotNone(bash_subcommands, scripts["bash"][:2000])
        self.assertEqual(sorted(bash_subcommands.group(1).split()), sorted(commands))
        for c in commands:
            self.assertRegex(scripts["zsh"], rf"(?m)^            '{re.escape(c)}:")
            self.assertRegex(scripts["fish"], rf"(?m)^complete -c lodge -n '__lodge_is \\'lodge\\'' -a '{c}' ")
        for c in commands:
            sub = self.lodge(c, "--help", db=False)
            self.assertEqual(sub.rc, 0, sub)
            options = help_options(sub.out.split("Global options (before or after", 1)[0])
            self.assertIn("--help", options)
            line = re.search(rf"^    'lodge {c}'\) echo '([^']*)' ;;$", scripts["bash"], re.M)
            self.assertIsNotNone(line, c)
            self.assertEqual(options - set(line.group(1).split()), set(), c)
            for o in options:
                self.assertIn(f"'*{o}", scripts["zsh"])

    @unittest.skipUnless(shutil.which("zsh"), "zsh is not installed (scripts/packages.txt lists it)")
    def test_zsh_script_parses_and_defines_its_functions(self):
        path = self.script("zsh")
        p = subprocess.run(["zsh", "-n", path], capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        # Loaded (without compinit: compdef is stubbed), every command has its function.
        p = subprocess.run(["zsh", "-f", "-c", 'compdef() { :; }; source "$1"; print -l ${(k)functions}',
                            "zsh", path], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        for f in ("_lodge", "_lodge_upload", "_lodge_tasks", "_lodge_completion"):
            self.assertIn(f, p.stdout.split())

    def zsh_complete(self, line):
        """What a real zsh offers for the word at the end of `line` (sorted, unique)."""
        init = self.write("init.zsh", ZSH_INIT)
        driver = self.write("driver.zsh", ZSH_DRIVER)
        env = dict(self.env, LODGE_SCRIPT=self.script("zsh"), ZCOMPDUMP=os.path.join(self.dir, ".zcompdump"),
                   TERM="dumb")
        p = subprocess.run(["zsh", "-f", driver, init, line], capture_output=True, text=True, env=env,
                           cwd=self.dir, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        return sorted(set(x for x in p.stdout.split("\n") if x))

    @unittest.skipUnless(shutil.which("zsh"), "zsh is not installed (scripts/packages.txt lists it)")
    def test_zsh_completes_a_commands_options_after_a_global_option(self):
        # `lodge list --json --la<TAB>` offered only global options once one followed the command.
        self.assertIn("--latest", self.zsh_complete("lodge list --la"))
        self.assertIn("--latest", self.zsh_complete("lodge list --json --la"))
        self.assertIn("--latest", self.zsh_complete("lodge --json list -v --la"))
        after = self.zsh_complete("lodge upload --json --part-")
        self.assertIn("--part-size", after)
        self.assertIn("--part-concurrency", after)
        # And the global options are still offered there.
        self.assertIn("--owner", self.zsh_complete("lodge list --json --ow"))

    @unittest.skipUnless(shutil.which("fish"), "fish is not installed (scripts/packages.txt lists it)")
    def test_fish_completes_from_its_script(self):
        path = self.script("fish")
        p = subprocess.run(["fish", "-n", path], capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stderr), (0, ""))

        def fish(line):
            p = subprocess.run(["fish", "--no-config", "-c", 'source $argv[1]; complete -C"$argv[2]"',
                                path, line], capture_output=True, text=True, timeout=60,
                               env=dict(self.env, HOME=self.dir))
            self.assertEqual(p.returncode, 0, p.stderr)
            return sorted(l.split("\t")[0] for l in p.stdout.splitlines())

        self.assertEqual(fish("lodge up"), ["upload"])
        self.assertEqual(fish("lodge upload --ex"), ["--exclude", "--exclude-from", "--exclude-if-present", "--expire-after"])
        self.assertEqual(fish("lodge tasks --status "), sorted(TASK_STATUSES))
        self.assertEqual(fish("lodge --db x.db tasks --status P"), ["PENDING", "PROCESSING"])
        self.assertEqual(fish("lodge completion "), ["bash", "fish", "zsh"])


if __name__ == "__main__":
    main()
