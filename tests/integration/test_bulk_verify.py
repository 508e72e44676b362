"""Re-runs verified in bulk: a re-run over unchanged files proves their objects present by
listing the prefix (one LIST per 1,000 keys, kept for the run) instead of a HEAD per file.
Requests are counted through the fault proxy in front of moto. A key deleted behind
lodge's back is not in the listing, so it is HEADed, found missing and uploaded anew;
`--checksum` still reads every file."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import S3TestCase, main  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "64MiB", "deadline": "10m", "grace": "5s"}}}
NO_READ = {"LODGE_FAILPOINTS": "upload.before_read=error"}
NOW_STAT = {"NO_FAKE_STAT": "1"}
FILES = 1200


class BulkVerify(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.proxy = self.through_proxy()
        self.tree = os.path.join(self.dir, "tree")
        for i in range(FILES):
            self.write(os.path.join("tree", f"d{i % 7}", f"f{i}.txt"), f"file {i}\n")

    def upload(self, *args, env=None):
        """One run over the tree: its results by relative path, its summary and the requests
        it sent through the proxy. Three seconds on, so that the tree just written is not
        racily clean (NO_FAKE_STAT: libfaketime would shift the files' timestamps too)."""
        before = len(self.proxy.entries())
        r = self.lodge("upload", "--json", *args, self.tree, env={**(env or {}), **NOW_STAT}, later="+3s",
                       timeout=600)
        lines = r.json_lines()
        results = {os.path.relpath(l["file"], self.tree): l for l in lines if "file" in l}
        return r, results, lines[-1]["summary"], self.proxy.entries()[before:]

    def test_a_rerun_over_unchanged_files_lists_instead_of_heading_each(self):
        r, first, _, sent_first = self.upload()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({v["outcome"] for v in first.values()}, {"active"})
        self.assertGreaterEqual(len(sent_first), FILES)  # a PUT each, at least
        # Unchanged (and never read: the failpoint would reject a file read).
        r, again, summary, sent = self.upload(env=NO_READ)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({(v["outcome"], v["unchanged"]) for v in again.values()}, {("duplicate", True)})
        self.assertEqual(summary["duplicate"], FILES)
        methods = [e["method"] for e in sent]
        self.assertEqual(methods.count("HEAD"), 0, sent)
        self.assertGreaterEqual(methods.count("GET"), 1)  # the listing
        self.assertLessEqual(len(sent), FILES // 500 + 6, sent)

    def test_a_key_deleted_behind_lodges_back_is_uploaded_anew(self):
        r, first, _, _ = self.upload()
        self.assertEqual(r.rc, 0, r)
        gone = "d3/f10.txt"
        self.delete_object(first[gone]["object_key"])
        r, again, summary, sent = self.upload()
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(again[gone]["outcome"], "active", again[gone])
        self.assertNotEqual(again[gone]["id"], first[gone]["id"])
        self.assertEqual((summary["duplicate"], summary["active"]), (FILES - 1, 1))
        self.assertIn(again[gone]["object_key"], self.objects())
        # The listing did not show it, so it was HEADed (by the stat cache's check, then by the
        # reserve's, which found it missing); nothing else was.
        heads = [e for e in sent if e["method"] == "HEAD"]
        self.assertTrue(1 <= len(heads) <= 2, heads)
        self.assertEqual({h["path"] for h in heads}, {self.request_path(first[gone]["object_key"])})
        row = self.sql("SELECT is_deleted, failure_reason FROM file_upload WHERE id = ?", (first[gone]["id"],))
        self.assertEqual([(bool(d), why) for d, why in row], [(True, "object missing from the store")])

    def test_checksum_still_reads_every_file(self):
        r, _, _, _ = self.upload()
        self.assertEqual(r.rc, 0, r)
        r, forced, _, _ = self.upload("--checksum", env=NO_READ)
        self.assertEqual(r.rc, 1, r)
        self.assertEqual({v["outcome"] for v in forced.values()}, {"rejected"})
        r, forced, summary, sent = self.upload("--checksum")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual({(v["outcome"], v["unchanged"]) for v in forced.values()}, {("duplicate", False)})
        self.assertEqual(summary["duplicate"], FILES)
        # Read and hashed, then proven by the listing all the same: no HEAD per file.
        self.assertEqual([e for e in sent if e["method"] == "HEAD"], [])


if __name__ == "__main__":
    main()
