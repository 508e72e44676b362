"""The binary's foundation: init, status, config, exit codes, ledger hygiene, man page."""

import gzip
import json
import os
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, SCHEMA_VERSION, LodgeTestCase, SOURCE_DIR, main, wait_until  # noqa: E402


class Foundation(LodgeTestCase):
    def test_status_json_on_a_new_ledger_is_all_zero(self):
        # No ledger yet: status says so (it used to create one and call it healthy).
        r = self.lodge("status", "--json")
        self.assertEqual(r.rc, 3, r)
        self.assertEqual(r.json()["error"]["code"], "LEDGER_NOT_FOUND")
        self.assertFalse(os.path.exists(self.db))
        self.init()
        r = self.lodge("status", "--json")
        self.assertEqual(r.rc, 0, r)
        j = r.json()
        self.assertEqual(j["files"], {"uploading": 0, "active": 0, "failed": 0, "deleted": 0, "alive": 0})
        self.assertTrue(all(v == 0 for v in j["tasks"].values()), j)
        for k in ("overdue_uploading", "expired_leases", "dead_letters", "tasks_due"):
            self.assertEqual(j[k], 0)
        self.assertIsNone(j["oldest_uploading_age_ms"])
        self.assertEqual(j["last_runs"], {"sweep": None, "repair": None, "reconcile": None, "prune": None,
                                          "relay": None, "consume": None})
        self.assertTrue(j["healthy"])
        # kill -9 cannot tell NORMAL from FULL; only the pragma can.
        self.assertEqual(
            j["backend"], {"kind": "sqlite", "path": self.db, "journal_mode": "wal", "synchronous": "FULL"}
        )
        self.assertNotIn("sqlite", j)

    def test_new_ledger_is_0600_even_under_umask_000(self):
        r = self.lodge("init", umask=0)
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(stat.S_IMODE(os.stat(self.db).st_mode), 0o600)

    def test_wal_and_shm_are_0600_while_a_lodge_holds_the_ledger_open(self):
        # SQLite removes -wal and -shm when the last connection closes: look while an
        # upload (started under umask 000) is paused after its reservation.
        gate, log = os.path.join(self.dir, "gate"), os.path.join(self.dir, "fp.log")
        self.init()
        env = dict(self.env, LODGE_OWNER="ci", LODGE_FAILPOINTS=f"upload.after_reserve=pause:{gate}",
                   LODGE_FAILPOINTS_LOG=log)
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", self.write("a.txt", "held open\n")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: os.umask(0))
        try:
            def fired():
                if not os.path.exists(log):
                    return False
                with open(log) as f:
                    return "upload.after_reserve" in f.read()
            wait_until(lambda: p.poll() is not None or fired(), what="the upload to hold the ledger open")
            self.assertIsNone(p.poll(), p.stderr.read() if p.poll() is not None else "")
            for suffix in ("", "-wal", "-shm"):
                self.assertTrue(os.path.exists(self.db + suffix), f"{self.db}{suffix} does not exist")
                self.assertEqual(stat.S_IMODE(os.stat(self.db + suffix).st_mode), 0o600, suffix)
        finally:
            open(gate, "w").close()
            out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)

    def test_init_is_idempotent_and_keeps_the_uuid(self):
        a = self.lodge("init", "--json").json()
        b = self.lodge("init", "--json").json()
        self.assertEqual(a["ledger_uuid"], b["ledger_uuid"])
        self.assertEqual(a["schema_version"], SCHEMA_VERSION)

    def test_status_check_exit_codes(self):
        self.init()
        self.assertEqual(self.lodge("status", "--check", "-q").rc, 0)
        self.sql_exec("""
          INSERT INTO file_upload (id, owner_id, original_name, object_key, media_type, sha256, size, policy,
            upload_status, is_deleted, created_at, updated_at, upload_deadline_at)
            VALUES (1, 'o', 'a', 'k', 't', printf('%064d', 1), 1, 'default', 'UPLOAD_FAILED', 1, 1, 1, 1);
          INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,
            created_at, updated_at) VALUES (1, 'DELETE_OBJECT', 'k', 'FAILED', 0, 3, 0, 0);""")
        r = self.lodge("status", "--check")
        self.assertEqual(r.rc, 1, r)
        self.assertIn("UNHEALTHY", r.out)
        self.assertIn("dead-lettered", r.out)
        self.assertIn("lodge: error: the ledger is unhealthy: 1 problem (UNHEALTHY)", r.err)
        j = self.lodge("status", "--json").json()
        self.assertEqual(j["dead_letters"], 1)
        self.assertFalse(j["healthy"])

    def test_status_prometheus_textfile(self):
        out = os.path.join(self.dir, "lodge.prom")
        self.init()
        self.assertEqual(self.lodge("status", "-q", "--prometheus", out).rc, 0)
        text = open(out).read()
        self.assertIn('lodge_files{state="ACTIVE"} 0', text)
        self.assertIn("lodge_health_ok 1", text)

    def test_status_prometheus_write_failure_is_an_io_error_naming_the_file(self):
        out = os.path.join(self.dir, "no-such-dir", "lodge.prom")
        self.init()
        r = self.lodge("status", "-q", "--prometheus", out)
        self.assertEqual(r.rc, 1, r)
        self.assertIn(f"{out}: cannot write (open): No such file or directory (IO_ERROR)", r.err)

    def test_status_table_escapes_the_ledger_path(self):
        db = os.path.join(self.dir, "evil\x1b]2;owned\x07.db")
        self.assertEqual(self.lodge("--db", db, "init", db=False).rc, 0)
        r = self.lodge("--db", db, "status", db=False)
        self.assertEqual(r.rc, 0, r)
        self.assertIn("evil", r.out)
        self.assertNotIn("\x1b", r.out)
        self.assertNotIn("\x07", r.out)

    def test_config_json_reads_back_as_the_same_config(self):
        cfg = self.write("c.json", json.dumps({
            "busy_timeout": "90s", "multipart_threshold": "10MiB", "part_size": "6MiB", "profile": "ci",
            "policies": {"default": {"max_size": "1536B", "deadline": "1500ms", "grace": "2m"},
                         "small": {"max_files": 2, "extensions": ["pdf"], "media_types": ["application/pdf"]}},
            "sweep": {"lease": "1h", "backoff_base": "30s", "backoff_max": "1d"},
            "status": {"sweep_max_age": "36h"}}))
        first = self.lodge("--config", cfg, "--json", "config")
        self.assertEqual(first.rc, 0, first)
        first = first.json()
        # What a config file cannot say: where it (and each transfer setting) came from, flag-only
        # TLS, credentials.
        settings = {k: v for k, v in first.items()
                    if k not in ("config_file", "sources", "verify_tls", "credentials")}
        again = self.lodge("--config", self.write("again.json", json.dumps(settings)), "--json", "config")
        self.assertEqual(again.rc, 0, again)
        again = again.json()
        self.assertEqual({k: v for k, v in again.items() if k not in ("config_file", "sources")},
                         {k: v for k, v in first.items() if k not in ("config_file", "sources")})
        self.assertEqual(first["sources"]["part_size"], f"file {cfg}")
        self.assertEqual(again["sources"]["part_size"], f"file {self.dir}/again.json")
        self.assertEqual((first["busy_timeout"], first["multipart_threshold"], first["part_size"]),
                         ("90s", "10MiB", "6MiB"))
        self.assertEqual(first["policies"]["default"]["max_size"], "1536B")
        self.assertEqual(first["policies"]["default"]["deadline"], "1500ms")
        self.assertEqual(first["status"]["sweep_max_age"], "36h")

    def test_usage_errors_exit_2(self):
        r = self.lodge("status", "--no-such-flag")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("USAGE", r.err)
        r = self.lodge("stauts")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("did you mean 'status'", r.err)
        r = self.lodge(db=False)
        self.assertEqual(r.rc, 2, r)
        r = self.lodge("status", env={"LODGE_FAILPOINTS": "no.such.point=crash"})
        self.assertEqual(r.rc, 2, r)
        self.assertIn("unknown failpoint", r.err)

    def test_bad_config_exits_2_naming_the_key(self):
        cfg = self.write("bad.json", '{"policies": {"resume": {"max_size": "ten"}}}')
        r = self.lodge("--config", cfg, "status")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("policies.resume.max_size: expected a size like 10MiB", r.err)
        r = self.lodge("status", env={"LODGE_CONFIG": os.path.join(self.dir, "nope.json")})
        self.assertEqual(r.rc, 2, r)

    def test_corrupt_ledger_exits_3_naming_the_file(self):
        with open(self.db, "wb") as f:
            f.write(os.urandom(8192))
        r = self.lodge("status")
        self.assertEqual(r.rc, 3, r)
        self.assertIn(self.db, r.err)
        self.assertIn("LEDGER_UNUSABLE", r.err)
        r = self.lodge("status", "--json")
        self.assertEqual(r.json()["error"]["code"], "LEDGER_UNUSABLE")

    def test_newer_ledger_exits_3(self):
        self.lodge("init")
        self.sql_exec("PRAGMA user_version = 99")
        r = self.lodge("status")
        self.assertEqual(r.rc, 3, r)
        self.assertIn("LEDGER_TOO_NEW", r.err)

    def test_locked_ledger_exits_3(self):
        # A version-1 ledger must be migrated (a write) while another process holds the lock.
        self.old_ledger(1)
        cfg = self.write("c.json", '{"busy_timeout": "200ms"}')
        import sqlite3
        con = sqlite3.connect(self.db, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        try:
            r = self.lodge("--config", cfg, "init")
        finally:
            con.execute("ROLLBACK")
            con.close()
        self.assertEqual(r.rc, 3, r)
        self.assertIn("LEDGER_LOCKED", r.err)
        r = self.lodge("--config", cfg, "init", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json()["schema_version"], SCHEMA_VERSION)

    def test_busy_timeout_sqlite_cannot_hold_is_a_config_error(self):
        # 30d does not fit SQLite's int milliseconds; it used to wrap to "never wait".
        cfg = self.write("c.json", '{"busy_timeout": "30d"}')
        r = self.lodge("--config", cfg, "init")
        self.assertEqual(r.rc, 2, r)
        self.assertIn("busy_timeout: '30d' is too long", r.err)
        self.assertIn("CONFIG_INVALID", r.err)
        self.assertFalse(os.path.exists(self.db), "nothing is created on a configuration error")

    def as_nobody(self, *args):
        """Runs lodge as uid/gid 65534: root ignores file permissions, so a test of what a
        user may not do must drop them."""
        self.assertEqual(os.getuid(), 0, "these tests run as root (CI does) to drop to nobody")
        env = dict(self.env)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            os.environ["LODGE_BIN"], *[str(a) for a in args]],
                           capture_output=True, text=True, env=env, cwd=self.dir)
        from lodgetest import Result
        return Result(p)

    def readonly_ledger(self):
        """A ledger with one file and one dead letter, in a directory nobody may only read."""
        os.chmod(self.dir, 0o755)
        ro = os.path.join(self.dir, "ro")
        os.makedirs(ro)
        db = os.path.join(ro, "ledger.db")
        self.assertEqual(self.lodge("--db", db, "init", db=False).rc, 0)
        import sqlite3
        con = sqlite3.connect(db)
        con.executescript("""
            INSERT INTO file_upload (owner_id, original_name, object_key, media_type, sha256, size, policy,
              upload_status, created_at, updated_at, upload_deadline_at)
              VALUES ('ci', 'a.txt', 'ci/k1.txt', 'text/plain', printf('%064d', 1), 3, 'default', 'ACTIVE', 1, 1, 2);
            INSERT INTO cleanup_task (record_id, task_type, object_key, status, next_retry_at, max_retries,
              created_at, updated_at, last_error) VALUES (1, 'DELETE_OBJECT', 'ci/k1.txt', 'FAILED', 0, 3, 1, 1, 'gone');
        """)
        con.commit()
        con.close()
        for suffix in ("-wal", "-shm"):
            self.assertFalse(os.path.exists(db + suffix), "closed cleanly: no -wal/-shm left")
        os.chown(ro, 65534, 65534)
        os.chown(db, 65534, 65534)
        os.chmod(db, 0o400)
        os.chmod(ro, 0o500)
        return db

    def test_read_only_ledger_status_list_and_tasks_work(self):
        db = self.readonly_ledger()
        st = self.as_nobody("--db", db, "status", "--json")
        self.assertEqual(st.rc, 0, st)
        self.assertEqual(st.json()["files"]["active"], 1)
        self.assertEqual(st.json()["dead_letters"], 1)
        ls = self.as_nobody("--db", db, "--owner", "ci", "list", "--json")
        self.assertEqual(ls.rc, 0, ls)
        self.assertEqual([f["object_key"] for f in ls.json_lines()], ["ci/k1.txt"])
        tasks = self.as_nobody("--db", db, "tasks", "--json")
        self.assertEqual(tasks.rc, 0, tasks)
        self.assertEqual([t["last_error"] for t in tasks.json_lines()], ["gone"])
        # A command that must write says why it cannot, naming the file and the OS's reason.
        up = self.as_nobody("--db", db, "--owner", "ci", "retry", "1")
        self.assertEqual(up.rc, 3, up)
        self.assertIn(db, up.err)
        self.assertIn("Permission denied", up.err)
        self.assertNotIn("unable to open database file", up.err)
        # A writable ledger in a directory it may not write: its -wal cannot be made there.
        os.chmod(db, 0o600)
        rep = self.as_nobody("--db", db, "repair")
        self.assertEqual(rep.rc, 3, rep)
        self.assertIn("cannot write in its directory", rep.err)
        self.assertIn("Permission denied", rep.err)
        self.assertNotIn("attempt to write a readonly database", rep.err)
        self.assertEqual(self.as_nobody("--db", db, "status").rc, 0)
        os.chmod(self.dir, 0o700)

    def test_read_only_open_of_an_older_ledger_says_to_run_init(self):
        os.chmod(self.dir, 0o755)
        self.old_ledger(2)
        os.chown(self.db, 65534, 65534)
        os.chmod(self.db, 0o400)
        r = self.as_nobody("--db", self.db, "status")
        self.assertEqual(r.rc, 3, r)
        self.assertIn("schema version 2", r.err)
        self.assertIn("run `lodge init`", r.err)
        os.chmod(self.db, 0o600)
        self.assertEqual(self.lodge("init", "--json").json()["schema_version"], SCHEMA_VERSION, "init migrates it")
        self.assertEqual(self.as_nobody("--db", self.db, "status", "--json").rc, 0)
        os.chmod(self.dir, 0o700)

    def test_unreadable_ledger_names_the_reason(self):
        os.chmod(self.dir, 0o755)
        self.lodge("init")
        os.chmod(self.db, 0o000)
        for cmd in (["status"], ["sweep"]):
            r = self.as_nobody("--db", self.db, *cmd)
            self.assertEqual(r.rc, 3, r)
            self.assertIn(self.db, r.err)
            self.assertIn("Permission denied", r.err, "the OS's reason, not only SQLite's 'unable to open'")
            self.assertIn("LEDGER_UNUSABLE", r.err)
        os.chmod(self.db, 0o600)
        os.chmod(self.dir, 0o700)

    def test_symlinked_ledger_is_refused(self):
        real = os.path.join(self.dir, "real.db")
        os.symlink(real, self.db)
        r = self.lodge("status")
        self.assertEqual(r.rc, 3, r)
        self.assertIn("symbolic link", r.err)
        self.assertFalse(os.path.exists(real))

    def test_config_prints_effective_configuration(self):
        cfg = self.write("c.json", '{"region": "eu-west-3", "policies": {"small": {"max_files": 2}}}')
        r = self.lodge("--config", cfg, "--json", "config", env={"AWS_REGION": "", "AWS_DEFAULT_REGION": ""})
        self.assertEqual(r.rc, 0, r)
        j = r.json()
        self.assertEqual(j["region"], "eu-west-3")
        self.assertEqual(j["policies"]["small"]["max_files"], 2)
        self.assertEqual(j["ledger"], self.db)

    def test_config_names_the_credentials_but_never_shows_the_secret(self):
        env = {"LODGE_STORE": "s3://bucket/prefix", "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID1234",
               "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/SECRET/bPxRfiCYEXAMPLEKEY", "AWS_SESSION_TOKEN": "TOKEN-SECRET"}
        r = self.lodge("--json", "config", env=env)
        self.assertEqual(r.rc, 0, r)
        creds = r.json()["credentials"]
        self.assertEqual(creds["source"], "environment")
        self.assertEqual(creds["access_key_id"], "AKIA\u20261234")
        for secret in ("SECRET", "EXAMPLEKEYID"):
            self.assertNotIn(secret, r.out + r.err)

    def test_deps_without_root_prints_the_install_line(self):
        if os.getuid() != 0:
            self.skipTest("needs root to drop to an unprivileged user")
        scripts = os.path.join(self.dir, "scripts")
        os.makedirs(scripts)
        import shutil
        shutil.copy(os.path.join(SOURCE_DIR, "scripts", "deps"), scripts)
        with open(os.path.join(scripts, "packages.txt"), "w") as f:
            f.write("# test\nbash\nlodge-no-such-package\n")
        os.chmod(self.dir, 0o755)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            os.path.join(scripts, "deps")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p)
        self.assertIn("apt-get install -y lodge-no-such-package", p.stderr)
        self.assertNotIn(" bash", p.stderr.split("missing packages:")[1].splitlines()[0])

    def test_help_and_version(self):
        r = self.lodge("--version", db=False)
        self.assertEqual(r.rc, 0)
        self.assertRegex(r.out, r"^lodge \d+\.\d+\.\d+")
        for cmd in ("init", "status", "config", "upload", "list", "delete", "sweep", "repair", "reconcile", "tasks", "retry"):
            r = self.lodge(cmd, "--help", db=False)
            self.assertEqual(r.rc, 0, r)
            self.assertIn("Usage", r.out)

    def test_man_page_renders_without_warnings(self):
        # The page as built (lodge_mangen fills the prose of man/lodge.1 from the command tree);
        # tests/integration/test_man.py checks every page.
        page = os.path.join(os.path.dirname(os.path.abspath(LODGE)), "doc", "lodge.1.gz")
        with gzip.open(page, "rt") as f:
            roff = f.read()
        p = subprocess.run(["groff", "-ww", "-z", "-man"], input=roff, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        p = subprocess.run(["man", "-l", "-P", "cat", page], capture_output=True, text=True,
                           env=dict(os.environ, MANWIDTH="80"))
        self.assertEqual(p.returncode, 0, p.stderr)
        for section in ("SYNOPSIS", "EXIT STATUS", "ENVIRONMENT", "FILES"):
            self.assertIn(section, p.stdout)

    def test_man_page_lists_every_error_code_and_command(self):
        page = open(os.path.join(SOURCE_DIR, "man", "lodge.1")).read()
        src = open(os.path.join(SOURCE_DIR, "src", "util", "error.cpp")).read()
        import re
        codes = re.findall(r'ErrcInfo\{Errc::\w+, "([A-Z_]+)"', src)
        self.assertGreater(len(codes), 20)
        for code in codes:
            self.assertIn(code, page.replace("\\_", "_"), code)
        # Each command has its page, which the built lodge(1) lists.
        with gzip.open(os.path.join(os.path.dirname(os.path.abspath(LODGE)), "doc", "lodge.1.gz"), "rt") as f:
            built = f.read().replace("\\-", "-")
        help_out = self.lodge("--help", db=False).out
        commands = re.findall(r"^  (\w+)\s{2,}", help_out.split("Subcommands:")[1], re.M)
        self.assertIn("status", commands)
        for c in commands:
            self.assertIn(f".BR lodge-{c} (1)", built, c)
            self.assertTrue(os.path.exists(os.path.join(SOURCE_DIR, "man", f"lodge-{c}.1")), c)

if __name__ == "__main__":
    main()
