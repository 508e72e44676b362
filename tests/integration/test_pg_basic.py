"""lodge with a PostgreSQL ledger, end to end: the real binary, a throwaway PostgreSQL 15
(tests/harness/pgserver.py, one per class, a fresh database per test) and moto. init,
upload, status (its "backend" object), sweep and list, the ledger named by --db URL or by
libpq's PG* variables, and the errors of a ledger that is missing or unreachable."""

import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import SCHEMA_VERSION, S3TestCase, main  # noqa: E402
from pgserver import PgServer  # noqa: E402

CONFIG = {
    "policies": {"default": {"max_size": "64MiB", "deadline": "60s", "grace": "1s"}},
    "sweep": {"backoff_base": "100ms", "backoff_max": "1s"},
}
AFTER_DEADLINE = "+120s"


class PgBasic(S3TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg = PgServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.pg.stop()
        super().tearDownClass()

    # The ledger is a PostgreSQL database: LodgeTestCase passes `--db self.db` to every run.
    @property
    def db(self):
        return self._pg_url

    @db.setter
    def db(self, _path):
        pass

    def setUp(self):
        self.dbname = "it_" + uuid.uuid4().hex[:16]
        self._pg_url = self.pg.create_database(self.dbname)
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))

    def q(self, query):
        return self.pg.sql(query, db=self.dbname)

    def upload(self, *paths, env=None):
        r = self.lodge("upload", "--json", *paths, env=env)
        lines = r.json_lines()
        return r, lines[:-1]

    def test_init_upload_status_sweep_list(self):
        self.assertEqual(self.q("SELECT value FROM ledger_meta WHERE key = 'schema_version'"), [[str(SCHEMA_VERSION)]])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "ledger.db")))
        again = self.lodge("init")  # a second init finds the schema and changes nothing
        self.assertEqual(again.rc, 0, again)
        a = self.write("a.txt", "alpha\n")
        b = self.write("sub/b.txt", "beta\n")
        r, files = self.upload(a, b)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(sorted(f["outcome"] for f in files), ["active", "active"])
        r, files = self.upload(self.write("copy.txt", "alpha\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(files[0]["outcome"], "duplicate")
        self.assertEqual(self.q("SELECT upload_status, count(*) FROM file_upload GROUP BY 1"), [["ACTIVE", "2"]])
        self.assertEqual(len(self.objects()), 2)

        # A crash after the reservation leaves an UPLOADING row and its PENDING task; sweep
        # (after the deadline) finishes it.
        c = self.write("c.txt", "crash\n")
        r = self.lodge("upload", "--json", c, env={"LODGE_FAILPOINTS": "upload.after_reserve=crash"})
        self.assertEqual(r.rc, -9, r)
        self.assertEqual(self.q("SELECT count(*) FROM cleanup_task WHERE status = 'PENDING'"), [["1"]])
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual(sw.json()["deleted"], 1, sw)
        # The upload failed by its deadline: one verify pass is owed, later.
        self.assertEqual(sw.json()["verify_scheduled"], 1, sw)
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.json()["verified"], 1, sw)
        self.assertEqual(self.q("SELECT f.upload_status, f.is_deleted, t.status FROM file_upload f "
                                "JOIN cleanup_task t ON t.record_id = f.id WHERE f.original_name = 'c.txt'"),
                         [["UPLOAD_FAILED", "1", "SUCCESS"]])

        st = self.lodge("status", "--json")
        self.assertEqual(st.rc, 0, st)
        status = st.json()
        self.assertNotIn("sqlite", status)
        backend = status["backend"]
        self.assertIs(backend["connected"], True)
        self.assertEqual(backend["schema_version"], SCHEMA_VERSION)
        self.assertEqual(backend["database"], self.dbname)
        self.assertEqual(backend["port"], self.pg.port)
        self.assertTrue(backend["server_version"].startswith("15."), backend)

        listed = self.lodge("list", "--json")
        self.assertEqual(listed.rc, 0, listed)
        names = sorted(x["name"] for x in listed.json_lines())
        self.assertEqual(names, ["a.txt", "b.txt"])

    def test_libpq_environment_and_no_password_in_output(self):
        # The URL names only the database; host, port and user come from PG* variables.
        env = {"PGHOST": "127.0.0.1", "PGPORT": str(self.pg.port), "PGUSER": "lodge"}
        # (no --db: LODGE_DB carries the location)
        r = self.lodge("status", "--json", env=dict(env, LODGE_DB=f"postgres:///{self.dbname}"), db=False)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json()["backend"]["database"], self.dbname)
        # A password in the URL (this server trusts every local connection) is never shown.
        with_pw = self.db.replace("lodge@", "lodge:hunter2secret@")
        for args in (["status", "--json"], ["list"], ["status"], ["config"]):
            r = self.lodge("--db", with_pw, *args, db=False)
            self.assertEqual(r.rc, 0, r)
            self.assertNotIn("hunter2secret", r.out + r.err)

    def test_missing_ledger_and_unreachable_server(self):
        empty = self.pg.create_database(self.dbname + "_empty")
        r = self.lodge("--db", empty, "upload", self.write("x.txt", "x\n"), db=False)
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("LEDGER_NOT_FOUND", r.err)
        self.assertIn("lodge init", r.err)
        # Nothing listens on the port of a stopped server: LEDGER_UNAVAILABLE, exit 3.
        with PgServer() as other:
            gone = other.create_database("gone")
        r = self.lodge("--db", gone, "status", db=False)
        self.assertEqual(r.rc, 3, r)
        self.assertIn("LEDGER_UNAVAILABLE", r.err)
        self.assertIn(gone.split("//")[1].split("/")[0], r.err)


if __name__ == "__main__":
    main()
