"""lodge upload's directory walk under attack: a directory swapped for a symlink between
the walk and the open, symlink cycles with --follow-symlinks, a file:// store and the
ledger inside the tree; and store prefixes that a server would rewrite."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, S3TestCase, check_invariants, is_lodge_metadata, main, wait_until  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "64MiB", "deadline": "60s", "grace": "1s"}}}


class WalkMixin:
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fp_log = os.path.join(self.dir, "fp.log")

    def results(self, r):
        lines = r.json_lines()
        self.assertIn("summary", lines[-1], r)
        return lines[:-1], lines[-1]["summary"]

    def fired(self):
        if not os.path.exists(self.fp_log):
            return []
        with open(self.fp_log) as f:
            return [line.split()[1] for line in f if line.strip()]

    def paused_upload(self, *args):
        """Starts `lodge upload` held at upload.after_walk; returns (process, gate file)."""
        gate = os.path.join(self.dir, "go")
        env = {"LODGE_FAILPOINTS": f"upload.after_walk=pause:{gate}", "LODGE_FAILPOINTS_LOG": self.fp_log}
        p = self.spawn("upload", "--json", *args, env=env)
        wait_until(lambda: "upload.after_walk" in self.fired() or p.poll() is not None,
                   what="the walk to list the tree")
        self.assertIsNone(p.poll(), "lodge exited before the walk paused")
        return p, gate

    def release(self, p, gate):
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)

        class R:
            pass
        r = R()
        r.rc, r.out, r.err = p.returncode, out, err
        r.json_lines = lambda: [json.loads(line) for line in out.splitlines() if line.strip()]
        return r

    def rows(self):
        return self.sql("SELECT original_name, sha256, object_key, upload_status FROM file_upload")


class WalkFileStore(WalkMixin, LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})
        self.init()

    def objects(self, root=None):
        """Every object in the file:// store (key -> bytes), lodge's own folders aside."""
        root = root or self.root
        out = {}
        for base, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not (base == root and (d.startswith(".lodge-") or d == ".lodge"))]
            for n in files:
                p = os.path.join(base, n)
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = f.read()
        return out

    def make_race_tree(self):
        """tree/{top.txt, sub/in-NN.txt} inside; outside/{in-NN.txt, secret.txt} with
        the same names and other bytes, where a swapped directory would lead."""
        inside = {"tree/top.txt": b"inside top\n"}
        for i in range(20):
            inside[f"tree/sub/in-{i:02d}.txt"] = f"inside {i}\n".encode()
        outside = {f"outside/in-{i:02d}.txt": f"OUTSIDE {i}\n".encode() for i in range(20)}
        outside["outside/secret.txt"] = b"OUTSIDE secret\n"
        for name, data in {**inside, **outside}.items():
            self.write(name, data)
        return inside, outside

    def assert_nothing_from_outside(self, outside):
        bad = {hashlib.sha256(d).hexdigest() for d in outside.values()}
        for name, sha, key, status in self.rows():
            self.assertNotIn(sha, bad, f"row for {name} ({status}) holds bytes from outside the tree")
        for key, data in self.objects().items():
            self.assertNotIn(b"OUTSIDE", data, f"object {key} holds bytes from outside the tree")

    def test_directory_swapped_for_a_symlink_after_the_walk_is_not_followed(self):
        inside, outside = self.make_race_tree()
        tree, sub = os.path.join(self.dir, "tree"), os.path.join(self.dir, "tree", "sub")
        p, gate = self.paused_upload("-j", "2", tree)
        # The walk has listed tree/sub; now another user swaps it for a link outside.
        shutil.rmtree(sub)
        os.symlink(os.path.join(self.dir, "outside"), sub)
        r = self.release(p, gate)
        self.assertEqual(r.rc, 1, r.err)
        files, summary = self.results(r)
        got = {os.path.relpath(x["file"], self.dir): x for x in files}
        self.assertEqual(set(got), set(inside), "each walked file is reported once")
        self.assertEqual(got["tree/top.txt"]["outcome"], "active")
        for i in range(20):
            x = got[f"tree/sub/in-{i:02d}.txt"]
            self.assertEqual(x["outcome"], "rejected", x)
            self.assertEqual(x["error"]["code"], "UNREADABLE", x)
            self.assertIn(f"tree/sub/in-{i:02d}.txt", x["error"]["message"])
        self.assertEqual(summary["active"], 1)
        self.assert_nothing_from_outside(outside)
        self.assertEqual(len(self.rows()), 1)
        check_invariants(self, {k: len(v) for k, v in self.objects().items()})

    def test_directory_moved_away_and_replaced_by_a_symlink_uploads_what_was_walked(self):
        inside, outside = self.make_race_tree()
        tree, sub = os.path.join(self.dir, "tree"), os.path.join(self.dir, "tree", "sub")
        p, gate = self.paused_upload("-j", "2", tree)
        os.rename(sub, os.path.join(self.dir, "moved-away"))
        os.symlink(os.path.join(self.dir, "outside"), sub)
        r = self.release(p, gate)
        self.assertEqual(r.rc, 0, r.err)
        files, summary = self.results(r)
        self.assertEqual(summary["active"], 21, r.out)
        self.assert_nothing_from_outside(outside)
        want = {hashlib.sha256(d).hexdigest() for d in inside.values()}
        self.assertEqual({row[1] for row in self.rows()}, want, "exactly the walked files, by content")

    def test_file_swapped_for_a_symlink_or_a_hard_link_after_the_walk_is_refused(self):
        inside, outside = self.make_race_tree()
        tree = os.path.join(self.dir, "tree")
        p, gate = self.paused_upload("-j", "1", tree)
        top = os.path.join(tree, "top.txt")
        os.unlink(top)
        os.symlink(os.path.join(self.dir, "outside", "secret.txt"), top)
        victim = os.path.join(tree, "sub", "in-00.txt")
        os.unlink(victim)
        os.link(os.path.join(self.dir, "outside", "in-00.txt"), victim)  # same name, another inode
        fifo = os.path.join(tree, "sub", "in-01.txt")
        os.unlink(fifo)
        os.mkfifo(fifo)  # a FIFO swapped in must not block the open
        r = self.release(p, gate)
        self.assertEqual(r.rc, 1, r.err)
        got = {os.path.relpath(x["file"], self.dir): x for x in self.results(r)[0]}
        self.assertEqual(got["tree/top.txt"]["error"]["code"], "NOT_REGULAR_FILE", got["tree/top.txt"])
        self.assertEqual(got["tree/sub/in-00.txt"]["error"]["code"], "FILE_CHANGED", got["tree/sub/in-00.txt"])
        self.assertIn("replaced", got["tree/sub/in-00.txt"]["error"]["message"])
        self.assertEqual(got["tree/sub/in-01.txt"]["error"]["code"], "NOT_REGULAR_FILE")
        self.assertEqual(sum(1 for x in got.values() if x["outcome"] == "active"), 18)
        self.assert_nothing_from_outside(outside)

    def test_follow_symlinks_does_not_recurse_into_a_cycle(self):
        self.write("tree/d/a.txt", "in d\n")
        self.write("tree/b.txt", "in tree\n")
        os.symlink("..", os.path.join(self.dir, "tree", "d", "up"))
        tree = os.path.join(self.dir, "tree")
        r = self.lodge("upload", "--json", "--follow-symlinks", tree)
        self.assertEqual(r.rc, 0, r)
        files, summary = self.results(r)
        self.assertEqual(sorted(os.path.relpath(x["file"], self.dir) for x in files), ["tree/b.txt", "tree/d/a.txt"])
        self.assertEqual(summary["active"], 2)
        warnings = [line for line in r.err.splitlines() if "cycle" in line]
        self.assertEqual(len(warnings), 1, r.err)
        self.assertIn("warning:", warnings[0])
        self.assertIn(os.path.join(tree, "d", "up"), warnings[0])
        # Started below the link's target, the walk goes up once and stops where it began.
        r = self.lodge("upload", "--json", "--follow-symlinks", os.path.join(tree, "d"))
        self.assertEqual(r.rc, 0, r)
        files, summary = self.results(r)
        names = sorted(os.path.relpath(x["file"], self.dir) for x in files)
        self.assertEqual(names, ["tree/d/a.txt", "tree/d/up/b.txt"])
        self.assertEqual(summary["duplicate"], 2)
        warnings = [line for line in r.err.splitlines() if "cycle" in line]
        self.assertEqual(len(warnings), 1, r.err)
        self.assertIn(os.path.join(tree, "d", "up", "d"), warnings[0])
        # Without the flag the link is not followed at all: it is reported as skipped.
        r = self.lodge("upload", "--json", tree)
        self.assertEqual(r.rc, 0, r)
        files, summary = self.results(r)
        self.assertEqual([os.path.relpath(x["file"], self.dir) for x in files if x["outcome"] == "skipped"],
                         ["tree/d/up"])
        self.assertEqual((summary["duplicate"], summary["skipped"]), (2, 1))

    def test_a_store_and_ledger_inside_the_tree_are_skipped_with_a_warning(self):
        work = os.path.join(self.dir, "work")
        self.write("work/a.txt", "a\n")
        self.write("work/docs/b.txt", "b\n")
        store = os.path.join(work, "s")
        db = os.path.join(work, "ledger.db")
        env = {"LODGE_STORE": "file://" + store}
        self.assertEqual(self.lodge("--db", db, "init", env=env, db=False).rc, 0)
        for run in range(2):
            r = self.lodge("--db", db, "upload", "--json", work, env=env, db=False)
            self.assertEqual(r.rc, 0, r)
            files, summary = self.results(r)
            names = sorted(os.path.relpath(x["file"], work) for x in files)
            self.assertEqual(names, ["a.txt", "docs/b.txt"], f"run {run}: only the user's files")
            self.assertEqual((summary["active"], summary["duplicate"]), (2, 0) if run == 0 else (0, 2))
            warnings = [line for line in r.err.splitlines() if "warning:" in line]
            self.assertEqual(sum(1 for w in warnings if "store's own directory" in w and store in w), 1, r.err)
            # The ledger and its -wal and -shm (open during the walk) are skipped, each said once.
            for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm"):
                self.assertEqual(sum(1 for w in warnings if w.endswith(f"{name}: it is lodge's own ledger")),
                                 1, f"{name}: {r.err}")
            objs = self.objects(store)
            self.assertEqual(sorted(objs.values()), [b"a\n", b"b\n"], f"run {run}: {sorted(objs)}")
        self.db = db
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 2)

    def test_the_store_given_directly_is_skipped_and_quiet_silences_the_warning(self):
        self.write("a.txt", "a\n")
        self.assertEqual(self.lodge("upload", os.path.join(self.dir, "a.txt")).rc, 0)
        r = self.lodge("upload", "--json", self.root)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.results(r)[0], [])
        self.assertIn("store's own directory", r.err)
        r = self.lodge("-q", "upload", self.root)
        self.assertEqual((r.rc, r.err), (0, ""), r)


def hostile_prefixes(bucket):
    return [f"s3://{bucket}/../evil", f"s3://{bucket}/a/../p", f"s3://{bucket}/./p", f"s3://{bucket}/p/..",
            f"s3://{bucket}/a//b", f"s3://{bucket}//p", f"s3://{bucket}/%2e%2e/p", f"s3://{bucket}/p/%2E",
            f"s3://{bucket}/a\\b", f"s3://{bucket}/p\x07"]


class StorePrefixS3(WalkMixin, S3TestCase):
    def all_objects(self):
        out = []
        for b in self.s3.list_buckets()["Buckets"]:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=b["Name"]):
                out += [(b["Name"], o["Key"]) for o in page.get("Contents", []) if not is_lodge_metadata(o["Key"])]
        return out

    def test_hostile_prefixes_are_usage_errors_and_write_nothing(self):
        evil = "evil-" + uuid.uuid4().hex[:12]
        self.s3.create_bucket(Bucket=evil)
        urls = hostile_prefixes(self.bucket) + [f"s3://{self.bucket}/../{evil}"]
        for i, url in enumerate(urls):
            with self.subTest(url=url):
                # Other bytes each time, so that no URL could pass as a duplicate.
                r = self.lodge("--store", url, "upload", "--json", self.write(f"a{i}.txt", f"hostile {i}\n"))
                self.assertEqual(r.rc, 2, r)
                self.assertIn("CONFIG_INVALID", r.err)
                shown = url.replace("\\", "\\\\").replace("\x07", "\\x07")
                self.assertIn(shown, r.err)
                err = r.json()["error"]  # one line: the error, no per-file result
                self.assertEqual(err["code"], "CONFIG_INVALID")
                self.assertIn(url, err["message"])
                if os.path.exists(self.db):
                    self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 0)
        self.assertEqual(self.all_objects(), [], "nothing written to any bucket")
        # The same URLs refused by every command that opens the store, sweep included.
        r = self.lodge("--store", f"s3://{self.bucket}/../{evil}", "sweep")
        self.assertEqual(r.rc, 2, r)
        # A plain prefix (one trailing slash allowed) still works.
        r = self.lodge("--store", f"s3://{self.bucket}/lodge/", "upload", "--json", self.write("ok.txt", "ok\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([k for _, k in self.all_objects()][0].split("/")[:2], ["lodge", "ci"])

    def test_hostile_owner_is_a_usage_error(self):
        f = self.write("a.txt", "hostile owner\n")
        for owner in ("..", ".", ".lodge", "a/b", "a\\b", "%2e%2e", ""):
            with self.subTest(owner=owner):
                r = self.lodge("--owner", owner, "upload", f, env={"LODGE_OWNER": ""})
                self.assertEqual(r.rc, 2, r)
        self.assertEqual(self.all_objects(), [])


class StorePrefixFile(WalkMixin, LodgeTestCase):
    def test_hostile_file_store_directories_are_usage_errors_and_create_nothing(self):
        base = os.path.join(self.dir, "stores")
        os.makedirs(base)
        for i, url in enumerate(["file://" + base + "/s/../evil", "file://" + base + "/./s", "file://" + base + "//s",
                    "file://" + base + "/%2e%2e/s", "file://" + base + "/s\\t", "file://" + base + "/s/."]):
            with self.subTest(url=url):
                r = self.lodge("--store", url, "--owner", "ci", "upload", self.write(f"a{i}.txt", f"dir {i}\n"))
                self.assertEqual(r.rc, 2, r)
                self.assertIn(url.replace("\\", "\\\\"), r.err)
                if os.path.exists(self.db):
                    self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 0)
        self.assertEqual(os.listdir(base), [], "no store directory was created")


if __name__ == "__main__":
    main()
