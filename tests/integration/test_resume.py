"""Resume: a large file whose upload died mid-transfer is resumed by the next `lodge upload`
of it from the parts already stored, on moto, Azurite and file://.

Each case sends a 40 MiB file in 5 MiB parts (S3's smallest) at --bwlimit 8M and interrupts
it once three parts are stored (awaited through the `upload.after_part` failpoint's log, never
a fixed sleep): killed with SIGKILL, failed by the policy's stall (the fault proxy's `stall` rule
takes part of the fourth part's body and then nothing), or interrupted by Ctrl-C twice. The
next upload of the same file resumes the same record: ACTIVE, the bytes read back equal to
the file's, `resumed_bytes` at least the three parts, and the bytes sent the second time
(counted by the fault proxy in front of S3 and Azure; by the parts lodge reports sending on
file://) at most the rest plus one part. A file changed in between is uploaded afresh and
the old staged upload is cleaned by sweep; a stored part whose bytes are not the file's is
found and sent again."""

import hashlib
import json
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (AzureTestCase, LodgeTestCase, S3TestCase, check_invariants,  # noqa: E402
                       converge, main, wait_until)

MIB = 1 << 20
PART = 5 * MIB
SIZE = 8 * PART  # three parts stored before the interruption, five more to send
CONFIG = {"multipart_threshold": "8MiB", "part_size": "5MiB", "part_concurrency": 1,
          "policies": {"default": {"deadline": "60s", "stall": "10s", "grace": "10s", "max_size": "1GiB"}}}
# The stall: a part of 8 MiB takes a second at --bwlimit 8M, but through the Python fault proxy
# on a loaded two-core machine (the suite runs two tests at once) the first one measured over
# 3 s, which failed the first upload before it could be interrupted (parts are 5 MiB now).


class Resume:
    """The cases, for every store; a subclass says how to look at its store."""

    proxied = True  # S3 and Azure: lodge talks to the server through a FaultProxy

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fplog = os.path.join(self.dir, "fired.log")
        self.proxy = None
        if self.proxied:
            self.proxy = self.through_proxy()
        self.data = os.urandom(SIZE)
        self.path = self.write("in/big.bin", self.data)

    def fired(self):
        if not os.path.exists(self.fplog):
            return 0
        with open(self.fplog) as f:
            return sum(1 for line in f if "upload.after_part" in line)

    def start(self, *extra, env=None):
        """The first upload, counting finished parts in the failpoint log."""
        e = {"LODGE_FAILPOINTS": "upload.after_part=sleep:0", "LODGE_FAILPOINTS_LOG": self.fplog}
        e.update(env or {})
        return self.spawn("--json", "upload", "--bwlimit", "8M", *extra, self.path, env=e)

    def three_parts_stored(self, proc):
        wait_until(lambda: self.fired() >= 3 or proc.poll() is not None, 60, "three parts to be stored")
        if proc.poll() is not None:
            out, err = proc.communicate()
            self.fail(f"the first upload ended (exit {proc.returncode}) before it was interrupted: {out[-2000:]}"
                      f"{err[-2000:]}")

    def kill_after_three_parts(self):
        p = self.start()
        self.three_parts_stored(p)
        p.send_signal(signal.SIGKILL)
        p.communicate()

    def sent_bytes(self):
        """Part bytes the store received through the proxy since the last call."""
        entries = self.proxy.entries()
        seen = getattr(self, "_seen", 0)
        self._seen = len(entries)
        return sum(e.get("body_bytes", 0) for e in entries[seen:] if e["method"] == "PUT")

    def again(self):
        """The second upload (no limit): resumed; returns its JSON line."""
        if self.proxy:
            self.sent_bytes()
        before = self.fired()
        r = self.lodge("--json", "upload", self.path,
                       env={"LODGE_FAILPOINTS": "upload.after_part=sleep:0", "LODGE_FAILPOINTS_LOG": self.fplog})
        self.assertEqual(r.rc, 0, r)
        doc = [d for d in r.json_lines() if "outcome" in d][0]
        self.assertEqual(doc["outcome"], "active", r)
        sent = self.sent_bytes() if self.proxy else (self.fired() - before) * PART
        return doc, sent

    def assert_resumed(self, first_id, doc, sent):
        self.assertEqual(doc["id"], first_id, "the same record continues")
        resumed = doc.get("resumed_bytes", 0)
        self.assertGreaterEqual(resumed, 3 * PART, doc)
        self.assertLessEqual(sent, SIZE - resumed + PART, f"sent {sent} bytes again, {resumed} resumed")
        self.assertEqual(hashlib.sha256(self.object_bytes(doc["object_key"])).hexdigest(),
                         hashlib.sha256(self.data).hexdigest())
        self.assertEqual(self.staged(), [], "no staged upload left")
        check_invariants(self)
        converge(self)

    def first_record(self):
        (rid, status), = self.sql("SELECT id, upload_status FROM file_upload")
        return rid, status

    def test_killed_then_resumed(self):
        self.kill_after_three_parts()
        rid, status = self.first_record()
        self.assertEqual(status, "UPLOADING")  # held by a process that is gone
        doc, sent = self.again()
        self.assert_resumed(rid, doc, sent)

    def test_interrupted_twice_then_resumed(self):
        p = self.start()
        self.three_parts_stored(p)
        p.send_signal(signal.SIGINT)
        # The first says it is finishing what is in flight; the second, once it was heard,
        # aborts the transfer (two signals sent at once may arrive as one).
        first = p.stderr.readline()
        self.assertIn("finishing 1 upload in flight", first)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        err = first + err
        self.assertNotEqual(p.returncode, 0, out + err)
        rid, status = self.first_record()
        self.assertEqual(status, "UPLOAD_FAILED", out + err)
        self.assertEqual(len(self.staged()), 1, "the staged upload is kept for the next run")
        # Until its cleanup is due it is resumable, no leftover; after, reconcile reports it.
        rec = self.lodge("reconcile", "--json")
        self.assertEqual((rec.rc, rec.json()["found"]["stale_multipart"]), (0, 0), rec)
        rec = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(rec.json()["found"]["stale_multipart"], 1, rec)
        r = self.lodge("upload", self.path)  # the text form says so too
        self.assertEqual(r.rc, 0, r)
        self.assertRegex(r.out, r"^active +#%d .* resumed \([\d.]+ MiB already stored\)$" % rid)
        self.assertEqual(self.first_record(), (rid, "ACTIVE"))
        self.assertEqual(self.object_bytes(self.sql("SELECT object_key FROM file_upload")[0][0]), self.data)

    def test_changed_file_is_uploaded_afresh_and_the_old_parts_are_cleaned(self):
        self.kill_after_three_parts()
        old_id, _ = self.first_record()
        self.data = os.urandom(SIZE)
        self.write("in/big.bin", self.data)
        r = self.lodge("--json", "upload", self.path)
        self.assertEqual(r.rc, 0, r)
        doc = [d for d in r.json_lines() if "outcome" in d][0]
        self.assertEqual(doc["outcome"], "active", r)
        self.assertNotEqual(doc["id"], old_id)
        self.assertNotIn("resumed_bytes", doc)
        self.assertEqual(self.object_bytes(doc["object_key"]), self.data)
        self.assertEqual(len(self.staged()), 1, "the old row's staged upload waits for its grace")
        check_invariants(self)
        converge(self)
        self.assertEqual(self.staged(), [], "sweep aborted the old staged upload after the grace")

class PlantedPart:
    """A part whose bytes are not the file's, written into the staged upload by hand."""

    def test_a_stored_part_with_other_bytes_is_sent_again(self):
        self.kill_after_three_parts()
        rid, _ = self.first_record()
        (key, handle), = self.sql("SELECT object_key, multipart_upload_id FROM file_upload")
        self.plant_part(key, handle, 2, os.urandom(PART))
        doc, sent = self.again()
        self.assertEqual(doc["id"], rid)
        self.assertLessEqual(doc["resumed_bytes"], SIZE - 2 * PART, doc)  # part 2 was not kept
        self.assertGreaterEqual(sent, PART, "part 2 was sent again")
        self.assertEqual(self.object_bytes(doc["object_key"]), self.data)


class Stalled:
    """A link that stops mid-part (S3 and Azure, through the fault proxy)."""

    def test_stalled_then_resumed(self):
        # Three parts go through; the fourth's body stops half-way, and nothing more moves:
        # the policy's stall (10 s) fails the upload long before its deadline (60 s) and before
        # the proxy lets go (30 s).
        self.proxy.set_rules([{"method": "PUT", "path_contains": self.part_marker, "action": "forward", "times": 3},
                              {"method": "PUT", "path_contains": self.part_marker, "action": "stall",
                               "hold_s": 30, "times": 1}])
        r = self.lodge("--json", "upload", self.path)
        self.assertEqual(r.rc, 1, r)
        doc = [d for d in r.json_lines() if "outcome" in d][0]
        self.assertEqual((doc["outcome"], doc["error"]["code"]), ("failed", "DEADLINE_EXCEEDED"), r)
        rid, status = self.first_record()
        self.assertEqual(status, "UPLOAD_FAILED")
        self.proxy.set_rules([])
        doc, sent = self.again()
        self.assert_resumed(rid, doc, sent)


class Unlistable:
    """A staged upload whose parts cannot be listed for a reason that does not pass by itself
    (S3: credentials without s3:ListMultipartUploadParts, its ListParts answered 403 by the
    fault proxy; file://: a part that cannot be read, a symlink loop at its path, which is
    ELOOP for root too): the next upload of the file aborts it and sends the file afresh,
    where each run used to fail again and move the cleanup one grace later."""

    def fail_after_one_part(self):
        """An upload of 3 parts whose second part fails: the row failed, its staged upload kept."""
        self.data = os.urandom(3 * PART)
        self.path = self.write("in/three.bin", self.data)
        r = self.lodge("--json", "upload", self.path, env={"LODGE_FAILPOINTS": "upload.between_parts=error"})
        self.assertEqual(r.rc, 1, r)
        (rid, status, key, handle), = self.sql(
            "SELECT id, upload_status, object_key, multipart_upload_id FROM file_upload")
        self.assertEqual(status, "UPLOAD_FAILED")
        self.assertEqual(len(self.staged()), 1, "kept for the next run")
        return rid, key, handle

    def cleanup_due(self, rid):
        return self.sql("SELECT next_retry_at FROM cleanup_task WHERE record_id = ?", (rid,))[0][0]

    def upload_doc(self, *args, env=None):
        r = self.lodge("--json", "upload", *args, self.path, env=env)
        return r, [d for d in r.json_lines() if "outcome" in d][0]

    def test_parts_that_cannot_be_listed_are_abandoned_and_the_file_stored(self):
        rid, key, handle = self.fail_after_one_part()
        self.refuse_listing(handle)
        r, doc = self.upload_doc()
        self.assertEqual((r.rc, doc["outcome"]), (0, "active"), r)
        self.assertEqual(doc["id"], rid, "the same record, with a new staged upload")
        self.assertEqual(doc.get("resumed_bytes", 0), 0, doc)
        self.assertIn("cannot be resumed", r.err)
        self.assertEqual(self.object_bytes(doc["object_key"]), self.data)
        self.assertEqual(self.staged(), [], "the staged upload that could not be listed was aborted")
        self.assertNotEqual(self.sql("SELECT multipart_upload_id FROM file_upload")[0][0], handle)
        check_invariants(self)
        converge(self)


class ResumeS3(Resume, PlantedPart, Stalled, Unlistable, S3TestCase):
    part_marker = "partNumber="

    def refuse_listing(self, handle):
        # ListParts is the one GET that names an uploadId.
        self.proxy.set_rules([{"method": "GET", "path_contains": "uploadId=", "action": "403", "times": 1000}])

    def test_a_resume_that_fails_again_never_postpones_the_cleanup(self):
        # A listing that may pass (503) is no reason to abandon the parts: the run fails, the
        # staged upload stays, and its cleanup stays when it was due, not one grace later.
        rid, _, handle = self.fail_after_one_part()
        due = self.cleanup_due(rid)
        self.proxy.set_rules([{"method": "GET", "path_contains": "uploadId=", "action": "503", "times": 1000}])
        r, doc = self.upload_doc(env={"AWS_MAX_ATTEMPTS": "1"})
        self.assertNotEqual(r.rc, 0, r)
        self.assertEqual((doc["outcome"], doc["id"]), ("failed", rid), r)
        self.assertEqual(self.first_record(), (rid, "UPLOAD_FAILED"))
        self.assertLessEqual(self.cleanup_due(rid), due, "a re-failure never postpones the cleanup")
        self.assertEqual(self.staged(), [self.sql("SELECT object_key FROM file_upload")[0][0]])
        # Within the grace the next run resumes it.
        self.proxy.set_rules([])
        r, doc = self.upload_doc()
        self.assertEqual((r.rc, doc["outcome"], doc["id"]), (0, "active", rid), r)
        self.assertGreaterEqual(doc.get("resumed_bytes", 0), PART, doc)
        self.assertEqual(self.object_bytes(doc["object_key"]), self.data)
        self.assertEqual(self.sql("SELECT multipart_upload_id FROM file_upload")[0][0], handle)
        check_invariants(self)

    def plant_part(self, key, handle, number, body):
        self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=handle, PartNumber=number, Body=body)


class ResumeAzure(Resume, Stalled, AzureTestCase):
    """Azure lists an uncommitted block's id and size only: a part is proven by the MD5 its id
    carries, which Put Block sent as Content-MD5 for the server to check (no hand-planted case)."""

    part_marker = "comp=block&"


class ResumeRace(S3TestCase):
    """Two processes (two senders, as two hosts would be) upload the same file at once after
    its staged upload failed: exactly one resumes it, the other finds it in progress. Run on
    SQLite and (it_resume_pg) PostgreSQL."""

    def test_two_processes_racing_to_resume_one_wins_the_other_is_in_progress(self):
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        path = self.write("in/big.bin", os.urandom(3 * PART))
        # Part 1 "fails" (its success turned into an error): the row fails, its staged upload kept.
        r = self.lodge("--json", "upload", path, env={"LODGE_FAILPOINTS": "upload.between_parts=error"})
        self.assertEqual(r.rc, 1, r)
        (rid, status), = self.sql("SELECT id, upload_status FROM file_upload")
        self.assertEqual(status, "UPLOAD_FAILED")
        gate = os.path.join(self.dir, "gate")
        log = os.path.join(self.dir, "fired.log")
        env = {"LODGE_FAILPOINTS": f"upload.before_reserve=pause:{gate}", "LODGE_FAILPOINTS_LOG": log}
        racers = [self.spawn("--json", "upload", "--bwlimit", "8M", "--in-progress-wait", "0", path, env=env)
                  for _ in range(2)]

        def paused():
            if not os.path.exists(log):
                return 0
            with open(log) as f:
                return sum(1 for line in f if "upload.before_reserve" in line)
        wait_until(lambda: paused() == 2, 60, "both racers to reach their reserve")
        open(gate, "w").close()
        docs = []
        for p in racers:
            out, err = p.communicate(timeout=120)
            docs.append(([json.loads(line) for line in out.splitlines() if '"outcome"' in line][0], p.returncode, err))
        outcomes = sorted(d["outcome"] for d, _, _ in docs)
        self.assertEqual(outcomes, ["active", "in_progress"], docs)
        winner = [d for d, _, _ in docs if d["outcome"] == "active"][0]
        loser = [(d, rc) for d, rc, _ in docs if d["outcome"] == "in_progress"][0]
        self.assertEqual(winner["id"], rid)
        self.assertGreater(winner.get("resumed_bytes", 0), 0, winner)
        self.assertEqual((loser[0]["id"], loser[1]), (rid, 1), loser)
        self.assertEqual(self.sql("SELECT id, upload_status FROM file_upload"), [(rid, "ACTIVE")])
        self.assertEqual(self.staged(), [])
        check_invariants(self)


class FileStoreCase(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})
        self.init()

    def objects(self, prefix=None, metadata=False):
        out = {}
        for base, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".lodge")]
            for f in files:
                full = os.path.join(base, f)
                out[os.path.relpath(full, self.root)] = os.path.getsize(full)
        return out

    def object_bytes(self, key):
        with open(os.path.join(self.root, key), "rb") as f:
            return f.read()

    def staged(self):
        mpu = os.path.join(self.root, ".lodge-mpu")
        return sorted(os.listdir(mpu)) if os.path.isdir(mpu) else []


class ResumeFile(Resume, PlantedPart, Unlistable, FileStoreCase):
    proxied = False

    def refuse_listing(self, handle):
        part = os.path.join(self.root, ".lodge-mpu", handle, "part-00001")
        os.remove(part)
        os.symlink("part-00001", part)  # a loop: open(2) says ELOOP, whoever runs it

    def plant_part(self, key, handle, number, body):
        with open(os.path.join(self.root, ".lodge-mpu", handle, "part-%05d" % number), "wb") as f:
            f.write(body)


if __name__ == "__main__":
    main()
