"""What an object carries besides its bytes: Content-Type from the extension through
/etc/mime.types when the content agrees (else the detected type), `--content-type`,
`--metadata`, `--tag`, `--storage-class`, `--sse`, `--cache-control`, and the same as policy
keys. Validated before anything is recorded, recorded on the row, and checked on the object
with the aws CLI (moto), on Azurite, and refused where a store cannot keep them (file://)."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import AzureTestCase, LodgeTestCase, S3TestCase, aws, azblob, main  # noqa: E402


def head(tc, key):
    return aws(tc.moto.endpoint, "s3api", "head-object", "--bucket", tc.bucket, "--key", key)


def tagging(tc, key):
    r = aws(tc.moto.endpoint, "s3api", "get-object-tagging", "--bucket", tc.bucket, "--key", key)
    return {t["Key"]: t["Value"] for t in r["TagSet"]}


class ContentTypes(S3TestCase):
    def test_extension_types_where_the_content_agrees(self):
        files = {
            "style.css": "body { color: red }\n",
            "bundle.js": "export const x = 1;\n",
            "data.json": '{"a": 1}\n',
            "notes.bin": "plain text in a .bin file\n",  # text named as binary: stays text/plain
            "font.woff2": os.urandom(2048),               # no opinion from the bytes: the extension's
            "README": "no extension\n",
        }
        for name, body in files.items():
            self.write(os.path.join("site", name), body)
        r = self.lodge("upload", "--json", os.path.join(self.dir, "site"))
        self.assertEqual(r.rc, 0, r)
        got = {os.path.basename(l["file"]): l for l in r.json_lines() if "file" in l}
        want = {"style.css": "text/css", "bundle.js": "text/javascript", "data.json": "application/json",
                "notes.bin": "text/plain", "font.woff2": "font/woff2", "README": "text/plain"}
        for name, ctype in want.items():
            self.assertEqual(got[name]["content_type"], ctype, got[name])
            self.assertEqual(head(self, got[name]["object_key"])["ContentType"], ctype, name)
        # The detected type is kept too: what a policy's media_types checks.
        self.assertEqual(got["style.css"]["media_type"], "text/plain")
        rows = dict(self.sql("SELECT relative_path, content_type FROM file_upload"))
        self.assertEqual(rows["style.css"], "text/css")
        listed = {l["path"]: l for l in self.lodge("list", "--json").json_lines()}
        self.assertEqual(listed["bundle.js"]["content_type"], "text/javascript")

    def test_content_type_flag_overrides(self):
        path = self.write("page.css", "x{}\n")
        r = self.lodge("upload", "--json", "--content-type", "text/plain; charset=utf-8", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        self.assertEqual(head(self, key)["ContentType"], "text/plain; charset=utf-8")


class Options(S3TestCase):
    def test_metadata_tags_storage_class_sse_cache_control(self):
        path = self.write("report.pdf.txt", "quarterly\n")
        r = self.lodge("upload", "--json", "--metadata", "Project=atlas", "--metadata", "build=42",
                       "--tag", "team=ops", "--tag", "retention=90d", "--storage-class", "STANDARD_IA",
                       "--sse", "AES256", "--cache-control", "max-age=3600", path)
        self.assertEqual(r.rc, 0, r)
        res = r.json_lines()[0]
        self.assertEqual(res["outcome"], "active", res)
        h = head(self, res["object_key"])
        self.assertEqual(h["Metadata"]["project"], "atlas")
        self.assertEqual(h["Metadata"]["build"], "42")
        self.assertEqual(h["Metadata"]["lodgerecord"], str(res["id"]), "lodge's stamp is there too")
        self.assertEqual(h["StorageClass"], "STANDARD_IA")
        self.assertEqual(h["ServerSideEncryption"], "AES256")
        self.assertEqual(h["CacheControl"], "max-age=3600")
        self.assertEqual(tagging(self, res["object_key"]), {"team": "ops", "retention": "90d"})
        [(options,)] = self.sql("SELECT object_options FROM file_upload WHERE id = ?", (res["id"],))
        self.assertEqual(json.loads(options), {
            "cache_control": "max-age=3600", "metadata": {"build": "42", "project": "atlas"},
            "sse": "AES256", "storage_class": "STANDARD_IA", "tags": {"retention": "90d", "team": "ops"}})

    def test_multipart_objects_carry_them_too(self):
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(
            {"multipart_threshold": "5MiB", "part_size": "5MiB"}))
        path = self.write("big.bin", os.urandom(6 << 20))
        r = self.lodge("upload", "--json", "--metadata", "kind=big", "--tag", "t=1",
                       "--storage-class", "STANDARD_IA", "--cache-control", "no-cache", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        h = head(self, key)
        self.assertEqual((h["Metadata"]["kind"], h["StorageClass"], h["CacheControl"]),
                         ("big", "STANDARD_IA", "no-cache"))
        self.assertEqual(tagging(self, key), {"t": "1"})

    def test_policy_keys_with_flags_over_them(self):
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps({"policies": {"archive": {
            "metadata": {"Source": "ci", "kind": "log"}, "tags": {"class": "archive"},
            "storage_class": "GLACIER_IR", "cache_control": "max-age=60"}}}))
        path = self.write("build.log", "log line\n")
        r = self.lodge("upload", "--json", "--policy", "archive", "--metadata", "kind=trace",
                       "--tag", "extra=yes", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        h = head(self, key)
        self.assertEqual({k: v for k, v in h["Metadata"].items() if not k.startswith("lodge")},
                         {"source": "ci", "kind": "trace"})
        self.assertEqual((h["StorageClass"], h["CacheControl"]), ("GLACIER_IR", "max-age=60"))
        self.assertEqual(tagging(self, key), {"class": "archive", "extra": "yes"})
        shown = self.lodge("config", "--json").json()["policies"]["archive"]
        self.assertEqual(shown["tags"], {"class": "archive"})

    def test_state_tags_keep_the_users_tags(self):
        # With lodge's state tag on, the commit rewrites the tag set: the user's tags stay.
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps({"tag_state": True}))
        self.rebind({})  # the ledger records the tagging mode its hosts use
        path = self.write("t.txt", "tagged\n")
        r = self.lodge("upload", "--json", "--tag", "team=ops", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        self.assertEqual(tagging(self, key), {"team": "ops", "lodge-state": "committed"})

    def test_bad_options_are_refused_before_anything_is_recorded(self):
        path = self.write("x.txt", "x\n")
        cases = [
            (["--metadata", "no-equals"], "--metadata: expected NAME=VALUE"),
            (["--metadata", "bad name=1"], "a name is 1-128 lowercase letters, digits and '_'"),
            (["--metadata", "lodgerecord=1"], "is lodge's own"),
            (["--metadata", "k=caf\u00e9"], "must be printable ASCII"),
            (["--tag", "aws:x=1"], "keys starting with aws: are AWS's own"),
            (["--tag", "k=a&b"], "a tag value is 0-256 letters"),
            (["--sse", "DES"], "expected AES256 or aws:kms"),
            (["--sse", "AES256", "--sse-kms-key-id", "k1"], "a KMS key id needs sse aws:kms"),
            (["--storage-class", "cold storage"], "expected a name like STANDARD_IA"),
            (["--content-type", "css"], "expected type/subtype"),
            (["--cache-control", "a\tb"], "expected printable ASCII"),
            ([a for i in range(11) for a in ("--tag", f"k{i}=v")], "11 tags; an object takes at most 10"),
        ]
        for args, message in cases:
            r = self.lodge("upload", *args, path)
            self.assertEqual(r.rc, 2, (args, r))
            self.assertIn(message, r.err, args)
            self.assertIn("USAGE", r.err, args)
        bad_policy = self.write("bad.json", json.dumps({"policies": {"p": {"tags": {"aws:k": "v"}}}}))
        r = self.lodge("upload", path, env={"LODGE_CONFIG": bad_policy})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("policies.p tags: keys starting with aws: are AWS's own", r.err)
        self.assertIn("CONFIG_INVALID", r.err)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])
        self.assertEqual(self.objects(), {})


class OptionsOnFileStore(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})
        self.init()

    def test_kept_where_it_can_and_refused_where_not(self):
        path = self.write("a.css", "a{}\n")
        r = self.lodge("upload", "--json", "--tag", "team=ops", "--cache-control", "max-age=5",
                       "--metadata", "k=v", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        # Kept on the object's file itself (user.lodge.meta), not beside it.
        side = json.loads(os.getxattr(os.path.join(self.root, key), "user.lodge.meta"))
        self.assertFalse(os.path.exists(os.path.join(self.root, ".lodge-meta", key + ".json")))
        self.assertEqual((side["content_type"], side["tags"], side["cache_control"], side["metadata"]["k"]),
                         ("text/css", {"team": "ops"}, "max-age=5", "v"))
        for args, message in [(["--storage-class", "STANDARD_IA"], "it has no storage classes"),
                              (["--sse", "AES256"], "server-side encryption is for S3")]:
            other = self.write("b.txt", "b\n")
            r = self.lodge("upload", *args, other)
            self.assertEqual(r.rc, 1, r)  # UNSUPPORTED's exit status
            self.assertIn(message, r.err)
            self.assertIn("UNSUPPORTED", r.err)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(1,)])


class OptionsOnAzure(AzureTestCase):
    def test_tags_tier_cache_control_and_no_sse(self):
        path = self.write("a.css", "a{}\n")
        r = self.lodge("upload", "--json", "--tag", "team=ops", "--cache-control", "max-age=5",
                       "--storage-class", "Cool", "--metadata", "k=v", path)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        h = self.az("head", self.container, key)
        self.assertEqual((h["content_type"], h["cache_control"], h["access_tier"]), ("text/css", "max-age=5", "Cool"))
        self.assertEqual(h["metadata"]["k"], "v")
        self.assertEqual(h["tags"], {"team": "ops", "state": "committed"})
        r = self.lodge("upload", "--sse", "AES256", self.write("b.txt", "b\n"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("UNSUPPORTED", r.err)
        self.assertIn("Azure Storage encrypts every blob itself", r.err)
        r = self.lodge("upload", "--storage-class", "GLACIER", self.write("c.txt", "c\n"))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("takes an access tier: Hot, Cool, Cold or Archive", r.err)


if __name__ == "__main__":
    main()
