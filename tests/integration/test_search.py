"""`lodge list` as a search and `lodge get` of a selection, on moto (or Azurite) through
StoreTestCase and on file://, on both ledgers (the _pg entry): each filter (metadata, tags,
creation time, digest, size, order, limit, prefix glob, --latest) against an answer worked
out by hand from the builds uploaded; `--latest` is the newest build's (prefix's) files, a file
deleted since not taken from an older build; `get --latest --metadata` restores exactly the chosen
files; bad values are USAGE errors naming the option."""

import datetime
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, StoreTestCase, check_invariants, epoch_ms, main  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "1MiB", "deadline": "60s", "grace": "1s"}}}

MAIN_ONE = b"main one\n"
MAIN_TWO = b"main two\n"
DEV_ONE = b"dev one\n"
BIG_1 = b"1" * 3000
BIG_2 = b"2" * 5000

# The builds, in upload order (so id order); main/1 is uploaded second, three days back in
# time, so creation order (main/1, main/2, dev/1, other/1) is not id order.
BUILDS = [
    ("builds/main/2", {"a.txt": MAIN_TWO, "lib/big.bin": BIG_2},
     ["--metadata", "commit=bbb", "--metadata", "branch=main", "--tag", "keep=yes"], None),
    ("builds/main/1", {"a.txt": MAIN_ONE, "lib/big.bin": BIG_1},
     ["--metadata", "commit=aaa", "--tag", "keep=no"], "-3d"),
    ("builds/dev/1", {"a.txt": DEV_ONE}, ["--metadata", "commit=ccc", "--metadata", "branch=dev"], None),
    ("other/1", {"a.txt": MAIN_TWO}, ["--metadata", "commit=bbb"], None),
]


def rfc3339(ms):
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SearchMixin:
    def setUp(self):
        super().setUp()
        self.store_env()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        r = self.lodge("init")
        self.assertEqual(r.rc, 0, r)
        self.ids = {}  # (prefix, path) -> id
        for prefix, files, flags, later in BUILDS:
            root = "tree-" + prefix.replace("/", "-")
            for rel, data in files.items():
                self.write(os.path.join(root, rel), data)
            # One job: ids follow the walk's order (a.txt before lib/big.bin), so id order is known.
            r = self.lodge("upload", "--json", "--jobs", "1", "--prefix", prefix, *flags, os.path.join(self.dir, root),
                           later=later)
            self.assertEqual(r.rc, 0, r)
            for line in r.json_lines()[:-1]:
                self.ids[(prefix, line["path"])] = line["id"]
        self.write("qa/q.txt", b"qa's\n")
        r = self.lodge("--owner", "qa", "upload", "--json", "--prefix", "builds/main/9", "--metadata", "commit=aaa",
                       os.path.join(self.dir, "qa"))
        self.assertEqual(r.rc, 0, r)

    def store_env(self):
        """Points self.env at the test's store (StoreTestCase already has)."""

    def rows(self, *args, expect=0):
        r = self.lodge("list", "--json", *args)
        self.assertEqual(r.rc, expect, r)
        return r.json_lines()

    def found(self, *args):
        """The (prefix, path) of each row listed, in the order listed."""
        return [(x["prefix"], x["path"]) for x in self.rows(*args)]

    def test_each_filter_against_a_hand_computed_answer(self):
        main1 = [("builds/main/1", "a.txt"), ("builds/main/1", "lib/big.bin")]
        main2 = [("builds/main/2", "a.txt"), ("builds/main/2", "lib/big.bin")]
        dev1 = [("builds/dev/1", "a.txt")]
        other1 = [("other/1", "a.txt")]
        by_id = main2 + main1 + dev1 + other1
        self.assertEqual(self.found(), by_id, "no filter: every alive row of the owner, by id")
        # Metadata: exact name and value, AND over repeats; the name as upload records it (lowercase).
        self.assertEqual(self.found("--metadata", "commit=aaa"), main1, "qa's commit=aaa row is another owner's")
        every = self.lodge("--owner", "*", "list", "--json", "--metadata", "commit=aaa")
        self.assertEqual(sorted((x["owner"], x["prefix"], x["path"]) for x in every.json_lines()),
                         sorted([("ci",) + k for k in main1] + [("qa", "builds/main/9", "q.txt")]))
        self.assertEqual(self.found("--metadata", "COMMIT=bbb"), main2 + other1)
        self.assertEqual(self.found("--metadata", "commit=bbb", "--metadata", "branch=main"), main2)
        self.assertEqual(self.found("--metadata", "commit=bbb", "--metadata", "branch=dev"), [])
        self.assertEqual(self.found("--metadata", "commit=bb"), [], "a value matches exactly, not as a prefix")
        self.assertEqual(self.found("--tag", "keep=yes"), main2)
        self.assertEqual(self.found("--tag", "keep=no", "--metadata", "commit=aaa"), main1)
        self.assertEqual(self.found("--tag", "keep=maybe"), [])
        # Creation time: a duration back from now, and RFC 3339.
        self.assertEqual(self.found("--since", "2d"), main2 + dev1 + other1)
        self.assertEqual(self.found("--until", "2d"), main1)
        self.assertEqual(self.found("--until", "36h", "--since", "4d"), main1)
        created = {(x["prefix"], x["path"]): epoch_ms(x["created_at"]) for x in self.rows()}
        at_dev = created[dev1[0]]
        self.assertEqual(self.found("--since", rfc3339(at_dev)), dev1 + other1, "--since is inclusive")
        self.assertEqual(self.found("--until", rfc3339(at_dev)), main2 + main1 + dev1, "--until is inclusive")
        day = datetime.datetime.fromtimestamp(at_dev / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")
        self.assertEqual(self.found("--until", day + "T00:00:00+00:00"), main1)
        # Content and size (inclusive bounds).
        self.assertEqual(self.found("--sha256", hashlib.sha256(MAIN_TWO).hexdigest().upper()),
                         [main2[0]] + other1)
        self.assertEqual(self.found("--min-size", "4K"), [main2[1]])
        self.assertEqual(self.found("--min-size", "3000B", "--max-size", "3000B"), [main1[1]])
        self.assertEqual(self.found("--max-size", "1K"), [main2[0], main1[0]] + dev1 + other1)
        # Order, reversed, limited.
        self.assertEqual(self.found("--sort", "time"), main1 + main2 + dev1 + other1)
        self.assertEqual(self.found("--sort", "time", "--reverse", "--limit", "1"), other1)
        self.assertEqual(self.found("--sort", "path"),
                         dev1 + main1 + main2 + other1)
        self.assertEqual(self.found("--sort", "path", "--reverse"), list(reversed(dev1 + main1 + main2 + other1)))
        sizes = [x["size"] for x in self.rows("--sort", "size")]
        self.assertEqual(sizes, sorted(sizes))
        self.assertEqual(self.found("--sort", "size", "--reverse", "--limit", "2"), [main2[1], main1[1]])
        self.assertEqual(self.found("--limit", "2"), by_id[:2])
        # The limit counts the rows shown, after the path glob.
        self.assertEqual(self.found("--path-glob", "*.bin", "--limit", "1"), [main2[1]])
        # Prefix globs, anchored at the prefix's start.
        self.assertEqual(self.found("--prefix-glob", "builds/*/*"), main2 + main1 + dev1)
        self.assertEqual(self.found("--prefix-glob", "builds/main/*"), main2 + main1)
        self.assertEqual(self.found("--prefix-glob", "{other,builds/dev}/*"), dev1 + other1)
        self.assertEqual(self.found("--prefix-glob", "main/*"), [], "not matched in the middle of a prefix")
        self.assertEqual(self.found("--prefix-glob", "builds/*"), [], "'*' stops at '/'")
        self.assertEqual(self.found("--prefix-glob", "builds/**", "--metadata", "branch=dev"), dev1)
        # Text: one line per row, the expiry shown when recorded.
        text = self.lodge("list", "--metadata", "commit=aaa")
        self.assertEqual(text.rc, 0, text)
        self.assertEqual(len(text.out.splitlines()), 2, text)
        self.assertNotIn("expires", text.out)
        self.assertEqual({x["expires_at"] for x in self.rows()}, {None})
        # A dead row is found only with --all.
        gone = self.ids[main1[0]]
        r = self.lodge("delete", gone)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.found("--metadata", "commit=aaa"), [main1[1]])
        dead = self.rows("--all", "--metadata", "commit=aaa")
        self.assertEqual([(x["path"], x["status"]) for x in dead], [("a.txt", "DELETED"), ("lib/big.bin", "ACTIVE")])
        check_invariants(self)

    def test_expiry_is_listed(self):
        row = self.ids[("builds/dev/1", "a.txt")]
        when = 1_900_000_000_123  # 2030-03-17T17:46:40.123Z
        self.sql_exec(f"UPDATE file_upload SET expires_at = {when} WHERE id = {row};")
        listed = {x["id"]: x["expires_at"] for x in self.rows()}
        self.assertEqual(listed[row], "2030-03-17T17:46:40.123Z")
        self.assertEqual([v for k, v in listed.items() if k != row], [None] * (len(listed) - 1))
        text = self.lodge("list", "--prefix", "builds/dev/1")
        self.assertIn("expires 2030-03-17T17:46:40.123Z", text.out, text)

    def test_latest_and_get_of_a_selection(self):
        # The latest build: the snapshot (prefix) with the newest matching file, all of its
        # matching files and nothing of an older one (other/1 was uploaded last; main/1 three
        # days back).
        self.assertEqual(self.found("--latest"), [("other/1", "a.txt")])
        self.assertEqual(self.found("--latest", "--prefix-glob", "builds/main/*"),
                         [("builds/main/2", "a.txt"), ("builds/main/2", "lib/big.bin")])
        self.assertEqual(self.found("--latest", "--metadata", "commit=aaa"),
                         [("builds/main/1", "a.txt"), ("builds/main/1", "lib/big.bin")],
                         "latest among the rows the other filters select")
        self.assertEqual(self.found("--latest", "--path-glob", "a.txt", "--prefix-glob", "builds/**"),
                         [("builds/dev/1", "a.txt")])
        self.assertEqual(self.found("--latest", "--path-glob", "**.bin"), [("builds/main/2", "lib/big.bin")],
                         "the newest build that holds a matching file, not the newest build")
        out = os.path.join(self.dir, "out")
        r = self.lodge("get", "--latest", "--metadata", "commit=aaa", "-o", out + "/")
        self.assertEqual(r.rc, 0, r)
        with open(os.path.join(out, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), MAIN_ONE)
        with open(os.path.join(out, "lib", "big.bin"), "rb") as f:
            self.assertEqual(f.read(), BIG_1)
        self.assertEqual(sorted(os.listdir(out)), ["a.txt", "lib"])
        out2 = os.path.join(self.dir, "out2")
        r = self.lodge("get", "--json", "--latest", "--metadata", "commit=bbb", "-o", out2)
        self.assertEqual(r.rc, 0, r)
        got = r.json_lines()
        # other/1 is the newer of the two builds of commit bbb: its one file, not main/2's big.bin.
        self.assertEqual(sorted((x["path"], x["id"]) for x in got[:-1]), [("a.txt", self.ids[("other/1", "a.txt")])])
        self.assertEqual(got[-1]["summary"]["written"], 1)
        self.assertEqual(os.listdir(out2), ["a.txt"])
        with open(os.path.join(out2, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), MAIN_TWO)
        # Two rows restoring to one path: refused before anything is written.
        out3 = os.path.join(self.dir, "out3")
        r = self.lodge("get", "--metadata", "commit=bbb", "-o", out3 + "/")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--latest", r.err)
        self.assertFalse(os.path.exists(out3))
        # With --prefix the selection is that build's.
        r = self.lodge("get", "--prefix", "builds/main/2", "--metadata", "commit=bbb", "-o", out3 + "/")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(sorted(os.listdir(out3)), ["a.txt", "lib"])
        r = self.lodge("get", "--latest", "--metadata", "commit=zzz", "-o", out3 + "/")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("NOT_FOUND", r.err)

    def test_latest_is_the_newest_builds_files_a_file_deleted_since_does_not_come_back(self):
        # Three builds of one branch: old.txt is in the first only, gone.txt in the first two;
        # the third has a.txt alone. Its files are the latest build's, whatever older builds had.
        ref = ["--metadata", "ciref=feature/x"]
        for n, files in ((1, {"a.txt": b"a1\n", "old.txt": b"old\n", "gone.txt": b"gone1\n"}),
                         (2, {"a.txt": b"a2\n", "gone.txt": b"gone2\n"}),
                         (3, {"a.txt": b"a3\n"})):
            for rel, data in files.items():
                self.write(f"feat{n}/{rel}", data)
            r = self.lodge("upload", "--prefix", f"feat/{n}", *ref, os.path.join(self.dir, f"feat{n}"))
            self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.found("--latest", *ref), [("feat/3", "a.txt")])
        self.assertEqual(self.found("--latest", "--prefix-glob", "feat/*"), [("feat/3", "a.txt")])
        out = os.path.join(self.dir, "latest") + "/"
        r = self.lodge("get", "--latest", *ref, "-o", out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(os.listdir(out), ["a.txt"], "a file the latest build did not upload is not restored")
        with open(os.path.join(out, "a.txt"), "rb") as f:
            self.assertEqual(f.read(), b"a3\n")
        # The latest build deleted: the build before it is the latest, whole.
        for row in self.rows("--prefix", "feat/3"):
            self.assertEqual(self.lodge("delete", row["id"]).rc, 0)
        self.assertEqual(self.found("--latest", *ref, "--sort", "path"), [("feat/2", "a.txt"), ("feat/2", "gone.txt")])

    def test_bad_values_are_usage_errors_naming_the_option(self):
        for args, named in [
            (["--since", "yesterday"], "--since"),
            (["--until", "2026-13-01T00:00:00Z"], "--until"),
            (["--until", "2026-12-01T10:00:00"], "--until"),
            (["--since", "1d", "--until", "2d"], "--since"),
            (["--sha256", "abc"], "--sha256"),
            (["--min-size", "10Q"], "--min-size"),
            (["--min-size", "2M", "--max-size", "1M"], "--min-size"),
            (["--limit", "0"], "--limit"),
            (["--limit", "ten"], "--limit"),
            (["--metadata", "commit"], "--metadata"),
            (["--tag", "=x"], "--tag"),
            (["--sort", "name"], "--sort"),
            (["--prefix-glob", "builds/["], "builds/["),
            (["--path-glob", "{a"], "{a"),
        ]:
            for cmd in (["list"], ["get", "-o", os.path.join(self.dir, "never")]):
                with self.subTest(cmd=cmd[0], args=args):
                    r = self.lodge(*cmd, *args)
                    self.assertEqual(r.rc, 2, r)
                    self.assertIn(named, r.err)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "never")))
        r = self.lodge("get", "--latest", str(self.ids[("other/1", "a.txt")]))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("not both", r.err)


class SearchStore(SearchMixin, StoreTestCase):
    """The suite on moto (or Azurite, LODGE_IT_STORE=az)."""


class SearchFile(SearchMixin, LodgeTestCase):
    def store_env(self):
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def objects(self):
        out = {}
        for base, _, names in os.walk(self.root):
            for n in names:
                p = os.path.join(base, n)
                rel = os.path.relpath(p, self.root)
                if not rel.startswith(".lodge"):
                    out[rel] = os.path.getsize(p)
        return out


if __name__ == "__main__":
    main()
