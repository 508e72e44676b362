"""`lodge lifecycle`: the backstop rule of the configured store, printed and (S3) installed,
checked independently with the aws CLI against moto."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, S3TestCase, aws, main  # noqa: E402

FOREIGN = {"ID": "other-tool-archive", "Filter": {"Prefix": "logs/"}, "Status": "Enabled",
           "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}], "Expiration": {"Days": 365}}


class LifecycleS3(S3TestCase):
    def rules(self):
        """The bucket's rules by ID, as the aws CLI reads them ({} when there is no configuration)."""
        got = aws(self.moto.endpoint, "s3api", "get-bucket-lifecycle-configuration", "--bucket", self.bucket,
                  check=False)
        return {r["ID"]: r for r in (got or {}).get("Rules", [])}

    def put_foreign_rule(self):
        path = os.path.join(self.dir, "foreign.json")
        with open(path, "w") as f:
            json.dump({"Rules": [FOREIGN]}, f)
        aws(self.moto.endpoint, "s3api", "put-bucket-lifecycle-configuration", "--bucket", self.bucket,
            "--lifecycle-configuration", "file://" + path)

    def test_prints_the_rule_without_installing_it(self):
        r = self.lodge("lifecycle", "--days", "2")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.out.startswith("<?xml"), r)
        self.assertIn("<ID>lodge-abort-incomplete-uploads</ID>", r.out)
        self.assertIn("<Prefix>lodge/</Prefix>", r.out)
        self.assertIn("<DaysAfterInitiation>2</DaysAfterInitiation>", r.out)
        self.assertNotIn("lodge-expire-pending", r.out)  # tag_state is off
        self.assertNotIn("NoncurrentVersionExpiration", r.out)  # not versioned
        self.assertIn("lifecycle --apply", r.err)
        self.assertEqual(self.rules(), {})

        j = self.lodge("--json", "lifecycle").json()
        self.assertEqual(j["format"], "s3-lifecycle-xml")
        self.assertTrue(j["can_apply"])
        self.assertFalse(j["applied"])
        self.assertIn("<DaysAfterInitiation>1</DaysAfterInitiation>", j["document"])
        self.assertIn("PutBucketLifecycleConfiguration", j["apply_hint"])
        self.assertEqual(self.rules(), {})

    def test_apply_keeps_a_foreign_rule_and_is_idempotent(self):
        self.put_foreign_rule()
        first = self.lodge("--json", "lifecycle", "--apply")
        self.assertEqual(first.rc, 0, first)
        self.assertTrue(first.json()["applied"])
        rules = self.rules()
        self.assertEqual(set(rules), {"other-tool-archive", "lodge-abort-incomplete-uploads"})
        self.assertEqual(rules["other-tool-archive"]["Filter"], {"Prefix": "logs/"})
        self.assertEqual(rules["other-tool-archive"]["Expiration"], {"Days": 365})
        self.assertEqual(rules["other-tool-archive"]["Transitions"], [{"Days": 30, "StorageClass": "GLACIER"}])
        ours = rules["lodge-abort-incomplete-uploads"]
        self.assertEqual(ours["Filter"], {"Prefix": "lodge/"})
        self.assertEqual(ours["Status"], "Enabled")
        self.assertEqual(ours["AbortIncompleteMultipartUpload"], {"DaysAfterInitiation": 1})

        # Applying again changes nothing, and prints the document the bucket already holds.
        second = self.lodge("--json", "lifecycle", "--apply")
        self.assertEqual(second.rc, 0, second)
        self.assertEqual(second.json()["document"], first.json()["document"])
        self.assertEqual(self.rules(), rules)

        # Other days replace lodge's rule, never add a second one; the foreign rule stays.
        third = self.lodge("lifecycle", "--apply", "--days", "4")
        self.assertEqual(third.rc, 0, third)
        self.assertIn("installed on", third.err)
        after = self.rules()
        self.assertEqual(set(after), {"other-tool-archive", "lodge-abort-incomplete-uploads"})
        self.assertEqual(after["other-tool-archive"], rules["other-tool-archive"])
        self.assertEqual(after["lodge-abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"],
                         {"DaysAfterInitiation": 4})

    def test_a_versioned_bucket_also_expires_noncurrent_versions(self):
        aws(self.moto.endpoint, "s3api", "put-bucket-versioning", "--bucket", self.bucket,
            "--versioning-configuration", "Status=Enabled")
        r = self.lodge("lifecycle", "--apply", "--days", "3")
        self.assertEqual(r.rc, 0, r)
        rules = self.rules()
        self.assertEqual(rules["lodge-expire-noncurrent"]["NoncurrentVersionExpiration"], {"NoncurrentDays": 3})
        self.assertEqual(rules["lodge-expire-noncurrent"]["Filter"], {"Prefix": "lodge/"})

    def test_bad_days_are_a_usage_error(self):
        for days in ("0", "-1", "x"):
            r = self.lodge("lifecycle", "--days", days)
            self.assertEqual(r.rc, 2, r)
            self.assertIn("USAGE", r.err)
        self.assertEqual(self.rules(), {})


class LifecycleFile(LodgeTestCase):
    def test_a_file_store_has_no_lifecycle_rule(self):
        store = "file://" + os.path.join(self.dir, "store")
        for args in (["lifecycle"], ["lifecycle", "--apply"], ["--json", "lifecycle"]):
            r = self.lodge("--store", store, *args, db=False)
            self.assertEqual(r.rc, 1, r)
            self.assertIn("UNSUPPORTED", r.err)
            self.assertIn("sweep", r.err)
            self.assertEqual(r.out.strip() if "--json" not in args else json.loads(r.out)["error"]["code"],
                             "" if "--json" not in args else "UNSUPPORTED")

TAG_CONFIG = {
    "tag_state": True,
    "policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}},
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}
AFTER_DEADLINE = "+20s"  # past deadline (10s) + grace (5s)


class LifecycleTagState(S3TestCase):
    """With "tag_state": true the S3 store tags what it puts and the backstop rule expires
    what is still pending; sweep leaves an object tagged committed alone."""

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(TAG_CONFIG))
        self.rebind({})  # the ledger records the tagging mode its hosts use

    def tags(self, key):
        got = aws(self.moto.endpoint, "s3api", "get-object-tagging", "--bucket", self.bucket, "--key", key)
        return {t["Key"]: t["Value"] for t in got["TagSet"]}

    def exists(self, key):
        return aws(self.moto.endpoint, "s3api", "head-object", "--bucket", self.bucket, "--key", key,
                   check=False) is not None

    def upload(self, name, data, env=None):
        r = self.lodge("upload", "--json", self.write(name, data), env=env)
        return r, r.json_lines()[0]

    def key_of(self, rid):
        return self.sql("SELECT object_key FROM file_upload WHERE id = ?", (rid,))[0][0]

    def task_status(self, rid):
        return self.sql("SELECT status FROM cleanup_task WHERE record_id = ?", (rid,))[0][0]

    def failed_upload(self, name, data):
        """An upload whose object landed (tagged pending) but whose confirm failed, then
        repaired: an UPLOAD_FAILED row whose cleanup is due."""
        r, res = self.upload(name, data, env={"LODGE_FAILPOINTS": "upload.confirm=error"})
        self.assertEqual(res["outcome"], "failed", r)
        key = self.key_of(res["id"])
        self.assertEqual(self.tags(key), {"lodge-state": "pending"})
        rep = self.lodge("repair", "--json", later=AFTER_DEADLINE)
        self.assertEqual(rep.rc, 0, rep)
        return res["id"], key

    def test_an_uploaded_object_ends_tagged_committed(self):
        small, res = self.upload("a.txt", "tagged\n")
        self.assertEqual(res["outcome"], "active", small)
        self.assertEqual(self.tags(self.key_of(res["id"])), {"lodge-state": "committed"})
        self.assertEqual(self.task_status(res["id"]), "IGNORED")
        big, res = self.upload("big.bin", "x" * (7 << 20))  # multipart: tagged at create
        self.assertEqual(res["outcome"], "active", big)
        self.assertEqual(self.tags(self.key_of(res["id"])), {"lodge-state": "committed"})
        # The id marker under .lodge/ is lodge's own and never tagged pending.
        for key in self.objects(metadata=True):
            if "/.lodge/" in key:
                self.assertNotEqual(self.tags(key).get("lodge-state"), "pending", key)

        r = self.lodge("--json", "lifecycle", "--apply")
        self.assertEqual(r.rc, 0, r)
        rules = {x["ID"]: x for x in aws(self.moto.endpoint, "s3api", "get-bucket-lifecycle-configuration",
                                         "--bucket", self.bucket)["Rules"]}
        pending = rules["lodge-expire-pending"]
        self.assertEqual(pending["Filter"], {"And": {"Prefix": "lodge/",
                                                     "Tags": [{"Key": "lodge-state", "Value": "pending"}]}})
        self.assertEqual(pending["Expiration"], {"Days": 1})
        self.assertIn("lodge-abort-incomplete-uploads", rules)

    def test_a_failed_upload_is_deleted_by_sweep(self):
        rid, key = self.failed_upload("a.txt", "doomed\n")
        s = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(s.rc, 0, s)
        self.assertEqual(s.json()["deleted"], 1, s)
        self.assertFalse(self.exists(key))

    def test_an_object_tagged_committed_is_not_deleted_by_a_stale_task(self):
        rid, key = self.failed_upload("a.txt", "committed by hand\n")
        aws(self.moto.endpoint, "s3api", "put-object-tagging", "--bucket", self.bucket, "--key", key,
            "--tagging", "TagSet=[{Key=lodge-state,Value=committed}]")
        s = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(s.rc, 0, s)
        self.assertEqual((s.json()["deleted"], s.json()["kept"]), (0, 1), s)
        self.assertIn("lodge-state=committed", s.err)
        self.assertTrue(self.exists(key))
        self.assertEqual(self.tags(key), {"lodge-state": "committed"})
        self.assertEqual(self.task_status(rid), "IGNORED")
        # Reconcile reads the failed record's tag (S3 lists none) and says so, not "leftover"
        # for ever; --apply tags it pending again and queues it, and sweep deletes it.
        rec = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual((rec.json()["found"]["tag_mismatch"], rec.json()["found"]["leftover"]), (1, 0), rec)
        ap = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(ap.json()["applied"], 1, ap)
        self.assertEqual(self.tags(key), {"lodge-state": "pending"})
        self.assertEqual(self.lodge("sweep", "--json", later="+1h").json()["deleted"], 1)
        self.assertFalse(self.exists(key))


if __name__ == "__main__":
    main()
