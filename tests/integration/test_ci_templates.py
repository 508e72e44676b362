"""The CI templates (ci/github/action.yml, ci/gitlab/lodge.gitlab-ci.yml) run as their CI would
run them: the YAML is read, its variables and inputs handed to its steps, and the steps (the
ci/lodge-ci-*.sh scripts they call) run under a faked CI environment against moto, the
credentials from a CI OIDC token exchanged at moto's STS (AssumeRoleWithWebIdentity). What
comes out is checked: the step outputs and dotenv variables, the objects in the bucket (boto3),
the ledger's rows (lodge list)."""

import gzip
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, PresignCheckingMoto, S3TestCase, SOURCE_DIR, main  # noqa: E402

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


def github_expression(text, inputs, env):
    """The ${{ inputs.x }} and ${{ inputs.x || env.Y }} expressions the action uses."""
    def value(term):
        term = term.strip()
        if term.startswith("inputs."):
            return inputs.get(term[len("inputs."):], "")
        if term.startswith("env."):
            return env.get(term[len("env."):], "")
        raise AssertionError(f"expression not understood by the test: {term}")

    def evaluate(m):
        for term in m.group(1).split("||"):
            v = value(term)
            if v:
                return v
        return ""
    return re.sub(r"\$\{\{(.*?)\}\}", evaluate, text)


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
                           timeout=300)
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

    def run_action(self, inputs, extra_env=None):
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
        for f in (out_file, summary_file):
            open(f, "w").close()
        env = dict(self.runner_env, GITHUB_ACTIONS="true", CI="true", RUNNER_TEMP=temp, GITHUB_RUN_ID="4242",
                   GITHUB_SHA=GITHUB_SHA, GITHUB_REF_NAME="main", GITHUB_REF_TYPE="branch",
                   GITHUB_SERVER_URL="https://github.com",
                   GITHUB_REPOSITORY="acme/app", GITHUB_OUTPUT=out_file, GITHUB_STEP_SUMMARY=summary_file,
                   GITHUB_ACTION_PATH=os.path.join(CI_DIR, "github"))
        env.update(extra_env or {})
        outputs = {}
        for step in action["runs"]["steps"]:
            step_env = dict(env)
            step_env.update({k: github_expression(str(v), given, env) for k, v in step.get("env", {}).items()})
            self.assertEqual(step["shell"], "sh")
            p = self.sh(step["run"], step_env, check=False)
            outputs[step["id"]] = read_outputs(out_file)
            if p.returncode != 0:
                return p, {}, None
        result = {}
        for name, o in action["outputs"].items():
            m = re.fullmatch(r"\$\{\{ steps\.(\w+)\.outputs\.(\w+) \}\}", o["value"])
            self.assertIsNotNone(m, o)
            result[name] = outputs[m.group(1)].get(m.group(2))
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

    # --- GitLab: the template's jobs, their variables and script lines ---

    def gitlab_job(self, name, env, variables=None, check=True):
        """Runs job `name` of the template as a runner would: the global and the job's
        variables (then the pipeline's, `variables`) expanded, each script line in sh."""
        template = load_yaml(os.path.join(CI_DIR, "gitlab", "lodge.gitlab-ci.yml"))
        job = template[name]
        job_env = dict(env)
        for k, v in list(template.get("variables", {}).items()) + list(job.get("variables", {}).items()):
            job_env[k] = re.sub(r"\$(\w+)", lambda m: job_env.get(m.group(1), ""), str(v))
        job_env.update(variables or {})
        job_env["LODGE_CI_DIR"] = CI_DIR  # the project's copy of ci/
        if "id_tokens" in job:
            self.assertEqual(job["id_tokens"]["LODGE_CI_ID_TOKEN"]["aud"], "sts.amazonaws.com")
            job_env["LODGE_CI_ID_TOKEN"] = JWT
        results = [self.sh(line, job_env, check=check) for line in job["script"]]
        reports = job.get("artifacts", {}).get("reports", {})
        dotenv = read_outputs(os.path.join(self.work, reports["dotenv"])) if "dotenv" in reports else {}
        for path in job.get("artifacts", {}).get("paths", []):
            path = re.sub(r"\$(\w+)", lambda m: job_env.get(m.group(1), ""), path)
            self.assertTrue(os.path.exists(os.path.join(self.work, path)), path)
        return results[-1], dotenv

    def gitlab_env(self):
        return dict(self.runner_env, GITLAB_CI="true", CI="true", CI_PIPELINE_ID="977", CI_JOB_ID="31",
                    CI_COMMIT_SHA=GITLAB_SHA, CI_COMMIT_REF_NAME="release/1.2", CI_PROJECT_PATH="acme/app",
                    CI_JOB_URL="https://gitlab.example/acme/app/-/jobs/31", CI_PROJECT_DIR=self.work, LODGE_STORE=self.store, LODGE_DB=self.db, LODGE_OWNER="ci")

    def test_gitlab_upload_job_uploads_under_the_pipeline_and_passes_the_ids_on(self):
        p, dotenv = self.gitlab_job(".lodge-upload", self.gitlab_env(),
                                    {"LODGE_CI_ROLE_ARN": ROLE, "LODGE_CI_PATHS": "dist notes.txt",
                                     "LODGE_CI_ARGS": "--exclude *.svg"})
        self.assertEqual(p.returncode, 0, p.stderr)
        ids = self.active_ids("builds/977")
        self.assertEqual(len(ids), 3)
        self.assertEqual(sorted(int(i) for i in dotenv["LODGE_IDS"].split()), ids)
        s = json.loads(dotenv["LODGE_SUMMARY"])["summary"]
        self.assertEqual((s["active"], s["excluded"]), (3, 1))
        self.assertEqual(sorted(self.stored("builds/977").values()),
                         sorted([APP, b"<html>docs</html>", b"release notes\n"]))
        self.assert_ci_metadata("builds/977", GITLAB_METADATA)

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
        for name in sorted(os.listdir(CI_DIR)):
            if name.endswith(".sh"):
                p = subprocess.run(["sh", "-n", os.path.join(CI_DIR, name)], capture_output=True, text=True)
                self.assertEqual((p.returncode, p.stderr), (0, ""), name)
                self.assertTrue(os.access(os.path.join(CI_DIR, name), os.X_OK) or name == "lodge-ci-lib.sh", name)


Templates.moto_class = PresignCheckingMoto  # the direct flow's presigned PUT is checked as S3 would


if __name__ == "__main__":
    main()
