"""The man pages the build writes (lodge_mangen: the prose in man/ and the command tree): one page
per command that `lodge --help` lists, every option a command's --help lists in that command's
page (the global options in lodge(1)), every error code in lodge(1), and every page rendered by
groff and man without a warning. The pages are the build's: <build>/doc/*.N.gz, next to lodge."""

import glob
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, SOURCE_DIR, help_commands, help_options, main  # noqa: E402

BUILD = os.path.dirname(os.path.abspath(LODGE)) if LODGE else ""
DOC = os.path.join(BUILD, "doc")
MANGEN = os.path.join(BUILD, "lodge_mangen")
OTHER_PAGES = {"lodge.conf.5", "lodge-filters.7", "lodge-events.7"}
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9-]*)")


def pages():
    """Page file name (lodge-upload.1) -> its roff source, as built."""
    out = {}
    for path in glob.glob(os.path.join(DOC, "*.[157].gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out[os.path.basename(path)[: -len(".gz")]] = f.read()
    return out


def rendered(roff):
    """The page as text: one very long line per paragraph and no hyphenation, so that an option's
    name is never split."""
    p = subprocess.run(["groff", "-man", "-Tascii", "-P-cbou", "-rLL=2000n", "-rHY=0"], input=roff,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def section(text, title):
    """A section of a rendered page: from its heading to the next heading (a line at the margin)."""
    m = re.search(rf"^{re.escape(title)}\n(.*?)(?=^\S)", text + "\nEND\n", re.S | re.M)
    assert m, f"no {title} section"
    return m.group(1)


def terms(text):
    """The option names of a rendered section's entries (the .TP and .TQ term lines, at the
    entries' indent): an option only mentioned in another's text is not documented."""
    return {n for line in re.findall(r"^ {7}(-.*)$", text, re.M) for n in OPTION.findall(line)}


@unittest.skipUnless(shutil.which("groff"), "groff is not installed (scripts/packages.txt lists groff-base)")
class ManPages(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.pages = pages()
        self.assertIn("lodge.1", self.pages, f"no lodge.1.gz in {DOC}: build the lodge_docs target")

    def commands(self):
        top = self.lodge("--help", db=False)
        self.assertEqual(top.rc, 0, top)
        commands = help_commands(top.out)
        self.assertIn("relay", commands)
        self.assertGreaterEqual(len(commands), 20, top.out)
        return commands

    def test_every_command_of_the_help_has_its_page_and_no_page_is_left_over(self):
        commands = self.commands()
        expected = {"lodge.1"} | OTHER_PAGES | {f"lodge-{c}.1" for c in commands}
        self.assertEqual(set(self.pages), expected)
        lodge1 = rendered(self.pages["lodge.1"])
        listed = section(lodge1, "COMMANDS")
        synopsis = section(lodge1, "SYNOPSIS")
        see_also = section(lodge1, "SEE ALSO")
        for c in commands:
            self.assertIn(f"lodge-{c}(1)", listed, c)
            self.assertRegex(synopsis, rf"lodge \[global-options\] {c}\b", c)
            self.assertIn(f"lodge-{c}(1)", see_also, c)
        for other in OTHER_PAGES:
            name, sec = other.rsplit(".", 1)
            self.assertIn(f"{name}({sec})", see_also)

    def test_every_option_of_a_commands_help_is_in_its_page(self):
        for c in self.commands():
            r = self.lodge(c, "--help", db=False)
            self.assertEqual(r.rc, 0, r)
            options = help_options(r.out.split("Global options (before or after", 1)[0])
            self.assertIn("--help", options)
            page = rendered(self.pages[f"lodge-{c}.1"])
            documented = terms(section(page, "OPTIONS"))
            self.assertEqual(options - documented, set(), f"lodge {c}: options missing from lodge-{c}(1)")
            # The synopsis names each (by one of its names), the help aside.
            synopsis = set(OPTION.findall(section(page, "SYNOPSIS")))
            self.assertIn(f"lodge [global-options] {c}", " ".join(section(page, "SYNOPSIS").split()))
            self.assertTrue(synopsis <= options, (c, synopsis - options))
            self.assertIn(f"lodge-{c} - ", section(page, "NAME"))

    def test_every_global_option_is_in_lodge_1(self):
        top = self.lodge("--help", db=False)
        options = help_options(top.out.split("Subcommands:", 1)[0])
        self.assertIn("--db", options)
        self.assertIn("--version", options)
        documented = terms(section(rendered(self.pages["lodge.1"]), "GLOBAL OPTIONS"))
        self.assertEqual(options - documented, set())

    def test_every_page_renders_without_warnings(self):
        for name, roff in sorted(self.pages.items()):
            p = subprocess.run(["groff", "-ww", "-z", "-man"], input=roff, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual((p.returncode, p.stderr), (0, ""), name)
            p = subprocess.run(["man", "-l", "-P", "cat", os.path.join(DOC, name + ".gz")], capture_output=True,
                               text=True, env=dict(os.environ, MANWIDTH="80"), timeout=60)
            # At 80 columns a long word (a metric's name, a path) may leave a line unadjusted;
            # nothing else may be said.
            said = [line for line in p.stderr.splitlines() if not line.endswith("cannot adjust line")]
            self.assertEqual((p.returncode, said), (0, []), name)
            for heading in ("NAME", "DESCRIPTION", "SEE ALSO") + (("SYNOPSIS", "OPTIONS") if name != "lodge.1"
                                                                  and name.endswith(".1") else ()):
                self.assertRegex(p.stdout, rf"(?m)^{heading}$", f"{name}: no {heading}")

    def test_lodge_1_lists_every_error_code_and_exit_status(self):
        with open(os.path.join(SOURCE_DIR, "src", "util", "error.cpp")) as f:
            codes = re.findall(r'ErrcInfo\{Errc::\w+, "([A-Z_]+)"', f.read())
        self.assertGreater(len(codes), 20)
        text = rendered(self.pages["lodge.1"])
        errors = section(text, "ERRORS")
        for code in codes:
            self.assertRegex(errors, rf"(?m)^\s+{code}\b", code)
        for heading in ("EXIT STATUS", "ENVIRONMENT", "FILES", "GLOBAL OPTIONS", "COMMANDS"):
            self.assertRegex(text, rf"(?m)^{heading}$")

    def test_a_command_without_its_prose_or_an_option_the_command_lacks_fails_the_generator(self):
        self.assertTrue(os.access(MANGEN, os.X_OK), MANGEN)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "man")
            shutil.copytree(os.path.join(SOURCE_DIR, "man"), src)
            out = os.path.join(tmp, "out")
            ok = subprocess.run([MANGEN, src, out, "2026-01-01"], capture_output=True, text=True, timeout=60)
            self.assertEqual((ok.returncode, ok.stderr), (0, ""))
            self.assertEqual(sorted(os.listdir(out)), sorted(self.pages))
            # A command whose prose is gone: no page would be installed for it.
            os.rename(os.path.join(src, "lodge-sweep.1"), os.path.join(tmp, "sweep"))
            r = subprocess.run([MANGEN, src, out, "2026-01-01"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("lodge sweep has no page", r.stderr)
            os.rename(os.path.join(tmp, "sweep"), os.path.join(src, "lodge-sweep.1"))
            # Prose describing an option the command does not have (one removed, or misspelled).
            with open(os.path.join(src, "lodge-sweep.1")) as f:
                text = f.read()
            text = text.replace(".\\\" @OPTIONS@\n", ".\\\" @OPTIONS@\n.TP\n.B \\-\\-no\\-such\\-option\nGone.\n")
            with open(os.path.join(src, "lodge-sweep.1"), "w") as f:
                f.write(text)
            r = subprocess.run([MANGEN, src, out, "2026-01-01"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("no\\-such\\-option", r.stderr)
            # Prose for a command lodge does not have.
            shutil.copy(os.path.join(SOURCE_DIR, "man", "lodge-sweep.1"), os.path.join(src, "lodge-sweeps.1"))
            shutil.copy(os.path.join(SOURCE_DIR, "man", "lodge-sweep.1"), os.path.join(src, "lodge-sweep.1"))
            r = subprocess.run([MANGEN, src, out, "2026-01-01"], capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn("lodge has no command 'sweeps'", r.stderr)


if __name__ == "__main__":
    main()
