"""The documentation's shape. README.md is the front door: at most 200 lines, install and a quick
start first, a table naming every guide under docs/, the license. Nothing of the README it
replaced (1,821 lines) was lost: HEADING_MAP names the new place of each of its sections, and
each place must exist. Every relative link in README.md, CONTRIBUTING.md, ARCHITECTURE.md and
docs/*.md resolves: its file exists and its #anchor is a heading of that file, as GitHub makes
anchors. Every shell block says whether the recipes test runs it: ```sh test (or ```sh test fresh),
or ```sh no-test: REASON (never a bare ```sh, ```bash, ```console or ```)."""

import glob
import os
import re
import unittest

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# Each section (## and ###) of the README before the guides, and where its text is now.
HEADING_MAP = [
    ("## Install", "README.md#install"),
    ("## Quick start", "CONTRIBUTING.md#build-and-test"),  # it was the developer's; README's is new
    ("## Commands", "docs/commands.md#commands"),
    ("### Shell completion", "docs/commands.md#shell-completion"),
    ("## A ledger and its store", "docs/design.md#a-ledger-and-its-store"),
    ("## Uploading", "docs/archiving.md#uploading"),
    ("### In CI: re-runs after a cancelled job", "docs/ci.md#re-runs-after-a-cancelled-job"),
    ("### Performance: media types and file:// durability", "docs/performance.md#media-types-and-file-durability"),
    ("## Uploads from hosts without credentials", "docs/ci.md#uploads-from-hosts-without-credentials"),
    ("### Large files: one URL per part", "docs/ci.md#large-files-one-url-per-part"),
    ("## In CI", "docs/ci.md#github-actions-and-gitlab-ci"),
    ("### Which build made a file: `--ci-metadata`", "docs/ci.md#which-build-made-a-file---ci-metadata"),
    ("### Retention: keeping the last builds", "docs/ci.md#retention-keeping-the-last-builds"),
    ("## Getting files back", "docs/archiving.md#getting-files-back"),
    ("### Finding files: list as a search", "docs/ci.md#finding-files-list-as-a-search"),
    ("## Credentials and endpoints", "docs/stores.md#credentials-and-endpoints"),
    ("### The profile's transfer settings (`s3 =`)", "docs/stores.md#the-profiles-transfer-settings-s3-"),
    ("## Azure Blob Storage", "docs/stores.md#azure-blob-storage"),
    ("## Permissions each command needs", "docs/stores.md#permissions-each-command-needs"),
    ("## Two archives, start to finish", "docs/archiving.md#two-archives-start-to-finish"),
    ("## Running from cron", "docs/operations.md#running-from-cron"),
    ("### Checking a host: `lodge doctor`", "docs/operations.md#checking-a-host-lodge-doctor"),
    ("### What makes `status --check` unhealthy", "docs/operations.md#what-makes-status---check-unhealthy"),
    ("### The Prometheus textfile", "docs/operations.md#the-prometheus-textfile"),
    ("## Running from systemd timers", "docs/operations.md#running-from-systemd-timers"),
    ("## A lifecycle backstop", "docs/operations.md#a-lifecycle-backstop"),
    ("## Many hosts: a PostgreSQL ledger", "docs/many-hosts.md#a-postgresql-ledger"),
    ("## Cleanup through a message queue, and upload events",
     "docs/many-hosts.md#cleanup-through-a-message-queue-and-upload-events"),
    ("## Performance", "docs/performance.md#the-benchmark-scriptsbench"),
    ("## Configuration", "docs/configuration.md#configuration"),
    ("## Releasing", "CONTRIBUTING.md#releasing"),
    ("## Layout", "CONTRIBUTING.md#layout"),
    ("## License", "README.md#license"),
]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)\)")
SHELL_INFO = {"", "sh", "bash", "shell", "console", "zsh", "shell-session"}


def documents():
    """The documents whose links are checked, relative to the source tree."""
    docs = sorted(os.path.relpath(p, SOURCE_DIR) for p in glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md")))
    return ["README.md", "CONTRIBUTING.md", "ARCHITECTURE.md"] + docs


def read(rel):
    with open(os.path.join(SOURCE_DIR, rel), encoding="utf-8") as f:
        return f.read()


def split_fences(text):
    """(line number, line, info, opening) per line: info is None outside a fenced block, else the
    block's info string (its fence lines included); opening is true on a block's first line."""
    out, fence, info = [], None, None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, info = m.group(1), m.group(2).strip()
            out.append((n, line, info, True))
        elif fence is not None:
            out.append((n, line, info, False))
            if m and m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence, info = None, None
        else:
            out.append((n, line, None, False))
    return out


def blocks(text):
    """(line number, info string) of each fenced block's opening line."""
    return [(n, info) for n, _, info, opening in split_fences(text) if opening]


def anchor(title):
    """GitHub's anchor of a heading: its text without markup, lowercased, punctuation dropped
    (letters, digits, '-', '_' and spaces kept), each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    """Every heading's anchor in a document (outside code blocks), with GitHub's -1, -2 for repeats."""
    seen, result = {}, set()
    for _, line, info, _ in split_fences(text):
        if info is not None:
            continue
        m = HEADING.match(line)
        if not m:
            continue
        a = anchor(m.group(2))
        n = seen.get(a, 0)
        seen[a] = n + 1
        result.add(a if n == 0 else f"{a}-{n}")
    return result


def links(text):
    """(line number, target) of every inline link outside code blocks and code spans."""
    found = []
    for n, line, info, _ in split_fences(text):
        if info is not None:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        found += [(n, m.group(2)) for m in LINK.finditer(line)]
    return found


class Readme(unittest.TestCase):
    def setUp(self):
        self.text = read("README.md")
        self.lines = self.text.split("\n")

    def test_at_most_200_lines(self):
        self.assertLessEqual(len(self.text.rstrip("\n").split("\n")), 200)

    def test_install_and_quick_start_come_first(self):
        headings = [line for _, line, info, _ in split_fences(self.text) if info is None and line.startswith("## ")]
        self.assertEqual(headings[:2], ["## Install", "## Quick start"])
        self.assertLess(self.lines.index("## Install"), 30, "Install is on the first screen")
        quick = self.text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
        for command in ("lodge init", "lodge upload", "lodge list", "lodge get", "lodge -q sweep", "lodge -q repair",
                        "lodge -q reconcile"):
            self.assertIn(command, quick)
        self.assertLessEqual(len(quick.strip().split("\n")), 30, "a quick start is short")

    def test_the_guides_table_names_every_guide(self):
        guides = self.text.split("\n## Guides\n", 1)[1].split("\n## ", 1)[0]
        named = {target.split("#")[0] for _, target in links(guides)}
        for path in glob.glob(os.path.join(SOURCE_DIR, "docs", "*.md")):
            self.assertIn(os.path.relpath(path, SOURCE_DIR), named)
        self.assertIn("CONTRIBUTING.md", named)

    def test_the_test_command_ci_runs(self):
        # .ci/run runs scripts/test, which README's Development section names as the test command.
        self.assertIn("Test: `scripts/test`", self.text)
        self.assertIn("exec scripts/test", read(".ci/run"))


class HeadingMap(unittest.TestCase):
    def test_every_old_section_has_a_place(self):
        self.assertEqual(len(HEADING_MAP), len({old for old, _ in HEADING_MAP}))
        for old, target in HEADING_MAP:
            path, _, frag = target.partition("#")
            with self.subTest(old=old, target=target):
                self.assertTrue(os.path.isfile(os.path.join(SOURCE_DIR, path)), path)
                self.assertIn(frag, anchors(read(path)))


class Links(unittest.TestCase):
    maxDiff = None

    def test_every_relative_link_resolves(self):
        bad = []
        for doc in documents():
            text = read(doc)
            for n, target in links(text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                path, _, frag = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
                full = os.path.join(SOURCE_DIR, resolved)
                if not os.path.exists(full):
                    bad.append(f"{doc}:{n}: {target}: no {resolved}")
                elif frag and (not resolved.endswith(".md") or frag not in anchors(read(resolved))):
                    bad.append(f"{doc}:{n}: {target}: no heading #{frag} in {resolved}")
        self.assertEqual(bad, [])

    def test_the_anchor_rules(self):
        self.assertEqual(anchor("Which build made a file: `--ci-metadata`"), "which-build-made-a-file---ci-metadata")
        self.assertEqual(anchor("The profile's transfer settings (`s3 =`)"), "the-profiles-transfer-settings-s3-")
        self.assertEqual(anchor("Performance: media types and file:// durability"),
                         "performance-media-types-and-file-durability")
        self.assertEqual(anchors("# A\n```sh\n# not a heading\n```\n## A\n"), {"a", "a-1"})


class ShellBlocks(unittest.TestCase):
    maxDiff = None

    def test_every_shell_block_is_marked(self):
        bad = []
        for doc in ["README.md", "CONTRIBUTING.md"] + [d for d in documents() if d.startswith("docs/")]:
            for n, info in blocks(read(doc)):
                words = info.split(None, 1)
                lang = words[0] if words else ""
                if lang not in SHELL_INFO:
                    continue
                rest = words[1] if len(words) > 1 else ""
                if lang != "sh" or not (rest in ("test", "test fresh") or re.fullmatch(r"no-test: \S.*", rest)):
                    bad.append(f"{doc}:{n}: ```{info}")
        self.assertEqual(bad, [], "a shell block is ```sh test, ```sh test fresh or ```sh no-test: REASON")

    def test_the_blocks_are_found(self):
        text = "a\n```sh test\nx\n```\n   ```sh no-test: why\n   y\n   ```\n```\nz\n```\n"
        self.assertEqual(blocks(text), [(2, "sh test"), (5, "sh no-test: why"), (8, "")])


if __name__ == "__main__":
    unittest.main()
