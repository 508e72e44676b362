"""The shell recipes of lodge's documentation, as tests/integration/test_recipes.py runs them.

A recipe is a fenced shell block (```sh, ```bash, ```shell or ```console) of README.md,
CONTRIBUTING.md or docs/*.md. Its info string carries a marker, one of

    ```sh test                       runnable: the suite runs it as written, after the file's
                                     blocks before it, in their terminal
    ```sh test fresh                 runnable, in a terminal of its own: nothing of the blocks
                                     before it (the ones after it continue in its terminal)
    ```sh no-test: REASON            not runnable here, and why (a real cloud endpoint, ...)

and a shell block without one, or a `no-test:` without a reason, is an error. This module
finds the blocks (`blocks()`), checks their markers (`marker_problems()`), turns a block into
the script that runs (`commands()`: a transcript's `$ ` lines, else the whole block), and runs
scripts one after another in a `Session`: a working directory, a HOME and an environment that
carry over from one block to the next as a reader's terminal does (what a block exports and
where it cd's), each block run by `bash -euo pipefail` on its own."""

import os
import re
import subprocess

SHELL_LANGUAGES = ("sh", "bash", "shell", "console")
_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>.*?)[ \t]*$")


class Block:
    """One fenced block: `path` (as given), `line` (1-based, the opening fence's), `lang`
    (the info string's first word, lower case), `marker` (the rest of the info string) and
    `text` (the content, the fence's indentation removed)."""

    def __init__(self, path, line, lang, marker, text):
        self.path, self.line, self.lang, self.marker, self.text = path, line, lang, marker, text

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def is_shell(self):
        return self.lang in SHELL_LANGUAGES

    @property
    def runnable(self):
        return self.is_shell and self.marker in ("test", "test fresh")

    @property
    def fresh(self):
        return self.marker == "test fresh"

    @property
    def reason(self):
        """A `no-test:` marker's reason ("" when it gives none); None for any other marker."""
        m = re.fullmatch(r"no-test\s*(?::\s*(.*))?", self.marker, re.S)
        return (m.group(1) or "").strip() if m else None

    def __repr__(self):
        return f"<Block {self.where} {self.lang} {self.marker!r}>"


def blocks(path, name=None):
    """Every fenced block of the Markdown file `path`, in order (`name` is the path the blocks
    are reported under; default `path`). A fence is ``` or ~~~ (three or more), indented or not
    (a block inside a list item); it closes at a line of at least as many of the same
    character and nothing else, or at the end of the file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m or (m.group("fence")[0] == "`" and "`" in m.group("info")):
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent").expandtabs())
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        info = m.group("info").split(None, 1)
        lang = info[0].lower() if info else ""
        marker = info[1].strip() if len(info) > 1 else ""
        body = []
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            body.append(_dedent(lines[j], indent))
            j += 1
        found.append(Block(name or path, i + 1, lang, marker, "\n".join(body)))
        i = j + 1
    return found


def _dedent(line, indent):
    """`line` without up to `indent` columns of leading blanks (a list item's block)."""
    expanded = line.expandtabs()
    cut = len(expanded) - len(expanded.lstrip(" "))
    return expanded[min(cut, indent):]


def marker_problems(found):
    """What is wrong with the shell blocks' markers, one line each (file:line: why)."""
    problems = []
    for b in found:
        if not b.is_shell or b.runnable:
            continue
        if b.reason is None:
            shown = f"'{b.marker}'" if b.marker else "none"
            problems.append(f"{b.where}: ```{b.lang} block without a marker (has {shown}): "
                            "mark it `test` (the suite runs it), `test fresh` or `no-test: REASON`")
        elif not b.reason:
            problems.append(f"{b.where}: ```{b.lang} {b.marker} gives no reason: write `no-test: REASON`")
    return problems


def commands(text):
    """The script of a block: when some line starts with `$ ` (a transcript: commands after the
    prompt, each followed by what it printed), the commands only (a line ending in a backslash
    continues on the next); else the whole block. What a transcript shows as printed is
    checked by unmatched_output()."""
    lines = text.split("\n")
    if not any(line.startswith("$ ") or line == "$" for line in lines):
        return text
    script, continued = [], False
    for line in lines:
        if continued:
            script.append(line)
        elif line.startswith("$ "):
            script.append(line[2:])
        else:
            continue
        continued = line.endswith("\\")
    return "\n".join(script) + "\n"


def shown_output(text):
    """The lines a transcript shows as printed (not the commands, not blank lines); [] for a
    block that is not a transcript."""
    lines = text.split("\n")
    if not any(line.startswith("$ ") or line == "$" for line in lines):
        return []
    shown, continued = [], False
    for line in lines:
        if continued:
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            continued = line.endswith("\\")
        elif line.strip():
            shown.append(line)
    return shown


def unmatched_output(shown, out):
    """The lines of `shown` that no line of `out` matches, in order: a shown line matches when
    its pieces between elisions (`…` or `...`) appear in that order in one printed line, the
    first at its start and the last at its end (values a run cannot reproduce are elided)."""
    printed = out.split("\n")
    missing, at = [], 0
    for line in shown:
        pieces = re.split(r"…|\.\.\.", line)
        pattern = "^" + ".*?".join(re.escape(p) for p in pieces) + "$"
        for i in range(at, len(printed)):
            if re.match(pattern, printed[i]):
                at = i + 1
                break
        else:
            missing.append(line)
    return missing


class Substitution:
    """One placeholder of the documentation and the value the suite puts in its place: `pattern`
    (a regular expression), `value` (a function of the Session, or a str with {name}s of the
    Session's `values`; then \\1 for a group of the match), `why` (what the reader would put there)."""

    def __init__(self, pattern, value, why):
        self.pattern, self.value, self.why = re.compile(pattern), value, why

    def apply(self, text, session):
        def value(m):
            v = self.value(session) if callable(self.value) else self.value.format(**session.values)
            return m.expand(v)
        return self.pattern.sub(value, text)


# What bash sets for itself: never carried from one block to the next.
_NOT_CARRIED = ("PWD", "OLDPWD", "SHLVL", "_")


class Session:
    """A reader's terminal for one file: `work` (the directory the first block starts in),
    `home` (HOME), `env` (the environment of the next block), `values` (what the substitutions
    fill in). Each block runs as `bash -euo pipefail SCRIPT` with stdin from /dev/null; when it
    succeeds, the environment it ended with and its working directory are the next block's."""

    def __init__(self, root, env, values=None):
        self.root = root
        self.work = os.path.join(root, "work")
        self.home = os.path.join(root, "home")
        os.makedirs(self.work, exist_ok=True)
        os.makedirs(self.home, exist_ok=True)
        self.env = dict(env)
        self.env["HOME"] = self.home
        self.cwd = self.work
        self.values = dict(values or {})
        self.values.update({"root": root, "work": self.work, "home": self.home})
        self.count = 0

    def script(self, block, substitutions):
        return self.substitute(commands(block.text), substitutions)

    def substitute(self, text, substitutions):
        """`text` (or each line of a list) with the placeholders replaced."""
        if isinstance(text, list):
            return [self.substitute(line, substitutions) for line in text]
        for s in substitutions:
            text = s.apply(text, self)
        return text

    def run(self, script, timeout=180):
        """Runs `script`; returns (exit status, its stdout and stderr interleaved)."""
        self.count += 1
        state = os.path.join(self.root, f"state-{self.count}")
        path = os.path.join(self.root, f"block-{self.count}.sh")
        # The trap records where the block ended and what it exported, even after an `exit 0`.
        prelude = (f"trap 'env -0 > {_q(state + '.env')}; pwd > {_q(state + '.cwd')}' EXIT\n")
        with open(path, "w") as f:
            f.write(prelude + script + ("" if script.endswith("\n") else "\n"))
        try:
            p = subprocess.run(["bash", "-euo", "pipefail", path], cwd=self.cwd, env=self.env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace")
            return 124, out + f"\n(killed after {timeout} s)"
        out = p.stdout.decode(errors="replace")
        if p.returncode == 0:
            self._carry(state)
        return p.returncode, out

    def _carry(self, state):
        try:
            with open(state + ".env", "rb") as f:
                pairs = [entry.split(b"=", 1) for entry in f.read().split(b"\0") if b"=" in entry]
            with open(state + ".cwd") as f:
                cwd = f.read().strip()
        except OSError:
            return  # the block replaced the trap: nothing to carry
        self.env = {k.decode(): v.decode(errors="replace") for k, v in pairs if k.decode() not in _NOT_CARRIED}
        if os.path.isdir(cwd):
            self.cwd = cwd


def _q(path):
    return "'" + path.replace("'", "'\\''") + "'"
