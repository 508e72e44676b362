"""lodge upload against a real moto_server: outcomes, validation codes, quota race,
failpoint crashes, idempotency, multipart, bulk; and the same on a file:// store."""

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import samples  # noqa: E402
from lodgetest import (LODGE, AWS_ENV, LodgeTestCase, S3TestCase, aws, check_invariants, converge, main,  # noqa: E402
                       sqlite_only, wait_until)

CONFIG = {
    "policies": {
        "default": {"max_size": "64MiB", "deadline": "60s", "grace": "1s"},
        "docs": {"max_size": "64KiB", "extensions": ["pdf", "docx", "png"], "allow_empty": False,
                 "media_types": ["application/pdf", "image/png",
                                 "application/vnd.openxmlformats-officedocument.wordprocessingml.document"]},
        "tight": {"max_files": 2, "deadline": "60s", "grace": "1s"},
    },
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"backoff_base": "100ms", "backoff_max": "1s"},
}


class UploadMixin:
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))

    def up(self, *args, **kw):
        return self.lodge("upload", "--json", *args, **kw)

    def results(self, r):
        lines = r.json_lines()
        self.assertIn("summary", lines[-1], r)
        return lines[:-1], lines[-1]["summary"]

    def one(self, r):
        files, _ = self.results(r)
        self.assertEqual(len(files), 1, r)
        return files[0]

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted, object_key, failure_reason FROM file_upload WHERE id = ?",
                        (rid,))[0]

    def task(self, rid):
        return self.sql("SELECT status, next_retry_at, retry_count FROM cleanup_task WHERE record_id = ?", (rid,))[0]

    def failpoints(self, spec):
        log = os.path.join(self.dir, "fp.log")
        return {"LODGE_FAILPOINTS": spec, "LODGE_FAILPOINTS_LOG": log}

    def fired(self):
        path = os.path.join(self.dir, "fp.log")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [l.split()[1] for l in f if l.strip()]


class UploadS3(UploadMixin, S3TestCase):
    def test_happy_path_object_matches_ledger(self):
        f = self.write("docs/report.pdf", samples.pdf("happy"))
        r = self.up(f)
        self.assertEqual(r.rc, 0, r)
        res = self.one(r)
        self.assertEqual(res["outcome"], "active")
        self.assertEqual(res["media_type"], "application/pdf")
        self.assertIsNone(res["error"])
        status, deleted, key, _ = self.row(res["id"])
        self.assertEqual((status, deleted), ("ACTIVE", 0))
        self.assertEqual(self.task(res["id"])[0], "IGNORED")
        self.assertRegex(key, r"^lodge/ci/[0-9a-f-]{36}/report\.pdf$")
        out = os.path.join(self.dir, "back.pdf")
        head = aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", key, out)
        data = open(out, "rb").read()
        self.assertEqual(hashlib.sha256(data).hexdigest(), res["sha256"])
        self.assertEqual(self.sql("SELECT sha256 FROM file_upload WHERE id = ?", (res["id"],))[0][0], res["sha256"])
        self.assertEqual(head["ContentType"], "application/pdf")
        self.assertEqual(head["Metadata"]["lodgerecord"], str(res["id"]))
        self.assertEqual(head["Metadata"]["lodgesha256"], res["sha256"])
        ledger_uuid = self.lodge("init", "--json").json()["ledger_uuid"]
        self.assertEqual(head["Metadata"]["lodgeledger"], ledger_uuid)
        check_invariants(self, self.objects())

    def test_human_output_and_list(self):
        f = self.write("a.txt", "plain text\n")
        r = self.lodge("upload", f)
        self.assertEqual(r.rc, 0, r)
        self.assertRegex(r.out, r"^active\s+#1 lodge/ci/\S+\.txt .*a\.txt$")
        self.assertIn("1 file: 1 active", r.err)
        lst = self.lodge("list", "--json").json()
        self.assertEqual(lst["name"], "a.txt")
        self.assertEqual(lst["status"], "ACTIVE")
        q = self.lodge("upload", "-q", f)
        self.assertEqual((q.rc, q.out, q.err), (0, "", ""))

    def test_duplicate_is_reported_with_the_existing_id_and_is_not_a_failure(self):
        a = self.write("a.pdf", samples.pdf("same"))
        b = self.write("copy/b.pdf", samples.pdf("same"))
        first = self.one(self.up(a))
        r = self.up(b)
        self.assertEqual(r.rc, 0, r)
        second = self.one(r)
        # Stored once; the second path gets a row of its own that shares the object.
        self.assertEqual(second["outcome"], "duplicate")
        self.assertEqual(second["shares"], first["id"])
        self.assertNotEqual(second["id"], first["id"])
        self.assertEqual(second["object_key"], first["object_key"])
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 2)
        self.assertEqual(len(self.objects()), 1)
        # The same path again is a plain duplicate of its own row: nothing new.
        again = self.one(self.up(b))
        self.assertEqual((again["outcome"], again["id"]), ("duplicate", second["id"]))
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 2)
        check_invariants(self)

    def test_every_validation_code(self):
        files = {
            "good.pdf": samples.pdf(), "good.docx": samples.docx(), "good.png": samples.png(),
            "script.pdf": samples.shell_script(), "empty.pdf": b"", "big.pdf": samples.pdf() + b"%" * 70000,
            "notes.txt": b"text is not allowed by docs\n", "image.pdf": samples.png(1),
            "bad\u202egpj.pdf": samples.pdf("bidi"),
        }
        paths = {name: self.write(os.path.join("in", name), data) for name, data in files.items()}
        r = self.up("--policy", "docs", *paths.values())
        self.assertEqual(r.rc, 1, r)
        got = {os.path.basename(x["file"]): x for x in self.results(r)[0]}
        expect = {"good.pdf": "active", "good.docx": "active", "good.png": "active"}
        codes = {"script.pdf": "TYPE_MISMATCH", "empty.pdf": "EMPTY_FILE", "big.pdf": "TOO_LARGE",
                 "notes.txt": "EXTENSION_NOT_ALLOWED", "image.pdf": "TYPE_MISMATCH", "bad\u202egpj.pdf": "BAD_NAME"}
        for name, outcome in expect.items():
            self.assertEqual(got[name]["outcome"], outcome, got[name])
        for name, code in codes.items():
            self.assertEqual(got[name]["outcome"], "rejected", got[name])
            self.assertEqual(got[name]["error"]["code"], code, got[name])
        self.assertEqual(got["good.docx"]["media_type"],
                         "application/vnd.openxmlformats-officedocument.wordprocessingml.document")
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 3, "rejected files leave no row")
        self.assertEqual(len(self.objects()), 3, "rejected files leave no object")
        # TYPE_NOT_ALLOWED: a policy that allows pdf only by type.
        cfg = dict(CONFIG)
        cfg["policies"] = dict(CONFIG["policies"], pdfonly={"media_types": ["application/pdf"]})
        self.env["LODGE_CONFIG"] = self.write("c2.json", json.dumps(cfg))
        x = self.one(self.up("--policy", "pdfonly", self.write("pic.png", samples.png(7))))
        self.assertEqual(x["error"]["code"], "TYPE_NOT_ALLOWED")
        # NOT_REGULAR_FILE and UNREADABLE are per-file results too.
        os.mkfifo(os.path.join(self.dir, "in2.fifo"))
        os.symlink(paths["good.pdf"], os.path.join(self.dir, "link.pdf"))
        r = self.up(os.path.join(self.dir, "in2.fifo"), os.path.join(self.dir, "link.pdf"),
                    os.path.join(self.dir, "missing.pdf"))
        got = {os.path.basename(x["file"]): x["error"]["code"] for x in self.results(r)[0]}
        self.assertEqual(got, {"in2.fifo": "NOT_REGULAR_FILE", "link.pdf": "NOT_REGULAR_FILE",
                               "missing.pdf": "UNREADABLE"})

    def test_a_name_that_is_not_utf8_is_rejected_with_valid_json(self):
        raw = os.path.join(os.fsencode(self.dir), b"caf\xe9-latin1.txt")
        with open(raw, "wb") as f:
            f.write(b"latin-1 name\n")
        r = self.up(os.fsdecode(raw))
        self.assertEqual(r.rc, 1, r)
        res = self.one(r)  # parses: the line is valid JSON
        self.assertEqual(res["error"]["code"], "BAD_NAME")
        self.assertIn("\ufffd", res["file"])
        human = self.lodge("upload", os.fsdecode(raw))
        self.assertIn("caf\\xE9-latin1.txt", human.out)

    def test_quota_race_eight_processes_two_slots(self):
        self.lodge("init")
        for i in range(3):  # 3 used of... tight allows 2: make room for exactly 2 by using none
            pass
        gate = os.path.join(self.dir, "go")
        env = dict(self.env)
        env.update({"LODGE_FAILPOINTS": f"upload.before_reserve=pause:{gate}", "LODGE_DB": self.db})
        procs = []
        for i in range(8):
            f = self.write(f"race/{i}.txt", f"distinct content {i}\n")
            procs.append(subprocess.Popen([LODGE, "upload", "--json", "--policy", "tight", f], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        peak = [0]
        stop = threading.Event()

        def watch():
            # Through the harness's query layer: a fresh read of the committed rows each time,
            # on either backend (a read may meet a lock or the schema being made: skip it).
            while not stop.is_set():
                try:
                    n = self.sql("SELECT count(*) FROM file_upload WHERE owner_id = ? AND is_deleted = 0", ("ci",))[0][0]
                    peak[0] = max(peak[0], n)
                except Exception:
                    pass
                time.sleep(0.002)
        t = threading.Thread(target=watch)
        t.start()
        open(gate, "w").close()
        outs = [p.communicate(timeout=120) for p in procs]
        stop.set()
        t.join()
        outcomes = []
        for out, err in outs:
            line = json.loads(out.splitlines()[0])
            outcomes.append(line["error"]["code"] if line["outcome"] == "rejected" else line["outcome"])
        self.assertEqual(sorted(outcomes), ["QUOTA_EXCEEDED"] * 6 + ["active"] * 2, outs)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE upload_status='ACTIVE'")[0][0], 2)
        self.assertLessEqual(peak[0], 2)
        check_invariants(self, self.objects(), max_files=2)

    def test_store_put_error_fails_and_compensates_at_once(self):
        f = self.write("x.txt", "will fail\n")
        r = self.up(f, env=self.failpoints("store.put=error"))
        self.assertEqual(r.rc, 1, r)
        res = self.one(r)
        self.assertEqual(res["outcome"], "failed")
        self.assertEqual(res["error"]["code"], "STORAGE_UNAVAILABLE")
        status, deleted, _, reason = self.row(res["id"])
        self.assertEqual((status, deleted), ("UPLOAD_FAILED", 1))
        self.assertIn("STORAGE_UNAVAILABLE", reason)
        self.assertEqual(self.task(res["id"])[0], "SUCCESS")
        self.assertIn("store.put", self.fired())
        self.assertEqual(self.objects(), {})
        # The quota slot is free again: the same content uploads now.
        self.assertEqual(self.one(self.up(f))["outcome"], "active")

    def test_crash_after_reserve_leaves_a_pending_task_and_no_object(self):
        f = self.write("x.txt", "crash after reserve\n")
        r = self.up(f, env=self.failpoints("upload.after_reserve=crash"))
        self.assertEqual(r.rc, -9, r)
        self.assertEqual(self.fired(), ["upload.after_reserve"])
        (rid, status, deleted), = self.sql("SELECT id, upload_status, is_deleted FROM file_upload")
        self.assertEqual((status, deleted), ("UPLOADING", 0))
        self.assertEqual(self.task(rid)[0], "PENDING")
        self.assertEqual(self.objects(), {})

    def test_crash_after_put_leaves_a_pending_task_and_the_object(self):
        f = self.write("x.txt", "crash after put\n")
        r = self.up(f, env=self.failpoints("upload.after_put=crash"))
        self.assertEqual(r.rc, -9, r)
        (rid, status, key), = self.sql("SELECT id, upload_status, object_key FROM file_upload")
        self.assertEqual(status, "UPLOADING")
        self.assertEqual(self.task(rid)[0], "PENDING")
        self.assertEqual(list(self.objects()), [key])

    def test_confirm_error_is_never_success(self):
        f = self.write("x.txt", "confirm fails\n")
        r = self.up(f, env=self.failpoints("upload.confirm=error"))
        self.assertEqual(r.rc, 1, r)
        res = self.one(r)
        self.assertEqual(res["outcome"], "failed")
        self.assertNotEqual(self.row(res["id"])[0], "ACTIVE")
        self.assertEqual(self.task(res["id"])[0], "PENDING")

    def test_mark_failed_error_leaves_the_row_for_repair(self):
        f = self.write("x.txt", "mark fails\n")
        r = self.up(f, env=self.failpoints("store.put=error;upload.mark_failed=error"))
        self.assertEqual(r.rc, 1, r)
        res = self.one(r)
        self.assertEqual(self.row(res["id"])[:2], ("UPLOADING", 0))
        self.assertEqual(self.task(res["id"])[0], "PENDING")
        self.assertIn("repair will", r.err)

    def test_file_appended_during_upload_fails_and_is_compensated(self):
        f = self.write("grow.txt", "original content\n")
        gate = os.path.join(self.dir, "go")
        env = self.failpoints(f"upload.after_reserve=pause:{gate}")
        e = dict(self.env, **env)
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", "--json", f], env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        wait_until(lambda: "upload.after_reserve" in self.fired(), what="the upload to reserve")
        with open(f, "a") as fh:
            fh.write("appended while uploading\n")
        open(gate, "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 1, err)
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["error"]["code"], "FILE_CHANGED")
        self.assertEqual(self.row(res["id"])[:2], ("UPLOAD_FAILED", 1))
        self.assertEqual(self.task(res["id"])[0], "SUCCESS")
        self.assertEqual(self.objects(), {})

    def test_idempotency_replay_reuse_and_in_progress(self):
        f = self.write("a.txt", "idempotent\n")
        first = self.one(self.up("--idempotency-key", "job-42", f))
        self.assertEqual(first["outcome"], "active")
        again = self.up("--idempotency-key", "job-42", f)
        self.assertEqual(again.rc, 0, again)
        self.assertEqual(self.one(again)["outcome"], "replayed")
        self.assertEqual(self.one(again)["id"], first["id"])
        other = self.write("b.txt", "different\n")
        r = self.up("--idempotency-key", "job-42", other)
        self.assertEqual(r.rc, 1)
        self.assertEqual(self.one(r)["error"]["code"], "IDEMPOTENCY_KEY_REUSED")
        # IN_PROGRESS: a first upload held after reserving, a second with the same key.
        gate = os.path.join(self.dir, "go")
        g = self.write("c.txt", "slow one\n")
        e = dict(self.env, **self.failpoints(f"upload.after_reserve=pause:{gate}"))
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", "--json", "--idempotency-key", "job-43", g], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: "upload.after_reserve" in self.fired(), what="the first upload to reserve")
        r = self.up("--idempotency-key", "job-43", g)
        self.assertEqual(self.one(r)["error"]["code"], "IN_PROGRESS")
        open(gate, "w").close()
        out, _ = p.communicate(timeout=60)
        self.assertEqual(json.loads(out.splitlines()[0])["outcome"], "active")
        self.assertEqual(self.lodge("upload", "--idempotency-key", "k", f, g).rc, 2)

    def test_content_an_open_reservation_holds_is_in_progress_at_once(self):
        # An open `lodge reserve` of the same content: the upload answers in_progress at once,
        # naming the reservation, instead of waiting out its deadline (URL expiry + policy
        # deadline).
        data = b"held by a direct reservation\n" * 64
        f = self.write("doc.txt", data)
        res = self.lodge("reserve", "--json", "doc.txt", "--size", str(len(data)),
                         "--sha256", hashlib.sha256(data).hexdigest(), "--expires", "1h")
        self.assertEqual(res.rc, 0, res)
        rid = res.json()["id"]
        started = time.monotonic()
        p = subprocess.run(["timeout", "60", LODGE, "--db", self.db, "upload", "--json", f], env=self.env,
                           capture_output=True, text=True, timeout=90)
        elapsed = time.monotonic() - started
        self.assertEqual(p.returncode, 1, p)
        self.assertLess(elapsed, 15, "reported at once, far under the 30s bound")
        lines = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
        (r,), summary = lines[:-1], lines[-1]["summary"]
        self.assertEqual(r["outcome"], "in_progress", r)
        self.assertEqual(r["error"]["code"], "IN_PROGRESS")
        self.assertIn(f"held by direct reservation #{rid} until ", r["error"]["message"])
        self.assertEqual((summary["in_progress"], summary["failed"]), (1, 0))
        self.assertEqual(self.row(rid)[0], "UPLOADING", "the reservation is left as it was")
        # Without --json: its own outcome word and count in the summary.
        t = self.lodge("upload", f)
        self.assertEqual(t.rc, 1, t)
        self.assertTrue(t.out.startswith("in_progress "), t)
        self.assertIn(", 1 in progress,", t.err)

    def test_an_upload_waits_for_another_process_sending_the_same_content(self):
        # A first process holds the content after its reserve; a second one asking for the
        # same content waits (within --in-progress-wait) and ends a duplicate once the first
        # confirms; with a short bound and the first still held, it ends in_progress.
        data = samples.blob(7 * 1024 * 1024, seed=11)
        f = self.write("big/one.bin", data)
        g = self.write("big/two.bin", data)
        gate = os.path.join(self.dir, "go")
        first = self.spawn("upload", "--json", f, env=self.failpoints(f"upload.after_reserve=pause:{gate}"))
        wait_until(lambda: "upload.after_reserve" in self.fired(), what="the first upload to reserve")
        short = self.up("--in-progress-wait", "1s", g)
        self.assertEqual(short.rc, 1, short)
        held = self.one(short)
        self.assertEqual(held["outcome"], "in_progress", held)
        self.assertIn(f"being uploaded by pid {first.pid} on ", held["error"]["message"])
        # The second's own failpoint log: its reserves (the worker's, then the retry's).
        log2 = os.path.join(self.dir, "fp2.log")
        second = self.spawn("upload", "--json", "--in-progress-wait", "60s", g,
                            env={"LODGE_FAILPOINTS": "upload.before_reserve=sleep:1", "LODGE_FAILPOINTS_LOG": log2})

        def reserves():
            if not os.path.exists(log2):
                return 0
            with open(log2) as fp:
                return sum(1 for line in fp if "upload.before_reserve" in line)
        wait_until(lambda: reserves() >= 2, what="the second upload to wait for the first")
        open(gate, "w").close()
        out1, err1 = first.communicate(timeout=60)
        self.assertEqual(first.returncode, 0, err1)
        out2, err2 = second.communicate(timeout=60)
        self.assertEqual(second.returncode, 0, err2)
        r2 = json.loads(out2.splitlines()[0])
        self.assertEqual(r2["outcome"], "duplicate", out2)
        self.assertEqual(r2.get("shares") or r2["id"], json.loads(out1.splitlines()[0])["id"])
        check_invariants(self, self.objects())

    def test_multipart_lands_whole_and_a_failed_one_is_kept_until_its_grace(self):
        data = samples.blob(11 * 1024 * 1024 + 12345, seed=3)
        f = self.write("big.bin", data)
        res = self.one(self.up(f))
        self.assertEqual(res["outcome"], "active", res)
        key = self.row(res["id"])[2]
        self.assertEqual(hashlib.sha256(self.object_bytes(key)).hexdigest(), hashlib.sha256(data).hexdigest())
        self.assertIsNotNone(self.sql("SELECT multipart_upload_id FROM file_upload WHERE id = ?", (res["id"],))[0][0])
        g = self.write("big2.bin", samples.blob(11 * 1024 * 1024, seed=4))
        r = self.up(g, env=self.failpoints("upload.between_parts=error"))
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(self.one(r)["outcome"], "failed")
        # Its parts stay for a resume until the grace has passed; then sweep aborts them.
        self.assertEqual(len(self.uploads_in_progress()), 1)
        self.assertEqual(len(self.objects()), 1)
        check_invariants(self, self.objects())
        converge(self)
        self.assertEqual(self.uploads_in_progress(), [])

    def test_bulk_thousand_files_from_stdin(self):
        names = []
        for i in range(1000):
            names.append(self.write(f"bulk/{i:04d}.txt", f"file number {i}\n"))
        r = self.lodge("upload", "--json", "--jobs", "8", "--files-from", "-", stdin="\n".join(names) + "\n",
                       timeout=600)
        self.assertEqual(r.rc, 0, r.err[-2000:])
        files, summary = self.results(r)
        self.assertEqual(len(files), 1000)
        self.assertEqual(sorted(x["file"] for x in files), sorted(names))
        self.assertEqual(sum(1 for x in files if x["outcome"] == "active"), 1000)
        self.assertEqual(summary["files"], 1000)
        self.assertEqual(summary["active"], 1000)
        self.assertEqual(len(self.objects()), 1000)
        check_invariants(self, self.objects())

    def test_interrupt_finishes_in_flight_files_and_exits_130(self):
        names = [self.write(f"int/{i:02d}.txt", f"interrupt me {i}\n") for i in range(30)]
        e = dict(self.env, **self.failpoints("store.put=sleep:300"))
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", "--json", "--jobs", "2", *names], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: self.fired().count("store.put") >= 2, what="uploads in flight")
        p.send_signal(2)  # SIGINT, as Ctrl-C sends
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("lodge: error: interrupted by a signal", err)
        self.assertIn("(INTERRUPTED)", err)
        lines = [json.loads(l) for l in out.splitlines()]
        self.assertTrue(lines[-1]["summary"]["interrupted"])
        done = lines[:-1]
        self.assertGreaterEqual(len(done), 2)
        self.assertLess(len(done), 30, "no new file starts after the interrupt")
        self.assertTrue(all(x["outcome"] == "active" for x in done), done)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE upload_status = 'UPLOADING'"), [(0,)])
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(len(done),)])

    @sqlite_only("holds SQLite's write lock (BEGIN IMMEDIATE on the ledger file)")
    def test_ledger_locked_for_the_whole_run_exits_3(self):
        self.lodge("init")
        cfg = dict(CONFIG, busy_timeout="200ms")
        self.env["LODGE_CONFIG"] = self.write("locked.json", json.dumps(cfg))
        import sqlite3
        con = sqlite3.connect(self.db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        try:
            r = self.up(self.write("x.txt", "locked out\n"))
        finally:
            con.execute("ROLLBACK")
            con.close()
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(self.one(r)["error"]["code"], "LEDGER_LOCKED")
        self.assertEqual(self.objects(), {})

    def test_storage_unreachable_exits_4(self):
        f = self.write("x.txt", "nowhere\n")
        self.rebind({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})  # the ledger's store, unreachable
        r = self.up(f, env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
        self.assertEqual(r.rc, 4, r)
        self.assertEqual(self.one(r)["error"]["code"], "STORAGE_UNAVAILABLE")


class UploadFileStore(UploadMixin, LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})
        self.init()

    def objects(self):
        out = {}
        for base, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not (base == self.root and (d.startswith(".lodge-") or d == ".lodge"))]
            for n in files:
                p = os.path.join(base, n)
                out[os.path.relpath(p, self.root)] = os.path.getsize(p)
        return out

    def test_a_dry_run_names_no_row_for_a_file_that_would_share_an_object(self):
        # Another path with content already stored would get its own row sharing the object;
        # a dry run makes no row, so it names none (it printed "duplicate #0").
        self.write("a/x.bin", b"same bytes\n")
        r = self.lodge("--json", "upload", os.path.join(self.dir, "a"))
        self.assertEqual(r.rc, 0, r)
        stored = r.json_lines()[0]["id"]
        self.write("b/y.bin", b"same bytes\n")
        r = self.lodge("upload", "-n", os.path.join(self.dir, "b"))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("#0", r.out)
        self.assertRegex(r.out, rf"(?m)^duplicate +\S*/y\.bin \(same content as #{stored}: a real run shares its object\)$")
        j = self.lodge("--json", "upload", "-n", os.path.join(self.dir, "b")).json_lines()[0]
        self.assertEqual((j["outcome"], j["id"]), ("duplicate", None), j)
        self.assertEqual(len(self.lodge("--json", "list").json_lines()), 1)

    def test_an_upload_that_found_no_file_says_so_and_if_no_files_chooses_the_exit(self):
        # An empty dist/, and one whose every file the filter leaves out: a CI step that uploads
        # nothing is not a silent green one.
        empty = os.path.join(self.dir, "dist")
        os.makedirs(empty)
        self.write("logs/a.tmp", b"tmp\n")
        logs = os.path.join(self.dir, "logs")
        for args, named in (([empty], [empty]), (["--exclude", "*.tmp", logs], [logs, "1 entry excluded"])):
            with self.subTest(args=args):
                for mode, rc in ((None, 0), ("warn", 0), ("error", 1), ("ignore", 0)):
                    flag = ["--if-no-files", mode] if mode else []
                    r = self.lodge("upload", *flag, *args)
                    self.assertEqual(r.rc, rc, r)
                    if mode == "ignore":
                        self.assertNotIn("no file", r.err)
                        continue
                    self.assertIn("no file found in", r.err)
                    self.assertIn("lodge: error:" if mode == "error" else "lodge: warning:", r.err)
                    self.assertIn("NOT_FOUND", r.err)
                    for n in named:
                        self.assertIn(n, r.err)
                    j = self.lodge("--json", "upload", *flag, *args)
                    self.assertEqual(j.rc, rc, j)
                    lines = j.json_lines()
                    said = lines[-1]["error"] if mode == "error" else lines[-1]["summary"]["warning"]
                    self.assertEqual(said["code"], "NOT_FOUND")
                    self.assertIn("no file found in", said["message"])
        # --files-from naming nothing, and a dry run, say it too.
        none = self.write("none.txt", b"")
        r = self.lodge("upload", "--if-no-files", "error", "--files-from", none)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("--files-from", r.err)
        r = self.lodge("upload", "--dry-run", empty)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("no file found in", r.err)
        # A run that found a file says nothing of it; a bad mode is a usage error.
        self.write("one/a.txt", b"a\n")
        r = self.lodge("upload", "--if-no-files", "error", os.path.join(self.dir, "one"))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("no file found", r.err)
        r = self.lodge("upload", "--if-no-files", "fail", empty)
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(self.lodge("--json", "list").json_lines()[0]["path"], "a.txt")
        help_text = self.lodge("upload", "--help").out
        self.assertIn("--if-no-files", help_text)
        for shell in ("bash", "zsh", "fish"):
            script = self.lodge("completion", shell, db=False)
            self.assertIn("if-no-files", script.out, shell)
            self.assertIn("ignore", script.out, shell)

    def test_more_jobs_than_files_connects_only_the_workers_used(self):
        # A worker opens its ledger and store connections once it has a file: --jobs 256 for
        # 8 files must not open 256 of each (on PostgreSQL, past max_connections).
        names = [self.write(f"few/{i}.txt", f"file {i}\n") for i in range(8)]
        r = self.lodge("-vv", "upload", "--json", "--jobs", "256", *names, timeout=120)
        self.assertEqual(r.rc, 0, r.err[-2000:])
        files, summary = self.results(r)
        self.assertEqual(summary["active"], 8, r)
        connected = [l for l in r.err.splitlines() if "connected to the ledger and the store" in l]
        self.assertGreaterEqual(len(connected), 1, r.err[-2000:])
        self.assertLessEqual(len(connected), 8, r.err[-2000:])

    @sqlite_only("puts the ledger file on a tiny tmpfs and checks it with sqlite3")
    def test_disk_full_leaves_the_ledger_intact(self):
        # The ledger on a 256 KiB tmpfs in a private mount namespace: it fills after a
        # few uploads. Every later file must fail cleanly, and the ledger stay whole.
        if os.getuid() != 0:
            self.skipTest("needs root for a private tmpfs mount")
        names = [self.write(f"full/{i:03d}.txt", f"{i} " + "x" * 300 + "\n") for i in range(200)]
        mnt = os.path.join(self.dir, "mnt")
        os.makedirs(mnt)
        db = os.path.join(mnt, "l.db")
        script = (f"mount -t tmpfs -o size=256k tmpfs {mnt} && {LODGE} --db {db} init >/dev/null && "
                  f"{LODGE} --db {db} --json upload -j 4 {os.path.dirname(names[0])} > {self.dir}/out.jsonl; "
                  f"echo rc=$?; sqlite3 {db} 'PRAGMA integrity_check' "
                  f"'SELECT count(*) FROM file_upload f LEFT JOIN cleanup_task t ON t.record_id = f.id WHERE t.id IS NULL'"
                  f" \"SELECT count(*) FROM file_upload WHERE upload_status = 'ACTIVE'\"; "
                  f"cp {db}* {self.dir}/")
        p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=self.env)
        lines = p.stdout.split()
        self.assertEqual(lines[1], "ok", "integrity_check")
        self.assertEqual(lines[2], "0", "a row without its task")
        active = int(lines[3])
        # Some files may fit before the disk fills; if none did, the whole run failed
        # on the ledger (exit 3), otherwise some files failed (exit 1).
        self.assertEqual(lines[0], "rc=1" if active else "rc=3", p)
        results = [json.loads(l) for l in open(os.path.join(self.dir, "out.jsonl"))]
        self.assertEqual(results[-1]["summary"]["files"], 200)
        self.assertEqual(results[-1]["summary"]["active"], active)
        codes = {r["error"]["code"] for r in results[:-1] if r["outcome"] == "failed"}
        self.assertEqual(codes, {"LEDGER_UNUSABLE"})
        self.assertTrue(any("full" in r["error"]["message"] for r in results[:-1] if r["outcome"] == "failed"))
        # Every object has its row (I2); a file whose confirmation hit the full disk stays
        # UPLOADING with its task pending, for repair and sweep.
        self.db = os.path.join(self.dir, "l.db")
        rows = dict(self.sql("SELECT object_key, upload_status FROM file_upload"))
        for key in self.objects():
            self.assertIn(key, rows, "I2: an object without its row")
            self.assertIn(rows[key], ("ACTIVE", "UPLOADING"))
        self.assertEqual(sum(1 for st in rows.values() if st == "ACTIVE"), active)

    @sqlite_only("the ledger file and its -wal/-shm in the uploaded tree")
    def test_uploading_the_ledgers_own_directory_skips_the_ledger(self):
        self.write("a.txt", "next to the ledger\n")
        self.lodge("init")
        r = self.up(self.dir)
        files = {os.path.basename(x["file"]) for x in self.results(r)[0]}
        self.assertIn("a.txt", files)
        self.assertFalse({"ledger.db", "ledger.db-wal", "ledger.db-shm"} & files, files)

    @sqlite_only("the modes of the ledger file and its -wal/-shm")
    def test_ledger_and_its_wal_are_0600_under_umask_000(self):
        gate = os.path.join(self.dir, "go")
        e = dict(self.env, **self.failpoints(f"upload.after_reserve=pause:{gate}"))
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", self.write("a.txt", "modes\n")], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0))
        wait_until(lambda: "upload.after_reserve" in self.fired(), what="the upload to hold the ledger open")
        try:
            for suffix in ("", "-wal", "-shm"):
                self.assertTrue(os.path.exists(self.db + suffix), suffix)
                self.assertEqual(os.stat(self.db + suffix).st_mode & 0o777, 0o600, suffix)
        finally:
            open(gate, "w").close()
            p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0)

    def test_happy_path_duplicate_and_crash_give_the_same_ledger_states(self):
        f = self.write("a.pdf", samples.pdf("file store"))
        res = self.one(self.up(f))
        self.assertEqual(res["outcome"], "active")
        self.assertEqual(self.row(res["id"])[:2], ("ACTIVE", 0))
        self.assertEqual(self.task(res["id"])[0], "IGNORED")
        key = self.row(res["id"])[2]
        self.assertEqual(open(os.path.join(self.root, key), "rb").read(), samples.pdf("file store"))
        self.assertEqual(self.one(self.up(self.write("b.pdf", samples.pdf("file store"))))["outcome"], "duplicate")
        g = self.write("c.txt", "crash\n")
        r = self.up(g, env=self.failpoints("upload.after_put=crash"))
        self.assertEqual(r.rc, -9)
        rid, status, key2 = self.sql("SELECT id, upload_status, object_key FROM file_upload ORDER BY id DESC LIMIT 1")[0]
        self.assertEqual(status, "UPLOADING")
        self.assertEqual(self.task(rid)[0], "PENDING")
        self.assertIn(key2, self.objects())
        h = self.up(self.write("d.txt", "fails\n"), env=self.failpoints("store.put=error"))
        self.assertEqual(self.one(h)["outcome"], "failed")
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task WHERE status = 'SUCCESS'")[0][0], 1)
        self.assertEqual(set(self.objects()), {key, key2})


if __name__ == "__main__":
    main()
