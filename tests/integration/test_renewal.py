"""A deadline renewed by progress, against moto: a multipart upload held to 4 MiB/s by
--bwlimit, of a file that takes far longer than its policy's 2 s deadline, becomes ACTIVE
because each finished part renews its record's deadline; `lodge repair` run over and over
in a parallel process meanwhile never fails the progressing record. A transfer whose third
part goes into a black hole (the fault proxy's `blackhole`: the body is taken, no answer
comes) fails DEADLINE_EXCEEDED after the policy's `stall`, long before its deadline, and
repair and sweep converge after it.

Without renewal the same upload fails DEADLINE_EXCEEDED after about 1.8 s (the deadline less
the uploader's margin). Timing: 20 MiB at 4 MiB/s is at least 4.9 s, two and a half deadlines;
parts of 5 MiB take about 1.25 s each, and their bytes renew the deadline as they flow."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import FaultProxy, LodgeTestCase, S3TestCase, check_invariants, converge, main  # noqa: E402

MIB = 1 << 20
DEADLINE_MS = 2000
BIG = 20 * MIB
CONFIG = {"multipart_threshold": "8MiB", "part_size": "5MiB", "part_concurrency": 1,
          "policies": {"default": {"deadline": "2s", "grace": "2s"}}}


class Renewal(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))

    def row(self):
        rows = self.sql("SELECT upload_status, created_at, upload_deadline_at FROM file_upload")
        self.assertEqual(len(rows), 1, rows)
        return rows[0]

    def test_a_transfer_longer_than_its_deadline_that_keeps_progressing_becomes_active(self):
        big = self.write("in/big.bin", os.urandom(BIG))
        start = time.monotonic()
        r = self.lodge("--json", "upload", "--bwlimit", "4M", big)
        secs = time.monotonic() - start
        self.assertEqual(r.rc, 0, r)
        self.assertGreater(secs, DEADLINE_MS / 1000, r)  # it did outlast the first deadline
        docs = [json.loads(line) for line in r.out.splitlines()]
        self.assertEqual([d["outcome"] for d in docs if "outcome" in d], ["active"], r.out)
        status, created, deadline = self.row()
        self.assertEqual(status, "ACTIVE")
        # Renewed: the deadline the record shows is well past the reserve's.
        self.assertGreater(deadline, created + DEADLINE_MS + 3000)
        self.assertEqual(list(self.objects().values()), [BIG])
        check_invariants(self)

    def test_repair_in_a_loop_never_fails_the_progressing_record(self):
        big = self.write("in/big.bin", os.urandom(BIG))
        up = self.spawn("--json", "upload", "--bwlimit", "4M", big)
        repairs = 0
        while up.poll() is None:
            r = self.lodge("repair")
            self.assertEqual(r.rc, 0, r)
            repairs += 1
        out, err = up.communicate()
        self.assertEqual(up.returncode, 0, out + err)
        self.assertGreaterEqual(repairs, 3, "repair ran while the upload was in flight")
        self.assertEqual(self.row()[0], "ACTIVE")
        self.assertEqual(list(self.objects().values()), [BIG])
        check_invariants(self)

    def test_a_stalled_transfer_fails_after_the_stall_time_and_converges(self):
        cfg = dict(CONFIG, policies={"default": {"deadline": "60s", "stall": "2s", "grace": "2s"}})
        self.env["LODGE_CONFIG"] = self.write("config-stall.json", json.dumps(cfg))
        big = self.write("in/big.bin", os.urandom(20 * MIB))
        proxy = FaultProxy(self.server_port, self.dir)
        try:
            proxy.set_rules([{"method": "PUT", "path_contains": "partNumber=3&", "action": "blackhole",
                              "hold_s": 120, "times": 10}])
            env = self.endpoint_env(proxy.endpoint)
            self.rebind(env)  # the same bucket, through the proxy
            start = time.monotonic()
            r = self.lodge("--json", "upload", big, env=env)
            secs = time.monotonic() - start
            self.rebind({})
        finally:
            proxy.stop()
        self.assertNotEqual(r.rc, 0, r)
        doc = [json.loads(line) for line in r.out.splitlines() if '"outcome"' in line][0]
        self.assertEqual(doc["outcome"], "failed", r)
        self.assertEqual(doc["error"]["code"], "DEADLINE_EXCEEDED", r)
        self.assertIn("stall", doc["error"]["message"], r)
        self.assertLess(secs, 30, r)  # the stall (2 s), not the deadline (60 s)
        self.assertEqual(self.row()[0], "UPLOAD_FAILED")
        converge(self)
        check_invariants(self)
        self.assertEqual(self.objects(), {})


# The deadline is time without progress, and progress is bytes: the scenario (parts of
# 8 MiB two at a time under --bwlimit, each part longer than the deadline) scaled to a few
# seconds. Before renewal from bytes, each failed DEADLINE_EXCEEDED at the deadline less the
# margin (1.8 s), with bytes moving all along.
BYTES_DEADLINE = {"deadline": "2s", "grace": "2s"}
PARTS_CONFIG = {"multipart_threshold": "8MiB", "part_size": "8MiB", "part_concurrency": 2,
                "policies": {"default": BYTES_DEADLINE}}
SINGLE_CONFIG = {"multipart_threshold": "64MiB", "policies": {"default": BYTES_DEADLINE}}


class RenewalByBytes:
    """Shared by the S3 (moto) and file:// cases: the uploader renews from the bytes it sends."""

    def configure(self, cfg):
        self.env["LODGE_CONFIG"] = self.write("bytes-config.json", json.dumps(cfg))

    def row(self):
        rows = self.sql("SELECT upload_status, created_at, upload_deadline_at FROM file_upload")
        self.assertEqual(len(rows), 1, rows)
        return rows[0]

    def check_sent_longer_than_the_deadline(self, size, at_least_s):
        big = self.write("in/big.bin", os.urandom(size))
        start = time.monotonic()
        r = self.lodge("--json", "upload", "--bwlimit", "2M", big)
        secs = time.monotonic() - start
        self.assertEqual(r.rc, 0, r)
        self.assertGreater(secs, at_least_s, r)  # far past the 2 s deadline
        status, created, deadline = self.row()
        self.assertEqual(status, "ACTIVE")
        self.assertGreater(deadline, created + 2000 + 1000)  # renewed
        self.assertEqual(list(self.objects().values()), [size])
        check_invariants(self)

    def test_parts_longer_than_the_deadline_renew_while_their_bytes_flow(self):
        # 12 MiB at 2 MiB/s in parts of 8 MiB, two at once: the first part alone takes ~5 s.
        self.configure(PARTS_CONFIG)
        self.check_sent_longer_than_the_deadline(12 * MIB, 4)

    def test_a_single_put_longer_than_the_deadline_renews_while_its_bytes_flow(self):
        # 8 MiB in one PUT (below multipart_threshold) at 2 MiB/s: ~3 s.
        self.configure(SINGLE_CONFIG)
        self.check_sent_longer_than_the_deadline(8 * MIB, 2.5)


class RenewalByBytesS3(RenewalByBytes, S3TestCase):
    def stopped_put(self, policy):
        """A single PUT of 32 MiB whose bytes stop after the first MiB (the fault proxy takes
        no more, and never answers): (result, its outcome line, seconds)."""
        self.configure({"multipart_threshold": "64MiB", "policies": {"default": policy}})
        big = self.write("in/big.bin", os.urandom(32 * MIB))
        proxy = FaultProxy(self.server_port, self.dir)
        try:
            proxy.set_rules([{"method": "PUT", "path_contains": "big.bin", "action": "stall",
                              "bytes": MIB, "hold_s": 120, "times": 10}])
            env = self.endpoint_env(proxy.endpoint)
            self.rebind(env)
            start = time.monotonic()
            r = self.lodge("--json", "upload", big, env=env)
            secs = time.monotonic() - start
            self.rebind({})
        finally:
            proxy.stop()
        doc = [json.loads(line) for line in r.out.splitlines() if '"outcome"' in line][0]
        return r, doc, secs

    def test_a_single_put_whose_bytes_stop_fails_on_the_stall(self):
        r, doc, secs = self.stopped_put({"deadline": "60s", "stall": "2s", "grace": "2s"})
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(doc["outcome"], "failed", r)
        self.assertEqual(doc["error"]["code"], "DEADLINE_EXCEEDED", r)
        self.assertIn("no bytes sent for 2s (the policy's stall)", doc["error"]["message"], r)
        self.assertLess(secs, 20, r)  # the stall, not the deadline (60 s) or curl's own 30 s
        self.assertEqual(self.row()[0], "UPLOAD_FAILED")
        converge(self)
        check_invariants(self)
        self.assertEqual(self.objects(), {})

    def test_a_single_put_whose_bytes_stop_past_the_deadline_says_the_deadline_ended_it(self):
        r, doc, secs = self.stopped_put({"deadline": "3s", "stall": "60s", "grace": "2s"})
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(doc["error"]["code"], "DEADLINE_EXCEEDED", r)
        self.assertIn("the policy's deadline", doc["error"]["message"], r)
        self.assertNotIn("stall", doc["error"]["message"], r)
        self.assertLess(secs, 20, r)
        converge(self)
        check_invariants(self)


class RenewalByBytesFile(RenewalByBytes, LodgeTestCase):
    """file:// copies the bytes itself (no HTTP): the same renewal, through its own loop."""

    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci"})
        self.init()

    def objects(self):
        """key -> size of every object, lodge's own folders left out."""
        out = {}
        for top, dirs, files in os.walk(self.store):
            if top == self.store:
                dirs[:] = [d for d in dirs if not d.startswith(".lodge")]
                files = [f for f in files if not f.startswith(".lodge")]
            for f in files:
                path = os.path.join(top, f)
                out[os.path.relpath(path, self.store)] = os.path.getsize(path)
        return out


if __name__ == "__main__":
    main()
