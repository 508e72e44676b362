"""Killed runs recover at once: an UPLOADING row records its process (boot id, PID
namespace, PID, start time); a later upload or repair on the same host that finds the
process gone fails the row right away (its cleanup still waits for the grace), so a re-run
goes ahead instead of answering IN_PROGRESS until the deadline. Real SIGKILL (the `crash`
failpoint), real processes, moto; either ledger backend."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import StoreTestCase, check_invariants, converge, main, wait_until  # noqa: E402

CONFIG = {
    # The default deadline: a re-run that waited for it would take 15 minutes.
    "policies": {"default": {"max_size": "64MiB", "deadline": "15m", "grace": "5s"}},
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}


class KilledRuns(StoreTestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()

    def rows(self):
        return self.sql("SELECT id, upload_status, is_deleted, holder, failure_reason FROM file_upload ORDER BY id")

    def killed_upload(self, path):
        r = self.lodge("upload", "--json", path, env={"LODGE_FAILPOINTS": "upload.after_put=crash"})
        self.assertEqual(r.rc, -9, r)
        [(rid, state, deleted, holder, _)] = self.rows()
        self.assertEqual((state, deleted), ("UPLOADING", 0))
        self.assertRegex(holder, r"^boot=\S+ pidns=\d+ pid=\d+ start=\d+ host=\S*$")
        return rid, holder

    def test_a_rerun_after_kill_9_sends_the_file_again_at_once(self):
        path = self.write("a.txt", "killed mid-upload\n")
        old, holder = self.killed_upload(path)
        r = self.lodge("upload", "--json", path)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[0]["outcome"], "active", r)
        self.assertIn("lodge: 1 upload left by a killed run failed, to be sent again", r.err)
        rows = self.rows()
        self.assertEqual(rows[0][:3], (old, "UPLOAD_FAILED", 1))
        pid = holder.split(" pid=")[1].split()[0]
        self.assertEqual(rows[0][4], f"INTERRUPTED: the process that was uploading it (pid {pid} on this host) is gone")
        self.assertEqual(rows[1][1:3], ("ACTIVE", 0))
        # The killed run's object may have landed: its cleanup waits for the grace, then
        # deletes it (with a verify pass); the new one stays.
        [(status, pass_, due, created)] = self.sql(
            "SELECT status, verify_pass, next_retry_at, created_at FROM cleanup_task WHERE record_id = ?", (old,))
        self.assertEqual((status, pass_), ("PENDING", 1))
        self.assertLess(due - created, 60_000, "due after the grace (5 s), not deadline + grace (15 min)")
        check_invariants(self, self.objects())
        converge(self, later="+30s")
        self.assertEqual(len(self.objects()), 1, self.objects())

    def test_repair_fails_a_killed_runs_rows_before_their_deadline(self):
        old, _ = self.killed_upload(self.write("b.txt", "b\n"))
        r = self.lodge("repair", "--json")
        self.assertEqual(r.rc, 0, r)
        j = r.json()
        self.assertEqual((j["repaired"], j["abandoned"]), (1, 1), j)
        self.assertEqual(self.rows()[0][1:3], ("UPLOAD_FAILED", 1))
        check_invariants(self, self.objects())

    def test_a_live_upload_and_rows_of_other_boots_are_left_to_their_deadline(self):
        # Another boot (or PID namespace, or host): never judged from here.
        old, holder = self.killed_upload(self.write("c.txt", "c\n"))
        other = "boot=00000000-0000-4000-8000-000000000000" + holder[holder.index(" pidns="):]
        self.sql_exec(f"UPDATE file_upload SET holder = '{other}' WHERE id = {old}")
        # A live one: paused after its PUT, before its confirm.
        gate = os.path.join(self.dir, "go")
        live = self.spawn("upload", "--json", self.write("d.txt", "d\n"),
                          env={"LODGE_FAILPOINTS": f"upload.after_put=pause:{gate}"})
        wait_until(lambda: len(self.rows()) == 2 and self.objects(), what="the live upload's PUT")
        r = self.lodge("repair", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual((r.json()["repaired"], r.json()["abandoned"]), (0, 0), r)
        self.assertEqual([x[1] for x in self.rows()], ["UPLOADING", "UPLOADING"], self.rows())
        with open(gate, "w"):
            pass
        out, err = live.communicate(timeout=60)
        self.assertEqual(live.returncode, 0, err)
        self.assertEqual(json.loads(out.splitlines()[0])["outcome"], "active")
        self.assertEqual(self.rows()[0][1], "UPLOADING")  # the other boot's row: its deadline decides


if __name__ == "__main__":
    main()
