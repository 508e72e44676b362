"""De-duplication saves storage, never a path: a tree full of repeated content (one LICENSE
at two paths, empty __init__.py files, a path rewritten with another path's bytes) comes
back whole from `get --prefix`, under every de-dup scope, on every store (moto or Azurite
through StoreTestCase, and file://) and on both ledgers (the _pg entry); each content is
stored once per scope's rule, and deleting the tree path by path removes a shared object
only after its last path."""

import filecmp
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, StoreTestCase, check_invariants, main  # noqa: E402

CONFIG = {"policies": {
    scope: {"max_size": "1MiB", "deadline": "60s", "grace": "1s", "dedup": scope}
    for scope in ("owner", "prefix", "none")}}

TREE = {
    "LICENSE": b"Permission is hereby granted, free of charge...\n",
    "pkg/LICENSE": b"Permission is hereby granted, free of charge...\n",
    "pkg/__init__.py": b"",
    "pkg/a/__init__.py": b"",
    "pkg/b/__init__.py": b"",
    "a.txt": b"alpha\n",
    "b.txt": b"bravo\n",
    "docs/copy-of-a.txt": b"alpha\n",
}


def same_tree(a, b):
    """Whether two directories hold the same names and bytes, recursively (diff -r)."""
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


class DedupPathsMixin:
    def setUp(self):
        super().setUp()
        self.store_env()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        r = self.lodge("init")
        self.assertEqual(r.rc, 0, r)

    def store_env(self):
        """Points self.env at the test's store (StoreTestCase already has)."""

    def make_tree(self, root, files=TREE):
        for rel, data in files.items():
            self.write(os.path.join(root, rel), data)
        return os.path.join(self.dir, root)

    def upload(self, *args, expect=0):
        r = self.lodge("upload", "--json", *args)
        self.assertEqual(r.rc, expect, r)
        lines = r.json_lines()
        return {x["path"]: x for x in lines[:-1]}, lines[-1]["summary"]

    def get_tree(self, prefix, out):
        r = self.lodge("get", "--prefix", prefix, "-o", os.path.join(self.dir, out))
        self.assertEqual(r.rc, 0, r)
        return os.path.join(self.dir, out)

    def check_scope(self, scope):
        tree = self.make_tree("tree-" + scope)
        before = len(self.objects())
        files, summary = self.upload("--policy", scope, "--prefix", "builds/" + scope, tree)
        self.assertEqual(sorted(files), sorted(TREE), files)
        distinct = len(set(TREE.values()))
        if scope == "none":
            self.assertEqual(summary["active"], len(TREE), summary)
            self.assertEqual(len(self.objects()) - before, len(TREE))
        else:
            self.assertEqual((summary["active"], summary["duplicate"]), (distinct, len(TREE) - distinct), summary)
            self.assertEqual(len(self.objects()) - before, distinct, "each content stored once")
            for f in files.values():
                if f["outcome"] == "duplicate":
                    self.assertIsNotNone(f["shares"], f)
        # Every path reported stored is restorable, by its prefix and by itself.
        out = self.get_tree("builds/" + scope, "out-" + scope)
        self.assertTrue(same_tree(tree, out), f"get --prefix restored another tree than {tree}")
        r = self.lodge("cat", "--prefix", "builds/" + scope, "pkg/b/__init__.py")
        self.assertEqual(r.rc, 0, r)
        # A re-run over the unchanged tree adds no row.
        rows = len(self.ledger_files())
        again, summary = self.upload("--policy", scope, "--prefix", "builds/" + scope, tree)
        if scope != "none":
            self.assertEqual(summary["duplicate"], len(TREE), summary)
            self.assertEqual(len(self.ledger_files()), rows)
        check_invariants(self)
        return files

    def test_trees_of_repeated_content_come_back_whole_under_every_scope(self):
        self.check_every_scope()

    def test_replace_with_content_stored_elsewhere(self):
        self.check_replace_with_content_stored_elsewhere()

    def test_shared_object_removed_only_after_its_last_path(self):
        self.check_delete_path_by_path()

    def test_a_shared_object_whose_last_path_awaits_its_grace_is_no_leftover(self):
        # The writer's path deleted and swept while another path still shares the object (its
        # task ends IGNORED: the key was in use), then the last path deleted: until that
        # path's grace has passed its pending task owns the object, so reconcile reports
        # nothing, --apply queues nothing, and the object stays for the grace promised.
        config = dict(CONFIG, policies=dict(CONFIG["policies"], slow={"deadline": "60s", "grace": "10m"}))
        self.env["LODGE_CONFIG"] = self.write("config-slow.json", json.dumps(config))
        tree = self.make_tree("g", {"one/LICENSE": b"G\n", "two/LICENSE": b"G\n"})
        files, summary = self.upload("--policy", "slow", "--prefix", "g", tree)
        self.assertEqual((summary["active"], summary["duplicate"]), (1, 1), summary)
        writer = next(f for f in files.values() if f["outcome"] == "active")
        sharer = next(f for f in files.values() if f["outcome"] == "duplicate")
        key = writer["object_key"]
        self.assertEqual(self.lodge("delete", writer["id"]).rc, 0)
        self.assertEqual(self.lodge("sweep", "--json", later="+1h").rc, 0)
        task = "SELECT status FROM cleanup_task WHERE record_id = ?"
        self.assertEqual(self.sql(task, (writer["id"],)), [("IGNORED",)], "the key was in use")
        self.assertEqual(self.lodge("delete", sharer["id"]).rc, 0)
        self.assertEqual(self.sql(task, (sharer["id"],)), [("PENDING",)])
        r = self.lodge("reconcile", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.json()["clean"], r)
        self.assertEqual(r.json()["found"]["leftover"], 0, r)
        st = self.lodge("status", "--check", "--json")
        self.assertEqual(st.rc, 0, st)
        a = self.lodge("reconcile", "--apply", "--json")
        self.assertEqual((a.rc, a.json()["applied"]), (0, 0), a)
        self.assertEqual(self.sql(task, (writer["id"],)), [("IGNORED",)], "nothing requeued")
        # A sweep within the grace leaves the object; one after it removes it, and then
        # nothing is left for reconcile either.
        self.assertEqual(self.lodge("sweep", "--json").rc, 0)
        self.assertIn(key, self.objects(), "not before the grace the delete promised")
        self.assertEqual(self.lodge("sweep", "--json", later="+1h").rc, 0)
        self.assertNotIn(key, self.objects())
        r = self.lodge("reconcile", "--json", later="+1h")
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(r.json()["clean"], r)
        check_invariants(self)

    def check_every_scope(self):
        for scope in ("owner", "prefix", "none"):
            with self.subTest(scope=scope):
                self.check_scope(scope)
        # Under "owner", a second prefix's tree shares the first's objects: nothing new stored.
        tree = self.make_tree("second")
        before = len(self.objects())
        files, summary = self.upload("--policy", "owner", "--prefix", "builds/owner-2", tree)
        self.assertEqual(summary["duplicate"], len(TREE), summary)
        self.assertEqual(len(self.objects()), before)
        self.assertTrue(same_tree(tree, self.get_tree("builds/owner-2", "out-owner-2")))

    def check_replace_with_content_stored_elsewhere(self):
        tree = self.make_tree("r", {"a.txt": b"alpha\n", "b.txt": b"bravo\n"})
        self.upload("--prefix", "p", tree)
        # b.txt rewritten with a.txt's bytes, then uploaded with --replace: b.txt serves them.
        self.write("r/b.txt", b"alpha\n")
        files, _ = self.upload("--replace", "--prefix", "p", tree)
        self.assertEqual(files["b.txt"]["outcome"], "duplicate", files)
        r = self.lodge("cat", "--prefix", "p", "b.txt")
        self.assertEqual((r.rc, r.out), (0, "alpha\n"), r)
        self.assertTrue(same_tree(tree, self.get_tree("p", "out-r")))
        # Without --replace too: the path's newest row serves what was uploaded last.
        self.write("r/a.txt", b"bravo\n")
        self.lodge("sweep", later="+1h")
        self.write("r/a.txt", b"alpha\n")
        self.write("r/b.txt", b"bravo\n")
        self.upload("--prefix", "p", tree)
        self.assertTrue(same_tree(tree, self.get_tree("p", "out-r2")))
        check_invariants(self)

    def check_delete_path_by_path(self):
        tree = self.make_tree("d", {"one/LICENSE": b"L\n", "two/LICENSE": b"L\n", "three/LICENSE": b"L\n"})
        files, summary = self.upload("--prefix", "d", tree)
        self.assertEqual((summary["active"], summary["duplicate"]), (1, 2), summary)
        key = files["one/LICENSE"]["object_key"]
        self.assertEqual({f["object_key"] for f in files.values()}, {key})
        writer = next(f for f in files.values() if f["outcome"] == "active")
        # The writer's path first: its object stays while two paths still use it.
        order = [writer["path"]] + sorted(p for p in files if p != writer["path"])
        for i, path in enumerate(order):
            r = self.lodge("delete", files[path]["id"])
            self.assertEqual(r.rc, 0, r)
            r = self.lodge("sweep", "--json", later="+1h")
            self.assertEqual(r.rc, 0, r)
            last = i == len(order) - 1
            self.assertEqual(key in self.objects(), not last, f"after deleting {path}")
            for rest in order[i + 1:]:
                c = self.lodge("cat", "--prefix", "d", rest)
                self.assertEqual((c.rc, c.out), (0, "L\n"), c)
            check_invariants(self)
            # The deleted writer's row stands for the paths still sharing its object:
            # reconcile finds the object in use, not left behind by a dead row.
            r = self.lodge("reconcile", "--json", later="+1h")
            self.assertEqual(r.rc, 0, r)
            self.assertTrue(r.json()["clean"], r)


class DedupPathsStore(DedupPathsMixin, StoreTestCase):
    """The suite on moto (or Azurite, LODGE_IT_STORE=az)."""


class DedupPathsFile(DedupPathsMixin, LodgeTestCase):
    def store_env(self):
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def objects(self):
        out = {}
        for base, _, names in os.walk(self.root):
            for n in names:
                p = os.path.join(base, n)
                rel = os.path.relpath(p, self.root)
                if not rel.startswith(".lodge"):
                    out[rel] = os.path.getsize(p)
        return out


if __name__ == "__main__":
    main()
