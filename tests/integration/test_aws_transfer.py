"""The AWS profile's `s3 =` transfer settings and request_checksum_calculation, as lodge takes
them: a real lodge through the recording proxy in front of moto, with a `[profile x]` whose
nested `s3 =` sub-section sets part size, threshold and concurrency. What landed is read back
with the aws CLI straight from moto; what was sent is what the proxy recorded."""

import json
import os
import resource
import subprocess
import sys
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, Moto, aws, main, s3_client  # noqa: E402
from recordproxy import RecordingProxy  # noqa: E402

MiB = 1 << 20


class AwsTransfer(LodgeTestCase):
    @classmethod
    def setUpClass(cls):
        cls.moto = Moto()
        cls.s3 = s3_client(cls.moto.endpoint)
        cls.proxy = RecordingProxy(cls.moto.port)

    @classmethod
    def tearDownClass(cls):
        cls.proxy.stop()
        cls.moto.stop()

    def setUp(self):
        super().setUp()
        self.bucket = "b-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=self.bucket)
        self.env.update({"LODGE_STORE": f"s3://{self.bucket}/lodge", "LODGE_OWNER": "ci",
                         "LODGE_ENDPOINT": self.proxy.endpoint()})
        self.cfgfile = os.path.join(self.dir, ".aws", "config")
        self.proxy.clear()
        self.init()

    def profile(self, s3_lines, extra=""):
        """[profile x] with the nested `s3 =` sub-section, as aws-cli writes it."""
        self.write(".aws/config", "[profile x]\nregion = us-east-1\naws_access_key_id = testing\n"
                   "aws_secret_access_key = testing\n" + extra + "s3 =\n" +
                   "".join(f"  {line}\n" for line in s3_lines))

    def big(self, name, size):
        return self.write(name, os.urandom(size))

    def upload(self, *args, env=None):
        r = self.lodge("--json", "upload", *args, env=env)
        self.assertEqual(r.rc, 0, r)
        lines = r.json_lines()
        self.assertEqual(lines[0]["outcome"], "active", r)
        return lines[0]

    def parts_of(self, key):
        """The part count of the object at key, from its ETag's -N suffix (aws s3api head-object)."""
        head = aws(self.moto.endpoint, "s3api", "head-object", "--bucket", self.bucket, "--key", key)
        etag = head["ETag"].strip('"')
        return int(etag.split("-")[1]) if "-" in etag else 0

    def part_sizes(self):
        """The size of each part lodge sent, as the proxy saw them (PUT ...partNumber=)."""
        return sorted((int(r.headers.get("content-length", "0")) for r in self.proxy.requests()
                       if r.method == "PUT" and "partNumber=" in r.path), reverse=True)

    def test_multipart_chunksize_and_threshold_from_the_profile_set_the_parts(self):
        self.profile(["multipart_threshold = 6MB", "multipart_chunksize = 5MB"])
        f = self.big("twelve.bin", 12 * MiB)
        res = self.upload("--profile", "x", f)
        self.assertEqual(self.parts_of(res["object_key"]), 3)  # 5 + 5 + 2 MiB
        self.assertEqual(self.part_sizes(), [5 * MiB, 5 * MiB, 2 * MiB])
        # Without the profile: lodge's defaults (64MiB threshold): one PUT, no parts.
        self.proxy.clear()
        res = self.upload(self.big("other.bin", 12 * MiB))
        self.assertEqual(self.parts_of(res["object_key"]), 0)
        self.assertEqual(self.part_sizes(), [])

    def test_max_bandwidth_from_the_profile_limits_an_upload(self):
        # A lower bound only (a loaded machine is slower, never faster): 3 MiB at 1 MiB/s with a
        # burst of 1/8 s cannot take less than 2.8 s
        # (unlimited it takes a fraction of that; the flag over the profile is test_stats.py's).
        self.profile(["max_bandwidth = 1MB/s"])
        f = self.big("three.bin", 3 * MiB)
        started = time.monotonic()
        self.upload("--profile", "x", f)
        self.assertGreaterEqual(time.monotonic() - started, 2.8)

    def test_flags_and_lodges_config_win_over_the_profile(self):
        self.profile(["max_concurrent_requests = 3", "multipart_threshold = 6MB", "multipart_chunksize = 5MB"])
        res = self.upload("--profile", "x", "--part-size", "6MiB", self.big("a.bin", 12 * MiB))
        self.assertEqual(self.parts_of(res["object_key"]), 2)
        self.assertEqual(self.part_sizes(), [6 * MiB, 6 * MiB])
        # lodge's configuration file over the profile, the flag over both.
        cfg = self.write("lodge.json", json.dumps({"part_size": "7MiB", "jobs": 5}))
        env = {"LODGE_CONFIG": cfg}
        self.proxy.clear()
        res = self.upload("--profile", "x", self.big("b.bin", 14 * MiB), env=env)
        self.assertEqual(self.part_sizes(), [7 * MiB, 7 * MiB])
        j = self.lodge("--json", "--profile", "x", "config", env=env).json()
        self.assertEqual((j["jobs"], j["sources"]["jobs"]), (5, f"file {cfg}"))
        self.assertEqual((j["part_size"], j["sources"]["part_size"]), ("7MiB", f"file {cfg}"))
        self.assertEqual(j["sources"]["multipart_threshold"], f"file {self.cfgfile} [profile x] s3.multipart_threshold")
        self.assertEqual(j["s3"]["multipart_chunksize"],
                         {"value": 5 * MiB, "source": f"file {self.cfgfile} [profile x] s3.multipart_chunksize"})
        bad = self.lodge("upload", "--profile", "x", "--part-size", "4MiB", self.big("c.bin", MiB), env=env)
        self.assertEqual(bad.rc, 2, bad)
        self.assertIn("--part-size: S3 takes parts of 5MiB to 5GiB", bad.err)
        self.assertIn("(USAGE)", bad.err)  # a flag's value out of range is the command line's error

    def test_max_concurrent_requests_is_the_default_for_jobs(self):
        self.profile(["max_concurrent_requests = 3", "max_bandwidth = 50MB/s"])
        j = self.lodge("--json", "--profile", "x", "config").json()
        self.assertEqual(j["jobs"], 3)
        self.assertEqual(j["sources"]["jobs"], f"file {self.cfgfile} [profile x] s3.max_concurrent_requests")
        self.assertEqual(j["store_bandwidth"], 50 * MiB)
        self.assertEqual(j["sources"]["bandwidth"], f"file {self.cfgfile} [profile x] s3.max_bandwidth")
        text = self.lodge("--profile", "x", "config")
        self.assertRegex(text.out, r"\n  jobs +3  \(file .*/\.aws/config \[profile x\] s3\.max_concurrent_requests\)")
        self.assertRegex(text.out, r"\n  s3\.max_bandwidth +52428800  \(file ")
        # LODGE_JOBS (lodge's configuration) over the profile.
        j = self.lodge("--json", "--profile", "x", "config", env={"LODGE_JOBS": "6"}).json()
        self.assertEqual((j["jobs"], j["sources"]["jobs"]), (6, "env LODGE_JOBS"))
        # Without the profile: the default.
        j = self.lodge("--json", "config").json()
        self.assertEqual((j["jobs"], j["sources"]["jobs"]), (8, "default"))

    def test_a_bad_s3_value_names_the_file_the_profile_and_the_key(self):
        self.profile(["multipart_chunksize = 5 megs"])
        r = self.lodge("upload", "--profile", "x", self.big("a.bin", 10))
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"file {self.cfgfile} [profile x] s3.multipart_chunksize: expected a size like 8MB", r.err)
        self.assertIn("CONFIG_INVALID", r.err)

    def checksum_headers(self):
        return sorted({k for r in self.proxy.requests() for k in r.headers if k.startswith("x-amz-checksum")
                       and r.method in ("PUT", "POST")})

    def test_when_required_sends_no_checksum_header_and_get_still_verifies(self):
        for how, env in (("profile", {}), ("env", {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"})):
            with self.subTest(how):
                self.proxy.clear()
                self.profile(["multipart_threshold = 6MB", "multipart_chunksize = 5MB"],
                             extra="request_checksum_calculation = when_required\n" if how == "profile" else "")
                small = self.upload("--profile", "x", self.write(f"small-{how}.txt", "hello " + how), env=env)
                big = self.upload("--profile", "x", self.big(f"big-{how}.bin", 11 * MiB), env=env)
                self.assertEqual(self.parts_of(big["object_key"]), 3)
                reqs = self.proxy.requests()
                self.assertTrue(any(r.method == "PUT" and "partNumber=" in r.path for r in reqs))
                self.assertEqual(self.checksum_headers(), [])
                completes = [r for r in reqs if r.method == "POST" and "uploadId=" in r.path]
                self.assertEqual(len(completes), 1)
                self.assertNotIn("Checksum", completes[0].body)
                # lodge still hashed every file: the ledger has each one's sha256, and get verifies.
                for res, path in ((small, f"small-{how}.txt"), (big, f"big-{how}.bin")):
                    self.assertEqual(len(res["sha256"]), 64)
                    out = os.path.join(self.dir, "back-" + path)
                    g = self.lodge("get", str(res["id"]), "-o", out, env=env)
                    self.assertEqual(g.rc, 0, g)
                    with open(out, "rb") as a, open(os.path.join(self.dir, path), "rb") as b:
                        self.assertEqual(a.read(), b.read())
                d = self.lodge("--profile", "x", "doctor", env=env)
                self.assertIn("the store is not asked to check each upload's SHA-256", d.out + d.err)
                j = self.lodge("--json", "--profile", "x", "config", env=env).json()
                self.assertEqual(j["s3"]["request_checksum_calculation"]["value"], "when_required")
        # The default: every upload carries its checksum.
        self.proxy.clear()
        self.profile(["multipart_threshold = 6MB", "multipart_chunksize = 5MB"])
        self.upload("--profile", "x", self.big("big-default.bin", 11 * MiB))
        self.assertEqual(self.checksum_headers(), ["x-amz-checksum-algorithm", "x-amz-checksum-sha256"])

    def test_jobs_times_parts_is_lowered_to_the_open_file_limit_with_one_warning(self):
        self.profile(["multipart_threshold = 6MB", "multipart_chunksize = 5MB"])
        files = [self.big(f"f{i}.bin", 11 * MiB) for i in range(2)]

        def low_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

        env = dict(self.env)
        p = subprocess.run([LODGE, "--db", self.db, "--profile", "x", "upload", "-j", "64", "--part-concurrency",
                            "16", *files], capture_output=True, text=True, env=env, preexec_fn=low_limit,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        warnings = [line for line in p.stderr.splitlines() if "open" in line and "warning" in line]
        self.assertEqual(len(warnings), 1, p.stderr)
        self.assertIn("64 jobs x 16 parts in flight would need more files open than the limit of 256", warnings[0])
        self.assertEqual(len([line for line in p.stdout.splitlines() if line.startswith("active")]), 2, p.stdout)


if __name__ == "__main__":
    main()
