"""lodge against s3rver 3.7.1, a second, independent S3 implementation that lacks
ListObjectVersions (405), ListMultipartUploads (501), versioning, If-None-Match and If-Match on
DELETE (ignored: the window between a stamp check and the delete stays open there): the
store contract suite with those declared, and cleanup and reconcile that degrade instead
of dead-lettering or calling a server that answered "unreachable"."""

import json
import os
import subprocess
import sys
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, S3rver, is_lodge_metadata, main, s3_client  # noqa: E402

STORE_TESTS = os.environ.get("LODGE_STORE_TESTS_BIN", "")


class ContractAgainstS3rver(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = S3rver()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_contract_suite_passes_with_the_missing_capabilities_declared(self):
        env = dict(os.environ, LODGE_TEST_STORE="s3", LODGE_TEST_S3_ENDPOINT=self.server.endpoint,
                   LODGE_TEST_S3_LACKS=S3rver.LACKS, LODGE_TEST_S3_KEY_ID="S3RVER", LODGE_TEST_S3_SECRET="S3RVER")
        p = subprocess.run([STORE_TESTS, "-ts=contract,s3only"], capture_output=True, text=True, env=env,
                           timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("Status: SUCCESS", p.stdout)
        # Every case of the two suites ran and passed (doctest counts the other suites as skipped).
        self.assertRegex(" ".join(p.stdout.split()), r"test cases: (\d+) \| \1 passed \| 0 failed")

    def test_undeclared_absences_fail_the_suite(self):
        # The capability case really looks: declaring nothing makes it fail on s3rver.
        env = dict(os.environ, LODGE_TEST_STORE="s3", LODGE_TEST_S3_ENDPOINT=self.server.endpoint,
                   LODGE_TEST_S3_LACKS="conditional_create,versioning", LODGE_TEST_S3_KEY_ID="S3RVER",
                   LODGE_TEST_S3_SECRET="S3RVER")
        p = subprocess.run([STORE_TESTS, "-ts=contract", "-tc=*capabilities*"], capture_output=True, text=True,
                           env=env, timeout=600)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn("Status: FAILURE", p.stdout)


class LodgeAgainstS3rver(LodgeTestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = S3rver()
        cls.s3 = s3_client(cls.server.endpoint, "S3RVER")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        super().setUp()
        self.bucket = "s3rver-" + uuid.uuid4().hex[:16]
        self.s3.create_bucket(Bucket=self.bucket)
        self.env.update({"LODGE_STORE": f"s3://{self.bucket}/lodge", "AWS_ENDPOINT_URL": self.server.endpoint,
                         "AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER", "LODGE_OWNER": "ci"})
        self.init()

    def objects(self):
        r = self.s3.list_objects_v2(Bucket=self.bucket, Prefix="lodge/")
        return sorted(o["Key"] for o in r.get("Contents", []) if not is_lodge_metadata(o["Key"]))

    def task_status(self, record_id):
        return self.sql("SELECT status FROM cleanup_task WHERE record_id = ?", (record_id,))[0][0]

    def test_cleanup_deletes_and_reconcile_says_what_it_skipped(self):
        kept = self.lodge("upload", "--json", self.write("kept.txt", "stays active\n"))
        self.assertEqual(kept.rc, 0, kept)
        kept_key = kept.json_lines()[0]["object_key"]

        # A definite failure: compensation runs at once, through sweep's path.
        refused = self.lodge("upload", "--json", self.write("refused.txt", "refused\n"),
                             env={"LODGE_FAILPOINTS": "store.put=error"})
        self.assertEqual(refused.rc, 1, refused)
        self.assertEqual(self.task_status(refused.json_lines()[0]["id"]), "SUCCESS", refused)

        # Two uploads whose process died after the PUT: objects landed, rows UPLOADING (left
        # to their deadline, as rows of another host would be: the second run would
        # otherwise fail the first's at once).
        landed = []
        waits = {"LODGE_CONFIG": self.write("config.json", json.dumps({"fail_killed_runs": False}))}
        for name in ("a.txt", "b.txt"):
            r = self.lodge("upload", "--json", self.write(name, f"landed {name}\n"),
                           env=dict(waits, LODGE_FAILPOINTS="upload.after_put=crash"))
            self.assertEqual(r.rc, -9, r)
        landed = [k for (k,) in self.sql("SELECT object_key FROM file_upload WHERE upload_status = 'UPLOADING'")]
        self.assertEqual(len(landed), 2)
        self.assertEqual(self.objects(), sorted(landed + [kept_key]))

        # s3rver refuses requests whose clock is skewed, so time moves in the ledger instead
        # of under faketime: the deadlines, then the grace, are made to have passed.
        self.sql_exec("UPDATE file_upload SET upload_deadline_at = 0 WHERE upload_status = 'UPLOADING';")
        repair = self.lodge("repair", "--json", env=waits)
        self.assertEqual(repair.json()["repaired"], 2, repair)
        self.sql_exec("UPDATE cleanup_task SET next_retry_at = 0 WHERE status = 'PENDING';")
        sweep = self.lodge("sweep", "--json")
        self.assertEqual(sweep.rc, 0, sweep)
        self.assertEqual(sweep.json()["deleted"], 2, sweep)
        self.assertEqual(sweep.json()["dead_lettered"], 0, sweep)
        self.assertEqual(self.objects(), [kept_key], "the landed objects are gone")
        # Learned once per run, said once, not once per key.
        self.assertEqual(sweep.err.count("does not list object versions"), 1, sweep.err)
        self.assertEqual(self.lodge("status", "--json").json()["dead_letters"], 0)

        rec = self.lodge("reconcile", "--json")
        self.assertEqual(rec.rc, 0, rec)
        summary = rec.json()
        self.assertTrue(summary["clean"], summary)
        self.assertIn("stale_multipart", summary["skipped"])
        self.assertNotIn("stale_multipart", summary["found"])
        self.assertIn("does not list incomplete multipart uploads", rec.err)
        text = self.lodge("reconcile")
        self.assertEqual(text.rc, 0, text)
        self.assertIn("stale_multipart not checked", text.out)

    def test_reconcile_with_findings_exits_1_not_4(self):
        r = self.lodge("upload", "--json", self.write("gone.txt", "will vanish\n"))
        self.assertEqual(r.rc, 0, r)
        self.s3.delete_object(Bucket=self.bucket, Key=r.json_lines()[0]["object_key"])
        rec = self.lodge("reconcile", "--json")
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual(rec.json()["found"]["dangling"], 1, rec)
        self.assertIn("stale_multipart", rec.json()["skipped"])


if __name__ == "__main__":
    main()
