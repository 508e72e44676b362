"""Many hosts, one ledger: 4 `lodge upload`, 3 `lodge sweep` and 2 `lodge repair` processes
at once against one ledger (PostgreSQL under LODGE_TEST_LEDGER=postgres, CTest
it_multihost_pg; one SQLite file otherwise, the same code) and one moto bucket, with kill -9
of random ones while they run. Then the uploads are restarted, the ledger converges (repair,
sweep, reconcile clean) and the invariant checker reads it through lodge.

The random choices (which process dies when, which clock each job runs on) come from one
seed, printed at the start; LODGE_TEST_SEED=N repeats them (the interleavings still differ:
they are the machine's)."""

import collections
import json
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, check_invariants, converge, main  # noqa: E402

MAX_FILES = 30
# A deadline long enough that no healthy upload meets it here, a short lease so a killed
# sweeper's claims expire during the run, quick back-offs.
CONFIG = {
    "policies": {
        "default": {"deadline": "20s", "grace": "2s"},
        "capped": {"max_files": MAX_FILES, "deadline": "20s", "grace": "2s"},
    },
    "sweep": {"lease": "3s", "max_retries": 8, "backoff_base": "200ms", "backoff_max": "2s"},
    "busy_timeout": "30s",
}

# The uploaders: two hosts share owner alpha (I3 and I4 under concurrency), one each for beta
# and gamma. Every tree holds the SHARED contents too (de-dup within alpha, and the same
# digests under other owners); each owner has more distinct contents than MAX_FILES.
UPLOADERS = [("alpha", 0), ("alpha", 1), ("beta", 2), ("gamma", 3)]
BATCHES = 3
PER_BATCH = 12
SHARED = 8

CHAOS_SECONDS = 12
# A job's clock: the real one, or ahead by less than deadline + grace (so the tasks of uploads
# killed some seconds ago are due, and a healthy upload in flight is not), or now and then far
# ahead (a clock step: it fails uploads in flight, whose late PUTs the verify pass removes).
SWEEP_CLOCKS = [None, None, "+15s", "+15s", "+15s", "+60s"]
REPAIR_CLOCKS = [None, "+15s", "+15s", "+60s"]

UPLOAD_CODES = {"QUOTA_EXCEEDED", "IN_PROGRESS", "STATE_CHANGED", "DEADLINE_EXCEEDED"}


class MultiHost(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        seed = os.environ.get("LODGE_TEST_SEED")
        self.seed = int(seed) if seed else random.SystemRandom().randrange(1 << 32)
        sys.stderr.write(f"\nmultihost: ledger {self.ledger_backend}, seed {self.seed} "
                         f"(LODGE_TEST_SEED={self.seed} repeats the random choices)\n")
        self.lock = threading.Lock()
        self.running = {}                      # pid -> (role, Popen)
        self.kills = collections.Counter()     # role -> processes that died of our SIGKILL
        self.results = []                      # (role, rc, stdout, stderr)
        self.trees = self.make_trees()

    def make_trees(self):
        """trees[u][b] = directory of uploader u's batch b."""
        trees = []
        for owner, u in UPLOADERS:
            batches = []
            n = 0
            for b in range(BATCHES):
                d = os.path.join(self.dir, "trees", f"u{u}", f"b{b}")
                for j in range(PER_BATCH):
                    # Shared contents are spread over the batches; the rest is this tree's own.
                    content = f"shared {n}\n" if n < SHARED else f"tree {u} file {n}\n"
                    self.write(os.path.join(d, f"f{j:02d}.txt"), content * (1 + n % 5))
                    n += 1
                batches.append(d)
            trees.append(batches)
        return trees

    # --- processes ---

    def run_lodge(self, role, *args, env=None, later=None):
        p = self.spawn(*args, env=env, later=later)
        with self.lock:
            self.running[p.pid] = (role, p)
        out, err = p.communicate(timeout=300)
        with self.lock:
            del self.running[p.pid]
            self.results.append((role, p.returncode, out, err))
        return p.returncode, out, err

    def upload(self, u, batch):
        owner = UPLOADERS[u][0]
        return self.run_lodge("upload", "upload", "--json", "--policy", "capped", "--jobs", "2", self.trees[u][batch],
                        env={"LODGE_OWNER": owner})

    def uploader_loop(self, u, stop):
        b = 0
        while not stop.is_set():
            self.upload(u, b % BATCHES)
            b += 1

    def job_loop(self, job, host, clocks, stop):
        rng = random.Random(f"{self.seed}/{job}/{host}")
        n = 0
        while not stop.is_set():
            args = [job, "--json"] + (["--worker-id", f"{job}-{host}-{n}"] if job == "sweep" else [])
            self.run_lodge(job, *args, later=rng.choice(clocks))
            n += 1

    def chaos(self, stop):
        rng = random.Random(self.seed)
        while not stop.wait(rng.uniform(0.15, 0.5)):
            with self.lock:
                live = sorted(self.running.items())
            if not live:
                continue
            pid, (role, p) = rng.choice(live)
            p.send_signal(signal.SIGKILL)  # a no-op if it has just been reaped
            try:
                p.wait(30)
            except Exception:
                pass
            if p.returncode == -signal.SIGKILL:
                with self.lock:
                    self.kills[role] += 1

    # --- what the processes said ---

    def upload_lines(self, results=None):
        """Every complete per-file JSON line the uploads printed (a killed one may have cut its last)."""
        lines = []
        for role, rc, out, err in (self.results if results is None else results):
            if role != "upload":
                continue
            for text in out.split("\n")[:-1]:
                j = json.loads(text)
                if "summary" not in j:
                    lines.append(j)
        return lines

    @staticmethod
    def outcome(line):
        """A file's outcome, or its error code when it was rejected or failed."""
        return line["error"]["code"] if line["outcome"] in ("rejected", "failed") else line["outcome"]

    def check_exits(self, results):
        for role, rc, out, err in results:
            allowed = (0, 1, -signal.SIGKILL) if role == "upload" else (0, -signal.SIGKILL)
            self.assertIn(rc, allowed, f"{role} exited {rc}: {out[-1500:]} {err[-1500:]}")
        for line in self.upload_lines(results):
            if line["outcome"] in ("rejected", "failed", "in_progress"):
                self.assertIn(line["error"]["code"], UPLOAD_CODES, line)
            else:
                self.assertIn(line["outcome"], ("active", "duplicate", "replayed"), line)

    def test_four_uploaders_three_sweepers_two_repairers_with_kill_9(self):
        started = time.monotonic()
        stop = threading.Event()
        threads = [threading.Thread(target=self.uploader_loop, args=(u, stop)) for u in range(len(UPLOADERS))]
        threads += [threading.Thread(target=self.job_loop, args=("sweep", h, SWEEP_CLOCKS, stop)) for h in range(3)]
        threads += [threading.Thread(target=self.job_loop, args=("repair", h, REPAIR_CLOCKS, stop)) for h in range(2)]
        killer = threading.Thread(target=self.chaos, args=(stop,))
        for t in threads + [killer]:
            t.start()
        try:
            stop.wait(CHAOS_SECONDS)
        finally:
            stop.set()
            for t in threads + [killer]:
                t.join(300)
        chaos_results = list(self.results)
        self.check_exits(chaos_results)
        self.assertGreater(self.kills["upload"], 0, f"no upload was killed: {dict(self.kills)}")
        self.assertGreater(self.kills["sweep"] + self.kills["repair"], 0, f"no job was killed: {dict(self.kills)}")
        runs = collections.Counter(role for role, *_ in chaos_results)
        self.assertTrue(all(runs[r] > 0 for r in ("upload", "sweep", "repair")), runs)

        # Restart: every uploader runs its whole tree once more, at once, nobody killed.
        self.results = []
        again = [threading.Thread(target=lambda u=u: [self.upload(u, b) for b in range(BATCHES)])
                 for u in range(len(UPLOADERS))]
        for t in again:
            t.start()
        for t in again:
            t.join(300)
        self.check_exits(self.results)
        self.assertNotIn(-signal.SIGKILL, [rc for _, rc, *_ in self.results])

        converge(self, later="+1h")
        check_invariants(self, self.objects(), max_files=MAX_FILES)

        # History: every upload reported active is ACTIVE with its object; nothing was lost.
        rows = {r["id"]: r for r in self.ledger_files()}
        reported = self.upload_lines(chaos_results) + self.upload_lines()
        for line in reported:
            if line["outcome"] == "active":
                r = rows[line["id"]]
                self.assertEqual((r["upload_status"], r["deleted"]), ("ACTIVE", False), line)
                self.assertEqual((r["sha256"], r["object_key"]), (line["sha256"], line["object_key"]))
            elif self.outcome(line) in ("STATE_CHANGED", "DEADLINE_EXCEEDED"):  # its own row failed
                self.assertNotEqual(rows[line["id"]]["upload_status"], "ACTIVE", line)
        # Once converged, every file of every tree is there or refused by the quota.
        self.results = []
        for u in range(len(UPLOADERS)):
            for b in range(BATCHES):
                self.upload(u, b)
        final = collections.Counter(self.outcome(x) for x in self.upload_lines())
        self.assertEqual(set(final) - {"active", "duplicate", "QUOTA_EXCEEDED"}, set(), final)
        self.assertGreater(final["duplicate"], 0, final)
        self.assertGreater(final["QUOTA_EXCEEDED"], 0, final)
        check_invariants(self, self.objects(), max_files=MAX_FILES)
        alive = collections.Counter(r["owner"] for r in self.ledger_files() if not r["deleted"])
        self.assertEqual(alive, {"alpha": MAX_FILES, "beta": MAX_FILES, "gamma": MAX_FILES},
                         "each owner has more distinct contents than its quota")

        outcomes = collections.Counter(self.outcome(x) for x in self.upload_lines(chaos_results))
        sys.stderr.write(f"multihost: {dict(runs)} runs, killed {dict(self.kills)}; chaos outcomes "
                         f"{dict(outcomes)}; {time.monotonic() - started:.1f}s\n")


if __name__ == "__main__":
    main()
