"""lodge against Azure Blob Storage as Azurite 3.37.0 emulates it (one Azurite for the whole
file, a container per test), checked through the official SDK (tests/node/azblob.js).

First what Azurite itself answers, through the SDK alone (the facts lodge's Azure store is
built on): five concurrent conditional creates of one name, the unconditional put that
silently overwrites, the tag-guarded delete, the uncommitted blocks a losing staged upload
leaves behind, and the empty-block-list commit that clears them.

Then lodge's CLI on az://: upload, get, sweep, repair, reconcile, lifecycle, and the
write-up's experiments as named tests: C (crash before the mark: swept; a tag that failed
after it: finished by sweep), G (five concurrent conditional creates: one winner, through
the SDK above and the store contract suite), I (a blob pre-placed at the exact key lodge
will use is never overwritten), J (guarded delete: pending deleted, committed refused and
kept, the reason in the task's last_error), K (a losing staged upload: no uncommitted blocks after repair + sweep)."""

import json
import os
import sys
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (AzBlobError, AzureTestCase, FaultProxy, azblob, azurite_server,  # noqa: E402
                       check_invariants, converge, create_container, main, wait_until)

CONFIG = {
    # The crash scenarios here test the deadline rule (rows of another host keep it); the
    # killed-run path is test_killed_runs.py's.
    "fail_killed_runs": False,
    "policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}},
    # Staged (block) uploads from 6 MiB on, in 5 MiB blocks: an 11 MiB file is 3 blocks.
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
    "status": {"sweep_max_age": "1d"},
}
AFTER_DEADLINE = "+20s"  # past deadline (10s) + grace (5s)
PENDING = "\"state\" = 'pending'"


class AzuriteAnswers(unittest.TestCase):
    """What Azurite answers to the official SDK: no lodge involved."""

    @classmethod
    def setUpClass(cls):
        cls.azurite = azurite_server()

    def setUp(self):
        self.container = "x-" + uuid.uuid4().hex[:20]
        create_container(self.azurite.endpoint, self.container)
        self.body = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"azblob-{uuid.uuid4().hex}")
        with open(self.body, "wb") as f:
            f.write(b"written by the SDK\n")

    def tearDown(self):
        os.unlink(self.body)

    def az(self, *args, **kw):
        return azblob(self.azurite.endpoint, *args, **kw)

    def test_G_five_concurrent_conditional_creates_give_one_winner_and_four_409s(self):
        outcomes = self.az("put", self.container, "g/one-name", self.body, "--if-none-match", "--concurrent", 5)
        won = [o for o in outcomes if "error" not in o]
        lost = [o for o in outcomes if "error" in o]
        self.assertEqual(len(won), 1, outcomes)
        # Azurite answers a failed If-None-Match: * create with 409 BlobAlreadyExists (the REST
        # reference says 412 ConditionNotMet): lodge treats both as "exists".
        self.assertEqual([(o["error"]["status"], o["error"]["code"]) for o in lost], [(409, "BlobAlreadyExists")] * 4)
        blobs = self.az("list", self.container)
        self.assertEqual([b["name"] for b in blobs], ["g/one-name"])
        self.assertEqual(blobs[0]["etag"], won[0]["etag"])
        winner = b"written by the SDK\n" + f" #{won[0]['writer']}".encode()
        self.assertEqual(self.az("get", self.container, "g/one-name", raw=True), winner)

    def test_an_unconditional_put_silently_overwrites(self):
        self.az("put", self.container, "o/name", self.body)
        with open(self.body, "wb") as f:
            f.write(b"second writer\n")
        self.assertEqual(self.az("put", self.container, "o/name", self.body)["status"], 201)
        self.assertEqual(self.az("get", self.container, "o/name", raw=True), b"second writer\n")

    def test_J_a_tag_guarded_delete_removes_pending_and_refuses_committed_with_412(self):
        self.az("put", self.container, "j/pending", self.body, "--if-none-match", "--tag", "state=pending")
        self.az("put", self.container, "j/committed", self.body, "--if-none-match", "--tag", "state=pending")
        self.assertEqual(self.az("set-tags", self.container, "j/committed", "state=committed")["tags"],
                         {"state": "committed"})
        self.assertEqual(self.az("delete", self.container, "j/pending", "--if-tags", PENDING)["status"], 202)
        with self.assertRaises(AzBlobError) as refused:
            self.az("delete", self.container, "j/committed", "--if-tags", PENDING)
        self.assertEqual((refused.exception.status, refused.exception.code), (412, "ConditionNotMet"))
        blobs = self.az("list", self.container)
        self.assertEqual([(b["name"], b["tags"]) for b in blobs], [("j/committed", {"state": "committed"})])
        # A blob with no tag at all is not pending either.
        self.az("put", self.container, "j/untagged", self.body)
        with self.assertRaises(AzBlobError) as untagged:
            self.az("delete", self.container, "j/untagged", "--if-tags", PENDING)
        self.assertEqual(untagged.exception.status, 412)

    def test_K_a_losing_staged_upload_leaves_its_uncommitted_blocks(self):
        self.az("put", self.container, "k/name", self.body, "--if-none-match")
        self.az("stage-blocks", self.container, "k/name", "--count", 3, "--size", 1000, "--id-prefix", "loser")
        with self.assertRaises(AzBlobError) as lost:
            self.az("commit-blocks", self.container, "k/name", "--if-none-match")
        # The condition is checked only at Put Block List: Azurite answers 409 there too.
        self.assertEqual((lost.exception.status, lost.exception.code), (409, "BlobAlreadyExists"))
        self.assertEqual([b["size"] for b in self.az("list", self.container)], [19], "the winner's blob")
        left = self.az("list", self.container, "--uncommitted")
        self.assertEqual([(b["name"], b["committed"], len(b["uncommitted_blocks"])) for b in left],
                         [("k/name", True, 3)], "3 uncommitted blocks, invisible to a listing")
        # A staged upload that never committed is a name with only uncommitted blocks: no
        # properties (404), not in a normal listing, but Azurite counts it as existing for a
        # conditional create (409): a later conditional Put Blob of that name fails.
        self.az("stage-blocks", self.container, "k/staged-only", "--count", 2, "--size", 10)
        self.assertEqual(self.az("head", self.container, "k/staged-only", check=False)["error"]["status"], 404)
        self.assertEqual([b["name"] for b in self.az("list", self.container)], ["k/name"])
        r = self.az("put", self.container, "k/staged-only", self.body, "--if-none-match", check=False)
        self.assertEqual((r["error"]["status"], r["error"]["code"]), (409, "BlobAlreadyExists"))

    def test_an_empty_block_list_commit_then_a_guarded_delete_clears_uncommitted_blocks(self):
        # The clean-up lodge uses for a staged upload of its own that never committed.
        self.az("stage-blocks", self.container, "c/abandoned", "--count", 3, "--size", 100)
        made = self.az("commit-blocks", self.container, "c/abandoned", "--empty", "--if-none-match",
                       "--tag", "state=pending")
        self.assertEqual(made["blocks"], 0)
        self.assertEqual(self.az("list", self.container, "--uncommitted"), [], "the commit dropped the blocks")
        head = self.az("head", self.container, "c/abandoned")
        self.assertEqual((head["size"], head["tags"]), (0, {"state": "pending"}))
        self.az("delete", self.container, "c/abandoned", "--if-tags", PENDING)
        self.assertEqual(self.az("list", self.container), [])
        self.assertEqual(self.az("list", self.container, "--uncommitted"), [])


class LodgeOnAzure(AzureTestCase):
    """lodge's CLI on az://CONTAINER/lodge against Azurite."""

    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.fplog = os.path.join(self.dir, "fp.log")

    def upload(self, name, data, *args, env=None, later=None):
        r = self.lodge("upload", "--json", *args, self.write(name, data), env=env, later=later)
        lines = r.json_lines() if r.out.strip() else []
        return r, (lines[0] if lines and "summary" not in lines[0] else None)

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted, object_key FROM file_upload WHERE id = ?", (rid,))[0]

    def task(self, rid):
        return self.sql("SELECT status FROM cleanup_task WHERE record_id = ?", (rid,))[0][0]

    def last_row(self):
        return self.sql("SELECT id, upload_status, is_deleted, object_key FROM file_upload ORDER BY id DESC LIMIT 1")[0]

    def test_upload_get_reconcile_and_delete_on_az(self):
        data = b"".join(bytes([i % 251]) for i in range(70_000))
        r, res = self.upload("a.bin", data)
        self.assertEqual((r.rc, res["outcome"]), (0, "active"), r)
        key = res["object_key"]
        self.assertTrue(key.startswith(self.prefix + "/"), key)
        self.assertEqual(self.object_bytes(key), data, "the SDK reads back what lodge wrote")
        head = self.head(key)
        self.assertEqual(head["metadata"].get("lodgerecord"), str(res["id"]), head)
        self.assertEqual(head["metadata"].get("lodgesha256"), res["sha256"], head)
        self.assertEqual(head["tags"], {"state": "committed"}, "the row is active: the blob is committed")
        self.assertEqual(self.task(res["id"]), "IGNORED")
        out = os.path.join(self.dir, "back.bin")
        g = self.lodge("get", res["id"], "-o", out)
        self.assertEqual(g.rc, 0, g)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), data)
        rec = self.lodge("reconcile", "--verify", "--json")
        self.assertEqual(rec.rc, 0, rec)
        self.assertTrue(rec.json()["clean"], rec)
        self.assertEqual(self.lodge("delete", res["id"]).rc, 0)
        self.assertIn(key, self.objects(), "the blob waits for the grace")
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.json()["deleted"], 1, sw)
        self.assertNotIn(key, self.objects())
        check_invariants(self)
        converge(self, later="+2h")

    def test_staged_upload_commits_the_blocks_in_order(self):
        data = os.urandom(11 << 20)  # 3 blocks: 5 + 5 + 1 MiB
        r, res = self.upload("big.bin", data)
        self.assertEqual((r.rc, res["outcome"]), (0, "active"), r)
        self.assertEqual(self.object_bytes(res["object_key"]), data)
        self.assertEqual(self.uncommitted(), [])
        self.assertEqual(self.head(res["object_key"])["tags"], {"state": "committed"})
        check_invariants(self)

    def test_lifecycle_prints_the_management_policy(self):
        r = self.lodge("lifecycle", "--days", "3")
        self.assertEqual(r.rc, 0, r)
        policy = json.loads(r.out[r.out.index("{"):r.out.rindex("}") + 1])
        rule = policy["rules"][0]
        self.assertEqual(rule["definition"]["actions"]["baseBlob"]["delete"]["daysAfterModificationGreaterThan"], 3)
        match = rule["definition"]["filters"]["blobIndexMatch"][0]
        self.assertEqual((match["name"], match["op"], match["value"]), ("state", "==", "pending"))
        prefixes = rule["definition"]["filters"]["prefixMatch"]
        self.assertEqual(len(prefixes), 1, prefixes)
        self.assertTrue(prefixes[0].startswith(f"{self.container}/{self.prefix}"), prefixes)
        a = self.lodge("lifecycle", "--days", "3", "--apply")
        self.assertNotEqual(a.rc, 0, "a management-plane call lodge cannot make with a storage key")
        self.assertIn("az storage account management-policy create", a.out + a.err)

    def test_C_a_crash_before_the_row_is_marked_leaves_a_pending_blob_that_repair_and_sweep_delete(self):
        r, _ = self.upload("a.txt", "crash before the mark\n", env=self.fp("upload.after_put=crash"))
        self.assertEqual(r.rc, -9, r)
        self.assertEqual(self.fired(), ["upload.after_put"])
        rid, status, _, key = self.last_row()
        self.assertEqual(status, "UPLOADING")
        self.assertEqual(self.object_tags(key), {"state": "pending"})
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 1)
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.json()["deleted"], 1, sw)
        self.assertNotIn(key, self.objects())
        self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1))
        check_invariants(self)
        converge(self)

    def test_C_a_failed_tag_after_the_mark_leaves_the_upload_active_and_sweep_tags_it_committed(self):
        # The row became ACTIVE but tagging the blob committed failed (every Set Blob Tags
        # answered 503): the upload still succeeds, the blob still says pending, and the task
        # left due makes sweep finish the tag (the lifecycle backstop would otherwise delete
        # live data).
        proxy = FaultProxy(self.server_port, self.dir)
        try:
            proxy.set_rules([{"method": "PUT", "path_contains": "comp=tags", "action": "503", "times": 1000}])
            self.rebind(self.endpoint_env(proxy.endpoint))  # the same container, through the proxy
            r, res = self.upload("a.txt", "the tag fails\n", env=self.endpoint_env(proxy.endpoint))
            tag_puts = [e for e in proxy.entries() if e["method"] == "PUT" and "comp=tags" in e["path"]]
        finally:
            proxy.stop()
        self.rebind({})
        self.assertEqual((r.rc, res["outcome"]), (0, "active"), r)
        self.assertGreaterEqual(len(tag_puts), 1, "the tag was attempted")
        self.assertIn("committed", r.err, "a warning says the tag failed")
        key = res["object_key"]
        self.assertEqual(self.row(res["id"])[:2], ("ACTIVE", 0))
        self.assertEqual(self.object_tags(key), {"state": "pending"})
        self.assertEqual(self.task(res["id"]), "PENDING", "the tag is still owed")
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual(self.object_tags(key), {"state": "committed"})
        self.assertEqual(self.task(res["id"]), "IGNORED")
        self.assertEqual(self.object_bytes(key), b"the tag fails\n")
        check_invariants(self)
        converge(self)

    def test_I_a_blob_pre_placed_at_the_exact_key_is_never_overwritten(self):
        gate = os.path.join(self.dir, "gate")
        p = self.spawn("upload", "--json", self.write("a.txt", "lodge's bytes\n"),
                       env=self.fp(f"upload.before_put=pause:{gate}"))
        try:
            wait_until(lambda: "upload.before_put" in self.fired(), 60, "the upload to reach its put")
            rid, status, _, key = self.last_row()
            self.assertEqual(status, "UPLOADING")
            self.put_object(key, b"someone else's\n", metadata={"owner": "another"})
        finally:
            open(gate, "w").close()
        out, err = p.communicate(timeout=120)
        res = json.loads(out.splitlines()[0])
        self.assertEqual(res["outcome"], "failed", (out, err))
        self.assertEqual(self.object_bytes(key), b"someone else's\n", "never overwritten")
        # Not ours and not tagged pending: the guarded delete of the failed upload refuses it.
        self.lodge("repair", "--json", later=AFTER_DEADLINE)
        self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(self.object_bytes(key), b"someone else's\n", "never deleted")
        self.assertEqual(self.object_metadata(key), {"owner": "another"})
        self.assertNotEqual(self.row(rid)[0], "ACTIVE")

    def test_J_sweep_deletes_a_pending_blob_and_its_guarded_delete_refuses_a_committed_one(self):
        # A failed upload's blob is pending: deleted. Then a stale task meets a blob that
        # became committed: 412, the blob remains, the task is IGNORED after re-checking.
        r, _ = self.upload("a.txt", "pending then swept\n", env=self.fp("upload.after_put=crash"))
        pending_rid, _, _, pending_key = self.last_row()
        r, _ = self.upload("b.txt", "committed by someone\n", env=self.fp("upload.after_put=crash"))
        stale_rid, _, _, stale_key = self.last_row()
        self.az("set-tags", self.container, stale_key, "state=committed")
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 2)
        sw = self.lodge("-v", "sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.rc, 0, sw)
        self.assertNotIn(pending_key, self.objects())
        self.assertIn(stale_key, self.objects(), "a committed blob is never deleted by a stale task")
        self.assertIn("is tagged state=committed", sw.err)
        self.assertEqual(sw.json()["kept"], 1, sw)
        self.assertEqual(self.task(stale_rid), "IGNORED")
        (why,) = self.sql("SELECT last_error FROM cleanup_task WHERE record_id = ?", (stale_rid,))[0]
        self.assertIn("state=committed", why, "the task says why its blob is left")
        self.assertEqual(self.object_tags(stale_key), {"state": "committed"})

    def health_reasons(self, later=None):
        st = self.lodge("status", "--check", "--json", later=later)
        return sorted(r["code"] for r in st.json()["reasons"])

    def test_an_active_blob_another_tool_re_tagged_pending_is_found_and_tagged_committed_again(self):
        r, res = self.upload("a.txt", "active, then re-tagged\n", "--tag", "team=ops")
        self.assertEqual((r.rc, res["outcome"]), (0, "active"), r)
        key = res["object_key"]
        self.assertEqual(self.object_tags(key), {"state": "committed", "team": "ops"})
        # Another tool tags it pending: the backstop lifecycle rule would now expire it.
        self.az("set-tags", self.container, key, "state=pending")
        rec = self.lodge("reconcile", "--json")
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual(rec.json()["found"]["tag_mismatch"], 1, rec)
        (item,) = rec.json()["items"]
        self.assertEqual((item["kind"], item["key"], item["record_id"], item["applied"]),
                         ("tag_mismatch", key, res["id"], False), rec)
        self.assertIn("state=pending", item["detail"])
        text = self.lodge("reconcile")
        self.assertIn("tag_mismatch", text.out)
        self.assertIn("reconcile_findings", self.health_reasons())
        ap = self.lodge("reconcile", "--apply", "--json")
        self.assertEqual(ap.json()["applied"], 1, ap)
        self.assertEqual(self.object_tags(key), {"state": "committed", "team": "ops"}, "the user's tag kept")
        again = self.lodge("reconcile", "--json")
        self.assertEqual(again.rc, 0, again)
        self.assertTrue(again.json()["clean"], again)
        self.assertNotIn("reconcile_findings", self.health_reasons())
        self.assertEqual(self.row(res["id"])[:2], ("ACTIVE", 0))

    def test_a_failed_uploads_blob_another_tool_re_tagged_is_kept_and_said_then_re_tagged_and_swept(self):
        # Two uploads crash after their PUT (blobs tagged pending, stamped by their rows);
        # another tool tags one committed and strips the other's tags.
        keys = {}
        for name, tags in (("c.txt", ["state=committed"]), ("n.txt", ["owner=another"])):
            r, _ = self.upload(name, f"{name} was failed\n", env=self.fp("upload.after_put=crash"))
            self.assertEqual(r.rc, -9, r)
            rid, status, _, key = self.last_row()
            self.az("set-tags", self.container, key, *tags)
            keys[rid] = key
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 2)
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"]), (2, 0), sw)
        self.assertIn("is tagged state=committed", sw.err)
        self.assertIn("has no state tag", sw.err)
        for rid, key in keys.items():
            self.assertIn(key, self.objects(), "the guard keeps it: lodge does not override a tag by itself")
            status, why = self.sql("SELECT status, last_error FROM cleanup_task WHERE record_id = ?", (rid,))[0]
            self.assertEqual(status, "IGNORED")
            self.assertIn("reconcile --apply", why)
        rec = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(rec.rc, 1, rec)
        self.assertEqual((rec.json()["found"]["tag_mismatch"], rec.json()["found"]["leftover"]), (2, 0), rec)
        self.assertIn("reconcile_findings", self.health_reasons(later="+1h"))
        ap = self.lodge("reconcile", "--apply", "--json", later="+1h")
        self.assertEqual(ap.json()["applied"], 2, ap)
        for key in keys.values():  # lodge's tags: the upload's own (none here) and pending
            self.assertEqual(self.object_tags(key), {"state": "pending"})
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.json()["deleted"], 2, sw)
        self.assertEqual(self.objects(), {})
        self.assertTrue(self.lodge("reconcile", "--json", later="+2h").json()["clean"])
        check_invariants(self)

    def test_K_a_staged_upload_killed_mid_way_leaves_no_uncommitted_blocks_after_repair_and_sweep(self):
        r, _ = self.upload("big.bin", os.urandom(11 << 20), env=self.fp("upload.between_parts=crash"))
        self.assertEqual(r.rc, -9, r)
        rid, status, _, key = self.last_row()
        self.assertEqual(status, "UPLOADING")
        left = self.uncommitted()
        self.assertEqual([(b["name"], b["committed"]) for b in left], [(key, False)], left)
        self.assertGreaterEqual(len(left[0]["uncommitted_blocks"]), 1)
        self.assertEqual(self.objects(), {}, "uncommitted blocks are invisible to a listing")
        self.assertEqual(self.lodge("repair", "--json", later=AFTER_DEADLINE).json()["repaired"], 1)
        sw = self.lodge("sweep", "--json", later=AFTER_DEADLINE)
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual(self.uncommitted(), [], "no uncommitted blocks after sweep")
        self.assertEqual(self.objects(), {})
        self.assertEqual(self.row(rid)[:2], ("UPLOAD_FAILED", 1))
        converge(self)


if __name__ == "__main__":
    main()
