"""A ledger knows its store: `lodge init` binds it, every command that opens a store refuses
another one (STORE_MISMATCH), `init --rebind-store` moves it, a ledger made by an older lodge
takes its binding from its first use; only `lodge init` creates a ledger (LEDGER_NOT_FOUND);
and ordinary trees (empty files, symlinks) upload cleanly."""

import json
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import SOURCE_DIR, LodgeTestCase, S3TestCase, free_port, main  # noqa: E402

CONFIG = {"policies": {"default": {"deadline": "60s", "grace": "1s"},
                       "strict": {"allow_empty": False}}}
UPGRADE = "(recorded on first use after upgrade)"


class BindingMixin:
    def binding(self):
        return dict(self.sql("SELECT key, value FROM ledger_meta WHERE key LIKE 'binding.%'"))

    def assert_mismatch(self, r, ours, given):
        self.assertEqual(r.rc, 2, r)
        self.assertIn("(STORE_MISMATCH)", r.err)
        self.assertIn(ours, r.err)
        self.assertIn(given, r.err)
        self.assertIn("lodge init --rebind-store", r.err)
        self.assertIn("only after moving the data", r.err)

    def rows(self):
        return self.sql("SELECT count(*) FROM file_upload")[0][0]


class BindingS3(BindingMixin, S3TestCase):
    def setUp(self):
        super().setUp()  # S3TestCase.setUp ran `lodge init` with s3://bucket/lodge
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.ours = f"s3://{self.bucket}/lodge at {self.moto.endpoint}"

    def bucket_keys(self, bucket):
        r = self.s3.list_objects_v2(Bucket=bucket)
        return [o["Key"] for o in r.get("Contents", []) if "/.lodge/" not in "/" + o["Key"]]  # not id markers

    def test_init_records_the_canonical_store_and_is_idempotent(self):
        self.assertEqual(self.binding(), {"binding.scheme": "s3", "binding.endpoint": self.moto.endpoint,
                                          "binding.location": self.bucket, "binding.root": "lodge",
                                          "binding.tagging": "none"})
        # The same store spelled otherwise is the same binding: init again is a no-op.
        for spelling in (f"s3://{self.bucket}/lodge/", f"s3://{self.bucket}/lodge"):
            r = self.lodge("--store", spelling, "init", "--json")
            self.assertEqual(r.rc, 0, r)
            j = r.json()
            self.assertEqual(j["store"], self.ours)
            self.assertEqual(j["binding"]["root"], "lodge")
            self.assertIsNone(j["rebound_from"])
        r = self.lodge("--store", f"s3://{self.bucket}/lodge/", "--endpoint", self.moto.endpoint + "/",
                       "upload", "--json", self.write("a.txt", "same store\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(self.binding()["binding.root"], "lodge")

    def test_another_bucket_prefix_or_endpoint_is_refused_by_every_command_that_opens_the_store(self):
        f = self.write("a.txt", "first\n")
        self.assertEqual(self.lodge("upload", f).rc, 0)
        other = "o-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=other)
        dead = f"http://127.0.0.1:{free_port()}"
        cases = [({"LODGE_STORE": f"s3://{other}/lodge"}, f"s3://{other}/lodge at {self.moto.endpoint}"),
                 ({"LODGE_STORE": f"s3://{self.bucket}/lodge/2"}, f"s3://{self.bucket}/lodge/2 at"),
                 ({"LODGE_STORE": f"s3://{self.bucket}"}, f"s3://{self.bucket} at"),
                 # An endpoint nobody answers: refused before anything is tried, never "duplicate".
                 ({"AWS_ENDPOINT_URL": dead}, f"s3://{self.bucket}/lodge at {dead}")]
        for env, given in cases:
            with self.subTest(env=env):
                r = self.lodge("upload", "--json", f, env=env)
                self.assert_mismatch(r, self.ours, given)
                self.assertEqual(r.json()["error"]["code"], "STORE_MISMATCH")
                for cmd in (["sweep"], ["reconcile"], ["reconcile", "--apply"]):
                    self.assert_mismatch(self.lodge(*cmd, env=env), self.ours, given)
        self.assertEqual(self.bucket_keys(other), [], "nothing written to the other bucket")
        self.assertEqual(self.rows(), 1)
        self.assertEqual(len(self.objects()), 1)
        # The store it serves still works.
        self.assertEqual(self.lodge("upload", self.write("b.txt", "second\n")).rc, 0)

    def test_plain_init_never_rebinds_and_rebind_store_does_saying_what_it_was(self):
        other = "o-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=other)
        theirs = f"s3://{other}/moved at {self.moto.endpoint}"
        env = {"LODGE_STORE": f"s3://{other}/moved"}
        before = self.binding()
        self.assert_mismatch(self.lodge("init", env=env), self.ours, theirs)
        self.assertEqual(self.binding(), before)
        r = self.lodge("init", "--rebind-store", env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"its store was {self.ours}, it is now {theirs}", r.err)
        self.assertEqual(self.binding()["binding.location"], other)
        self.assertEqual(self.binding()["binding.root"], "moved")
        r = self.lodge("upload", "--json", self.write("a.txt", "after the move\n"), env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertTrue(self.bucket_keys(other)[0].startswith("moved/ci/"))
        # Now the old store is the other one.
        self.assert_mismatch(self.lodge("sweep"), theirs, self.ours)
        # Rebinding to the store it already serves changes nothing and says nothing of a move.
        r = self.lodge("init", "--rebind-store", "--json", env=env)
        self.assertEqual(r.rc, 0, r)
        self.assertIsNone(r.json()["rebound_from"])

    def test_a_ledger_without_a_binding_takes_it_from_its_first_use_and_says_so_once(self):
        self.assertEqual(self.lodge("upload", self.write("a.txt", "before the upgrade\n")).rc, 0)
        self.sql_exec("DELETE FROM ledger_meta WHERE key LIKE 'binding.%'")  # as an older lodge left it
        # Commands that do not open the store leave it unbound.
        self.assertEqual(self.lodge("status").rc, 0)
        self.assertEqual(self.binding(), {})
        r = self.lodge("sweep")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err.count(f"is now bound to store {self.ours} {UPGRADE}"), 1, r)
        self.assertIn(f"ledger {self.db} is now bound", r.err)
        self.assertEqual(self.binding()["binding.location"], self.bucket)
        r = self.lodge("upload", self.write("b.txt", "after the upgrade\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn("now bound", r.err)
        other = "o-" + uuid.uuid4().hex[:20]
        self.assert_mismatch(self.lodge("sweep", env={"LODGE_STORE": f"s3://{other}/lodge"}), self.ours, other)

    def test_the_tagging_mode_is_part_of_the_binding_every_host_must_match(self):
        tagging = dict(CONFIG, tag_state=True)
        tags_env = {"LODGE_CONFIG": self.write("tags.json", json.dumps(tagging))}
        f = self.write("a.txt", "tagged or not\n")
        # Bound without state tags (init ran with the plain configuration): a host that tags is refused.
        self.assertEqual(self.binding()["binding.tagging"], "none")
        for cmd in (["upload", f], ["sweep"], ["reconcile"], ["init"]):
            with self.subTest(cmd=cmd):
                r = self.lodge(*cmd, env=tags_env)
                self.assertEqual(r.rc, 2, r)
                self.assertIn("(STORE_MISMATCH)", r.err)
                self.assertIn(f"is bound to the store {self.ours} without state tags", r.err)
                self.assertIn('remove "tag_state"', r.err)
                self.assertIn("lodge init --rebind-store", r.err)
        self.assertEqual(self.rows(), 0)
        # init --rebind-store changes the mode, and says so.
        r = self.lodge("init", "--rebind-store", env=tags_env)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"its store was {self.ours} (without state tags), it is now {self.ours} (with state tags)",
                      r.err)
        self.assertEqual(self.binding()["binding.tagging"], "state")
        r = self.lodge("upload", "--json", f, env=tags_env)
        self.assertEqual(r.rc, 0, r)
        key = r.json_lines()[0]["object_key"]
        got = self.s3.get_object_tagging(Bucket=self.bucket, Key=key)["TagSet"]
        self.assertEqual(got, [{"Key": "lodge-state", "Value": "committed"}])
        # Now the host without tag_state is the one refused, told how to fix it.
        for cmd in (["upload", self.write("b.txt", "untagged\n")], ["sweep"], ["reconcile", "--apply"]):
            with self.subTest(cmd=cmd):
                r = self.lodge(*cmd)
                self.assertEqual(r.rc, 2, r)
                self.assertIn(f"is bound to the store {self.ours} with state tags", r.err)
                self.assertIn('set "tag_state": true', r.err)
        r = self.lodge("--json", "doctor")
        self.assertIn("with state tags", r.out)
        self.assertEqual(self.rows(), 1)

    def test_a_binding_without_a_tagging_mode_takes_its_first_use_s_and_says_so_once(self):
        self.sql_exec("DELETE FROM ledger_meta WHERE key = 'binding.tagging'")  # as the lodge before left it
        tags_env = {"LODGE_CONFIG": self.write("tags.json", json.dumps(dict(CONFIG, tag_state=True)))}
        r = self.lodge("sweep", env=tags_env)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err.count(f"is now bound to store {self.ours}, with state tags {UPGRADE}"), 1, r)
        self.assertEqual(self.binding()["binding.tagging"], "state")
        self.assertNotIn(UPGRADE, self.lodge("sweep", env=tags_env).err)
        self.assertEqual(self.lodge("sweep").rc, 2)  # recorded now: another mode is refused
        # Another store is refused as before, whatever the mode.
        other = "o-" + uuid.uuid4().hex[:20]
        self.sql_exec("DELETE FROM ledger_meta WHERE key = 'binding.tagging'")
        self.assert_mismatch(self.lodge("sweep", env={"LODGE_STORE": f"s3://{other}/lodge"}), self.ours, other)
        self.assertNotIn("binding.tagging", self.binding())

    def test_a_ledger_made_by_an_older_lodge_is_migrated_and_bound_by_its_first_upload(self):
        os.remove(self.db)
        for suffix in ("-wal", "-shm"):
            if os.path.exists(self.db + suffix):
                os.remove(self.db + suffix)
        with open(os.path.join(SOURCE_DIR, "tests", "data", "ledger", "schema_v1.sql")) as f:
            self.sql_exec(f.read() + "INSERT INTO ledger_meta (key, value) VALUES "
                          "('uuid', '00000000-0000-4000-8000-000000000001'), ('created_at', '1');"
                          "PRAGMA user_version = 1;")
        r = self.lodge("upload", "--json", self.write("a.txt", "first after the upgrade\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err.count(UPGRADE), 1, r)
        self.assertEqual(self.binding()["binding.root"], "lodge")
        r = self.lodge("upload", self.write("b.txt", "second\n"))
        self.assertEqual(r.rc, 0, r)
        self.assertNotIn(UPGRADE, r.err)

    def test_a_tree_with_empty_files_and_symlinks_uploads_with_exit_0(self):
        tree = os.path.join(self.dir, "tree")
        self.write("tree/a.txt", "content\n")
        self.write("tree/.gitkeep", "")
        self.write("tree/notes.txt", "")
        self.write("tree/sub/empty.log", "")
        self.write("tree/sub/b.bin", b"\x00\x01binary")
        os.symlink("a.txt", os.path.join(tree, "link.txt"))
        os.symlink("sub", os.path.join(tree, "dirlink"))
        os.symlink("/nonexistent/target", os.path.join(tree, "sub", "dangling"))
        r = self.lodge("upload", "--json", tree)
        self.assertEqual(r.rc, 0, r)
        lines = r.json_lines()
        summary = lines[-1]["summary"]
        self.assertEqual(summary["skipped"], 3, r)
        self.assertEqual(summary["rejected"] + summary["failed"], 0, r)
        # Three empty files share one digest: one is stored, the others are its duplicates.
        self.assertEqual(summary["active"] + summary["duplicate"], 5, r)
        skipped = {os.path.relpath(j["file"], tree): j for j in lines[:-1] if j["outcome"] == "skipped"}
        self.assertEqual(set(skipped), {"link.txt", "dirlink", "sub/dangling"})
        for j in skipped.values():
            self.assertIn("symbolic link", j["reason"])
            self.assertIsNone(j["error"])
        for name in ("link.txt", "dirlink", "sub/dangling"):
            self.assertIn(f"lodge: skipped {os.path.join(tree, name)}: a symbolic link", r.err)
        self.assertIn(0, self.objects().values(), "an empty object was stored")
        # Text mode: the notice on stderr and the count in the summary line; --quiet says nothing.
        r = self.lodge("upload", tree)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"lodge: skipped {os.path.join(tree, 'link.txt')}", r.err)
        self.assertIn("3 skipped", r.err)
        self.assertNotIn("link.txt", r.out)
        r = self.lodge("--quiet", "upload", tree)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err, "")

    def test_a_policy_may_refuse_empty_files(self):
        r = self.lodge("upload", "--json", "--policy", "strict", self.write("e.txt", ""))
        self.assertEqual(r.rc, 1, r)
        err = r.json_lines()[0]["error"]
        self.assertEqual(err["code"], "EMPTY_FILE")
        self.assertIn("policy strict", err["message"])
        self.assertEqual(self.rows(), 0)

    def test_idempotency_key_with_more_than_one_input_is_a_usage_error(self):
        a = self.write("d/a.txt", "a\n")
        b = self.write("d/b.txt", "b\n")
        lst = self.write("list.txt", a + "\n")
        for args in ([os.path.join(self.dir, "d")], [a, b], ["--files-from", lst], [a, "--files-from", lst]):
            with self.subTest(args=args):
                r = self.lodge("upload", "--idempotency-key", "k1", *args)
                self.assertEqual(r.rc, 2, r)
                self.assertIn("--idempotency-key", r.err)
                self.assertIn("(USAGE)", r.err)
        self.assertEqual(self.rows(), 0)
        self.assertEqual(self.objects(), {})
        r = self.lodge("upload", "--idempotency-key", "k1", a)
        self.assertEqual(r.rc, 0, r)


class BindingFile(BindingMixin, LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def test_file_store_bound_by_its_real_directory_however_it_is_spelled(self):
        self.init()
        real = os.path.realpath(self.root)
        self.assertEqual(self.binding(), {"binding.scheme": "file", "binding.endpoint": "",
                                          "binding.location": real, "binding.root": "",
                                          "binding.tagging": "none"})
        os.symlink(self.root, os.path.join(self.dir, "link"))
        for url, cwd in (("file://./store", self.dir), ("file://store/", self.dir),
                         ("file://" + self.root + "/", None), ("file://" + os.path.join(self.dir, "link"), None)):
            with self.subTest(url=url):
                r = self.lodge("--store", url, "upload", "--json", self.write(f"f{len(url)}.txt", url), cwd=cwd)
                self.assertEqual(r.rc, 0, r)
                self.assertEqual(self.lodge("--store", url, "init", cwd=cwd).rc, 0)
        other = os.path.join(self.dir, "other")
        r = self.lodge("--store", "file://" + other, "upload", self.write("x.txt", "elsewhere\n"))
        self.assert_mismatch(r, "file://" + real, "file://" + other)
        self.assertFalse(os.path.exists(os.path.join(other, "ci")), "nothing written to the other store")
        self.assert_mismatch(self.lodge("--store", "file://" + other, "reconcile"), "file://" + real,
                             "file://" + other)

    def test_one_ledger_per_store_two_ledgers_side_by_side(self):
        self.init()
        second = os.path.join(self.dir, "second.db")
        other = "file://" + os.path.join(self.dir, "other")
        r = self.lodge("--db", second, "--store", other, "init", db=False)
        self.assertEqual(r.rc, 0, r)
        f = self.write("a.txt", "both\n")
        self.assertEqual(self.lodge("upload", f).rc, 0)
        r = self.lodge("--db", second, "--store", other, "upload", f, db=False)
        self.assertEqual(r.rc, 0, r)


class MissingLedger(LodgeTestCase):
    def setUp(self):
        super().setUp()
        self.env.update({"LODGE_STORE": "file://" + os.path.join(self.dir, "store"), "LODGE_OWNER": "ci"})

    def test_every_command_but_init_refuses_a_path_with_no_ledger(self):
        typo = os.path.join(self.dir, "typo", "ledgr.db")
        f = self.write("a.txt", "never uploaded\n")
        for cmd in (["upload", f], ["status"], ["status", "--check"], ["list"], ["sweep"], ["repair"],
                    ["reconcile"], ["tasks"], ["delete", "1"], ["retry", "1"]):
            with self.subTest(cmd=cmd):
                r = self.lodge("--db", typo, *cmd, db=False)
                self.assertEqual(r.rc, 3, r)
                self.assertIn("(LEDGER_NOT_FOUND)", r.err)
                self.assertIn(typo, r.err)
                self.assertIn(f"Run `lodge init --db {typo}` to create one", r.err)
                self.assertNotIn("healthy", r.out)
                self.assertFalse(os.path.exists(os.path.dirname(typo)), "nothing created")
        r = self.lodge("--db", typo, "status", "--check", "--json", db=False)
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.json()["error"]["code"], "LEDGER_NOT_FOUND")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "store", "ci")), "nothing stored")
        # An empty file is not a ledger either.
        empty = self.write("empty.db", "")
        r = self.lodge("--db", empty, "status", db=False)
        self.assertEqual(r.rc, 3, r)
        self.assertIn("(LEDGER_NOT_FOUND)", r.err)
        # init makes it; then the same commands work.
        r = self.lodge("--db", typo, "init", db=False)
        self.assertEqual(r.rc, 0, r)
        self.assertIn(f"ledger {typo} ready", r.out)
        self.assertEqual(self.lodge("--db", typo, "status", "--check", db=False).rc, 0)
        self.assertEqual(self.lodge("--db", typo, "upload", f, db=False).rc, 0)


if __name__ == "__main__":
    main()
