"""Killed runs recover at once: an UPLOADING row records its process (boot id, PID
namespace, PID, start time); a later upload or repair on the same host that finds the
process gone fails the row right away (its cleanup still waits for the grace), so a re-run
goes ahead instead of answering IN_PROGRESS until the deadline. Real SIGKILL (the `crash`
failpoint), real processes, moto; either ledger backend."""

import json
import os
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import FaultProxy, StoreTestCase, check_invariants, converge, main, wait_until  # noqa: E402

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

    def test_fail_killed_runs_false_leaves_them_to_their_deadline(self):
        old, _ = self.killed_upload(self.write("e.txt", "e\n"))
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(dict(CONFIG, fail_killed_runs=False)))
        r = self.lodge("repair", "--json")
        self.assertEqual((r.json()["repaired"], r.json()["abandoned"]), (0, 0), r)
        self.assertEqual(self.rows()[0][1], "UPLOADING")
        self.assertEqual(self.lodge("config", "--json").json()["fail_killed_runs"], False)

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


    @staticmethod
    def one_by_one(text):
        """A file's content over half of what a worker reserves together (1 MiB of small
        files): no two of them go in one batch, so a worker reserves one file ahead of its PUT."""
        return text * (600_000 // len(text))

    def test_two_runs_over_the_same_files_wait_for_each_other_and_report_duplicates(self):
        tree = os.path.join(self.dir, "same")
        for i in range(3):
            self.write(f"same/f{i}.txt", self.one_by_one(f"same file {i}\n"))
        gate, log = os.path.join(self.dir, "go"), os.path.join(self.dir, "fp.log")
        a = self.spawn("upload", "--json", "--jobs", "1", tree,
                       env={"LODGE_FAILPOINTS": f"upload.after_put=pause:{gate}", "LODGE_FAILPOINTS_LOG": log})
        wait_until(lambda: self.fired(log), what="the first run's first PUT")
        b = self.spawn("upload", "--json", "--jobs", "1", tree)
        # The first run is held after f0's PUT, f1 reserved (sent while f1 was reserved: a
        # worker reserves one file ahead). The second run sends what the first has not
        # reserved, then waits for the ones it holds.
        wait_until(lambda: [r[1] for r in self.rows()].count("ACTIVE") == 1, what="the second run's uploads")
        self.assertEqual(b.poll(), None, "it waits for the first run's upload")
        with open(gate, "w"):
            pass
        outcomes = {}
        for p in (a, b):
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            self.assertNotIn("IN_PROGRESS", out + err)
            lines = [json.loads(x) for x in out.splitlines()]
            outcomes[p.pid] = sorted(x["outcome"] for x in lines if "outcome" in x)
        self.assertEqual(outcomes[a.pid], ["active", "active", "duplicate"], outcomes)
        self.assertEqual(outcomes[b.pid], ["active", "duplicate", "duplicate"], outcomes)
        self.assertEqual(sorted(r[1] for r in self.rows()), ["ACTIVE"] * 3)
        check_invariants(self, self.objects())

    # --- signals and a closed stdout ---

    def fired(self, log):
        return os.path.exists(log) and os.path.getsize(log) > 0

    def stderr_lines(self, p):
        """Collects p's stderr lines on a thread (a pipe read while the test waits for one)."""
        lines = []

        def read():
            for line in p.stderr:
                lines.append(line)
        t = threading.Thread(target=read, daemon=True)
        t.start()
        return lines, t

    def signal_once_held(self, p, lines, gate):
        """SIGHUP (as SIGINT and SIGTERM) while the run is held at a failpoint; the gate opens
        only once the handler has counted (its line is out): when the kernel delivers the
        signal is no part of what is tested."""
        p.send_signal(signal.SIGHUP)
        wait_until(lambda: any("lodge: finishing" in x for x in lines), what="the signal handler's count")
        with open(gate, "w"):
            pass

    def test_a_first_signal_finishes_the_uploads_in_flight_and_starts_no_new_one(self):
        tree = os.path.join(self.dir, "tree")
        for i in range(5):
            self.write(f"tree/f{i}.txt", self.one_by_one(f"file {i}\n"))
        gate, log = os.path.join(self.dir, "go"), os.path.join(self.dir, "fp.log")
        p = self.spawn("upload", "--jobs", "1", tree,
                       env={"LODGE_FAILPOINTS": f"upload.after_put=pause:{gate}", "LODGE_FAILPOINTS_LOG": log})
        lines, reader = self.stderr_lines(p)
        wait_until(lambda: self.fired(log), what="the first file's PUT")
        # The first file is held right after its PUT, before its confirm is queued, and the
        # second is reserved (a worker reserves the next file while a PUT is in flight): two
        # files in flight. Released once the signal is handled, both are finished; the worker
        # then takes no other file.
        self.signal_once_held(p, lines, gate)
        p.wait(timeout=60)  # (its stdout, a few lines, fits in the pipe)
        with p.stdout, p.stderr:
            out = p.stdout.read()
            reader.join(timeout=60)
        err = "".join(lines)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("lodge: finishing 2 uploads in flight (Ctrl-C again to abort them)\n", err)
        self.assertIn("2 files: 2 active", err)
        self.assertIn(", interrupted\n", err)
        self.assertIn("lodge: error: interrupted by a signal: the files in flight were finished, no new one was "
                      "started (INTERRUPTED)", err)
        self.assertEqual([r[1:3] for r in self.rows()], [("ACTIVE", 0)] * 2)  # of 5
        check_invariants(self, self.objects())

    def test_a_file_waiting_for_its_confirm_is_in_flight_and_is_finished(self):
        # In flight means taken up and not reported: a stored file whose confirm is pending
        # (a worker keeps up to 16 while it goes on with the next file) counts, beside the
        # file being sent.
        tree = os.path.join(self.dir, "tree")
        for i in range(5):
            self.write(f"tree/f{i}.txt", self.one_by_one(f"file {i}\n"))
        reserve, put = os.path.join(self.dir, "reserve"), os.path.join(self.dir, "put")
        log = os.path.join(self.dir, "fp.log")
        p = self.spawn("upload", "--jobs", "1", tree, env={
            "LODGE_FAILPOINTS": f"upload.before_reserve=pause:{reserve};upload.after_put=pause:{put}",
            "LODGE_FAILPOINTS_LOG": log})
        lines, reader = self.stderr_lines(p)

        def fired():
            if not os.path.exists(log):
                return []
            with open(log) as f:
                return [x.split()[1] for x in f.read().splitlines()]
        wait_until(lambda: fired() == ["upload.before_reserve"], what="f0's reserve")
        with open(reserve, "w"):
            pass
        # f0's PUT goes out while the worker takes f1 and reserves it (one file ahead); f0 is
        # then held after its PUT.
        br, ap = "upload.before_reserve", "upload.after_put"
        wait_until(lambda: len(fired()) == 3, what="f0's PUT")
        self.assertEqual(fired(), [br, br, ap])
        # Past f1's reserve: that gate closes again for f2.
        os.unlink(reserve)
        with open(put, "w"):
            pass
        # f0's confirm is queued and left pending, f1's PUT is in flight, and the worker took
        # f2, held before its reserve: three files in flight.
        wait_until(lambda: len(fired()) == 4, what="f2's reserve")
        self.assertEqual(fired(), [br, br, ap, br])
        self.signal_once_held(p, lines, reserve)
        p.wait(timeout=60)  # (its stdout, a few lines, fits in the pipe)
        with p.stdout, p.stderr:
            out = p.stdout.read()
            reader.join(timeout=60)
        err = "".join(lines)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("lodge: finishing 3 uploads in flight (Ctrl-C again to abort them)\n", err)
        self.assertIn("3 files: 3 active", err)
        self.assertIn("lodge: error: interrupted by a signal: the files in flight were finished, no new one was "
                      "started (INTERRUPTED)", err)
        self.assertEqual([x.split()[0] for x in out.splitlines()], ["active"] * 3, out)
        self.assertEqual([r[1:3] for r in self.rows()], [("ACTIVE", 0)] * 3)  # of 5
        check_invariants(self, self.objects())

    def test_a_second_signal_aborts_the_transfer_in_flight_and_fails_its_row(self):
        proxy = FaultProxy(self.server_port, self.dir)
        self.addCleanup(proxy.stop)
        self.rebind(self.endpoint_env(proxy.endpoint))
        proxy.set_rules([{"method": "PUT", "path_contains": "/stuck.bin", "action": "blackhole", "times": 100,
                          "hold_s": 120}])
        p = self.spawn("upload", self.write("stuck.bin", "x" * 100_000), env=self.endpoint_env(proxy.endpoint))
        wait_until(lambda: any(e["method"] == "PUT" and "stuck.bin" in e["path"] for e in proxy.entries()), what="the PUT to hang")
        p.send_signal(signal.SIGINT)
        # Handled (two signals sent at once would be one): its message is the first line.
        first = p.stderr.readline()
        self.assertIn("lodge: finishing 1 upload in flight (Ctrl-C again to abort it)", first)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)  # not the proxy's 120 s hold, nor curl's timeouts
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("lodge: aborting the uploads in flight", err)
        self.assertIn("lodge: error: interrupted by a signal: the uploads in flight were aborted and their records "
                      "failed, no new one was started (INTERRUPTED)", err)
        [(rid, state, deleted, _, reason)] = self.rows()
        self.assertEqual((state, deleted), ("UPLOAD_FAILED", 1))
        self.assertTrue(reason.startswith("INTERRUPTED: "), reason)
        # The whole body had left (the proxy read it): the object might exist, so its delete
        # owes a verify pass.
        [(pass_,)] = self.sql("SELECT verify_pass FROM cleanup_task WHERE record_id = ?", (rid,))
        self.assertEqual(pass_, 1)

    def test_a_closed_stdout_stops_the_run_with_status_141(self):
        tree = os.path.join(self.dir, "many")
        for i in range(200):
            self.write(f"many/f{i:03d}.txt", f"file {i}\n")
        p = self.spawn("upload", "--jobs", "1", tree)
        first = p.stdout.readline()  # `lodge upload … | head -1`
        self.assertTrue(first, p)
        p.stdout.close()
        err = p.stderr.read()
        p.wait(timeout=60)
        self.assertEqual(p.returncode, 141, err)
        self.assertIn(", interrupted: stdout was closed\n", err)
        self.assertIn("lodge: error: stdout was closed: the files in flight were finished", err)
        rows = self.rows()
        self.assertLess(len(rows), 200, "it stopped starting files")
        self.assertEqual([r for r in rows if r[1] == "UPLOADING"], [])
        check_invariants(self, self.objects())


if __name__ == "__main__":
    main()
