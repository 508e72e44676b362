"""The release workflow (.github/workflows/release.yml) cannot run outside GitHub, so its YAML is
read and held to the release's contract: it runs on v* tags; the tag must be v and the version of
CMakeLists.txt; three containers (Debian 12, Ubuntu 22.04, Ubuntu 24.04) build, test and package;
the assets are lodge_<version>_<arch>_<dist>.deb plus one SHA256SUMS, attached to the tag's
release. Every script and path a step names exists here, every action is pinned to a major
version, every step's script parses in its shell. The scripts of the version check, the
packaging's naming and the release step run here, as GitHub runs them (bash -eo pipefail, the
expressions handed through env), on stand-ins for scripts/package and gh. README's Install and
CONTRIBUTING's Releasing say the same names, and the license is Apache-2.0 in LICENSE, README and
the package's copyright file."""

import fnmatch
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import SOURCE_DIR, main, project_version, release_dist  # noqa: E402

try:
    import yaml
except ImportError:  # python3-yaml is in scripts/packages.txt
    yaml = None

WORKFLOW = os.path.join(SOURCE_DIR, ".github", "workflows", "release.yml")
CONTAINERS = {"debian:12": "debian12", "ubuntu:22.04": "ubuntu22.04", "ubuntu:24.04": "ubuntu24.04"}
# The CTest entries that need no server (tests/CMakeLists.txt): what the containers run.
SERVERLESS_TESTS = {"unit", "store_contract_file", "ledger_contract_sqlite", "ledger_contract_fake"}
# Where a script names a file of this repository: a path under one of its folders, ./PATH, or
# CMakeLists.txt. An absolute path (/etc/os-release) is the machine's, not the repository's.
REPO_PATH = re.compile(r"(?<![\w/.$-])(?:\./)?(?:(?:scripts|ci|dist|tests|cmake|man)/[\w./*-]+"
                       r"|\./[\w./*-]+|CMakeLists\.txt)")
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?[^\n]*\n.*?^\s*\1$", re.S | re.M)


def load_workflow(path=WORKFLOW):
    with open(path) as f:
        return yaml.safe_load(f)


def expand(value, context):
    """A value with ${{ expressions }}, each replaced from context (an unknown one fails)."""
    def one(m):
        if m.group(1) not in context:
            raise AssertionError(f"the workflow uses ${{{{ {m.group(1)} }}}}, which this test does not know")
        return context[m.group(1)]
    return EXPRESSION.sub(one, str(value))


def on_trigger(workflow):
    # YAML 1.1 reads the key `on` as the boolean True.
    return workflow.get("on", workflow.get(True))


def every_step(workflow):
    """(job name, job, step) for every step of every job."""
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield name, job, step


def step_named(workflow, job, fragment):
    found = [s for s in workflow["jobs"][job]["steps"] if fragment in s.get("name", "") or s.get("id") == fragment]
    if len(found) != 1:
        raise AssertionError(f"job {job}: {len(found)} steps named like {fragment!r}")
    return found[0]


def shell_of(workflow, job, step):
    return step.get("shell") or job.get("defaults", {}).get("run", {}).get("shell") or \
        workflow.get("defaults", {}).get("run", {}).get("shell")


def run_step(workflow, job_name, step, context, cwd, path_prefix=None):
    """The step's script run as GitHub runs a `shell: bash` step (bash --noprofile --norc -eo
    pipefail FILE), with the workflow's, the job's and the step's env, their expressions
    expanded from context. Returns the CompletedProcess."""
    job = workflow["jobs"][job_name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "LODGE_"))}
    for scope in (workflow, job, step):
        env.update({k: expand(v, context) for k, v in scope.get("env", {}).items()})
    env["GITHUB_OUTPUT"] = os.path.join(cwd, "github-output")
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env["PATH"]
    script = os.path.join(cwd, "step.sh")
    with open(script, "w") as f:
        f.write(step["run"])
    workdir = os.path.join(cwd, step.get("working-directory", "."))
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", script], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)


@unittest.skipIf(yaml is None, "python3-yaml is not installed (scripts/packages.txt lists it)")
class Shape(unittest.TestCase):
    """What the workflow says, read from its YAML."""

    def setUp(self):
        self.wf = load_workflow()

    def test_runs_on_v_tags_only_and_by_hand(self):
        on = on_trigger(self.wf)
        self.assertIsNotNone(on, "no `on:` trigger")
        self.assertEqual(set(on), {"push", "workflow_dispatch"}, on)
        self.assertEqual(on["push"], {"tags": ["v*"]}, "a push of a v* tag, no branch")

    def test_the_version_job_checks_the_tag_against_cmakelists(self):
        step = step_named(self.wf, "version", "version")
        self.assertIn("CMakeLists.txt", step["run"])
        self.assertIn("project\\(lodge VERSION", step["run"])
        self.assertEqual(step["env"]["REF_NAME"], "${{ github.ref_name }}")
        self.assertEqual(self.wf["jobs"]["version"]["outputs"]["version"], "${{ steps.version.outputs.version }}")
        for job in ("package", "release"):
            self.assertIn("version", self.wf["jobs"][job]["needs"], f"{job} runs after the version check")

    def test_three_containers_one_per_distribution(self):
        job = self.wf["jobs"]["package"]
        self.assertEqual(job["container"]["image"], "${{ matrix.image }}")
        include = job["strategy"]["matrix"]["include"]
        self.assertEqual({m["image"]: m["dist"] for m in include}, CONTAINERS)
        self.assertEqual(len(include), len(CONTAINERS))
        self.assertFalse(job["strategy"].get("fail-fast", True), "one distribution's failure hides no other's")
        # The release step expects exactly the matrix's distributions.
        release = step_named(self.wf, "release", "SHA256SUMS")
        self.assertEqual(release["env"]["DISTS"].split(), sorted(CONTAINERS.values()))

    def test_containers_build_test_and_package_with_the_build_dependencies_only(self):
        runs = "\n".join(s.get("run", "") for s in self.wf["jobs"]["package"]["steps"])
        deps = re.findall(r"scripts/deps\b([^\n;&|]*)", runs)
        self.assertTrue(deps, "the containers install the build dependencies with scripts/deps build")
        for args in deps:
            self.assertEqual(args.split(), ["build"], "Ubuntu has no postgresql-15: only `scripts/deps build`")
        self.assertRegex(runs, r"\bscripts/build\b")
        self.assertRegex(runs, r"\bscripts/package\b")
        ctest = re.search(r"ctest\b.*?-R '\^\(([^)]*)\)\$'", runs, re.S)
        self.assertIsNotNone(ctest, "ctest -R '^(...)$' runs the suites that need no server")
        self.assertEqual(set(ctest.group(1).split("|")), SERVERLESS_TESTS)
        self.assertIn("--no-tests=error", runs, "a regex that matches nothing fails")
        with open(os.path.join(SOURCE_DIR, "tests", "CMakeLists.txt")) as f:
            defined = set(re.findall(r"add_test\(NAME (\S+)", f.read()))
        self.assertLessEqual(SERVERLESS_TESTS, defined, "each entry ctest runs is one tests/CMakeLists.txt defines")

    def test_assets_are_uploaded_collected_and_released(self):
        package = self.wf["jobs"]["package"]["steps"]
        upload = [s for s in package if s.get("uses", "").startswith("actions/upload-artifact@")]
        self.assertEqual(len(upload), 1)
        self.assertEqual(upload[0]["with"]["path"], "assets/*.deb")
        self.assertEqual(upload[0]["with"]["if-no-files-found"], "error")
        release = self.wf["jobs"]["release"]
        self.assertEqual(release["if"], "github.ref_type == 'tag'", "only a tag is released")
        self.assertEqual(release["permissions"], {"contents": "write"})
        self.assertEqual(self.wf["permissions"], {"contents": "read"}, "only the release job writes")
        self.assertEqual(set(release["needs"]), {"version", "package"})
        download = [s for s in release["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
        self.assertEqual(len(download), 1)
        # Every matrix leg's artifact is one the release job collects, into the step's directory.
        for dist in CONTAINERS.values():
            name = expand(upload[0]["with"]["name"], {"matrix.dist": dist})
            self.assertTrue(fnmatch.fnmatch(name, download[0]["with"]["pattern"]), name)
        self.assertTrue(download[0]["with"]["merge-multiple"])
        step = step_named(self.wf, "release", "SHA256SUMS")
        self.assertEqual(download[0]["with"]["path"], step["working-directory"])
        self.assertEqual(step["env"]["GH_TOKEN"], "${{ github.token }}")
        self.assertRegex(step["run"], r"gh release create \"\$TAG\"")
        self.assertRegex(step["run"], r"sha256sum lodge_\*\.deb >SHA256SUMS")

    def test_every_action_is_pinned_to_a_major_version(self):
        uses = [(job, step["uses"]) for job, _, step in every_step(self.wf) if "uses" in step]
        self.assertTrue(uses)
        for job, ref in uses:
            self.assertRegex(ref, r"^[\w.-]+/[\w.-]+@v\d+$", f"job {job}: {ref} is not owner/action@vN")
        self.assertEqual({u.split("@")[0] for _, u in uses},
                         {"actions/checkout", "actions/upload-artifact", "actions/download-artifact"})

    def test_every_script_and_path_named_exists(self):
        created = self.created_paths()
        named = set()
        for job, _, step in every_step(self.wf):
            # A here-document is text (the release notes), not a command naming a file.
            for path in REPO_PATH.findall(HEREDOC.sub("", step.get("run", ""))):
                named.add(path)
                rel = path[2:] if path.startswith("./") else path
                if rel.split("/")[0] in created:
                    continue
                self.assertTrue(glob.glob(os.path.join(SOURCE_DIR, rel)), f"job {job}: {path} is not in the repository")
                if rel.startswith("scripts/") and "*" not in rel:
                    self.assertTrue(os.access(os.path.join(SOURCE_DIR, rel), os.X_OK), f"{rel} is not executable")
        self.assertLessEqual({"scripts/deps", "scripts/build", "scripts/package", "CMakeLists.txt"}, named)

    def created_paths(self):
        """The folders the workflow makes itself: mkdir -p DIR, *_DIR=DIR, an artifact's path."""
        made = set()
        for _, _, step in every_step(self.wf):
            run = step.get("run", "")
            made.update(re.findall(r"mkdir -p (\S+)", run))
            made.update(re.findall(r"\b\w+_DIR=([\w.-]+)", run))
            if "path" in step.get("with", {}):
                made.add(step["with"]["path"].split("/")[0])
        return made

    def test_every_run_is_bash_and_parses(self):
        self.assertEqual(self.wf["defaults"]["run"]["shell"], "bash")
        for job_name, job, step in every_step(self.wf):
            if "run" not in step:
                continue
            shell = shell_of(self.wf, job, step)
            self.assertEqual(shell, "bash", f"job {job_name}, step {step.get('name')}")
            p = subprocess.run(["bash", "-n"], input=step["run"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, f"job {job_name}, step {step.get('name')}: {p.stderr}")

    def test_no_expression_inside_a_script(self):
        # GitHub pastes ${{ }} into the script before the shell reads it (a tag name would be
        # code); the values go through env, where the shell reads them as data.
        for job, _, step in every_step(self.wf):
            self.assertNotIn("${{", step.get("run", ""), f"job {job}, step {step.get('name')}")


@unittest.skipIf(yaml is None, "python3-yaml is not installed (scripts/packages.txt lists it)")
class Steps(unittest.TestCase):
    """The steps' scripts run here, on stand-ins for what only GitHub's runners have."""

    def setUp(self):
        self.wf = load_workflow()
        self.version = project_version()
        self.tmp = tempfile.mkdtemp(prefix="lodge-release-")
        self.addCleanup(shutil.rmtree, self.tmp)
        self.arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                                   check=True).stdout.strip()

    def context(self, **kw):
        c = {"github.ref_type": "tag", "github.ref_name": f"v{self.version}", "github.repository": "OWNER/lodge",
             "github.token": "token-of-the-run", "needs.version.outputs.version": self.version,
             "matrix.dist": release_dist()}
        c.update({k.replace("__", "."): v for k, v in kw.items()})
        return c

    def outputs(self):
        out = {}
        path = os.path.join(self.tmp, "github-output")
        if os.path.exists(path):
            with open(path) as f:
                out = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        return out

    # The version check: it reads the repository's own CMakeLists.txt (cwd: the checkout).
    def version_check(self, **context):
        step = step_named(self.wf, "version", "version")
        return run_step(self.wf, "version", dict(step, **{"working-directory": SOURCE_DIR}),
                        self.context(**context), self.tmp)

    def test_the_tag_of_the_version_passes_and_outputs_it(self):
        p = self.version_check()
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertEqual(self.outputs(), {"version": self.version})

    def test_another_tag_fails(self):
        for tag in ("v9.9.9", self.version, f"v{self.version}-rc1", f"v{self.version}.1"):
            with self.subTest(tag=tag):
                p = self.version_check(github__ref_name=tag)
                self.assertNotEqual(p.returncode, 0, f"{tag} passed")
                self.assertIn(f"::error::the tag {tag} is not v{self.version}", p.stdout)
                self.assertNotIn("version", self.outputs())

    def test_a_branch_run_by_hand_packages_the_version(self):
        p = self.version_check(github__ref_type="branch", github__ref_name="main")
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertEqual(self.outputs(), {"version": self.version})

    # The packaging step: scripts/package is a stand-in that builds a real (tiny) .deb of the
    # given version with dpkg-deb and prints its path last, as the script does.
    def package_step(self, deb_version=None, **context):
        os.makedirs(os.path.join(self.tmp, "scripts"))
        stub = os.path.join(self.tmp, "scripts", "package")
        with open(stub, "w") as f:
            f.write(f"""#!/bin/sh
set -e
echo "building in $PACKAGE_BUILD_DIR"
mkdir -p "$PACKAGE_BUILD_DIR/root/DEBIAN" "$BUILD_DIR"
printf 'Package: lodge\\nVersion: {deb_version or self.version}\\nArchitecture: {self.arch}\\n\
Maintainer: t <t@example.org>\\nDescription: t\\n' >"$PACKAGE_BUILD_DIR/root/DEBIAN/control"
dpkg-deb --build "$PACKAGE_BUILD_DIR/root" "$BUILD_DIR/lodge_{deb_version or self.version}_{self.arch}.deb" >/dev/null
echo "$(cd "$BUILD_DIR" && pwd)/lodge_{deb_version or self.version}_{self.arch}.deb"
""")
        os.chmod(stub, 0o755)
        step = step_named(self.wf, "package", "Package")
        return run_step(self.wf, "package", step, self.context(**context), self.tmp)

    def test_the_deb_is_renamed_to_its_asset_name(self):
        p = self.package_step()
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        asset = f"assets/lodge_{self.version}_{self.arch}_{release_dist()}.deb"
        self.assertEqual(p.stdout.splitlines()[-1], asset)
        self.assertEqual(sorted(os.listdir(os.path.join(self.tmp, "assets"))), [os.path.basename(asset)])
        # What the upload step's pattern takes.
        self.assertEqual(glob.glob(os.path.join(self.tmp, "assets/*.deb")), [os.path.join(self.tmp, asset)])

    def test_a_container_that_is_not_the_matrix_dist_fails(self):
        p = self.package_step(matrix__dist="ubuntu99.04")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"this container is {release_dist()}, the matrix says ubuntu99.04", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "assets")))

    def test_a_deb_of_another_version_fails(self):
        p = self.package_step(deb_version="0.0.1")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"is version 0.0.1, the release is {self.version}", p.stdout)

    # The release step: gh is a stand-in that records its arguments; `gh release view` answers
    # as if the release did (RELEASE_EXISTS=1) or did not exist.
    def release_step(self, dists, exists=False):
        assets = os.path.join(self.tmp, "assets")
        os.makedirs(assets)
        for dist in dists:
            with open(os.path.join(assets, f"lodge_{self.version}_{self.arch}_{dist}.deb"), "wb") as f:
                f.write(f"package for {dist}\n".encode())
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        with open(os.path.join(bin_dir, "gh"), "w") as f:
            f.write(f"""#!/bin/sh
[ "$1 $2" = "release view" ] && exit {0 if exists else 1}
printf '%s\\n' "GH_TOKEN=$GH_TOKEN GH_REPO=$GH_REPO" "$@" >"{self.tmp}/gh-args"
""")
        os.chmod(os.path.join(bin_dir, "gh"), 0o755)
        step = step_named(self.wf, "release", "SHA256SUMS")
        p = run_step(self.wf, "release", step, self.context(), self.tmp, path_prefix=bin_dir)
        gh = None
        if os.path.exists(os.path.join(self.tmp, "gh-args")):
            with open(os.path.join(self.tmp, "gh-args")) as f:
                gh = f.read().splitlines()
        return p, assets, gh

    def debs(self):
        return [f"lodge_{self.version}_{self.arch}_{d}.deb" for d in sorted(CONTAINERS.values())]

    def test_sha256sums_and_the_release_with_every_asset(self):
        p, assets, gh = self.release_step(CONTAINERS.values())
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        with open(os.path.join(assets, "SHA256SUMS")) as f:
            sums = f.read().splitlines()
        expected = []
        for deb in self.debs():
            with open(os.path.join(assets, deb), "rb") as f:
                expected.append(f"{hashlib.sha256(f.read()).hexdigest()}  {deb}")
        self.assertEqual(sums, expected, "sha256sum's format, one line per .deb")
        # What a user runs with the asset of one distribution beside SHA256SUMS.
        check = subprocess.run(["sha256sum", "--check", "--ignore-missing", "SHA256SUMS"], cwd=assets,
                               capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(gh[0], "GH_TOKEN=token-of-the-run GH_REPO=OWNER/lodge")
        self.assertEqual(gh[1:6], ["release", "create", f"v{self.version}", "--title", f"lodge {self.version}"])
        self.assertEqual(gh[6:8], ["--notes-file", "notes.md"])
        self.assertEqual(gh[8:], self.debs() + ["SHA256SUMS"])
        with open(os.path.join(assets, "notes.md")) as f:
            notes = f.read()
        self.assertIn("    sha256sum --check --ignore-missing SHA256SUMS\n", notes)
        self.assertIn(f"    sudo apt install ./lodge_{self.version}_<arch>_<dist>.deb\n", notes)

    def test_a_release_made_by_hand_gets_the_assets(self):
        p, _, gh = self.release_step(CONTAINERS.values(), exists=True)
        self.assertEqual(p.returncode, 0, p.stderr + p.stdout)
        self.assertEqual(gh[1:], ["release", "upload", f"v{self.version}", "--clobber"] + self.debs() + ["SHA256SUMS"])

    def test_a_missing_distribution_releases_nothing(self):
        p, assets, gh = self.release_step(["debian12", "ubuntu24.04"])
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"::error::no lodge_{self.version}_<arch>_ubuntu22.04.deb", p.stdout)
        self.assertIsNone(gh, "gh was called")
        self.assertFalse(os.path.exists(os.path.join(assets, "SHA256SUMS")))


class Readme(unittest.TestCase):
    """README's Install and CONTRIBUTING's Releasing say what the workflow does."""

    def section(self, title, document="README.md"):
        with open(os.path.join(SOURCE_DIR, document)) as f:
            text = f.read()
        m = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        self.assertIsNotNone(m, f"{document} has no section {title}")
        return m.group(1)

    def test_the_install_lines_name_the_asset_of_this_machine(self):
        install = self.section("Install")
        block = re.search(r"```sh[^\n]*\n(.*?)```", install, re.S).group(1)
        lines = [line for line in block.splitlines() if line.startswith(("version=", "deb=", "base="))]
        self.assertEqual(len(lines), 3, block)
        p = subprocess.run(["bash", "-c", "\n".join(lines) + '\necho "$version $deb $base"'],
                           capture_output=True, text=True, check=True)
        version, deb, base = p.stdout.split()
        arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
        # The name the workflow's package step gives this machine's distribution, at the URL
        # the CI templates download from.
        self.assertEqual(deb, f"lodge_{version}_{arch}_{release_dist()}.deb")
        self.assertEqual(base, f"https://github.com/OWNER/lodge/releases/download/v{version}")
        self.assertIn("sha256sum --check --ignore-missing SHA256SUMS && sudo apt install", block)
        for dist in CONTAINERS.values():
            self.assertIn(f"`{dist}`", install)

    def test_releasing_names_what_the_workflow_runs(self):
        releasing = self.section("Releasing", "CONTRIBUTING.md")
        for name in SERVERLESS_TESTS | {"scripts/deps build", "scripts/build", "scripts/package", "SHA256SUMS"}:
            self.assertIn(f"`{name}`", releasing)
        for image in CONTAINERS:
            self.assertIn(f"`{image}`", releasing)
        self.assertIn("git push origin vX.Y.Z", releasing)
        self.assertIn("`project(lodge VERSION X.Y.Z ...)`", releasing)

    def test_license(self):
        with open(os.path.join(SOURCE_DIR, "README.md")) as f:
            readme = f.read()
        self.assertRegex(readme, r"\n## License\n\nlodge is licensed under the Apache License, Version 2\.0: "
                                 r"see \[LICENSE\]\(LICENSE\)")
        with open(os.path.join(SOURCE_DIR, "LICENSE")) as f:
            self.assertIn("Apache License\n                           Version 2.0, January 2004", f.read())
        with open(os.path.join(SOURCE_DIR, "dist", "debian", "copyright")) as f:
            copyright = f.read()
        self.assertEqual(re.findall(r"^License: (.*)$", copyright, re.M), ["Apache-2.0"] * 3)
        self.assertIn("/usr/share/common-licenses/Apache-2.0", copyright)


if __name__ == "__main__":
    main()
