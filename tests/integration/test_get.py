"""Getting files back: lodge show, get, cat and url against a real moto_server, and the
same on a file:// store: a tree restored byte for byte, digests checked while the bytes
stream (a corrupted object leaves no file), atomic writes, presigned URLs fetched with curl."""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, S3TestCase, epoch_ms, main  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "64MiB", "deadline": "60s", "grace": "1s"}}}


def botocore_signature(url, key_id, secret, region="us-east-1"):
    """The SigV4 query signature botocore (an independent implementation) computes for
    the URL's path, host, date and expiry: neither moto nor s3rver checks one."""
    from unittest import mock
    from urllib.parse import parse_qsl, urlsplit
    import datetime
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    parts = urlsplit(url)
    q = dict(parse_qsl(parts.query))
    when = datetime.datetime.strptime(q["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
    req = AWSRequest(method="GET", url=f"{parts.scheme}://{parts.netloc}{parts.path}")
    auth = S3SigV4QueryAuth(Credentials(key_id, secret), "s3", region, expires=int(q["X-Amz-Expires"]))
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        auth.add_auth(req)
    theirs = dict(parse_qsl(urlsplit(req.url).query))
    for k in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders"):
        assert theirs[k] == q[k], (k, theirs[k], q[k])
    return q["X-Amz-Signature"], theirs["X-Amz-Signature"]


class GetMixin:
    def setUp(self):
        super().setUp()
        self.store_env()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        r = self.lodge("init")
        self.assertEqual(r.rc, 0, r)

    def store_env(self):
        """Points self.env at the test's store (S3TestCase already has)."""

    def upload(self, *paths, env=None, expect=0):
        r = self.lodge("upload", "--json", *paths, env=env)
        self.assertEqual(r.rc, expect, r)
        lines = r.json_lines()
        self.assertIn("summary", lines[-1], r)
        return lines[:-1]

    def upload_one(self, name, data, **kw):
        files = self.upload(self.write(name, data), **kw)
        self.assertEqual(len(files), 1)
        return files[0]

    def lodge_in(self, cwd, *args):
        """lodge run in another working directory (for get without -o)."""
        p = subprocess.run([LODGE, "--db", self.db] + [str(a) for a in args], capture_output=True, cwd=cwd,
                           env=self.env, timeout=120)
        return p

    def cat(self, *args):
        """lodge cat, with stdout kept as bytes."""
        return subprocess.run([LODGE, "--db", self.db, "cat"] + [str(a) for a in args], capture_output=True,
                              env=self.env, timeout=120)

    @staticmethod
    def read(path):
        with open(path, "rb") as fh:
            return fh.read()

    def leftovers(self, directory):
        """Every name under directory (temporary files included)."""
        out = []
        for base, dirs, files in os.walk(directory):
            out += [os.path.relpath(os.path.join(base, n), directory) for n in files]
        return sorted(out)

    def corrupt(self, key, data):
        raise NotImplementedError

    # --- shared scenarios -------------------------------------------------------------

    def check_get_by_id_and_cat(self):
        data = os.urandom(200_000)
        f = self.upload_one("in/blob.bin", data)
        out = os.path.join(self.dir, "out")
        os.makedirs(out)
        # Without -o: the base name in the current directory.
        p = self.lodge_in(out, "get", f["id"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read(os.path.join(out, "blob.bin")), data)
        # -o FILE, then the same again: identical → skipped, no download needed.
        target = os.path.join(out, "copy.bin")
        r = self.lodge("--json", "get", f["id"], "-o", target)
        self.assertEqual(r.rc, 0, r)
        lines = r.json_lines()
        self.assertEqual(lines[0]["outcome"], "written", r)
        self.assertEqual(lines[0]["sha256"], hashlib.sha256(data).hexdigest())
        self.assertEqual(lines[-1]["summary"]["written"], 1)
        self.assertEqual(self.read(target), data)
        r = self.lodge("--json", "get", f["id"], "-o", target)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[0]["outcome"], "skipped")
        # A different file there: refused, named, left as it was; --force replaces it.
        with open(target, "wb") as fh:
            fh.write(b"something else")
        r = self.lodge("--json", "get", f["id"], "-o", target)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.json_lines()[0]["error"]["code"], "OUTPUT_EXISTS")
        self.assertIn("copy.bin", r.json_lines()[0]["error"]["message"])
        self.assertEqual(self.read(target), b"something else")
        r = self.lodge("get", f["id"], "-o", target, "--force")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.read(target), data)
        self.assertEqual(self.leftovers(out), ["blob.bin", "copy.bin"])
        # cat: the bytes on stdout.
        p = self.cat(f["id"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, data)
        return f

    def check_corrupted_object(self):
        data = b"the real content\n" * 1000
        f = self.upload_one("c.txt", data)
        out = os.path.join(self.dir, "out-c")
        os.makedirs(out)
        for bad in (b"X" + data[1:], data + b"more", data[:100]):  # same size, longer, shorter
            self.corrupt(f["object_key"], bad)
            r = self.lodge("get", f["id"], "-o", os.path.join(out, "c.txt"))
            self.assertEqual(r.rc, 1, r)
            self.assertIn("CONTENT_MISMATCH", r.err)
            self.assertIn(f"#{f['id']}", r.err)
            self.assertEqual(self.leftovers(out), [], "a file (or its temporary) was left behind")
            p = self.cat(f["id"])
            self.assertEqual(p.returncode, 1, p)
            self.assertIn(b"CONTENT_MISMATCH", p.stderr)
        # A directory target too: nothing under it.
        r = self.lodge("--json", "get", f["id"], "-o", out + "/")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(r.json_lines()[0]["error"]["code"], "CONTENT_MISMATCH")
        self.assertEqual(self.leftovers(out), [])

    def check_not_active_and_unknown(self):
        live = self.upload_one("live.txt", "live\n")
        gone = self.upload_one("gone.txt", "gone\n")
        self.assertEqual(self.lodge("delete", gone["id"]).rc, 0)
        failed = self.upload_one("failed.txt", "failed\n", env={"LODGE_FAILPOINTS": "store.put=error"}, expect=1)
        out = os.path.join(self.dir, "out-n")
        os.makedirs(out)
        for f, why in ((gone, "deleted"), (failed, "UPLOAD_FAILED")):
            for cmd in (["get", f["id"], "-o", out + "/"], ["cat", f["id"]], ["url", f["id"]]):
                r = self.lodge(*cmd)
                self.assertEqual(r.rc, 1, (cmd, r))
                self.assertIn("NOT_ACTIVE", r.err)
                self.assertIn(why, r.err)
        self.assertEqual(self.leftovers(out), [])
        r = self.lodge("get", "999999", "-o", out + "/")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("NOT_FOUND", r.err)
        self.assertIn("999999", r.err)
        r = self.lodge("show", "999999")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("NOT_FOUND", r.err)
        return live, gone, failed

    def check_show(self):
        live, gone, failed = self.check_not_active_and_unknown()
        for f, status in ((live, "ACTIVE"), (gone, "DELETED"), (failed, "UPLOAD_FAILED")):
            j = self.lodge("--json", "show", f["id"]).json()
            row = self.sql("SELECT object_key, sha256, size, created_at, etag FROM file_upload WHERE id = ?",
                           (f["id"],))[0]
            self.assertEqual(j["id"], f["id"])
            self.assertEqual(j["status"], status)
            self.assertEqual(j["owner"], "ci")
            self.assertEqual((j["object_key"], j["sha256"], j["size"], epoch_ms(j["created_at"]), j["etag"]), row)
            self.assertIsNotNone(j["task"])
            task = self.sql("SELECT status, retry_count FROM cleanup_task WHERE record_id = ?", (f["id"],))[0]
            self.assertEqual((j["task"]["status"], j["task"]["retry_count"]), task)
            text = self.lodge("show", f["id"])
            self.assertEqual(text.rc, 0, text)
            self.assertRegex(text.out, rf"(?m)^status\s+{status}$")
            self.assertRegex(text.out, rf"(?m)^key\s+{row[0]}$")
            self.assertRegex(text.out, r"(?m)^task\s+#\d+ ")
        j = self.lodge("--json", "show", live["id"]).json()
        self.assertIsNotNone(j["activated_at"])
        self.assertIsNone(j["deleted_at"])
        self.assertEqual(j["task"]["status"], "IGNORED")
        j = self.lodge("--json", "show", gone["id"]).json()
        self.assertIsNotNone(j["deleted_at"])
        self.assertTrue(j["deleted"])
        self.assertEqual(j["task"]["status"], "PENDING")
        j = self.lodge("--json", "show", failed["id"]).json()
        self.assertIsNotNone(j["failure_reason"])
        self.assertIn("injected", j["failure_reason"])
        self.assertIsNone(j["activated_at"])


    def make_tree(self, name="tree", n=300):
        """n files with distinct content in nested folders (and one empty folder level
        with a single deep file), as a build might leave them."""
        root = os.path.join(self.dir, name)
        for i in range(n):
            parts = [f"d{i % 6}"] + ([f"s{i % 4}"] if i % 3 else []) + (["deep", "er"] if i % 29 == 0 else [])
            path = os.path.join(root, *parts, f"f{i:03d}.txt")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(f"file {i}\n".encode() * (1 + i % 7) + os.urandom(i % 50).hex().encode())
        return root

    def check_tree_restored(self):
        src = self.make_tree()
        files = self.upload("--prefix", "builds/7", src)
        self.assertEqual(len(files), 300)
        self.assertTrue(all(f["outcome"] == "active" for f in files))
        out = os.path.join(self.dir, "restored")
        r = self.lodge("--json", "get", "--prefix", "builds/7", "-o", out)
        self.assertEqual(r.rc, 0, r)
        lines = r.json_lines()
        self.assertEqual(lines[-1]["summary"]["written"], 300, lines[-1])
        self.assertEqual(lines[-1]["summary"]["failed"], 0)
        rel = self.sql("SELECT relative_path FROM file_upload WHERE id = ?", (files[0]["id"],))[0][0]
        # The tree comes back under its relative paths, byte for byte.
        top = rel.split("/")[0]
        restored = os.path.join(out, top) if top == "tree" else out
        p = subprocess.run(["diff", "-r", src, restored], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(len(self.leftovers(out)), 300, "temporary files were left")
        # Again: every file identical, skipped without a download.
        r = self.lodge("--json", "get", "--prefix", "builds/7", "-o", out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[-1]["summary"]["skipped"], 300)
        # One file changed locally: refused without --force, named; the rest skipped.
        victim = os.path.join(restored, "d1", "s1", "f001.txt")
        with open(victim, "ab") as fh:
            fh.write(b"local edit")
        r = self.lodge("--json", "get", "--prefix", "builds/7", "-o", out)
        self.assertEqual(r.rc, 1, r)
        bad = [l for l in r.json_lines()[:-1] if l["outcome"] == "failed"]
        self.assertEqual(len(bad), 1, bad)
        self.assertEqual(bad[0]["error"]["code"], "OUTPUT_EXISTS")
        self.assertTrue(bad[0]["file"].endswith("d1/s1/f001.txt"), bad[0])
        r = self.lodge("get", "--prefix", "builds/7", "-o", out, "--force")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(subprocess.run(["diff", "-r", src, restored]).returncode, 0)
        return src, rel

    def check_by_path(self):
        src, rel = self.check_tree_restored()
        top = rel.split("/")[0] + "/" if rel.startswith("tree/") else ""
        path = top + "d2/s2/f002.txt"
        want = self.read(os.path.join(src, "d2", "s2", "f002.txt"))
        out = os.path.join(self.dir, "by-path")
        os.makedirs(out)
        # A path without the right prefix is not found; with it, found.
        r = self.lodge("get", path, "-o", out + "/")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("NOT_FOUND", r.err)
        r = self.lodge("get", "--prefix", "builds/7", path, "-o", out + "/")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.read(os.path.join(out, path)), want)
        p = self.lodge_in(out, "get", "--prefix", "builds/7", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read(os.path.join(out, "f002.txt")), want)
        p = self.cat("--prefix", "builds/7", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, want)
        # A deleted path is NOT_ACTIVE, not silently another file.
        rid = self.sql("SELECT id FROM file_upload WHERE relative_path = ?", (path,))[0][0]
        self.assertEqual(self.lodge("delete", rid).rc, 0)
        r = self.lodge("get", "--prefix", "builds/7", path, "-o", os.path.join(self.dir, "gone") + "/")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("NOT_ACTIVE", r.err)
        j = self.lodge("--json", "show", rid).json()
        self.assertEqual((j["path"], j["prefix"], j["status"]), (path, "builds/7", "DELETED"))
        return path

    def check_tree_without_prefix_restored(self):
        """An admin's archive: a tree uploaded without --prefix comes back whole with
        `get --prefix ''`; files uploaded under a prefix are not part of it; a bare
        `get` with neither a file nor --prefix is a usage error."""
        src = self.make_tree("admin", 40)
        self.upload(src)
        self.upload("--prefix", "elsewhere", self.write("other/x.txt", "under a prefix\n"))
        out = os.path.join(self.dir, "restored-admin")
        r = self.lodge("get", "--prefix", "", "-o", out + "/")
        self.assertEqual(r.rc, 0, r)
        d = subprocess.run(["diff", "-r", src, out], capture_output=True, text=True)
        self.assertEqual(d.returncode, 0, d.stdout + d.stderr)
        bare = self.lodge("get", "-o", out + "/")
        self.assertEqual(bare.rc, 2, bare)
        self.assertIn("--prefix ''", bare.err)

    def check_symlink_in_output_is_not_followed(self):
        src = self.make_tree("small", 12)
        self.upload("--prefix", "b1", src)
        out = os.path.join(self.dir, "out-l")
        elsewhere = os.path.join(self.dir, "elsewhere")
        os.makedirs(elsewhere)
        rel = self.sql("SELECT relative_path FROM file_upload LIMIT 1")[0][0]
        base = os.path.join(out, "small") if rel.startswith("small/") else out
        os.makedirs(base)
        os.symlink(elsewhere, os.path.join(base, "d0"))
        r = self.lodge("--json", "get", "--prefix", "b1", "-o", out)
        self.assertEqual(r.rc, 1, r)
        failed = [l for l in r.json_lines()[:-1] if l["outcome"] == "failed"]
        self.assertEqual(len(failed), 2, failed)  # f000 and f006 live under d0
        self.assertTrue(all(l["error"]["code"] == "OUTPUT_EXISTS" for l in failed), failed)
        self.assertEqual(os.listdir(elsewhere), [])
        self.assertEqual(r.json_lines()[-1]["summary"]["written"], 10)

    def check_messages_name_the_written_path(self):
        """Each line of a text-mode get names the file it wrote as a path under -o, with
        its separators: `-o out` and `-o out/` alike (it once printed `outc.txt`)."""
        src = os.path.join(self.dir, "msg")
        for rel, data in (("c.txt", "c\n"), ("sub/d.txt", "d\n")):
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            with open(os.path.join(src, rel), "w") as fh:
                fh.write(data)
        files = self.upload("--prefix", "m", src)
        paths = sorted(self.sql("SELECT relative_path FROM file_upload WHERE run_prefix = 'm'"))
        paths = [p for (p,) in paths]
        self.assertTrue(paths[0].endswith("c.txt") and paths[1].endswith("sub/d.txt"), paths)
        for out in (os.path.join(self.dir, "out"), os.path.join(self.dir, "out2") + "/"):
            r = self.lodge("get", "--prefix", "m", "-o", out)
            self.assertEqual(r.rc, 0, r)
            base = out.rstrip("/")
            lines = [l for l in r.out.splitlines() if not l.startswith("get:")]
            self.assertEqual(sorted(lines), sorted(f"written  {base}/{p}" for p in paths), r.out)
            for p in paths:
                self.assertTrue(os.path.isfile(os.path.join(base, p)), p)
            # Again: the same names, skipped.
            r = self.lodge("get", "--prefix", "m", "-o", out)
            self.assertEqual(sorted(l for l in r.out.splitlines() if not l.startswith("get:")),
                             sorted(f"skipped  {base}/{p}" for p in paths), r.out)
        # One file into an existing directory named without its slash: under its relative path.
        one = next(f for f in files if f["file"].endswith("c.txt"))
        target = os.path.join(self.dir, "single")
        os.makedirs(target)
        r = self.lodge("get", one["id"], "-o", target)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.out.strip(), f"written  {target}/{paths[0]}")

    def check_names_upload_accepts_are_restored(self):
        """One rule decides what upload records and what get restores: '%', U+2024 ONE DOT
        LEADER inside a name, spaces and other Unicode come back byte for byte; a name the
        rule refuses (U+2025 TWO DOT LEADER alone folds to '..', U+FF0F to '/') is rejected by
        upload as BAD_NAME, naming the file, and nothing of it is restored."""
        good = os.path.join(self.dir, "names")
        for rel in ("100%.txt", "a\u2024b.txt", "with spaces/file name.txt", "r\u00e9sum\u00e9 \u65e5\u672c.txt",
                    "50% off/\u00fcber.txt"):
            path = os.path.join(good, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"content of {rel}\n")
        bad_dir = os.path.join(self.dir, "refused")
        os.makedirs(bad_dir)
        refused = ("\u2025", "a\uff0fb.txt")
        for name in refused:
            with open(os.path.join(bad_dir, name), "w") as fh:
                fh.write(f"never stored: {name}\n")
        r = self.lodge("upload", "--json", "--prefix", "names", good, bad_dir)
        self.assertEqual(r.rc, 1, r)  # some files rejected
        results = r.json_lines()[:-1]
        stored = [x for x in results if x["outcome"] == "active"]
        self.assertEqual(len(stored), 5, results)
        rejected = [x for x in results if x["outcome"] == "rejected"]
        self.assertEqual(sorted(os.path.basename(x["file"]) for x in rejected), sorted(refused), results)
        for x in rejected:
            self.assertEqual(x["error"]["code"], "BAD_NAME", x)
            self.assertIn("after Unicode folding", x["error"]["message"], x)
            self.assertIn(os.path.basename(x["file"]), x["error"]["message"], x)
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload WHERE run_prefix = 'names'")[0][0], 5)
        out = os.path.join(self.dir, "names-out")
        r = self.lodge("--json", "get", "--prefix", "names", "-o", out)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json_lines()[-1]["summary"]["written"], 5, r)
        d = subprocess.run(["diff", "-r", good, out], capture_output=True)
        self.assertEqual(d.returncode, 0, d.stdout + d.stderr)
        for name in refused:
            self.assertFalse(os.path.lexists(os.path.join(out, name)), name)


class GetS3(GetMixin, S3TestCase):
    def corrupt(self, key, data):
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)

    def test_get_by_id_writes_atomically_and_cat_streams(self):
        self.check_get_by_id_and_cat()

    def test_corrupted_object_fails_and_leaves_no_file(self):
        self.check_corrupted_object()

    def test_not_active_and_unknown_files_are_refused(self):
        self.check_not_active_and_unknown()

    def test_show_text_and_json_for_active_deleted_and_failed_rows(self):
        self.check_show()

    def test_tree_of_300_files_restored_byte_for_byte_then_get_cat_and_url_by_path(self):
        path = self.check_by_path()
        other = path.replace("d2/s2/f002.txt", "d5/s1/f005.txt")
        data = self.read(os.path.join(self.dir, "tree", "d5", "s1", "f005.txt"))
        url = self.lodge("url", "--prefix", "builds/7", other).out.strip()
        p = subprocess.run(["curl", "-sS", "--fail", url], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, data)

    def test_symlink_in_the_output_directory_is_not_followed(self):
        self.check_symlink_in_output_is_not_followed()

    def test_every_name_upload_accepts_is_restored_and_a_refused_one_is_rejected(self):
        self.check_names_upload_accepts_are_restored()

    def test_url_is_fetched_with_curl(self):
        data = os.urandom(5000)
        f = self.upload_one("dir/odd name+1=x.bin", data)
        r = self.lodge("url", f["id"], "--expires", "10m")
        self.assertEqual(r.rc, 0, r)
        url = r.out.strip()
        self.assertIn("X-Amz-Signature=", url)
        self.assertIn("X-Amz-Expires=600", url)
        self.assertNotIn("testing", url.split("X-Amz-Credential=")[0])
        p = subprocess.run(["curl", "-sS", "--fail", url], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, data)
        ours, theirs = botocore_signature(url, "testing", "testing")
        self.assertEqual(ours, theirs)
        # A tampered signature is a different one (what a checking server refuses).
        self.assertNotEqual(botocore_signature(url, "testing", "other-secret")[1], ours)
        j = self.lodge("--json", "url", f["id"], "--expires", "7d").json()
        self.assertIn("X-Amz-Expires=604800", j["url"])
        for bad in ("8d", "169h", "0s", "soon"):
            r = self.lodge("url", f["id"], "--expires", bad)
            self.assertEqual(r.rc, 2, (bad, r))
            self.assertIn("--expires", r.err)
            self.assertIn(bad, r.err)


class GetFileStore(GetMixin, LodgeTestCase):
    def store_env(self):
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def corrupt(self, key, data):
        path = os.path.join(self.root, key)
        os.chmod(path, 0o600)
        with open(path, "wb") as fh:
            fh.write(data)

    def test_get_by_id_writes_atomically_and_cat_streams(self):
        self.check_get_by_id_and_cat()

    def test_corrupted_object_fails_and_leaves_no_file(self):
        self.check_corrupted_object()

    def test_show_text_and_json_for_active_deleted_and_failed_rows(self):
        self.check_show()

    def test_tree_of_300_files_restored_byte_for_byte_then_get_and_cat_by_path(self):
        self.check_by_path()

    def test_a_tree_uploaded_without_prefix_is_restored_with_an_empty_prefix(self):
        self.check_tree_without_prefix_restored()

    def test_every_name_upload_accepts_is_restored_and_a_refused_one_is_rejected(self):
        self.check_names_upload_accepts_are_restored()

    def test_get_names_each_written_file_by_its_path_under_the_output_directory(self):
        self.check_messages_name_the_written_path()

    def test_url_is_unsupported(self):
        f = self.upload_one("u.txt", "u\n")
        r = self.lodge("url", f["id"])
        self.assertEqual(r.rc, 1, r)
        self.assertIn("UNSUPPORTED", r.err)
        self.assertIn("file://", r.err)
        self.assertEqual(r.out, "")


if __name__ == "__main__":
    main()
