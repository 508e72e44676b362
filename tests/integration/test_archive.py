"""Archives against a real moto_server: relative paths kept in rows, keys and metadata;
--prefix per build; list by path, prefix and owner; de-duplication scoped by policy and
verified against the store (a missing object is uploaded again, a failed HEAD fails the
file and deletes nothing)."""

import hashlib
import json
import os
import re
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, aws, check_invariants, main  # noqa: E402

CONFIG = {
    "policies": {
        "default": {"deadline": "60s", "grace": "1s"},
        "per-owner": {"deadline": "60s", "grace": "1s", "dedup": "owner"},
        "every-time": {"deadline": "60s", "grace": "1s", "dedup": "none"},
    },
    "sweep": {"backoff_base": "100ms", "backoff_max": "1s"},
}
UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


class ArchiveS3(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        r = self.lodge("init")
        self.assertEqual(r.rc, 0, r)

    def up(self, *args, rc=0, **kw):
        r = self.lodge("upload", "--json", *args, **kw)
        self.assertEqual(r.rc, rc, r)
        lines = r.json_lines()
        self.assertIn("summary", lines[-1], r)
        return lines[:-1]

    def listed(self, *args):
        r = self.lodge("list", "--json", *args)
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()

    def tree(self, root, files):
        """Writes {relative path: bytes} under root; returns root's path."""
        for rel, data in files.items():
            self.write(os.path.join(root, rel), data)
        return os.path.join(self.dir, root)

    def test_a_nested_tree_of_300_files_keeps_its_paths_and_is_listed_by_path(self):
        files = {f"d{i % 4}/s{i % 3}/f{i:03}.txt": f"file {i}\n".encode() for i in range(299)}
        files["docs/r\u00e9sum\u00e9 100% + more.txt"] = "non-ASCII name\n".encode()
        tree = self.tree("tree", files)
        results = self.up("--prefix", "builds/7", tree)
        self.assertEqual(len(results), 300)
        self.assertEqual({r["outcome"] for r in results}, {"active"})
        self.assertEqual({r["path"] for r in results}, set(files))
        rows = self.sql("SELECT relative_path, run_prefix, original_name, object_key, dedup_scope FROM file_upload")
        self.assertEqual({r[0] for r in rows}, set(files))
        for rel, prefix, name, key, scope in rows:
            self.assertEqual((prefix, scope, name), ("builds/7", "prefix", rel.split("/")[-1]))
            self.assertRegex(key, "^lodge/ci/builds/7/" + UUID + "/" + re.escape(rel) + "$")
        objects = self.objects()
        self.assertEqual(len(objects), 300)
        # Every object holds its file's bytes, and says its path (percent-encoded) itself.
        by_path = {r[0]: r[3] for r in rows}
        for rel, data in files.items():
            self.assertEqual(self.object_bytes(by_path[rel]), data, rel)
        odd = "docs/r\u00e9sum\u00e9 100% + more.txt"
        meta = self.s3.head_object(Bucket=self.bucket, Key=by_path[odd])["Metadata"]
        self.assertTrue(meta["lodgepath"].isascii())
        self.assertEqual(urllib.parse.unquote(meta["lodgepath"]), odd)
        self.assertEqual(meta["lodgeprefix"], "builds/7")
        # Listed by prefix and path glob (rclone's dialect: '*' stops at '/', '**' crosses it).
        self.assertEqual(len(self.listed("--prefix", "builds/7")), 300)
        self.assertEqual(self.listed("--prefix", "builds/8"), [])
        self.assertEqual(self.listed("--prefix", ""), [])
        d1 = self.listed("--path-glob", "/d1/**")
        self.assertEqual({x["path"] for x in d1}, {p for p in files if p.startswith("d1/")})
        self.assertEqual(self.listed("--path-glob", "/d1/*"), [])  # d1 holds directories only
        one = self.listed("--prefix", "builds/7", "--path-glob", "d0/s0/f000.txt")
        self.assertEqual([(x["path"], x["prefix"], x["status"]) for x in one],
                         [("d0/s0/f000.txt", "builds/7", "ACTIVE")])
        self.assertEqual([x["path"] for x in self.listed("--path-glob", "docs/r\u00e9sum\u00e9*")], [odd])
        text = self.lodge("list", "--path-glob", "d2/s1/*")
        self.assertEqual(text.rc, 0, text)
        self.assertEqual(len(text.out.splitlines()), len([p for p in files if p.startswith("d2/s1/")]))
        self.assertIn(" builds/7 ", text.out)
        check_invariants(self, objects)

    def test_per_build_prefixes_keep_copies_and_deleting_build_1_leaves_build_2_complete(self):
        files = {f"lib/m{i}.so": f"module {i}\n".encode() for i in range(5)}
        files["README"] = b"the same in every build\n"
        tree = self.tree("out", files)
        b1 = self.up("--prefix", "builds/1", tree)
        b2 = self.up("--prefix", "builds/2", tree)
        self.assertEqual({r["outcome"] for r in b1 + b2}, {"active"})
        self.assertTrue(all(r["object_key"].startswith("lodge/ci/builds/2/") for r in b2))
        # Re-running a build skips what it already stored.
        again = self.up("--prefix", "builds/2", tree)
        self.assertEqual({r["outcome"] for r in again}, {"duplicate"})
        self.assertEqual(sorted(r["id"] for r in again), sorted(r["id"] for r in b2))
        check_invariants(self, self.objects())
        d = self.lodge("delete", *[r["id"] for r in b1])
        self.assertEqual(d.rc, 0, d)
        s = self.lodge("sweep", "--json", later="+30s")
        self.assertEqual(s.rc, 0, s)
        remaining = self.objects()
        self.assertEqual(sorted(remaining), sorted(r["object_key"] for r in b2))
        # Read back with the aws CLI: build 2 is whole, byte for byte.
        for r in b2:
            out = os.path.join(self.dir, "back")
            aws(self.moto.endpoint, "s3api", "get-object", "--bucket", self.bucket, "--key", r["object_key"], out)
            with open(out, "rb") as f:
                self.assertEqual(f.read(), files[r["path"]], r["path"])
        self.assertEqual(len(self.listed("--prefix", "builds/2")), len(files))
        self.assertEqual(self.listed("--prefix", "builds/1"), [])
        check_invariants(self, remaining)

    def test_owner_scope_dedups_across_prefixes(self):
        f = self.write("a.txt", "one copy per owner\n")
        first = self.up("--policy", "per-owner", "--prefix", "x", f)[0]
        second = self.up("--policy", "per-owner", "--prefix", "y", f)[0]
        self.assertEqual(first["outcome"], "active")
        # One object; y/a.txt is a row of its own that shares it (restorable under y).
        self.assertEqual((second["outcome"], second["shares"]), ("duplicate", first["id"]))
        self.assertEqual(second["object_key"], first["object_key"])
        self.assertEqual(len(self.objects()), 1)
        self.assertEqual(self.sql("SELECT dedup_scope FROM file_upload"), [("owner",), ("owner",)])
        check_invariants(self, self.objects())

    def test_none_scope_makes_a_new_row_and_object_each_time(self):
        f = self.write("a.txt", "every upload its own\n")
        got = [self.up("--policy", "every-time", f)[0] for _ in range(3)]
        self.assertEqual([r["outcome"] for r in got], ["active"] * 3)
        self.assertEqual(len({r["id"] for r in got}), 3)
        self.assertEqual(sorted(self.objects()), sorted(r["object_key"] for r in got))
        self.assertEqual(len(self.listed("--path-glob", "a.txt")), 3)
        check_invariants(self, self.objects())

    def test_an_object_deleted_behind_lodges_back_is_uploaded_again_not_a_duplicate(self):
        f = self.write("keep/me.txt", "removed by someone else\n")
        first = self.up(f)[0]
        aws(self.moto.endpoint, "s3api", "delete-object", "--bucket", self.bucket, "--key", first["object_key"])
        self.assertEqual(self.objects(), {})
        r = self.lodge("upload", "--json", f)
        self.assertEqual(r.rc, 0, r)
        again = r.json_lines()[0]
        self.assertEqual(again["outcome"], "active", r)
        self.assertNotEqual(again["id"], first["id"])
        self.assertIn("missing from the store", r.err)
        self.assertEqual(self.object_bytes(again["object_key"]), b"removed by someone else\n")
        old = [x for x in self.listed("--all") if x["id"] == first["id"]][0]
        self.assertEqual((old["status"], old["upload_status"], old["deleted"]), ("DELETED", "ACTIVE", True))
        self.assertEqual(old["failure_reason"], "object missing from the store")
        # The retired row's cleanup is harmless: the new object stays.
        s = self.lodge("sweep", "--json", later="+30s")
        self.assertEqual(s.rc, 0, s)
        self.assertEqual(list(self.objects()), [again["object_key"]])
        self.assertEqual(self.lodge("upload", "--json", f).json_lines()[0]["outcome"], "duplicate")
        check_invariants(self, self.objects())

    def test_a_failed_head_on_a_would_be_duplicate_fails_the_file_and_deletes_nothing(self):
        f = self.write("a.txt", "checked, never assumed\n")
        first = self.up(f)[0]
        log = os.path.join(self.dir, "fp.log")
        # Neither proof answers: the run's listing (which would prove the object in bulk) and
        # the HEAD it falls back to both fail.
        r = self.lodge("upload", "--json", f,
                       env={"LODGE_FAILPOINTS": "store.list=error;store.head=error", "LODGE_FAILPOINTS_LOG": log})
        self.assertEqual(r.rc, 1, r)
        res = r.json_lines()[0]
        self.assertEqual(res["outcome"], "failed")
        self.assertEqual(res["error"]["code"], "STORAGE_UNAVAILABLE")
        self.assertIn(f"file #{first['id']}", res["error"]["message"])
        with open(log) as fp:
            self.assertIn("store.head", fp.read())
        self.assertEqual(self.sql("SELECT id, upload_status, is_deleted FROM file_upload"),
                         [(first["id"], "ACTIVE", 0)])
        self.assertEqual(list(self.objects()), [first["object_key"]])
        check_invariants(self, self.objects())

    def test_list_json_says_deleted_for_a_deleted_file(self):
        f = self.write("a.txt", "soon deleted\n")
        first = self.up(f)[0]
        self.assertEqual(self.lodge("delete", first["id"]).rc, 0)
        rows = self.listed("--all")
        self.assertEqual([(x["status"], x["upload_status"], x["deleted"]) for x in rows],
                         [("DELETED", "ACTIVE", True)])
        self.assertEqual(self.listed(), [])

    def test_list_every_owner(self):
        self.up(self.write("a.txt", "of ci\n"))
        self.up("--owner", "qa", self.write("b.txt", "of qa\n"))
        every = self.lodge("--owner", "*", "list", "--json")
        self.assertEqual(every.rc, 0, every)
        self.assertEqual(sorted((x["owner"], x["path"]) for x in every.json_lines()),
                         [("ci", "a.txt"), ("qa", "b.txt")])
        self.assertEqual([x["owner"] for x in self.listed()], ["ci"])
        text = self.lodge("--owner", "*", "list")
        self.assertIn("[qa]", text.out)

    def test_a_bad_prefix_is_a_usage_error_naming_it(self):
        f = self.write("a.txt", "x\n")
        for bad in ["/abs", "trailing/", "a//b", "a/../b", "./a", "sp ace", "caf\u00e9", "x" * 129]:
            r = self.lodge("upload", "--prefix", bad, f)
            self.assertEqual(r.rc, 2, (bad, r))
            self.assertIn("USAGE", r.err)
            self.assertIn("--prefix", r.err)
            lr = self.lodge("list", "--prefix", bad)
            self.assertEqual(lr.rc, 2, (bad, lr))
        self.assertEqual(self.sql("SELECT count(*) FROM file_upload"), [(0,)])
        self.assertEqual(self.objects(), {})

    def test_paths_as_given_are_normalized_and_never_absolute_or_climbing(self):
        self.tree("w", {"sub/x.txt": b"x\n", "sub/y.txt": b"y\n", "sub/z.txt": b"z\n", "abs.txt": b"abs\n",
                        "sub/deeper/d.txt": b"d\n"})
        wd = os.path.join(self.dir, "w")
        listing = self.write("list.txt", "sub/y.txt\n./sub//z.txt\n")
        got = self.up("--policy", "every-time", "./sub//x.txt", os.path.join(wd, "abs.txt"), "../w/sub/x.txt",
                      "sub/deeper", "--files-from", listing, cwd=wd)
        self.assertEqual({r["outcome"] for r in got}, {"active"})
        self.assertEqual(sorted((r["file"], r["path"]) for r in got),
                         sorted([("./sub//x.txt", "sub/x.txt"), (os.path.join(wd, "abs.txt"), "abs.txt"),
                                 ("../w/sub/x.txt", "x.txt"), ("sub/deeper/d.txt", "d.txt"),
                                 ("sub/y.txt", "sub/y.txt"), ("./sub//z.txt", "sub/z.txt")]))
        paths = sorted(r[0] for r in self.sql("SELECT relative_path FROM file_upload"))
        self.assertEqual(paths, ["abs.txt", "d.txt", "sub/x.txt", "sub/y.txt", "sub/z.txt", "x.txt"])
        for key in self.objects():
            self.assertNotIn("/../", key)
            self.assertNotIn("//", key)

    def test_a_key_over_1024_bytes_is_bad_name_for_that_file_only(self):
        deep = "/".join(["n" * 200] * 5)
        self.tree("t", {deep + "/long.txt": b"too deep\n", "short.txt": b"fine\n"})
        r = self.lodge("upload", "--json", os.path.join(self.dir, "t"))
        self.assertEqual(r.rc, 1, r)
        by_path = {x["file"].split("/")[-1]: x for x in r.json_lines()[:-1]}
        self.assertEqual(by_path["short.txt"]["outcome"], "active")
        self.assertEqual(by_path["long.txt"]["outcome"], "rejected")
        self.assertEqual(by_path["long.txt"]["error"]["code"], "BAD_NAME")
        self.assertIn("1024", by_path["long.txt"]["error"]["message"])
        self.assertEqual(len(self.objects()), 1)

    def test_the_bytes_kept_under_a_path_are_the_files(self):
        data = os.urandom(200_000)
        f = self.write("bin/blob.bin", data)
        res = self.up("--prefix", "p", os.path.join(self.dir, "bin"))[0]
        self.assertEqual(res["path"], "blob.bin")
        self.assertTrue(res["object_key"].endswith("/blob.bin"))
        self.assertEqual(hashlib.sha256(self.object_bytes(res["object_key"])).hexdigest(), res["sha256"])
        self.assertEqual(hashlib.sha256(data).hexdigest(), res["sha256"])
        self.assertTrue(os.path.exists(f))


if __name__ == "__main__":
    main()
