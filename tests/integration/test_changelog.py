"""CHANGELOG.md is the user's changelog and docs/design/history.md the design journal.

The changelog is one section per release, `## [X.Y.Z] - YYYY-MM-DD` (or `unreleased`, only the
newest), newest first, its changes under Added, Changed, Deprecated, Removed, Fixed and
Security; the version of CMakeLists.txt has a section; the newest section names the ledger's
schema version and each migration has its line; every command `lodge --help` lists is named.
The journal moved out of CHANGELOG.md whole: every dated heading it had, each with as many
entries as it had then (the counts below are those of the last CHANGELOG.md that held the
journal, fixed here so that losing an entry fails). The relative links of both resolve."""

import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, SCHEMA_VERSION, SOURCE_DIR, main, project_version  # noqa: E402

CHANGELOG = os.path.join(SOURCE_DIR, "CHANGELOG.md")
HISTORY = os.path.join(SOURCE_DIR, "docs", "design", "history.md")

# The journal's dated headings, newest first, and the "- " entries under each, as CHANGELOG.md
# had them when the journal moved (54 entries).
JOURNAL = [("2026-12-06", 11), ("2026-12-04", 4), ("2026-12-03", 15), ("2026-12-02", 9),
           ("2026-12-01", 12), ("2026-11-30", 3)]
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2}|unreleased)$")
# A release section stays readable in a few minutes.
MAX_RELEASE_LINES = 300


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def sections(text, level):
    """(heading line, body) for each heading of that level ("## ", "### ")."""
    parts = re.split(rf"^({re.escape(level)}.*)$", text, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def newest_release(text):
    return sections(text, "## ")[0]


class Changelog(unittest.TestCase):
    def setUp(self):
        self.text = read(CHANGELOG)

    def test_every_section_is_a_release_newest_first(self):
        found = sections(self.text, "## ")
        self.assertTrue(found, "CHANGELOG.md has no release section")
        versions = []
        for i, (heading, _) in enumerate(found):
            m = RELEASE.match(heading)
            self.assertIsNotNone(m, f"not a release heading ('## [X.Y.Z] - YYYY-MM-DD'): {heading}")
            if m.group(4) == "unreleased":
                self.assertEqual(i, 0, f"only the newest release may be unreleased: {heading}")
            versions.append(tuple(int(g) for g in m.groups()[:3]))
        self.assertEqual(versions, sorted(versions, reverse=True), "releases newest first, each once")
        self.assertEqual(len(versions), len(set(versions)), "a version has one section")

    def test_changes_are_grouped_by_kind(self):
        for heading, body in sections(self.text, "## "):
            kinds = [h[len("### "):].strip() for h, _ in sections(body, "### ")]
            self.assertTrue(kinds, f"{heading}: no Added, Changed, ... group")
            for kind in kinds:
                self.assertIn(kind, KINDS, f"{heading}: '### {kind}' is not one of {sorted(KINDS)}")
            self.assertEqual(len(kinds), len(set(kinds)), f"{heading}: a group given twice")

    def test_the_project_version_has_a_section(self):
        version = project_version()
        self.assertTrue(re.search(rf"(?m)^## \[{re.escape(version)}\] - ", self.text),
                        f"CMakeLists.txt says {version}: CHANGELOG.md needs its section")

    def test_a_release_reads_in_a_few_minutes(self):
        for heading, body in sections(self.text, "## "):
            self.assertLessEqual(body.count("\n"), MAX_RELEASE_LINES, f"{heading} is too long for a user")

    def test_the_schema_version_and_each_migration_are_named(self):
        m = re.search(r"schema is now version (\d+)", self.text)
        self.assertIsNotNone(m, "CHANGELOG.md does not say the ledger's schema version")
        self.assertEqual(int(m.group(1)), SCHEMA_VERSION,
                         "the newest schema version named is not k_schema_version (schema.hpp)")
        for version in range(2, SCHEMA_VERSION + 1):
            self.assertTrue(re.search(rf"(?m)^- {version}: ", self.text),
                            f"no line says what schema version {version} added")

    @unittest.skipUnless(LODGE, "needs LODGE_BIN")
    def test_every_command_is_named(self):
        out = subprocess.run([LODGE, "--help"], capture_output=True, text=True, check=True).stdout
        commands = re.findall(r"(?m)^  ([a-z]+)  ", out.split("Subcommands:", 1)[1])
        self.assertIn("upload", commands)
        for command in commands:
            self.assertTrue(re.search(rf"`lodge {command}\b", self.text), f"CHANGELOG.md never names `lodge {command}`")

    def test_points_at_the_journal(self):
        self.assertTrue("](docs/design/history.md)" in self.text, "CHANGELOG.md does not link the design journal")


class History(unittest.TestCase):
    def setUp(self):
        self.text = read(HISTORY)

    def test_says_what_it_is(self):
        intro = self.text.split("\n## ", 1)[0]
        self.assertTrue(intro.startswith("# Design history\n"), "docs/design/history.md's title")
        self.assertIn("design journal", intro)
        self.assertIn("measurements", intro)
        self.assertIn("](../../CHANGELOG.md)", intro)

    def test_every_dated_entry_is_kept(self):
        """The journal goes on (new days on top, new entries in a day): what it held when it
        moved is all still there, in order."""
        found = [(h[len("## "):].strip(), len(re.findall(r"(?m)^- ", body)))
                 for h, body in sections(self.text, "## ")]
        dates = [d for d, _ in found]
        self.assertTrue(all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d) for d in dates), dates)
        self.assertEqual(dates, sorted(dates, reverse=True), "newest first")
        counts = dict(found)
        for date, entries in JOURNAL:
            self.assertIn(date, counts, "a dated heading of the journal is gone")
            self.assertGreaterEqual(counts[date], entries, f"entries of {date} are gone")

    def test_the_changelog_holds_no_journal(self):
        self.assertFalse(re.search(r"(?m)^## \d{4}-\d{2}-\d{2}", read(CHANGELOG)),
                         "a dated journal heading in CHANGELOG.md: it belongs in docs/design/history.md")


class Links(unittest.TestCase):
    def test_relative_links_resolve(self):
        for path in (CHANGELOG, HISTORY):
            for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", read(path)):
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
                self.assertTrue(os.path.exists(resolved), f"{os.path.relpath(path, SOURCE_DIR)} links to {target}")


if __name__ == "__main__":
    main()
