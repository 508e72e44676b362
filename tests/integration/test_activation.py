"""Every way a row becomes ACTIVE leaves its object tagged committed on a store that tags
objects (S3 with "tag_state": true on moto, Azure on Azurite), checked with the independent
clients (the aws CLI's get-object-tagging, the Azure SDK's azblob.js): an upload, `lodge
confirm` of a direct upload, and `reconcile --apply --roll-forward` of a restored ledger.
A tag that failed is recorded on the task and set by the next sweep; a host configured
to tag otherwise than the ledger's binding records is refused before it does anything."""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import AzureTestCase, S3TestCase, aws, main, sqlite_only, wait_until  # noqa: E402

CONFIG = {
    "policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}},
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}
LATER = "+1h"  # every deadline, grace and --older-than long past


def read(path):
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


class ActivationMixin:
    """The scenarios, on a store whose objects lodge tags; `committed` and `pending` are the
    store's own names for lodge's state tag."""

    config = CONFIG

    def init(self, *args, env=None):
        # The ledger is bound with the configuration's tagging mode: written before init.
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(self.config))
        return super().init(*args, env=env)

    def task(self, rid):
        return self.sql("SELECT status, tag_owed FROM cleanup_task WHERE record_id = ?", (rid,))[0]

    def status(self, rid):
        return self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (rid,))[0]

    def upload(self, name, data, env=None):
        r = self.lodge("upload", "--json", self.write(name, data), env=env)
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()[0]

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

    def test_an_upload_ends_tagged_committed_and_its_task_settled(self):
        res = self.upload("a.txt", "tagged at once\n")
        self.assertEqual(res["outcome"], "active")
        self.assertEqual(self.state_tag(res["object_key"]), self.committed)
        self.assertEqual(self.task(res["id"]), ("IGNORED", 0))

    def test_a_failed_tag_is_recorded_and_the_next_sweep_sets_it(self):
        r = self.lodge("upload", "--json", self.write("a.txt", "tag refused\n"),
                       env={"LODGE_FAILPOINTS": "store.tag=error"})
        self.assertEqual(r.rc, 0, r)
        res = r.json_lines()[0]
        self.assertEqual(res["outcome"], "active", r)  # the row is the truth: stored
        self.assertIn("lodge sweep tags it later", r.err)
        self.assertEqual(self.state_tag(res["object_key"]), self.pending)
        self.assertEqual(self.task(res["id"]), ("PENDING", 1))
        s = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(s.rc, 0, s)
        self.assertEqual((s.json()["ignored"], s.json()["deleted"]), (1, 0), s)
        self.assertEqual(self.state_tag(res["object_key"]), self.committed)
        self.assertEqual(self.task(res["id"]), ("IGNORED", 0))
        self.assertEqual(self.status(res["id"]), ("ACTIVE", 0))

    def test_a_direct_upload_s_confirm_tags_it_committed(self):
        data = os.urandom(5000)
        path = self.write("in/direct.bin", data)
        r = self.lodge("reserve", "--json", "direct.bin", "--size", str(len(data)),
                       "--sha256", hashlib.sha256(data).hexdigest())
        self.assertEqual(r.rc, 0, r)
        put = r.json()
        cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", put["method"], "--upload-file", path]
        for k, v in put["headers"].items():
            cmd += ["-H", f"{k}: {v}"]
        sent = subprocess.run(cmd + [put["url"]], capture_output=True, text=True, timeout=60,
                              env={"PATH": os.environ["PATH"]})
        self.assertIn(sent.stdout, ("200", "201"), sent)
        self.assertEqual(self.state_tag(put["object_key"]), self.direct_sent)
        c = self.lodge("confirm", "--json", put["id"])
        self.assertEqual(c.rc, 0, c)
        self.assertEqual(c.json()["outcome"], "active", c)
        self.assertEqual(self.state_tag(put["object_key"]), self.committed)
        self.assertEqual(self.task(put["id"]), ("IGNORED", 0))

    @sqlite_only("restores a SQLite backup of the ledger")
    def test_roll_forward_of_a_restored_ledger_leaves_the_object_tagged_committed(self):
        before = self.upload("f0.txt", "before the backup\n")
        # The backup is taken while an upload is between its PUT and its confirm; that run's
        # own tag then fails, so only the ledger the backup replaces knew the tag was owed.
        gate = os.path.join(self.dir, "gate")
        fplog = os.path.join(self.dir, "fp.log")
        inflight = self.spawn("upload", "--json", self.write("f1.txt", "in flight at the backup\n"),
                              env={"LODGE_FAILPOINTS": f"upload.after_put=pause:{gate};store.tag=error",
                                   "LODGE_FAILPOINTS_LOG": fplog})
        wait_until(lambda: "upload.after_put" in read(fplog), what="the upload to reach its confirm")
        backup = os.path.join(self.dir, "backup.db")
        self.backup(backup)
        open(gate, "w").close()
        out, err = inflight.communicate(timeout=120)
        self.assertEqual(inflight.returncode, 0, err)
        confirmed = json.loads(out.splitlines()[0])
        self.assertEqual(confirmed["outcome"], "active", out)
        self.assertEqual(self.state_tag(confirmed["object_key"]), self.pending)
        self.upload("g0.txt", "after the backup\n")  # its run moves the store's id marker on
        self.restore(backup)

        self.assertEqual(self.status(confirmed["id"]), ("UPLOADING", 0))
        roll = self.lodge("reconcile", "--apply", "--roll-forward", "--json", later=LATER)
        self.assertEqual(roll.rc, 1, roll)  # the divergence is a finding
        self.assertEqual(roll.json()["applied"], 1, roll)
        kinds = {i["key"]: i["kind"] for i in roll.json()["items"]}
        self.assertEqual(kinds[confirmed["object_key"]], "confirmed_after_backup", roll)
        self.assertEqual(self.status(confirmed["id"]), ("ACTIVE", 0))
        # Activated as its upload: tagged committed (a lifecycle backstop expires what is
        # still pending), its task settled.
        self.assertEqual(self.state_tag(confirmed["object_key"]), self.committed)
        self.assertEqual(self.task(confirmed["id"]), ("IGNORED", 0))
        self.assertEqual(self.state_tag(before["object_key"]), self.committed)


class ActivationS3(ActivationMixin, S3TestCase):
    config = dict(CONFIG, tag_state=True)
    committed = {"lodge-state": "committed"}
    pending = {"lodge-state": "pending"}
    direct_sent = pending  # the presigned PUT carries the pending tag, signed

    def state_tag(self, key):
        """The object's tags, read with the aws CLI."""
        got = aws(self.moto.endpoint, "s3api", "get-object-tagging", "--bucket", self.bucket, "--key", key)
        return {t["Key"]: t["Value"] for t in got["TagSet"]}

    def test_a_failed_tag_swept_from_a_host_without_tag_state_is_refused_then_set_by_a_tagging_one(self):
        r = self.lodge("upload", "--json", self.write("a.txt", "tag refused\n"),
                       env={"LODGE_FAILPOINTS": "store.tag=error"})
        self.assertEqual(r.rc, 0, r)
        res = r.json_lines()[0]
        self.assertEqual(self.task(res["id"]), ("PENDING", 1))
        # Another host's configuration: the same store, without tag_state. Refused by the
        # binding before anything is claimed, so the task cannot end IGNORED untagged.
        plain = {"LODGE_CONFIG": self.write("plain.json", json.dumps(CONFIG))}
        for cmd in (["sweep", "--json"], ["reconcile", "--apply", "--json"]):
            s = self.lodge(*cmd, env=plain, later=LATER)
            self.assertEqual(s.rc, 2, s)
            self.assertEqual(s.json()["error"]["code"], "STORE_MISMATCH", s)
            self.assertIn('set "tag_state": true', s.json()["error"]["message"])
        self.assertEqual(self.task(res["id"]), ("PENDING", 1))
        self.assertEqual(self.state_tag(res["object_key"]), self.pending)
        # A host configured as the binding records finishes the tag.
        s = self.lodge("sweep", "--json", later=LATER)
        self.assertEqual(s.rc, 0, s)
        self.assertEqual(s.json()["ignored"], 1, s)
        self.assertEqual(self.state_tag(res["object_key"]), self.committed)
        self.assertEqual(self.task(res["id"]), ("IGNORED", 0))


class ActivationAzure(ActivationMixin, AzureTestCase):
    committed = {"state": "committed"}
    pending = {"state": "pending"}
    direct_sent = {}  # the create-only SAS lets the sender set no tag: untagged counts as pending

    def state_tag(self, key):
        """The blob's tags, read with the Azure SDK (azblob.js)."""
        return self.object_tags(key)


if __name__ == "__main__":
    main()
