"""`upload --ci-metadata` and `--expire-after`, on moto (the object's metadata read back with
the aws CLI) and on file:// (its metadata attribute), SQLite or PostgreSQL: under a faked
GitHub Actions and GitLab CI environment each row and each object records the job's commit,
ref, run, URL and CI under the fixed names (cicommit, ciref, cirun, ciurl, cisystem), an
explicit --metadata over them and over the policy's; outside a CI the flag is a usage error
naming what it looked for, and nothing is recorded; --expire-after (and a policy's
expire_after) puts each row's expiry at its reserve plus the duration."""

import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, S3TestCase, aws, epoch_ms, main  # noqa: E402

SHA = "0123456789abcdef0123456789abcdef01234567"
GITHUB = {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_SHA": SHA, "GITHUB_REF_NAME": "main",
          "GITHUB_RUN_ID": "4242", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app"}
GITHUB_METADATA = {"cicommit": SHA, "ciref": "main", "cirun": "4242", "cisystem": "github",
                   "ciurl": "https://github.com/acme/app/actions/runs/4242", "cirepo": "acme/app"}
GITLAB = {"GITLAB_CI": "true", "CI": "true", "CI_COMMIT_SHA": "89abcdef", "CI_COMMIT_REF_NAME": "release-1.2",
          "CI_PIPELINE_ID": "977", "CI_JOB_URL": "https://gitlab.example/acme/app/-/jobs/31"}
GITLAB_METADATA = {"cicommit": "89abcdef", "ciref": "release-1.2", "cirun": "977", "cisystem": "gitlab",
                   "ciurl": "https://gitlab.example/acme/app/-/jobs/31", "cireftype": "branch"}
CONFIG = {"policies": {
    "default": {"grace": "1s"},
    "tagged": {"metadata": {"team": "web", "ciref": "from-the-policy"}},
    "expiring": {"expire_after": "7d"}}}
DAY_MS = 86_400_000


class CiMetadataMixin:
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.store_env()
        self.init()
        self.write("build/app.bin", b"app\n")
        self.write("build/docs/index.html", b"<html/>\n")

    def store_env(self):
        """Points self.env at the test's store (S3TestCase already has)."""

    def upload(self, *args, env=None, expect=0):
        r = self.lodge("upload", "--json", *args, env=env)
        self.assertEqual(r.rc, expect, r)
        return [j for j in r.json_lines() if "summary" not in j]

    def rows(self, prefix):
        r = self.lodge("--json", "list", "--prefix", prefix)
        self.assertEqual(r.rc, 0, r)
        return r.json_lines()

    def user_metadata(self, key):
        """The object's metadata as the store keeps it, lodge's own stamp left out."""
        return {k: v for k, v in self.stored_metadata(key).items() if not k.startswith("lodge")}

    def assert_recorded(self, prefix, expected, count=2):
        rows = self.rows(prefix)
        self.assertEqual(len(rows), count, rows)
        for row in rows:
            self.assertEqual(row["object_options"].get("metadata", {}), expected, row)
            self.assertEqual(self.user_metadata(row["object_key"]), expected, row["object_key"])

    def test_github_job_each_row_and_object_records_the_run(self):
        rows = self.upload("--ci-metadata", "--prefix", "builds/4242", os.path.join(self.dir, "build"), env=GITHUB)
        self.assert_recorded("builds/4242", GITHUB_METADATA)
        # show says which build made the file.
        j = self.lodge("--json", "show", rows[0]["id"]).json()
        self.assertEqual(j["object_options"]["metadata"], GITHUB_METADATA)
        text = self.lodge("show", rows[0]["id"]).out
        self.assertRegex(text, rf"(?m)^metadata\s+cicommit={SHA} ciref=main cirepo=acme/app cirun=4242 cisystem=github "
                               r"ciurl=https://github.com/acme/app/actions/runs/4242$")

    def test_two_repositories_main_builds_are_told_apart_and_a_tag_from_a_branch(self):
        for repo, run in (("acme/app", "1"), ("acme/site", "2")):
            env = dict(GITHUB, GITHUB_REPOSITORY=repo, GITHUB_RUN_ID=run, GITHUB_REF_TYPE="branch")
            self.upload("--ci-metadata", "--prefix", f"builds/{run}", os.path.join(self.dir, "build"), env=env)
        tag = dict(GITLAB, CI_PROJECT_PATH="acme/app", CI_COMMIT_TAG="v1.2", CI_COMMIT_REF_NAME="v1.2")
        self.upload("--ci-metadata", "--prefix", "builds/3", os.path.join(self.dir, "build"), env=tag)

        def prefixes(*args):
            r = self.lodge("--json", "list", *args)
            self.assertEqual(r.rc, 0, r)
            return sorted({j["prefix"] for j in r.json_lines()})
        self.assertEqual(prefixes("--metadata", "ciref=main"), ["builds/1", "builds/2"])
        self.assertEqual(prefixes("--metadata", "ciref=main", "--metadata", "cirepo=acme/app"), ["builds/1"])
        self.assertEqual(prefixes("--metadata", "ciref=main", "--metadata", "cirepo=acme/site"), ["builds/2"])
        self.assertEqual(prefixes("--latest", "--metadata", "cirepo=acme/app", "--metadata", "cireftype=branch"),
                         ["builds/1"])
        self.assertEqual(prefixes("--metadata", "cireftype=tag"), ["builds/3"])
        row = self.rows("builds/3")[0]
        self.assertEqual(self.user_metadata(row["object_key"])["cirepo"], "acme/app")
        self.assertEqual(row["object_options"]["metadata"]["cireftype"], "tag")

    def test_gitlab_job_and_an_explicit_metadata_over_it_and_the_policy(self):
        self.upload("--ci-metadata", "--prefix", "builds/977", os.path.join(self.dir, "build"), env=GITLAB)
        self.assert_recorded("builds/977", GITLAB_METADATA)
        # The policy's metadata under the CI's, an explicit --metadata over both.
        self.upload("--ci-metadata", "--policy", "tagged", "--metadata", "cirun=manual", "--prefix", "builds/978",
                    os.path.join(self.dir, "build"), env=GITLAB)
        self.assert_recorded("builds/978", dict(GITLAB_METADATA, team="web", cirun="manual"))

    def test_reserve_records_the_run_too(self):
        r = self.lodge("--json", "reserve", "app.bin", "--size", "4", "--sha256", "ab" * 32, "--ci-metadata",
                       "--prefix", "builds/4242", env=GITHUB)
        if r.rc == 1 and "cannot sign" in r.err:
            self.skipTest("this store signs no upload URL")
        self.assertEqual(r.rc, 0, r)
        row = self.lodge("--json", "--owner", "*", "list", "--all").json_lines()[0]
        self.assertEqual(row["object_options"]["metadata"], GITHUB_METADATA)

    def test_outside_a_ci_a_usage_error_naming_the_variables_and_nothing_recorded(self):
        r = self.lodge("upload", "--ci-metadata", "--prefix", "builds/1", os.path.join(self.dir, "build"),
                       env={"CI": "true"})  # CI=true alone names no CI
        self.assertEqual(r.rc, 2, r)
        self.assertIn("USAGE", r.err)
        self.assertIn("--ci-metadata", r.err)
        for var in ("GITHUB_ACTIONS", "GITHUB_SHA", "GITLAB_CI", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "JENKINS_URL",
                    "GIT_COMMIT", "BUILD_URL"):
            self.assertIn(var, r.err)
        self.assertEqual(self.lodge("--json", "--owner", "*", "list", "--all").json_lines(), [])
        self.assertEqual(self.stored_keys(), [])

    def test_expire_after_records_each_rows_expiry_from_its_reserve(self):
        rows = self.upload("--expire-after", "3d", "--prefix", "builds/1", os.path.join(self.dir, "build"))
        for row in rows:
            j = self.lodge("--json", "show", row["id"]).json()
            self.assertEqual(epoch_ms(j["expires_at"]) - epoch_ms(j["created_at"]), 3 * DAY_MS, j)
            text = self.lodge("show", row["id"]).out
            self.assertRegex(text, r"(?m)^expires\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        # The policy's expire_after; --expire-after over it; "never" clears it.
        self.write("more/a.txt", b"a\n")
        self.write("more/b.txt", b"b\n")
        self.write("more/c.txt", b"c\n")
        p = self.upload("--policy", "expiring", os.path.join(self.dir, "more/a.txt"))[0]
        f = self.upload("--policy", "expiring", "--expire-after", "1h", os.path.join(self.dir, "more/b.txt"))[0]
        n = self.upload("--policy", "expiring", "--expire-after", "never", os.path.join(self.dir, "more/c.txt"))[0]
        shown = {x["id"]: self.lodge("--json", "show", x["id"]).json() for x in (p, f, n)}
        self.assertEqual(epoch_ms(shown[p["id"]]["expires_at"]) - epoch_ms(shown[p["id"]]["created_at"]), 7 * DAY_MS)
        self.assertEqual(epoch_ms(shown[f["id"]]["expires_at"]) - epoch_ms(shown[f["id"]]["created_at"]), 3_600_000)
        self.assertIsNone(shown[n["id"]]["expires_at"])
        self.assertRegex(self.lodge("show", n["id"]).out, r"(?m)^expires\s+-$")
        # Without either, a row never expires; the ledger holds exactly what show says.
        for x in (p, f, n):
            self.assertEqual(self.sql("SELECT expires_at FROM file_upload WHERE id = ?", (x["id"],)),
                             [(epoch_ms(shown[x["id"]]["expires_at"]),)])

    def test_expire_after_refuses_what_is_no_duration(self):
        for bad in ("soon", "0s", "-1d", "36501d"):
            r = self.lodge("upload", "--expire-after", bad, os.path.join(self.dir, "build"))
            self.assertEqual(r.rc, 2, (bad, r))
            self.assertIn("--expire-after", r.err)
        self.assertEqual(self.lodge("--json", "--owner", "*", "list", "--all").json_lines(), [])


class CiMetadataS3(CiMetadataMixin, S3TestCase):
    def stored_metadata(self, key):
        # The aws CLI's own reading of the object (user metadata names as S3 returns them).
        head = aws(self.moto.endpoint, "s3api", "head-object", "--bucket", self.bucket, "--key", key)
        return head["Metadata"]

    def stored_keys(self):
        return sorted(self.objects())


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def commit_body(i):
    return (f"tree {EMPTY_TREE}\nauthor A <a@example.com> {1700000000 + i} +0000\n"
            f"committer A <a@example.com> {1700000000 + i} +0000\n\ncommit {i}\n").encode()


def commit_sha(body):
    return hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()


def colliding_commits():
    """Commit bodies whose SHAs share exactly 4, 5, 6 and 7 leading hex digits in pairs, and
    a few others: found by hashing candidates (deterministic), so git's real ambiguity is met."""
    by_prefix = {n: {} for n in (4, 5, 6, 7)}
    chosen = {}
    for i in range(400_000):
        body = commit_body(i)
        sha = commit_sha(body)
        if sha.startswith(EMPTY_TREE[:4]):
            continue
        for n, seen in by_prefix.items():
            other = seen.get(sha[:n])
            # A pair that shares exactly n digits (not n + 1), with nothing chosen sharing 4.
            if (other and other[0][n] != sha[n] and n not in {k for k, _ in chosen.values()}
                    and not any(c.startswith(sha[:4]) or c.startswith(other[0][:4]) for c in chosen)):
                chosen[other[0]] = (n, other[1])
                chosen[sha] = (n, body)
            seen.setdefault(sha[:n], (sha, body))
        if len(chosen) == 8:
            break
    singles = [commit_body(1_000_000 + i) for i in range(4)]
    return [b for _, b in chosen.values()] + singles


class CiMetadataFile(CiMetadataMixin, LodgeTestCase):
    def store_env(self):
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def test_a_short_commit_finds_what_git_rev_parse_finds_on_the_same_commits(self):
        bodies = colliding_commits()
        self.assertEqual(len(bodies), 12)
        # A real repository holding exactly these commits (and the empty tree they point at).
        repo = os.path.join(self.dir, "repo")
        git = ["git", "-C", repo]
        subprocess.run(["git", "init", "-q", repo], check=True)
        subprocess.run(git + ["hash-object", "-w", "-t", "tree", "/dev/null"], check=True, capture_output=True)
        shas = []
        for i, body in enumerate(bodies):
            out = subprocess.run(git + ["hash-object", "-w", "-t", "commit", "--stdin"], input=body, check=True,
                                 capture_output=True).stdout.decode().strip()
            self.assertEqual(out, commit_sha(body))
            shas.append(out)
            self.write(f"c{i}/app.bin", f"app of {out}\n".encode())
            r = self.lodge("upload", "--prefix", f"c/{i}", "--metadata", "cicommit=" + out,
                           os.path.join(self.dir, f"c{i}"))
            self.assertEqual(r.rc, 0, r)
        queries = sorted({sha[:n] for sha in shas for n in (3, 4, 5, 6, 7, 8, 40)}
                         | {shas[0][:7].upper(), shas[-1][:9].upper(), "0000000", "ffffffff", "xyz1234"})
        # git's answer for each: the commit it names, "ambiguous", or "missing".
        want = {}
        for q in queries:
            p = subprocess.run(git + ["rev-parse", "--verify", q + "^{commit}"], capture_output=True, text=True)
            want[q] = (p.stdout.strip() if p.returncode == 0
                       else "ambiguous" if "is ambiguous" in p.stderr else "missing")
        self.assertIn("ambiguous", want.values())
        for q in queries:
            with self.subTest(query=q):
                r = self.lodge("--json", "list", "--metadata", "cicommit=" + q)
                if r.rc == 2:
                    got = "ambiguous" if "ambiguous" in r.err else r.err
                else:
                    self.assertEqual(r.rc, 0, r)
                    found = {j["object_options"]["metadata"]["cicommit"] for j in r.json_lines()}
                    self.assertLessEqual(len(found), 1, found)
                    got = found.pop() if found else "missing"
                self.assertEqual(got, want[q])
        # The error names the candidates, as git's hint does.
        four = next(q for q in queries if len(q) == 4 and want[q] == "ambiguous")
        r = self.lodge("list", "--metadata", "cicommit=" + four)
        self.assertIn("USAGE", r.err)
        for sha in shas:
            if sha.startswith(four):
                self.assertIn(sha, r.err)
        # get takes the same selection.
        r = self.lodge("get", "--latest", "--metadata", "cicommit=" + shas[-1][:7], "-o",
                       os.path.join(self.dir, "out") + "/")
        self.assertEqual(r.rc, 0, r)
        with open(os.path.join(self.dir, "out", "app.bin"), "rb") as f:
            self.assertEqual(f.read(), f"app of {shas[-1]}\n".encode())

    def stored_metadata(self, key):
        path = os.path.join(self.root, key)
        try:
            text = os.getxattr(path, "user.lodge.meta")
        except OSError:  # a filesystem without user xattrs: the sidecar
            with open(os.path.join(self.root, ".lodge-meta", key + ".json"), "rb") as f:
                text = f.read()
        return json.loads(text)["metadata"]

    def stored_keys(self):
        out = []
        for base, _, names in os.walk(self.root):
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), self.root)
                if not rel.startswith(".lodge"):
                    out.append(rel)
        return sorted(out)


if __name__ == "__main__":
    main()
