"""No secret reaches any output or the ledger: a differential test over every way one reaches lodge.

Every command runs at -v, -vv and --json with each secret source: AWS keys and session tokens
(environment, the shared credentials file, credential_process, a web identity token file), an
Azure account key, SAS and connection string, a PostgreSQL URL and a libpq keyword string with a
password, an AMQP queue URL with one, and user information in an endpoint (each source of one);
against a server that answers (moto, Azurite, the harness's PostgreSQL and RabbitMQ), a port
where nothing listens, and one that answers garbage and closes; with malformed variants (a raw
'%', an unclosed '['). Every secret value holds the marker SeCrEt; the test fails on it in
stdout, stderr, any file lodge wrote (every file under the run's working directory, names
included: the status textfile, get's output, a SQLite ledger and its -wal) or a PostgreSQL
ledger's dump.

The one secret output on purpose: a presigned URL (`url`, `reserve`) made with temporary
credentials carries their session token (X-Amz-Security-Token), as the AWS CLI's does: without
it the URL does not work. Those commands' stdout may hold the session token, nothing else."""

import concurrent.futures
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import (AZURITE_ACCOUNT, AZURITE_KEY, LODGE, Moto, azurite_server, create_container,  # noqa: E402
                       free_port, is_ci_variable, main, pg_server, s3_client)
from brokers import RabbitMQ  # noqa: E402

MARK = "SeCrEt"
MODES = (("-v",), ("-vv",), ("--json",))
HELLO = b"hello"
HELLO_SHA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
RUN_TIMEOUT = 60
# Scenarios run at once, up to this many: one spends most of its time waiting on the store's
# retries against a port that refuses or answers garbage (an Azure one, 14 s), not on the CPU,
# so a family's scenarios all run together and the family takes about as long as its slowest.
PARALLEL_SCENARIOS = 16
# A base64 account key made of the marker: Azure decodes it, signs with it and is refused.
AZ_KEY = "SeCrEtAzKey1SeCrEtAzKey1"


class GarbageServer:
    """Accepts every connection on a loopback port, answers a few bytes no protocol expects,
    and closes: a server that is there but broken."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(0.5)
                try:
                    conn.recv(4096)
                except OSError:
                    pass
                conn.sendall(b"\x15\x03\x01\x00\x02garbage\r\n\r\n")
            except OSError:
                pass
            finally:
                conn.close()

    def stop(self):
        self.stopped = True
        self.sock.close()


class Scenario:
    """One way a secret reaches lodge, against one server: the environment and global options
    lodge runs with, the files of its HOME (AWS files, scripts, tokens, configuration), the
    secret strings, and what else the run must show (`check`)."""

    def __init__(self, name, secrets, env=None, args=(), home_files=None, presign_ok=(), pg_db=None,
                 init_args=(), extra_commands=(), check=None):
        self.name = name
        self.secrets = list(secrets)
        self.env = dict(env or {})
        self.args = list(args)
        self.home_files = dict(home_files or {})
        self.presign_ok = list(presign_ok)
        self.pg_db = pg_db
        self.init_args = list(init_args)
        self.extra_commands = list(extra_commands)
        self.check = check


def commands(s):
    """Every command, with arguments that reach as far as a run can: file 1 is what upload
    stored, file 2 what reserve reserved."""
    return [
        ("init", ["init"] + s.init_args),
        ("upload", ["upload", "{work}/a.txt"]),
        ("reserve", ["reserve", "r.bin", "--size", str(len(HELLO)), "--sha256", HELLO_SHA]),
        ("confirm", ["confirm", "2"]),
        ("status", ["status", "--prometheus", "{work}/lodge.prom"]),
        ("config", ["config"]),
        ("config --explain", ["config", "--explain"]),
        ("list", ["list"]),
        ("show", ["show", "1"]),
        ("get", ["get", "1", "-o", "{work}/got.txt", "--force"]),
        ("cat", ["cat", "1"]),
        ("url", ["url", "1"]),
        ("tasks", ["tasks", "--status", "all"]),
        ("retry", ["retry", "1"]),
        ("sweep", ["sweep"]),
        ("repair", ["repair"]),
        ("reconcile", ["reconcile"]),
        ("prune", ["prune", "--keep-last", "1"]),
        ("relay", ["relay"]),
        ("consume", ["consume", "--max-messages", "1", "--max-runtime", "2s"]),
        ("lifecycle", ["lifecycle"]),
        ("doctor", ["doctor"]),
        ("delete", ["delete", "1"]),
    ] + s.extra_commands


class Run:
    def __init__(self, scenario, command, mode, argv, rc, out, err, timed_out):
        self.scenario, self.command, self.mode, self.argv = scenario, command, mode, argv
        self.rc, self.out, self.err, self.timed_out = rc, out, err, timed_out

    def __repr__(self):
        return f"<{self.scenario} {self.mode} {self.command}: rc={self.rc} err={self.err[-600:]!r}>"


def base_env(home, work):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LODGE_", "AWS_", "AZURE_", "PG")) and not is_ci_variable(k)}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "XDG_DATA_HOME": os.path.join(work, "xdg-data"), "LODGE_OWNER": "ci",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "2",
                "AWS_RETRY_MODE": "standard"})
    return env


def fill(text, home, work):
    return text.replace("{home}", home).replace("{work}", work)


def run_scenario(s, root):
    """Runs every command of `s` in every mode; returns (runs, leaks, work dir, home dir)."""
    case = os.path.join(root, s.name)
    home, work = os.path.join(case, "home"), os.path.join(case, "work")
    os.makedirs(home)
    os.makedirs(work)
    with open(os.path.join(work, "a.txt"), "wb") as f:
        f.write(HELLO)
    for rel, content in s.home_files.items():
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        mode = 0o755 if rel.startswith("bin/") else 0o600
        with open(path, "w") as f:
            f.write(fill(content, home, work))
        os.chmod(path, mode)
    env = base_env(home, work)
    env.update({k: fill(v, home, work) for k, v in s.env.items()})
    args = [fill(a, home, work) for a in s.args]
    runs = []
    for mode in MODES:
        for name, argv in commands(s):
            full = [os.path.abspath(LODGE)] + args + list(mode) + [fill(a, home, work) for a in argv]
            p = subprocess.Popen(full, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
            timed_out = False
            try:
                out, err = p.communicate(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
            runs.append(Run(s.name, name, mode[0], full, p.returncode, out, err, timed_out))
    return runs, find_leaks(s, runs, work), work, home


def secret_hits(text, secrets):
    """Each secret of `secrets` in `text`, and the bare marker (a part of one)."""
    hits = [x for x in secrets if x in text]
    if not hits and MARK in text:
        hits.append(MARK)
    return hits


def context(text, secret):
    at = text.find(secret)
    return text[max(0, at - 120):at + len(secret) + 60]


def find_leaks(s, runs, work):
    leaks = []
    for r in runs:
        for channel, text in (("stdout", r.out), ("stderr", r.err)):
            allowed = s.presign_ok if channel == "stdout" and r.command in ("url", "reserve") else []
            shown = text
            for a in allowed:
                shown = shown.replace(a, "<session token>")
            for hit in secret_hits(shown, s.secrets):
                leaks.append(f"{s.name}: {r.mode} {r.command}: {channel}: ...{context(shown, hit)!r}...")
    for dirpath, dirnames, filenames in os.walk(work):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            for hit in secret_hits(os.path.relpath(path, work), s.secrets):
                leaks.append(f"{s.name}: a file lodge made is named with a secret: {path}")
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read().decode("latin-1")
            for hit in secret_hits(data, s.secrets):
                leaks.append(f"{s.name}: file {os.path.relpath(path, work)}: ...{context(data, hit)!r}...")
    if s.pg_db:
        dump = pg_dump(s.pg_db)
        for hit in secret_hits(dump, s.secrets):
            leaks.append(f"{s.name}: the PostgreSQL ledger's dump: ...{context(dump, hit)!r}...")
    return leaks


def pg_dump(db):
    pg = pg_server()
    bindir = "/usr/lib/postgresql/15/bin"
    tool = os.path.join(bindir, "pg_dump") if os.path.exists(os.path.join(bindir, "pg_dump")) else "pg_dump"
    p = subprocess.run([tool, "-h", "127.0.0.1", "-p", str(pg.port), "-U", "lodge", "-d", db],
                       capture_output=True, text=True, errors="replace")
    if p.returncode != 0:
        raise AssertionError(f"pg_dump {db}: {p.stderr}")
    return p.stdout


def first(runs, command, mode="-v"):
    return next(r for r in runs if r.command == command and r.mode == mode)


class Secrets(unittest.TestCase):
    """One test per family of secret sources; each runs its scenarios on a thread pool, all at once."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="lodge-secrets-")
        cls.refusing_port = free_port()  # nothing listens there
        cls.garbage = GarbageServer()
        # The servers start at once: each spends most of its start waiting for itself. A
        # SIGTERM or SIGHUP (CTest's timeout) still runs the atexit handlers that stop them;
        # set here, as only the main thread may set a handler.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:
                signal.signal(signum, lambda n, _f: sys.exit(128 + n))
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            starts = [pool.submit(f) for f in (Moto, azurite_server, pg_server, RabbitMQ)]
        failed = [f.exception() for f in starts if f.exception()]
        if failed:  # Azurite and PostgreSQL stop at exit; the others here
            for f, stop in zip(starts, ("stop", None, None, "stop")):
                if stop and not f.exception():
                    f.result().stop()
            cls.garbage.stop()
            raise failed[0]
        cls.moto, cls.azurite, cls.pg, cls.rabbit = (f.result() for f in starts)
        cls.s3 = s3_client(cls.moto.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.garbage.stop()
        cls.rabbit.stop()
        cls.moto.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    # --- servers, as a scenario names them ---

    def endpoints(self, reachable):
        """(label, URL) of a server that answers, a port where nothing listens, one that answers garbage."""
        return [("up", reachable), ("refusing", f"http://127.0.0.1:{self.refusing_port}"),
                ("garbage", f"http://127.0.0.1:{self.garbage.port}")]

    def bucket(self):
        b = "b-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=b)
        return b

    def container(self):
        c = "c-" + uuid.uuid4().hex[:20]
        create_container(self.azurite.endpoint, c)
        return c

    def s3_args(self):
        return ["--db", "{work}/ledger.db", "--store", f"s3://{self.bucket()}/lodge"]

    def pg_database(self):
        name = "secrets_" + uuid.uuid4().hex[:12]
        self.pg.create_database(name)
        return name

    # --- the run ---

    def run_scenarios(self, scenarios):
        started = time.monotonic()
        leaks, failures, timeouts, count = [], [], [], 0
        with concurrent.futures.ThreadPoolExecutor(PARALLEL_SCENARIOS) as pool:
            futures = {pool.submit(run_scenario, s, self.root): s for s in scenarios}
            for f in concurrent.futures.as_completed(futures):
                s = futures[f]
                runs, found, work, home = f.result()
                count += len(runs)
                leaks += found
                timeouts += [repr(r) for r in runs if r.timed_out]
                if s.check:
                    try:
                        s.check(self, runs, work)
                    except AssertionError as e:
                        failures.append(f"{s.name}: {e}")
        sys.stderr.write(f"{self.id()}: {len(scenarios)} scenarios, {count} runs in "
                         f"{time.monotonic() - started:.1f}s\n")
        # At most three lines per scenario, so that every scenario that leaks is named.
        shown, per = [], {}
        for line in leaks:
            name = line.split(":", 1)[0]
            per[name] = per.get(name, 0) + 1
            if per[name] <= 3:
                shown.append(line)
        summary = ", ".join(f"{n}: {c}" for n, c in sorted(per.items()))
        problems = shown + [f"timed out: {t}" for t in timeouts] + failures
        self.assertEqual(problems, [], f"{len(leaks)} secrets leaked ({summary}):\n" + "\n".join(problems))

    # --- AWS credentials ---

    def test_aws_credentials_in_every_source(self):
        scenarios = []
        for label, endpoint in self.endpoints(self.moto.endpoint):
            ep = {"AWS_ENDPOINT_URL": endpoint}
            works = self.works if label == "up" else None
            scenarios.append(Scenario(
                f"aws-env-{label}", ["SeCrEt-awskey-1", "SeCrEt-awstoken-1"], args=self.s3_args(),
                env=dict(ep, AWS_ACCESS_KEY_ID="AKIDENVSECRETTEST", AWS_SECRET_ACCESS_KEY="SeCrEt-awskey-1",
                         AWS_SESSION_TOKEN="SeCrEt-awstoken-1"),
                presign_ok=["SeCrEt-awstoken-1"], check=works))
            scenarios.append(Scenario(
                f"aws-credfile-{label}", ["SeCrEt-credfile-1", "SeCrEt-credfiletoken-1"], args=self.s3_args(),
                env=ep,
                home_files={".aws/credentials": "[default]\naws_access_key_id = AKIDFILE\n"
                                                "aws_secret_access_key = SeCrEt-credfile-1\n"
                                                "aws_session_token = SeCrEt-credfiletoken-1\n"},
                presign_ok=["SeCrEt-credfiletoken-1"], check=works))
            scenarios.append(Scenario(
                f"aws-process-{label}", ["SeCrEt-proc-1", "SeCrEt-proctoken-1"], args=self.s3_args(), env=ep,
                home_files={".aws/config": "[default]\ncredential_process = {home}/bin/creds --x\n",
                            "bin/creds": "#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", "
                                         "\"SecretAccessKey\": \"SeCrEt-proc-1\", "
                                         "\"SessionToken\": \"SeCrEt-proctoken-1\"}'\n"},
                presign_ok=["SeCrEt-proctoken-1"], check=works))
            scenarios.append(Scenario(
                f"aws-webidentity-{label}", ["SeCrEt-webid-1"], args=self.s3_args(),
                env=dict(ep, AWS_ROLE_ARN="arn:aws:iam::123456789012:role/ci",
                         AWS_WEB_IDENTITY_TOKEN_FILE="{home}/token.jwt"),
                home_files={"token.jwt": "eyJhbGciOiJSUzI1NiJ9.SeCrEt-webid-1.c2ln\n"}, check=works))
        # Malformed: a credentials line without '=', credential_process output that is not
        # JSON, and one that fails after printing keys.
        up = {"AWS_ENDPOINT_URL": self.moto.endpoint}
        scenarios.append(Scenario(
            "aws-credfile-malformed", ["SeCrEt-credfile-2"], args=self.s3_args(), env=up,
            home_files={".aws/credentials": "[default]\naws_access_key_id = AKIDFILE\n"
                                            "aws_secret_access_key SeCrEt-credfile-2\n"}))
        scenarios.append(Scenario(
            "aws-process-not-json", ["SeCrEt-proc-2"], args=self.s3_args(), env=up,
            home_files={".aws/config": "[default]\ncredential_process = {home}/bin/creds\n",
                        "bin/creds": "#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": \"A\", "
                                     "\"SecretAccessKey\": \"SeCrEt-proc-2%%zz['\n"}))
        scenarios.append(Scenario(
            "aws-process-fails", ["SeCrEt-proc-3"], args=self.s3_args(), env=up,
            home_files={".aws/config": "[default]\ncredential_process = {home}/bin/creds\n",
                        "bin/creds": "#!/bin/sh\necho '{\"Version\": 1, \"SecretAccessKey\": \"SeCrEt-proc-3\"}'\n"
                                     "echo 'expired' >&2\nexit 1\n"}))
        self.run_scenarios(scenarios)

    # --- Azure credentials ---

    def test_azure_key_sas_and_connection_string(self):
        scenarios = []
        sas = "sv=2021-08-06&ss=b&srt=sco&sp=rwdlac&se=2030-01-01T00:00:00Z&sig=SeCrEt-azsas-1"
        for label, endpoint in self.endpoints(self.azurite.endpoint):
            if label != "up":
                endpoint += "/" + AZURITE_ACCOUNT
            store = ["--db", "{work}/ledger.db", "--store", f"az://{self.container()}/lodge"]
            scenarios.append(Scenario(
                f"az-key-{label}", [AZ_KEY], args=store,
                env={"LODGE_ENDPOINT": endpoint, "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT,
                     "AZURE_STORAGE_KEY": AZ_KEY}))
            scenarios.append(Scenario(
                f"az-sas-{label}", ["SeCrEt-azsas-1"], args=store,
                env={"LODGE_ENDPOINT": endpoint, "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT,
                     "AZURE_STORAGE_SAS_TOKEN": sas}))
            scenarios.append(Scenario(
                f"az-connstr-{label}", [AZ_KEY], args=store,
                env={"AZURE_STORAGE_CONNECTION_STRING":
                     f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZ_KEY};"
                     f"BlobEndpoint={endpoint}"}))
        # The well-known development key, which Azurite accepts: every command does its work.
        # (Not a secret anywhere else, but the key in play here: it must not show either.)
        store = ["--db", "{work}/ledger.db", "--store", f"az://{self.container()}/lodge"]
        scenarios.append(Scenario(
            "az-key-working", [AZURITE_KEY], args=store,
            env={"LODGE_ENDPOINT": self.azurite.endpoint, "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT,
                 "AZURE_STORAGE_KEY": AZURITE_KEY}, check=self.works))
        # Malformed: a SAS with a raw '%', a connection string whose key lacks its '=', a key
        # that is not base64.
        az = {"LODGE_ENDPOINT": self.azurite.endpoint, "AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT}
        scenarios.append(Scenario(
            "az-sas-malformed", ["SeCrEt-azsas-2"], args=store,
            env=dict(az, AZURE_STORAGE_SAS_TOKEN="sv=2021-08-06&sp=r&sig=SeCrEt-azsas-2%zz[&se=x")))
        scenarios.append(Scenario(
            "az-connstr-malformed", ["SeCrEtAzKey2"], args=store,
            env={"AZURE_STORAGE_CONNECTION_STRING":
                 f"AccountName={AZURITE_ACCOUNT};AccountKeySeCrEtAzKey2;BlobEndpoint={self.azurite.endpoint}"}))
        scenarios.append(Scenario(
            "az-key-not-base64", ["SeCrEt-azkey-3"], args=store,
            env=dict(az, AZURE_STORAGE_KEY="SeCrEt-azkey-3%[")))
        self.run_scenarios(scenarios)

    # --- PostgreSQL: a URL and a keyword string with a password ---

    def test_postgres_url_and_keyword_string(self):
        scenarios = []
        file_store = ["--store", "file://{work}/store"]
        bounded = ["--ledger-timeout", "3s"]
        port = self.pg.port
        servers = [("up", port), ("refusing", self.refusing_port), ("garbage", self.garbage.port)]
        for label, p in servers:
            db = self.pg_database() if label == "up" else None
            name = db or "lodge"
            scenarios.append(Scenario(
                f"pg-url-{label}", ["SeCrEt-pgurl-1"], pg_db=db,
                args=["--db", f"postgres://lodge:SeCrEt-pgurl-1@127.0.0.1:{p}/{name}"] + bounded + file_store,
                check=self.ledger_is_shared(db)))
            db = self.pg_database() if label == "up" else None
            name = db or "lodge"
            scenarios.append(Scenario(
                f"pg-keywords-{label}", ["SeCrEt-pgkw-1"], pg_db=db,
                args=["--db", f"host=127.0.0.1 port={p} dbname={name} user=lodge password=SeCrEt-pgkw-1"] +
                bounded + file_store,
                check=self.ledger_is_shared(db)))
        # The same through LODGE_DB and the configuration's "ledger".
        db = self.pg_database()
        scenarios.append(Scenario(
            "pg-keywords-env", ["SeCrEt-pgkw-4"], pg_db=db, args=bounded + file_store,
            env={"LODGE_DB": f"host=127.0.0.1 port={port} dbname={db} user=lodge password='SeCrEt-pgkw-4'"},
            check=self.ledger_is_shared(db)))
        db = self.pg_database()
        scenarios.append(Scenario(
            "pg-url-config", ["SeCrEt-pgurl-4"], pg_db=db, args=bounded + file_store,
            env={"LODGE_CONFIG": "{home}/lodge.json"},
            home_files={"lodge.json": json.dumps({"ledger": f"postgresql://lodge:SeCrEt-pgurl-4@127.0.0.1:{port}/{db}"})},
            check=self.ledger_is_shared(db)))
        # Malformed: a raw '%' and an unclosed '[' in a URL, an unterminated quote and an
        # unknown keyword in a keyword string, a URL-looking location of no known scheme.
        for n, loc in ((2, f"postgres://lodge:SeCrEt-pgurl-2%zz@127.0.0.1:{port}/x"),
                       (3, f"postgres://lodge:SeCrEt-pgurl-3@[::1:{port}/x"),
                       (5, f"postgresql://lodge@127.0.0.1:{port}/x?password=SeCrEt-pgurl-5%&sslmode=bogus"),
                       (6, f"postgress://lodge:SeCrEt-pgurl-6@127.0.0.1:{port}/x")):
            scenarios.append(Scenario(f"pg-url-malformed-{n}", [f"SeCrEt-pgurl-{n}"],
                                      args=["--db", loc] + bounded + file_store, check=self.refused_config))
        for n, loc in ((2, f"host=127.0.0.1 port={port} password='SeCrEt-pgkw-2"),
                       (3, f"hots=127.0.0.1 port={port} password=SeCrEt-pgkw-3")):
            scenarios.append(Scenario(f"pg-keywords-malformed-{n}", [f"SeCrEt-pgkw-{n}"],
                                      args=["--db", loc] + bounded + file_store, check=self.refused_config))
        # Read by libpq, refused when it connects (LEDGER_UNAVAILABLE): still no local ledger.
        scenarios.append(Scenario(
            "pg-keywords-malformed-5", ["SeCrEt-pgkw-5"],
            args=["--db", f"host=127.0.0.1 port=x{port} password=SeCrEt-pgkw-5"] + bounded + file_store,
            check=self.ledger_is_shared(None)))
        self.run_scenarios(scenarios)

    @staticmethod
    def works(tc, runs, work):
        """Credentials the server takes: each command does its work, so every path is exercised."""
        for command in ("init", "upload", "get", "show", "reconcile"):
            r = first(runs, command)
            tc.assertEqual(r.rc, 0, r)

    @staticmethod
    def ledger_is_shared(db):
        """For a reachable server: init made the ledger in that database and nothing local."""
        def check(tc, runs, work):
            tc.assertFalse(any(f.startswith(("ledger", "host=", "postgres")) for f in os.listdir(work)),
                           os.listdir(work))
            if db is None:
                tc.assertNotEqual(first(runs, "init").rc, 0, first(runs, "init"))
                return
            tc.assertEqual(first(runs, "init").rc, 0, first(runs, "init"))
            tables = tc.pg.sql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'file_upload'",
                               db=db)
            tc.assertEqual(tables, [["1"]], "no ledger in the database")
            tc.assertEqual(first(runs, "upload").rc, 0, first(runs, "upload"))
        return check

    @staticmethod
    def refused_config(tc, runs, work):
        init = first(runs, "init")
        tc.assertEqual(init.rc, 2, init)
        tc.assertIn("(CONFIG_INVALID)", init.err)
        tc.assertEqual([f for f in os.listdir(work) if f not in ("a.txt", "store")], [], "a local ledger")

    # --- AMQP ---

    def test_amqp_url_with_a_password(self):
        scenarios = []
        q = "q" + uuid.uuid4().hex[:8]
        urls = [("up", f"amqp://lodge:SeCrEt-amqp-1@127.0.0.1:{self.rabbit.port}/?queue={q}"),
                ("refusing", f"amqp://lodge:SeCrEt-amqp-1@127.0.0.1:{self.refusing_port}/?queue={q}"),
                ("garbage", f"amqp://lodge:SeCrEt-amqp-1@127.0.0.1:{self.garbage.port}/?queue={q}"),
                ("malformed-percent", f"amqp://lodge:SeCrEt-amqp-1%zz@127.0.0.1:{self.rabbit.port}/?queue={q}"),
                ("malformed-bracket", f"amqp://lodge:SeCrEt-amqp-1@[::1:{self.rabbit.port}/?queue={q}"),
                ("malformed-slash", f"amqp://lodge:SeCrEt/amqp-1@127.0.0.1:{self.rabbit.port}/?queue={q}")]
        for label, url in urls:
            config = {"cleanup": {"via": "queue", "queue": url}, "events": {"queue": url, "types": ["file.active"]}}
            scenarios.append(Scenario(
                f"amqp-{label}", ["SeCrEt-amqp-1", "SeCrEt/amqp-1"],
                args=["--db", "{work}/ledger.db", "--store", "file://{work}/store"],
                env={"LODGE_CONFIG": "{home}/lodge.json"}, home_files={"lodge.json": json.dumps(config)},
                init_args=["--cleanup-via", "queue"],
                extra_commands=[("debug queue counts", ["debug", "queue", "counts", url])]))
        self.run_scenarios(scenarios)

    # --- user information in an endpoint, from every source of one ---

    def test_endpoint_userinfo_is_refused_from_every_source(self):
        moto = self.moto.endpoint.replace("http://", "http://user:SeCrEt-ep-{n}@")
        cases = [
            ("flag", {}, lambda n: ["--endpoint", moto.format(n=n)], {}),
            ("env-aws", {"AWS_ENDPOINT_URL": moto}, None, {}),
            ("env-aws-s3", {"AWS_ENDPOINT_URL_S3": moto}, None, {}),
            ("env-lodge", {"LODGE_ENDPOINT": moto}, None, {}),
            ("config", {"LODGE_CONFIG": "{home}/lodge.json"}, None, {"lodge.json": json.dumps({"endpoint": moto})}),
            ("profile", {}, None, {".aws/config": f"[default]\nendpoint_url = {moto}\n"}),
            ("malformed-percent", {"AWS_ENDPOINT_URL": moto.replace("@", "%zz@")}, None, {}),
            ("malformed-bracket", {"AWS_ENDPOINT_URL": f"http://user:SeCrEt-ep-{{n}}@[::1:{self.moto.port}"}, None,
             {}),
        ]
        scenarios = []
        for n, (label, env, flags, files) in enumerate(cases, 1):
            secret = f"SeCrEt-ep-{n}"
            env = {k: v.replace("{n}", str(n)) for k, v in env.items()}
            files = {k: v.replace("{n}", str(n)) for k, v in files.items()}
            scenarios.append(Scenario(f"endpoint-{label}", [secret], env=env, home_files=files,
                                      args=self.s3_args() + (flags(n) if flags else []),
                                      check=self.refused_config))
        # STS (web identity) and SQS endpoints, and an Azure endpoint.
        sts = self.moto.endpoint.replace("http://", "http://user:SeCrEt-ep-20@")
        scenarios.append(Scenario(
            "endpoint-sts", ["SeCrEt-ep-20"], args=self.s3_args(),
            env={"AWS_ENDPOINT_URL": self.moto.endpoint, "AWS_ENDPOINT_URL_STS": sts,
                 "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ci", "AWS_WEB_IDENTITY_TOKEN_FILE": "{home}/t"},
            home_files={"t": "token"}, check=self.refused_config))
        sqs = self.moto.endpoint.replace("http://", "http://user:SeCrEt-ep-21@")
        for n, queue, env in ((21, "sqs://q1", {"AWS_ENDPOINT_URL_SQS": sqs}),
                              (22, sqs.replace("SeCrEt-ep-21", "SeCrEt-ep-22").replace("http://", "sqs+http://") +
                               "/123456789012/q1", {})):
            config = {"cleanup": {"via": "queue", "queue": queue}}
            scenarios.append(Scenario(
                f"endpoint-sqs-{n}", [f"SeCrEt-ep-{n}"], args=self.s3_args(),
                env=dict(env, AWS_ENDPOINT_URL=self.moto.endpoint, LODGE_CONFIG="{home}/lodge.json",
                         AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing"),
                home_files={"lodge.json": json.dumps(config)}, init_args=["--cleanup-via", "queue"],
                extra_commands=[("debug queue counts", ["debug", "queue", "counts", queue])],
                check=self.queue_refused))
        az = self.azurite.endpoint.replace("http://", "http://user:SeCrEt-ep-23@")
        store = ["--db", "{work}/ledger.db", "--store", f"az://{self.container()}/lodge"]
        scenarios.append(Scenario(
            "endpoint-azure", ["SeCrEt-ep-23"], args=store + ["--endpoint", az],
            env={"AZURE_STORAGE_ACCOUNT": AZURITE_ACCOUNT, "AZURE_STORAGE_KEY": AZURITE_KEY},
            check=self.refused_config))
        scenarios.append(Scenario(
            "endpoint-azure-connstr", ["SeCrEt-ep-24"], args=store,
            env={"AZURE_STORAGE_CONNECTION_STRING":
                 f"AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                 f"BlobEndpoint={az.replace('SeCrEt-ep-23', 'SeCrEt-ep-24')}"},
            check=self.refused_config))
        for s in scenarios:
            s.env.setdefault("AWS_ACCESS_KEY_ID", "testing")
            s.env.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        self.run_scenarios(scenarios)

    @staticmethod
    def queue_refused(tc, runs, work):
        for command in ("init", "debug queue counts"):
            r = first(runs, command)
            tc.assertEqual(r.rc, 2, r)
            tc.assertIn("(CONFIG_INVALID)", r.err)


if __name__ == "__main__":
    main()
