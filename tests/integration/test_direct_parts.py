"""Direct uploads in parts: `lodge reserve --parts` begins a staged upload and prints one
presigned URL per part (S3: an UploadPart of the multipart upload, its length signed in;
Azure: a SAS for Put Block with that part's block id, which pins no length); a host without
credentials sends each part with curl; `lodge confirm` lists the parts, checks their numbers
and sizes, completes the upload create-only and verifies the whole object (size, stamp,
SHA-256) before the row becomes ACTIVE. Wrong parts fail the row and their staged upload or
object is cleaned by sweep. On moto behind a server that checks presigned URLs as S3 does
(tests/harness/motosigned.py), and on Azurite with LODGE_IT_STORE=az (the SAS checked by
Azurite, the committed blob read back by the official SDK)."""

import base64
import hashlib
import json
import os
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (PresignCheckingMoto, StoreTestCase, aws, check_invariants, converge,  # noqa: E402
                       main)

CONFIG = {
    "policies": {"default": {"max_size": "64MiB", "deadline": "10m", "grace": "5s"},
                 "big": {"max_size": "1TiB", "deadline": "10m", "grace": "5s"}},
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
}
MIB = 1 << 20


def send_part(part, body, path, headers=None):
    """Sends `body` as the part says, with curl alone (`headers` over the printed ones, None
    leaving one out so curl sets its own); returns the HTTP status."""
    with open(path, "wb") as f:
        f.write(body)
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", part["method"], "--upload-file", path]
    sent = dict(part["headers"])
    sent.update(headers or {})
    for k, v in sent.items():
        if v is not None:
            cmd += ["-H", f"{k}: {v}"]
    cmd.append(part["url"])
    p = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60)
    return int(p.stdout or 0)


def query(url):
    return dict(urllib.parse.parse_qsl(url.split("?", 1)[1]))


class DirectParts(StoreTestCase):
    moto_class = PresignCheckingMoto  # every presigned URL checked as S3 checks it

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()

    def reserve(self, data, *args, name="image.raw", **kw):
        return self.lodge("reserve", "--json", name, "--size", str(len(data)),
                          "--sha256", hashlib.sha256(data).hexdigest(), "--parts", "--part-size", "5MiB",
                          *args, **kw)

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (rid,))[0]

    def send(self, res, data, numbers=None):
        for part in res["parts"]:
            if numbers is None or part["number"] in numbers:
                body = data[part["offset"]:part["offset"] + part["size"]]
                # S3's UploadPart answers 200, Azure's Put Block 201.
                self.assertIn(send_part(part, body, os.path.join(self.dir, "part.bin")), (200, 201), part)

    def check_urls(self, res):
        """Each URL sends its part of the row's staged upload, and nothing but that part's
        length where the store can pin it."""
        handle = self.sql("SELECT multipart_upload_id FROM file_upload WHERE id = ?", (res["id"],))[0][0]
        for p in res["parts"]:
            q = query(p["url"])
            self.assertEqual(p["headers"], {"content-length": str(p["size"])})
            if self.store_kind == "az":
                # Put Block (write: Azure has no narrower permission for it), the block id the
                # handle, the part number and no digest (the sender's Content-MD5 is its own).
                self.assertEqual((q["comp"], q["sp"], q["sr"]), ("block", "w", "b"))
                self.assertEqual(base64.b64decode(q["blockid"]).decode(), f"{handle}-{p['number']:06d}-" + "-" * 32)
            else:
                self.assertEqual((q["partNumber"], q["uploadId"]), (str(p["number"]), handle))
                self.assertIn("content-length", q["X-Amz-SignedHeaders"].split(";"))

    def stored_bytes(self, key):
        """The object as a reader other than lodge gets it: the aws CLI, or the Azure SDK."""
        if self.store_kind == "az":
            return self.object_bytes(key)
        out = os.path.join(self.dir, "back.bin")
        aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", key, out)
        with open(out, "rb") as f:
            return f.read()

    def test_each_part_sent_with_curl_then_confirm(self):
        data = os.urandom(12 * MIB)
        r = self.reserve(data)
        self.assertEqual(r.rc, 0, r)
        res = r.json()
        self.assertEqual(res["outcome"], "reserved", r)
        self.assertEqual([(p["number"], p["offset"], p["size"]) for p in res["parts"]],
                         [(1, 0, 5 * MIB), (2, 5 * MIB, 5 * MIB), (3, 10 * MIB, 2 * MIB)])
        self.check_urls(res)
        # Nothing sent yet (on Azure, no staged upload exists before its first block): confirm
        # waits while the URLs are valid, and nothing changes.
        early = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(early.rc, 1, early)
        self.assertEqual(self.row(res["id"]), ("UPLOADING", 0))
        # Two of three sent: confirm waits, nothing changes.
        self.send(res, data, {1, 3})
        self.assertEqual(self.staged(), [res["object_key"]])
        early = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(early.rc, 1, early)
        self.assertIn("2 of 3 parts uploaded yet", early.json()["error"]["message"])
        self.assertEqual(self.row(res["id"]), ("UPLOADING", 0))
        self.send(res, data, {2})
        c = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(c.rc, 0, c)
        self.assertEqual(c.json()["outcome"], "active", c)
        self.assertEqual(self.row(res["id"]), ("ACTIVE", 0))
        self.assertEqual(self.staged(), [])
        self.assertEqual(hashlib.sha256(self.stored_bytes(res["object_key"])).hexdigest(),
                         hashlib.sha256(data).hexdigest())
        if self.store_kind == "az":  # committed blocks: tagged as any confirmed blob
            self.assertEqual(self.object_tags(res["object_key"]), {"state": "committed"})
        again = self.lodge("confirm", res["id"])
        self.assertEqual(again.rc, 0, again)
        check_invariants(self)

    def test_text_output_lists_one_put_per_part_and_a_curl_loop(self):
        data = os.urandom(11 * MIB)
        r = self.lodge("reserve", "big.iso", "--size", str(len(data)), "--sha256", hashlib.sha256(data).hexdigest(),
                       "--parts", "--part-size", "5MiB")
        self.assertEqual(r.rc, 0, r)
        puts = [line for line in r.out.splitlines() if line.startswith("PUT ")]
        self.assertEqual(len(puts), 3, r.out)
        self.assertIn("parts 3 of 5242880 bytes (the last 1048576)", r.out)
        self.assertIn("curl --fail", r.out)

    def test_a_part_of_other_bytes_fails_confirm_and_the_object_is_cleaned(self):
        data = os.urandom(12 * MIB)
        res = self.reserve(data).json()
        self.send(res, data, {1, 3})
        # Part 2 with other bytes of its length: moto checks no checksum, so confirm must.
        bad = res["parts"][1]
        self.assertIn(send_part(bad, os.urandom(bad["size"]), os.path.join(self.dir, "evil.bin")), (200, 201))
        c = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertEqual(c.json()["error"]["code"], "CONTENT_MISMATCH", c)
        self.assertIn("SHA-256", c.json()["error"]["message"])
        self.assertEqual(self.row(res["id"]), ("UPLOAD_FAILED", 1))
        self.assertEqual(self.sql("SELECT COUNT(*) FROM file_upload WHERE upload_status = 'ACTIVE'")[0][0], 0)
        converge(self, later="+3h")
        self.assertEqual(self.objects(), {})
        self.assertEqual(self.staged(), [])
        check_invariants(self)

    def test_a_part_of_another_size_is_refused_and_the_staged_upload_aborted_by_sweep(self):
        if self.store_kind == "az":
            self.skipTest("an Azure SAS pins no length: test_a_part_of_another_size_fails_confirm_on_azure")
        data = os.urandom(12 * MIB)
        res = self.reserve(data, "--expires", "1m").json()
        self.send(res, data, {1})
        # Another length than the URL signs: the server refuses it.
        short = res["parts"][1]
        status = send_part(short, data[5 * MIB:9 * MIB], os.path.join(self.dir, "short.bin"),
                           {"content-length": None})
        self.assertEqual(status, 403)
        c = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertIn("1 of 3 parts", c.json()["error"]["message"])
        self.assertEqual(self.row(res["id"]), ("UPLOADING", 0))
        # The URLs expired: cron's --all-due fails it; sweep aborts the staged upload.
        due = self.lodge("confirm", "--all-due", "--json", later="+2m")
        self.assertEqual(due.rc, 1, due)
        self.assertEqual(due.json_lines()[0]["id"], res["id"], due)
        self.assertEqual(self.row(res["id"]), ("UPLOAD_FAILED", 1))
        self.assertEqual(self.staged(), [res["object_key"]], "the parts stay until sweep")
        converge(self)
        self.assertEqual(self.staged(), [])
        self.assertEqual(self.objects(), {})
        check_invariants(self)

    def test_a_part_of_another_size_fails_confirm_on_azure(self):
        if self.store_kind != "az":
            self.skipTest("S3's URL signs the length: the server refuses another (tested above)")
        data = os.urandom(12 * MIB)
        res = self.reserve(data).json()
        self.send(res, data, {1, 3})
        # Azure stages a block of any length under the SAS; confirm refuses the part's size.
        short = res["parts"][1]
        self.assertEqual(send_part(short, data[5 * MIB:9 * MIB], os.path.join(self.dir, "short.bin"),
                                   {"content-length": None}), 201)
        c = self.lodge("confirm", "--json", res["id"])
        self.assertEqual(c.rc, 1, c)
        self.assertEqual(c.json()["error"]["code"], "CONTENT_MISMATCH", c)
        self.assertIn("its part 2 is 4194304 bytes, reserved 5242880", c.json()["error"]["message"])
        self.assertEqual(self.row(res["id"]), ("UPLOAD_FAILED", 1))
        self.assertEqual(self.objects(), {})
        converge(self, later="+3h")
        self.assertEqual(self.staged(), [])
        self.assertEqual(self.objects(), {})
        check_invariants(self)

    def test_a_part_sent_twice_is_the_last_one_sent(self):
        data = os.urandom(7 * MIB)
        res = self.reserve(data).json()
        # Part 1 first with other bytes, then again with the right ones: the same part (S3:
        # the same number; Azure: the same block id) is replaced.
        first = res["parts"][0]
        self.assertIn(send_part(first, os.urandom(first["size"]), os.path.join(self.dir, "wrong.bin")), (200, 201))
        self.send(res, data)
        c = self.lodge("confirm", "--json", res["id"])
        self.assertEqual((c.rc, c.json()["outcome"]), (0, "active"), c)
        self.assertEqual(self.stored_bytes(res["object_key"]), data)
        check_invariants(self)

    def test_a_replayed_reservation_prints_the_same_upload_s_parts_again(self):
        data = os.urandom(6 * MIB)
        first = self.reserve(data, "--idempotency-key", "k1").json()
        again = self.reserve(data, "--idempotency-key", "k1")
        self.assertEqual(again.rc, 0, again)
        second = again.json()
        self.assertEqual((second["outcome"], second["id"]), ("replayed", first["id"]), again)
        # The same staged upload: S3's upload id, Azure's block ids (the handle in them).
        name = "blockid" if self.store_kind == "az" else "uploadId"
        self.assertEqual([query(p["url"])[name] for p in second["parts"]],
                         [query(p["url"])[name] for p in first["parts"]])
        self.assertEqual(len(self.sql("SELECT multipart_upload_id FROM file_upload")), 1)
        self.send(second, data)
        self.assertEqual(len(self.staged()), 1, "one staged upload, not two")
        c = self.lodge("confirm", "--json", first["id"])
        self.assertEqual(c.json()["outcome"], "active", c)
        self.assertEqual(self.stored_bytes(first["object_key"]), data)

    def test_bad_part_sizes_are_refused_before_anything_is_recorded(self):
        data = b"x" * (6 * MIB)
        r = self.reserve(data, "--part-size", "1MiB")
        self.assertEqual(r.rc, 2, r)
        self.assertEqual(self.sql("SELECT COUNT(*) FROM file_upload")[0][0], 0)
        r = self.lodge("reserve", "a.bin", "--size", "10", "--sha256", "0" * 64, "--part-size", "5MiB")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--part-size needs --parts", r.err)
        if self.store_kind == "az":  # a block holds at most 4000 MiB
            r = self.lodge("reserve", "huge.img", "--size", str(5 << 30), "--sha256", "0" * 64, "--parts",
                           "--part-size", "4500MiB", "--policy", "big")
            self.assertEqual(r.rc, 2, r)
            self.assertIn("is above the", r.out + r.err, r)
            self.assertEqual(self.sql("SELECT COUNT(*) FROM file_upload")[0][0], 0)


if __name__ == "__main__":
    main()
