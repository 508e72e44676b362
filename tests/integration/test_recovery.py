"""The verification table: each scenario of recovery (sweep, repair, reconcile, delete),
run against moto_server with failpoints, real SIGKILL, real processes and faketime for
"later". Every scenario ends with the invariant checker (I1-I7). It runs on either ledger
backend (LODGE_TEST_LEDGER=sqlite|postgres; CTest: it_recovery, it_recovery_pg); the few
scenarios about the SQLite file itself are marked @sqlite_only. The same rows run on either
object store (LODGE_IT_STORE=s3|az: moto or Azurite; CTest: it_recovery_az); the rows about
S3 itself (bucket versioning) are marked @s3_only."""

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import samples  # noqa: E402
from lodgetest import (FaultProxy, StoreTestCase, aws, check_invariants, converge, main, s3_only,  # noqa: E402
                       sqlite_only, wait_until)

CONFIG = {
    # These scenarios test the deadline rule, which every row of another host, boot or
    # container keeps: the crashed run's rows are not failed early here (that path is
    # test_killed_runs.py's).
    "fail_killed_runs": False,
    "policies": {
        "default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"},
        "five": {"max_files": 5, "deadline": "10s", "grace": "5s"},
    },
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
    "status": {"sweep_max_age": "1d"},
}

AFTER_DEADLINE = "+20s"   # past deadline (10s) + grace (5s), with room for a slow machine


class Recovery(StoreTestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fplog = os.path.join(self.dir, "fp.log")

    def upload(self, name, data, *args, env=None, later=None):
        path = self.write(name, data)
        r = self.lodge("upload", "--json", *args, path, env=env, later=later)
        lines = r.json_lines() if r.out.strip() else []
        return r, (lines[0] if lines and "summary" not in lines[0] else None)

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted, object_key FROM file_upload WHERE id = ?", (rid,))[0]

    def task(self, rid):
        return self.sql("SELECT id, status, next_retry_at, retry_count, lease_version, lease_owner FROM cleanup_task"
                        " WHERE record_id = ?", (rid,))[0]

    def last_row(self):
        return self.sql("SELECT id, upload_status, is_deleted, object_key FROM file_upload ORDER BY id DESC LIMIT 1")[0]

    def check(self, max_files=None):
        check_invariants(self, self.objects(), max_files=max_files)

    # --- the table ---

    def test_normal_upload(self):
        r, res = self.upload("a.txt", "normal\n")
        self.assertEqual(res["outcome"], "active")
        self.assertEqual(self.row(res["id"])[:2], ("ACTIVE", 0))
        self.assertEqual(self.task(res["id"])[1], "IGNORED")
        self.check()
        converge(self)
        self.assertIn(self.row(res["id"])[2], self.objects())

    def test_spoofed_type(self):
        r, res = self.upload("invoice.pdf", samples.shell_script())
        self.assertEqual(r.rc, 1)
        self.assertEqual(res["error"]["code"], "TYPE_MISMATCH")
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])
        self.assertEqual(self.objects(), {})

    def test_duplicate(self):
        self.upload("a.txt", "same\n")
        r, res = self.upload("b.txt", "same\n")
        self.assertEqual((r.rc, res["outcome"]), (0, "duplicate"))
        # Stored once: b.txt's row shares a.txt's object.
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE is_deleted = 0"), [(2,)])
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE content_of IS NOT NULL"), [(1,)])
        self.check()

    def test_quota_race(self):
        for i in range(4):
            self.assertEqual(self.upload(f"u{i}.txt", f"used {i}\n", "--policy", "five")[1]["outcome"], "active")
        gate = os.path.join(self.dir, "gate")
        procs = [self.spawn("upload", "--json", "--policy", "five", self.write(f"r{i}.txt", f"racer {i}\n"),
                            env=self.fp(f"upload.before_reserve=pause:{gate}")) for i in range(2)]
        wait_until(lambda: self.fired().count("upload.before_reserve") == 2, what="both racers at the gate")
        open(gate, "w").close()
        outcomes = sorted(json.loads(p.communicate(timeout=60)[0].splitlines()[0])["outcome"] for p in procs)
        self.assertEqual(outcomes, ["active", "rejected"])
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE is_deleted = 0"), [(5,)])
        self.check(max_files=5)

    def test_storage_put_fails(self):
        r, res = self.upload("a.txt", "put fails\n", env=self.fp("store.put=error"))
        self.assertEqual((r.rc, res["outcome"]), (1, "failed"))
        self.assertEqual(self.row(res["id"])[:2], ("UPLOAD_FAILED", 1))
        # The task was kept until the delete was done: it ran at once and succeeded.
        self.assertEqual(self.task(res["id"])[1], "SUCCESS")
        self.check()
        converge(self)

    def test_mark_failed_also_fails(self):
        r, res = self.upload("a.txt", "both fail\n", env=self.fp("store.put=error;upload.mark_failed=error"))
        self.assertEqual(res["outcome"], "failed")
        self.assertEqual(self.row(res["id"])[:2], ("UPLOADING", 0))
        self.assertEqual(self.task(res["id"])[1], "PENDING")
        rep = self.lodge("repair", "--json", later=AFTER_DEADLINE)
        self.assertEqual(rep.json()["repaired"], 1, rep)
        self.assertEqual(self.row(res["id"])[:2], ("UPLOAD_FAILED", 1))
        self.assertEqual(self.task(res["id"])[1], "PENDING")
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.json()["deleted"], 1, sw)
        # Failed by deadline (repair), not definitely: one more pass follows later.
        self.assertEqual((self.task(res["id"])[1], self.verify_pass(res["id"])), ("PENDING", 2))
        self.assertEqual(self.lodge("sweep", "--json", later="+1h").json()["verified"], 1)
        self.assertEqual(self.task(res["id"])[1], "SUCCESS")
        self.check()
        converge(self, later="+2h")

    def test_confirm_fails(self):
        r, res = self.upload("a.txt", "confirm fails\n", env=self.fp("upload.confirm=error"))
        self.assertEqual(res["outcome"], "failed")
        key = self.row(res["id"])[2]
        self.assertIn(key, self.objects())
        # Before the deadline nothing may touch it.
        self.assertEqual(self.lodge("sweep", "--json").json()["claimed"], 0)
        self.assertIn(key, self.objects())
        converge(self, later=AFTER_DEADLINE)
        self.assertNotIn(key, self.objects())
        self.assertEqual(self.row(res["id"])[:2], ("UPLOAD_FAILED", 1))
        self.check()

    def test_process_crash(self):
        r, _ = self.upload("a.txt", "crash after put\n", "--policy", "five", env=self.fp("upload.after_put=crash"))
        self.assertEqual(r.rc, -9)
        self.assertEqual(self.fired(), ["upload.after_put"])
        rid, status, deleted, key = self.last_row()
        self.assertEqual(status, "UPLOADING")
        self.assertIn(key, self.objects())
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 1)
        self.assertEqual(self.lodge("sweep", "--json", later=AFTER_DEADLINE).json()["deleted"], 1)
        self.assertNotIn(key, self.objects())
        self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1))
        # Quota is free: the same content uploads again.
        self.assertEqual(self.upload("b.txt", "crash after put\n", "--policy", "five")[1]["outcome"], "active")
        self.check(max_files=5)
        converge(self)

    def test_compensation_fails(self):
        r, res = self.upload("a.txt", "delete fails twice\n", env=self.fp("upload.confirm=error"))
        rid = res["id"]
        self.lodge("repair", later=AFTER_DEADLINE)
        seen = []
        clock = 20
        for attempt in range(2):
            sw = self.lodge("sweep", "--json", later=f"+{clock}s", env=self.fp("store.delete=error"))
            self.assertEqual(sw.rc, 0, sw)
            self.assertEqual(sw.json()["retried"], 1, sw)
            _, status, next_at, retries, _, _ = self.task(rid)
            self.assertEqual((status, retries), ("RETRY", attempt + 1))
            seen.append(next_at)
            clock += 10
        self.assertLess(seen[0], seen[1], "next_retry_at grows")
        sw = self.lodge("sweep", "--json", later=f"+{clock}s")
        self.assertEqual(sw.json()["deleted"], 1, sw)
        self.assertEqual((self.task(rid)[1], self.verify_pass(rid)), ("PENDING", 2), "a verify pass follows")
        self.assertEqual(self.lodge("sweep", "--json", later="+1h").json()["verified"], 1)
        self.assertEqual(self.task(rid)[1], "SUCCESS")
        self.check()

    def test_dead_letter(self):
        r, res = self.upload("a.txt", "never deletable\n", env=self.fp("upload.confirm=error"))
        rid = res["id"]
        self.lodge("repair", later=AFTER_DEADLINE)
        codes = []
        for i in range(4):  # max_retries 3: the 4th failure dead-letters
            sw = self.lodge("sweep", "--json", later=f"+{20 + 20 * i}s", env=self.fp("store.delete=error"))
            codes.append(sw.rc)
        self.assertEqual(codes, [0, 0, 0, 1])
        self.assertEqual(self.task(rid)[1], "FAILED")
        st = self.lodge("status", "--check")
        self.assertEqual(st.rc, 1, st)
        self.assertIn("dead-lettered", st.out)
        tasks = self.lodge("tasks", "--json").json_lines()
        self.assertEqual([t["record_id"] for t in tasks], [rid])
        self.assertIn("injected failure", tasks[0]["last_error"])
        rt = self.lodge("retry", "--json", str(tasks[0]["id"]))
        self.assertEqual(rt.rc, 0, rt)
        self.assertEqual(rt.json(), {"task_id": tasks[0]["id"], "outcome": "pending"})
        self.assertEqual(self.lodge("retry", str(tasks[0]["id"])).rc, 1, "no longer a dead letter")
        self.assertEqual(self.task(rid)[1], "PENDING")
        self.assertEqual(self.lodge("sweep", "--json", later="+200s").json()["deleted"], 1)
        self.assertEqual(self.lodge("status", "--check", "-q").rc, 0)
        self.check()

    def test_expired_lease(self):
        r, res = self.upload("a.txt", "sweeper dies\n", env=self.fp("upload.confirm=error"))
        rid = res["id"]
        key = self.row(rid)[2]
        self.lodge("repair", later=AFTER_DEADLINE)
        sw = self.lodge("sweep", later=AFTER_DEADLINE, env=self.fp("sweep.after_claim=crash"))
        self.assertEqual(sw.rc, -9)
        _, status, _, _, version, owner = self.task(rid)
        self.assertEqual((status, version), ("PROCESSING", 1))
        # Within the lease nobody else may take it.
        self.assertEqual(self.lodge("sweep", "--json", later="+10s").json()["claimed"], 0)
        self.assertIn(key, self.objects())
        st = self.lodge("status", "--json", later="+60s").json()
        self.assertEqual(st["expired_leases"], 1)
        sw = self.lodge("sweep", "--json", "--worker-id", "second", later="+60s")
        self.assertEqual(sw.json()["deleted"], 1, sw)
        _, status, _, _, version, _ = self.task(rid)
        self.assertEqual((status, version, self.verify_pass(rid)), ("PENDING", 2, 2), "deleted; verify pass next")
        self.assertNotIn(key, self.objects())
        self.check()

    def test_stale_worker(self):
        r, res = self.upload("a.txt", "stale worker\n", env=self.fp("upload.confirm=error"))
        rid = res["id"]
        self.lodge("repair", later=AFTER_DEADLINE)
        gate = os.path.join(self.dir, "gate")
        a = self.spawn("sweep", "--json", "--worker-id", "A", later=AFTER_DEADLINE,
                       env=self.fp(f"sweep.after_delete=pause:{gate}"))
        wait_until(lambda: "sweep.after_delete" in self.fired(), what="worker A to delete and stall")
        b = self.lodge("sweep", "--json", "--worker-id", "B", later="+60s")  # A's lease (30s) has expired
        self.assertEqual(b.json()["deleted"], 1, b)
        _, status, _, _, version_b, owner = self.task(rid)
        self.assertEqual((status, version_b), ("PENDING", 2), "B deleted; its verify pass is next")
        open(gate, "w").close()
        out, err = a.communicate(timeout=60)
        self.assertEqual(a.returncode, 0, err)
        self.assertEqual(json.loads(out)["lease_lost"], 1)
        self.assertEqual(json.loads(out)["deleted"], 0)
        _, status, _, _, version, _ = self.task(rid)
        self.assertEqual((status, version), ("PENDING", 2), "A's finish changed nothing")
        runs = self.sql("SELECT worker_id FROM job_run WHERE job = 'sweep' ORDER BY id")
        self.assertEqual([w for (w,) in runs], ["B", "A"])
        self.check()

    def test_late_confirm(self):
        gate = os.path.join(self.dir, "gate")
        p = self.spawn("upload", "--json", self.write("a.txt", "late confirm\n"),
                       env=self.fp(f"upload.after_put=pause:{gate}"))
        wait_until(lambda: "upload.after_put" in self.fired(), what="the upload to reach confirm")
        rid, status, _, key = self.last_row()
        self.assertEqual(status, "UPLOADING")
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 1)
        open(gate, "w").close()
        out, err = p.communicate(timeout=60)
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["outcome"], "failed")
        self.assertEqual(res["error"]["code"], "STATE_CHANGED")
        self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1))
        self.assertEqual(self.lodge("sweep", "--json", later=AFTER_DEADLINE).json()["deleted"], 1)
        self.assertNotIn(key, self.objects())
        self.check()

    def test_duplicate_execution(self):
        ids = []
        for i in range(12):
            ids.append(self.upload(f"f{i}.txt", f"doomed {i}\n", env=self.fp("upload.confirm=error"))[1]["id"])
        self.lodge("repair", later=AFTER_DEADLINE)
        gate = os.path.join(self.dir, "gate")
        sweeps = [self.spawn("sweep", "--json", "--worker-id", f"w{i}", later=AFTER_DEADLINE,
                             env=self.fp(f"sweep.after_claim=pause:{gate}")) for i in range(2)]
        wait_until(lambda: self.fired().count("sweep.after_claim") >= 1, what="a sweep to claim")
        open(gate, "w").close()
        results = [json.loads(p.communicate(timeout=60)[0]) for p in sweeps]
        self.assertEqual(sum(r["deleted"] for r in results), 12, results)
        self.assertEqual(sum(r["lease_lost"] for r in results), 0)
        # Each deleted once; each owes its verify pass (failed by deadline).
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task WHERE status = 'PENDING' AND verify_pass = 2"),
                         [(12,)])
        # Executing a task's delete again (the verify pass) is harmless: the key is simply gone.
        again = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(again.json()["verified"], 12)
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task WHERE status = 'SUCCESS'"), [(12,)])
        self.assertEqual(self.lodge("sweep", "--json", later="+2h").json()["claimed"], 0)
        self.assertEqual(self.objects(), {})
        self.check()

    @s3_only("bucket versioning (Azurite 3.37 has no blob versioning)")
    def test_versioned_bucket(self):
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        r, res = self.upload("a.txt", "versioned\n", env=self.fp("upload.confirm=error"))
        key = self.row(res["id"])[2]
        converge(self, later=AFTER_DEADLINE)
        v = self.s3.list_object_versions(Bucket=self.bucket, Prefix=key)
        self.assertEqual(v.get("Versions", []), [])
        self.assertEqual(v.get("DeleteMarkers", []), [])
        self.check()

    def test_unmanaged_object_is_reported_and_survives_apply_and_sweep(self):
        # I8: another tool's object under lodge's prefix, even with a key shaped like lodge's.
        key = f"{self.prefix}/ci/{uuid.uuid4()}.txt"
        self.put_object(key, b"nobody's")
        young = self.lodge("reconcile", "--json", "--older-than", "1h")
        self.assertEqual(young.json()["found"]["unmanaged"], 0, "younger than the grace: maybe in flight")
        rep = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(rep.rc, 0, "another writer's object is counted, not a finding")
        self.assertEqual(rep.json()["found"]["unmanaged"], 1)
        strict = self.lodge("reconcile", "--strict", "--json", later="+1h")
        self.assertEqual(strict.rc, 1)
        self.assertEqual(strict.json()["items"][0]["key"], key)
        ap = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(ap.json()["applied"], 0)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload")[0][0], 0, "no row adopted")
        self.lodge("sweep", "--json", later="+1h")
        self.assertIn(key, self.objects(), "never touched")

    def test_object_under_a_dead_rows_key_stamped_otherwise_survives(self):
        # The exact key of a dead row, but the object there now is another writer's: the
        # stamp must name this ledger and that row before anything is queued.
        r, res = self.upload("a.txt", "mine\n")
        key = self.row(res["id"])[2]
        self.assertEqual(self.lodge("delete", str(res["id"])).rc, 0)
        converge(self)
        self.put_object(key, b"theirs", metadata=self.stamp(uuid.uuid4(), res["id"]))
        rep = self.lodge("reconcile", "--apply", "--json", later="+2h")
        self.assertEqual(rep.json()["found"]["foreign"], 1, rep)
        self.assertEqual((rep.json()["found"]["leftover"], rep.json()["applied"]), (0, 0), rep)
        self.lodge("sweep", later="+2h")
        self.assertIn(key, self.objects(), "never touched")

    def test_another_writers_object_at_a_dead_rows_key_before_sweep_survives(self):
        # I8: the row was deleted, and before sweep ran another tool wrote over its key (on
        # Azure tagging its blob state=pending, as lodge tags its own): no lodge stamp, so
        # sweep leaves it, says so, and ends the task with the reason; reconcile reports it
        # as another writer's and --apply queues nothing.
        r, res = self.upload("a.txt", "mine\n")
        key = self.row(res["id"])[2]
        self.assertEqual(self.lodge("delete", str(res["id"])).rc, 0)
        self.put_object(key, b"another tool's\n", **({"tags": {"state": "pending"}} if self.store_kind == "az" else {}))
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"]), (1, 0), sw)
        self.assertIn("no lodge stamp", sw.err)
        self.assertEqual(self.object_bytes(key), b"another tool's\n")
        status, why = self.sql("SELECT status, last_error FROM cleanup_task WHERE record_id = ?", (res["id"],))[0]
        self.assertEqual(status, "IGNORED")
        self.assertIn("no lodge stamp", why)
        rec = self.lodge("reconcile", "--apply", "--json", later="+2h")
        self.assertEqual(rec.rc, 0, rec)
        self.assertEqual((rec.json()["found"]["unmanaged"], rec.json()["found"]["leftover"], rec.json()["applied"]),
                         (1, 0, 0), rec)
        self.assertEqual(self.lodge("sweep", "--json", later="+2h").json()["claimed"], 0)
        self.assertEqual(self.object_bytes(key), b"another tool's\n", "never touched")
        self.check()

    def test_dangling(self):
        r, res = self.upload("a.txt", "will vanish\n")
        key = self.row(res["id"])[2]
        self.delete_object(key)
        rep = self.lodge("reconcile", "--json")
        self.assertEqual(rep.rc, 1)
        self.assertEqual(rep.json()["found"]["dangling"], 1)
        self.assertEqual(self.lodge("reconcile", "--apply", "--json").rc, 1)
        self.assertEqual(self.row(res["id"])[:2], ("ACTIVE", 0), "the row stays")
        human = self.lodge("reconcile")
        self.assertIn("dangling", human.out)

    def test_corrupt_is_found_by_size_and_by_verify(self):
        r, res = self.upload("a.txt", "original bytes\n")
        key = self.row(res["id"])[2]
        self.put_object(key, b"original bytez\n")  # same size, other content
        plain = self.lodge("reconcile", "--json")
        if self.store_kind == "az":  # the overwrite dropped lodge's tag: found without reading the bytes
            self.assertEqual(plain.json()["found"]["corrupt"], 1, plain)
            self.assertIn("written over by another tool", plain.json()["items"][0]["detail"])
        else:
            self.assertEqual(plain.rc, 0, plain)
        v = self.lodge("reconcile", "--verify", "--json")
        self.assertEqual(v.json()["found"]["corrupt"], 1, v)
        self.put_object(key, b"short\n")
        self.assertEqual(self.lodge("reconcile", "--json").json()["found"]["corrupt"], 1)

    def test_stale_multipart(self):
        big = samples.blob(11 * 1024 * 1024, seed=9)
        r, _ = self.upload("big.bin", big, env=self.fp("upload.between_parts=crash"))
        self.assertEqual(r.rc, -9)
        self.assertEqual(len(self.uploads_in_progress()), 1)
        converge(self, later=AFTER_DEADLINE)  # repair then sweep: the task aborts it
        self.assertEqual(self.uploads_in_progress(), [])
        # An upload no row has the key of is another tool's: reported, never aborted (I8).
        self.start_staged(f"{self.prefix}/ci/abandoned.bin")
        rep = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(rep.json()["found"]["unmanaged"], 1, rep)
        self.assertEqual((rep.json()["found"]["stale_multipart"], rep.json()["applied"]), (0, 0), rep)
        self.assertEqual(len(self.uploads_in_progress()), 1)
        self.check()

    def test_user_delete(self):
        ids = [self.upload(f"f{i}.txt", f"keep {i}\n", "--policy", "five")[1]["id"] for i in range(5)]
        r, res = self.upload("extra.txt", "one too many\n", "--policy", "five")
        self.assertEqual(res["error"]["code"], "QUOTA_EXCEEDED")
        key = self.row(ids[0])[2]
        d = self.lodge("delete", "--json", str(ids[0]))
        self.assertEqual(d.rc, 0, d)
        self.assertEqual(d.json(), {"id": ids[0], "outcome": "deleted"})
        again = self.lodge("delete", "--json", str(ids[0]), "9999")
        self.assertEqual(again.rc, 1, "not active any more; no such file")
        self.assertEqual([x["outcome"] for x in again.json_lines()], ["not_active", "not_found"])
        self.assertEqual(self.lodge("--owner", "someone-else", "delete", str(ids[1])).rc, 1)
        self.assertEqual(self.lodge("delete", "abc").rc, 2)
        self.assertEqual(self.upload("extra.txt", "one too many\n", "--policy", "five")[1]["outcome"], "active")
        self.assertIn(key, self.objects(), "the object waits for the grace")
        self.assertEqual(self.lodge("sweep", "--json").json()["claimed"], 0)
        self.assertEqual(self.lodge("sweep", "--json", later="+10s").json()["deleted"], 1)
        self.assertNotIn(key, self.objects())
        self.check(max_files=5)
        converge(self)

    def test_foreign_object(self):
        key = f"{self.prefix}/ci/{uuid.uuid4()}.txt"
        self.lodge("init")
        self.put_object(key, b"theirs", metadata=self.stamp(uuid.uuid4(), 1))
        rep = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(rep.rc, 0, "another ledger's object is counted, not a finding")
        self.assertEqual(rep.json()["found"]["foreign"], 1)
        self.assertEqual(rep.json()["applied"], 0)
        self.lodge("sweep", later="+1h")
        self.assertIn(key, self.objects(), "never touched")

    @sqlite_only("restores a copy of the ledger file itself (sqlite3's backup API)")
    def test_restored_ledger(self):
        self.upload("a.txt", "before the backup\n")
        backup = os.path.join(self.dir, "backup.db")
        src = sqlite3.connect(self.db)
        dst = sqlite3.connect(backup)
        src.backup(dst)
        src.close()
        dst.close()
        r, res = self.upload("b.txt", "after the backup\n")
        newer_key = self.row(res["id"])[2]
        os.replace(backup, self.db)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.remove(self.db + suffix)
        # The store's id marker shows the history diverged: cleanup refuses until accepted.
        rep = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(rep.rc, 3, rep)
        self.assertIn("LEDGER_DIVERGED", rep.err)
        self.assertEqual(self.lodge("sweep", later="+1h").rc, 3)
        self.assertIn(newer_key, self.objects(), "never touched")
        rep = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(rep.rc, 1)
        self.assertEqual(rep.json()["found"]["diverged"], 2, rep)  # the id marker, the newer object
        self.assertEqual(rep.json()["found"]["unmanaged"], 0)
        self.assertIn("restored", self.lodge("reconcile", later="+1h").out)

    def test_ambiguous_put(self):
        proxy = FaultProxy(self.server_port, self.dir)
        try:
            proxy.set_rules([{"method": "PUT", "path_contains": self.request_path(f"{self.prefix}/ci/"),
                              "action": "forward_then_reset", "times": 20}])
            self.rebind(self.endpoint_env(proxy.endpoint))  # the same bucket, through the proxy
            r, res = self.upload("a.txt", "did it land?\n", env=self.endpoint_env(proxy.endpoint))
            self.rebind({})
            self.assertNotEqual(res["outcome"], "active")
            self.assertEqual(res["outcome"], "failed")
            rid = res["id"]
            key = self.row(rid)[2]
            self.assertIn(key, self.objects(), "the server stored it although the client never heard")
            self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1))
            self.assertEqual(self.task(rid)[1], "PENDING", "an ambiguous failure waits for the grace")
            self.assertGreater(sum(1 for e in proxy.entries() if e["method"] == "PUT"), 1)
        finally:
            proxy.stop()
        self.assertEqual(self.lodge("sweep", "--json").json()["claimed"], 0, "not before deadline + grace")
        converge(self, later=AFTER_DEADLINE)
        self.assertNotIn(key, self.objects())
        self.check()

    def test_convergence_after_a_mix_of_crashes(self):
        self.upload("ok.txt", "fine\n")
        self.upload("c1.txt", "crash 1\n", env=self.fp("upload.after_reserve=crash"))
        self.upload("c2.txt", "crash 2\n", env=self.fp("upload.after_put=crash"))
        self.upload("c3.txt", "confirm\n", env=self.fp("upload.confirm=error"))
        self.upload("c4.txt", "put\n", env=self.fp("store.put=error;upload.mark_failed=error"))
        self.lodge("repair", later=AFTER_DEADLINE, env=self.fp("repair.before_commit=crash"))
        self.lodge("sweep", later=AFTER_DEADLINE, env=self.fp("sweep.after_claim=crash"))
        st = converge(self, later="+2m")  # past the crashed sweep's lease
        self.assertEqual(st["files"]["active"], 1)
        self.assertEqual(st["files"]["uploading"], 0)
        self.assertEqual(len(self.objects()), 1)
        self.check()

    def verify_pass(self, rid):
        return self.sql("SELECT verify_pass FROM cleanup_task WHERE record_id = ?", (rid,))[0][0]

    def test_sweep_does_not_spin_on_overdue_unrepaired_uploads(self):
        # Two uploads killed right after their reservation; repair has not run, so the
        # rows are UPLOADING past deadline + grace while their tasks are due. Sweep used to
        # postpone each task to "now" and claim it again: "claimed 1000, postponed 997",
        # lease_version 0 -> 499.
        rids = []
        for i in range(2):
            r, _ = self.upload(f"c{i}.txt", f"crashed {i}\n", env=self.fp("upload.after_reserve=crash"))
            self.assertEqual(r.rc, -9)
            rids.append(self.last_row()[0])
        started = time.monotonic()
        sw = self.lodge("sweep", "--json", "--limit", "1000", later=AFTER_DEADLINE)
        elapsed = time.monotonic() - started
        self.assertEqual(sw.rc, 0, sw)
        j = sw.json()
        self.assertLessEqual(j["claimed"], 2 * len(rids), j)
        self.assertEqual(j["deleted"], 2, j)
        self.assertLess(elapsed, 20, "a sweep of two tasks is quick")
        for rid in rids:
            _, status, next_at, _, version, _ = self.task(rid)
            self.assertLessEqual(version, 1, "lease_version bumped at most once per task")
            self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1), "sweep failed the overdue row itself")
            reason = self.sql("SELECT failure_reason FROM file_upload WHERE id = ?", (rid,))[0][0]
            self.assertTrue(reason.startswith("DEADLINE_EXCEEDED") and "(sweep)" in reason, reason)
            self.assertEqual(status, "PENDING", "a verify pass follows: the failure was by deadline")
        self.assertEqual(self.lodge("sweep", "--json", later=AFTER_DEADLINE).json()["claimed"], 0,
                         "not due again in the next run either")
        v = self.lodge("sweep", "--json", later="+1h").json()
        self.assertEqual((v["claimed"], v["verified"]), (2, 2), v)
        self.assertEqual([self.task(rid)[1] for rid in rids], ["SUCCESS", "SUCCESS"])
        self.check()
        converge(self, later="+2h")

    def test_object_landing_after_the_first_delete_is_removed_by_the_verify_pass(self):
        # The wall clock of repair and sweep runs ahead (a step forward) while an upload's
        # PUT has not gone out yet: they see the deadline and the grace as past and delete.
        # The PUT then lands (the uploader's own deadline is monotonic and not yet reached).
        gate = os.path.join(self.dir, "gate")
        p = self.spawn("upload", "--json", self.write("a.txt", "lands late\n"),
                       env=self.fp(f"upload.before_put=pause:{gate}"))
        try:
            wait_until(lambda: "upload.before_put" in self.fired(), what="the upload to reach its PUT")
            rid, status, _, key = self.last_row()
            self.assertEqual(status, "UPLOADING")
            self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 1)
            sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE).json()
            self.assertEqual(sw["deleted"], 1, sw)
            self.assertNotIn(key, self.objects())
        finally:
            open(gate, "w").close()
        out, err = p.communicate(timeout=60)
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["outcome"], "failed", res)
        self.assertEqual(res["error"]["code"], "STATE_CHANGED")
        self.assertIn(key, self.objects(), "the late PUT landed after the first delete")
        # The second pass waits the row's deadline length and one more grace (10s + 5s).
        self.assertEqual(self.lodge("sweep", "--json", later="+30s").json()["claimed"], 0)
        v = self.lodge("sweep", "--json", later="+45s").json()
        self.assertNotIn(key, self.objects(), "the verify pass removed the late object")
        self.assertEqual((v["deleted"], v["verified"]), (1, 1), v)
        self.assertEqual(self.task(rid)[1], "SUCCESS")
        self.check()
        converge(self, later="+2h")

    @s3_only("bucket versioning and the version id of the object (Azurite 3.37 has no blob versioning)")
    def test_own_object_recovery_records_the_version_id(self):
        # The first PUT is stored but its answer is lost; the retry gets 412, HEAD shows our
        # record id and digest: the row is confirmed with the object's real version id.
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        proxy = FaultProxy(self.moto.port, self.dir)
        try:
            proxy.set_rules([{"method": "PUT", "path_contains": f"/{self.bucket}/{self.prefix}/ci/",
                              "action": "forward_then_reset", "times": 1}])
            self.rebind({"AWS_ENDPOINT_URL": proxy.endpoint})  # the same bucket, through the proxy
            r, res = self.upload("a.txt", "mine after all\n", env={"AWS_ENDPOINT_URL": proxy.endpoint})
            self.rebind({})
            self.assertEqual(res["outcome"], "active", r)
            self.assertEqual(sum(1 for e in proxy.entries() if e["method"] == "PUT" and "/.lodge/" not in e["path"]), 2)
            self.assertIn("HEAD", [e["method"] for e in proxy.entries()])
        finally:
            proxy.stop()
        key, version = self.sql("SELECT object_key, version_id FROM file_upload WHERE id = ?", (res["id"],))[0]
        head = aws(self.moto.endpoint, "s3api", "head-object", "--bucket", self.bucket, "--key", key)
        self.assertTrue(head.get("VersionId"), head)
        self.assertEqual(version, head["VersionId"])
        self.check()

    @sqlite_only("holds SQLite's write lock (BEGIN IMMEDIATE on the ledger file) while the upload confirms")
    def test_failure_after_reservation_reports_the_reserved_id_and_key(self):
        cfg = dict(CONFIG, busy_timeout="200ms")
        env = {"LODGE_CONFIG": self.write("locked.json", json.dumps(cfg))}
        gate = os.path.join(self.dir, "gate")
        env.update(self.fp(f"upload.after_reserve=pause:{gate}"))
        p = self.spawn("upload", "--json", self.write("a.txt", "confirm meets a lock\n"), env=env)
        wait_until(lambda: "upload.after_reserve" in self.fired(), what="the upload to reserve")
        rid, _, _, key = self.last_row()
        con = sqlite3.connect(self.db, isolation_level=None, timeout=30)
        con.execute("BEGIN IMMEDIATE")  # the ledger is locked when the upload confirms
        try:
            open(gate, "w").close()
            out, err = p.communicate(timeout=60)
        finally:
            con.execute("ROLLBACK")
            con.close()
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["outcome"], "failed", res)
        self.assertEqual(res["error"]["code"], "LEDGER_LOCKED", res)
        self.assertEqual((res["id"], res["object_key"]), (rid, key), "the reserved id and key are reported")
        self.assertEqual(self.row(rid)[:2], ("UPLOADING", 0), "left to repair")
        converge(self, later=AFTER_DEADLINE)
        self.check()

    def test_a_job_ending_in_an_exception_records_a_failed_run(self):
        r, res = self.upload("a.txt", "left uploading\n", env=self.fp("upload.confirm=error"))
        rid = res["id"]
        for job, spec in (("repair", "repair.before_commit=error"), ("sweep", "sweep.after_claim=error"),
                          ("reconcile", "store.list=error")):
            out = self.lodge(job, later=AFTER_DEADLINE, env=self.fp(spec))
            self.assertNotEqual(out.rc, 0, (job, out))
            runs = self.sql("SELECT outcome, counts FROM job_run WHERE job = ? ORDER BY id", (job,))
            self.assertEqual(len(runs), 1, (job, runs))
            self.assertEqual(runs[0][0], "failed", job)
            self.assertIn("injected", json.loads(runs[0][1])["error"], job)
            st = self.lodge("status", "--json", later=AFTER_DEADLINE).json()
            self.assertEqual(st["last_runs"][job]["outcome"], "failed", job)
        self.assertEqual(self.row(rid)[:2], ("UPLOADING", 0), "the failed repair committed nothing")
        converge(self, later="+2m")  # past the lease the failed sweep took
        self.check()

    def test_jobs_are_quiet_under_cron_and_exit_codes_match(self):
        for cmd in ("sweep", "repair", "reconcile"):
            r = self.lodge(cmd)
            self.assertEqual((r.rc, r.out, r.err), (0, "", ""), cmd)
            v = self.lodge(cmd, "-v")
            self.assertRegex(v.out, rf"^{cmd}: ", cmd)
            self.assertEqual(self.lodge(cmd, "--bogus").rc, 2)
        self.assertEqual(self.lodge("sweep", "--lease", "soon").rc, 2)
        long_lease = self.lodge("sweep", "--lease", "40000d")  # now + lease would pass 36500d of headroom
        self.assertEqual(long_lease.rc, 2, long_lease)
        self.assertIn("--lease: '40000d' is too long", long_lease.err)
        st = self.lodge("status", "--json").json()
        self.assertEqual(sorted(k for k, v in st["last_runs"].items() if v), ["reconcile", "repair", "sweep"])
        self.assertEqual(self.lodge("sweep", "--dry-run").out.strip(), "sweep: 0 tasks due")
        self.rebind(self.endpoint_env("http://127.0.0.1:9"))  # the ledger's store, unreachable
        down = self.lodge("reconcile", env=self.endpoint_env("http://127.0.0.1:9"))
        self.assertEqual(down.rc, 4, down)


if __name__ == "__main__":
    main()
