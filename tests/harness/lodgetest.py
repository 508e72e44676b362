"""Shared helpers for lodge's integration tests: run the real binary, make temp dirs,
start a moto_server on a free loopback port, read the ledger with sqlite3."""

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

LODGE = os.environ.get("LODGE_BIN", "")
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout=20.0, what="condition"):
    """Polls predicate until true; fails the test with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _libfaketime():
    p = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.endswith("/libfaketime.so.1"):
            return line
    return ""


LIBFAKETIME = _libfaketime()


def faketime_env(later):
    """Environment that runs lodge itself (no wrapper process, so a SIGKILL is seen as
    such) with its wall clock `later` ("+90s") ahead. The monotonic clock is left real."""
    if not later:
        return {}
    assert LIBFAKETIME, "libfaketime is not installed (scripts/packages.txt lists faketime)"
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": later, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1"}


class Result:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json_lines(self):
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def json(self):
        lines = self.json_lines()
        assert len(lines) == 1, f"expected one JSON line, got {self.out!r}"
        return lines[0]

    def __repr__(self):
        return f"<rc={self.rc} out={self.out[-2000:]!r} err={self.err[-2000:]!r}>"


class LoopbackServer:
    """A server process on a free 127.0.0.1 port, in its own session, stopped by PID."""

    NAME = "server"

    def start(self, argv, env):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise AssertionError(f"{self.NAME} exited at start: " + self.log.read().decode(errors="replace"))
            return port_open(self.port)
        wait_until(up, 30, f"{self.NAME} to listen")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class Moto(LoopbackServer):
    """A moto_server on 127.0.0.1, started and stopped by PID."""

    NAME = "moto_server"

    def __init__(self, extra_env=None):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.update(extra_env or {})
        self.start(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)], env)


class S3rver(LoopbackServer):
    """s3rver 3.7.1 (a second, independent S3 implementation, from tests/node via
    scripts/node-deps) on 127.0.0.1, started and stopped by PID. What it cannot do is
    declared in LACKS, for the store contract suite."""

    NAME = "s3rver"
    SCRIPT = os.path.join(SOURCE_DIR, "tests", "node", "node_modules", "s3rver", "bin", "s3rver.js")
    LACKS = "conditional_create,versioning,version_listing,multipart_listing,multipart_abort"

    def __init__(self):
        if not os.path.exists(self.SCRIPT):
            raise AssertionError(f"{self.SCRIPT} is missing: run scripts/node-deps (scripts/test does)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="lodge-s3rver-")
        env = dict(os.environ)
        # Its listing continuation tokens use a cipher OpenSSL 3 keeps in the legacy
        # provider: without this, every truncated ListObjectsV2 answers 500.
        env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
        self.start(["node", self.SCRIPT, "-d", self.dir, "-a", "127.0.0.1", "-p", str(self.port), "--silent"], env)

    def stop(self):
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


def aws(endpoint, *args, check=True):
    """Runs the real aws CLI against endpoint; returns parsed JSON output (or None)."""
    env = dict(os.environ)
    env.update(AWS_ENV)
    env.pop("AWS_ENDPOINT_URL", None)
    p = subprocess.run(["aws", "--endpoint-url", endpoint, "--output", "json", *args],
                       capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"aws {' '.join(args)} failed: {p.stderr}")
    if p.returncode != 0:
        return None
    return json.loads(p.stdout) if p.stdout.strip() else None


class LodgeTestCase(unittest.TestCase):
    """A temp dir per test (kept when the test fails) and a way to run lodge in it."""

    moto = None  # set by subclasses that need S3 (class-wide server)

    def setUp(self):
        self.assertTrue(LODGE and os.access(LODGE, os.X_OK), "LODGE_BIN must name the built lodge binary")
        self.dir = tempfile.mkdtemp(prefix="lodge-it-")
        self.db = os.path.join(self.dir, "ledger.db")
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("LODGE_") and not k.startswith("AWS_")}
        self.env.update({"HOME": self.dir, "XDG_CONFIG_HOME": os.path.join(self.dir, ".config"),
                         "XDG_DATA_HOME": os.path.join(self.dir, ".local/share")})
        self.env.update(AWS_ENV)

    def tearDown(self):
        failed = False
        outcome = getattr(self, "_outcome", None)
        if outcome is not None:
            result = getattr(outcome, "result", None)
            errors = list(getattr(result, "errors", [])) + list(getattr(result, "failures", []))
            failed = any(t is self for t, _ in errors)
        if failed:
            sys.stderr.write(f"kept test directory: {self.dir}\n")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def spawn(self, *args, env=None, later=None):
        """Starts lodge in the background (for races and pauses); returns the Popen."""
        cmd = [LODGE, "--db", self.db] + [str(a) for a in args]
        e = dict(self.env)
        e.update(env or {})
        e.update(faketime_env(later))
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def lodge(self, *args, env=None, stdin=None, timeout=120, db=True, umask=None, later=None, cwd=None):
        """Runs lodge; `later` ("+90s") runs it under faketime, that far in the future;
        `cwd`: the directory it runs in (for paths given relative to it)."""
        cmd = [LODGE] + (["--db", self.db] if db else []) + [str(a) for a in args]
        e = dict(self.env)
        e.update(env or {})
        e.update(faketime_env(later))
        pre = (lambda: os.umask(umask)) if umask is not None else None
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, input=stdin,
                           timeout=timeout, preexec_fn=pre, cwd=cwd)
        return Result(p)

    def sql(self, query, params=()):
        con = sqlite3.connect(self.db, timeout=30)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    def sql_exec(self, statements):
        con = sqlite3.connect(self.db, timeout=30)
        try:
            con.executescript(statements)
            con.commit()
        finally:
            con.close()

    def old_ledger(self, version):
        """Makes self.db a ledger at an older schema version (1, 2 or 3), from the frozen
        samples in tests/data/ledger (version 2 is version 3 without verify_pass)."""
        sample = "schema_v1.sql" if version == 1 else "schema_v3.sql"
        with open(os.path.join(SOURCE_DIR, "tests", "data", "ledger", sample)) as f:
            script = f.read()
        con = sqlite3.connect(self.db)
        try:
            con.execute("PRAGMA journal_mode = WAL")
            con.executescript(script)
            if version == 2:
                con.execute("ALTER TABLE cleanup_task DROP COLUMN verify_pass")
            con.execute("INSERT INTO ledger_meta (key, value) VALUES ('uuid', '00000000-0000-4000-8000-000000000002'),"
                        " ('created_at', '1')")
            con.commit()
            con.execute(f"PRAGMA user_version = {int(version)}")
        finally:
            con.close()
        os.chmod(self.db, 0o600)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path


def main():
    unittest.main(verbosity=2)


class FaultProxy:
    """tests/harness/faultproxy.py between a client and `upstream_port`."""

    def __init__(self, upstream_port, workdir, tls=None):
        """tls: (cert_pem, key_pem) to serve HTTPS."""
        self.port = free_port()
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.rules = os.path.join(workdir, "proxy-rules.json")
        self.log = os.path.join(workdir, "proxy-log.jsonl")
        with open(self.rules, "w") as f:
            f.write("[]")
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(here, "faultproxy.py"), str(self.port), str(upstream_port),
             self.rules, self.log] + (list(tls) if tls else []), start_new_session=True)

        wait_until(lambda: port_open(self.port), 10, "the fault proxy to listen")

    def set_rules(self, rules):
        tmp = self.rules + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rules, f)
        os.replace(tmp, self.rules)

    def entries(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)


def s3_client(endpoint, key="testing"):
    """boto3 against endpoint; `key` is both the key id and the secret (s3rver: S3RVER)."""
    import boto3
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=key)


class S3TestCase(LodgeTestCase):
    """A moto_server per class, a fresh bucket per test, lodge pointed at it."""

    @classmethod
    def setUpClass(cls):
        cls.moto = Moto()
        cls.s3 = s3_client(cls.moto.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.moto.stop()

    def setUp(self):
        super().setUp()
        import uuid
        self.bucket = "b-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=self.bucket)
        self.prefix = "lodge"
        self.env.update({"LODGE_STORE": f"s3://{self.bucket}/{self.prefix}", "AWS_ENDPOINT_URL": self.moto.endpoint,
                         "LODGE_OWNER": "ci"})

    def objects(self, prefix=None):
        out = {}
        kw = {"Bucket": self.bucket, "Prefix": self.prefix + "/" if prefix is None else prefix}
        for page in self.s3.get_paginator("list_objects_v2").paginate(**kw):
            for o in page.get("Contents", []):
                out[o["Key"]] = o["Size"]
        return out

    def uploads_in_progress(self):
        r = self.s3.list_multipart_uploads(Bucket=self.bucket)
        return [u["Key"] for u in r.get("Uploads", [])]

    def object_bytes(self, key):
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()


def check_invariants(tc, objects, max_files=None):
    """Asserts what must hold at any quiet moment: PRAGMA integrity_check; I1 (every alive
    ACTIVE row has its object); I3 (alive rows per owner within max_files); I4 (scoped: one
    alive row per owner, prefix and digest; per owner and digest for 'owner' rows); every row has exactly one task; no object under the prefix
    without a row (I2: objects exist only for keys the ledger issued)."""
    tc.assertEqual(tc.sql("PRAGMA integrity_check"), [("ok",)])
    tc.assertEqual(tc.sql("PRAGMA foreign_key_check"), [])
    rows = tc.sql("SELECT id, owner_id, object_key, sha256, upload_status, is_deleted FROM file_upload")
    keys = {r[2] for r in rows}
    for rid, owner, key, sha, status, deleted in rows:
        if status == "ACTIVE" and not deleted:
            tc.assertIn(key, objects, f"I1: alive ACTIVE row {rid} has no object")
    for key in objects:
        tc.assertIn(key, keys, f"I2: object {key} has no row")
    if max_files is not None:
        for owner, n in tc.sql("SELECT owner_id, count(*) FROM file_upload WHERE is_deleted = 0 GROUP BY 1"):
            tc.assertLessEqual(n, max_files, f"I3: owner {owner}")
    # I4, scoped (ARCHITECTURE.md): one alive 'owner' row per (owner, digest); one alive row
    # that is not 'none' per (owner, run prefix, digest).
    dup = tc.sql("SELECT owner_id, sha256, count(*) FROM file_upload WHERE is_deleted = 0 AND dedup_scope = 'owner'"
                 " GROUP BY 1, 2 HAVING count(*) > 1")
    tc.assertEqual(dup, [], "I4 (owner scope)")
    dup = tc.sql("SELECT owner_id, run_prefix, sha256, count(*) FROM file_upload WHERE is_deleted = 0"
                 " AND dedup_scope <> 'none' GROUP BY 1, 2, 3 HAVING count(*) > 1")
    tc.assertEqual(dup, [], "I4 (per prefix)")
    orphans = tc.sql("SELECT f.id FROM file_upload f LEFT JOIN cleanup_task t ON t.record_id = f.id WHERE t.id IS NULL")
    tc.assertEqual(orphans, [], "every row has its cleanup task")


def converge(tc, later="+1h"):
    """I7: with storage reachable, after deadline + grace and one run each of repair then
    sweep, no UPLOADING row is overdue, no task is due, and reconcile finds nothing."""
    r = tc.lodge("repair", "--json", later=later)
    tc.assertEqual(r.rc, 0, r)
    s = tc.lodge("sweep", "--json", later=later)
    tc.assertEqual(s.rc, 0, s)
    st = tc.lodge("status", "--json", later=later).json()
    tc.assertEqual(st["overdue_uploading"], 0, "I7: overdue uploads remain")
    tc.assertEqual(st["tasks_due"], 0, "I7: tasks still due")
    tc.assertEqual(st["expired_leases"], 0, "I7: expired leases remain")
    rec = tc.lodge("reconcile", "--json", later=later)
    tc.assertEqual(rec.rc, 0, rec)
    tc.assertTrue(rec.json()["clean"], rec)
    return st
