"""lodge upload's filters (rclone's dialect) against a real S3 (moto): a build tree minus its
objects, VCS and dependency directories, a .nobackup marker, size and age bounds; what the
bucket holds is read back with the aws CLI. A pruned directory is never listed: its atime
stays (a control directory's moves), and without root it is unreadable too."""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, aws, check_invariants, main  # noqa: E402

KEY = re.compile(r"^lodge/ci/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/(.*)$")
DAY = 86400


class Filters(S3TestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "tree")
        now = time.time()
        files = {
            "README.md": b"readme\n",
            "src/main.c": b"int main(void) { return 0; }\n",
            "src/util.c": b"int util;\n",
            "build/main.o": b"\x7fELF main",
            "build/util.o": b"\x7fELF util",
            "build/app": b"#!/bin/sh\necho app\n",
            ".git/HEAD": b"ref: refs/heads/main\n",
            ".git/objects/ab/cdef": b"blob",
            "node_modules/left-pad/index.js": b"module.exports = 1;\n",
            "cache/.nobackup": b"",
            "cache/blob.bin": b"cached",
            "logs/old.log": b"old\n",
            "logs/new.log": b"new\n",
            "data/big.bin": b"x" * 300_000,
            "data/small.bin": b"y" * 100,
            "secret/key.pem": b"-----BEGIN-----\n",
        }
        for rel, data in files.items():
            path = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        # Would be reported (a FIFO is refused) if node_modules were walked.
        os.mkfifo(os.path.join(self.root, "node_modules", "left-pad", "pipe"))
        os.utime(os.path.join(self.root, "logs/old.log"), (now - 40 * DAY, now - 40 * DAY))
        os.utime(os.path.join(self.root, "logs/new.log"), (now - 1 * DAY, now - 1 * DAY))
        # Unreadable to anyone but root; and listing it would move its atime.
        os.chmod(os.path.join(self.root, "secret"), 0)
        for d in ("node_modules", "secret", "src"):
            p = os.path.join(self.root, d)
            os.utime(p, (1, os.stat(p).st_mtime))

    def tearDown(self):
        os.chmod(os.path.join(self.root, "secret"), 0o755)
        super().tearDown()

    def keys(self):
        """The relative paths of the objects in the bucket, as the aws CLI lists them."""
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket,
                      "--prefix", "lodge/ci/")
        out = set()
        for o in (listing or {}).get("Contents", []):
            m = KEY.match(o["Key"])
            self.assertIsNotNone(m, o["Key"])
            out.add(m.group(1))
        return out

    def excluded_lines(self, err):
        return sorted(line for line in err.splitlines() if line.startswith("lodge: excluded "))

    BUILD_FILTERS = ("--exclude", "*.o", "--exclude", ".git/", "--filter", "- node_modules/",
                     "--exclude", "/secret/**", "--exclude-if-present", ".nobackup")

    def test_a_build_tree_minus_objects_vcs_and_dependencies(self):
        r = self.lodge("upload", "--json", self.root, *self.BUILD_FILTERS)
        self.assertEqual(r.rc, 0, r)
        summary = r.json_lines()[-1]["summary"]
        # *.o twice; .git/, node_modules/, secret/ and cache/ once each.
        self.assertEqual((summary["excluded"], summary["active"], summary["rejected"]), (6, 8, 0), r)
        self.assertEqual(self.keys(), {"README.md", "src/main.c", "src/util.c", "build/app", "logs/old.log",
                                       "logs/new.log", "data/big.bin", "data/small.bin"})
        # The pruned directories were never listed; the control one was.
        self.assertGreater(os.stat(os.path.join(self.root, "src")).st_atime, 1)
        self.assertEqual(os.stat(os.path.join(self.root, "node_modules")).st_atime, 1)
        self.assertEqual(os.stat(os.path.join(self.root, "secret")).st_atime, 1)
        check_invariants(self, self.objects())

    def test_dry_run_and_verbose_list_what_is_excluded_and_why(self):
        r = self.lodge("upload", "-n", self.root, *self.BUILD_FILTERS)
        self.assertEqual(r.rc, 0, r)
        t = self.root
        want = sorted([f"lodge: excluded {t}/.git/ (- .git/)",
                       f"lodge: excluded {t}/build/main.o (- *.o)",
                       f"lodge: excluded {t}/build/util.o (- *.o)",
                       f"lodge: excluded {t}/cache/ (--exclude-if-present .nobackup)",
                       f"lodge: excluded {t}/node_modules/ (- node_modules/)",
                       f"lodge: excluded {t}/secret/ (- /secret/**)"])
        self.assertEqual(self.excluded_lines(r.err), want, r)
        self.assertIn(", 6 excluded,", r.err)
        self.assertEqual(self.keys(), set())  # a dry run writes nothing
        # -v lists them on a real run; without it they are only counted.
        quiet = self.lodge("upload", self.root, *self.BUILD_FILTERS)
        self.assertEqual(quiet.rc, 0, quiet)
        self.assertEqual(self.excluded_lines(quiet.err), [], quiet)
        self.assertIn(", 6 excluded,", quiet.err)
        again = self.lodge("upload", "-v", self.root, *self.BUILD_FILTERS)
        self.assertEqual(self.excluded_lines(again.err), want, again)

    def test_first_matching_rule_wins_in_command_line_order(self):
        # --include then --exclude of the same file: the include decides; the other way round not.
        a = self.lodge("upload", "-n", "--json", self.root, "--include", "/src/*.c", "--exclude", "main.c")
        self.assertEqual({x["path"] for x in a.json_lines()[:-1]}, {"src/main.c", "src/util.c"}, a)
        b = self.lodge("upload", "-n", "--json", self.root, "--exclude", "main.c", "--include", "/src/*.c")
        self.assertEqual({x["path"] for x in b.json_lines()[:-1]}, {"src/util.c"}, b)
        # '*' does not cross '/', '**' does.
        c = self.lodge("upload", "-n", "--json", self.root, "--include", "/*.md", "--include", "/.git/**")
        self.assertEqual({x["path"] for x in c.json_lines()[:-1]},
                         {"README.md", ".git/HEAD", ".git/objects/ab/cdef"}, c)

    def test_size_and_age_bounds(self):
        r = self.lodge("upload", "--json", os.path.join(self.root, "data"), os.path.join(self.root, "logs"),
                       "--min-size", "1K", "--max-size", "1M")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[-1]["summary"]["excluded"], 3, r)  # small.bin and both logs
        self.assertEqual(self.keys(), {"big.bin"})
        r = self.lodge("upload", "--json", os.path.join(self.root, "logs"), "--max-age", "1w")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.keys(), {"big.bin", "new.log"})
        r = self.lodge("upload", "--json", os.path.join(self.root, "logs"), "--min-age", "30d")
        self.assertEqual(self.keys(), {"big.bin", "new.log", "old.log"})

    def test_a_files_from_list_is_filtered_too(self):
        listing = "\n".join(["tree/README.md", "tree/build/main.o", "tree/src/util.c", "tree/.git/HEAD",
                             "tree/logs"])
        r = self.lodge("upload", "--json", "--files-from", "-", "--exclude", "*.o", "--exclude", ".git/",
                       "--exclude", "/tree/logs/new.log", stdin=listing + "\n", cwd=self.dir)
        self.assertEqual(r.rc, 0, r)
        # A path as given is matched as recorded (tree/README.md); inside a directory argument
        # the paths are relative to it (old.log), so /tree/logs/new.log matches nothing there.
        self.assertEqual(r.json_lines()[-1]["summary"]["excluded"], 2, r)
        self.assertEqual(self.keys(), {"tree/README.md", "tree/src/util.c", "old.log", "new.log"})

    def test_filter_from_a_file_with_comments_and_from_stdin(self):
        rules = os.path.join(self.dir, "rules.txt")
        with open(rules, "w") as f:
            f.write("# a build tree's sources only\n\n; also a comment\n+ /src/**\n  + /README.md  \n- **\n")
        r = self.lodge("upload", "--json", self.root, "--filter-from", rules)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.keys(), {"README.md", "src/main.c", "src/util.c"})
        # '-' reads stdin (here --exclude-from), unless --files-from - takes it.
        r = self.lodge("upload", "-n", "--json", self.root, "--exclude-from", "-", "--exclude", "**",
                       stdin="# nothing\n", cwd=self.dir)
        self.assertEqual(r.json_lines()[-1]["summary"]["files"], 0, r)
        r = self.lodge("upload", "--files-from", "-", "--filter-from", "-", stdin="tree/README.md\n")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("stdin", r.err)

    def test_a_bad_pattern_is_a_usage_error_naming_it(self):
        for args, named in ((["--exclude", "build/[a-"], "build/[a-"),
                            (["--filter", "* *.o"], "* *.o"),
                            (["--include", "{a,b"], "{a,b"),
                            (["--max-size", "lots"], "lots")):
            r = self.lodge("upload", self.root, *args)
            self.assertEqual(r.rc, 2, r)
            self.assertIn(named, r.err)
            self.assertIn("USAGE", r.err)
        bad = os.path.join(self.dir, "bad.rules")
        with open(bad, "w") as f:
            f.write("- ok\n- [oops\n")
        r = self.lodge("upload", self.root, "--filter-from", bad)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("[oops", r.err)
        self.assertIn("bad.rules", r.err)
        self.assertEqual(self.keys(), set())

    def test_list_path_glob_uses_the_same_matcher(self):
        r = self.lodge("upload", self.root, *self.BUILD_FILTERS)
        self.assertEqual(r.rc, 0, r)

        def listed(glob):
            out = self.lodge("--json", "list", "--path-glob", glob)
            self.assertEqual(out.rc, 0, out)
            return {json.loads(line)["path"] for line in out.out.splitlines() if line.strip()}
        self.assertEqual(listed("*.c"), {"src/main.c", "src/util.c"})
        self.assertEqual(listed("/*"), {"README.md"})  # '*' stops at '/'
        self.assertEqual(listed("/logs/**"), {"logs/old.log", "logs/new.log"})
        self.assertEqual(listed("{app,*.md}"), {"build/app", "README.md"})
        bad = self.lodge("list", "--path-glob", "src/[")
        self.assertEqual(bad.rc, 2, bad)
        self.assertIn("src/[", bad.err)


if __name__ == "__main__":
    main()
