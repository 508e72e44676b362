"""Every recipe of the documentation runs: the shell blocks of README.md, CONTRIBUTING.md and
docs/*.md (tests/harness/recipes.py finds them and reads their markers).

- Markers. A shell block (```sh, ```bash, ```shell, ```console) is marked `test`,
  `test fresh` or `no-test: REASON`; one without a marker, or a `no-test` without a reason,
  fails Markers.test_every_shell_block_is_marked, named by file and line.
- One terminal per file. The `test` blocks of a file run in their order in one session, as a
  reader working through the page in one terminal would: a temporary directory, HOME in it,
  and the working directory and exported variables a block leaves are the next block's (a
  guide inits in one block and uploads in the next). A `test fresh` block starts a new
  session (a story of its own: another host, another environment), which the blocks after it
  continue. Each block runs by itself as `bash -euo pipefail`, stdin from /dev/null. A
  transcript block (commands after a `$ ` prompt, each followed by what it printed) runs its
  commands, and each line it shows as printed must be printed, in order (`…` or `...` elide
  what a run cannot reproduce: times, sizes, ids). A block that exits non-zero or prints
  otherwise fails its file's test naming the file, the block's line, the script as run and
  its output; the file's later blocks are not run (they build on it).
- The servers, on loopback. One moto_server for the class (S3, STS, SQS), reset as each
  session starts; every bucket an s3:// URL of the file's `test` blocks names is made in it,
  empty (moto takes any name: a reader's bucket stays as written). A file whose blocks name a
  postgres:// URL gets the test process's PostgreSQL server, each database such a URL names
  made afresh; a RabbitMQ (tests/harness/brokers.py) is started for the class when a hook
  asks for one. file:// stores need nothing.
- The environment (environment(), AWS_FILES): nothing of the caller's LODGE_*, AWS_*,
  AZURE_*, PG*, XDG_* or CI variables; `lodge` is LODGE_BIN (its directory first on PATH);
  the aws CLI, jq and curl as installed. A reader's AWS setup is in the session's
  ~/.aws/config and ~/.aws/credentials: the default profile's endpoint is moto, its key the
  test's, its region us-east-1, so a block that exports AWS_* or names a profile is taken at
  its word (and SQS, which lodge finds only by environment, is AWS_ENDPOINT_URL_SQS).
- Placeholders: SUBSTITUTIONS (what a reader replaces: a host, a directory of their machine)
  and VARIABLES (what a reader's CI sets). The inputs a recipe presumes (dist/, build/, out/,
  a tarball, a disk image...) are WORKSPACE, made where each session starts. What one file
  presumes beyond that (a configured store, builds already stored, the profiles the page
  shows in ```ini blocks) is its SETUP; what one block presumes from the prose or a non-shell
  block before it is BEFORE, and what it promises beyond exit 0, AFTER.
- LODGE_RECIPES_DOCS=DIR reads the documentation from a copy (to see an edited page fail
  without touching the tree); LODGE_RECIPES_VERBOSE=1 prints every block's script and output.
"""

import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, SOURCE_DIR, Moto, is_ci_variable, main, pg_server, s3_client  # noqa: E402
from recipes import (Session, Substitution, blocks, commands, marker_problems, shown_output,  # noqa: E402
                     unmatched_output)


# The tree whose documentation is read: the source tree, or LODGE_RECIPES_DOCS (a copy, to try
# an edited page without touching the tree).
DOCS_ROOT = os.environ.get("LODGE_RECIPES_DOCS") or SOURCE_DIR
# LODGE_RECIPES_VERBOSE=1: every block's script and output on stderr, passed or not.
VERBOSE = os.environ.get("LODGE_RECIPES_VERBOSE") == "1"


def doc_files():
    """The documentation whose shell blocks are recipes, relative to DOCS_ROOT."""
    names = [n for n in ("README.md", "CONTRIBUTING.md") if os.path.exists(os.path.join(DOCS_ROOT, n))]
    docs = os.path.join(DOCS_ROOT, "docs")
    if os.path.isdir(docs):
        names += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    return names


def doc_blocks(name):
    return blocks(os.path.join(DOCS_ROOT, name), name)


# --- placeholders: the documentation's value -> the suite's --------------------------------

SUBSTITUTIONS = [
    Substitution(r"(?<=@)db\.internal(?=[/:])", "127.0.0.1:{pg_port}",
                 "the PostgreSQL server's host in a postgres:// URL: the test's server"),
    Substitution(r"amqp://lodge@mq\.internal:5672/", "amqp://lodge:{amqp_password}@127.0.0.1:{amqp_port}/",
                 "a RabbitMQ broker (its user's password kept out of the URL a reader shows): the test's"),
    Substitution(r"https://s3\.[a-z0-9-]+\.amazonaws\.com\b", "{moto}", "AWS's S3 endpoint: the test's moto"),
    Substitution(r"http://127\.0\.0\.1:9000\b", "{moto}",
                 "a local S3 server's endpoint (MinIO's port): the test's moto"),
    Substitution(r"(?:(?<=file://)|(?<![\w./~-]))/(tmp|var/lib/lodge|var/run/secrets|srv|restore)(?=[/\s\"']|$)",
                 "{root}/\\1",
                 "directories of a reader's host (shared, or only root's): the session's own, under its directory"),
]

# What a reader's CI job sets, and a block uses as $NAME.
VARIABLES = {"CI_BUILD": "42", "BUILD_ID": "42", "OLD_BUILD": "41", "CI_PIPELINE_ID": "42",
             "CI_RUN_ID": "42", "REQUEST_ID": "req-7f3a"}


def _tar_gz(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _bytes(n, seed):
    """n bytes that depend on `seed` and never repeat (a SHA-256 chain)."""
    out = bytearray()
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}/{i}".encode()).digest()
        i += 1
    return bytes(out[:n])


def _sparse(path, size):
    """A large file that costs no disk: 1 MiB of data, then a hole up to `size`."""
    with open(path, "wb") as f:
        f.write(_bytes(1024 * 1024, path))
        f.truncate(size)


# The inputs a recipe presumes, made as each session starts: path (in its starting directory; a
# leading / is the session's directory) -> bytes, or a function that makes the file.
WORKSPACE = {
    "dist/app-1.0.tar.gz": _tar_gz({"app/bin/app": b"#!/bin/sh\necho app\n", "app/README": b"app 1.0\n"}),
    "dist/app-1.0.sha256": b"0000  app-1.0.tar.gz\n",
    "dist/notes.txt": b"release notes\n",
    "build/artifacts/lib/libapp.so": _bytes(3000, "libapp"),
    "build/artifacts/bin/app": b"#!/bin/sh\necho app\n",
    "build/main.o": b"object\n",
    "build/.git/HEAD": b"ref: refs/heads/main\n",
    "build/node_modules/left-pad/index.js": b"module.exports = 1\n",
    "build/cache/.nobackup": b"",
    "build/cache/blob": b"cached\n",
    "out/bundle.tar.gz": _tar_gz({"build/app": b"app\n"}),
    "out/lib/libapp.so": _bytes(2000, "outlib"),
    "out/report.txt": b"tests: 12 passed\n",
    "site/index.html": b"<h1>home</h1>\n",
    "site/about.html": b"<h1>about</h1>\n",
    "cv.pdf": b"%PDF-1.4\n% a CV\n",
    "build.tar.gz": _tar_gz({"build/app": b"app\n", "build/lib.so": b"lib\n"}),
    "app.tar.gz": _tar_gz({"app": b"app\n"}),
    "disk.img": lambda path: _sparse(path, 70 * 1024 * 1024),  # two parts of 64 MiB
    "big.iso": _bytes(2 * 1024 * 1024, "iso"),
    # What SUBSTITUTIONS moved into the session's directory.
    "/tmp/.keep": b"",
    "/srv/projects/alpha/docs/plan.txt": b"the plan\n",
    "/srv/projects/alpha/src/main.c": b"int main(void) { return 0; }\n",
    "/srv/projects/beta/notes.md": b"# beta\n",
    "/var/run/secrets/token": b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJjaSJ9.",
}

# A reader's AWS setup: a default profile whose endpoint is the test's moto (what a profile with
# `endpoint_url` does for MinIO), its key, us-east-1. A block that sets AWS_* itself, or names
# another profile, is taken at its word. ({...} are the session's values.)
AWS_FILES = {
    "/home/.aws/config": "[default]\nregion = us-east-1\nendpoint_url = {moto}\n",
    "/home/.aws/credentials": "[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n",
}

def doc_block(name, lang, containing):
    """The text of the one ```LANG block of doc `name` that contains `containing`."""
    found = [b.text for b in doc_blocks(name) if b.lang == lang and containing in b.text]
    assert len(found) == 1, f"{name}: {len(found)} ```{lang} blocks contain {containing!r}"
    return found[0]


def policies_of_the_configuration_example(test, session):
    """The policies of docs/configuration.md's example (`--policy resume`, `--policy ci`), in
    the session's ~/.config/lodge/config.json."""
    example = json.loads(doc_block("docs/configuration.md", "json", '"policies"'))
    path = os.path.join(session.home, ".config", "lodge", "config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"policies": example["policies"]}, f)


def builds_stored_by_ci_jobs(test, session):
    """What docs/ci.md's recipes presume: the environment of its GitLab example (LODGE_STORE,
    LODGE_OWNER=ci), a ledger, and two builds of main stored by GitLab jobs with
    --ci-metadata (commits 1c0ffee and 3f2a9c1, the later one tagged release=yes)."""
    test.s3.create_bucket(Bucket="acme-artifacts")
    session.env.update({"LODGE_STORE": "s3://acme-artifacts/lodge", "LODGE_OWNER": "ci"})
    job = "GITLAB_CI=true CI_COMMIT_REF_NAME=main CI_PROJECT_PATH=acme/app"
    setup_script(session, f"""lodge init
        {job} CI_COMMIT_SHA=1c0ffee0a1b2c3d4e5f60718293a4b5c6d7e8f90 CI_PIPELINE_ID=41 \
            lodge upload --ci-metadata --prefix builds/main/41 dist/
        echo 'rebuilt' >> dist/notes.txt
        {job} CI_COMMIT_SHA=3f2a9c1d2e3f405162738495a6b7c8d9e0f1a2b3 CI_PIPELINE_ID=42 \
            lodge upload --ci-metadata --tag release=yes --prefix builds/main/42 dist/ app.tar.gz""")


def setup_script(session, script):
    """Runs a SETUP step in the session; fails with its output when it fails."""
    rc, out = session.run(re.sub(r"\n\s+", "\n", script))
    assert rc == 0, f"SETUP failed (exit {rc}):\n{script}\n--- output ---\n{out}"


def a_host_running_lodge(test, session):
    """What docs/operations.md presumes: a host where lodge runs, as its cron lines set it up
    (XDG_DATA_HOME=/var/lib: the ledger /var/lib/lodge/ledger.db) with the store of its
    examples, s3://acme-archive/lodge, in LODGE_STORE, its ledger made by `lodge init`."""
    test.s3.create_bucket(Bucket="acme-archive")
    session.env.update({"XDG_DATA_HOME": os.path.join(session.root, "var", "lib"),
                        "LODGE_STORE": "s3://acme-archive/lodge"})
    setup_script(session, "lodge init")


def aws_files_of(session, text, extra=None):
    """Appends the parts of an ```ini block to the session's AWS files, each part under the
    `# ~/.aws/config` or `# ~/.aws/credentials` line naming its file; `extra` (file name ->
    lines) is added after a part of that file (what a reader's own profile has beyond what
    the page shows)."""
    part = None
    parts = {}
    for line in text.split("\n"):
        m = re.fullmatch(r"# ~/\.aws/(config|credentials)", line.strip())
        if m:
            part = m.group(1)
            parts.setdefault(part, [])
        elif part:
            parts[part].append(line)
    assert parts, f"no `# ~/.aws/...` line in {text!r}"
    for part in ("config", "credentials"):
        lines = [session.substitute(line, SUBSTITUTIONS) for line in parts.get(part, [])]
        with open(os.path.join(session.home, ".aws", part), "a") as f:
            f.write("".join("\n" + line for line in lines + (extra or {}).get(part, [])) + "\n")


def a_reader_with_profiles(test, session):
    """What docs/stores.md presumes: a reader's store and owner configured (LODGE_STORE
    s3://artifacts/lodge, LODGE_OWNER ci) and its ledger made, and the profiles the page shows
    (`minio`, and `ci`, which a reader has with an endpoint and keys: the test's moto and key)
    in the AWS files."""
    test.s3.create_bucket(Bucket="artifacts")
    session.env.update({"LODGE_STORE": "s3://artifacts/lodge", "LODGE_OWNER": "ci"})
    aws_files_of(session, doc_block("docs/stores.md", "ini", "[profile minio]"))
    aws_files_of(session, doc_block("docs/stores.md", "ini", "[profile ci]"),
                 {"config": [f"endpoint_url = {test.moto.endpoint}"],
                  "credentials": ["[ci]", "aws_access_key_id = testing", "aws_secret_access_key = testing"]})
    setup_script(session, "lodge init")


def web_identity_used(test, session, out):
    """The web identity recipe signed with the role's keys from STS, as its comment says."""
    test.assertRegex(out, r"(?m)^used\s+web identity", out)


def queue_configuration(test, session):
    """docs/many-hosts.md's configuration of the queues (cleanup through SQS, events through
    RabbitMQ, as its ```json block shows them), in ~/.config/lodge/config.json before
    `lodge init --cleanup-via queue`; the broker's vhost `ci` made."""
    mq = test.rabbitmq()
    mq.ctl("add_vhost", "ci")
    mq.ctl("set_permissions", "-p", "ci", "lodge", ".*", ".*", ".*")
    session.values.update({"amqp_port": str(mq.port), "amqp_password": mq.password})
    config = session.substitute(doc_block("docs/many-hosts.md", "json", '"cleanup"'), SUBSTITUTIONS)
    path = os.path.join(session.home, ".config", "lodge", "config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(config)


# What one file presumes beyond WORKSPACE: file -> function(test, session) run as each of its
# sessions starts.
SETUP = {
    "docs/archiving.md": policies_of_the_configuration_example,
    "docs/ci.md": builds_stored_by_ci_jobs,
    "docs/operations.md": a_host_running_lodge,
    "docs/stores.md": a_reader_with_profiles,
}

def queues_made(test, session, out):
    """`lodge init --cleanup-via queue` made what the block says: NAME and NAME-dlq on SQS, and
    the events queue on RabbitMQ."""
    import boto3
    sqs = boto3.client("sqs", endpoint_url=test.moto.endpoint, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    names = sorted(u.rsplit("/", 1)[1] for u in sqs.list_queues().get("QueueUrls", []))
    test.assertEqual(names, ["lodge-cleanup", "lodge-cleanup-dlq"], out)
    queues = test.rabbitmq().ctl("list_queues", "-p", "ci", "name").stdout.split()
    test.assertIn("lodge-events", queues, out)


# What one block presumes beyond its file's blocks before it, as a reader has it from the prose or
# a non-shell block: (file, text of the block) -> function(test, session) run before it.
BEFORE = {
    ("docs/many-hosts.md", "lodge init --cleanup-via queue"): queue_configuration,
}

# What a block's run must have done beyond exiting 0, where its comments promise more than its
# output shows: (file, text of the block) -> function(test, session, output).
AFTER = {
    ("docs/many-hosts.md", "lodge init --cleanup-via queue"): queues_made,
    ("docs/stores.md", "AWS_WEB_IDENTITY_TOKEN_FILE"): web_identity_used,
}


def environment(moto):
    """The environment a session starts with: the AWS settings are in AWS_FILES; SQS, which
    lodge finds only by AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL, at moto; no instance
    metadata (beyond loopback)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LODGE_", "AWS_", "AZURE_", "PG", "XDG_")) and not is_ci_variable(k)}
    env.update({"AWS_ENDPOINT_URL_SQS": moto.endpoint, "AWS_EC2_METADATA_DISABLED": "true"})
    env["PATH"] = os.path.dirname(os.path.abspath(LODGE)) + os.pathsep + env.get("PATH", "")
    env.update(VARIABLES)
    return env


class Markers(unittest.TestCase):
    """Every shell block of the documentation says whether the suite runs it."""

    def test_every_shell_block_is_marked(self):
        problems = []
        for name in doc_files():
            problems += marker_problems(doc_blocks(name))
        if problems:
            self.fail(f"{len(problems)} shell blocks without a valid marker:\n" + "\n".join(problems))

    def test_blocks_markers_and_transcripts_as_read(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.md")
            with open(path, "w") as f:
                f.write("# x\n\n```sh test\nlodge init\n```\n\n"
                        "1. a step\n\n   ```bash no-test: needs a real bucket\n   lodge status\n   ```\n\n"
                        "````console\n```sh\n````\n\n"
                        "```sh no-test:\nx\n```\n\n```yaml\na: 1\n```\n\n```sh\ny\n```\n\n```shell no-test\nz\n```\n")
            found = blocks(path, "x.md")
        self.assertEqual([(b.line, b.lang, b.marker, b.text) for b in found],
                         [(3, "sh", "test", "lodge init"), (9, "bash", "no-test: needs a real bucket", "lodge status"),
                          (13, "console", "", "```sh"), (17, "sh", "no-test:", "x"), (21, "yaml", "", "a: 1"),
                          (25, "sh", "", "y"), (29, "shell", "no-test", "z")])
        self.assertEqual([b.runnable for b in found], [True, False, False, False, False, False, False])
        self.assertEqual(found[1].reason, "needs a real bucket")
        problems = marker_problems(found)
        self.assertEqual([p.split(":")[1] for p in problems], ["13", "17", "25", "29"], problems)
        self.assertIn("gives no reason", problems[1])
        self.assertIn("gives no reason", problems[3])
        self.assertEqual(commands("$ lodge a \\\n    --b\nprinted\n$ lodge c\nmore"), "lodge a \\\n    --b\nlodge c\n")
        self.assertEqual(commands("lodge a\nlodge b"), "lodge a\nlodge b")
        self.assertEqual(shown_output("$ lodge a \\\n    --b\nprinted\n$ lodge c\nmore"), ["printed", "more"])
        self.assertEqual(shown_output("lodge a"), [])
        out = 'ledger /x.db ready (schema 11, uuid 1-2), bound\n{"a":1,"b":{"c":2},"d":true}\n'
        shown = ["ledger /x.db ready (schema …, uuid …), bound", '{"a":1,...,"d":true}']
        self.assertEqual(unmatched_output(shown, out), [])
        self.assertEqual(unmatched_output(['{"b":...}', "ledger /y.db …"], out), ['{"b":...}', "ledger /y.db …"])

    def test_every_placeholder_and_hook_is_used(self):
        """The tables stay small and true: each substitution replaces something in a `test` block
        (or in what a hook writes), each SETUP names a file with `test` blocks, each BEFORE and
        AFTER entry one block."""
        runnable = {name: [b for b in doc_blocks(name) if b.runnable] for name in doc_files()}
        text = "\n".join(b.text for blocks_ in runnable.values() for b in blocks_)
        text += "\n" + doc_block("docs/many-hosts.md", "json", '"cleanup"')
        text += "\n" + doc_block("docs/stores.md", "ini", "[profile minio]")
        for sub in SUBSTITUTIONS:
            self.assertRegex(text, sub.pattern, f"no block has the placeholder of: {sub.why}")
        for name in SETUP:
            self.assertTrue(runnable.get(name), f"SETUP names {name}, which has no `test` block")
        for (name, key) in list(BEFORE) + list(AFTER):
            hits = [b.where for b in runnable.get(name, []) if key in b.text]
            self.assertEqual(len(hits), 1, f"{name}: {key!r} is in the `test` blocks {hits}, not in one")

    def test_substitutions(self):
        s = Session.__new__(Session)
        s.values = {"pg_port": "5433", "moto": "http://127.0.0.1:4000", "root": "/tmp/r"}
        text = ("lodge init --db postgres://lodge@db.internal/lodge\nexport AWS_ENDPOINT_URL=http://127.0.0.1:9000\n"
                "lodge upload /srv/projects/ && lodge get --prefix '' -o /restore/x/\n"
                "export LODGE_DB=/var/lib/lodge/archive.db; ls ./srv/a /usr/srv /tmp/x.db file:///tmp/x-store")
        for sub in SUBSTITUTIONS:
            text = sub.apply(text, s)
        self.assertEqual(text, "lodge init --db postgres://lodge@127.0.0.1:5433/lodge\n"
                               "export AWS_ENDPOINT_URL=http://127.0.0.1:4000\n"
                               "lodge upload /tmp/r/srv/projects/ && lodge get --prefix '' -o /tmp/r/restore/x/\n"
                               "export LODGE_DB=/tmp/r/var/lib/lodge/archive.db; ls ./srv/a /usr/srv /tmp/r/tmp/x.db "
                               "file:///tmp/r/tmp/x-store")


class Recipes(unittest.TestCase):
    """The `test` blocks of each file, run in order in one session (see the module's doc)."""

    @classmethod
    def setUpClass(cls):
        assert LODGE and os.access(LODGE, os.X_OK), "LODGE_BIN must name the built lodge binary"
        cls.moto = Moto()
        cls.s3 = s3_client(cls.moto.endpoint)

    @classmethod
    def tearDownClass(cls):
        cls.moto.stop()
        if cls.mq is not None:
            cls.mq.stop()

    mq = None

    @classmethod
    def rabbitmq(cls):
        """The class's RabbitMQ (tests/harness/brokers.py), started on first use."""
        if cls.mq is None:
            from brokers import RabbitMQ
            cls.mq = RabbitMQ()
        return cls.mq

    def run_file(self, name):
        runnable = [b for b in doc_blocks(name) if b.runnable]
        if not runnable:
            self.skipTest(f"{name} has no block marked `test`")
        roots, session, timings = [], None, []
        for b in runnable:
            if session is None or b.fresh:
                roots.append(tempfile.mkdtemp(prefix="lodge-recipes-"))
                session = self.session(name, runnable, roots[-1])
            for (doc, text), before in BEFORE.items():
                if doc == name and text in b.text:
                    before(self, session)
            script = session.script(b, SUBSTITUTIONS)
            started = time.monotonic()
            rc, out = session.run(script)
            timings.append((b.line, time.monotonic() - started))
            if VERBOSE:
                sys.stderr.write(f"\n--- {b.where} (exit {rc}) ---\n{script.rstrip()}\n"
                                 f"--- output ---\n{out.rstrip()}\n")
            for (doc, text), after in AFTER.items():
                if doc == name and text in b.text and rc == 0:
                    after(self, session, out)
            missing = unmatched_output(session.substitute(shown_output(b.text), SUBSTITUTIONS), out) if rc == 0 else []
            if rc != 0 or missing:
                sys.stderr.write(f"kept the session's directory: {roots[-1]}\n")
                why = f"failed (exit {rc})" if rc else "printed otherwise than shown: " + " | ".join(missing)
                self.fail(f"{b.where}: the recipe {why}\n--- as run (in {session.cwd}) ---\n"
                          f"{script.rstrip()}\n--- its output ---\n{out.rstrip()}")
        sys.stderr.write(f"{name}: {len(runnable)} blocks, "
                         + ", ".join(f"line {line} {t:.1f}s" for line, t in timings) + "\n")
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)

    def session(self, name, runnable, root):
        """A new terminal for the file's blocks, the servers as a reader starting the page has
        them: moto reset and the buckets the blocks name made, each PostgreSQL database they
        name made afresh, the AWS files, WORKSPACE and the file's SETUP."""
        session = Session(root, environment(self.moto), {"moto": self.moto.endpoint})
        req = urllib.request.Request(self.moto.endpoint + "/moto-api/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=30).read()
        text = "\n".join(b.text for b in runnable)
        for bucket in sorted(set(re.findall(r"\bs3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])", text))):
            self.s3.create_bucket(Bucket=bucket)
        if "postgres://" in text:
            pg = pg_server()
            session.values["pg_port"] = str(pg.port)
            for db in sorted(set(re.findall(r"postgres://[^\s/'\"]*db\.internal[^\s/'\"]*/(\w+)", text))):
                pg.create_database(db)
        for path, data in dict(AWS_FILES, **WORKSPACE).items():
            full = os.path.join(root, path[1:]) if path.startswith("/") else os.path.join(session.work, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            if callable(data):
                data(full)
                continue
            with open(full, "wb") as f:
                f.write(data.format(**session.values).encode() if isinstance(data, str) else data)
        if name in SETUP:
            SETUP[name](self, session)
        return session


for _name in doc_files():
    def _test(self, name=_name):
        self.run_file(name)
    _test.__doc__ = f"the `test` blocks of {_name}, in order"
    setattr(Recipes, "test_" + re.sub(r"\W", "_", _name), _test)


if __name__ == "__main__":
    main()
