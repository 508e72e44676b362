"""The CI templates (ci/github/action.yml, ci/gitlab/lodge.gitlab-ci.yml) run as their CI would
run them: the YAML is read, its variables and inputs handed to its steps, and the steps (the
ci/lodge-ci-*.sh scripts they call) run under a faked CI environment against moto, the
credentials from a CI OIDC token exchanged at moto's STS (AssumeRoleWithWebIdentity). What
comes out is checked: the step outputs and dotenv variables, the objects in the bucket (boto3),
the ledger's rows (lodge list). The install step (ci/lodge-ci-install.sh) runs with lodge absent
from PATH: it installs the .deb of a release directory (file://), or builds one from source
with scripts/package, into a directory of the test (never this machine's system). The .deb
and the package build tree are CTest's fixture's (LODGE_TEST_DEB_DIR,
LODGE_TEST_PACKAGE_BUILD_DIR); without them, scripts/package runs once for this process."""

import atexit
import glob
import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, PresignCheckingMoto, S3TestCase, SOURCE_DIR, main, project_version, release_dist  # noqa: E402,E501

try:
    import yaml
except ImportError:  # python3-yaml is in scripts/packages.txt
    yaml = None

CI_DIR = os.path.join(SOURCE_DIR, "ci")
ROLE = "arn:aws:iam::123456789012:role/lodge-ci"
APP = gzip.compress(b"app " * 1000, mtime=0)  # a .gz must hold gzip (lodge checks the type)
GITHUB_SHA = "0123456789abcdef0123456789abcdef01234567"
GITLAB_SHA = "89abcdef0123456789abcdef0123456789abcdef"
GITLAB_METADATA = {"cicommit": GITLAB_SHA, "ciref": "release/1.2", "cirun": "977", "cisystem": "gitlab",
                   "ciurl": "https://gitlab.example/acme/app/-/jobs/31", "cirepo": "acme/app", "cireftype": "branch"}
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOmFjbWUvYXBwIn0.c2lnbmF0dXJl"


VERSION = project_version()
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip() \
    if shutil.which("dpkg") else ""
DIST = release_dist()
ASSET = f"lodge_{VERSION}_{ARCH}_{DIST}.deb"

_PACKAGE = {}


def package_fixture():
    """{"deb": the built lodge_<version>_<arch>.deb, "build": its configured and built package
    build tree}: CTest's fixture's, else scripts/package run once (nice'd; minutes) into a temp
    directory removed at exit."""
    if not _PACKAGE:
        deb_dir = os.environ.get("LODGE_TEST_DEB_DIR")
        build = os.environ.get("LODGE_TEST_PACKAGE_BUILD_DIR")
        if not (deb_dir and build):
            top = tempfile.mkdtemp(prefix="lodge-it-package-")
            atexit.register(shutil.rmtree, top, True)
            deb_dir, build = os.path.join(top, "out"), os.path.join(top, "build-package")
            p = subprocess.run(["nice", os.path.join(SOURCE_DIR, "scripts", "package")], capture_output=True,
                               text=True, timeout=3600, env=dict(os.environ, PACKAGE_BUILD_DIR=build, BUILD_DIR=deb_dir))
            assert p.returncode == 0, f"scripts/package failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
        debs = sorted(glob.glob(os.path.join(deb_dir, f"lodge_{VERSION}_*.deb")), key=os.path.getmtime)
        assert debs, f"no lodge_{VERSION}_*.deb in {deb_dir}"
        _PACKAGE.update(deb=debs[-1], build=build)
    return _PACKAGE


def path_without_lodge():
    """The runner's PATH with no directory that holds a lodge (the build tree's, an installed one)."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not os.access(os.path.join(d, "lodge"), os.X_OK)]
    return os.pathsep.join(dirs)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def read_outputs(path):
    """NAME=VALUE lines (GitHub's $GITHUB_OUTPUT, a GitLab dotenv report) as a dict."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                out[k] = v
    return out


class TokenService:
    """GitHub Actions' OIDC token endpoint as a job sees it (ACTIONS_ID_TOKEN_REQUEST_URL,
    answering {"value": JWT} to a bearer ACTIONS_ID_TOKEN_REQUEST_TOKEN): part of the faked CI
    environment, on loopback. It records each request's path and Authorization."""

    def __init__(self):
        self.requests = []
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                service.requests.append((self.path, self.headers.get("Authorization")))
                body = json.dumps({"count": 1, "value": JWT}).encode()
                self.send_response(200 if self.headers.get("Authorization") == "bearer req-token" else 401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token?api-version=2.0"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def github_value(term, contexts):
    """One term of an expression: 'literal', inputs.x, env.X, github.x, runner.x, steps.ID.outputs.x."""
    term = term.strip()
    m = re.fullmatch(r"'([^']*)'", term)
    if m:
        return m.group(1)
    head, _, rest = term.partition(".")
    if head == "steps":
        step, _, output = rest.partition(".outputs.")
        return contexts["steps"].get(step, {}).get(output, "")
    if head in contexts:
        return contexts[head].get(rest, "")
    raise AssertionError(f"expression not understood by the test: {term}")


def github_evaluate(expression, contexts):
    """The expressions the action uses: A || B (the first non-empty), A == B (true or '')."""
    if "==" in expression:
        a, b = expression.split("==")
        return "true" if github_value(a, contexts) == github_value(b, contexts) else ""
    for term in expression.split("||"):
        v = github_value(term, contexts)
        if v:
            return v
    return ""


def github_expression(text, contexts):
    """Text with ${{ ... }} expressions in it, evaluated."""
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: github_evaluate(m.group(1), contexts), text)


@unittest.skipIf(yaml is None, "python3-yaml is not installed (scripts/packages.txt lists it)")
class Templates(S3TestCase):
    def setUp(self):
        super().setUp()
        self.work = os.path.join(self.dir, "project")
        for name, data in (("dist/app.tar.gz", APP), ("dist/docs/index.html", b"<html>docs</html>"),
                           ("dist/docs/logo.svg", b"<svg/>"), ("notes.txt", b"release notes\n")):
            self.write(os.path.join("project", name), data)
        # The runner: nothing of lodge's or AWS's settings but what the template passes.
        self.runner_env = {k: v for k, v in self.env.items() if not k.startswith(("LODGE_", "AWS_"))}
        self.runner_env.update({"PATH": os.path.dirname(LODGE) + os.pathsep + os.environ.get("PATH", ""),
                                "AWS_ENDPOINT_URL": self.moto.endpoint, "AWS_EC2_METADATA_DISABLED": "true"})

    def sh(self, command, env, check=True):
        p = subprocess.run(["sh", "-c", command], cwd=self.work, env=env, capture_output=True, text=True,
                           timeout=900)
        if check:
            self.assertEqual(p.returncode, 0, f"{command}\n{p.stdout}\n{p.stderr}")
        return p

    def stored(self, prefix):
        """key -> bytes of every object under lodge/ci/PREFIX/."""
        out = {}
        listing = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=f"lodge/ci/{prefix}/")
        for o in listing.get("Contents", []):
            out[o["Key"]] = self.s3.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read()
        return out

    def active_ids(self, prefix):
        r = self.lodge("--json", "list", "--prefix", prefix)
        self.assertEqual(r.rc, 0, r)
        return sorted(j["id"] for j in r.json_lines() if j["status"] == "ACTIVE")

    def assert_ci_metadata(self, prefix, expected):
        """Every ACTIVE row under PREFIX records `expected` as its metadata, and its object
        carries it (S3 user metadata, read back with boto3)."""
        r = self.lodge("--json", "list", "--prefix", prefix)
        rows = [j for j in r.json_lines() if j["status"] == "ACTIVE"]
        self.assertTrue(rows)
        for j in rows:
            self.assertEqual(j["object_options"].get("metadata", {}), expected, j)
            head = self.s3.head_object(Bucket=self.bucket, Key=j["object_key"])
            self.assertEqual({k: v for k, v in head["Metadata"].items() if not k.startswith("lodge")}, expected)

    # --- GitHub: the composite action, its step run as the runner runs it ---

    def run_action(self, inputs, extra_env=None, github=None):
        """Runs the action's steps as the runner does: inputs with their defaults, expressions
        evaluated, a step skipped when its `if` is false, each run step with its own
        $GITHUB_OUTPUT, the directories added to $GITHUB_PATH first on the PATH of the steps
        after. actions/cache is not run: the cache directory stays on disk between runs, as a
        restored cache would be; what it was given is kept in self.cache_steps. Returns the last
        process, the action's outputs and the step summary (({}, None) after a failed step)."""
        action = load_yaml(os.path.join(CI_DIR, "github", "action.yml"))
        self.assertEqual(action["runs"]["using"], "composite")
        for name in ("store", "prefix", "paths", "config", "owner", "ledger", "role-arn"):
            self.assertIn(name, action["inputs"])
        given = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
        given.update(inputs)
        temp = os.path.join(self.dir, "runner-temp")
        os.makedirs(temp, exist_ok=True)
        out_file = os.path.join(temp, "github-output")
        summary_file = os.path.join(temp, "step-summary")
        path_file = os.path.join(temp, "github-path")
        for f in (out_file, summary_file, path_file):
            open(f, "w").close()
        tool_cache = os.path.join(self.dir, "tool-cache")
        env = dict(self.runner_env, GITHUB_ACTIONS="true", CI="true", RUNNER_TEMP=temp, GITHUB_RUN_ID="4242",
                   GITHUB_SHA=GITHUB_SHA, GITHUB_REF_NAME="main", GITHUB_REF_TYPE="branch",
                   GITHUB_SERVER_URL="https://github.com", RUNNER_TOOL_CACHE=tool_cache,
                   GITHUB_REPOSITORY="acme/app", GITHUB_OUTPUT=out_file, GITHUB_STEP_SUMMARY=summary_file,
                   GITHUB_PATH=path_file, GITHUB_ACTION_PATH=os.path.join(CI_DIR, "github"))
        env.update(extra_env or {})
        # github.action_repository is empty, as a composite action's steps may see it: the
        # release is always LODGE_CI_RELEASE_URL's here (no download from github.com).
        contexts = {"inputs": given, "env": env, "steps": {},
                    "github": dict({"action_repository": "", "run_id": "4242"}, **(github or {})),
                    "runner": {"os": "Linux", "arch": "X64", "tool_cache": tool_cache, "temp": temp}}
        self.cache_steps, self.steps_run = [], {}
        for step in action["runs"]["steps"]:
            if "if" in step and not github_evaluate(step["if"], contexts):
                continue
            if "uses" in step:
                self.assertTrue(step["uses"].startswith("actions/cache@"), step)
                self.cache_steps.append({k: github_expression(str(v), contexts) for k, v in step["with"].items()})
                continue
            open(out_file, "w").close()
            with open(path_file) as f:
                added = [line.strip() for line in f if line.strip()]
            step_env = dict(env, PATH=os.pathsep.join(added[::-1] + [env["PATH"]]))
            step_env.update({k: github_expression(str(v), contexts) for k, v in step.get("env", {}).items()})
            self.assertEqual(step["shell"], "sh")
            p = self.sh(step["run"], step_env, check=False)
            self.steps_run[step["id"]] = p
            contexts["steps"][step["id"]] = read_outputs(out_file)
            if p.returncode != 0:
                return p, {}, None
        result = {}
        for name, o in action["outputs"].items():
            m = re.fullmatch(r"\$\{\{ steps\.(\w+)\.outputs\.(\w+) \}\}", o["value"])
            self.assertIsNotNone(m, o)
            result[name] = contexts["steps"][m.group(1)].get(m.group(2))
        with open(summary_file) as f:
            return p, result, f.read()

    def test_github_action_uploads_with_the_oidc_token_and_outputs_the_ids_and_summary(self):
        tokens = TokenService()
        self.addCleanup(tokens.stop)
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/4242",
                  "paths": "dist/app.tar.gz\ndist/docs\n", "role-arn": ROLE, "region": "us-east-1"}
        oidc = {"ACTIONS_ID_TOKEN_REQUEST_URL": tokens.url, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "req-token"}
        # The runner has no key: lodge can only sign with what STS gave for the token.
        self.assertFalse([k for k in self.runner_env if k.startswith(("AWS_ACCESS", "AWS_SECRET"))])
        p, out, summary = self.run_action(inputs, oidc)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The job's token was fetched for STS's audience, and lodge was handed it (the step
        # carries no key of its own: the runner environment has none).
        self.assertEqual(tokens.requests, [("/token?api-version=2.0&audience=sts.amazonaws.com", "bearer req-token")])
        with open(os.path.join(self.dir, "runner-temp", "lodge-ci", "web-identity-token")) as f:
            self.assertEqual(f.read(), JWT)
        ids = self.active_ids("builds/4242")
        self.assertEqual(len(ids), 3)
        self.assertEqual(sorted(int(i) for i in out["ids"].split()), ids)
        s = json.loads(out["summary"])["summary"]
        self.assertEqual((s["files"], s["active"], s["failed"]), (3, 3, 0))
        with open(out["results"]) as f:
            self.assertEqual(len([l for l in f if '"outcome":"active"' in l]), 3)
        self.assertIn("stored ids: " + out["ids"], summary)
        stored = self.stored("builds/4242")
        self.assertEqual(sorted(stored.values()), sorted([APP, b"<html>docs</html>", b"<svg/>"]))
        # The action passes --ci-metadata: each file says which run made it.
        self.assert_ci_metadata("builds/4242", {
            "cicommit": GITHUB_SHA, "ciref": "main", "cirun": "4242", "cisystem": "github",
            "ciurl": "https://github.com/acme/app/actions/runs/4242", "cirepo": "acme/app", "cireftype": "branch"})
        found = self.lodge("--json", "list", "--metadata", "cicommit=" + GITHUB_SHA)
        if found.rc == 0:  # list --metadata is another change's; once there, it finds the run
            self.assertEqual(sorted(j["id"] for j in found.json_lines()), ids)
        # A re-run (the job retried): the same files are duplicates with the same ids.
        p, again, _ = self.run_action(inputs, oidc)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(int(i) for i in again["ids"].split()), ids)
        self.assertEqual(json.loads(again["summary"])["summary"]["duplicate"], 3)

    def test_github_action_ci_metadata_false_records_none(self):
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/5",
                  "paths": "notes.txt", "ci-metadata": "false"}
        env = {k: v for k, v in self.env.items() if k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET")}
        p, out, _ = self.run_action(inputs, env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_ci_metadata("builds/5", {})
        p, _, _ = self.run_action(dict(inputs, **{"ci-metadata": "yes"}), env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("LODGE_CI_METADATA is 'yes'", p.stderr)

    def test_github_action_without_an_id_token_permission_says_so(self):
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "paths": "notes.txt", "role-arn": ROLE}
        p, _, _ = self.run_action(inputs, {"ACTIONS_ID_TOKEN_REQUEST_URL": "", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": ""})
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("permissions: id-token: write", p.stderr)
        self.assertEqual(self.active_ids(""), [])

    def test_github_action_reports_the_files_not_stored(self):
        # One path missing: lodge exits 1, and only the stored file's id is an output.
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/7",
                  "paths": "notes.txt missing.txt"}
        env = {k: v for k, v in self.env.items() if k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET")}
        p, out, _ = self.run_action(inputs, env)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual([int(i) for i in read_outputs(os.path.join(self.dir, "runner-temp", "github-output"))
                          ["ids"].split()], self.active_ids("builds/7"))
        self.assertEqual(list(self.stored("builds/7").values()), [b"release notes\n"])

    def test_github_action_args_are_one_argument_a_line_never_split_at_blanks(self):
        for name in ("dist/app.js.map", "dist/source maps/vendor.js.map"):
            self.write(os.path.join("project", name), b"{}")
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/8", "paths": "dist"}
        env = {k: v for k, v in self.env.items() if k.startswith("AWS_ACCESS") or k.startswith("AWS_SECRET")}
        # The form split at blanks took: its quotes reached lodge inside the pattern, which
        # excluded nothing. Now it is refused, saying how to write it, and nothing is uploaded.
        p, _, _ = self.run_action(dict(inputs, args="--exclude '*.map'"), env)
        self.assertEqual([k for k in self.stored("builds/8") if k.endswith(".map")], [])
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("""LODGE_CI_ARGS line "--exclude '*.map'": one argument a line, no quotes: put --exclude and its """
                      "value on two lines, or write --exclude=VALUE", p.stderr)
        self.assertEqual(self.stored("builds/8"), {})
        # One argument a line, blanks kept: a pattern with a blank in it works.
        p, out, _ = self.run_action(dict(inputs, args="--exclude\n*.js.map\n--exclude=source maps/\n"), env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(k.rsplit("/", 1)[1] for k in self.stored("builds/8")),
                         ["app.tar.gz", "index.html", "logo.svg"])
        self.assertEqual(json.loads(out["summary"])["summary"]["excluded"], 2)

    # --- lodge brought onto a runner without it (ci/lodge-ci-install.sh) ---

    def runner_without_lodge(self, **more):
        """The runner's environment with no lodge on PATH, the install extracting into a
        directory of the test (LODGE_CI_INSTALL_DIR: never into this machine's system)."""
        env = {"PATH": path_without_lodge(), "LODGE_CI_INSTALL_DIR": os.path.join(self.dir, "installed")}
        env.update(more)
        self.assertIsNone(shutil.which("lodge", path=env["PATH"]))
        return env

    def release(self, digest=None):
        """A release directory (file://) holding the fixture's .deb as this runner's asset and
        SHA256SUMS (with `digest` for it instead of its own, when given), and another
        distribution's line."""
        d = os.path.join(self.dir, "release")
        os.makedirs(d)
        shutil.copy(package_fixture()["deb"], os.path.join(d, ASSET))
        with open(os.path.join(d, "SHA256SUMS"), "w") as f:
            f.write(f"{'0' * 64}  lodge_{VERSION}_{ARCH}_other1.0.deb\n")
            f.write(f"{digest or sha256_file(os.path.join(d, ASSET))}  {ASSET}\n")
        return "file://" + d

    def guide_action_example(self):
        """The workflow steps of the GitHub Actions example in docs/ci.md (section "GitHub Actions
        and GitLab CI")."""
        with open(os.path.join(SOURCE_DIR, "docs", "ci.md")) as f:
            guide = f.read()
        section = guide[guide.index("\n## GitHub Actions and GitLab CI\n"):]
        section = section[:section.index("\n## ", 1)]
        block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
        return yaml.safe_load(block)["steps"]

    def test_the_ci_guides_action_example_installs_lodge_from_the_release_creates_the_ledger_and_archives(self):
        steps = self.guide_action_example()
        [action] = [s for s in steps if re.fullmatch(r"[\w-]+/lodge/ci/github@\S+", s.get("uses", ""))]
        given = dict(action["with"])
        for name in ("store", "ledger", "owner", "role-arn", "prefix", "paths"):
            self.assertIn(name, given)
        self.assertEqual(given["owner"], "ci")  # where self.stored looks
        # The example as written, but for its store (moto's bucket) and a ledger that does not
        # exist yet (the first run creates it).
        self.db = os.path.join(self.dir, "first-run.db")
        given.update(store=self.store, ledger=self.db)
        self.write("project/dist/app.js.map", b"{}")  # kept out by the example's args
        tokens = TokenService()
        self.addCleanup(tokens.stop)
        release = self.release()
        env = self.runner_without_lodge(ACTIONS_ID_TOKEN_REQUEST_URL=tokens.url,
                                        ACTIONS_ID_TOKEN_REQUEST_TOKEN="req-token", LODGE_CI_RELEASE_URL=release)
        p, out, _ = self.run_action({k: github_expression(str(v), {"github": {"run_id": "4242"}})
                                     for k, v in given.items()}, env)
        self.assertEqual(p.returncode, 0, p.stderr)
        # Installed from the release's asset, checked, and kept in the cache under its key.
        install = self.steps_run["install"].stderr
        self.assertIn(f"lodge {VERSION}: the release's {ASSET} ({release}), its SHA-256 checked", install)
        bin_dir = os.path.join(self.dir, "installed", "usr", "bin")
        self.assertIn(f"extracted into {os.path.join(self.dir, 'installed')}", install)
        self.assertTrue(os.access(os.path.join(bin_dir, "lodge"), os.X_OK))
        with open(os.path.join(self.dir, "runner-temp", "github-path")) as f:
            self.assertEqual(f.read(), bin_dir + "\n")
        cache = os.path.join(self.dir, "tool-cache", "lodge")
        self.assertEqual(self.cache_steps, [{"path": cache, "key": f"lodge-{VERSION}-Linux-X64-{DIST}"}])
        self.assertTrue(os.path.isfile(os.path.join(cache, ASSET)))
        # The first run created the ledger, then archived dist/ but its .map file.
        self.assertIn("there was no ledger: created it (lodge init)", self.steps_run["upload"].stderr)
        ids = self.active_ids("builds/4242")
        self.assertEqual(sorted(int(i) for i in out["ids"].split()), ids)
        self.assertEqual(sorted(self.stored("builds/4242").values()), sorted([APP, b"<html>docs</html>", b"<svg/>"]))
        # The example's last step prints the ids.
        [echo] = [s for s in steps if "steps.archive.outputs.ids" in s.get("run", "")]
        line = github_expression(echo["run"], {"steps": {"archive": out}})
        self.assertEqual(self.sh(line, self.runner_env).stdout, f"stored {out['ids']}\n")

    def test_github_action_builds_lodge_from_source_without_a_release_then_takes_it_from_the_cache(self):
        empty = os.path.join(self.dir, "no-release")
        os.makedirs(empty)
        # The package build tree is the fixture's, built: scripts/package finds it up to date.
        env = self.runner_without_lodge(LODGE_CI_RELEASE_URL="file://" + empty,
                                        LODGE_CI_PACKAGE_BUILD_DIR=package_fixture()["build"])
        env.update({k: v for k, v in self.env.items() if k.startswith(("AWS_ACCESS", "AWS_SECRET"))})
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/1", "paths": "notes.txt"}
        p, out, _ = self.run_action(inputs, env)
        self.assertEqual(p.returncode, 0, p.stderr)
        install = self.steps_run["install"].stderr
        cache = os.path.join(self.dir, "tool-cache", "lodge")
        self.assertIn(f"lodge {VERSION}: built from the source in {SOURCE_DIR} (no release at file://{empty}", install)
        self.assertIn(f"now cached as {os.path.join(cache, ASSET)}", install)
        self.assertEqual(list(self.stored("builds/1").values()), [b"release notes\n"])
        # The next job: the cache has the .deb; scripts/package is not run (a cmake that
        # records being run would say so), nothing is downloaded.
        marker = os.path.join(self.dir, "cmake-ran")
        fake = self.write("fake-bin/cmake", f"#!/bin/sh\necho \"$@\" >> {marker}\nexit 1\n")
        os.chmod(fake, 0o755)
        shutil.rmtree(os.path.join(self.dir, "installed"))
        env["PATH"] = os.path.dirname(fake) + os.pathsep + env["PATH"]
        p, out, _ = self.run_action(dict(inputs, prefix="builds/2"), env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"lodge {VERSION}: the cached {os.path.join(cache, ASSET)}", self.steps_run["install"].stderr)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(list(self.stored("builds/2").values()), [b"release notes\n"])

    def test_install_refuses_a_deb_that_does_not_match_sha256sums(self):
        release = self.release(digest=hashlib.sha256(b"another build").hexdigest())
        env = self.runner_without_lodge(LODGE_CI_RELEASE_URL=release)
        inputs = {"store": self.store, "ledger": self.db, "owner": "ci", "prefix": "builds/3", "paths": "notes.txt"}
        p, _, _ = self.run_action(inputs, env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"{release}/{ASSET} does not match the release's SHA256SUMS", p.stderr)
        self.assertIn("not installed", p.stderr)
        self.assertNotIn("upload", self.steps_run)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "installed")))
        self.assertEqual(os.listdir(os.path.join(self.dir, "tool-cache", "lodge")) if os.path.exists(
            os.path.join(self.dir, "tool-cache", "lodge")) else [], [])
        with open(os.path.join(self.dir, "runner-temp", "github-path")) as f:
            self.assertEqual(f.read(), "")
        self.assertEqual(self.stored("builds/3"), {})

    @unittest.skipIf(not shutil.which("cc"), "no C compiler to make a binary that needs a missing library")
    def test_install_without_root_names_the_libraries_the_runner_lacks(self):
        # A .deb whose usr/bin/lodge needs a library this machine does not have.
        work = os.path.join(self.dir, "fake-deb")
        os.makedirs(os.path.join(work, "pkg", "DEBIAN"))
        os.makedirs(os.path.join(work, "pkg", "usr", "bin"))
        self.write("fake-deb/lib.c", "int gone(void) { return 0; }\n")
        self.write("fake-deb/main.c", "int gone(void);\nint main(void) { return gone(); }\n")
        for cmd in (["cc", "-shared", "-fPIC", "-Wl,-soname,liblodgegone.so.1", "-o", "liblodgegone.so.1", "lib.c"],
                    ["cc", "-o", "pkg/usr/bin/lodge", "main.c", "-L.", "-l:liblodgegone.so.1"]):
            subprocess.run(cmd, cwd=work, check=True, capture_output=True)
        os.remove(os.path.join(work, "liblodgegone.so.1"))
        self.write("fake-deb/pkg/DEBIAN/control", f"Package: lodge\nVersion: {VERSION}\nArchitecture: {ARCH}\n"
                   "Maintainer: test <test@example.invalid>\nDescription: a lodge that cannot run\n")
        release = os.path.join(self.dir, "release")
        os.makedirs(release)
        subprocess.run(["dpkg-deb", "-b", os.path.join(work, "pkg"), os.path.join(release, ASSET)], check=True,
                       capture_output=True)
        with open(os.path.join(release, "SHA256SUMS"), "w") as f:
            f.write(f"{sha256_file(os.path.join(release, ASSET))}  {ASSET}\n")
        env = self.runner_without_lodge(LODGE_CI_RELEASE_URL="file://" + release)
        p, _, _ = self.run_action({"store": self.store, "ledger": self.db, "paths": "notes.txt"}, env)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("lodge's shared libraries are missing on this runner: liblodgegone.so.1 (install them, or run "
                      "as root or with passwordless sudo, where apt-get brings them)", p.stderr)
        self.assertNotIn("upload", self.steps_run)

    # --- GitLab: the template's jobs, their variables and script lines ---

    def gitlab_job(self, name, env, variables=None, check=True, ci_dir=CI_DIR):
        """Runs job `name` of the template as a runner would: what it extends merged in, the
        global and the job's variables (then the pipeline's, `variables`) expanded, its
        before_script and script lines in one shell that stops at the first failing line. The
        job's cache, its key expanded, is kept in self.gitlab_cache."""
        template = load_yaml(os.path.join(CI_DIR, "gitlab", "lodge.gitlab-ci.yml"))
        job = template[name]
        while "extends" in job:  # GitLab's merge: hashes deeply, anything else replaced
            parent = dict(template[job["extends"]])
            job = {k: v for k, v in job.items() if k != "extends"}
            for k, v in job.items():
                parent[k] = dict(parent[k], **v) if isinstance(v, dict) and isinstance(parent.get(k), dict) else v
            job = parent
        job_env = dict(env)
        for k, v in list(template.get("variables", {}).items()) + list(job.get("variables", {}).items()):
            job_env[k] = re.sub(r"\$(\w+)", lambda m: job_env.get(m.group(1), ""), str(v))
        job_env.update(variables or {})
        job_env["LODGE_CI_DIR"] = ci_dir  # the project's copy of ci/
        if "id_tokens" in job:
            self.assertEqual(job["id_tokens"]["LODGE_CI_ID_TOKEN"]["aud"], "sts.amazonaws.com")
            job_env["LODGE_CI_ID_TOKEN"] = JWT
        self.gitlab_cache = None
        if "cache" in job:
            self.gitlab_cache = {"key": re.sub(r"\$(\w+)", lambda m: job_env.get(m.group(1), ""), job["cache"]["key"]),
                                 "paths": job["cache"]["paths"]}
        lines = list(job.get("before_script", [])) + list(job["script"])
        result = self.sh("set -e\n" + "\n".join(lines), job_env, check=check)
        reports = job.get("artifacts", {}).get("reports", {})
        dotenv = read_outputs(os.path.join(self.work, reports["dotenv"])) if "dotenv" in reports else {}
        for path in job.get("artifacts", {}).get("paths", []) if result.returncode == 0 else []:
            path = re.sub(r"\$(\w+)", lambda m: job_env.get(m.group(1), ""), path)
            self.assertTrue(os.path.exists(os.path.join(self.work, path)), path)
        return result, dotenv

    def gitlab_env(self):
        return dict(self.runner_env, GITLAB_CI="true", CI="true", CI_PIPELINE_ID="977", CI_JOB_ID="31",
                    CI_COMMIT_SHA=GITLAB_SHA, CI_COMMIT_REF_NAME="release/1.2", CI_PROJECT_PATH="acme/app",
                    CI_JOB_URL="https://gitlab.example/acme/app/-/jobs/31", CI_PROJECT_DIR=self.work, LODGE_STORE=self.store, LODGE_DB=self.db, LODGE_OWNER="ci")

    def test_gitlab_upload_job_uploads_under_the_pipeline_and_passes_the_ids_on(self):
        p, dotenv = self.gitlab_job(".lodge-upload", self.gitlab_env(),
                                    {"LODGE_CI_ROLE_ARN": ROLE, "LODGE_CI_PATHS": "dist notes.txt",
                                     "LODGE_CI_ARGS": "--exclude\n*.svg"})
        self.assertEqual(p.returncode, 0, p.stderr)
        ids = self.active_ids("builds/977")
        self.assertEqual(len(ids), 3)
        self.assertEqual(sorted(int(i) for i in dotenv["LODGE_IDS"].split()), ids)
        s = json.loads(dotenv["LODGE_SUMMARY"])["summary"]
        self.assertEqual((s["active"], s["excluded"]), (3, 1))
        self.assertEqual(sorted(self.stored("builds/977").values()),
                         sorted([APP, b"<html>docs</html>", b"release notes\n"]))
        self.assert_ci_metadata("builds/977", GITLAB_METADATA)

    def test_gitlab_upload_job_installs_lodge_when_it_is_missing_and_caches_it(self):
        # The pipeline's variables, as the GitLab example of docs/ci.md sets them.
        pipeline = {"LODGE_CI_VERSION": VERSION, "LODGE_CI_RELEASE_URL": self.release(), "LODGE_CI_PATHS": "notes.txt"}
        env = dict(self.gitlab_env(), TMPDIR=self.dir, **self.runner_without_lodge())
        env.update({k: v for k, v in self.env.items() if k.startswith(("AWS_ACCESS", "AWS_SECRET"))})
        p, dotenv = self.gitlab_job(".lodge-upload", env, pipeline)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"lodge {VERSION}: the release's {ASSET}", p.stderr)
        # GitLab's cache: keyed by the version, its path the directory that now holds the .deb.
        self.assertEqual(self.gitlab_cache, {"key": f"lodge-{VERSION}", "paths": [".lodge-cache/"]})
        self.assertTrue(os.path.isfile(os.path.join(self.work, ".lodge-cache", ASSET)))
        self.assertEqual([int(i) for i in dotenv["LODGE_IDS"].split()], self.active_ids("builds/977"))
        self.assertEqual(list(self.stored("builds/977").values()), [b"release notes\n"])
        # The next pipeline: the cache restored, the release gone: lodge comes from the cache.
        shutil.rmtree(os.path.join(self.dir, "release"))
        shutil.rmtree(os.path.join(self.dir, "installed"))
        p, _ = self.gitlab_job(".lodge-upload", dict(env, CI_PIPELINE_ID="978"), pipeline)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"lodge {VERSION}: the cached {os.path.join(self.work, '.lodge-cache', ASSET)}", p.stderr)
        self.assertEqual(list(self.stored("builds/978").values()), [b"release notes\n"])

    def test_gitlab_job_without_lodge_nor_a_way_to_get_it_says_what_to_set(self):
        # ci/ copied into the project, as the template is used: no lodge source around it.
        shutil.copytree(CI_DIR, os.path.join(self.work, "ci"))
        env = dict(self.gitlab_env(), TMPDIR=self.dir, **self.runner_without_lodge())
        p, _ = self.gitlab_job(".lodge-upload", env, {"LODGE_CI_PATHS": "notes.txt"}, check=False, ci_dir="ci")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("which lodge to install is not known: set LODGE_CI_VERSION and LODGE_CI_RELEASE_URL", p.stderr)
        p, _ = self.gitlab_job(".lodge-upload", env, {"LODGE_CI_PATHS": "notes.txt", "LODGE_CI_VERSION": VERSION},
                               check=False, ci_dir="ci")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no release to download from (LODGE_CI_RELEASE_URL is not set), and there is no lodge source "
                      "to build it from: set LODGE_CI_SOURCE", p.stderr)
        self.assertEqual(self.stored("builds/977"), {})

    def test_gitlab_direct_flow_the_runner_without_credentials_sends_with_curl(self):
        # The two jobs with credentials get the runner's static keys (the presign check knows
        # them); the runner that builds and sends gets none at all.
        trusted = dict(self.gitlab_env(), AWS_ACCESS_KEY_ID=self.env["AWS_ACCESS_KEY_ID"],
                       AWS_SECRET_ACCESS_KEY=self.env["AWS_SECRET_ACCESS_KEY"], AWS_REGION="us-east-1")
        untrusted = {k: v for k, v in self.gitlab_env().items() if not k.startswith(("LODGE_", "AWS_"))}
        artifact = {"LODGE_CI_FILE": "dist/app.tar.gz"}
        p, described = self.gitlab_job(".lodge-direct-describe", untrusted, artifact)
        self.assertEqual(described, {"LODGE_CI_NAME": "app.tar.gz", "LODGE_CI_SIZE": str(len(APP)),
                                     "LODGE_CI_SHA256": hashlib.sha256(APP).hexdigest()})
        p, reserved = self.gitlab_job(".lodge-direct-reserve", dict(trusted, **described))
        self.assertEqual(reserved["LODGE_CI_OUTCOME"], "reserved", p.stderr)
        self.assertEqual(self.stored("builds/977"), {})
        # A retried reserve job gets the same reservation back.
        p, again = self.gitlab_job(".lodge-direct-reserve", dict(trusted, **described))
        self.assertEqual((again["LODGE_CI_OUTCOME"], again["LODGE_CI_ID"]), ("replayed", reserved["LODGE_CI_ID"]))
        p, _ = self.gitlab_job(".lodge-direct-send", untrusted, artifact)
        self.assertIn("sent dist/app.tar.gz", p.stderr)
        p, _ = self.gitlab_job(".lodge-direct-confirm", dict(trusted, **reserved))
        self.assertEqual(self.active_ids("builds/977"), [int(reserved["LODGE_CI_ID"])])
        self.assertEqual(list(self.stored("builds/977").values()), [APP])
        # The reservation recorded the pipeline, and the object sent by curl carries it.
        self.assert_ci_metadata("builds/977", GITLAB_METADATA)
        # The same content again: a duplicate, nothing to send or confirm.
        p, dup = self.gitlab_job(".lodge-direct-reserve", dict(trusted, **described, CI_PIPELINE_ID="978"),
                                 {"LODGE_CI_PREFIX": "builds/977"})
        self.assertEqual(dup["LODGE_CI_OUTCOME"], "duplicate", p.stderr)
        p, _ = self.gitlab_job(".lodge-direct-send", untrusted, artifact)
        self.assertIn("nothing to send: duplicate", p.stderr)
        p, _ = self.gitlab_job(".lodge-direct-confirm", dict(trusted, **dup))
        self.assertIn("was stored already", p.stderr)

    def test_template_scripts_parse_as_posix_sh(self):
        scripts = sorted(name for name in os.listdir(CI_DIR) if name.endswith(".sh"))
        self.assertIn("lodge-ci-install.sh", scripts)
        for name in scripts:
            p = subprocess.run(["sh", "-n", os.path.join(CI_DIR, name)], capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stderr), (0, ""), name)
            self.assertTrue(os.access(os.path.join(CI_DIR, name), os.X_OK) or name == "lodge-ci-lib.sh", name)


Templates.moto_class = PresignCheckingMoto  # the direct flow's presigned PUT is checked as S3 would


if __name__ == "__main__":
    main()
