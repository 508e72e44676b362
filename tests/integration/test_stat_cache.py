"""Re-runs skip unchanged files without reading them: the ledger's stat cache (device,
inode, size, mtime and ctime in ns, per owner, prefix and relative path) maps an unchanged
file to its ACTIVE row; `--checksum` reads everything again; a changed file is a new upload,
and `--replace` retires the old row in the new one's confirm (the old object removed by
sweep after the grace); `--dry-run` says what would happen and writes nothing. Whether a
file was read is proven with the upload.before_read failpoint, which fails any file read."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import StoreTestCase, check_invariants, converge, main, wait_until  # noqa: E402

CONFIG = {
    "policies": {"default": {"max_size": "64MiB", "deadline": "10m", "grace": "5s"}},
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}
NO_READ = {"LODGE_FAILPOINTS": "upload.before_read=error"}
NOW_STAT = {"NO_FAKE_STAT": "1"}


class StatCache(StoreTestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()
        self.tree = os.path.join(self.dir, "tree")
        for rel, body in [("a.txt", "alpha\n"), ("sub/b.css", "b{}\n"), ("sub/deeper/c.bin", "\x00\x01c")]:
            self.write(os.path.join("tree", rel), body)

    def upload(self, *args, env=None, later="+3s"):
        # Three seconds on: the tree was just written, and a file modified within its
        # filesystem's timestamp granularity of the upload is racily clean, never cached.
        # (NO_FAKE_STAT: libfaketime would shift the files' timestamps as well.)
        r = self.lodge("upload", "--json", *args, self.tree, env={**(env or {}), **NOW_STAT}, later=later)
        lines = r.json_lines()
        return r, {os.path.relpath(l["file"], self.tree): l for l in lines if "file" in l}, lines[-1]["summary"]

    def rows(self):
        return self.sql("SELECT id, relative_path, upload_status, is_deleted FROM file_upload ORDER BY id")

    def test_an_unchanged_tree_is_not_read_again(self):
        r, first, _ = self.upload()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({k: v["outcome"] for k, v in first.items()},
                         {"a.txt": "active", "sub/b.css": "active", "sub/deeper/c.bin": "active"})
        # Reading any file fails now: a run that reads one would reject it.
        r, again, summary = self.upload(env=NO_READ)
        self.assertEqual(r.rc, 0, r)
        for rel, res in again.items():
            self.assertEqual((res["outcome"], res["unchanged"], res["id"]), ("duplicate", True, first[rel]["id"]), res)
            self.assertEqual(res["sha256"], first[rel]["sha256"])
        self.assertEqual((summary["duplicate"], summary["active"]), (3, 0))
        self.assertEqual(len(self.rows()), 3)
        # --checksum reads every file: the failpoint rejects them.
        r, forced, _ = self.upload("--checksum", env=NO_READ)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual({v["outcome"] for v in forced.values()}, {"rejected"})
        self.assertEqual({v["error"]["code"] for v in forced.values()}, {"UNREADABLE"})
        r, forced, _ = self.upload("--checksum")
        self.assertEqual({(v["outcome"], v["unchanged"]) for v in forced.values()}, {("duplicate", False)}, r)

    def test_a_touched_file_is_read_once_then_cached_again(self):
        self.upload()
        a = os.path.join(self.tree, "a.txt")
        st = os.stat(a)
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        r, res, _ = self.upload(env=NO_READ)
        self.assertEqual(res["a.txt"]["outcome"], "rejected", r)  # it had to be read
        r, res, _ = self.upload()
        self.assertEqual((res["a.txt"]["outcome"], res["a.txt"]["unchanged"]), ("duplicate", False), r)
        # Its content proved the same: the new stat is recorded, the next run need not read it.
        r, res, _ = self.upload(env=NO_READ)
        self.assertEqual((res["a.txt"]["outcome"], res["a.txt"]["unchanged"]), ("duplicate", True), r)

    def test_content_changed_with_its_mtime_put_back_is_not_unchanged(self):
        # Same size, same mtime (restored), other bytes: only ctime tells, and it must.
        self.upload()
        a = os.path.join(self.tree, "a.txt")
        st = os.stat(a)
        with open(a, "w") as f:
            f.write("ALPHA\n")
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
        self.assertEqual(os.stat(a).st_mtime_ns, st.st_mtime_ns)
        r, res, _ = self.upload()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(res["a.txt"]["outcome"], "active", res["a.txt"])
        key = res["a.txt"]["object_key"]
        self.assertEqual(self.object_bytes(key), b"ALPHA\n")

    def test_a_file_replaced_by_another_inode_is_read(self):
        self.upload()
        a = os.path.join(self.tree, "a.txt")
        tmp = os.path.join(self.tree, "a.tmp")
        with open(tmp, "w") as f:
            f.write("alpha\n")  # the same bytes, another inode
        st = os.stat(a)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.rename(tmp, a)
        r, res, _ = self.upload(env=NO_READ)
        self.assertEqual(res["a.txt"]["outcome"], "rejected", r)

    def test_a_changed_file_is_a_new_upload_and_the_old_row_stays_without_replace(self):
        _, first, _ = self.upload()
        self.write("tree/a.txt", "alpha, version two\n")
        r, res, _ = self.upload()
        self.assertEqual(res["a.txt"]["outcome"], "active", r)
        self.assertNotEqual(res["a.txt"]["id"], first["a.txt"]["id"])
        at_path = [row for row in self.rows() if row[1] == "a.txt"]
        self.assertEqual([(s, d) for _, _, s, d in at_path], [("ACTIVE", 0), ("ACTIVE", 0)])

    def test_replace_retires_the_old_row_once_the_new_one_is_active(self):
        _, first, _ = self.upload()
        old_id, old_key = first["a.txt"]["id"], first["a.txt"]["object_key"]
        self.write("tree/a.txt", "alpha, version two\n")
        r, res, _ = self.upload("--replace")
        self.assertEqual(r.rc, 0, r)
        new = res["a.txt"]
        self.assertEqual(new["outcome"], "active")
        # The other files were unchanged: nothing of theirs was retired.
        self.assertEqual({res[k]["outcome"] for k in ("sub/b.css", "sub/deeper/c.bin")}, {"duplicate"})
        [(status, deleted, deleted_at)] = self.sql(
            "SELECT upload_status, is_deleted, deleted_at FROM file_upload WHERE id = ?", (old_id,))
        self.assertEqual((status, deleted), ("ACTIVE", 1))
        [(activated,)] = self.sql("SELECT activated_at FROM file_upload WHERE id = ?", (new["id"],))
        self.assertEqual(deleted_at, activated, "retired in the new row's confirm transaction")
        [(task, due)] = self.sql("SELECT status, next_retry_at FROM cleanup_task WHERE record_id = ?", (old_id,))
        self.assertEqual(task, "PENDING")
        self.assertEqual(due, deleted_at + 5_000, "due after the policy's grace")
        # Until then the old object is still readable; after, sweep removes it, not the new one.
        self.assertIn(old_key, self.objects())
        listed = {l["id"]: l["status"] for l in self.lodge("list", "--all", "--json").json_lines()}
        self.assertEqual((listed[old_id], listed[new["id"]]), ("DELETED", "ACTIVE"))
        converge(self, later="+30s")
        objects = self.objects()
        self.assertNotIn(old_key, objects)
        self.assertIn(new["object_key"], objects)
        self.assertEqual(len(objects), 3)
        check_invariants(self, objects)

    def test_dry_run_writes_nothing(self):
        before_objects = self.objects(metadata=True)
        r, res, summary = self.upload("--dry-run")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({v["outcome"] for v in res.values()}, {"planned"}, res)
        self.assertEqual(res["sub/b.css"]["content_type"], "text/css")
        self.assertEqual((summary["dry_run"], summary["planned"], summary["active"]), (True, 3, 0))
        self.assertEqual(self.rows(), [])
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task"), [(0,)])
        self.assertEqual(self.objects(metadata=True), before_objects)
        text = self.lodge("upload", "-n", self.tree)
        self.assertIn("dry run, nothing written: 3 files: 3 to upload", text.err)
        # After a real run: the unchanged files are duplicates (from the cache), the changed
        # one planned; still nothing written.
        self.upload()
        self.write("tree/sub/b.css", "b{color:red}\n")
        rows = self.rows()
        r, res, summary = self.upload("--dry-run", env=NO_READ)
        self.assertEqual(res["a.txt"]["outcome"], "duplicate")
        self.assertEqual(res["sub/b.css"]["outcome"], "rejected")  # it had to be read
        r, res, summary = self.upload("--dry-run")
        self.assertEqual((res["sub/b.css"]["outcome"], summary["planned"]), ("planned", 1), r)
        self.assertEqual(self.rows(), rows)


class RacilyClean(StoreTestCase):
    """A filesystem with one-second timestamps (ext4 made with 128-byte inodes, loop-mounted):
    a file rewritten with the same size within the second of its upload keeps its size,
    mtime and ctime. Its stat must not be trusted: it is read again and the new bytes stored."""

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()
        image = os.path.join(self.dir, "fs.img")
        with open(image, "wb") as f:
            f.truncate(8 * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", image], check=True, capture_output=True)
        self.mnt = os.path.join(self.dir, "mnt")
        os.mkdir(self.mnt)
        subprocess.run(["mount", "-o", "loop", image, self.mnt], check=True, capture_output=True)
        self.addCleanup(subprocess.run, ["umount", self.mnt], check=True)
        os.chmod(self.mnt, 0o700)

    def up(self, path, env=None, **kw):
        r = self.lodge("upload", "--json", path, env={**(env or {}), **NOW_STAT}, **kw)
        lines = r.json_lines()
        self.assertEqual(r.rc, 0, r)
        return lines[0]

    def test_a_file_rewritten_within_its_timestamp_is_read_again(self):
        path = os.path.join(self.mnt, "f.txt")
        for attempt in range(5):
            # Start early in a second, so the write, the upload and the rewrite share it.
            wait_until(lambda: time.time() % 1 < 0.3, timeout=2, what="the start of a second")
            with open(path, "w") as f:
                f.write(f"first {attempt}\n")
            before = os.stat(path)
            self.assertEqual(before.st_mtime_ns % 1_000_000_000, 0, "one-second timestamps")
            first = self.up(path)
            self.assertEqual(first["outcome"], "active", first)
            with open(path, "w") as f:
                f.write(f"other {attempt}\n")  # the same size
            after = os.stat(path)
            if (after.st_mtime_ns, after.st_ctime_ns) == (before.st_mtime_ns, before.st_ctime_ns):
                break  # the racy case: nothing in the stat tells the rewrite
        else:
            self.fail("never rewrote the file within the second of its upload")
        second = self.up(path)
        self.assertEqual((second["outcome"], second.get("unchanged")), ("active", None), second)
        self.assertEqual(self.object_bytes(second["object_key"]), f"other {attempt}\n".encode())
        # Once the file is older than its timestamps' granularity its stat is cached: a run
        # later reads it once more and records the stat, the next one does not read it.
        third = self.up(path, later="+5s")
        self.assertEqual((third["outcome"], third["unchanged"]), ("duplicate", False), third)
        fourth = self.up(path, later="+6s", env=NO_READ)
        self.assertEqual((fourth["outcome"], fourth["unchanged"]), ("duplicate", True), fourth)


if __name__ == "__main__":
    main()
