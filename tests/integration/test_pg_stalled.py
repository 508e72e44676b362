"""A PostgreSQL ledger that stops answering: its server SIGSTOPped mid-run (the kernel still
accepts connections and acknowledges what is sent; nothing answers, and no statement_timeout
fires), or a COMMIT that never returns. upload, sweep, repair and status end with
LEDGER_UNAVAILABLE (exit 3) within the bound ledger_timeout sets, saying which ledger and
which timeout; an upload whose confirm is not known to have committed is reported failed,
never active, and nothing is deleted on its account; once the server runs again, repair and
sweep converge and the invariants hold. Real PostgreSQL (tests/harness/pgserver.py, one per
class, a database per test), moto, real SIGSTOP and SIGCONT."""

import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, check_invariants, converge, main, wait_until  # noqa: E402
from pgserver import PgServer  # noqa: E402

CONFIG = {
    "ledger_timeout": "2s",
    "fail_killed_runs": False,  # repair takes the crashed upload's row by its deadline (repair_row)
    "policies": {"default": {"max_size": "64MiB", "deadline": "60s", "grace": "1s"}},
    "sweep": {"backoff_base": "100ms", "backoff_max": "1s"},
}
# Each run must end well within this many seconds (ledger_timeout 2 s: a connect or one
# answer of 2 s plus the client's 2 s margin); a bound, not a timing test.
CEILING = 20
AFTER_DEADLINE = "+5m"


class PgStalled(S3TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.pg = PgServer().start()

    @classmethod
    def tearDownClass(cls):
        cls.pg.stop()
        super().tearDownClass()

    # The ledger is this class's server: LodgeTestCase passes `--db self.db` to every run.
    @property
    def db(self):
        return self._pg_url

    @db.setter
    def db(self, _path):
        pass

    def setUp(self):
        self.dbname = "st_" + uuid.uuid4().hex[:16]
        self._pg_url = self.pg.create_database(self.dbname)
        super().setUp()
        self.ledger_backend = "postgres"  # sql() and the invariant checks read it as such
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.addCleanup(self.pg.resume)  # never leave the server stopped

    def fired(self, log):
        return os.path.exists(log) and os.path.getsize(log) > 0

    def held(self, *args, point, later=None):
        """Starts lodge held at failpoint `point`; returns (process, gate)."""
        gate, log = os.path.join(self.dir, f"gate-{point}"), os.path.join(self.dir, f"fp-{point}.log")
        p = self.spawn(*args, env={"LODGE_FAILPOINTS": f"{point}=pause:{gate}", "LODGE_FAILPOINTS_LOG": log},
                       later=later)
        wait_until(lambda: self.fired(log), what=f"lodge held at {point}")
        return p, gate

    def release_stalled(self, p, gate):
        """Stops the server, lets the held run go on, and waits for it to end; its exit
        status, stdout, stderr and how long it took."""
        self.pg.pause()
        started = time.monotonic()
        with open(gate, "w"):
            pass
        out, err = p.communicate(timeout=120)
        return p.returncode, out, err, time.monotonic() - started

    def resume(self):
        """Continues the server and waits until the stalled runs' backends have read what they
        were sent (a COMMIT among it, perhaps) and the close, and are gone."""
        self.pg.resume()
        wait_until(lambda: not self.sql("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                        "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"),
                   what="the stalled runs' backends to end")

    def crashed_upload(self):
        """An upload killed after its reservation: an UPLOADING row, its task pending."""
        r = self.lodge("upload", self.write("crashed.txt", "crashed\n"),
                       env={"LODGE_FAILPOINTS": "upload.after_reserve=crash"})
        self.assertEqual(r.rc, -9, r)
        self.assertEqual(self.sql("SELECT upload_status FROM file_upload"), [("UPLOADING",)])

    def test_an_upload_whose_confirm_gets_no_answer_ends_within_the_bound(self):
        p, gate = self.held("upload", "--json", self.write("a.txt", "alpha\n"), point="upload.after_put")
        rc, out, err, took = self.release_stalled(p, gate)
        self.assertLess(took, CEILING, err)
        self.assertEqual(rc, 3, err)
        [result] = [json.loads(x) for x in out.splitlines() if '"outcome"' in x]
        self.assertEqual(result["outcome"], "failed")
        self.assertEqual(result["error"]["code"], "LEDGER_UNAVAILABLE")
        message = result["error"]["message"]
        self.assertTrue(message.startswith(self.db + ": the PostgreSQL ledger did not answer"), message)
        self.assertIn("ledger_timeout 2s", message)
        self.resume()
        # Stored, never confirmed: the object stays for repair and sweep to judge.
        [(rid, state)] = self.sql("SELECT id, upload_status FROM file_upload")
        self.assertEqual(state, "UPLOADING")
        self.assertEqual(list(self.objects()), [result["object_key"]])
        converge(self)
        check_invariants(self)
        self.assertEqual(self.sql("SELECT upload_status, is_deleted FROM file_upload"), [("UPLOAD_FAILED", 1)])

    def test_repair_and_sweep_stalled_mid_run_end_within_the_bound(self):
        self.crashed_upload()
        # repair, held inside its transaction (the row locked, the task made due), then its
        # COMMIT unanswered: whether it committed is not known, and said so.
        p, gate = self.held("repair", point="repair.before_commit", later=AFTER_DEADLINE)
        rc, _, err, took = self.release_stalled(p, gate)
        self.assertLess(took, CEILING, err)
        self.assertEqual(rc, 3, err)
        self.assertIn(f"lodge: error: {self.db}: lost the connection to the PostgreSQL ledger during COMMIT "
                      "(no answer within 4s: ledger_timeout 2s plus 2s; lodge closed the connection): the "
                      "transaction either committed whole or not at all (LEDGER_UNAVAILABLE)", err)
        self.resume()
        # sweep, held after its claim, then no answer to its decision.
        p, gate = self.held("sweep", point="sweep.after_claim", later=AFTER_DEADLINE)
        rc, _, err, took = self.release_stalled(p, gate)
        self.assertLess(took, CEILING, err)
        self.assertEqual(rc, 3, err)
        self.assertIn(f"lodge: error: {self.db}: the PostgreSQL ledger did not answer (no answer within 4s: "
                      "ledger_timeout 2s plus 2s", err)
        self.assertIn("(LEDGER_UNAVAILABLE)", err)
        self.resume()
        converge(self)
        check_invariants(self)
        self.assertEqual(self.sql("SELECT upload_status, is_deleted FROM file_upload"), [("UPLOAD_FAILED", 1)])

    def test_a_stopped_server_fails_status_and_a_new_upload_within_the_bound(self):
        self.pg.pause()
        for args in (["status"], ["upload", self.write("b.txt", "beta\n")]):
            started = time.monotonic()
            r = self.lodge(*args)
            self.assertLess(time.monotonic() - started, CEILING, r)
            self.assertEqual(r.rc, 3, r)
            self.assertIn(f"lodge: error: {self.db}: cannot connect to the PostgreSQL ledger: ", r.err)
            self.assertIn("timeout expired (connect_timeout 2s, from ledger_timeout 2s) (LEDGER_UNAVAILABLE)", r.err)
        # libpq's own variable wins over ledger_timeout.
        r = self.lodge("status", env={"PGCONNECT_TIMEOUT": "3"})
        self.assertEqual(r.rc, 3, r)
        self.assertIn("(connect_timeout 3s, from PGCONNECT_TIMEOUT or the location)", r.err)
        self.resume()
        st = self.lodge("status", "--json")
        self.assertEqual(st.rc, 0, st)
        backend = st.json()["backend"]
        self.assertEqual((backend["statement_timeout"], backend["connect_timeout"], backend["answer_timeout"]),
                         ("2s", "2s", "4s"))
        converge(self)
        check_invariants(self)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])

    def test_ledger_timeout_from_the_file_the_environment_and_the_flag_reaches_the_session(self):
        def seen(*args, env=None):
            cfg = self.lodge(*args, "config", "--json", env=env)
            st = self.lodge(*args, "status", "--json", env=env)
            self.assertEqual((cfg.rc, st.rc), (0, 0), (cfg, st))
            b = st.json()["backend"]
            return cfg.json()["ledger_timeout"], b["statement_timeout"], b["connect_timeout"], b["answer_timeout"]
        self.assertEqual(seen(), ("2s", "2s", "2s", "4s"))
        self.assertEqual(seen(env={"LODGE_LEDGER_TIMEOUT": "5s"}), ("5s", "5s", "5s", "7s"))
        self.assertEqual(seen("--ledger-timeout", "1500ms", env={"LODGE_LEDGER_TIMEOUT": "5s"}),
                         ("1500ms", "1500ms", "2s", "3500ms"))
        r = self.lodge("--ledger-timeout", "0", "status")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--ledger-timeout: '0' is too short (more than 0) (USAGE)", r.err)

    def test_a_commit_that_never_answers_is_ambiguous_and_never_reported_active(self):
        # The server alive but its COMMIT stuck (a deferred trigger sleeping in it), and the
        # server's own timeouts off (PGOPTIONS wins over ledger_timeout): the client's bound
        # alone ends the wait.
        self.sql_exec("""
            CREATE FUNCTION stuck_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_sleep(600); RETURN NULL; END $$;
            CREATE CONSTRAINT TRIGGER stuck_commit AFTER UPDATE ON file_upload DEFERRABLE INITIALLY DEFERRED
              FOR EACH ROW WHEN (NEW.upload_status = 'ACTIVE') EXECUTE FUNCTION stuck_commit();""")
        started = time.monotonic()
        r = self.lodge("upload", "--json", self.write("c.txt", "gamma\n"),
                       env={"PGOPTIONS": "-c statement_timeout=0 -c lock_timeout=0"})
        self.assertLess(time.monotonic() - started, CEILING, r)
        self.assertEqual(r.rc, 3, r)
        [result] = [x for x in r.json_lines() if "outcome" in x]
        self.assertEqual(result["outcome"], "failed")
        self.assertEqual(result["error"]["code"], "LEDGER_UNAVAILABLE")
        self.assertEqual(result["error"]["message"],
                         f"{self.db}: lost the connection to the PostgreSQL ledger during COMMIT (no answer within "
                         "4s: ledger_timeout 2s plus 2s; lodge closed the connection): the transaction either "
                         "committed whole or not at all")
        # Nothing deleted on that account; the COMMIT is still running on the server.
        self.assertEqual(list(self.objects()), [result["object_key"]])
        stuck = self.sql("SELECT pid FROM pg_stat_activity WHERE query = 'COMMIT' AND datname = current_database()")
        self.assertEqual(len(stuck), 1, stuck)
        # Ended by the server's side: rolled back, the row left to repair.
        self.sql(f"SELECT pg_terminate_backend({stuck[0][0]})")
        wait_until(lambda: not self.sql(f"SELECT 1 FROM pg_stat_activity WHERE pid = {stuck[0][0]}"),
                   what="the stuck COMMIT's backend to end")
        self.sql_exec("DROP TRIGGER stuck_commit ON file_upload")
        self.assertEqual(self.sql("SELECT upload_status FROM file_upload"), [("UPLOADING",)])
        converge(self)
        check_invariants(self)


if __name__ == "__main__":
    main()
