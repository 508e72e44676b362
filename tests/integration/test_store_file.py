"""lodge against a file:// store whose metadata sidecars were damaged: reported with a
clear error, never an INTERNAL crash, and an object whose stamp cannot be read is never
queued for deletion; a file another tool wrote at a dead row's key is never deleted; a
staged upload whose part files changed after they were written is never completed; and
nothing a killed process was writing stays behind in the store's own folders."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, check_invariants, converge, main, wait_until  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}}}


class DamagedSidecars(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci"})
        self.init()

    def test_reconcile_reports_an_unreadable_stamp_as_unknown_and_leaves_it(self):
        up = self.lodge("upload", "--json", self.write("a.txt", "kept\n"))
        self.assertEqual(up.rc, 0, up)
        stray = os.path.join(self.store, "ci", "stray.txt")
        with open(stray, "w") as f:
            f.write("whose?\n")
        os.makedirs(os.path.join(self.store, ".lodge-meta", "ci"), exist_ok=True)
        with open(os.path.join(self.store, ".lodge-meta", "ci", "stray.txt.json"), "w") as f:
            f.write('{"content_type": "text/plain", "metadata": {"lodge-ledger": 7}}')

        rec = self.lodge("reconcile", "--apply", "--json", "--older-than", "0ms")
        self.assertEqual(rec.rc, 1, rec)
        summary = rec.json()
        self.assertNotIn("error", summary, rec)
        self.assertEqual(summary["found"]["unknown"], 1, summary)
        self.assertEqual(summary["found"]["unmanaged"], 0, summary)
        item = summary["items"][0]
        self.assertEqual(item["key"], "ci/stray.txt")
        self.assertFalse(item["applied"])
        self.assertIn("'metadata.lodge-ledger'", item["detail"])
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task WHERE object_key = 'ci/stray.txt'"), [(0,)])
        self.assertTrue(os.path.exists(stray), "never touched")


class AnotherWritersFile(LodgeTestCase):
    """A plain file written at a dead row's key of a file:// store before sweep ran: over
    lodge's object in place (its inode, and lodge's attribute, stay) or as a new file."""

    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci",
                         "LODGE_CONFIG": self.write("config.json", json.dumps(CONFIG))})
        self.init()

    def test_a_plain_write_at_a_dead_rows_key_survives_sweep_and_reconcile_apply(self):
        deleted = self.lodge("upload", "--json", self.write("a.txt", "deleted by its owner\n")).json_lines()[0]
        self.assertEqual(self.lodge("delete", deleted["id"]).rc, 0)
        # The answer of this PUT is lost: the row fails, its object waits for the grace.
        failed = self.lodge("upload", "--json", self.write("b.txt", "a failed upload\n"),
                            env={"LODGE_FAILPOINTS": "upload.after_put=error"})
        self.assertEqual(failed.json_lines()[0]["outcome"], "failed", failed)
        (failed_id, failed_key), = self.sql("SELECT id, object_key FROM file_upload WHERE upload_status = 'UPLOAD_FAILED'")
        in_place = os.path.join(self.store, deleted["object_key"])
        with open(in_place, "w") as f:  # O_TRUNC: the same inode
            f.write("another tool wrote here\n")
        replaced = os.path.join(self.store, failed_key)
        os.unlink(replaced)
        with open(replaced, "w") as f:
            f.write("another tool's new file\n")
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"]), (2, 0), sw)
        self.assertIn("written over in place", sw.err)
        self.assertIn("no lodge stamp", sw.err)
        for rid in (deleted["id"], failed_id):
            status, why = self.sql("SELECT status, last_error FROM cleanup_task WHERE record_id = ?", (rid,))[0]
            self.assertEqual(status, "IGNORED")
            self.assertIn("not deleted", why)
        rec = self.lodge("reconcile", "--apply", "--json", "-v", later="+2h")
        self.assertEqual(rec.rc, 0, rec)
        self.assertEqual(sorted((i["kind"], i["applied"]) for i in rec.json()["items"]),
                         [("unmanaged", False), ("unmanaged", False)], rec)
        self.assertEqual(self.lodge("sweep", "--json", later="+2h").json()["claimed"], 0)
        with open(in_place) as f:
            self.assertEqual(f.read(), "another tool wrote here\n")
        with open(replaced) as f:
            self.assertEqual(f.read(), "another tool's new file\n")
        self.assertEqual([n for n in os.listdir(os.path.join(self.store, ".lodge-tmp")) if n.startswith("removing-")]
                         if os.path.isdir(os.path.join(self.store, ".lodge-tmp")) else [], [])


STAGED = {"policies": {"default": {"max_size": "64MiB", "deadline": "30s", "grace": "5s"}},
          "multipart_threshold": "6MiB", "part_size": "5MiB", "part_concurrency": 1,
          "fail_killed_runs": False}


class FileStoreCase(LodgeTestCase):
    """A file:// store with a multipart configuration, failpoints logged."""

    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.tmp = os.path.join(self.store, ".lodge-tmp")
        self.fplog = os.path.join(self.dir, "fp.log")
        self.gate = os.path.join(self.dir, "gate")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci",
                         "LODGE_CONFIG": self.write("config.json", json.dumps(STAGED))})
        self.init()

    def objects(self):
        """key -> size of every object, lodge's own folders left out."""
        out = {}
        for top, dirs, files in os.walk(self.store):
            if top == self.store:
                dirs[:] = [d for d in dirs if not d.startswith(".lodge-")]
                files = [f for f in files if not f.startswith(".lodge-")]
            for f in files:
                path = os.path.join(top, f)
                out[os.path.relpath(path, self.store)] = os.path.getsize(path)
        return out

    def temps(self):
        return sorted(os.listdir(self.tmp)) if os.path.isdir(self.tmp) else []


class StagedCompletion(FileStoreCase):
    def test_a_part_changed_after_it_was_written_fails_the_upload(self):
        """12 MiB in 5 MiB parts; part 1 gets one byte changed (same size) while the upload
        waits between parts. Completion re-hashes each part against the digest that proved
        it and the whole against the row's: the upload fails, never ACTIVE."""
        data = os.urandom(12 << 20)
        src = self.write("big.bin", data)
        p = self.spawn("upload", "--json", src, env=self.fp(f"upload.between_parts=pause:{self.gate}"))
        wait_until(lambda: "upload.between_parts" in self.fired() or p.poll() is not None,
                   what="the upload to pause between parts")
        self.assertIsNone(p.poll(), "paused, not ended")
        mpu = os.path.join(self.store, ".lodge-mpu")
        (staged,) = os.listdir(mpu)
        part = os.path.join(mpu, staged, "part-00001")
        self.assertEqual(os.path.getsize(part), 5 << 20)
        with open(part, "r+b") as f:  # in place: the same size, one byte else
            f.seek(1234)
            b = f.read(1)
            f.seek(1234)
            f.write(bytes([b[0] ^ 0xFF]))
        open(self.gate, "w").close()
        out, err = p.communicate(timeout=120)
        self.assertNotEqual(p.returncode, 0, (out, err))
        (res,) = [j for j in (json.loads(line) for line in out.splitlines() if line.strip()) if "file" in j]
        self.assertEqual(res["outcome"], "failed", (out, err))
        self.assertEqual(res["error"]["code"], "CONTENT_MISMATCH", (out, err))
        self.assertIn("part 1", res["error"]["message"])
        status, deleted = self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (res["id"],))[0]
        self.assertEqual((status, bool(deleted)), ("UPLOAD_FAILED", True))
        self.assertEqual(len(self.sql("SELECT id FROM cleanup_task WHERE record_id = ?", (res["id"],))), 1)
        self.assertNotIn(res["object_key"], self.objects(), "no object of other bytes was published")
        g = self.lodge("--json", "get", res["id"], "-o", os.path.join(self.dir, "out.bin"))
        self.assertNotEqual(g.rc, 0, g)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out.bin")))
        converge(self)
        check_invariants(self, self.objects())
        again = self.lodge("upload", "--json", src)  # the file itself is sound: a re-run stores it
        self.assertEqual((again.rc, again.json_lines()[0]["outcome"]), (0, "active"), again)
        self.assertEqual(self.lodge("get", again.json_lines()[0]["id"], "-o", os.path.join(self.dir, "ok.bin")).rc, 0)
        with open(os.path.join(self.dir, "ok.bin"), "rb") as f:
            self.assertEqual(f.read(), data)


class KilledWriters(FileStoreCase):
    def open_in_tmp(self, pid):
        """Whether process pid holds a file of the store's temporary folder open (a named
        temporary file, or one with no name: "#123 (deleted)")."""
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:
            return False
        for n in names:
            try:
                if os.readlink(os.path.join(fds, n)).startswith(self.tmp + "/"):
                    return True
            except OSError:
                pass
        return False

    def test_kill_9_mid_part_leaves_no_temporary_file(self):
        """Part 1 is stored, the upload pauses between parts while the second connection
        writes part 2 (slowly: --bwlimit), and the process is killed with SIGKILL there."""
        src = self.write("big.bin", os.urandom(20 << 20))
        p = self.spawn("upload", "--json", "--part-concurrency", "2", "--bwlimit", "2M", src,
                       env=self.fp(f"upload.between_parts=pause:{self.gate}"))
        self.addCleanup(lambda: p.poll() is None and p.kill())
        wait_until(lambda: p.poll() is not None or
                   ("upload.between_parts" in self.fired() and self.open_in_tmp(p.pid)),
                   what="a part being written while the upload waits between parts")
        self.assertIsNone(p.poll(), "still running")
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, -signal.SIGKILL)
        self.assertEqual([n for n in self.temps() if n.endswith(".tmp")], [],
                         "a kill leaves no temporary file of a part")
        converge(self)
        check_invariants(self, self.objects())
        self.assertEqual(self.temps(), [])

    def test_reconcile_reports_and_apply_removes_old_temporary_files_only(self):
        """Temporary files older than the longest deadline + grace (35 s here) are dead:
        reconcile reports them (exit 1), --apply removes them; younger ones, and names lodge
        does not write, stay."""
        kept = self.lodge("upload", "--json", self.write("a.txt", "kept\n"))
        self.assertEqual(kept.rc, 0, kept)
        os.makedirs(self.tmp, exist_ok=True)
        now = time.time()
        now_ms = int(now * 1000)

        def temp(name, age_s):
            path = os.path.join(self.tmp, name)
            with open(path, "wb") as f:
                f.write(b"x" * 100)
            os.utime(path, (now - age_s, now - age_s))
            return name

        def removing(ms, age_s, inode_of=None):
            """A delete's moved-aside object: its name carries the move's time and the inode
            whose stamp the delete read (this file's own, or inode_of's)."""
            name = temp(f"staging-{uuid.uuid4()}", age_s)
            inode = os.stat(os.path.join(self.tmp, inode_of or name)).st_ino
            final = f"removing-{ms}-{inode}-{uuid.uuid4()}"
            os.rename(os.path.join(self.tmp, name), os.path.join(self.tmp, final))
            return final

        old_tmp = temp(".lodge-0123456789abcdef.tmp", 3600)
        young_tmp = temp(".lodge-fedcba9876543210.tmp", 5)
        old_removing = removing(now_ms - 3600_000, 3600)
        # Moved aside a moment ago: its own time is its object's, long past.
        young_removing = removing(now_ms - 1000, 3600)
        other = temp("notes.txt", 3600)
        # Old, but not the inode the delete checked: another writer's file that the move took
        # with it before a kill. Nothing proves it dead, so it stays.
        foreign_removing = removing(now_ms - 3600_000, 3600, inode_of=other)
        # Named before the inode was in the name: nothing proves which file it is either.
        legacy_removing = temp(f"removing-{uuid.uuid4()}", 3600)

        rec = self.lodge("reconcile", "--json")
        self.assertEqual(rec.rc, 1, rec)
        j = rec.json()
        self.assertEqual(j["found"]["stale_temp"], 2, j)
        self.assertFalse(j["clean"], j)
        items = sorted((i["kind"], i["key"], i["applied"]) for i in j["items"])
        self.assertEqual(items, [("stale_temp", ".lodge-tmp/" + old_tmp, False),
                                 ("stale_temp", ".lodge-tmp/" + old_removing, False)], j)
        self.assertEqual(len(self.temps()), 7, "report-only")
        text = self.lodge("reconcile")
        self.assertEqual(text.rc, 1, text)
        self.assertIn("stale_temp", text.out)

        ap = self.lodge("reconcile", "--apply", "--json")
        self.assertEqual(ap.rc, 1, ap)
        self.assertEqual(sorted((i["key"], i["applied"]) for i in ap.json()["items"]),
                         [(".lodge-tmp/" + old_tmp, True), (".lodge-tmp/" + old_removing, True)], ap)
        self.assertEqual(self.temps(), sorted([young_tmp, young_removing, foreign_removing, legacy_removing, other]))
        again = self.lodge("reconcile", "--json")
        self.assertEqual((again.rc, again.json()["found"]["stale_temp"]), (0, 0), again)
        got = self.lodge("get", kept.json_lines()[0]["id"], "-o", os.path.join(self.dir, "a.out"))
        self.assertEqual(got.rc, 0, got)


if __name__ == "__main__":
    main()
