"""`lodge doctor` says what would make a scheduled run fail, one ok/warn/fail line per check
with the fix, exit 1 when a check failed, and the same in --json. Each failure is provoked
for real: a deleted bucket, an endpoint nobody listens on, a ledger of a newer schema, a
missing ledger, a clock run ahead under libfaketime, deletes and lifecycle reads refused by a
proxy, a bucket versioned by the aws CLI, a wrong secret refused by a moto that checks
signatures."""

import os
import re
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (AzureTestCase, FaultProxy, LodgeTestCase, S3TestCase,  # noqa: E402
                       SCHEMA_VERSION, SignatureCheckingMoto, aws, free_port, main)


class Doctor(S3TestCase):

    def doctor(self, *args, **kw):
        return self.lodge("doctor", *args, **kw)

    def line(self, r, name):
        """The one line of check `name` in doctor's text output."""
        lines = [l for l in r.out.splitlines() if re.match(r"^(ok|warn|fail) +" + re.escape(name) + ": ", l)]
        self.assertEqual(len(lines), 1, r)
        return lines[0]

    def checks(self, r):
        return {c["name"]: c for c in r.json()["checks"]}

    def versioning(self, status):
        aws(self.moto.endpoint, "s3api", "put-bucket-versioning", "--bucket", self.bucket,
            "--versioning-configuration", f"Status={status}")

    def apply_lifecycle(self):
        r = self.lodge("lifecycle", "--apply")
        self.assertEqual(r.rc, 0, r)

    def test_all_ok(self):
        # With the lifecycle backstop installed, nothing is left to warn about.
        self.apply_lifecycle()
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)
        for l in r.out.splitlines():
            self.assertTrue(l.startswith("ok    "), r)
        self.assertRegex(self.line(r, "ledger.location"), r"^ok    ledger.location: .*ledger\.db \(SQLite\)$")
        self.assertEqual(self.line(r, "ledger.schema"), f"ok    ledger.schema: schema version {SCHEMA_VERSION} (this lodge's)")
        self.assertEqual(self.line(r, "ledger.integrity"), "ok    ledger.integrity: PRAGMA quick_check: ok")
        self.assertIn(f"bound to s3://{self.bucket}/lodge", self.line(r, "ledger.binding"))
        self.assertRegex(self.line(r, "store.clock"), r"^ok    store.clock: this host's clock is [0-9] s ")
        self.assertIn("answered a LIST under .lodge/", self.line(r, "store.reachable"))
        self.assertRegex(self.line(r, "store.put"), r"^ok    store.put: PUT lodge/\.lodge/doctor-[0-9a-f-]+ permitted$")
        self.assertRegex(self.line(r, "store.delete"), r"^ok    store.delete: DELETE lodge/\.lodge/doctor-")
        self.assertEqual(self.line(r, "store.staged_listing"),
                         "ok    store.staged_listing: incomplete multipart uploads can be listed")
        self.assertEqual(self.line(r, "store.versioning"), "ok    store.versioning: versioning off")
        self.assertEqual(self.line(r, "store.lifecycle"), "ok    store.lifecycle: lodge's lifecycle backstop is "
                                                          "installed (rules: lodge-abort-incomplete-uploads)")
        # The probe is gone: nothing of doctor's is left in the bucket.
        self.assertEqual([k for k in self.objects(metadata=True) if "doctor-" in k], [])

        j = self.doctor("--json")
        self.assertEqual(j.rc, 0, j)
        doc = j.json()
        self.assertIs(doc["ok"], True)
        for c in doc["checks"]:
            self.assertEqual(sorted(c), ["fix", "message", "name", "status"])
            self.assertEqual(c["status"], "ok", c)
            self.assertEqual(c["fix"], "")
        self.assertEqual(self.checks(j)["ledger.schema"]["message"], f"schema version {SCHEMA_VERSION} (this lodge's)")

    def test_missing_bucket(self):
        for k in self.objects(metadata=True):
            self.delete_object(k)
        self.s3.delete_bucket(Bucket=self.bucket)
        r = self.doctor()
        self.assertEqual(r.rc, 1, r)
        l = self.line(r, "store.reachable")
        self.assertTrue(l.startswith(f"fail  store.reachable: s3://{self.bucket}/lodge: "), l)
        self.assertIn("NoSuchBucket", l)
        self.assertIn("; fix: create the bucket, or correct --store / LODGE_STORE", l)
        # The ledger is fine: only the store fails, and nothing after reachability is tried.
        self.assertTrue(self.line(r, "ledger.schema").startswith("ok    "), r)
        self.assertNotIn("store.put", r.out)
        j = self.doctor("--json")
        self.assertEqual(j.rc, 1, j)
        self.assertIs(j.json()["ok"], False)
        self.assertEqual(self.checks(j)["store.reachable"]["status"], "fail")

    def test_wrong_endpoint(self):
        endpoint = f"http://127.0.0.1:{free_port()}"
        r = self.doctor(env={"AWS_ENDPOINT_URL": endpoint, "AWS_MAX_ATTEMPTS": "1"})
        self.assertEqual(r.rc, 1, r)
        l = self.line(r, "store.reachable")
        self.assertTrue(l.startswith("fail  store.reachable: "), l)
        self.assertIn("STORAGE_UNAVAILABLE", l)
        self.assertIn("; fix: check --endpoint / AWS_ENDPOINT_URL", l)
        self.assertTrue(self.line(r, "store.clock").startswith(f"warn  store.clock: not checked: {endpoint}/"), r)
        # The ledger serves the store at moto's endpoint, not this one.
        b = self.line(r, "ledger.binding")
        self.assertTrue(b.startswith("fail  ledger.binding: the ledger "), b)
        self.assertIn(f"is bound to the store s3://{self.bucket}/lodge at {self.moto.endpoint}", b)

    def test_newer_schema(self):
        con = sqlite3.connect(self.db)
        con.execute("PRAGMA user_version = 99")
        con.commit()
        con.close()
        r = self.doctor()
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(self.line(r, "ledger.schema"),
                         f"fail  ledger.schema: schema version 99, newer than this lodge's {SCHEMA_VERSION}: this lodge refuses to "
                         "open it; fix: upgrade lodge to the version that wrote this ledger (or newer)")
        self.assertNotIn("ledger.binding", r.out)
        # The store is checked all the same.
        self.assertTrue(self.line(r, "store.delete").startswith("ok    "), r)

    def test_missing_ledger(self):
        missing = os.path.join(self.dir, "nowhere.db")
        r = self.lodge("--db", missing, "doctor", db=False)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(self.line(r, "ledger.location"),
                         f"fail  ledger.location: no ledger at {missing}; fix: create it with "
                         f"`lodge --db {missing} init`, or point --db / LODGE_DB at the ledger")
        self.assertFalse(os.path.exists(missing))

    def test_skewed_clock(self):
        r = self.doctor(later="+8m")
        self.assertEqual(r.rc, 0, r)
        l = self.line(r, "store.clock")
        self.assertRegex(l, r"^warn  store.clock: this host's clock is 4[78][0-9] s ahead of the store's \(Date: ")
        self.assertIn("over 5 minutes, signed requests fail past 15; fix: synchronize this host's clock", l)

        r = self.doctor("--json", later="+20m")
        self.assertEqual(r.rc, 1, r)
        c = self.checks(r)["store.clock"]
        self.assertEqual(c["status"], "fail")
        self.assertRegex(c["message"], r"^this host's clock is 1[12][0-9]{2} s ahead of the store's")
        self.assertIn("signed requests are refused past 15 minutes", c["message"])

    def test_delete_denied(self):
        proxy = FaultProxy(self.server_port, self.dir)
        self.addCleanup(proxy.stop)
        env = self.endpoint_env(proxy.endpoint)
        # A ledger bound to the store as seen through the proxy.
        self.db = os.path.join(self.dir, "proxied.db")
        self.init(env=env)
        proxy.set_rules([{"method": "DELETE", "path_contains": "/.lodge/doctor-", "action": "403", "times": 100}])
        r = self.doctor(env=env)
        self.assertEqual(r.rc, 1, r)
        self.assertTrue(self.line(r, "store.put").startswith("ok    "), r)
        l = self.line(r, "store.delete")
        self.assertRegex(l, r"^fail  store.delete: DELETE lodge/\.lodge/doctor-[0-9a-f-]+: .*\(ACCESS_DENIED, "
                            r"AccessDenied\); sweep and repair cannot remove objects; fix: lodge needs s3:DeleteObject")
        self.assertTrue(self.line(r, "ledger.binding").startswith("ok    "), r)
        self.assertTrue(any(e["action"] == "403" for e in proxy.entries()))

    def test_no_lifecycle_backstop(self):
        no_backstop = ("warn  store.lifecycle: no lifecycle backstop{}: objects a crashed run left are removed "
                       "only by sweep; fix: `lodge lifecycle --apply` installs it (keeping other tools' rules)")
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)  # a warning, not a failure
        self.assertEqual(self.line(r, "store.lifecycle"), no_backstop.format(""))
        self.assertEqual(self.line(r, "store.versioning"), "ok    store.versioning: versioning off")
        j = self.doctor("--json")
        self.assertEqual(j.rc, 0, j)
        self.assertIs(j.json()["ok"], True)
        c = self.checks(j)["store.lifecycle"]
        self.assertEqual(c["status"], "warn")
        self.assertEqual(c["message"], "no lifecycle backstop: objects a crashed run left are removed only by sweep")
        self.assertEqual(c["fix"], "`lodge lifecycle --apply` installs it (keeping other tools' rules)")

        # Another tool's rule is not lodge's backstop.
        aws(self.moto.endpoint, "s3api", "put-bucket-lifecycle-configuration", "--bucket", self.bucket,
            "--lifecycle-configuration",
            '{"Rules":[{"ID":"logs-expire","Filter":{"Prefix":"logs/"},"Status":"Enabled","Expiration":{"Days":30}}]}')
        r = self.doctor()
        self.assertEqual(self.line(r, "store.lifecycle"),
                         no_backstop.format(" (the bucket has 1 rule of another tool)"))

        self.apply_lifecycle()
        j = self.doctor("--json")
        c = self.checks(j)["store.lifecycle"]
        self.assertEqual(c["status"], "ok", c)
        self.assertEqual(c["message"],
                         "lodge's lifecycle backstop is installed (rules: lodge-abort-incomplete-uploads)")
        self.assertEqual(c["fix"], "")

    def test_versioned_bucket(self):
        self.versioning("Enabled")
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.line(r, "store.versioning"),
                         "warn  store.versioning: versioning Enabled: deleted objects leave noncurrent versions; "
                         "lodge removes them only if it can list versions; fix: install the lifecycle backstop "
                         "(`lodge lifecycle --apply`) to expire noncurrent versions")
        self.assertTrue(self.line(r, "store.lifecycle").startswith("warn  store.lifecycle: no lifecycle backstop"), r)
        j = self.doctor("--json")
        c = self.checks(j)["store.versioning"]
        self.assertEqual(c["status"], "warn")
        self.assertEqual(c["message"], "versioning Enabled: deleted objects leave noncurrent versions; lodge removes "
                                       "them only if it can list versions")

        # On a versioned bucket the backstop has the noncurrent-version rule.
        self.apply_lifecycle()
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.line(r, "store.versioning"),
                         "ok    store.versioning: versioning Enabled; lodge's lifecycle rule lodge-expire-noncurrent "
                         "expires noncurrent versions")
        self.assertEqual(self.line(r, "store.lifecycle"),
                         "ok    store.lifecycle: lodge's lifecycle backstop is installed (rules: "
                         "lodge-abort-incomplete-uploads, lodge-expire-noncurrent)")
        j = self.doctor("--json")
        self.assertEqual({n: self.checks(j)[n]["status"] for n in ("store.versioning", "store.lifecycle")},
                         {"store.versioning": "ok", "store.lifecycle": "ok"})

    def test_versioning_turned_on_after_the_backstop(self):
        self.apply_lifecycle()  # while the bucket is not versioned: no noncurrent-version rule
        self.versioning("Suspended")
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.line(r, "store.versioning"),
                         "warn  store.versioning: versioning Suspended: the versions kept while it was enabled stay "
                         "as noncurrent versions; lodge removes them only if it can list versions; fix: run `lodge "
                         "lifecycle --apply` again: the installed backstop has no lodge-expire-noncurrent rule (it was "
                         "installed while the bucket was not versioned)")
        self.assertTrue(self.line(r, "store.lifecycle").startswith("ok    "), r)
        self.apply_lifecycle()
        c = self.checks(self.doctor("--json"))["store.versioning"]
        self.assertEqual(c["status"], "ok", c)
        self.assertEqual(c["message"], "versioning Suspended; lodge's lifecycle rule lodge-expire-noncurrent expires "
                                       "noncurrent versions")

    def test_lifecycle_and_versioning_reads_denied(self):
        proxy = FaultProxy(self.server_port, self.dir)
        self.addCleanup(proxy.stop)
        env = self.endpoint_env(proxy.endpoint)
        self.db = os.path.join(self.dir, "proxied.db")
        self.init(env=env)
        proxy.set_rules([{"method": "GET", "path_contains": "?lifecycle", "action": "403", "times": 100},
                         {"method": "GET", "path_contains": "?versioning", "action": "403", "times": 100}])
        r = self.doctor(env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertRegex(self.line(r, "store.lifecycle"),
                         r"^warn  store.lifecycle: the bucket's lifecycle rules cannot be read: .*\(ACCESS_DENIED, "
                         r"AccessDenied\); fix: allow s3:GetLifecycleConfiguration to check the backstop "
                         r"\(`lodge lifecycle --apply` installs it with s3:PutLifecycleConfiguration\)$")
        self.assertRegex(self.line(r, "store.versioning"),
                         r"^warn  store.versioning: the bucket's versioning cannot be read: .*\(ACCESS_DENIED, "
                         r"AccessDenied\); fix: allow s3:GetBucketVersioning to check it")
        j = self.doctor("--json", env=env)
        self.assertIs(j.json()["ok"], True)
        self.assertIn("s3:GetLifecycleConfiguration", self.checks(j)["store.lifecycle"]["fix"])
        for what in ("?lifecycle", "?versioning"):
            self.assertTrue(any(e["action"] == "403" and what in e["path"] for e in proxy.entries()), what)


class DoctorAgainstSignatureCheckingMoto(LodgeTestCase):
    """A wrong secret, refused by a server that checks signatures: the right one passes the same
    checks, so the failure is the secret's."""

    def test_wrong_secret(self):
        moto = SignatureCheckingMoto()
        self.addCleanup(moto.stop)
        key_id, secret = moto.user_with_bucket("signed")
        self.env.update({"LODGE_STORE": "s3://signed/lodge", "AWS_ENDPOINT_URL": moto.endpoint,
                         "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "LODGE_OWNER": "ci"})
        self.init()
        good = self.lodge("doctor")
        self.assertIn("ok    store.reachable: s3://signed/lodge answered a LIST under .lodge/", good.out, good)
        self.assertTrue(self.line(good, "store.delete").startswith("ok    "), good)

        wrong = "not-the-secret"
        r = self.lodge("doctor", env={"AWS_SECRET_ACCESS_KEY": wrong})
        self.assertEqual(r.rc, 1, r)
        l = self.line(r, "store.reachable")
        self.assertRegex(l, r"^fail  store.reachable: s3://signed/lodge: .*\(ACCESS_DENIED, SignatureDoesNotMatch\); "
                            r"fix: check the credentials: the store computed another signature")
        self.assertNotIn("store.put", r.out)
        self.assertNotIn(wrong, r.out + r.err)
        j = self.lodge("doctor", "--json", env={"AWS_SECRET_ACCESS_KEY": wrong})
        self.assertEqual(j.rc, 1, j)
        self.assertIs(j.json()["ok"], False)
        c = {c["name"]: c for c in j.json()["checks"]}["store.reachable"]
        self.assertEqual(c["status"], "fail")
        self.assertIn("SignatureDoesNotMatch", c["message"])
        self.assertTrue(c["fix"].startswith("check the credentials"), c)

    line = Doctor.line


class DoctorOnAzure(AzureTestCase):
    """Azure's lifecycle policy is the account's, out of a storage key's reach: the line says
    so and how to install it; there is no versioning line."""

    line = Doctor.line

    def test_lifecycle_policy_not_readable(self):
        r = self.lodge("doctor")
        self.assertEqual(r.rc, 0, r)
        l = self.line(r, "store.lifecycle")
        self.assertTrue(l.startswith("ok    store.lifecycle: not checked: lodge cannot read the lifecycle policy of "
                                     "devstoreaccount1 (the account's management policy: a storage key cannot read "
                                     "it); if the backstop is not installed yet (`lodge lifecycle` prints it): "), l)
        self.assertIn("az storage account management-policy create --account-name devstoreaccount1", l)
        self.assertNotIn("store.versioning", r.out)
        c = {c["name"]: c for c in self.lodge("doctor", "--json").json()["checks"]}["store.lifecycle"]
        self.assertEqual((c["status"], c["fix"]), ("ok", ""))


if __name__ == "__main__":
    main()
