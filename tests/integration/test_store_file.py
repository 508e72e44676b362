"""lodge against a file:// store whose metadata sidecars were damaged: reported with a
clear error, never an INTERNAL crash, and an object whose stamp cannot be read is never
queued for deletion."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, main  # noqa: E402


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


if __name__ == "__main__":
    main()
