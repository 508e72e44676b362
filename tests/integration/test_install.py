"""What an installed lodge carries: `lodge --version` (its libraries, as they report themselves),
the systemd units of dist/systemd (each parses; each job and schedule is docs/operations.md's; each
scores at most 2.0 in systemd-analyze security; each runs as its command line says), the
textfile step of lodge-status (dist/libexec/publish-textfile) and the one default ledger of the
units, the example crontab and the example configuration."""

import ctypes
import json
import os
import pwd
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, LodgeTestCase, SOURCE_DIR, main  # noqa: E402

UNITS_SRC = os.path.join(SOURCE_DIR, "dist", "systemd")
UNITS_BUILT = os.path.join(os.path.dirname(LODGE), "systemd")
PUBLISH = os.path.join(SOURCE_DIR, "dist", "libexec", "publish-textfile")
INSTALLED_PUBLISH = "/usr/libexec/lodge/publish-textfile"
EXAMPLES = os.path.join(SOURCE_DIR, "dist", "examples")
JOBS = ("sweep", "repair", "reconcile", "status", "confirm", "prune")
LEDGER = "/var/lib/lodge/ledger.db"
TEXTFILE = "/var/lib/lodge/lodge.prom"


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
    `dest` with ExecStart naming the built binary (verify checks that it is executable) and
    ExecStopPost the source's publish-textfile."""
    paths = []
    for job in JOBS:
        for src in (os.path.join(UNITS_BUILT, f"lodge-{job}.service"), os.path.join(UNITS_SRC, f"lodge-{job}.timer")):
            with open(src) as f:
                text = f.read()
            text = re.sub(r"^ExecStart=\S+", f"ExecStart={LODGE}", text, flags=re.M)
            text = text.replace(INSTALLED_PUBLISH, PUBLISH)
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


def all_values(d, key):
    """Every value of `key` in directives(), as a list (none, one or several lines)."""
    v = d.get(key, [])
    return v if isinstance(v, list) else [v]


def unit_environment(d):
    """The unit's Environment= lines as a dict (each line one VAR=value here)."""
    return dict(v.split("=", 1) for v in all_values(d, "Environment"))


def crontab_lines(text):
    """(environment assignments, job lines) of a crontab: comments and blank lines dropped."""
    env, jobs = {}, []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            k, v = line.split("=", 1)
            env[k] = v
        else:
            jobs.append(line)
    return env, jobs


def guide_crontab_block():
    """The first cron block of "Running from cron" in docs/operations.md (the lodge user's crontab)."""
    with open(os.path.join(SOURCE_DIR, "docs", "operations.md")) as f:
        text = f.read()
    return text.split("## Running from cron", 1)[1].split("```cron", 1)[1].split("```", 1)[0]


def guide_crontab():
    """Job name -> (cron schedule fields, command words) from docs/operations.md's "Running from cron"."""
    _, lines = crontab_lines(guide_crontab_block())
    jobs = {}
    for line in lines:
        words = line.split("#")[0].split()
        schedule, command = words[:5], words[5:]
        job = command[2]
        jobs.setdefault(job, []).append((schedule, command))
    return jobs


# The sandbox's settings (what test_the_score_would_catch_a_unit_without_its_sandbox drops).
SANDBOX_KEYS = {
    "UMask", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateUsers",
    "NoNewPrivileges", "CapabilityBoundingSet", "AmbientCapabilities", "ProtectKernelTunables",
    "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname",
    "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
    "MemoryDenyWriteExecute", "RemoveIPC", "KeyringMode", "DevicePolicy", "SystemCallArchitectures",
    "SystemCallFilter", "SystemCallErrorNumber", "StateDirectory", "ReadWritePaths"}


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

    def services(self):
        return [p for p in units_for_verify(self.dir) if p.endswith(".service")]

    def test_each_service_is_a_sandboxed_oneshot_as_the_lodge_user(self):
        for path in self.services():
            d = directives(path)
            with self.subTest(unit=os.path.basename(path)):
                self.assertEqual(d["Type"], "oneshot")
                self.assertEqual(d["User"], "lodge")
                self.assertEqual(d["EnvironmentFile"], "-/etc/default/lodge")
                self.assertEqual(d["StateDirectory"], "lodge")
                self.assertEqual(d["ProtectSystem"], "strict")
                self.assertEqual(d["ReadWritePaths"].split(), ["/var/lib/lodge"])
                for k in ("NoNewPrivileges", "PrivateTmp", "PrivateDevices", "PrivateUsers"):
                    self.assertEqual(d[k], "true", k)
                # Uploads read any path the administrator names: home directories stay readable.
                self.assertEqual(d["ProtectHome"], "read-only")
                self.assertEqual(d["RestrictAddressFamilies"].split(), ["AF_UNIX", "AF_INET", "AF_INET6"])
                self.assertEqual(d["CapabilityBoundingSet"], "")
                # XDG_DATA_HOME=/var/lib: lodge's default ledger is in the writable directory.
                self.assertEqual(unit_environment(d)["XDG_DATA_HOME"], "/var/lib")
                # Idle until configured: the package enables the timers on install.
                self.assertEqual(all_values(d, "ConditionPathExists"),
                                 ["|/etc/default/lodge", "|/etc/lodge/config.json"])

    def test_every_service_has_the_same_sandbox(self):
        # One sandbox for the six jobs: the lines from StateDirectory= to the end of [Service].
        sandboxes = set()
        for path in self.services():
            with open(path) as f:
                text = f.read()
            sandboxes.add(text[text.index("StateDirectory="):])
        self.assertEqual(len(sandboxes), 1)

    def security(self, path):
        """systemd-analyze security's overall exposure of the unit file: (score, the output)."""
        p = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", path],
                           capture_output=True, text=True, cwd=self.dir)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+) ", p.stdout)
        self.assertIsNotNone(m, p.stdout + p.stderr)
        return float(m.group(1)), p.stdout

    def test_each_service_scores_at_most_2_in_systemd_analyze_security(self):
        for path in self.services():
            with self.subTest(unit=os.path.basename(path)):
                score, out = self.security(path)
                self.assertLessEqual(score, 2.0, out)

    def test_the_score_would_catch_a_unit_without_its_sandbox(self):
        # The check above means something: the units as they were (user, ProtectSystem,
        # ProtectHome, PrivateTmp, NoNewPrivileges only) scored 8.5.
        path = self.services()[0]
        with open(path) as f:
            text = f.read()
        keep = ("StateDirectory", "ReadWritePaths", "ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges")
        text = "\n".join(line for line in text.splitlines()
                         if not re.match(r"^[A-Z]\w*=", line) or line.split("=")[0] not in SANDBOX_KEYS
                         or line.split("=")[0] in keep)
        with open(path, "w") as f:
            f.write(text + "\n")
        score, out = self.security(path)
        self.assertGreater(score, 2.0, out)

    def test_the_three_settings_that_do_not_fit_lodge_are_off_and_said_why(self):
        for path in self.services():
            d = directives(path)
            with open(path) as f:
                comments = "".join(line for line in f if line.startswith("#"))
            with self.subTest(unit=os.path.basename(path)):
                # lodge calls setrlimit (its open-file limit): @resources stays allowed.
                self.assertIn("@system-service", all_values(d, "SystemCallFilter"))
                self.assertFalse([v for v in all_values(d, "SystemCallFilter") if "@resources" in v])
                # It reads /proc/sys/kernel/random/boot_id, and other users' /proc/PID/stat.
                self.assertNotIn("ProcSubset", d)
                self.assertNotIn("ProtectProc", d)
                for setting, why in (("SystemCallFilter=~@resources", "setrlimit"), ("ProcSubset=pid", "boot id"),
                                     ("ProtectProc=invisible", "other users' uploads")):
                    self.assertRegex(comments, rf"# - {re.escape(setting)}: [^\n]*{re.escape(why)}")

    def test_jobs_and_schedules_are_the_operations_guides_crontabs(self):
        cron = guide_crontab()
        for job in JOBS:
            with self.subTest(job=job):
                service = directives(os.path.join(UNITS_BUILT, f"lodge-{job}.service"))
                timer = directives(os.path.join(UNITS_SRC, f"lodge-{job}.timer"))
                self.assertEqual(timer["Persistent"], "true")
                self.assertIn("RandomizedDelaySec", timer)
                args = service["ExecStart"].split()[1:]
                schedules = {tuple(s) for s, c in cron[job]}
                commands = [c[1:] for s, c in cron[job]]
                if job == "status":
                    # One unit does both status lines: the textfile, and --check's exit status
                    # (the unit fails, so OnFailure= alerts).
                    self.assertEqual(args, ["-q", "status", "--check", "--prometheus", TEXTFILE])
                    self.assertIn(["-q", "status", "--prometheus", TEXTFILE], commands)
                else:
                    self.assertIn(args, commands)
                self.assertIn(self.cron_of(timer["OnCalendar"]), schedules)

    def test_each_service_runs_as_its_command_lines_say(self):
        # Each ExecStart (and lodge-status's ExecStopPost) as the unit runs it, with the unit's
        # Environment= and an /etc/default/lodge naming a file:// store; /var/lib stands for a
        # directory of the test's (the user lodge and the sandbox need systemd, not here).
        var_lib = os.path.join(self.dir, "var-lib")
        textfile_dir = os.path.join(self.dir, "node-exporter")
        os.makedirs(os.path.join(var_lib, "lodge"))
        os.makedirs(textfile_dir)
        default = {"LODGE_STORE": f"file://{self.dir}/store", "LODGE_TEXTFILE_DIR": textfile_dir}

        def command_line(d, key):
            line = d[key].replace("/var/lib", var_lib).replace(INSTALLED_PUBLISH, PUBLISH)
            line = re.sub(r"^[-+@:!]+", "", line)
            env = {**unit_environment(d), **default}
            env["XDG_DATA_HOME"] = env["XDG_DATA_HOME"].replace("/var/lib", var_lib)
            words = [env.get(w[2:-1], "") if re.fullmatch(r"\$\{\w+\}", w) else w for w in line.split()]
            return words, env

        def run(words, env):
            e = {k: v for k, v in self.env.items() if k not in ("XDG_DATA_HOME", "LODGE_DB")}
            e.update(env)
            return subprocess.run(words, capture_output=True, text=True, env=e, timeout=120)

        services = {os.path.basename(p)[len("lodge-"):-len(".service")]: directives(p) for p in self.services()}
        words, env = command_line(services["sweep"], "ExecStart")
        p = run([LODGE, "-q", "init"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(os.path.join(var_lib, "lodge", "ledger.db")))
        for job in ("sweep", "repair", "confirm", "reconcile", "prune", "status"):
            with self.subTest(job=job):
                words, env = command_line(services[job], "ExecStart")
                self.assertEqual(words[0], LODGE)
                p = run(words, env)
                self.assertEqual(p.returncode, 0, f"{words}: {p.stdout}{p.stderr}")
        words, env = command_line(services["status"], "ExecStopPost")
        self.assertEqual(words, [PUBLISH, os.path.join(var_lib, "lodge", "lodge.prom"), textfile_dir, "lodge"])
        # As the current user here (the unit reads it as lodge): the same file, published.
        words[-1] = pwd.getpwuid(os.getuid()).pw_name
        p = run(words, env)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(textfile_dir, "lodge.prom")) as f:
            self.assertIn("lodge_health_ok 1\n", f.read())

    def test_the_status_unit_publishes_into_debians_textfile_directory(self):
        d = directives(os.path.join(UNITS_BUILT, "lodge-status.service"))
        env = unit_environment(d)
        # Debian's prometheus-node-exporter: --collector.textfile.directory's default there.
        self.assertEqual(env["LODGE_TEXTFILE_DIR"], "/var/lib/prometheus/node-exporter")
        self.assertEqual(d["ExecStopPost"], f"-+{INSTALLED_PUBLISH} {TEXTFILE} ${{LODGE_TEXTFILE_DIR}} lodge")
        # /etc/default/lodge is read after Environment= (its LODGE_TEXTFILE_DIR wins), and says so.
        with open(os.path.join(UNITS_BUILT, "lodge-status.service")) as f:
            lines = [line.split("=", 1)[0] for line in f if not line.startswith("#")]
        self.assertLess(max(i for i, k in enumerate(lines) if k == "Environment"), lines.index("EnvironmentFile"))
        with open(os.path.join(EXAMPLES, "etc-default-lodge")) as f:
            self.assertIn("#LODGE_TEXTFILE_DIR=/var/lib/prometheus/node-exporter\n", f.read())

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


class OneLedger(LodgeTestCase):
    """The units, the package's crontab (docs/operations.md's) and the example configuration name one
    ledger, /var/lib/lodge/ledger.db, as lodge itself resolves it."""

    def resolved_ledger(self, env, *args):
        # As the user lodge gets it (home /var/lib/lodge), from cron or a unit: nothing of
        # this machine's configuration (an empty --config stands for /etc/lodge/config.json).
        empty = self.write("empty.json", "{}")
        e = {"PATH": os.environ["PATH"], "HOME": "/var/lib/lodge", **env}
        argv = [LODGE, "--json"] + (list(args) or ["--config", empty]) + ["config"]
        p = subprocess.run(argv, capture_output=True, text=True, env=e, cwd=self.dir)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)["ledger"]

    def test_units_crontab_and_config_json_name_the_same_ledger(self):
        for job in JOBS:
            with self.subTest(unit=f"lodge-{job}.service"):
                d = directives(os.path.join(UNITS_BUILT, f"lodge-{job}.service"))
                self.assertEqual(self.resolved_ledger(unit_environment(d)), LEDGER)
        with open(os.path.join(EXAMPLES, "crontab")) as f:
            cron_env, _ = crontab_lines(f.read())
        self.assertEqual(self.resolved_ledger(cron_env), LEDGER)
        self.assertEqual(self.resolved_ledger({}, "--config", os.path.join(EXAMPLES, "config.json")), LEDGER)

    def test_without_its_environment_line_the_crontab_would_use_another_ledger(self):
        # What the crontab's XDG_DATA_HOME line is for: cron's HOME is lodge's home.
        self.assertEqual(self.resolved_ledger({}), "/var/lib/lodge/.local/share/lodge/ledger.db")

    def test_the_operations_guide_shows_the_packages_crontab(self):
        with open(os.path.join(EXAMPLES, "crontab")) as f:
            example = crontab_lines(f.read())
        guide = crontab_lines(guide_crontab_block())
        self.assertEqual(guide[0], example[0])
        # The same jobs (the guide's comments may point at its own sections).
        strip = lambda lines: [line.split("#")[0].rstrip() for line in lines]  # noqa: E731
        self.assertEqual(strip(guide[1]), strip(example[1]))

    def test_the_crontabs_textfile_is_where_the_lodge_user_writes(self):
        with open(os.path.join(EXAMPLES, "crontab")) as f:
            text = f.read()
        self.assertIn(f"lodge -q status --prometheus {TEXTFILE}\n", text)
        self.assertIn(f"root  {INSTALLED_PUBLISH} {TEXTFILE} /var/lib/prometheus/node-exporter\n", text)


class PublishTextfile(LodgeTestCase):
    """dist/libexec/publish-textfile: lodge-status's root step into node exporter's directory."""

    def setUp(self):
        super().setUp()
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.state = os.path.join(self.dir, "state")
        self.textfiles = os.path.join(self.dir, "textfiles")
        os.makedirs(self.state)
        self.src = os.path.join(self.state, "lodge.prom")
        r = self.lodge("init", env={"LODGE_STORE": f"file://{self.dir}/store"})
        self.assertEqual(r.rc, 0, r)
        r = self.lodge("-q", "status", "--prometheus", self.src)
        self.assertEqual(r.rc, 0, r)

    def publish(self, *args):
        return subprocess.run([PUBLISH, self.src, self.textfiles, *args], capture_output=True, text=True,
                              timeout=60)

    def test_publishes_a_copy_readable_by_node_exporter_atomically(self):
        os.makedirs(self.textfiles)
        os.utime(self.src, (1700000000.5, 1700000000.5))
        p = self.publish(self.user)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        dest = os.path.join(self.textfiles, "lodge.prom")
        with open(dest) as f, open(self.src) as g:
            self.assertEqual(f.read(), g.read())
        st = os.stat(dest)
        self.assertEqual(st.st_mode & 0o7777, 0o644)
        # The time lodge wrote it: node_textfile_mtime_seconds says how old the metrics are.
        self.assertEqual(st.st_mtime, 1700000000.5)
        # Only the file: no temporary file left for node exporter to read.
        self.assertEqual(os.listdir(self.textfiles), ["lodge.prom"])

    def test_a_missing_directory_is_said_once_and_is_not_a_failure(self):
        first = self.publish(self.user)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn(f"{self.textfiles} does not exist", first.stderr)
        self.assertIn("LODGE_TEXTFILE_DIR", first.stderr)
        again = self.publish(self.user)
        self.assertEqual((again.returncode, again.stderr), (0, ""))
        # Once it exists the file goes there, and its going away again is said again.
        os.makedirs(self.textfiles)
        p = self.publish(self.user)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertTrue(os.path.exists(os.path.join(self.textfiles, "lodge.prom")))
        shutil.rmtree(self.textfiles)
        p = self.publish(self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("does not exist", p.stderr)

    def test_an_empty_directory_turns_publishing_off(self):
        p = subprocess.run([PUBLISH, self.src, "", self.user], capture_output=True, text=True, timeout=60)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", ""))

    def test_a_missing_textfile_fails_the_step_and_keeps_the_published_one(self):
        os.makedirs(self.textfiles)
        self.assertEqual(self.publish(self.user).returncode, 0)
        os.unlink(self.src)
        p = self.publish(self.user)
        self.assertEqual(p.returncode, 1)
        self.assertIn("not a regular file", p.stderr)
        self.assertEqual(os.listdir(self.textfiles), ["lodge.prom"])

    def test_a_link_planted_by_the_lodge_user_does_not_publish_a_secret(self):
        # Root publishes, reading the textfile as the user whose directory holds it: a link
        # there to a file only root may read publishes nothing. Needs root and another user.
        if os.getuid() != 0:
            self.skipTest("needs root: the step drops to the lodge user (setpriv) as root does")
        nobody = pwd.getpwnam("nobody")
        os.chmod(self.dir, 0o755)
        os.chown(self.state, nobody.pw_uid, nobody.pw_gid)
        os.makedirs(self.textfiles)
        secret = self.write("shadow", "root:$y$secret-hash:19000:0:99999:7:::\n")
        os.chmod(secret, 0o600)
        os.unlink(self.src)
        os.symlink(secret, self.src)
        p = self.publish("nobody")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("cannot read it as nobody", p.stderr)
        self.assertEqual(os.listdir(self.textfiles), [])
        # The same link to a file nobody may read is published: it is the reading user that
        # stopped the secret, not the link.
        os.chmod(secret, 0o644)
        p = self.publish("nobody")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.textfiles, "lodge.prom")) as f:
            self.assertIn("secret-hash", f.read())

    def test_a_fifo_is_not_read(self):
        os.makedirs(self.textfiles)
        os.unlink(self.src)
        os.mkfifo(self.src)
        p = self.publish(self.user)
        self.assertEqual(p.returncode, 1)
        self.assertIn("not a regular file", p.stderr)
        self.assertEqual(os.listdir(self.textfiles), [])


if __name__ == "__main__":
    main()
