"""`lodge prune` as a CI uses it, on moto (the bucket read with the aws CLI) and file://, on
SQLite and PostgreSQL (the _pg entry): 12 builds over 3 branches (builds/<branch>/<n>, each
uploaded with --ci-metadata under a faked GitHub Actions job, some content shared between
builds under "owner" de-dup) are pruned with --keep-last 2 per branch plus a tagged release;
the dry run prints the plan, the real run deletes exactly the planned rows, and after the
grace a sweep removes exactly their objects (shared content of a kept build, and another
tool's object under a removed build's prefix, stay); the quota is freed; a re-run deletes
nothing; an empty policy exits 2. Files given --expire-after are deleted by prune --expired
once past it. The CI's metadata finds a build: list --metadata, get --latest --metadata."""

import concurrent.futures
import json
import os
import re
import shlex
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, S3TestCase, aws, check_invariants, main, pg_server  # noqa: E402

BRANCHES = ("main", "dev", "feature")
BUILDS = (1, 2, 3, 4)
LICENSE = b"Permission is hereby granted, free of charge...\n"  # the same in every build
# 12 builds x 3 files: the quota is exactly full once they are uploaded.
CONFIG = {"policies": {"default": {"grace": "1s"},
                       "ci": {"dedup": "owner", "grace": "1s", "max_files": 36, "deadline": "60s"}}}
POLICY = ("--prefix-glob", "builds/*/*", "--group-by", "segment:2", "--keep-last", "2", "--keep-tag", "keep=yes")
# What the policy decides, by hand: per branch the newest two builds are kept ("last"); dev's
# first build is a tagged release (kept: "tag keep=yes"); the others are removed.
KEPT = {("main", 4): "last", ("main", 3): "last", ("dev", 4): "last", ("dev", 3): "last", ("dev", 1): "keep=yes",
        ("feature", 4): "last", ("feature", 3): "last"}
REMOVED = {("main", 2), ("main", 1), ("dev", 2), ("feature", 2), ("feature", 1)}


def commit(branch, n):
    return f"{branch[0]}{n}".ljust(40, "0")


def github_env(branch, n):
    return {"GITHUB_ACTIONS": "true", "CI": "true", "GITHUB_SHA": commit(branch, n), "GITHUB_REF_NAME": branch,
            "GITHUB_RUN_ID": str(n), "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app"}


class PruneMixin:
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.store_env()
        self.init()

    def store_env(self):
        """Points self.env at the test's store (S3TestCase already has)."""

    def upload_build(self, branch, n, *extra):
        """builds/<branch>/<n>: app.bin (this build's own), LICENSE (every build's), docs/<branch>.txt
        (the branch's); returns {path: row}."""
        root = f"b-{branch}-{n}"
        self.write(f"{root}/app.bin", f"app {branch} {n}\n".encode())
        self.write(f"{root}/LICENSE", LICENSE)
        self.write(f"{root}/docs/{branch}.txt", f"docs of {branch}\n".encode())
        r = self.lodge("upload", "--json", "--policy", "ci", "--ci-metadata", "--prefix", f"builds/{branch}/{n}",
                       *extra, os.path.join(self.dir, root), env=github_env(branch, n))
        self.assertEqual(r.rc, 0, r)
        return {j["path"]: j for j in r.json_lines() if "summary" not in j}

    def upload_builds(self):
        """The 12 builds, oldest first (build n of every branch, then n + 1): {(branch, n): {path: row}}."""
        builds = {}
        for n in BUILDS:
            for branch in BRANCHES:
                extra = ("--tag", "keep=yes") if (branch, n) == ("dev", 1) else ()
                builds[(branch, n)] = self.upload_build(branch, n, *extra)
        return builds

    def rows(self):
        r = self.lodge("--json", "--owner", "*", "list", "--all")
        self.assertEqual(r.rc, 0, r)
        return {j["id"]: j for j in r.json_lines()}

    def prune(self, *args, later=None, expect=0):
        r = self.lodge("--json", "prune", *args, later=later)
        self.assertEqual(r.rc, expect, r)
        return r.json() if expect == 0 else r

    def expected_deleted(self, builds):
        """The rows the removal deletes: every row of a removed build but those whose object a
        kept build shares (under "owner" de-dup the first build of a content writes its object
        and every later build's row shares it: main/1's LICENSE, each branch's first docs)."""
        keep_writer = {builds[("main", 1)]["LICENSE"]["id"]}
        for branch in BRANCHES:
            keep_writer.add(builds[(branch, 1)][f"docs/{branch}.txt"]["id"])
        out = set()
        for b in REMOVED:
            out |= {row["id"] for row in builds[b].values()} - keep_writer
        return out

    def test_prune_a_ci_bucket_keep_last_per_branch_and_releases(self):
        builds = self.upload_builds()
        # The de-dup this test is about: later builds share the first build's objects.
        self.assertEqual(builds[("dev", 3)]["LICENSE"]["shares"], builds[("main", 1)]["LICENSE"]["id"])
        self.assertEqual(builds[("feature", 2)]["docs/feature.txt"]["shares"],
                         builds[("feature", 1)]["docs/feature.txt"]["id"])
        rows_before = self.rows()
        self.assertEqual(len(rows_before), 36)
        # Another tool's object under a build's prefix that will be removed.
        foreign = self.key_root() + "builds/main/1/notes/foreign.txt"
        self.put_foreign(foreign, b"not lodge's\n")
        objects_before = self.stored_keys()
        self.assertIn(foreign, objects_before)
        # The quota (36 files) is full: one more file is refused (under a prefix the policy
        # does not select, so that the re-run below sees the same builds).
        self.write("extra/x.bin", b"extra\n")
        r = self.lodge("upload", "--policy", "ci", "--prefix", "other/1", os.path.join(self.dir, "extra"))
        self.assertEqual(r.rc, 1, r)
        self.assertIn("QUOTA_EXCEEDED", r.out + r.err)

        # The CI's metadata finds a build, and the latest build of a branch.
        r = self.lodge("--json", "list", "--metadata", "cicommit=" + commit("dev", 3))
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(sorted(j["id"] for j in r.json_lines()), sorted(x["id"] for x in builds[("dev", 3)].values()))
        r = self.lodge("--json", "get", "--latest", "--metadata", "ciref=main", "-o", os.path.join(self.dir, "out") + "/")
        self.assertEqual(r.rc, 0, r)
        got = {}
        for base, _, names in os.walk(os.path.join(self.dir, "out")):
            for n in names:
                with open(os.path.join(base, n), "rb") as f:
                    got.setdefault(n, []).append(f.read())
        self.assertEqual(got, {"app.bin": [b"app main 4\n"], "LICENSE": [LICENSE], "main.txt": [b"docs of main\n"]})

        # The dry run: the plan, and nothing changed.
        plan = self.prune(*POLICY, "--dry-run")
        self.assert_plan(plan, builds)
        self.assertEqual(self.rows(), rows_before)
        text = self.lodge("prune", *POLICY, "--dry-run")
        self.assertEqual(text.rc, 0, text)
        for (branch, n), rule in KEPT.items():
            self.assertRegex(text.out, rf"(?m)^\s*keep\s+builds/{branch}/{n}\s.*{re.escape(rule)}")
        for branch, n in REMOVED:
            self.assertRegex(text.out, rf"(?m)^\s*remove\s+builds/{branch}/{n}\s")
        self.assertIn("kept: shared by", text.out)
        self.assertEqual(self.lodge("prune", "--prefix-glob", "builds/*/*", "--dry-run").rc, 2)

        # The real run: exactly the planned rows, in one go; the objects stay until the grace.
        done = self.prune(*POLICY)
        self.assert_plan(done, builds)
        deleted = {i for i, j in self.rows().items() if j["deleted"]}
        self.assertEqual(deleted, self.expected_deleted(builds))
        self.assertEqual(done["removed"]["files"], len(deleted))
        self.assertEqual(self.stored_keys(), objects_before)
        # The quota is freed at once.
        r = self.lodge("upload", "--policy", "ci", "--prefix", "other/1", os.path.join(self.dir, "extra"))
        self.assertEqual(r.rc, 0, r)

        # After the grace, a sweep removes exactly the objects only the deleted rows used: the
        # app.bin of each removed build.
        s = self.lodge("sweep", "--json", later="+1h")
        self.assertEqual(s.rc, 0, s)
        gone = {builds[b]["app.bin"]["object_key"] for b in REMOVED}
        after = self.stored_keys()
        extra_key = [k for k in after if "/other/1/" in k]
        self.assertEqual(len(extra_key), 1)
        self.assertEqual(sorted(set(after) - set(extra_key)), sorted(set(objects_before) - gone))
        self.assertIn(foreign, after)
        for b in KEPT:  # every kept build still restores whole
            out = os.path.join(self.dir, "restored", b[0], str(b[1])) + "/"
            r = self.lodge("get", "--prefix", f"builds/{b[0]}/{b[1]}", "-o", out)
            self.assertEqual(r.rc, 0, r)
            with open(os.path.join(out, "LICENSE"), "rb") as f:
                self.assertEqual(f.read(), LICENSE)
        check_invariants(self, objects={k: 0 for k in after if k != foreign})

        # A re-run deletes nothing more; an empty policy is refused.
        again = self.prune(*POLICY)
        self.assertEqual(again["removed"]["files"], 0, again)
        self.assertEqual({i for i, j in self.rows().items() if j["deleted"]}, deleted)
        r = self.prune("--prefix-glob", "builds/*/*", expect=2)
        self.assertIn("USAGE", r.err)

    def assert_plan(self, plan, builds):
        groups = {g["group"]: g for g in plan["groups"]}
        self.assertEqual(sorted(groups), [f"builds/{b}" for b in sorted(BRANCHES)])
        for branch in BRANCHES:
            snaps = groups[f"builds/{branch}"]["snapshots"]
            self.assertEqual(groups[f"builds/{branch}"]["owner"], "ci")
            # Newest first.
            self.assertEqual([s["prefix"] for s in snaps], [f"builds/{branch}/{n}" for n in reversed(BUILDS)])
            for s in snaps:
                n = int(s["prefix"].rsplit("/", 1)[1])
                self.assertEqual((s["files"], s["bytes"]),
                                 (3, sum(len(x) for x in (f"app {branch} {n}\n", LICENSE, f"docs of {branch}\n"))))
                if (branch, n) in KEPT:
                    self.assertEqual(s["action"], "keep", s)
                    self.assertTrue(any(KEPT[(branch, n)] in why for why in s["reasons"]), s)
                    continue
                self.assertEqual(s["action"], "remove", s)
                own = builds[(branch, n)]
                shared = {k["id"] for k in s["kept_shared"]}
                expected = set()
                if n == 1:  # the first build of its branch wrote the branch's docs
                    expected.add(own[f"docs/{branch}.txt"]["id"])
                if (branch, n) == ("main", 1):  # and main/1 wrote the LICENSE everyone shares
                    expected.add(own["LICENSE"]["id"])
                self.assertEqual(shared, expected, s)
                self.assertEqual(s["removed_files"], 3 - len(expected), s)
        self.assertEqual(plan["removed"]["snapshots"], len(REMOVED))

    def test_expired_files_are_deleted_once_past_their_expiry(self):
        self.write("tmp/a.log", b"a\n")
        self.write("tmp/b.log", b"b\n")
        self.write("keep/c.log", b"c\n")
        r = self.lodge("upload", "--json", "--expire-after", "1h", "--prefix", "runs/1", os.path.join(self.dir, "tmp"))
        self.assertEqual(r.rc, 0, r)
        expiring = {j["id"]: j for j in r.json_lines() if "summary" not in j}
        r = self.lodge("upload", "--json", "--prefix", "runs/2", os.path.join(self.dir, "keep"))
        self.assertEqual(r.rc, 0, r)
        before = self.rows()
        objects = self.stored_keys()
        # Not yet past it: nothing to do.
        early = self.prune("--expired", later="+30m")
        self.assertEqual(early["expired"]["files"], 0, early)
        # Past it: the dry run counts them and changes nothing; the run deletes them alone.
        dry = self.prune("--expired", "--dry-run", later="+2h")
        self.assertEqual((dry["expired"]["files"], dry["expired"]["bytes"]), (2, 4), dry)
        self.assertEqual(self.rows(), before)
        done = self.prune("--expired", later="+2h")
        self.assertEqual(done["expired"]["files"], 2, done)
        rows = self.rows()
        self.assertEqual({i for i, j in rows.items() if j["deleted"]}, set(expiring))
        self.assertEqual(self.prune("--expired", later="+3h")["expired"]["files"], 0)
        # Their objects go with the next sweep past the grace; the other file's stays.
        s = self.lodge("sweep", "--json", later="+3h")
        self.assertEqual(s.rc, 0, s)
        self.assertEqual(sorted(self.stored_keys()),
                         sorted(set(objects) - {j["object_key"] for j in expiring.values()}))


class PruneS3(PruneMixin, S3TestCase):
    def key_root(self):
        return self.prefix + "/ci/"

    def put_foreign(self, key, body):
        self.put_object(key, body)

    def stored_keys(self):
        # The aws CLI's own listing of the bucket (lodge's id markers left out).
        listing = aws(self.moto.endpoint, "s3api", "list-objects-v2", "--bucket", self.bucket) or {}
        return sorted(o["Key"] for o in listing.get("Contents", []) if "/.lodge/" not in o["Key"])


# The snapshots the dry-run/run comparison prunes: (owner, prefix, ref, age, upload flags).
SNAPSHOTS = (
    ("ci", "builds/1", "main", "-400d", ()),
    ("ci", "builds/2", "feature/x", "-40d", ()),
    ("ci", "builds/3", "main", "-10d", ("--tag", "keep=yes")),
    ("ci", "builds/4", "renovate/@types-node", "-3d", ("--metadata", "release=1")),
    ("ci", "builds/5", "main", "-2h", ("--expire-after", "1h")),  # past its expiry now
    ("ci", "builds/6", "main", None, ()),
    ("ci", "nightly/1", "v1.2+build.7", "-1d", ()),
    ("qa", "builds/7", "main", "-5d", ()),
    ("qa", "builds/8", "feature/x", "-1h", ()),
)
# Every option of prune, alone or with what it needs (a --keep-* rule, --expired).
PRUNE_OPTIONS = (
    ("--keep-last", "1"),
    ("--keep-within", "5d"),
    ("--keep-hourly", "1"),
    ("--keep-daily", "2"),
    ("--keep-weekly", "1"),
    ("--keep-monthly", "2"),
    ("--keep-yearly", "1"),
    ("--keep-last", "1", "--keep-tag", "keep=yes"),
    ("--keep-last", "1", "--keep-metadata", "release=1"),
    ("--prefix-glob", "builds/*", "--keep-last", "2"),
    ("--group-by", "segment:1", "--keep-last", "1"),
    ("--group-by", "meta:ciref", "--keep-last", "1"),
    ("--expired",),
    ("--expired", "--keep-last", "2"),
    ("--owner", "*", "--keep-last", "1"),
    ("--owner", "*", "--expired", "--group-by", "meta:ciref", "--keep-last", "1", "--keep-tag", "keep=yes"),
    ("--owner", "qa", "--keep-within", "1d"),
)


class PruneFile(PruneMixin, LodgeTestCase):
    def store_env(self):
        self.root = os.path.join(self.dir, "store")
        self.env.update({"LODGE_STORE": "file://" + self.root, "LODGE_OWNER": "ci"})

    def fork_ledger(self, n):
        """A copy of the test's ledger as it is now (bound to the same store)."""
        if self.postgres:
            name = f"{self.pg_database}_f{n}"
            pg_server().sql(f'CREATE DATABASE "{name}" TEMPLATE "{self.pg_database}"')
            return pg_server().db_url(name)
        path = os.path.join(self.dir, f"fork{n}.db")
        src, dst = sqlite3.connect(self.db), sqlite3.connect(path)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        os.chmod(path, 0o600)
        return path

    def test_a_dry_run_plans_exactly_what_its_run_deletes_for_every_option(self):
        for i, (owner, prefix, ref, age, flags) in enumerate(SNAPSHOTS):
            self.write(f"s{i}/app-{i}.bin", f"app {i}\n".encode())
            self.write(f"s{i}/LICENSE", LICENSE)
            env = dict(github_env(ref, i), LODGE_OWNER=owner, GITHUB_REF_NAME=ref)
            r = self.lodge("upload", "--policy", "ci", "--ci-metadata", "--prefix", prefix, *flags,
                           os.path.join(self.dir, f"s{i}"), env=env, later=age)
            self.assertEqual(r.rc, 0, r)
        before = self.rows()
        self.assertEqual(len(before), 2 * len(SNAPSHOTS))
        for n, options in enumerate(PRUNE_OPTIONS):
            with self.subTest(options=options):
                db = self.fork_ledger(n)
                head, rest = (options[:2], options[2:]) if options[0] == "--owner" else ((), options)
                dry = self.lodge("--db", db, "--json", *head, "prune", *rest, "--dry-run", db=False)
                self.assertEqual(dry.rc, 0, dry)
                run = self.lodge("--db", db, "--json", *head, "prune", *rest, db=False)
                self.assertEqual(run.rc, 0, run)
                plan, done = dry.json(), run.json()
                self.assertEqual(dict(plan, dry_run=False), done, "the run's plan is the dry run's")
                after = {j["id"]: j for j in self.lodge("--db", db, "--json", "--owner", "*", "list", "--all",
                                                        db=False).json_lines()}
                deleted = {i for i, j in after.items() if j["deleted"]}
                # What the dry run said: each removed snapshot's alive files but those kept shared,
                # and (--expired) the files past their expiry.
                predicted = set()
                for g in plan["groups"]:
                    for snap in g["snapshots"]:
                        if snap["action"] != "remove":
                            continue
                        kept = {k["id"] for k in snap["kept_shared"]}
                        ids = {i for i, j in before.items() if j["owner"] == g["owner"]
                               and j["prefix"] == snap["prefix"] and i not in kept}
                        self.assertEqual(len(ids), snap["removed_files"], snap)
                        predicted |= ids
                expired = {i for i, j in before.items() if j["expires_at"]}
                if "--expired" in options:
                    self.assertEqual(plan["expired"]["files"], len(expired), plan)
                    predicted |= expired
                self.assertEqual(deleted, predicted)
                self.assertEqual(plan["removed"]["files"] + (plan["expired"] or {}).get("files", 0), len(deleted))
                self.assertEqual(self.sql_on(db, "SELECT outcome FROM job_run WHERE job = 'prune'"), [("ok",)])

    def test_the_ci_guides_retention_recipe_keeps_the_last_builds_of_refs_with_slash_at_and_plus(self):
        # The cron line of the "Retention" section of docs/ci.md, run as written (its five time
        # fields dropped) over builds of refs that cannot be a prefix segment.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "ci.md")) as f:
            section = f.read().split("\n## Retention: keeping the last builds\n", 1)[1].split("\n## ", 1)[0]
        recipe = re.search(r"^```cron\n(.*?)\n```", section, re.M | re.S).group(1)
        argv = shlex.split(recipe)[5:]
        self.assertEqual(argv[0], "lodge", recipe)
        keep = int(argv[argv.index("--keep-last") + 1])
        glob = argv[argv.index("--prefix-glob") + 1]
        self.assertEqual(glob.count("*"), 1, "a build's prefix is the glob with its run id for the '*'")
        refs = ("feature/x", "renovate/@types-node", "v1.2.3+build.7", "main")
        # Run ids 101, 102, ... build by build, each build's refs in turn: ref -> [run ids], oldest first.
        runs = {ref: [101 + n * len(refs) + i for n in range(keep + 1)] for i, ref in enumerate(refs)}

        def upload_builds_of(ref):
            for n, run_id in enumerate(runs[ref]):  # in order: "last" is by upload time
                self.write(f"r{run_id}/app.bin", f"app {run_id}\n".encode())
                tag = ("--tag", "keep=yes") if (n, ref) == (0, "main") else ()
                r = self.lodge("upload", "--ci-metadata", "--prefix", glob.replace("*", str(run_id)), *tag,
                               os.path.join(self.dir, f"r{run_id}"), env=github_env(ref, run_id))
                self.assertEqual(r.rc, 0, r)

        # The refs are groups of their own: their builds upload at once, one ref to a thread.
        with concurrent.futures.ThreadPoolExecutor(len(refs)) as pool:
            for done in [pool.submit(upload_builds_of, ref) for ref in refs]:
                done.result()
        r = self.lodge(*argv[1:])
        self.assertEqual(r.rc, 0, r)
        alive = {j["prefix"] for j in self.lodge("--json", "list").json_lines()}
        for ref, ids in runs.items():
            with self.subTest(ref=ref):
                kept = ids[-keep:] + ([ids[0]] if ref == "main" and "--keep-tag" in argv else [])
                self.assertEqual({p for p in alive if int(p.rsplit("/", 1)[1]) in ids},
                                 {glob.replace("*", str(i)) for i in kept})

    def sql_on(self, db, query):
        saved = self.db
        self.db = db
        try:
            return self.sql(query)
        finally:
            self.db = saved

    def key_root(self):
        return "ci/"

    def put_foreign(self, key, body):
        path = os.path.join(self.root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(body)

    def stored_keys(self):
        out = []
        for base, _, names in os.walk(self.root):
            for n in names:
                rel = os.path.relpath(os.path.join(base, n), self.root)
                if not rel.startswith(".lodge"):
                    out.append(rel)
        return sorted(out)

    def objects(self):
        return {k: 0 for k in self.stored_keys()}


if __name__ == "__main__":
    main()
