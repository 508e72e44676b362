"""Concurrency that chooses itself: without --jobs (nor the config's jobs, LODGE_JOBS, the
AWS profile's max_concurrent_requests) an upload starts with 8 requests in flight and
backs off when the store asks it to slow down; -v says each change, --json's summary and
--stats' final line show the level. The store answers 503 SlowDown through the fault proxy
in front of moto (lodge retries each PUT and it goes through)."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, main  # noqa: E402

FILES = 40
SLOW_DOWN = [{"method": "PUT", "path_contains": ".txt", "action": "503", "times": 6}]


class AdaptiveConcurrency(S3TestCase):
    def setUp(self):
        super().setUp()
        self.proxy = self.through_proxy()
        self.tree = os.path.join(self.dir, "tree")
        for i in range(FILES):
            self.write(os.path.join("tree", f"f{i}.txt"), f"file {i}\n")

    def upload(self, *args):
        r = self.lodge("-v", "--json", "upload", "--stats", "1h", *args, self.tree, timeout=300)
        self.assertEqual(r.rc, 0, r)
        lines = r.json_lines()
        self.assertEqual(lines[-1]["summary"]["active"], FILES, r)
        changes = [line for line in r.err.splitlines() if line.startswith("lodge: concurrency:")]
        final = [line for line in r.err.splitlines() if line.startswith("lodge: done:")]
        self.assertEqual(len(final), 1, r.err)
        return lines[-1]["summary"]["concurrency"], changes, final[0]

    def test_a_store_asking_to_slow_down_halves_the_level(self):
        self.proxy.set_rules(SLOW_DOWN)
        level, changes, final = self.upload()
        self.assertEqual(sum(1 for e in self.proxy.entries() if e.get("action") == "503"), 6)
        self.assertTrue(level["adaptive"], level)
        self.assertEqual(level["peak"], 8, level)
        self.assertLess(level["level"], 8, level)
        self.assertTrue(changes, "no concurrency line under -v")
        self.assertEqual(changes[0], "lodge: concurrency: 8 -> 4 (the store asked to slow down)")
        self.assertRegex(final, r", concurrency \d+ \(adaptive, peak 8\)$")
        self.assertEqual(int(re.search(r"concurrency (\d+)", final).group(1)), level["level"])

    def test_jobs_given_fix_the_level(self):
        self.proxy.set_rules(SLOW_DOWN)
        level, changes, final = self.upload("--jobs", "8")
        self.assertEqual(level, {"level": 8, "peak": 8, "adaptive": False})
        self.assertEqual(changes, [])
        self.assertTrue(final.endswith(", concurrency 8 (fixed)"), final)
        # So does the config's key.
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps({"jobs": 3}))
        self.proxy.set_rules([])
        for i in range(FILES):
            self.write(os.path.join("tree", f"f{i}.txt"), f"file {i} again\n")
        level, changes, _ = self.upload()
        self.assertEqual(level, {"level": 3, "peak": 3, "adaptive": False})
        self.assertEqual(changes, [])


if __name__ == "__main__":
    main()
