"""What an installed lodge carries: `lodge --version` (its libraries, as they report themselves)
and the systemd units of dist/systemd (each parses; each job and schedule is the README's)."""

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, SOURCE_DIR, main  # noqa: E402

UNITS_SRC = os.path.join(SOURCE_DIR, "dist", "systemd")
JOBS = ("sweep", "repair", "reconcile", "status", "confirm", "prune")


def linked_library(fragment):
    """The path of the shared library `fragment` (e.g. "libsqlite3.so") the built lodge loads."""
    out = subprocess.run(["ldd", LODGE], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if fragment in line and "=>" in line:
            return line.split("=>")[1].split("(")[0].strip()
    raise AssertionError(f"lodge does not link {fragment}:\n{out}")


class Version(LodgeTestCase):
    def test_text_names_lodge_and_each_library_as_loaded(self):
        r = self.lodge("--version", db=False)
        self.assertEqual(r.rc, 0, r)
        lines = r.out.splitlines()
        self.assertRegex(lines[0], r"^lodge \d+\.\d+\.\d+$")
        fields = dict(line.split(" ", 1) for line in lines[1:])
        self.assertEqual(set(fields), {"libcurl", "SQLite", "libpq", "libmagic"}, r.out)
        expected = self.library_versions()
        self.assertEqual(fields["libcurl"], f"{expected['libcurl']} ({expected['tls']})")
        self.assertEqual(fields["SQLite"], expected["sqlite"])
        self.assertEqual(fields["libpq"], expected["libpq"])
        self.assertEqual(fields["libmagic"], expected["libmagic"])

    def test_json_is_one_object_with_the_same_versions(self):
        for args in (("--json", "--version"), ("--version", "--json")):
            r = self.lodge(*args, db=False)
            self.assertEqual(r.rc, 0, r)
            self.assertEqual(len(r.out.splitlines()), 1, r.out)
            j = json.loads(r.out)
            text = self.lodge("--version", db=False).out.splitlines()
            self.assertEqual(f"lodge {j['lodge']}", text[0])
            expected = self.library_versions()
            self.assertEqual(j["libraries"], {
                "libcurl": {"version": expected["libcurl"], "tls": expected["tls"]},
                "sqlite": expected["sqlite"], "libpq": expected["libpq"], "libmagic": expected["libmagic"]})

    def test_versions_agree_with_the_libraries_tools(self):
        # The command-line tools of the same libraries, where installed, say the same.
        v = json.loads(self.lodge("--json", "--version", db=False).out)["libraries"]
        if shutil.which("curl"):
            first = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
            self.assertIn(f"libcurl/{v['libcurl']['version']} {v['libcurl']['tls']}", first)
        if shutil.which("sqlite3"):
            out = subprocess.run(["sqlite3", "--version"], capture_output=True, text=True).stdout
            self.assertEqual(out.split()[0], v["sqlite"])
        if shutil.which("file"):
            out = subprocess.run(["file", "--version"], capture_output=True, text=True).stdout
            self.assertEqual(out.splitlines()[0], f"file-{v['libmagic']}")
        self.assertRegex(v["libpq"], r"^\d+\.\d+$")

    def test_a_command_is_still_required_without_version(self):
        r = self.lodge(db=False)
        self.assertEqual(r.rc, 2, r)
        self.assertIn("no command given", r.err)

    @staticmethod
    def library_versions():
        """Each library's own answer, asked through ctypes of the very file lodge loads."""
        curl = ctypes.CDLL(linked_library("libcurl"))

        class CurlInfo(ctypes.Structure):
            _fields_ = [("age", ctypes.c_int), ("version", ctypes.c_char_p), ("version_num", ctypes.c_uint),
                        ("host", ctypes.c_char_p), ("features", ctypes.c_int), ("ssl_version", ctypes.c_char_p)]

        curl.curl_version_info.restype = ctypes.POINTER(CurlInfo)
        info = curl.curl_version_info(10).contents  # CURLVERSION_TENTH: any age >= 0 has these fields
        sqlite = ctypes.CDLL(linked_library("libsqlite3"))
        sqlite.sqlite3_libversion.restype = ctypes.c_char_p
        pq = ctypes.CDLL(linked_library("libpq"))
        pqv = pq.PQlibVersion()
        magic = ctypes.CDLL(linked_library("libmagic"))
        mv = magic.magic_version()
        return {"libcurl": info.version.decode(), "tls": info.ssl_version.decode(),
                "sqlite": sqlite.sqlite3_libversion().decode(), "libpq": f"{pqv // 10000}.{pqv % 10000}",
                "libmagic": f"{mv // 100}.{mv % 100:02d}"}


def units_for_verify(dest):
    """The built services (build/systemd, ExecStart as installed) and the timers, copied to
    `dest` with ExecStart naming the built binary (verify checks that it is executable)."""
    built = os.path.join(os.path.dirname(LODGE), "systemd")
    paths = []
    for job in JOBS:
        for src in (os.path.join(built, f"lodge-{job}.service"), os.path.join(UNITS_SRC, f"lodge-{job}.timer")):
            with open(src) as f:
                text = f.read()
            text = re.sub(r"^ExecStart=\S+", f"ExecStart={LODGE}", text, flags=re.M)
            path = os.path.join(dest, os.path.basename(src))
            with open(path, "w") as f:
                f.write(text)
            paths.append(path)
    return paths


def directives(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "[")):
                k, v = line.split("=", 1)
                out.setdefault(k, []).append(v)
    return {k: v[0] if len(v) == 1 else v for k, v in out.items()}


def readme_crontab():
    """Job name -> (cron schedule fields, command words) from README's "Running from cron"."""
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        text = f.read()
    block = text.split("## Running from cron", 1)[1].split("```cron", 1)[1].split("```", 1)[0]
    jobs = {}
    for line in block.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        words = line.split("#")[0].split()
        schedule, command = words[:5], words[5:]
        job = command[2]
        jobs.setdefault(job, []).append((schedule, command))
    return jobs


class SystemdUnits(LodgeTestCase):
    def setUp(self):
        super().setUp()
        if not shutil.which("systemd-analyze"):
            self.fail("systemd-analyze is missing: scripts/deps installs systemd (scripts/packages.txt)")

    def verify(self, paths):
        # --man=no: the man page is checked once installed (scripts/check-package).
        return subprocess.run(["systemd-analyze", "verify", "--man=no"] + paths, capture_output=True, text=True,
                              cwd=self.dir)

    def test_every_unit_verifies_without_a_word(self):
        paths = units_for_verify(self.dir)
        self.assertEqual(len(paths), 12)
        p = self.verify(paths)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout + p.stderr, "")

    def test_verify_would_catch_a_broken_unit(self):
        # The check above means something: a bad value is reported (verify still exits 0 on it).
        paths = units_for_verify(self.dir)
        service = paths[0]
        with open(service) as f:
            text = f.read()
        with open(service, "w") as f:
            f.write(text.replace("ProtectSystem=strict", "ProtectSystem=very"))
        p = self.verify([service])
        self.assertIn("Failed to parse protect system value", p.stdout + p.stderr)

    def test_each_service_is_a_sandboxed_oneshot_as_the_lodge_user(self):
        for path in units_for_verify(self.dir):
            if not path.endswith(".service"):
                continue
            d = directives(path)
            with self.subTest(unit=os.path.basename(path)):
                self.assertEqual(d["Type"], "oneshot")
                self.assertEqual(d["User"], "lodge")
                self.assertEqual(d["EnvironmentFile"], "-/etc/default/lodge")
                self.assertEqual(d["StateDirectory"], "lodge")
                self.assertEqual(d["ProtectSystem"], "strict")
                self.assertIn("/var/lib/lodge", d["ReadWritePaths"].split())
                for k in ("NoNewPrivileges", "PrivateTmp", "ProtectHome"):
                    self.assertEqual(d[k], "true", k)
                # XDG_DATA_HOME=/var/lib: lodge's default ledger is in the writable directory.
                self.assertEqual(d["Environment"], "XDG_DATA_HOME=/var/lib")

    def test_jobs_and_schedules_are_the_readme_crontabs(self):
        cron = readme_crontab()
        for job in JOBS:
            with self.subTest(job=job):
                service = directives(os.path.join(os.path.dirname(LODGE), "systemd", f"lodge-{job}.service"))
                timer = directives(os.path.join(UNITS_SRC, f"lodge-{job}.timer"))
                self.assertEqual(timer["Persistent"], "true")
                self.assertIn("RandomizedDelaySec", timer)
                args = service["ExecStart"].split()[1:]
                schedules = {tuple(s) for s, c in cron[job]}
                commands = [c[1:] for s, c in cron[job]]
                if job == "status":
                    # One unit does both status lines: the textfile, and --check's exit status
                    # (the unit fails, so OnFailure= alerts).
                    self.assertEqual(args, ["-q", "status", "--check", "--prometheus",
                                            "/var/lib/node_exporter/textfile/lodge.prom"])
                    self.assertIn(["-q", "status", "--prometheus", "/var/lib/node_exporter/textfile/lodge.prom"],
                                  commands)
                else:
                    self.assertIn(args, commands)
                self.assertIn(self.cron_of(timer["OnCalendar"]), schedules)

    @staticmethod
    def cron_of(on_calendar):
        """The crontab fields of the OnCalendar= expressions the units use."""
        table = {"minutely": ("*", "*", "*", "*", "*"), "*:0/5": ("*/5", "*", "*", "*", "*")}
        if on_calendar in table:
            return table[on_calendar]
        m = re.fullmatch(r"\*-\*-\* (\d\d):(\d\d):00", on_calendar)
        assert m, on_calendar
        return (str(int(m.group(2))), str(int(m.group(1))), "*", "*", "*")

    def test_the_calendar_expressions_parse_to_the_intervals(self):
        # systemd's own reading of each OnCalendar=, so cron_of's table cannot lie.
        for expr, normalized in (("minutely", "*-*-* *:*:00"), ("*:0/5", "*-*-* *:00/5:00"),
                                 ("*-*-* 03:17:00", "*-*-* 03:17:00")):
            p = subprocess.run(["systemd-analyze", "calendar", expr], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(f"Normalized form: {normalized}", p.stdout)


if __name__ == "__main__":
    main()
