"""lodge deletes only what an exact key match proves is its own and dead (I8), against
moto_server: objects of the aws CLI and of a second ledger in the same prefix (one of its
multipart uploads paused mid-way) survive reconcile --apply + sweep, with and without a
failing HEAD; a ledger restored from a backup knows it (the store's id marker), refuses to
clean up until the operator reconciled and accepted, and deletes nothing uploaded after
the backup."""

import json
import os
import sqlite3
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, FaultProxy, S3TestCase, aws, main, wait_until  # noqa: E402

CONFIG = {
    "policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}},
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
    "status": {"sweep_max_age": "1d"},
}
LATER = "+1h"  # every deadline, grace and --older-than long past


def read(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


class Foreign(S3TestCase):
    read = staticmethod(read)

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fplog = os.path.join(self.dir, "fp.log")
        self.db_b = os.path.join(self.dir, "b.db")

    def lodge_b(self, *args, **kw):
        return self.lodge("--db", self.db_b, *args, db=False, **kw)

    def spawn_b(self, *args, env=None):
        """Starts lodge on ledger B in the background."""
        e = dict(self.env)
        e.update(env or {})
        return subprocess.Popen([LODGE, "--db", self.db_b] + [str(a) for a in args], env=e,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def upload(self, name, data, lodge=None, env=None):
        r = (lodge or self.lodge)("upload", "--json", self.write(name, data), env=env)
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()[0]

    def stamp(self, key):
        return self.s3.head_object(Bucket=self.bucket, Key=key)["Metadata"]

    def all_present(self, keys):
        have = self.objects(metadata=True)
        return [k for k in keys if k not in have]

    def foreign_objects_survive(self, failpoints):
        self.assertEqual(self.lodge("init").rc, 0)
        self.assertEqual(self.lodge_b("init").rc, 0)
        # Another tool's objects, one of them inside an owner's folder.
        stray = self.write("stray.txt", "written by aws\n")
        handmade = [f"{self.prefix}/stray/handmade.txt", f"{self.prefix}/ci/handmade.txt"]
        for key in handmade:
            aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", stray)
        # Ledger B: one active file, one it deleted itself (its own leftover, not A's).
        b_active = self.upload("b1.txt", "ledger b keeps this\n", lodge=self.lodge_b)
        b_gone = self.upload("b2.txt", "ledger b deleted this\n", lodge=self.lodge_b)
        self.assertEqual(self.lodge_b("delete", b_gone["id"]).rc, 0)
        # ...and a multipart upload of B's, paused between its parts.
        gate = os.path.join(self.dir, "gate")
        big = self.write("big.bin", os.urandom(7 << 20))
        b_mp = self.spawn_b("upload", "--json", big,
                          env=self.fp(f"upload.between_parts=pause:{gate}"))
        wait_until(lambda: "upload.between_parts" in self.fired(), what="B's multipart upload to pause")
        self.assertEqual(len(self.uploads_in_progress()), 1)
        # Ledger A: one active file and one it deleted (so its sweep has real work).
        a_active = self.upload("a1.txt", "ledger a keeps this\n")
        a_gone = self.upload("a2.txt", "ledger a deleted this\n")
        self.assertEqual(self.lodge("delete", a_gone["id"]).rc, 0)
        foreign = handmade + [b_active["object_key"], b_gone["object_key"]]
        foreign += [k for k in self.objects(metadata=True) if "/.lodge/" in k]  # both id markers
        self.assertEqual(len(foreign), 6)

        rec = self.lodge("reconcile", "--apply", "--json", env=self.fp(failpoints) if failpoints else None,
                         later=LATER)
        # Others' objects are counted, never a finding by themselves; a failed HEAD is one.
        self.assertEqual(rec.rc, 1 if failpoints else 0, rec)
        found = rec.json()["found"]
        self.assertEqual(rec.json()["applied"], 0, rec)  # A's deleted file has its live task already
        if not failpoints:
            self.assertEqual(found["unmanaged"], 3, rec)  # two objects, one multipart upload
            self.assertEqual(found["foreign"], 3, rec)    # B's two objects and B's id marker
        else:
            self.assertEqual(found["unknown"], 4, rec)    # no HEAD: nobody's, never touched
        sw = self.lodge("sweep", "--json", env=self.fp(failpoints) if failpoints else None, later=LATER)
        self.assertIn(sw.rc, (0, 1), sw)

        self.assertEqual(self.all_present(foreign + [a_active["object_key"]]), [])
        self.assertEqual(len(self.uploads_in_progress()), 1, "B's multipart upload is still there")
        if failpoints:  # A's sweep cannot tell whose object is at its key: it waits
            self.assertIn(a_gone["object_key"], self.objects(), sw)
        else:
            self.assertNotIn(a_gone["object_key"], self.objects())
        # B completes and confirms its upload, and cleans up after itself.
        open(gate, "w").close()
        out, err = b_mp.communicate(timeout=60)
        self.assertEqual(b_mp.returncode, 0, err)
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["outcome"], "active", res)
        self.assertIn(res["object_key"], self.objects())
        self.assertEqual(self.lodge_b("sweep", later=LATER).rc, 0)
        self.assertNotIn(b_gone["object_key"], self.objects())
        self.assertEqual(self.all_present(handmade + [b_active["object_key"], a_active["object_key"]]), [])

    def test_foreign_objects_survive_reconcile_apply_and_sweep(self):
        self.foreign_objects_survive(None)

    def test_foreign_objects_survive_when_head_fails(self):
        self.foreign_objects_survive("store.head=error")

    def test_sweep_does_not_delete_an_object_stamped_as_another_record(self):
        self.assertEqual(self.lodge("init").rc, 0)
        mine = self.upload("a.txt", "mine\n")
        self.assertEqual(self.lodge("delete", mine["id"]).rc, 0)
        # Something else now sits at the key, stamped as another record of another ledger.
        other = self.write("other.txt", "someone else's\n")
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", mine["object_key"],
            "--body", other, "--metadata", "lodge-ledger=0000-other,lodge-record-id=77")
        sw = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"], sw.json()["dead_lettered"]), (1, 0, 0), sw)
        self.assertIn("left in place", sw.err)
        self.assertEqual(self.object_bytes(mine["object_key"]), b"someone else's\n")
        t = self.lodge("tasks", "--status", "all", "--json").json_lines()
        self.assertEqual(t[0]["status"], "IGNORED")
        self.assertIn("0000-other", t[0]["last_error"])
        self.assertIn("#77", t[0]["last_error"])

    def test_sweep_deletes_in_batches_and_still_only_its_own(self):
        """A bucket never versioned: sweep reads each key once (HEAD, the stamp), deletes a
        claimed batch with one DeleteObjects (each key's ETag its condition) and looks for
        staged uploads with one listing per batch; no key's versions or uploads are listed on
        their own. What is not its own stays, as on the per-object path."""
        self.assertEqual(self.lodge("init").rc, 0)
        n = 130  # three claims of 64
        for i in range(n):
            self.write(f"tree/f{i:03d}.txt", f"file {i}\n")
        up = self.lodge("upload", "--json", os.path.join(self.dir, "tree"))
        self.assertEqual(up.rc, 0, up)
        rows = sorted(up.json_lines()[:-1], key=lambda r: r["id"])
        self.assertEqual(len(rows), n)
        self.assertEqual(self.lodge("delete", *[r["id"] for r in rows]).rc, 0)
        theirs, gone, staged = rows[5]["object_key"], rows[7]["object_key"], rows[9]["object_key"]
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", theirs,
            "--body", self.write("theirs.txt", "written by aws\n"))
        self.delete_object(gone)
        self.start_staged(staged)
        proxy = self.through_proxy()
        sw = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["claimed"], sw.json()["deleted"], sw.json()["kept"]), (n, n - 1, 1), sw)
        self.assertEqual(self.objects(), {theirs: len("written by aws\n")})
        self.assertEqual(self.staged(), [])
        seen = {}
        for e in proxy.entries():
            path, _, query = e["path"].partition("?")
            names = sorted(q.split("=")[0] for q in query.split("&") if q)
            kind = e["method"] + (" ?" + ",".join(names) if names else "")
            if "/.lodge/" not in path:
                seen[kind] = seen.get(kind, 0) + 1
        self.assertEqual(seen.get("HEAD"), n, seen)
        self.assertEqual(seen.get("POST ?delete"), 3, seen)
        self.assertEqual(seen.get("GET ?versioning"), 1, seen)
        self.assertEqual(seen.get("GET ?prefix,uploads"), 3, seen)
        self.assertNotIn("DELETE", seen, seen)
        self.assertFalse([k for k in seen if "versions" in k], seen)

    def test_an_aws_cli_object_at_a_dead_rows_key_before_sweep_survives_sweep_and_reconcile_apply(self):
        self.assertEqual(self.lodge("init").rc, 0)
        mine = self.upload("a.txt", "mine\n")
        self.assertEqual(self.lodge("delete", mine["id"]).rc, 0)
        # Before sweep runs, the aws CLI writes over the key (no lodge stamp).
        theirs = self.write("theirs.txt", "written by aws\n")
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", mine["object_key"],
            "--body", theirs)
        sw = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"]), (1, 0), sw)
        self.assertIn("no lodge stamp", sw.err)
        (t,) = self.lodge("tasks", "--status", "all", "--json").json_lines()
        self.assertEqual(t["status"], "IGNORED")
        self.assertIn("no lodge stamp", t["last_error"])
        rec = self.lodge("reconcile", "--apply", "--json", "-v", later=LATER)
        self.assertEqual(rec.rc, 0, rec)
        self.assertEqual([(i["kind"], i["key"], i["applied"]) for i in rec.json()["items"]],
                         [("unmanaged", mine["object_key"], False)], rec)
        self.assertEqual(self.lodge("sweep", "--json", later=LATER).json()["claimed"], 0)
        self.assertEqual(self.object_bytes(mine["object_key"]), b"written by aws\n")

    def test_on_a_versioned_bucket_sweep_removes_only_the_version_lodge_wrote(self):
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        self.assertEqual(self.lodge("init").rc, 0)
        mine = self.upload("a.txt", "mine\n")
        key = mine["object_key"]
        self.assertEqual(self.lodge("delete", mine["id"]).rc, 0)
        theirs = self.write("theirs.txt", "written by aws\n")
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", theirs)
        # ...and a delete marker over both, made by another tool, then its object again.
        aws(self.moto.endpoint, "s3api", "delete-object", "--bucket", self.bucket, "--key", key)
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", theirs)

        def versions():
            v = self.s3.list_object_versions(Bucket=self.bucket, Prefix=key)
            return (sorted(x["VersionId"] for x in v.get("Versions", [])),
                    [x["VersionId"] for x in v.get("DeleteMarkers", [])])

        (before, markers) = versions()
        self.assertEqual((len(before), len(markers)), (3, 1))
        lodges = [vid for vid in before
                  if self.s3.head_object(Bucket=self.bucket, Key=key, VersionId=vid)["Metadata"].get("lodgerecord")]
        self.assertEqual(len(lodges), 1)
        sw = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual(sw.json()["kept"], 1, sw)  # the task ends saying what it left
        after, markers_after = versions()
        self.assertEqual(after, sorted(set(before) - set(lodges)), "only lodge's version went")
        self.assertEqual(markers_after, markers, "another tool's delete marker stays")
        self.assertEqual(self.object_bytes(key), b"written by aws\n")

    def test_its_own_multipart_upload_left_by_a_lost_create_answer_is_aborted_and_status_heals(self):
        self.assertEqual(self.lodge("init").rc, 0)
        # The first CreateMultipartUpload reached moto but its answer was lost; the retried
        # create made the upload that completed. The first stays, at the ACTIVE row's key.
        res = self.upload("big.bin", os.urandom(7 << 20), env=self.fp("store.after_create=error"))
        self.assertEqual(res["outcome"], "active", res)
        self.assertEqual(self.fired(), ["store.after_create"])
        self.assertEqual(self.uploads_in_progress(), [res["object_key"]])
        self.assertEqual(self.lodge("sweep", later=LATER).rc, 0)
        rec = self.lodge("reconcile", "--json", later=LATER)
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual(rec.json()["found"]["stale_multipart"], 1, rec)
        st = self.lodge("status", "--check", "--json", later=LATER)
        self.assertEqual(st.rc, 1, st)
        self.assertEqual([r["code"] for r in st.json()["reasons"]], ["reconcile_findings"], st)
        ap = self.lodge("reconcile", "--apply", "--json", later=LATER)
        (item,) = ap.json()["items"]
        self.assertEqual((item["kind"], item["key"], item["record_id"], item["applied"]),
                         ("stale_multipart", res["object_key"], res["id"], True), ap)
        self.assertIn("not the one ACTIVE record", item["detail"])
        self.assertEqual(ap.json()["applied"], 1, ap)
        self.assertEqual(self.uploads_in_progress(), [])
        again = self.lodge("reconcile", "--json", later=LATER)
        self.assertEqual(again.rc, 0, again)
        st = self.lodge("status", "--check", "--json", later=LATER)
        self.assertEqual(st.rc, 0, st)
        self.assertIn(res["object_key"], self.objects(), "the object itself stays")
        self.assertEqual(self.sql("SELECT upload_status FROM file_upload WHERE id = ?", (res["id"],)),
                         [("ACTIVE",)])

    def test_an_aws_cli_multipart_upload_at_an_active_rows_key_is_aborted_but_not_one_in_flight(self):
        self.assertEqual(self.lodge("init").rc, 0)
        done = self.upload("a.txt", "active\n")
        aws(self.moto.endpoint, "s3api", "create-multipart-upload", "--bucket", self.bucket,
            "--key", done["object_key"])
        # An upload still in flight (its row UPLOADING) is never aborted, whatever its id.
        gate = os.path.join(self.dir, "gate")
        inflight = self.spawn("upload", "--json", self.write("big.bin", os.urandom(7 << 20)),
                              env=self.fp(f"upload.between_parts=pause:{gate}"))
        wait_until(lambda: "upload.between_parts" in self.fired(), what="the upload to pause")
        self.assertEqual(len(self.uploads_in_progress()), 2)
        ap = self.lodge("reconcile", "--apply", "--json")
        self.assertEqual([(i["kind"], i["key"], i["applied"]) for i in ap.json()["items"]],
                         [("stale_multipart", done["object_key"], True)], ap)
        self.assertEqual(len(self.uploads_in_progress()), 1)
        open(gate, "w").close()
        out, err = inflight.communicate(timeout=60)
        self.assertEqual(json.loads(out.splitlines()[0])["outcome"], "active", err)
        self.assertEqual(self.uploads_in_progress(), [])

    def test_reconcile_reports_this_ledgers_stamp_with_an_unreadable_record_id_as_unknown(self):
        self.assertEqual(self.lodge("init").rc, 0)
        (uuid_,), = self.sql("SELECT value FROM ledger_meta WHERE key = 'uuid'")
        gone = self.upload("a.txt", "deleted\n")
        self.assertEqual(self.lodge("delete", gone["id"]).rc, 0)
        self.assertEqual(self.lodge("sweep", "--json", later=LATER).json()["deleted"], 1)
        body = self.write("garbled.txt", "stamped, garbled\n")
        stray = f"{self.prefix}/ci/{uuid.uuid4()}/garbled.txt"  # no row has this key
        for key, record in ((stray, "garbage"), (gone["object_key"], "0x1")):
            aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", body,
                "--metadata", f"lodgeledger={uuid_},lodgerecord={record}")
        rec = self.lodge("reconcile", "--apply", "--json", later=LATER)
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual((rec.json()["found"]["unknown"], rec.json()["applied"]), (2, 0), rec)
        details = {i["key"]: i["detail"] for i in rec.json()["items"] if i["kind"] == "unknown"}
        self.assertIn("'garbage'", details[stray])
        self.assertIn("'0x1'", details[gone["object_key"]])
        self.assertIn("no record id", details[stray])
        self.assertEqual(self.lodge("sweep", "--json", later=LATER).json()["claimed"], 0)
        self.assertEqual(self.all_present([stray, gone["object_key"]]), [])

    def test_reconcile_apply_aborts_only_its_dead_rows_multipart_upload(self):
        self.assertEqual(self.lodge("init").rc, 0)
        self.assertEqual(self.lodge_b("init").rc, 0)
        # A's upload crashes between its parts: its row dies (repair), its upload stays.
        big = self.write("big.bin", os.urandom(7 << 20))
        r = self.lodge("upload", big, env=self.fp("upload.between_parts=crash"))
        self.assertNotEqual(r.rc, 0)
        (a_key,) = self.uploads_in_progress()
        # B's upload paused between its parts.
        gate = os.path.join(self.dir, "gate")
        b_log = os.path.join(self.dir, "fp-b.log")
        b_mp = self.spawn_b("upload", "--json", self.write("big2.bin", os.urandom(7 << 20)),
                          env={"LODGE_FAILPOINTS": f"upload.between_parts=pause:{gate}", "LODGE_FAILPOINTS_LOG": b_log})
        wait_until(lambda: "upload.between_parts" in self.read(b_log), what="B's upload to pause")
        self.assertEqual(self.lodge("repair", later=LATER).rc, 0)
        rec = self.lodge("reconcile", "--apply", "--json", later=LATER)
        items = {(i["kind"], i["key"]): i for i in rec.json()["items"]}
        self.assertTrue(items[("stale_multipart", a_key)]["applied"], rec)
        self.assertEqual(self.uploads_in_progress(), [k for k in self.uploads_in_progress() if k != a_key])
        self.assertEqual(len(self.uploads_in_progress()), 1, "B's upload is untouched")
        open(gate, "w").close()
        out, err = b_mp.communicate(timeout=60)
        self.assertEqual(b_mp.returncode, 0, err)
        self.assertEqual(json.loads(out.splitlines()[0])["outcome"], "active")

    def test_others_objects_are_counted_quietly_listed_with_v_and_findings_with_strict(self):
        self.assertEqual(self.lodge("init").rc, 0)
        self.assertEqual(self.lodge_b("init").rc, 0)
        stray = self.write("stray.txt", "written by aws\n")
        key = f"{self.prefix}/stray/handmade.txt"
        aws(self.moto.endpoint, "s3api", "put-object", "--bucket", self.bucket, "--key", key, "--body", stray)
        b = self.upload("b1.txt", "ledger b keeps this\n", lodge=self.lodge_b)
        self.upload("a1.txt", "ledger a keeps this\n")
        # The nightly cron line: nothing to say, exit 0, nothing touched.
        quiet = self.lodge("-q", "reconcile", "--apply", later=LATER)
        self.assertEqual((quiet.rc, quiet.out, quiet.err), (0, "", ""), quiet)
        plain = self.lodge("reconcile", "--json", later=LATER)
        self.assertEqual(plain.rc, 0, plain)
        self.assertEqual(plain.json()["found"]["unmanaged"], 1, plain)
        self.assertEqual(plain.json()["found"]["foreign"], 2, plain)  # B's object and B's id marker
        self.assertTrue(plain.json()["clean"], plain)
        self.assertEqual(plain.json()["items"], [], "listed only with -v or --strict")
        verbose = self.lodge("-v", "reconcile", later=LATER)
        self.assertEqual(verbose.rc, 0, verbose)
        self.assertIn(key, verbose.out)
        self.assertIn(b["object_key"], verbose.out)
        strict = self.lodge("reconcile", "--strict", "--json", later=LATER)
        self.assertEqual(strict.rc, 1, strict)
        self.assertFalse(strict.json()["clean"], strict)
        self.assertEqual(sorted(i["key"] for i in strict.json()["items"] if i["kind"] == "unmanaged"), [key])
        self.assertEqual(self.all_present([key, b["object_key"]]), [])

    def test_reconcile_apply_reports_and_records_what_it_applied_when_a_later_step_fails(self):
        self.assertEqual(self.lodge("init").rc, 0)
        gone = self.upload("a.txt", "deleted\n")
        self.assertEqual(self.lodge("delete", gone["id"]).rc, 0)
        self.sql_exec(f"UPDATE cleanup_task SET status = 'SUCCESS' WHERE record_id = {gone['id']}")
        proxy = FaultProxy(self.moto.port, self.dir)
        try:
            self.rebind({"AWS_ENDPOINT_URL": proxy.endpoint})  # the same bucket, through the proxy
            proxy.set_rules([{"method": "GET", "path_contains": "uploads", "action": "503", "times": 100}])
            rec = self.lodge("reconcile", "--apply", env={"AWS_ENDPOINT_URL": proxy.endpoint}, later=LATER)
        finally:
            proxy.stop()
        self.assertEqual(rec.rc, 4, rec)
        self.assertIn("leftover", rec.out)
        self.assertIn("(queued)", rec.out)
        self.assertIn("applied 1", rec.out)
        self.assertIn("reconcile stopped after applying 1", rec.err)
        outcome, counts = self.sql("SELECT outcome, counts FROM job_run WHERE job = 'reconcile'")[-1]
        self.assertEqual(outcome, "failed")
        self.assertEqual(json.loads(counts)["applied"], 1)
        self.assertEqual(self.sql(f"SELECT status FROM cleanup_task WHERE record_id = {gone['id']}"), [("PENDING",)])


class Restored(S3TestCase):
    read = staticmethod(read)

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fplog = os.path.join(self.dir, "fp.log")

    def backup(self, to):
        src, dst = sqlite3.connect(self.db), sqlite3.connect(to)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()

    def restore(self, frm):
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.remove(self.db + suffix)
        src, dst = sqlite3.connect(frm), sqlite3.connect(self.db)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()

    def up(self, name, data):
        r = self.lodge("upload", "--json", self.write(name, data))
        self.assertEqual(r.rc, 0, r)
        return r, r.json_lines()[0]

    def stamps(self):
        out = {}
        for key in self.objects():
            meta = self.s3.head_object(Bucket=self.bucket, Key=key)["Metadata"]
            out.setdefault((meta["lodgeledger"], meta["lodgerecord"]), []).append(key)
        return out

    def test_a_restored_ledger_knows_it_and_deletes_nothing_uploaded_after_the_backup(self):
        self.assertEqual(self.lodge("init").rc, 0)
        before = [self.up(f"f{i}.txt", f"before the backup {i}\n")[1] for i in range(2)]
        # The backup is taken while a third upload is between its PUT and its confirm.
        gate = os.path.join(self.dir, "gate")
        inflight = self.spawn("upload", "--json", self.write("f2.txt", "in flight at the backup\n"),
                              env={"LODGE_FAILPOINTS": f"upload.after_put=pause:{gate}",
                                   "LODGE_FAILPOINTS_LOG": self.fplog})
        wait_until(lambda: "upload.after_put" in self.read(self.fplog), what="the upload to reach its confirm")
        backup = os.path.join(self.dir, "backup.db")
        self.backup(backup)
        open(gate, "w").close()
        out, err = inflight.communicate(timeout=60)
        self.assertEqual(inflight.returncode, 0, err)
        confirmed = json.loads(out.splitlines()[0])
        after = [self.up(f"g{i}.txt", f"after the backup {i}\n")[1] for i in range(3)]
        self.restore(backup)

        # The restored ledger's next upload finds the store's mark above its own, once.
        r, new = self.up("h.txt", "uploaded by the restored ledger\n")
        self.assertIn("DIVERGED", r.err)
        self.assertEqual(r.err.count("DIVERGED"), 1)
        self.assertGreater(new["id"], max(a["id"] for a in after))
        r2, _ = self.up("h2.txt", "and one more\n")
        self.assertNotIn("DIVERGED", r2.err, "said once")
        for stamp, keys in self.stamps().items():
            self.assertEqual(len(keys), 1, f"stamp {stamp} is on {keys}")

        st = self.lodge("status", "--check", "--json")
        self.assertEqual(st.rc, 1, st)
        self.assertIsNotNone(st.json()["diverged"])
        self.assertTrue(any("DIVERGED" in p for p in st.json()["problems"]), st)
        for args in (["repair"], ["sweep"], ["reconcile", "--apply"]):
            r = self.lodge(*args, "--json", later=LATER)
            self.assertEqual(r.rc, 3, (args, r))
            self.assertIn("LEDGER_DIVERGED", r.err)
        acc = self.lodge("init", "--accept-diverged")
        self.assertEqual(acc.rc, 3, acc)
        self.assertIn("reconcile", acc.err)

        # reconcile reports: the divergence, the upload confirmed after the backup, and the
        # objects stamped with ids this copy does not hold. It touches nothing.
        rec = self.lodge("reconcile", "--json", later=LATER)
        self.assertEqual(rec.rc, 1, rec)
        items = rec.json()["items"]
        kinds = {i["key"]: i["kind"] for i in items}
        self.assertEqual(kinds[confirmed["object_key"]], "confirmed_after_backup", rec)
        for a in after:
            self.assertIn(kinds[a["object_key"]], ("diverged", "beyond_history"), rec)
        self.assertIn("diverged", [i["kind"] for i in items if "/.lodge/" in i["key"]])
        roll = self.lodge("reconcile", "--apply", "--roll-forward", "--json", later=LATER)
        self.assertEqual(roll.rc, 1, roll)
        self.assertEqual(roll.json()["applied"], 1, roll)
        self.assertEqual(self.sql("SELECT upload_status FROM file_upload WHERE id = ?", (confirmed["id"],)),
                         [("ACTIVE",)])
        acc = self.lodge("init", "--accept-diverged")
        self.assertEqual(acc.rc, 0, acc)
        self.assertIsNone(self.lodge("status", "--json").json()["diverged"])

        # The nightly jobs run again, and everything uploaded after the backup stays.
        for args in (["repair"], ["reconcile", "--apply"], ["sweep"]):
            r = self.lodge(*args, "--json", later=LATER)
            self.assertIn(r.rc, (0, 1), (args, r))
        keys = self.objects()
        for f in before + [confirmed, new] + after:
            self.assertIn(f["object_key"], keys)
        for a in after:
            self.assertEqual(self.object_bytes(a["object_key"]).decode(),
                             self.read(os.path.join(self.dir, os.path.basename(a["file"]))))


if __name__ == "__main__":
    main()
