"""What lodge says speaks the user's language: files and their cleanup, not tasks; each error
once; "1 file"; every --help lists the global options; a misspelled LODGE_* variable, an SI
size or a media type that is not type/subtype is said at once."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, main  # noqa: E402

COMMANDS = ("init", "status", "config", "upload", "list", "sweep", "repair", "reconcile", "delete", "tasks",
            "retry", "show", "get", "cat", "url", "lifecycle")
GLOBAL_OPTIONS = ("--db", "--config", "--store", "--owner", "--endpoint", "--region", "--ca-bundle", "--profile",
                  "--no-verify-ssl", "--force-network-fs", "--json", "-q,--quiet", "-v,--verbose")
# The immediate cleanup of a refused upload fails too: the object cannot be removed yet.
PUT_AND_DELETE_FAIL = {"LODGE_FAILPOINTS": "store.put=error;store.delete=error"}


class Words(LodgeTestCase):

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"

    def test_a_failed_upload_speaks_of_the_file_not_of_a_task(self):
        # It said "warning: task 1 (...) will be retried: ...".
        self.init()
        r = self.lodge("upload", self.write("a.txt", "refused\n"), env=PUT_AND_DELETE_FAIL)
        self.assertEqual(r.rc, 1, r)
        self.assertNotRegex(r.out + r.err, r"\btasks?\b", r)
        self.assertIn("file #1: its object ", r.err)
        self.assertIn("could not be removed yet", r.err)
        self.assertIn("sweep will retry", r.err)
        self.assertEqual(self.sql("SELECT status FROM cleanup_task"), [("RETRY",)])

    def test_sweep_says_each_error_once(self):
        self.init()
        self.lodge("upload", self.write("a.txt", "refused\n"), env=PUT_AND_DELETE_FAIL)
        sw = self.lodge("sweep", later="+1h", env={"LODGE_FAILPOINTS": "store.delete=error"})
        self.assertEqual(sw.rc, 0, sw)
        self.assertEqual(sw.err.count("injected failure"), 1, sw)
        self.assertEqual(len(sw.err.splitlines()), 1, sw)
        self.assertIn("will be retried", sw.err)

    def test_status_shows_files_and_cleanup_not_task_internals(self):
        # After normal uploads it said "tasks ... ignored 2": every confirmed upload's task.
        self.init()
        for name in ("a.txt", "b.txt"):
            self.assertEqual(self.lodge("upload", self.write(name, name)).rc, 0)
        st = self.lodge("status")
        self.assertEqual(st.rc, 0, st)
        self.assertNotIn("ignored", st.out)
        self.assertNotRegex(st.out, r"(?m)^tasks")
        self.assertIn("files             uploading 0, active 2, failed 0, deleted 0\n", st.out)
        self.assertIn("cleanup           pending 0, failed 0\n", st.out)
        v = self.lodge("-v", "status")
        self.assertRegex(v.out, r"(?m)^tasks .*ignored 2")
        self.assertIn("expired leases", v.out)
        self.assertEqual(self.lodge("status", "--json").json()["tasks"]["IGNORED"], 2)
        # A dead letter shows as a failed cleanup.
        self.sql_exec("UPDATE cleanup_task SET status = 'FAILED' WHERE record_id = 1")
        self.assertIn("cleanup           pending 0, failed 1\n", self.lodge("status").out)

    def test_one_file_is_one_file(self):
        self.init()
        up = self.lodge("upload", self.write("a.txt", "one\n"))
        self.assertEqual(up.rc, 0, up)
        self.assertRegex(up.err, r"^1 file: 1 active, ")
        rec = self.lodge("-v", "reconcile")
        self.assertIn("reconcile: 1 object, 1 record,", rec.out)
        self.lodge("upload", self.write("b.txt", "two\n"), env=PUT_AND_DELETE_FAIL)
        dry = self.lodge("sweep", "--dry-run", later="+1h")
        self.assertEqual(dry.out, "sweep: 1 task due\n", dry)
        self.assertNotRegex(up.err + dry.out + rec.out, r"\b1 (files|tasks|objects|records)\b")

    def test_a_quota_of_one_says_one_file(self):
        self.init()
        cfg = self.write("c.json", json.dumps({"policies": {"default": {"max_files": 1}}}))
        self.assertEqual(self.lodge("--config", cfg, "upload", self.write("a.txt", "a\n")).rc, 0)
        r = self.lodge("--config", cfg, "upload", self.write("b.txt", "b\n"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("QUOTA_EXCEEDED: owner ci already has 1 file, the most policy default allows", r.out)

    def test_every_subcommand_help_lists_the_global_options(self):
        for cmd in COMMANDS:
            r = self.lodge(cmd, "--help", db=False)
            self.assertEqual(r.rc, 0, (cmd, r))
            self.assertIn("Global options", r.out, cmd)
            for opt in GLOBAL_OPTIONS:
                self.assertRegex(r.out, rf"(?m)^  {re.escape(opt)}\b", (cmd, opt))
        # And they work there, after the command.
        self.assertEqual(self.lodge("init", "--db", os.path.join(self.dir, "after.db"), db=False).rc, 0)

    def test_unknown_lodge_variables_are_warned_about_once(self):
        self.init()
        r = self.lodge("status", env={"LODGE_STROE": "file:///elsewhere", "LODGE_COLOUR": "1"})
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.err.count("LODGE_STROE"), 1, r)
        self.assertIn("lodge: warning: unknown environment variable LODGE_STROE, ignored "
                      "(did you mean LODGE_STORE?)\n", r.err)
        self.assertIn("lodge: warning: unknown environment variable LODGE_COLOUR, ignored\n", r.err)
        self.assertEqual(len(r.err.splitlines()), 2, r)
        # The known ones say nothing.
        ok = self.lodge("status", env={"LODGE_JOBS": "2", "LODGE_CONFIG": "", "LODGE_FAILPOINTS": ""})
        self.assertEqual((ok.rc, ok.err), (0, ""), ok)

    def test_si_sizes_are_refused_with_what_to_write(self):
        for key, cfg in (("policies.default.max_size", {"policies": {"default": {"max_size": "1GB"}}}),
                         ("multipart_threshold", {"multipart_threshold": "64MB"}),
                         ("part_size", {"part_size": "16mb"})):
            r = self.lodge("--config", self.write("c.json", json.dumps(cfg)), "config")
            self.assertEqual(r.rc, 2, (cfg, r))
            self.assertIn(f"{key}: expected a size like 10MiB, got '", r.err)
            self.assertIn("sizes are binary: write ", r.err)
            self.assertIn("(CONFIG_INVALID)", r.err)
        r = self.lodge("--config", self.write("c.json", json.dumps(
            {"policies": {"default": {"max_size": "1GB"}}})), "config")
        self.assertIn("got '1GB': sizes are binary: write 1GiB (KiB, MiB, GiB, TiB are powers of 1024)", r.err)
        ok = self.lodge("--config", self.write("c.json", json.dumps(
            {"policies": {"default": {"max_size": "1GiB"}}, "part_size": "16MiB"})), "--json", "config")
        self.assertEqual(ok.rc, 0, ok)
        self.assertEqual(ok.json()["policies"]["default"]["max_size"], "1GiB")

    def test_media_types_must_be_type_slash_subtype(self):
        for bad in ("pdf", "application/*", "application/pdf; charset=binary", "/pdf", "application/",
                    "text/plain/x"):
            cfg = {"policies": {"docs": {"media_types": ["image/png", bad]}}}
            r = self.lodge("--config", self.write("c.json", json.dumps(cfg)), "config")
            self.assertEqual(r.rc, 2, (bad, r))
            self.assertIn(f"policies.docs.media_types[1]: expected a media type like application/pdf "
                          f"(type/subtype", r.err)
            self.assertIn(f"got '{bad}'", r.err)
        cfg = {"policies": {"docs": {"media_types": ["Application/PDF", "application/vnd.ms-excel",
                                                      "image/svg+xml"]}}}
        ok = self.lodge("--config", self.write("c.json", json.dumps(cfg)), "--json", "config")
        self.assertEqual(ok.rc, 0, ok)
        self.assertEqual(ok.json()["policies"]["docs"]["media_types"],
                         ["application/pdf", "application/vnd.ms-excel", "image/svg+xml"])


if __name__ == "__main__":
    main()
