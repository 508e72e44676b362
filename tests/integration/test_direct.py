"""Direct uploads: `lodge reserve` on a host with credentials prints a presigned PUT, a host
without any sends the bytes with nothing but curl, and `lodge confirm` verifies the object
(size, lodge's stamp, SHA-256) before the row becomes ACTIVE. Every way of sending the
wrong bytes ends failed and cleaned; a reservation never sent is recovered like any
crashed upload. On moto behind a server that checks presigned URLs as S3 does (signature,
expiry, pinned headers: tests/harness/motosigned.py), and on Azurite with LODGE_IT_STORE=az
(a SAS, checked by Azurite)."""

import hashlib
import json
import os
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (LODGE, LodgeTestCase, PresignCheckingMoto, StoreTestCase, aws, azblob,  # noqa: E402
                       check_invariants, converge, main, s3_only)

CONFIG = {
    "policies": {
        "default": {"max_size": "64MiB", "deadline": "10m", "grace": "5s"},
        "two": {"max_files": 2, "deadline": "10m", "grace": "5s"},
        "pdf": {"extensions": ["pdf"]},
        "big": {"max_size": "1TiB"},
    },
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}


# The grace confirm keeps: the longest of CONFIG's policies (each takes default's 5s).
GRACE_MS = 5_000


def read(path):
    with open(path, "rb") as f:
        return f.read()


def curl(put, path, headers=None, url=None):
    """Sends the file as the reservation says, with curl alone (`headers` over the printed
    ones, a value of None leaving one out; `url` instead of the printed one); returns the
    HTTP status."""
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", put["method"], "--upload-file", path]
    sent = dict(put["headers"])
    sent.update(headers or {})
    for k, v in sent.items():
        cmd += ["-H", f"{k}: {v}" if v is not None else f"{k}:"]
    cmd.append(url or put["url"])
    p = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60)
    return int(p.stdout or 0)


class Direct(StoreTestCase):
    moto_class = PresignCheckingMoto  # on S3: presigned URLs checked for real

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()

    def reserve(self, path, *args, name=None, size=None, sha=None, **kw):
        data = read(path)
        return self.lodge("reserve", "--json", name or os.path.basename(path),
                          "--size", str(len(data) if size is None else size),
                          "--sha256", sha or hashlib.sha256(data).hexdigest(), *args, **kw)

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (rid,))[0]

    def test_curl_with_the_printed_headers_then_confirm(self):
        data = os.urandom(300_000)
        path = self.write("in/report.bin", data)
        r = self.reserve(path)
        self.assertEqual(r.rc, 0, r)
        put = r.json()
        self.assertEqual((put["outcome"], put["method"]), ("reserved", "PUT"), r)
        self.assertEqual(self.row(put["id"]), ("UPLOADING", 0))
        self.assertIn(curl(put, path), (200, 201), put)
        # Not yet confirmed: the row is still UPLOADING; confirm checks and activates.
        self.assertEqual(self.row(put["id"]), ("UPLOADING", 0))
        # By its id alone: the confirming host need not be told the owner.
        env = {k: v for k, v in self.env.items() if k != "LODGE_OWNER"}
        c = subprocess.run([LODGE, "--db", self.db, "confirm", "--json", str(put["id"])], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(c.returncode, 0, c)
        self.assertEqual(json.loads(c.stdout)["outcome"], "active", c)
        self.assertEqual(self.row(put["id"]), ("ACTIVE", 0))
        self.assertEqual(self.object_bytes(put["object_key"]), data)
        # Twice: the same answer, nothing changed.
        again = self.lodge("confirm", put["id"])
        self.assertEqual(again.rc, 0, again)
        self.assertIn(f"active #{put['id']} ", again.out)
        # lodge get returns the bytes, verified against the reserved digest.
        got = self.lodge("get", put["id"], "-o", os.path.join(self.dir, "back.bin"))
        self.assertEqual(got.rc, 0, got)
        self.assertEqual(read(os.path.join(self.dir, "back.bin")), data)
        check_invariants(self)

    def task(self, rid):
        """(status, verify_pass, next_retry_at) of the row's cleanup task."""
        return self.sql("SELECT status, verify_pass, next_retry_at FROM cleanup_task WHERE record_id = ?", (rid,))[0]

    def url_until(self, rid):
        """When the reservation's URL expires (ms), as its holder records it."""
        return int(self.sql("SELECT holder FROM file_upload WHERE id = ?", (rid,))[0][0].split("until=")[1])

    def test_other_bytes_stay_until_the_url_expired_so_a_second_put_leaves_nothing(self):
        data = os.urandom(10_000)
        path = self.write("in/a.bin", data)
        put = self.reserve(path).json()
        until = self.url_until(put["id"])
        evil = self.write("in/evil.bin", os.urandom(10_000))
        status = curl(put, evil)
        if status not in (200, 201):
            self.assertIn(status, (400, 403), "the server refused other bytes")
            check_invariants(self)
            return converge(self)
        # The server took them (moto and Azurite check no SHA-256): confirm refuses.
        c = self.lodge("confirm", "--json", put["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertEqual(c.json()["error"]["code"], "CONTENT_MISMATCH", c)
        self.assertIn("SHA-256", c.json()["error"]["message"])
        self.assertEqual(self.row(put["id"]), ("UPLOAD_FAILED", 1))
        # Its object stays while the URL is valid: the URL is create-only, so the sender's
        # second PUT through it cannot land while the key is taken. (Deleted at once, the key
        # was free again and the second PUT left an object no task would ever remove.)
        # (S3: 412 for If-None-Match; Azure: 403, the SAS's create permission never overwrites.)
        self.assertIn(put["object_key"], self.objects())
        self.assertIn(curl(put, path), (403, 409, 412))
        # Removed at the URL's expiry plus the grace, and looked at once more after that.
        self.assertEqual(self.task(put["id"]), ("PENDING", 1, until + GRACE_MS))
        early = self.lodge("sweep", "--json", later="+30m")
        self.assertEqual(early.rc, 0, early)
        self.assertIn(put["object_key"], self.objects(), "not before the URL's expiry and the grace")
        converge(self, later="+2h")
        self.assertNotIn(put["object_key"], self.objects())
        self.assertEqual(self.task(put["id"])[:2], ("PENDING", 2), "the verify pass is owed")
        last = self.lodge("sweep", "--json", later="+4h")
        self.assertEqual(last.rc, 0, last)
        self.assertEqual(self.task(put["id"])[0], "SUCCESS")
        self.assertEqual(self.objects(), {})
        check_invariants(self)

    def test_other_bytes_found_after_the_url_expired_are_removed_at_once(self):
        path = self.write("in/late-evil.bin", os.urandom(3000))
        put = self.reserve(path, "--expires", "1m").json()
        status = curl(put, self.write("in/evil.bin", os.urandom(3000)))
        if status not in (200, 201):
            self.assertIn(status, (400, 403), "the server refused other bytes")
            return converge(self)
        # cron's --all-due, after the URL expired: nothing more can be sent through it.
        due = self.lodge("confirm", "--all-due", "--json", later="+2m")
        self.assertEqual(due.rc, 1, due)
        self.assertEqual(due.json_lines()[0]["error"]["code"], "CONTENT_MISMATCH", due)
        self.assertEqual(self.row(put["id"]), ("UPLOAD_FAILED", 1))
        self.assertNotIn(put["object_key"], self.objects(), "deleted at once")
        self.assertEqual(self.task(put["id"])[:2], ("PENDING", 2), "a PUT begun before the expiry gets a verify pass")
        converge(self)
        self.assertEqual(self.task(put["id"])[0], "SUCCESS")
        check_invariants(self)

    def test_a_reservation_never_sent_is_recovered_like_a_crashed_upload(self):
        path = self.write("in/never.bin", os.urandom(1000))
        put = self.reserve(path, "--expires", "1m").json()
        c = self.lodge("confirm", put["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertIn("nothing was uploaded yet", c.out)
        self.assertEqual(self.row(put["id"]), ("UPLOADING", 0), "a confirm before the URL expired changes nothing")
        # Its URL expired: --all-due fails it; the cleanup waits for the grace.
        due = self.lodge("confirm", "--all-due", "--json", later="+2m")
        self.assertEqual(due.rc, 1, due)
        self.assertEqual(due.json_lines()[0]["id"], put["id"], due)
        self.assertEqual(self.row(put["id"]), ("UPLOAD_FAILED", 1))
        check_invariants(self)
        converge(self)

    def test_repair_fails_a_reservation_past_its_deadline(self):
        path = self.write("in/late.bin", os.urandom(1000))
        put = self.reserve(path, "--expires", "1m").json()
        # Deadline = the URL's 1m + the policy's 10m.
        early = self.lodge("repair", "--json", later="+5m")
        self.assertEqual(early.json()["repaired"], 0, early)
        r = self.lodge("repair", "--json", later="+12m")
        self.assertEqual(r.json()["repaired"], 1, r)
        # A confirm after the deadline is refused, exactly like a late upload.
        c = self.lodge("confirm", "--json", put["id"], later="+12m")
        self.assertEqual(c.json()["error"]["code"], "STATE_CHANGED", c)
        converge(self)

    def test_concurrent_confirms_of_one_reservation_all_answer_active(self):
        # Four hosts confirm the same reservation at once: whichever activates it, every
        # other one finds the row ACTIVE with the object it verified, and says so (exit 0).
        # Several rounds, so the confirms overlap inside the check at least once.
        for n in range(5):
            data = os.urandom(50_000)
            path = self.write(f"in/race{n}.bin", data)
            put = self.reserve(path).json()
            self.assertIn(curl(put, path), (200, 201), put)
            procs = [self.spawn("confirm", *(["--json"] if i % 2 else []), put["id"]) for i in range(4)]
            for i, p in enumerate(procs):
                out, err = p.communicate(timeout=120)
                with self.subTest(round=n, confirm=i):
                    self.assertEqual(p.returncode, 0, (out, err))
                    if i % 2:
                        self.assertEqual(json.loads(out)["outcome"], "active", out)
                    else:
                        self.assertIn(f"active #{put['id']} ", out)
            self.assertEqual(self.row(put["id"]), ("ACTIVE", 0))
            self.assertEqual(self.object_bytes(put["object_key"]), data)
        check_invariants(self)

    def test_a_late_object_after_the_url_expired_is_confirmed_if_right(self):
        data = os.urandom(2000)
        path = self.write("in/slow.bin", data)
        put = self.reserve(path, "--expires", "1m").json()
        self.assertIn(curl(put, path), (200, 201))
        # cron's --all-due finds it there, whole: confirmed.
        due = self.lodge("confirm", "--all-due", "--json", later="+2m")
        self.assertEqual(due.rc, 0, due)
        self.assertEqual(due.json_lines()[0]["outcome"], "active", due)
        self.assertEqual(self.row(put["id"]), ("ACTIVE", 0))

    def test_an_expired_url_is_refused_and_the_reservation_repaired(self):
        data = os.urandom(3000)
        path = self.write("in/old.bin", data)
        # Made two hours ago with one hour to live.
        put = self.reserve(path, "--expires", "1h", later="-2h").json()
        # Azurite checks the SAS's expiry; in front of moto, the X-Amz-Date and X-Amz-Expires
        # signed in ("Request has expired", as S3 says).
        self.assertEqual(curl(put, path), 403)
        self.assertNotIn(put["object_key"], self.objects(), "a refused PUT stores nothing")
        if self.store_kind == "s3":
            q = dict(urllib.parse.parse_qsl(put["url"].split("?", 1)[1]))
            self.assertEqual(q["X-Amz-Expires"], "3600")
        # Past its deadline (1h + the policy's 10m, two hours ago): failed as repair fails it,
        # and whatever landed is removed after the grace.
        due = self.lodge("confirm", "--all-due", "--json")
        self.assertEqual(due.rc, 1, due)
        self.assertEqual(due.json_lines()[0]["error"]["code"], "DEADLINE_EXCEEDED", due)
        self.assertEqual(self.row(put["id"]), ("UPLOAD_FAILED", 1))
        converge(self)
        self.assertNotIn(put["object_key"], self.objects())

    def test_validation_and_quota_before_anything_is_recorded(self):
        path = self.write("in/x.bin", b"x" * 10)
        cases = [
            (["--sha256", "zz"], 2, "64 hex digits"),
            (["--size", "-1"], 2, "--size"),
            (["--expires", "8d"], 2, "--expires"),
        ]
        for extra, rc, words in cases:
            with self.subTest(extra=extra):
                args = {"--size": "10", "--sha256": "a" * 64, "--expires": "1h"}
                args[extra[0]] = extra[1]
                r = self.lodge("reserve", "x.bin", *[w for kv in args.items() for w in kv])
                self.assertEqual(r.rc, rc, r)
                self.assertIn(words, r.err)
        huge = self.lodge("reserve", "--json", "huge.iso", "--size", str(6 << 30), "--sha256", "a" * 64,
                          "--policy", "big")
        self.assertEqual((huge.rc, huge.json()["error"]["code"]), (1, "TOO_LARGE"), huge)
        self.assertIn("one presigned PUT", huge.json()["error"]["message"])
        bad = self.reserve(path, "--policy", "pdf")
        self.assertEqual((bad.rc, bad.json()["error"]["code"]), (1, "EXTENSION_NOT_ALLOWED"), bad)
        evil = self.reserve(path, name="../../etc/passwd\x1b[31m")
        self.assertEqual(evil.rc, 1, evil)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])

    def test_quota_race_eight_processes_two_slots(self):
        paths = [self.write(f"in/q{i}.bin", f"quota {i}\n") for i in range(8)]
        procs = []
        for p in paths:
            data = read(p)
            procs.append(self.spawn("reserve", "--json", "--policy", "two", os.path.basename(p),
                                    "--size", str(len(data)), "--sha256", hashlib.sha256(data).hexdigest()))
        outs = [(p.wait(timeout=120), json.loads(p.communicate()[0])) for p in procs]
        reserved = [o for rc, o in outs if rc == 0 and o["outcome"] == "reserved"]
        refused = [o for rc, o in outs if rc == 1]
        self.assertEqual(len(reserved), 2, outs)
        self.assertEqual({o["error"]["code"] for o in refused}, {"QUOTA_EXCEEDED"}, outs)
        self.assertEqual(len(refused), 6)
        check_invariants(self, max_files=2)

    def test_idempotency_key_replays_the_same_reservation(self):
        path = self.write("in/idem.bin", os.urandom(500))
        first = self.reserve(path, "--idempotency-key", "req-1").json()
        second = self.reserve(path, "--idempotency-key", "req-1")
        self.assertEqual(second.rc, 0, second)
        self.assertEqual((second.json()["outcome"], second.json()["id"]), ("replayed", first["id"]))
        self.assertIn("url", second.json(), "an open reservation's URL is handed out again")
        self.assertIn(curl(second.json(), path), (200, 201))
        self.assertEqual(self.lodge("confirm", first["id"]).rc, 0)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(1,)])

    @s3_only("SigV4 query signing")
    def test_the_url_is_the_sdks_signature_over_every_pinned_header(self):
        # The server in front of moto checks the signature with code written for these tests;
        # botocore (the SDK's own SigV4) signs the same request too, and the two must agree.
        data = b"pinned\n"
        path = self.write("in/a b+c.tar.gz", data)
        r = self.reserve(path, "--expires", "15m", "--metadata", "build=42", "--cache-control", "max-age=60")
        self.assertEqual(r.rc, 0, r)
        put = r.json()
        self.assertEqual({k: put["headers"][k] for k in ("content-length", "if-none-match", "cache-control",
                                                          "x-amz-meta-build", "x-amz-meta-lodgerecord")},
                         {"content-length": str(len(data)), "if-none-match": "*", "cache-control": "max-age=60",
                          "x-amz-meta-build": "42", "x-amz-meta-lodgerecord": str(put["id"])})
        self.assertEqual(put["headers"]["x-amz-checksum-sha256"],
                         __import__("base64").b64encode(hashlib.sha256(data).digest()).decode())
        scope = dict(urllib.parse.parse_qsl(put["url"].split("?", 1)[1]))["X-Amz-Credential"].split("/")
        ours, theirs = botocore_presigned(put, scope[0], self.env["AWS_SECRET_ACCESS_KEY"], scope[2])
        self.assertEqual(ours["X-Amz-Expires"], "900")
        self.assertEqual(ours["X-Amz-SignedHeaders"], theirs["X-Amz-SignedHeaders"])
        self.assertEqual(ours["X-Amz-Signature"], theirs["X-Amz-Signature"])
        # The same request with one header changed is another signature: S3 refuses it.
        put["headers"]["content-type"] = "text/html"
        self.assertNotEqual(ours["X-Amz-Signature"],
                            botocore_presigned(put, scope[0], self.env["AWS_SECRET_ACCESS_KEY"], scope[2])[1]
                            ["X-Amz-Signature"])
        self.assertEqual(curl(put, path), 403, "a header sent other than signed is refused")
        # Sent as printed, with curl alone: stored, confirmed, checked with the aws CLI.
        put["headers"]["content-type"] = r.json()["headers"]["content-type"]
        self.assertEqual(curl(put, path), 200)
        self.assertEqual(self.lodge("confirm", put["id"]).rc, 0)
        head = aws(self.moto.endpoint, "s3api", "head-object", "--bucket", self.bucket, "--key", put["object_key"])
        self.assertEqual((head["ContentLength"], head["Metadata"]["build"], head["CacheControl"]),
                         (len(data), "42", "max-age=60"))
        back = os.path.join(self.dir, "back.tgz")
        aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", put["object_key"], back)
        self.assertEqual(read(back), data)

    def test_the_sas_lets_its_holder_create_the_blob_and_nothing_else(self):
        if self.store_kind != "az":
            self.skipTest("an Azure SAS (S3's URL signs one PUT with its headers: tested above)")
        data = b"report\n"
        path = self.write("in/report.txt", data)
        put = self.reserve(path, "--tag", "team=ci").json()
        sas = dict(urllib.parse.parse_qsl(put["url"].split("?", 1)[1]))
        self.assertEqual(sas["sp"], "c", "create, and no tag permission")
        self.assertNotIn("x-ms-tags", put["headers"], "the sender sets no tags")
        self.assertEqual(curl(put, path), 201)
        # Confirm tags the blob itself: committed, with the tags asked for.
        c = self.lodge("confirm", "--json", put["id"])
        self.assertEqual((c.rc, c.json()["outcome"]), (0, "active"), c)
        self.assertEqual(self.object_tags(put["object_key"]), {"state": "committed", "team": "ci"})
        # The URL's holder cannot tag it pending (which the lifecycle rule would delete),
        # overwrite it, read it or delete it.
        retag = azblob(self.azurite.endpoint, "url-set-tags", put["url"], "state=pending", check=False)
        self.assertEqual(retag.get("error", {}).get("status"), 403, retag)
        self.assertEqual(self.object_tags(put["object_key"]), {"state": "committed", "team": "ci"})
        self.assertEqual(curl(put, self.write("in/other.txt", b"other!\n")), 403)
        for method in ("GET", "DELETE"):
            p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method, put["url"]],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.stdout, "403", method)
        self.assertEqual(self.object_bytes(put["object_key"]), data)
        check_invariants(self)

    def test_another_content_type_is_refused_at_confirm(self):
        path = self.write("in/note.txt", b"<script>alert(1)</script>\n")
        put = self.reserve(path).json()
        header = "x-ms-blob-content-type" if self.store_kind == "az" else "content-type"
        self.assertEqual(put["headers"][header], "text/plain")
        status = curl(put, path, {header: "text/html"})
        if self.store_kind == "s3":
            self.assertEqual(status, 403, "S3 signs Content-Type in")
            self.assertEqual(self.objects(), {})
            return
        # Azure's SAS pins no header: the blob is stored as text/html, and confirm refuses it.
        self.assertEqual(status, 201)
        self.assertEqual(self.head(put["object_key"])["content_type"], "text/html")
        c = self.lodge("confirm", "--json", put["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertEqual(c.json()["error"]["code"], "CONTENT_MISMATCH", c)
        self.assertIn("text/html", c.json()["error"]["message"])
        self.assertEqual(self.row(put["id"]), ("UPLOAD_FAILED", 1))
        url = self.lodge("url", put["id"])
        self.assertEqual(url.rc, 1, "never served")
        # Failed like other bytes: removed after the URL's expiry and the grace (the blob
        # carries no tag, which a failed upload's guarded delete counts as pending).
        self.assertEqual(self.task(put["id"])[:2], ("PENDING", 1))
        converge(self, later="+2h")
        self.assertEqual(self.objects(), {})
        check_invariants(self)

    @s3_only("SigV4 query signatures, checked in front of moto as S3 checks them")
    def test_the_server_refuses_what_the_url_does_not_sign(self):
        data = os.urandom(5000)
        path = self.write("in/signed.bin", data)
        put = self.reserve(path, "--expires", "10m").json()
        q = dict(urllib.parse.parse_qsl(put["url"].split("?", 1)[1]))
        self.assertTrue({"content-length", "content-type", "host", "if-none-match", "x-amz-checksum-sha256",
                         "x-amz-meta-lodgerecord"} <= set(q["X-Amz-SignedHeaders"].split(";")), q)
        # Other bytes with their own Content-Length: not the length signed.
        bigger = self.write("in/bigger.bin", data + b"more")
        self.assertEqual(curl(put, bigger, {"content-length": str(len(data) + 4)}), 403)
        # A pinned header left out; an x-amz header the URL does not sign.
        self.assertEqual(curl(put, path, {"x-amz-checksum-sha256": None}), 403)
        self.assertEqual(curl(put, path, {"x-amz-storage-class": "GLACIER"}), 403)
        # The signature with one digit changed; the expiry stretched after signing.
        sig = q["X-Amz-Signature"]
        forged = put["url"].replace(sig, sig[:-1] + ("0" if sig[-1] != "0" else "1"))
        self.assertEqual(curl(put, path, url=forged), 403)
        self.assertEqual(curl(put, path, url=put["url"].replace("X-Amz-Expires=600", "X-Amz-Expires=6000")), 403)
        self.assertEqual(self.objects(), {}, "nothing refused reached the store")
        # The request as signed: stored, confirmed, read back with the aws CLI.
        self.assertEqual(curl(put, path), 200)
        c = self.lodge("confirm", "--json", put["id"])
        self.assertEqual((c.rc, c.json()["outcome"]), (0, "active"), c)
        back = os.path.join(self.dir, "back.bin")
        aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", put["object_key"], back)
        self.assertEqual(read(back), data)
        # Once stored, the same URL cannot replace it (If-None-Match: * is signed in).
        self.assertEqual(curl(put, path), 412)
        check_invariants(self)

    def test_the_url_is_never_logged(self):
        path = self.write("in/secret.bin", os.urandom(100))
        data = read(path)
        r = self.lodge("-v", "reserve", "secret.bin", "--size", str(len(data)),
                       "--sha256", hashlib.sha256(data).hexdigest())
        self.assertEqual(r.rc, 0, r)
        url = [l for l in r.out.splitlines() if l.startswith("PUT ")][0][4:]
        query = url.split("?", 1)[1]
        self.assertNotIn(query, r.err)
        self.assertNotIn("sig=", r.err)
        self.assertNotIn("X-Amz-Signature", r.err)
        self.assertIn("lodge confirm", r.err)


class DirectFileStore(LodgeTestCase):
    def test_a_store_that_cannot_sign_refuses_before_recording(self):
        self.env["LODGE_STORE"] = "file://" + os.path.join(self.dir, "store")
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        r = self.lodge("reserve", "a.bin", "--size", "1", "--sha256", "0" * 64)
        self.assertEqual(r.rc, 1, r)
        self.assertIn("cannot sign an upload URL", r.err)
        self.assertIn("(UNSUPPORTED)", r.err)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])


def botocore_presigned(put, key_id, secret, region):
    """The presigned URL botocore (the AWS SDK's own SigV4 code, not lodge's) makes for the
    same method, key, headers, time and expiry: equal to lodge's only if every pinned
    header is signed as S3 will check it."""
    import datetime
    from unittest import mock

    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    base, query = put["url"].split("?", 1)
    params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    when = datetime.datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    req = AWSRequest(method=put["method"], url=base, headers=dict(put["headers"]))
    auth = botocore.auth.S3SigV4QueryAuth(Credentials(key_id, secret), "s3", region,
                                          expires=int(params["X-Amz-Expires"]))
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=when):
        auth.add_auth(req)
    theirs = dict(urllib.parse.parse_qsl(req.url.split("?", 1)[1], keep_blank_values=True))
    return params, theirs


if __name__ == "__main__":
    main()
