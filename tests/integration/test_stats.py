"""Progress for logs and a bandwidth limit: `lodge upload --stats 1s` off a terminal prints
one plain line on stderr per interval (files, bytes, rate, elapsed, ETA, in flight) and a
final `done` line — never a carriage return, never on stdout (so --json stays JSON Lines),
nothing under -q, nothing but the progress line on a terminal. `--bwlimit` (and the
`bwlimit` key, LODGE_BWLIMIT) holds a whole process to one budget of bytes per second, on
upload's bytes sent and get's bytes received, against moto.

Timing: only lower bounds are asserted. A limit guarantees a transfer takes at least
(size - burst) / rate (the burst is 1/8 s of the rate); how much longer a loaded machine
takes is no property of lodge. The runs are kept short (2-4 MiB at 1 MiB/s)."""

import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, S3TestCase, main  # noqa: E402

MIB = 1 << 20
CONFIG = {"multipart_threshold": "64MiB"}
PERIODIC = re.compile(r"^lodge: \d+/\d+\+? files?, [\d.]+ (B|KiB|MiB) ?/[\d.]+ (B|KiB|MiB)\+? sent, "
                      r"[\d.]+ (B|KiB|MiB)/s, elapsed \S+, ETA \S+, \d+ in flight$")
FINAL = re.compile(r"^lodge: done: \d+/\d+ files?, [\d.]+ (B|KiB|MiB)/[\d.]+ (B|KiB|MiB) sent, "
                   r"[\d.]+ (B|KiB|MiB)/s, elapsed \S+, concurrency \d+ \((fixed|adaptive, peak \d+)\)$")


class Stats(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))

    def timed(self, *args, env=None):
        start = time.monotonic()
        r = self.lodge(*args, env=env)
        return r, time.monotonic() - start

    @staticmethod
    def lines(text, pattern):
        return [line for line in text.splitlines() if pattern.match(line)]

    def test_periodic_lines_and_a_final_one_on_stderr_never_a_carriage_return(self):
        big = self.write("in/big.bin", os.urandom(4 * MIB))
        r, secs = self.timed("upload", "--stats", "1s", "--bwlimit", "1M", big)
        self.assertEqual(r.rc, 0, r)
        # The limit: 4 MiB at 1 MiB/s with a 128 KiB burst is at least 3.875 s (lower bound only).
        self.assertGreaterEqual(secs, 3.8, r)
        periodic = self.lines(r.err, PERIODIC)
        self.assertGreaterEqual(len(periodic), 2, r.err)
        self.assertIn("1 in flight", periodic[0])
        self.assertEqual(len(self.lines(r.err, FINAL)), 1, r.err)
        final = self.lines(r.err, FINAL)[0]
        self.assertIn("done: 1/1 file, 4.0 MiB/4.0 MiB sent", final)
        # No --jobs: the level chose itself; one file never moved it from 8.
        self.assertTrue(final.endswith(", concurrency 8 (adaptive, peak 8)"), final)
        # The final line comes after every periodic one, before the summary.
        err_lines = r.err.splitlines()
        self.assertLess(err_lines.index(periodic[-1]), err_lines.index(final))
        self.assertRegex(err_lines[-1], r"^1 file: 1 active")
        self.assertNotIn("\r", r.err)
        self.assertNotIn("\033", r.err)
        self.assertNotIn("lodge:", r.out)
        self.assertRegex(r.out, r"^active ")
        # The bytes went: the object is in the bucket whole.
        self.assertEqual(list(self.objects().values()), [4 * MIB])

    def test_quiet_silences_the_stats(self):
        f = self.write("in/two.bin", os.urandom(2 * MIB))
        r = self.lodge("-q", "upload", "--stats", "1s", "--bwlimit", "1M", f)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err, "")
        self.assertEqual(r.out, "")

    def test_json_stays_json_lines_and_the_stats_go_to_stderr(self):
        f = self.write("in/two.bin", os.urandom(2 * MIB))
        small = self.write("in/small.txt", "small\n")
        r = self.lodge("--json", "upload", "--stats", "1s", "--bwlimit", "1M", f, small)
        self.assertEqual(r.rc, 0, r)
        docs = [json.loads(line) for line in r.out.splitlines()]  # every stdout line is JSON
        self.assertEqual(sorted(d["outcome"] for d in docs if "outcome" in d), ["active", "active"])
        self.assertEqual(docs[-1]["summary"]["active"], 2)
        self.assertGreaterEqual(len(self.lines(r.err, PERIODIC)), 1, r.err)
        self.assertEqual(len(self.lines(r.err, FINAL)), 1, r.err)
        self.assertNotIn("\r", r.err)

    def test_the_config_keys_and_the_flag_over_them(self):
        f = self.write("in/two.bin", os.urandom(2 * MIB))
        config = self.write("stats.json", json.dumps(dict(CONFIG, stats="1s", bwlimit="1M")))
        # The keys alone: stats lines, and at least (2 MiB - 128 KiB) / 1 MiB/s.
        r, secs = self.timed("upload", f, env={"LODGE_CONFIG": config})
        self.assertEqual(r.rc, 0, r)
        self.assertGreaterEqual(secs, 1.8, r)
        self.assertEqual(len(self.lines(r.err, FINAL)), 1, r.err)
        shown = self.lodge("--json", "config", env={"LODGE_CONFIG": config})
        self.assertEqual((shown.json()["bwlimit"], shown.json()["stats"]), ("1Mi", "1s"), shown)
        # The flags win: off is off (64 KiB/s would take half a minute), LODGE_STATS=off
        # is overridden by --stats.
        g = self.write("in/other.bin", os.urandom(2 * MIB))
        slow = self.write("slow.json", json.dumps(dict(CONFIG, bwlimit="64K")))
        r, secs = self.timed("upload", "--bwlimit", "off", "--stats", "1s", g,
                             env={"LODGE_CONFIG": slow, "LODGE_STATS": "off"})
        self.assertEqual(r.rc, 0, r)
        self.assertLess(secs, 20, r)
        self.assertEqual(len(self.lines(r.err, FINAL)), 1, r.err)

    def test_bad_values_are_refused_before_anything_is_recorded(self):
        f = self.write("in/a.txt", "a\n")
        r = self.lodge("upload", "--bwlimit", "10X", f)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--bwlimit", r.err)
        r = self.lodge("upload", "--stats", "soon", f)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--stats: expected a duration", r.err)
        r = self.lodge("upload", f, env={"LODGE_BWLIMIT": "fast"})
        self.assertNotEqual(r.rc, 0, r)
        self.assertIn("LODGE_BWLIMIT", r.err)
        self.assertEqual(self.ledger_files(), [])

    def test_get_is_held_to_the_limit_too(self):
        f = self.write("in/three.bin", os.urandom(3 * MIB))
        up = self.lodge("--json", "upload", f)
        self.assertEqual(up.rc, 0, up)
        file_id = str(up.json_lines()[0]["id"])
        out = os.path.join(self.dir, "back.bin")
        # The bytes received: at least (3 MiB - 128 KiB) / 1 MiB/s (a lower bound only).
        r, secs = self.timed("get", file_id, "--bwlimit", "1M", "-o", out)
        self.assertEqual(r.rc, 0, r)
        self.assertGreaterEqual(secs, 2.8, r)
        with open(out, "rb") as a, open(f, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_on_a_terminal_the_progress_line_stays_and_no_stats_line_is_drawn(self):
        f = self.write("in/two.bin", os.urandom(2 * MIB))
        master, slave = os.openpty()
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", "--stats", "1s", "--bwlimit", "1M", f],
                             env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        data = bytearray()
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            data += chunk
        os.close(master)
        p.stdout.read()
        p.stdout.close()
        self.assertEqual(p.wait(timeout=60), 0)
        text = data.decode(errors="replace")
        self.assertIn("\r\033[K", text)  # the progress line
        self.assertNotIn("lodge: done:", text)
        self.assertNotRegex(text, r"in flight")


if __name__ == "__main__":
    main()
