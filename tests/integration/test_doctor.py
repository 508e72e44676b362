"""`lodge doctor` says what would make a scheduled run fail, one ok/warn/fail line per check
with the fix, exit 1 when a check failed, and the same in --json. Each failure is provoked
for real: a deleted bucket, an endpoint nobody listens on, a ledger of a newer schema, a
missing ledger, a clock run ahead under libfaketime, deletes refused by a proxy."""

import os
import re
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import FaultProxy, S3TestCase, free_port, main  # noqa: E402


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

    def test_all_ok(self):
        r = self.doctor()
        self.assertEqual(r.rc, 0, r)
        for l in r.out.splitlines():
            self.assertTrue(l.startswith("ok    "), r)
        self.assertRegex(self.line(r, "ledger.location"), r"^ok    ledger.location: .*ledger\.db \(SQLite\)$")
        self.assertEqual(self.line(r, "ledger.schema"), "ok    ledger.schema: schema version 6 (this lodge's)")
        self.assertEqual(self.line(r, "ledger.integrity"), "ok    ledger.integrity: PRAGMA quick_check: ok")
        self.assertIn(f"bound to s3://{self.bucket}/lodge", self.line(r, "ledger.binding"))
        self.assertRegex(self.line(r, "store.clock"), r"^ok    store.clock: this host's clock is [0-9] s ")
        self.assertIn("answered a LIST under .lodge/", self.line(r, "store.reachable"))
        self.assertRegex(self.line(r, "store.put"), r"^ok    store.put: PUT lodge/\.lodge/doctor-[0-9a-f-]+ permitted$")
        self.assertRegex(self.line(r, "store.delete"), r"^ok    store.delete: DELETE lodge/\.lodge/doctor-")
        self.assertEqual(self.line(r, "store.staged_listing"),
                         "ok    store.staged_listing: incomplete multipart uploads can be listed")
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
        self.assertEqual(self.checks(j)["ledger.schema"]["message"], "schema version 6 (this lodge's)")

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
                         "fail  ledger.schema: schema version 99, newer than this lodge's 6: this lodge refuses to "
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


if __name__ == "__main__":
    main()
