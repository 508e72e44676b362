"""Shared helpers for lodge's integration tests: run the real binary, make temp dirs,
start a moto_server on a free loopback port, read the ledger (SQLite or PostgreSQL) through
a backend-neutral query layer, check the invariants through lodge itself.

The ledger backend is chosen by LODGE_TEST_LEDGER=sqlite|postgres (default sqlite). Under
postgres one throwaway PostgreSQL server (tests/harness/pgserver.py) is started per test
process, on first use, and stopped at exit by its PID; every test case gets a fresh database,
whose URL is the test's `self.db` (passed as --db / LODGE_DB exactly as a file path is).
Tests that are about SQLite itself are marked `@sqlite_only("why")` (a method or a class)
and are not collected under postgres; `main()` prints which were left out and why.

The object store of a suite written against `StoreTestCase` is chosen by LODGE_IT_STORE=s3|az
(default s3): moto_server (S3TestCase) or Azurite (AzureTestCase), one server per test class,
a fresh bucket or container per test; both classes answer the same questions (objects(),
object_bytes(), object_metadata(), put_object(), delete_object(), staged()). Rows that only
S3 can run are marked `@s3_only("why")` and are not collected under az."""

import atexit
import itertools
import json
import os
import re
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


def _schema_version():
    """The schema version this source tree's lodge writes (k_schema_version), so tests
    about migrations name the current one without a literal to bump."""
    with open(os.path.join(SOURCE_DIR, "include", "lodge", "ledger", "schema.hpp")) as f:
        m = re.search(r"k_schema_version\s*=\s*(\d+)\s*;", f.read())
    if not m:
        raise RuntimeError("k_schema_version not found in include/lodge/ledger/schema.hpp")
    return int(m.group(1))


SCHEMA_VERSION = _schema_version()


def project_version():
    """x.y.z of `project(lodge VERSION x.y.z` in this tree's CMakeLists.txt: the version a
    release is tagged with and its assets are named after."""
    with open(os.path.join(SOURCE_DIR, "CMakeLists.txt")) as f:
        m = re.search(r"^project\(lodge VERSION (\d+\.\d+\.\d+)[ )]", f.read(), re.M)
    if not m:
        raise AssertionError("CMakeLists.txt has no `project(lodge VERSION x.y.z`")
    return m.group(1)


def help_commands(text):
    """The commands a CLI11 help lists under "Subcommands:"."""
    section = text.split("Subcommands:", 1)[1] if "Subcommands:" in text else ""
    return [m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)\s", section, re.M)]


def help_options(text):
    """Every -x and --name a CLI11 help lists at the start of an option's line."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"^\s+(-[^ ]+(?:,\s*-[^ ]+)*)", line)
        if m:
            names.update(n.strip().split("=")[0] for n in m.group(1).split(","))
    return names


def release_dist(os_release="/etc/os-release"):
    """${ID}${VERSION_ID} of an os-release file (debian12, ubuntu24.04): a release asset's
    <dist>, as the release workflow names its containers; "" when the file is missing."""
    fields = {}
    try:
        with open(os_release) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                fields[k] = v.strip('"')
    except FileNotFoundError:
        return ""
    return fields.get("ID", "") + fields.get("VERSION_ID", "")

LEDGER = os.environ.get("LODGE_TEST_LEDGER", "sqlite") or "sqlite"
if LEDGER not in ("sqlite", "postgres"):
    raise SystemExit(f"LODGE_TEST_LEDGER={LEDGER!r}: must be 'sqlite' or 'postgres'")


# Every variable `lodge upload --ci-metadata` reads (GitHub Actions, GitLab CI, Buildkite,
# Jenkins): a test that wants a CI job fakes one in its own env.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "GIT_COMMIT", "GIT_BRANCH",
                "BUILD_NUMBER", "BUILD_URL")
CI_PREFIXES = ("GITHUB_", "CI_", "BUILDKITE_")


def epoch_ms(text):
    """A time of lodge's JSON output (RFC 3339 UTC with milliseconds, "2026-12-01T10:00:00.123Z")
    in ms since the epoch; None stays None."""
    if text is None:
        return None
    m = re.fullmatch(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z", text)
    assert m, f"not lodge's JSON time: {text!r}"
    import calendar
    y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
    return calendar.timegm((y, mo, d, h, mi, s)) * 1000 + ms


def is_ci_variable(name):
    return name in CI_VARIABLES or name.startswith(CI_PREFIXES)


def sqlite_only(reason):
    """Marks a test method or a whole class as about SQLite itself (the ledger file, its
    locks, its old schema samples): `reason` says why. Under LODGE_TEST_LEDGER=postgres such
    tests are not collected, and main() lists them with their reasons."""
    assert reason and isinstance(reason, str), "say why the test is SQLite only"

    def mark(obj):
        obj.lodge_sqlite_only = reason
        return obj
    return mark


def _sqlite_only_reason(test):
    return _mark(test, "lodge_sqlite_only")


def _mark(test, attr):
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return getattr(method, attr, None) or getattr(type(test), attr, None)


IT_STORE = os.environ.get("LODGE_IT_STORE", "s3") or "s3"
if IT_STORE not in ("s3", "az"):
    raise SystemExit(f"LODGE_IT_STORE={IT_STORE!r}: must be 's3' or 'az'")


def s3_only(reason):
    """Marks a test method or class of a StoreTestCase suite as needing S3 itself (bucket
    versioning, a hand-made multipart upload, moto behind the fault proxy): `reason` says why.
    Under LODGE_IT_STORE=az it is not collected; main() lists it with its reason."""
    assert reason and isinstance(reason, str), "say why the test is S3 only"

    def mark(obj):
        obj.lodge_s3_only = reason
        return obj
    return mark


def _left_out_reason(test):
    if LEDGER == "postgres" and _mark(test, "lodge_sqlite_only"):
        return "LODGE_TEST_LEDGER=postgres", _mark(test, "lodge_sqlite_only")
    if IT_STORE == "az" and _mark(test, "lodge_s3_only"):
        return "LODGE_IT_STORE=az", _mark(test, "lodge_s3_only")
    return None


# --- PostgreSQL: one server per test process, a database per test case ---

_PG = None
_PG_DB_NUMBERS = itertools.count(1)


def pg_server():
    """The test process's PostgreSQL server (started on first use, stopped at exit by PID)."""
    global _PG
    if _PG is None:
        from pgserver import PgServer
        server = PgServer()
        server.start()
        atexit.register(server.stop)
        _PG = server
        # A test process ended by SIGTERM/SIGHUP (CTest's timeout, a closed terminal) still
        # runs its atexit handlers, so the server does not outlive it.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, lambda n, _f: sys.exit(128 + n))
    return _PG


PSQL_NULL = "\x1d"        # how psql prints NULL here (no column of lodge's holds this byte)
_PSQL_MARK = "\x1dLODGE-ROWS\x1d"
_PG_INT_TYPES = {"smallint", "integer", "bigint"}


def _pg_literal(value):
    """A parameter as a PostgreSQL literal: NULL, integers bare, text quoted with '' doubled."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if "\0" in value:
            raise ValueError("a text parameter with a NUL byte: PostgreSQL text cannot hold it")
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"unsupported SQL parameter type {type(value).__name__}: {value!r}")


def bind_params(query, params):
    """`query` with each `?` outside quotes replaced by the next parameter as a literal."""
    out = []
    params = list(params)
    used = 0
    quote = None
    for ch in query:
        if quote:
            out.append(ch)
            if ch == quote:
                quote = None
        elif ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            if used >= len(params):
                raise ValueError(f"more ? than parameters in {query!r}")
            out.append(_pg_literal(params[used]))
            used += 1
        else:
            out.append(ch)
    if used != len(params):
        raise ValueError(f"{len(params)} parameters for {used} ? in {query!r}")
    return "".join(out)


def _pg_value(text, typ):
    if text == PSQL_NULL:
        return None
    if typ in _PG_INT_TYPES:
        return int(text)
    if typ == "boolean":  # SQLite answers a comparison with 0 or 1
        return 1 if text == "t" else 0
    if typ == "numeric":  # sum() of a bigint
        return int(text) if re.fullmatch(r"-?[0-9]+", text) else float(text)
    if typ in ("real", "double precision"):
        return float(text)
    return text


def psql(url, script, single_transaction=False):
    """Runs `script` with psql -X -A -t on `url`; returns its stdout (fails on any error)."""
    argv = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-F", "\x1f", "-R", "\x1e",
            "-P", "null=" + PSQL_NULL, "-d", url, "-f", "-"]
    if single_transaction:
        argv.insert(1, "-1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGCONNECT_TIMEOUT"] = "10"
    p = subprocess.run(argv, input=script, capture_output=True, text=True, env=env, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"psql on {url} failed ({p.returncode}): {p.stderr.strip()}\n--- script ---\n{script}")
    return p.stdout


def pg_query(url, query, params=()):
    """Rows of `query` (with `?` parameters) as tuples, integer columns as int, NULL as None,
    like sqlite3's fetchall()."""
    q = bind_params(query, params).strip().rstrip(";")
    out = psql(url, f"{q} \\gdesc\n\\echo {_PSQL_MARK}\n{q};\n")
    desc, sep, rows = out.partition(_PSQL_MARK + "\n")
    if not sep:
        raise AssertionError(f"unexpected psql output for {q!r}: {out!r}")
    # \gdesc: one "name<US>type" record per column (a statement with no result prints a note).
    types = [line.split("\x1f")[1] for line in desc.rstrip("\n").split("\x1e") if "\x1f" in line]
    if not rows:
        return []
    if rows.endswith("\n"):
        rows = rows[:-1]
    result = []
    for record in rows.split("\x1e"):
        fields = record.split("\x1f")
        if len(fields) != len(types):
            raise AssertionError(f"psql row {record!r} does not have the {len(types)} columns of {q!r}")
        result.append(tuple(_pg_value(f, t) for f, t in zip(fields, types)))
    return result


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

    def start(self, argv, env, timeout=30):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

        def up():
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise AssertionError(f"{self.NAME} exited at start: " + self.log.read().decode(errors="replace"))
            return port_open(self.port)
        wait_until(up, timeout, f"{self.NAME} to listen")

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
    """A moto_server on 127.0.0.1, started and stopped by PID: motos3.py, moto evaluating the
    ETag of each key of a DeleteObjects request as S3 does."""

    NAME = "moto_server"
    ARGV = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "motos3.py")]

    def __init__(self, extra_env=None):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.update(extra_env or {})
        self.start(self.ARGV + ["-H", "127.0.0.1", "-p", str(self.port)], env)


class SignatureCheckingMoto(Moto):
    """A moto_server that checks every request's SigV4 signature after its first four actions,
    which user_with_bucket spends. tests/harness/motosigned.py: moto checking the signature
    against the query string as sent (moto itself decodes it first, and refuses correctly
    signed requests with `prefix=dir/`)."""

    NAME = "moto_server (signatures checked)"
    ARGV = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "motosigned.py")]

    def __init__(self):
        super().__init__({"INITIAL_NO_AUTH_ACTION_COUNT": "4"})

    def user_with_bucket(self, bucket):
        """The four free actions: an IAM user, its access key, a policy allowing it s3:*, and
        `bucket` made with that key. Returns (key id, secret)."""
        aws(self.endpoint, "iam", "create-user", "--user-name", "lodge")
        key = aws(self.endpoint, "iam", "create-access-key", "--user-name", "lodge")["AccessKey"]
        aws(self.endpoint, "iam", "put-user-policy", "--user-name", "lodge", "--policy-name", "all",
            "--policy-document",
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}')
        key_id, secret = key["AccessKeyId"], key["SecretAccessKey"]
        aws(self.endpoint, "s3api", "create-bucket", "--bucket", bucket, key=(key_id, secret))
        return key_id, secret


class PresignCheckingMoto(Moto):
    """motosigned.py with moto's own header check off (any key goes, as with Moto) and every
    presigned (query-signed) request checked for real, as S3 checks it: the signature with the
    test key's secret, X-Amz-Expires against the current time, the headers it pins. A refused
    one is a 403 that never reaches moto; an accepted one lands in moto as an ordinary PUT."""

    NAME = "moto_server (presigned URLs checked)"
    ARGV = SignatureCheckingMoto.ARGV

    def __init__(self):
        super().__init__({"LODGE_PRESIGN_KEYS": AWS_ENV["AWS_ACCESS_KEY_ID"] + ":" + AWS_ENV["AWS_SECRET_ACCESS_KEY"]})


class S3rver(LoopbackServer):
    """s3rver 3.7.1 (a second, independent S3 implementation, from tests/node via
    scripts/node-deps) on 127.0.0.1, started and stopped by PID. What it cannot do is
    declared in LACKS, for the store contract suite."""

    NAME = "s3rver"
    SCRIPT = os.path.join(SOURCE_DIR, "tests", "node", "node_modules", "s3rver", "bin", "s3rver.js")
    LACKS = ("conditional_create,conditional_delete,versioning,version_listing,multipart_listing,multipart_abort,"
             "part_listing")

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


AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development account key (published with the emulator; not a secret).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
NODE_DIR = os.path.join(SOURCE_DIR, "tests", "node")


class Azurite(LoopbackServer):
    """Azurite 3.37.0's blob service (the Azure Blob Storage emulator, from tests/node via
    scripts/node-deps) on 127.0.0.1: in memory, silent, no telemetry, stopped by PID.
    `endpoint` is the path-style account endpoint lodge and azblob.js take:
    http://127.0.0.1:PORT/devstoreaccount1. It checks Shared Key signatures."""

    NAME = "azurite"
    SCRIPT = os.path.join(NODE_DIR, "node_modules", "azurite", "dist", "src", "blob", "main.js")

    def __init__(self):
        if not os.path.exists(self.SCRIPT):
            raise AssertionError(f"{self.SCRIPT} is missing: run scripts/node-deps (scripts/test does)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        # Its start loads a large module tree: on a busy 2-core machine that took 25 s.
        self.start(["node", self.SCRIPT, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                    "--inMemoryPersistence", "--silent", "--disableTelemetry", "--skipApiVersionCheck"],
                   dict(os.environ), timeout=120)


_AZURITE = None


def azurite_server():
    """The test process's Azurite (started on first use, stopped at exit by PID): every
    AzureTestCase class of a process shares it, each test in a container of its own."""
    global _AZURITE
    if _AZURITE is None:
        server = Azurite()
        atexit.register(server.stop)
        _AZURITE = server
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, lambda n, _f: sys.exit(128 + n))
    return _AZURITE


class AzBlobError(AssertionError):
    """A service error azblob.js reported: `status` (HTTP) and `code` (x-ms-error-code)."""

    def __init__(self, argv, error):
        super().__init__(f"azblob {' '.join(argv)}: {error}")
        self.status = error.get("status")
        self.code = error.get("code")


def azblob(endpoint, *args, check=True, raw=False, timeout=120):
    """Runs tests/node/azblob.js (the official @azure/storage-blob SDK) against `endpoint`
    with the well-known key; returns its JSON answer (`raw`: the stdout bytes). A service
    error raises AzBlobError, or is returned as {"error": {...}} when not `check`."""
    argv = [str(a) for a in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_") and not k.startswith("AZBLOB_")}
    env.update({"AZBLOB_ENDPOINT": endpoint, "AZBLOB_KEY": AZURITE_KEY})
    p = subprocess.run(["node", os.path.join(NODE_DIR, "azblob.js"), *argv], capture_output=True, env=env,
                       timeout=timeout)
    if p.returncode == 3:
        error = json.loads(p.stdout)["error"]
        if check:
            raise AzBlobError(argv, error)
        return {"error": error}
    if p.returncode != 0:
        raise AssertionError(f"azblob {' '.join(argv)} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    if raw:
        return p.stdout
    return json.loads(p.stdout) if p.stdout.strip() else None


def create_container(endpoint, name, key=AZURITE_KEY):
    """Creates container `name` at `endpoint` (Azurite's path-style account endpoint), as
    `azblob create-container` does, with one Create Container request signed with the account
    key (Shared Key) from here: a test's fresh container without starting node and loading the
    SDK. A refusal raises AzBlobError (409 ContainerAlreadyExists for a name in use)."""
    import base64
    import email.utils
    import hashlib
    import hmac
    import urllib.error
    import urllib.parse
    parts = urllib.parse.urlsplit(endpoint)
    account = parts.path.strip("/").split("/")[0]
    path = parts.path.rstrip("/") + "/" + name
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06"}
    # The string to sign: the verb, eleven empty standard headers (a zero Content-Length is
    # signed as empty), the x-ms- headers, then the resource: the account and the path (which,
    # path-style, starts with the account again) and the query.
    to_sign = ("PUT" + "\n" * 12 + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items())) +
               f"/{account}{path}\nrestype:container")
    digest = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    headers.update({"Authorization": f"SharedKey {account}:{base64.b64encode(digest).decode()}",
                    "Content-Length": "0"})
    request = urllib.request.Request(f"{parts.scheme}://{parts.netloc}{path}?restype=container", method="PUT",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            r.read()
    except urllib.error.HTTPError as e:
        raise AzBlobError(["create-container", name], {"status": e.code, "code": e.headers.get("x-ms-error-code"),
                                                       "message": e.read().decode(errors="replace")[:500]}) from None


# AWS_EC2_METADATA_DISABLED: a lodge (or aws CLI) that finds no credentials never reaches
# past loopback for the instance metadata service.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def aws(endpoint, *args, check=True, key=None):
    """Runs the real aws CLI against endpoint (with `key`, a (key id, secret) pair, instead of
    the test one); returns parsed JSON output (or None)."""
    env = dict(os.environ)
    env.update(AWS_ENV)
    if key:
        env.update({"AWS_ACCESS_KEY_ID": key[0], "AWS_SECRET_ACCESS_KEY": key[1]})
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

    def fp(self, spec):
        """The environment that arms the failpoints in spec, each firing logged to self.fplog
        (the test's fp.log unless the test names another)."""
        return {"LODGE_FAILPOINTS": spec, "LODGE_FAILPOINTS_LOG": self._fplog()}

    def fired(self):
        """The failpoints fired so far under fp(), in order."""
        if not os.path.exists(self._fplog()):
            return []
        with open(self._fplog()) as f:
            return [line.split()[1] for line in f if line.strip()]

    def _fplog(self):
        return getattr(self, "fplog", None) or os.path.join(self.dir, "fp.log")

    def setUp(self):
        self.assertTrue(LODGE and os.access(LODGE, os.X_OK), "LODGE_BIN must name the built lodge binary")
        self.dir = tempfile.mkdtemp(prefix="lodge-it-")
        self.ledger_backend = LEDGER
        self.pg_database = None
        if LEDGER == "postgres":
            # A name no other test of this process or server uses: created without a DROP
            # first, and never dropped (the server and its directory go at exit).
            self.pg_database = f"lodge_t{os.getpid()}_{next(_PG_DB_NUMBERS)}"
            pg_server().sql(f'CREATE DATABASE "{self.pg_database}"')
            self.db = pg_server().db_url(self.pg_database)
        else:
            self.db = os.path.join(self.dir, "ledger.db")
        # Nothing of the caller's lodge, AWS, Azure or libpq settings, nor the CI job the
        # suite may run in (what --ci-metadata reads), reaches the test's lodge.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("LODGE_", "AWS_", "AZURE_", "PG")) and not is_ci_variable(k)}
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
            if self.pg_database:
                sys.stderr.write(f"test database: {self.db} (until the test process ends)\n")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def postgres(self):
        return self.ledger_backend == "postgres"

    def spawn(self, *args, env=None, later=None):
        """Starts lodge in the background (for races and pauses); returns the Popen."""
        cmd = [LODGE, "--db", self.db] + [str(a) for a in args]
        e = dict(self.env)
        e.update(env or {})
        e.update(faketime_env(later))
        return subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def lodge(self, *args, env=None, stdin=None, timeout=120, db=True, umask=None, later=None, cwd=None):
        """Runs lodge (in `cwd`, when given); `later` ("+90s") runs it under faketime, that far
        in the future."""
        cmd = [LODGE] + (["--db", self.db] if db else []) + [str(a) for a in args]
        e = dict(self.env)
        e.update(env or {})
        e.update(faketime_env(later))
        pre = (lambda: os.umask(umask)) if umask is not None else None
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, input=stdin,
                           timeout=timeout, preexec_fn=pre, cwd=cwd)
        return Result(p)

    def init(self, *args, env=None):
        """`lodge init` for this test's ledger and store (only init creates a ledger, and binds
        it to the store in the environment); fails the test unless it succeeds."""
        r = self.lodge("init", *args, env=env)
        self.assertEqual(r.rc, 0, r)
        return r

    def rebind(self, env):
        """`lodge init --rebind-store` with `env` (another endpoint for the same bucket, such as a
        fault proxy in front of it): a ledger serves the one store it is bound to."""
        r = self.lodge("init", "--rebind-store", env=env)
        self.assertEqual(r.rc, 0, r)
        return r

    def sql(self, query, params=()):
        """Rows of one query on this test's ledger, on either backend: `?` placeholders, a list
        of tuples (integers as int, NULL as None). Write it in SQL both SQLite and PostgreSQL
        accept."""
        if self.postgres:
            return pg_query(self.db, query, params)
        con = sqlite3.connect(self.db, timeout=30)
        try:
            return con.execute(query, params).fetchall()
        finally:
            con.close()

    def sql_exec(self, statements):
        """Runs `statements` (no parameters) on this test's ledger in one transaction."""
        if self.postgres:
            psql(self.db, statements, single_transaction=True)
            return
        con = sqlite3.connect(self.db, timeout=30)
        try:
            con.executescript(statements)
            con.commit()
        finally:
            con.close()

    def ledger_files(self):
        """Every row of the ledger, dead ones too, read through lodge (`list --all`)."""
        r = self.lodge("--owner", "*", "list", "--json", "--all")
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()

    def ledger_tasks(self):
        """Every cleanup task of the ledger, read through lodge (`tasks --status all`)."""
        r = self.lodge("tasks", "--json", "--status", "all")
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()

    def old_ledger(self, version):
        """Makes self.db a ledger at an older schema version (1, 2 or 3), from the frozen
        samples in tests/data/ledger (version 2 is version 3 without verify_pass)."""
        assert not self.postgres, "old_ledger makes SQLite files: mark the test @sqlite_only"
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

    def through_proxy(self):
        """From here on the test's lodge reaches its store through a fault-injecting proxy
        (stopped when the test ends), the ledger rebound to the store as seen through it;
        returns the proxy."""
        proxy = FaultProxy(self.server_port, self.dir)
        self.addCleanup(proxy.stop)
        self.env.update(self.endpoint_env(proxy.endpoint))
        self.rebind({})
        return proxy

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        return path


class _Loader(unittest.TestLoader):
    """Leaves out the tests marked @sqlite_only when the ledger is PostgreSQL and those marked
    @s3_only when the store is Azurite, and says so."""

    def __init__(self):
        super().__init__()
        self.left_out = []

    def _filter(self, suite):
        if LEDGER != "postgres" and IT_STORE != "az":
            return suite
        kept = []
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                kept.append(self._filter(t))
            elif _left_out_reason(t):
                self.left_out.append((t.id(),) + _left_out_reason(t))
            else:
                kept.append(t)
        return self.suiteClass(kept)

    def loadTestsFromModule(self, module, *args, **kw):
        return self._filter(super().loadTestsFromModule(module, *args, **kw))

    def loadTestsFromNames(self, names, module=None):
        return self._filter(super().loadTestsFromNames(names, module))


class _Program(unittest.TestProgram):
    def runTests(self):
        left_out = getattr(self.testLoader, "left_out", [])
        sys.stderr.write(f"ledger backend: {LEDGER}, object store of StoreTestCase suites: {IT_STORE}\n")
        if left_out:
            sys.stderr.write(f"left out ({len(left_out)} tests):\n")
            for name, under, why in left_out:
                sys.stderr.write(f"  {name} (under {under}): {why}\n")
        super().runTests()


def main():
    _Program(module="__main__", testLoader=_Loader(), verbosity=2)


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

    store_kind = "s3"
    moto_class = Moto  # the server a suite runs against (PresignCheckingMoto, ...)

    @classmethod
    def setUpClass(cls):
        cls.moto = cls.moto_class()
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
        self.store = f"s3://{self.bucket}/{self.prefix}"
        self.env.update({"LODGE_STORE": self.store, "AWS_ENDPOINT_URL": self.moto.endpoint,
                         "LODGE_OWNER": "ci"})
        self.init()

    def objects(self, prefix=None, metadata=False):
        """Objects under the prefix: key -> size; lodge's own `.lodge/` id markers only when
        `metadata`."""
        out = {}
        kw = {"Bucket": self.bucket, "Prefix": self.prefix + "/" if prefix is None else prefix}
        for page in self.s3.get_paginator("list_objects_v2").paginate(**kw):
            for o in page.get("Contents", []):
                if metadata or not is_lodge_metadata(o["Key"]):
                    out[o["Key"]] = o["Size"]
        return out

    def uploads_in_progress(self):
        r = self.s3.list_multipart_uploads(Bucket=self.bucket)
        return [u["Key"] for u in r.get("Uploads", [])]

    def staged(self):
        """Keys with a staged upload that was never completed (S3: multipart uploads in
        progress)."""
        return sorted(self.uploads_in_progress())

    def object_bytes(self, key):
        return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def object_metadata(self, key):
        """The object's user metadata (names as the store keeps them), or None when absent."""
        try:
            return self.s3.head_object(Bucket=self.bucket, Key=key)["Metadata"]
        except self.s3.exceptions.ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey"):
                return None
            raise

    def put_object(self, key, body, metadata=None):
        """Another writer's object at `key` (unconditional, as such a writer would)."""
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, Metadata=metadata or {})

    def delete_object(self, key):
        self.s3.delete_object(Bucket=self.bucket, Key=key)

    def stamp(self, ledger, record):
        """Metadata claiming an object for `record` of ledger `ledger`: S3 keeps the hyphenated
        names lodge wrote before they became valid on every backend (still read)."""
        return {"lodge-ledger": str(ledger), "lodge-record-id": str(record)}

    def start_staged(self, key):
        """Another tool's staged upload at `key`, never completed (a multipart upload)."""
        self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)

    @property
    def server_port(self):
        """The store server's port (for a FaultProxy in front of it)."""
        return self.moto.port

    def endpoint_env(self, url):
        """The environment pointing lodge at `url` (such as a proxy) instead of the server."""
        return {"AWS_ENDPOINT_URL": url}

    def request_path(self, key):
        """The HTTP path of requests on `key` (what a FaultProxy rule matches)."""
        return f"/{self.bucket}/{key}"


class AzureTestCase(LodgeTestCase):
    """One Azurite per test process (azurite_server()), a fresh container per test, lodge pointed at it:
    `self.store` = az://CONTAINER/lodge, the well-known devstoreaccount1 account and key in
    AZURE_STORAGE_ACCOUNT / AZURE_STORAGE_KEY, the endpoint in LODGE_ENDPOINT (what
    --endpoint sets). What lodge wrote is read back through tests/node/azblob.js (the
    official SDK), the way S3TestCase reads moto through boto3."""

    store_kind = "az"

    @classmethod
    def setUpClass(cls):
        cls.azurite = azurite_server()

    def setUp(self):
        super().setUp()
        import uuid
        self.container = "c-" + uuid.uuid4().hex[:20]
        create_container(self.azurite.endpoint, self.container)
        self.prefix = "lodge"
        self.store = f"az://{self.container}/{self.prefix}"
        self.env.update({"LODGE_STORE": self.store, "LODGE_ENDPOINT": self.azurite.endpoint,
                         "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT, "AZURE_STORAGE_KEY": AZURITE_KEY,
                         "LODGE_OWNER": "ci"})
        self.init()

    def az(self, *args, **kw):
        """azblob.js against this class's Azurite (see azblob())."""
        return azblob(self.azurite.endpoint, *args, **kw)

    def listing(self, prefix=None):
        """Every committed blob under the prefix with its size, etag, metadata and tags."""
        return self.az("list", self.container, "--prefix", self.prefix + "/" if prefix is None else prefix)

    def objects(self, prefix=None, metadata=False):
        """Committed blobs under the prefix: name -> size; lodge's own `.lodge/` id markers
        only when `metadata` (as S3TestCase.objects)."""
        return {b["name"]: b["size"] for b in self.listing(prefix)
                if metadata or not is_lodge_metadata(b["name"])}

    def uncommitted(self, prefix=None):
        """Blobs under the prefix that carry uncommitted blocks (staged by Put Block and never
        committed): [{name, committed, uncommitted_blocks}], `committed` False for a name
        that exists only as uncommitted blocks (invisible to a normal listing)."""
        return self.az("list", self.container, "--uncommitted",
                       "--prefix", self.prefix + "/" if prefix is None else prefix)

    def staged(self):
        """Keys with a staged upload that was never completed (Azure: blobs with uncommitted
        blocks)."""
        return sorted(b["name"] for b in self.uncommitted(prefix=""))

    def uploads_in_progress(self):
        return self.staged()

    def object_bytes(self, key):
        return self.az("get", self.container, key, raw=True)

    def head(self, key):
        """Properties, metadata and tags of a blob (azblob head), or None when absent."""
        r = self.az("head", self.container, key, check=False)
        if "error" in r:
            if r["error"]["status"] == 404:
                return None
            raise AzBlobError(["head", key], r["error"])
        return r

    def object_metadata(self, key):
        h = self.head(key)
        return None if h is None else h["metadata"]

    def object_tags(self, key):
        h = self.head(key)
        return None if h is None else h["tags"]

    def put_object(self, key, body, metadata=None, tags=None):
        """Another writer's blob at `key` (unconditional, as such a writer would)."""
        path = os.path.join(self.dir, "azblob-body")
        with open(path, "wb") as f:
            f.write(body if isinstance(body, bytes) else body.encode())
        args = ["put", self.container, key, path]
        for k, v in (metadata or {}).items():
            args += ["--meta", f"{k}={v}"]
        for k, v in (tags or {}).items():
            args += ["--tag", f"{k}={v}"]
        return self.az(*args)

    def delete_object(self, key):
        r = self.az("delete", self.container, key, check=False)
        if "error" in r and r["error"]["status"] != 404:
            raise AzBlobError(["delete", key], r["error"])

    def stamp(self, ledger, record):
        """Metadata claiming a blob for `record` of ledger `ledger` (Azure metadata names are
        identifiers: no hyphens)."""
        return {"lodgeledger": str(ledger), "lodgerecord": str(record)}

    def start_staged(self, key):
        """Another tool's staged upload at `key`, never committed (blocks staged by Put Block)."""
        self.az("stage-blocks", self.container, key, "--count", 2, "--size", 1024, "--id-prefix", "other")

    @property
    def server_port(self):
        return self.azurite.port

    def endpoint_env(self, url):
        return {"LODGE_ENDPOINT": f"{url}/{AZURITE_ACCOUNT}"}

    def request_path(self, key):
        return f"/{AZURITE_ACCOUNT}/{self.container}/{key}"


def store_test_case():
    """The test case class LODGE_IT_STORE names: S3TestCase (s3, the default) or
    AzureTestCase (az)."""
    return AzureTestCase if IT_STORE == "az" else S3TestCase


StoreTestCase = store_test_case()


def is_lodge_metadata(key):
    """lodge's own objects in a store: the id markers under `<root>/.lodge/`."""
    return key.startswith(".lodge/") or "/.lodge/" in key


def check_invariants(tc, objects=None, max_files=None):
    """Asserts what must hold at any quiet moment, reading the ledger through lodge itself
    (`list --all --owner '*'`, `tasks --status all`), so the same check runs on every
    backend: I1 (every alive ACTIVE row has its object); I2 (no object under the prefix
    without a row: objects exist only for keys the ledger issued); I3 (alive rows per owner
    within max_files); I4 (scoped: one alive 'owner' row per owner and digest, one alive
    row that is not 'none' per owner, prefix and digest, among rows that wrote their own
    object; a row sharing another's object names it, its key and its digest); every row has exactly one cleanup
    task and every task belongs to an existing row. On SQLite also PRAGMA integrity_check
    and foreign_key_check. `objects` (key -> size) defaults to the test's `objects()`, on
    either kind of store."""
    if objects is None:
        objects = tc.objects()
    if not tc.postgres:
        tc.assertEqual(tc.sql("PRAGMA integrity_check"), [("ok",)])
        tc.assertEqual(tc.sql("PRAGMA foreign_key_check"), [])
    rows = tc.ledger_files()
    tasks = tc.ledger_tasks()
    by_id = {r["id"]: r for r in rows}
    tc.assertEqual(len(by_id), len(rows), "row ids are unique")
    # A row that shares another row's object (de-duplication at another path) reads as that
    # object's key; every other row has a key of its own, never reused.
    own = [r for r in rows if r.get("shares") is None]
    keys = {r["object_key"] for r in own}
    tc.assertEqual(len(keys), len(own), "one object key per row that wrote one, never reused")
    for r in rows:
        if r.get("shares") is not None:
            holder = by_id.get(r["shares"])
            tc.assertIsNotNone(holder, f"row {r['id']} shares the object of a row that does not exist")
            tc.assertIsNone(holder.get("shares"), f"row {r['id']} shares a sharing row")
            tc.assertEqual(r["object_key"], holder["object_key"], f"row {r['id']}: the shared object's key")
            tc.assertEqual(r["sha256"], holder["sha256"], f"row {r['id']}: the shared object's digest")
    alive = [r for r in rows if not r["deleted"]]
    for r in rows:
        if r["upload_status"] == "ACTIVE" and not r["deleted"]:
            tc.assertIn(r["object_key"], objects, f"I1: alive ACTIVE row {r['id']} has no object")
        if r["upload_status"] == "UPLOAD_FAILED":
            tc.assertTrue(r["deleted"], f"row {r['id']}: UPLOAD_FAILED is always deleted")
    for key in objects:
        if not is_lodge_metadata(key):
            tc.assertIn(key, keys, f"I2: object {key} has no row")
    if max_files is not None:
        per_owner = {}
        for r in alive:
            per_owner[r["owner"]] = per_owner.get(r["owner"], 0) + 1
        for owner, n in per_owner.items():
            tc.assertLessEqual(n, max_files, f"I3: owner {owner} has {n} alive rows")
    # I4, scoped (ARCHITECTURE.md): one alive 'owner' row per (owner, digest); one alive row
    # that is not 'none' per (owner, run prefix, digest).
    seen_owner, seen_prefix = {}, {}
    for r in alive:
        if r.get("shares") is not None:
            continue  # it stores nothing: the row it shares holds the content
        if r["dedup"] == "owner":
            k = (r["owner"], r["sha256"])
            tc.assertNotIn(k, seen_owner, f"I4 (owner scope): rows {seen_owner.get(k)} and {r['id']}")
            seen_owner[k] = r["id"]
        if r["dedup"] != "none":
            k = (r["owner"], r["prefix"], r["sha256"])
            tc.assertNotIn(k, seen_prefix, f"I4 (per prefix): rows {seen_prefix.get(k)} and {r['id']}")
            seen_prefix[k] = r["id"]
    tasks_of = {}
    for t in tasks:
        tc.assertIn(t["record_id"], by_id, f"task {t['id']} belongs to no row")
        tasks_of.setdefault(t["record_id"], []).append(t["id"])
        tc.assertEqual(t["object_key"], by_id[t["record_id"]]["object_key"], f"task {t['id']}: its row's key")
    for rid in by_id:
        tc.assertEqual(len(tasks_of.get(rid, [])), 1, f"row {rid} has exactly one cleanup task")


def converge(tc, later="+1h", wait="1s"):
    """I7: with storage reachable, after deadline + grace and one run each of repair then
    sweep (on a ledger whose cleanup runs through a queue: repair, relay, consume, sweep), no
    UPLOADING row is overdue, no task is due, and reconcile finds nothing. `wait`: consume's
    --wait (its closing empty receive waits that long; "0s" on moto's SQS, which answers at
    once with every visible message)."""
    r = tc.lodge("repair", "--json", later=later)
    tc.assertEqual(r.rc, 0, r)
    if tc.lodge("status", "--json", later=later).json()["outbox"]["cleanup_via"] == "queue":
        # Cleanup through a queue: the relay publishes the due deletes, a consumer runs them;
        # sweep keeps the verify passes.
        for args in (["relay", "--json"], ["consume", "--json", "--wait", wait]):
            q = tc.lodge(*args, later=later)
            tc.assertEqual(q.rc, 0, q)
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
