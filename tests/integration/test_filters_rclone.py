"""lodge's filters against rclone's, the dialect they claim: one generated awkward tree (hidden
files, spaces, unicode, brackets, braces, names like `!x`, deep paths, markers), every rule set
below plus every example of lodge-filters(7) (man/lodge-filters.7), run through `rclone lsf -R
--files-only` (Debian's rclone) and `lodge upload -n --json`. Any difference fails the test
unless the man page's "Differences from rclone" list names it, and each difference that list
names must still be one (its example is run too). Then the edges rclone has no say in: a
directory or an endless input given as a rule file, --files-from or the configuration, a
marker that is not a regular file, braces nested past the limit."""

import concurrent.futures
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, SOURCE_DIR, LodgeTestCase, Result, main  # noqa: E402

MAN = os.path.join(SOURCE_DIR, "man", "lodge-filters.7")
DAY = 86400
RCLONE = shutil.which("rclone")

# The tree: relative path -> size (bytes of 'x'); symbolic links and ages are set apart.
# (The header's name is in two pieces: scripts/check-refs reads a whole source path in a
# string as a file of this repository.)
FILES = {
    "README.md": 10, "src/main.c": 10, "src/" "util.h": 10, "src/sub/deep.c": 10, "build/main.o": 10,
    "build/app": 10, ".git/HEAD": 10, ".git/objects/ab/cdef": 10, "node_modules/left-pad/index.js": 10,
    "web/app/node_modules/x.js": 10, ".hidden": 1, "dir/.bashrc": 1, ".config/app/settings.json": 1,
    "my file.txt": 1, "docs/my file.txt": 1, "sp ace/inner file": 1, "日本.txt": 1, "café.txt": 1,
    "ö.txt": 1, "Ärger/ü.md": 1, "Movie [JP].mkv": 1, "Movie [US].mkv": 1, "brackets/[x].txt": 1,
    "a]b.txt": 1, "{a}.txt": 1, "braces/{x,y}.txt": 1, "a,b": 1, "star*name": 1, "q?mark": 1,
    "back\\slash": 1, "!b": 1, "!x/z": 1, "x1": 1, "ab": 1, "y/xq": 1, "y/bq": 1, "y/deep/h": 1,
    "deep/f": 1, "deep/er/g": 1, "a/b/c.jpg": 1, "x/a/b/c.jpg": 1, "ok.jpg": 1, "secret1.jpg": 1,
    "photo.JPG": 1, "photo.png": 1, "file.jpg": 1, "afile.jpg": 1, "directory/file.jpg": 1, "a.jpeg": 1,
    "file.txt": 1, "dir/file.tzt": 1, "file.qxt": 1, "file.???": 1, "file.012": 1, "dir/file.345": 1,
    "file.a": 1, "dir/file.b": 1, "file.0": 1, "A/x/y": 1, "top/B/y": 1, "C/y": 1, "abc.txt": 1,
    "ab-c.txt": 1, "dir1/a.pdf": 1, "dir2/b.pdf": 1, "docs/deep/a.pdf": 1, "docs/a.txt": 1,
    "dir/Trash/old.txt": 1, "dir/notes.txt": 1, "cache/keep.txt": 1, "cache/other.txt": 1,
    "cache/sub/x": 1, "has-marker/.nobackup": 0, "has-marker/data.bin": 1, "nested/has/.nobackup": 0,
    "nested/has/y": 1, "nested/keep": 1, "link-marker/data.bin": 1, "dir-marker/.ignore/inside": 1,
    "dir-marker/f": 1, "data/big.bin": 300_000, "data/mid.bin": 2048, "data/small.bin": 100,
    "logs/old.log": 1, "logs/new.log": 1, "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/leaf.txt": 1,
    "empty": 0,
}
LINKS = {"link-marker/.nobackup": "../has-marker/.nobackup"}  # a marker to both, followed by neither
AGES = {"logs/old.log": 40 * DAY, "logs/new.log": 1 * DAY}

# Rule files the rule sets name as @NAME.
RULE_FILES = {
    "filter-file": "# a sample filter rule file\n- secret*.jpg\n+ *.jpg\n\n   ; an indented comment\n"
                   "+ *.png\r\n+ file2.avi\n- /dir/Trash/**\n+ /dir/**\n# exclude everything else\n- *\n",
    "bang": "+ *.jpg\n+ *.gif\n!\n+ *.txt\n- *\n",
    "include-file": "# a sample include rule file\n*.jpg\nfile2.avi\n",
    "exclude-file": "# a sample exclude rule file\n*.bak\n*.jpg\n  My Documents/**  \nMovie \\[*\\].mkv\n",
}

# Every rule set lodge and rclone must agree on (rclone's own documented examples among them).
RULE_SETS = [
    "--include '*.jpg'", "--exclude '*.jpg'", "--include '/*.jpg'", "--exclude '/*.jpg'",
    "--include '*.{jpg,png}'", "--include '*.{jpg,png,}'", "--include 'dir/**'", "--exclude 'dir/**'",
    "--include '*.t?t'", "--include '*.[a-z]'", "--include '*.\\?\\?\\?'", "--include '*.\\d\\d\\d'",
    "--include 'file.jpg'", "--include '/file.jpg'", "--include '{A,B}/**'", "--include '??[^[:punct:]]*'",
    "--include '[!x]*'", "--exclude '[!x]*'", "--include '*[!x]'", "--include '[^x]*'", "--exclude '[^x]*'",
    "--include 'y[^q]*'", "--include 'y\\W*'", "--include '[!-0]*'", "--include 'a/b/*.jpg'",
    "--exclude 'a/b/*.jpg'", "--include 'b/*.jpg'", "--include 'deep/**'", "--exclude 'deep/**'",
    "--include '/deep/**'", "--include '**/deep/**'", "--include 'deep/*'", "--exclude 'node_modules/'",
    "--exclude '.git/' --exclude node_modules/", "--exclude '.*'", "--include '.*'", "--include '* *'",
    "--include '*\\[*'", "--include '*\\]*'", "--include '*\\{*'", "--include '*\\**'", "--include '*\\?*'",
    "--include '*\\\\*'", "--include '日本*'", "--include 'caf?.txt'", "--include '[ä-ü]*'",
    "--include '[[:upper:]]*'", "--include '\\w\\w'", "--include '*\\W*'", "--include '!x/**'",
    "--exclude '/!*'", "--include '{,.}hidden'", "--include 'a,b'", "--include '*.JPG'",
    "--include '/{dir1,dir2}/**'", "--include '/{dir1/**,dir2/**}'", "--include '/directory/'",
    "--include '/**/*.c'", "--include '/src/**.{c,h}'", "--include '**'", "--exclude '*'",
    "--exclude '**'", "--include '/a/**/c.jpg'", "--include '/d1/**/leaf.txt'", "--include 'd12/*'",
    "--filter '- secret*.jpg' --filter '+ *.jpg' --filter '- *'", "--filter '+ *.jpg' --filter '- secret*.jpg'",
    "--filter '+ /cache/keep.txt' --filter '- /cache/**'", "--filter '- /dir1/' --filter '- /dir2/' "
    "--filter '+ *.pdf' --filter '- **'", "--filter '+ *.png'", "--include '*.c' --include '*.h'",
    "--include '*.jpg' --exclude 'secret*'", "--exclude '*.o' --exclude '*.c'",
    "--filter-from @filter-file", "--filter-from @bang", "--include-from @include-file",
    "--exclude-from @exclude-file", "--include-from @include-file --exclude-from @exclude-file",
    "--exclude-if-present .nobackup", "--exclude-if-present .nobackup --include '*.bin'",
    "--min-size 2K", "--max-size 1K", "--min-size 1K --max-size 100K", "--max-age 7d", "--min-age 7d",
    "--max-age 7d --include '*.log'",
]


def roff_text(s):
    """The text a roff line shows, for the escapes the man page uses."""
    for esc, ch in (("\\-", "-"), ("\\(aq", "'"), ("\\(dq", '"'), ("\\e", "\\"), ("\\&", ""), ("\\ ", " ")):
        s = s.replace(esc, ch)
    return s


def filtering_section():
    with open(MAN, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\.SH DESCRIPTION\n(.*?)^\.SH ", text, re.S | re.M)
    assert m, "lodge-filters(7) has no DESCRIPTION section"
    return m.group(1)


def man_examples():
    """The rule sets of lodge-filters(7)'s examples: each `lodge upload` command's filter
    options, and each rules file (given with --filter-from)."""
    out = []
    for block in re.findall(r"^\.EX\n(.*?)^\.EE", filtering_section(), re.S | re.M):
        text = roff_text(block).replace("\\\n", " ")
        if text.lstrip().startswith("lodge upload"):
            args = shlex.split(text)[2:]
            while args and not args[0].startswith("-"):
                args.pop(0)  # the paths
            out.append(("man example", args, {}))
        elif text.lstrip().startswith("#"):
            out.append(("man rules file", ["--filter-from", "@man-rules"], {"man-rules": text}))
    assert out, "no example found in lodge-filters(7)"
    return out


def man_differences():
    """The "Differences from rclone" list: each item's example rule set (its `.B "--..."` line)."""
    sec = re.search(r"^\.SS Differences from rclone\n(.*?)(?=^\.S[HS] |\Z)", filtering_section(), re.S | re.M)
    assert sec, "lodge-filters(7) has no 'Differences from rclone' list"
    items = re.split(r"^\.IP .*\n", sec.group(1), flags=re.M)[1:]
    assert items, "the 'Differences from rclone' list is empty"
    out = []
    for item in items:
        examples = [roff_text(m) for m in re.findall(r'^\.B "(\\-\\-.*)"$', item, re.M)]
        assert len(examples) == 1, f"a difference names one example rule set (.B \"--...\"): {item!r}"
        out.append((" ".join(item.split())[:100], shlex.split(examples[0]), {}))
    return out


def selected(r, tree):
    """The files under `tree` a dry run's --json lines say the filters took: planned, or
    rejected after (a .jpg that is not JPEG, a name lodge does not record); not a symbolic
    link skipped. As paths relative to `tree`, as rclone lists them."""
    return frozenset(os.path.relpath(x["file"], tree) for x in r.json_lines()[:-1]
                     if x.get("outcome") in ("planned", "rejected"))


def limited(gib):
    """A preexec_fn bounding a child's address space: a regression that reads an endless input
    fails here instead of taking the machine's memory."""
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return apply


class FiltersAgainstRclone(LodgeTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tree_dir = tempfile.mkdtemp(prefix="lodge-rclone-tree-")
        cls.tree = os.path.join(cls.tree_dir, "tree")
        now = time.time()
        for rel, size in FILES.items():
            path = os.path.join(cls.tree, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(b"x" * size)
            age = AGES.get(rel, 3600)
            os.utime(path, (now - age, now - age))
        for rel, target in LINKS.items():
            os.symlink(target, os.path.join(cls.tree, rel))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tree_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.assertTrue(RCLONE, "rclone is not installed (scripts/packages.txt lists it)")
        self.env.update({"LODGE_STORE": "file://" + os.path.join(self.dir, "store"), "LODGE_OWNER": "ci",
                         "RCLONE_CONFIG": os.path.join(self.dir, "rclone.conf")})
        self.init()

    def materialize(self, args, files):
        """The rule set's arguments with @NAME replaced by the path of that rule file."""
        out = []
        for a in args:
            if a.startswith("@"):
                name = a[1:]
                path = os.path.join(self.dir, "rules", name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(files.get(name, RULE_FILES.get(name)))
                a = path
            out.append(a)
        return out

    def rclone(self, args):
        """("ok", the paths rclone lists) or ("refused", its message)."""
        p = subprocess.run([RCLONE, "lsf", "-R", "--files-only", self.tree] + args, capture_output=True,
                           text=True, env=self.env, timeout=120)
        if p.returncode != 0:
            return ("refused", p.stderr.strip()[-300:])
        return ("ok", frozenset(line for line in p.stdout.split("\n") if line))

    def lodge_selects(self, args):
        """("ok", the paths `upload -n --json` takes) or ("refused", its message)."""
        r = self.lodge("upload", "-n", "--json", self.tree, *args)
        if r.rc == 2:
            return ("refused", r.err.strip()[-300:])
        # 1: a file the filters took was rejected (the tree's .jpg files are not JPEG).
        self.assertIn(r.rc, (0, 1), (args, r))
        lines = r.json_lines()
        self.assertIn("summary", lines[-1], r)
        return ("ok", selected(r, self.tree))

    def both(self, cases):
        """Runs every case through rclone and lodge, in parallel; [(name, args, rclone, lodge)]."""
        def one(case):
            name, args, files = case
            real = self.materialize(args, files)
            return name, args, self.rclone(real), self.lodge_selects(real)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(one, cases))

    @staticmethod
    def describe(args, theirs, ours):
        if theirs[0] != ours[0] or theirs[0] == "refused":
            return f"{shlex.join(args)}: rclone {theirs[0]} {theirs[1] if theirs[0] == 'refused' else ''}, " \
                   f"lodge {ours[0]} {ours[1] if ours[0] == 'refused' else ''}"
        return (f"{shlex.join(args)}: only rclone {sorted(theirs[1] - ours[1], key=str)}, "
                f"only lodge {sorted(ours[1] - theirs[1], key=str)}")

    def test_every_rule_set_selects_what_rclone_selects(self):
        started = time.monotonic()
        cases = [(s, shlex.split(s), {}) for s in RULE_SETS] + man_examples()
        differ = []
        results = self.both(cases)
        for name, args, theirs, ours in results:
            if theirs != ours:
                differ.append(self.describe(args, theirs, ours))
            elif theirs[0] == "refused":
                differ.append(f"{name}: both refuse it; a rule set here should select something")
        self.assertEqual(differ, [], "lodge and rclone disagree, and lodge-filters(7) does not list it as "
                                     "a difference:\n" + "\n".join(differ))
        # The tree is awkward enough that the rule sets tell things apart.
        self.assertGreater(len({theirs for _, _, theirs, _ in results}), len(cases) // 2)
        sys.stderr.write(f"{len(cases)} rule sets agree ({time.monotonic() - started:.1f} s)\n")

    def test_each_listed_difference_is_still_one(self):
        diffs = man_differences()
        self.assertGreaterEqual(len(diffs), 3)
        same = [f"{name}: {shlex.join(args)} -> {theirs}" for name, args, theirs, ours in self.both(diffs)
                if theirs == ours]
        self.assertEqual(same, [], "the man page lists these as differences from rclone, but they agree "
                                   "(take them off the list):\n" + "\n".join(same))

    def test_the_rule_sets_cover_every_listed_syntax(self):
        # The man page's syntax, each in a rule set above: '*', '**', '?', classes ('!' a member,
        # '^' negating), braces, escapes, anchoring, directory rules, every flag.
        text = " ".join(RULE_SETS)
        for needle in ("*", "**", "?", "[!", "[^", "[[:", "{", "\\", "'/", "/'", "--include ", "--exclude ",
                       "--filter ", "--filter-from", "--include-from", "--exclude-from", "--exclude-if-present",
                       "--min-size", "--max-size", "--min-age", "--max-age"):
            self.assertIn(needle, text)
        self.assertGreaterEqual(len(man_examples()), 2)


class FilterEdges(LodgeTestCase):
    """What rclone has no say in (or refuses): bad inputs given to the filter flags."""

    def setUp(self):
        super().setUp()
        self.env.update({"LODGE_STORE": "file://" + os.path.join(self.dir, "store"), "LODGE_OWNER": "ci"})
        self.init()
        self.tree = os.path.join(self.dir, "tree")
        for rel in ("a.txt", "sub/b.txt"):
            self.write(os.path.join("tree", rel), "x")

    @staticmethod
    def planned(r):
        return {x["path"] for x in r.json_lines()[:-1] if x.get("outcome") == "planned"}

    def bounded(self, *args, env=None, stdin=None):
        """lodge under a 4 GiB address space, stdin from a file (None: closed)."""
        with open(stdin or os.devnull, "rb") as f:
            p = subprocess.run([LODGE, "--db", self.db] + list(args), stdin=f, capture_output=True, text=True,
                               env=dict(self.env, **(env or {})), timeout=60, preexec_fn=limited(4))
        return Result(p)

    def assertUsage(self, r, *named):
        self.assertEqual(r.rc, 2, r)
        self.assertIn("USAGE", r.err)
        for n in named:
            self.assertIn(n, r.err)

    def test_a_directory_is_not_a_rule_file_nor_a_list(self):
        d = os.path.join(self.dir, "rules.d")
        os.mkdir(d)
        for flag in ("--exclude-from", "--filter-from", "--include-from"):
            r = self.lodge("upload", "-n", "--json", self.tree, flag, d)
            self.assertUsage(r, d, "Is a directory")
            if RCLONE:  # rclone refuses it too
                p = subprocess.run([RCLONE, "lsf", "-R", self.tree, flag, d], capture_output=True, text=True,
                                   env=dict(self.env, RCLONE_CONFIG=os.path.join(self.dir, "rclone.conf")))
                self.assertNotEqual(p.returncode, 0, p)
        # --files-from is refused before anything is sent: the path given first is not uploaded.
        r = self.lodge("upload", "--json", os.path.join(self.tree, "a.txt"), "--files-from", d)
        self.assertUsage(r, d, "is a directory")
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 0)

    def test_endless_inputs_are_refused_at_a_bound(self):
        started = time.monotonic()
        for flag in ("--exclude-from", "--filter-from", "--include-from"):
            r = self.bounded("upload", "-n", self.tree, flag, "/dev/zero")
            self.assertUsage(r, "'/dev/zero'", "more than 16 MiB")
        r = self.bounded("upload", "-n", self.tree, "--exclude-from", "-", stdin="/dev/zero")
        self.assertUsage(r, "'-' holds more than 16 MiB")
        for nul in ([], ["-0"]):
            r = self.bounded("upload", "-n", "--files-from", "/dev/zero", *nul)
            self.assertUsage(r, "'/dev/zero'", "more than 4096 bytes without a path")
            r = self.bounded("upload", "-n", "--files-from", "-", *nul, stdin="/dev/zero")
            self.assertUsage(r, "'-'", "more than 4096 bytes without a path")
        r = self.bounded("status", env={"LODGE_CONFIG": "/dev/zero"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("CONFIG_INVALID", r.err)
        self.assertIn("/dev/zero: holds more than 1 MiB", r.err)
        self.assertLess(time.monotonic() - started, 30)

    def test_a_marker_is_any_entry_but_a_directory(self):
        for d in ("file", "dir", "link", "dangling", "fifo", "linkdir"):
            self.write(os.path.join("tree", d, "kept"), "x")
        self.write("tree/file/.nobackup", "")
        os.mkdir(os.path.join(self.tree, "dir", ".nobackup"))
        os.symlink("../file/.nobackup", os.path.join(self.tree, "link", ".nobackup"))
        os.symlink("nowhere", os.path.join(self.tree, "dangling", ".nobackup"))
        os.mkfifo(os.path.join(self.tree, "fifo", ".nobackup"))
        os.symlink("../dir/.nobackup", os.path.join(self.tree, "linkdir", ".nobackup"))
        # As rclone 1.60 below the directory argument: a file, a link (dangling too) or a FIFO
        # is a marker; a directory is none (rclone stops listing there: "is a directory not a file").
        r = self.lodge("upload", "-n", "--json", self.tree, "--exclude-if-present", ".nobackup")
        self.assertEqual(self.planned(r), {"a.txt", "sub/b.txt", "dir/kept"}, r)
        self.assertIn("excluded " + os.path.join(self.tree, "file") + "/ (--exclude-if-present .nobackup)", r.err)
        # Following links, a link to a directory is a directory (rclone -L: a listing error).
        r = self.lodge("upload", "-n", "--json", "--follow-symlinks", self.tree, "--exclude-if-present", ".nobackup")
        self.assertEqual(self.planned(r) & {"file/kept", "link/kept", "dir/kept", "linkdir/kept", "fifo/kept"},
                         {"dir/kept", "linkdir/kept"}, r)
        # "NAME/" asks for a directory.
        r = self.lodge("upload", "-n", "--json", self.tree, "--exclude-if-present", ".nobackup/")
        self.assertEqual(self.planned(r) & {"file/kept", "dir/kept"}, {"file/kept"})

    def test_deeply_nested_braces_are_a_usage_error(self):
        for depth in (33, 30_000):
            pattern = "{a," * depth + "b" + "}" * depth
            rules = self.write(f"deep-{depth}.rules", "- " + pattern + "\n")
            for args in (["--filter-from", rules], ["--include", pattern]):
                r = self.lodge("upload", "-n", self.tree, *args)
                self.assertUsage(r, "more than 32 levels", "'{a,{a,{a,")
                self.assertLess(len(r.err), 2000, "the pattern is named, not printed whole")
        # Nesting within the limit works (rclone refuses any).
        r = self.lodge("upload", "-n", "--json", self.tree, "--include", "{a,{b,{c,sub}}}/**")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.planned(r), {"sub/b.txt"})


if __name__ == "__main__":
    main()
