"""lodge against a file:// store whose metadata sidecars were damaged: reported with a
clear error, never an INTERNAL crash, and an object whose stamp cannot be read is never
queued for deletion; and a file another tool wrote at a dead row's key is never deleted."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, main  # noqa: E402

CONFIG = {"policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}}}


class DamagedSidecars(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci"})
        self.init()

    def test_reconcile_reports_an_unreadable_stamp_as_unknown_and_leaves_it(self):
        up = self.lodge("upload", "--json", self.write("a.txt", "kept\n"))
        self.assertEqual(up.rc, 0, up)
        stray = os.path.join(self.store, "ci", "stray.txt")
        with open(stray, "w") as f:
            f.write("whose?\n")
        os.makedirs(os.path.join(self.store, ".lodge-meta", "ci"), exist_ok=True)
        with open(os.path.join(self.store, ".lodge-meta", "ci", "stray.txt.json"), "w") as f:
            f.write('{"content_type": "text/plain", "metadata": {"lodge-ledger": 7}}')

        rec = self.lodge("reconcile", "--apply", "--json", "--older-than", "0ms")
        self.assertEqual(rec.rc, 1, rec)
        summary = rec.json()
        self.assertNotIn("error", summary, rec)
        self.assertEqual(summary["found"]["unknown"], 1, summary)
        self.assertEqual(summary["found"]["unmanaged"], 0, summary)
        item = summary["items"][0]
        self.assertEqual(item["key"], "ci/stray.txt")
        self.assertFalse(item["applied"])
        self.assertIn("'metadata.lodge-ledger'", item["detail"])
        self.assertEqual(self.sql("SELECT count(*) FROM cleanup_task WHERE object_key = 'ci/stray.txt'"), [(0,)])
        self.assertTrue(os.path.exists(stray), "never touched")


class AnotherWritersFile(LodgeTestCase):
    """A plain file written at a dead row's key of a file:// store before sweep ran: over
    lodge's object in place (its inode, and lodge's attribute, stay) or as a new file."""

    def setUp(self):
        super().setUp()
        self.store = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.store, "LODGE_OWNER": "ci",
                         "LODGE_CONFIG": self.write("config.json", json.dumps(CONFIG))})
        self.init()

    def test_a_plain_write_at_a_dead_rows_key_survives_sweep_and_reconcile_apply(self):
        deleted = self.lodge("upload", "--json", self.write("a.txt", "deleted by its owner\n")).json_lines()[0]
        self.assertEqual(self.lodge("delete", deleted["id"]).rc, 0)
        # The answer of this PUT is lost: the row fails, its object waits for the grace.
        failed = self.lodge("upload", "--json", self.write("b.txt", "a failed upload\n"),
                            env={"LODGE_FAILPOINTS": "upload.after_put=error"})
        self.assertEqual(failed.json_lines()[0]["outcome"], "failed", failed)
        (failed_id, failed_key), = self.sql("SELECT id, object_key FROM file_upload WHERE upload_status = 'UPLOAD_FAILED'")
        in_place = os.path.join(self.store, deleted["object_key"])
        with open(in_place, "w") as f:  # O_TRUNC: the same inode
            f.write("another tool wrote here\n")
        replaced = os.path.join(self.store, failed_key)
        os.unlink(replaced)
        with open(replaced, "w") as f:
            f.write("another tool's new file\n")
        sw = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual((sw.json()["kept"], sw.json()["deleted"]), (2, 0), sw)
        self.assertIn("written over in place", sw.err)
        self.assertIn("no lodge stamp", sw.err)
        for rid in (deleted["id"], failed_id):
            status, why = self.sql("SELECT status, last_error FROM cleanup_task WHERE record_id = ?", (rid,))[0]
            self.assertEqual(status, "IGNORED")
            self.assertIn("not deleted", why)
        rec = self.lodge("reconcile", "--apply", "--json", "-v", later="+2h")
        self.assertEqual(rec.rc, 0, rec)
        self.assertEqual(sorted((i["kind"], i["applied"]) for i in rec.json()["items"]),
                         [("unmanaged", False), ("unmanaged", False)], rec)
        self.assertEqual(self.lodge("sweep", "--json", later="+2h").json()["claimed"], 0)
        with open(in_place) as f:
            self.assertEqual(f.read(), "another tool wrote here\n")
        with open(replaced) as f:
            self.assertEqual(f.read(), "another tool's new file\n")
        self.assertEqual([n for n in os.listdir(os.path.join(self.store, ".lodge-tmp")) if n.startswith("removing-")]
                         if os.path.isdir(os.path.join(self.store, ".lodge-tmp")) else [], [])


if __name__ == "__main__":
    main()
