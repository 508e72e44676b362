"""One grammar for each kind of value: every size flag reads sizes alike, every duration flag
durations alike (VALUES in lodge.conf(5)), a flag and its configuration key share one
check, an empty value is refused by every flag, a configuration key given twice is refused, and
what the object and the ledger record of metadata is the same value."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, main  # noqa: E402

# Every size flag, as a command line with the value last.
SIZE_FLAGS = {
    "upload --part-size": ["upload", "-n", "{file}", "--part-size"],
    "upload --min-size": ["upload", "-n", "{file}", "--min-size"],
    "upload --max-size": ["upload", "-n", "{file}", "--max-size"],
    "upload --bwlimit": ["upload", "-n", "{file}", "--bwlimit"],
    "list --min-size": ["list", "--min-size"],
    "list --max-size": ["list", "--max-size"],
    "get --bwlimit": ["get", "--prefix", "nothing", "-o", "{dir}/out/", "--bwlimit"],
}
# 64 MiB in every spelling the grammar takes (in range for every flag), and what no flag takes.
SIZES_ACCEPTED = ["64M", "64m", "64Mi", "64MiB", "64mib", "67108864", "65536K", "65536KiB", "0.0625G",
                  "67108864B"]
SIZES_REFUSED = ["64MB", "64 M", "M", "-64M", "1e6", "64Q", "sixty", "0x40", "64MiB ", "1.2.3M"]

# Every duration flag (and --since/--until, which also take a time).
DURATION_FLAGS = {
    "upload --expire-after": ["upload", "-n", "{file}", "--expire-after"],
    "upload --min-age": ["upload", "-n", "{file}", "--min-age"],
    "upload --max-age": ["upload", "-n", "{file}", "--max-age"],
    "upload --in-progress-wait": ["upload", "-n", "{file}", "--in-progress-wait"],
    "upload --stats": ["upload", "-n", "{file}", "--stats"],
    "sweep --lease": ["sweep", "--dry-run", "--lease"],
    "sweep --max-runtime": ["sweep", "--dry-run", "--max-runtime"],
    "reconcile --older-than": ["reconcile", "--older-than"],
    "prune --keep-within": ["prune", "--dry-run", "--prefix-glob", "x/*", "--keep-within"],
    "list --since": ["list", "--since"],
    "list --until": ["list", "--until"],
    "url --expires": ["url", "1", "--expires"],
    "relay --poll-interval": ["relay", "--poll-interval"],
    "relay --max-runtime": ["relay", "--max-runtime"],
    "consume --lease": ["consume", "--lease"],
    "consume --wait": ["consume", "--wait"],
    "consume --max-runtime": ["consume", "--max-runtime"],
    "--ledger-timeout": ["config", "--ledger-timeout"],
}
DURATIONS_ACCEPTED = ["2w", "1d", "36h", "1h30m", "90s", "1.5h", "2d12h", "1500ms", "1w2d"]
DURATIONS_REFUSED = ["15", "1700000000", "1.5", "2 w", "1h 30m", "-1s", "soon", "1e3s", "2W", "1hh", "h",
                     "1h30"]


class Grammar(LodgeTestCase):

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        self.file = self.write("a.txt", "hello\n")

    def run_flag(self, argv, value):
        args = [a.format(file=self.file, dir=self.dir) for a in argv] + [value]
        return self.lodge(*args)

    def refused_by_grammar(self, r, flag):
        """The value itself was not read: USAGE, the flag named, "expected" what it takes (a
        value read but out of range says "too long" or "too short" instead)."""
        return r.rc == 2 and "(USAGE)" in r.err and f"{flag}: expected" in r.err

    def check_table(self, flags, accepted, refused):
        wrong = []
        for name, argv in flags.items():
            flag = name.split()[-1]
            for v in accepted:
                r = self.run_flag(argv, v)
                if self.refused_by_grammar(r, flag):
                    wrong.append(f"{name} {v!r} refused: {r.err.strip()}")
            for v in refused:
                r = self.run_flag(argv, v)
                if not self.refused_by_grammar(r, flag):
                    wrong.append(f"{name} {v!r} accepted (rc {r.rc}): {r.err.strip()}")
        self.assertEqual(wrong, [])

    def test_every_size_flag_reads_the_one_size_grammar(self):
        # --part-size 64M was refused while --min-size 10M was accepted.
        self.check_table(SIZE_FLAGS, SIZES_ACCEPTED, SIZES_REFUSED)

    def test_every_duration_flag_reads_the_one_duration_grammar(self):
        # 2w worked for --keep-within and --since, not for --expire-after or --lease.
        self.check_table(DURATION_FLAGS, DURATIONS_ACCEPTED, DURATIONS_REFUSED)

    def test_a_bare_number_is_bytes_for_every_size(self):
        # --min-size 4096 was 4096 KiB (rclone's default unit); part_size "4096" in the
        # configuration was 4096 bytes.
        big = self.write("big.bin", "x" * 5000)
        r = self.lodge("--json", "upload", "-n", big, "--min-size", "4096")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual([x.get("file") for x in r.json_lines() if "file" in x], [big])
        r = self.lodge("--json", "upload", "-n", big, "--max-size", "4096")
        self.assertEqual([x.get("file") for x in r.json_lines() if "file" in x], [])

    def test_a_bare_number_is_no_duration_except_zero(self):
        for argv in (["upload", "-n", self.file, "--min-age", "90"], ["sweep", "--lease", "120"]):
            r = self.lodge(*argv)
            self.assertEqual(r.rc, 2, r)
            self.assertIn("(USAGE)", r.err)
        self.assertEqual(self.lodge("reconcile", "--older-than", "0").rc, 0)


class SinceUntil(LodgeTestCase):

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"
        self.init()

    def test_digits_alone_and_impossible_dates_are_usage_errors(self):
        # --since 1700000000 was 1700000000 seconds back from now; 2025-02-29 was 1 March.
        for v in ("1700000000", "20250301", "0", "2025-02-29", "2025-04-31", "2025-13-01", "2025-00-10",
                  "2025-02-29T10:00:00Z", "2024-12-31T24:00:00Z", "2024-12-31T23:60:00Z"):
            for flag in ("--since", "--until"):
                r = self.lodge("list", flag, v)
                self.assertEqual(r.rc, 2, (flag, v, r))
                self.assertIn(f"{flag}: expected", r.err)
                self.assertIn("(USAGE)", r.err)
        for v in ("2024-02-29", "2024-02-29T23:59:59Z", "2024-02-29T23:59:59.5+01:00", "7d", "1h30m", "2w"):
            r = self.lodge("list", "--since", v)
            self.assertEqual(r.rc, 0, (v, r))


class ConfigValues(LodgeTestCase):

    def config(self, text):
        path = self.write("config.json", text)
        return self.lodge("--config", path, "--json", "config"), path

    def test_a_key_given_twice_is_refused_naming_the_key_the_file_and_the_line(self):
        # The last one won, silently.
        r, path = self.config('{\n  "jobs": 4,\n  "sweep": {"lease": "2m",\n  "lease": "5m"}\n}\n')
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{path}:4: sweep.lease: given twice", r.err)
        self.assertIn("(CONFIG_INVALID)", r.err)
        r, path = self.config('{"jobs": 4, "policies": {"a": {"deadline": "1m"}},\n"jobs": 5}')
        self.assertEqual(r.rc, 2, r)
        self.assertIn(f"{path}:2: jobs: given twice", r.err)
        # The same name in two different objects is no duplicate.
        r, _ = self.config('{"policies": {"a": {"deadline": "1m"}, "b": {"deadline": "1m"}}}')
        self.assertEqual(r.rc, 0, r)

    def test_a_flag_and_its_key_share_one_check(self):
        # sweep --lease 0s was accepted while "sweep": {"lease": "0s"} was refused.
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        pairs = [("--lease", ["sweep", "--dry-run", "--lease"], {"sweep": {"lease": None}}),
                 ("--part-size", ["upload", "-n", self.write("a.txt", "a\n"), "--part-size"], {"part_size": None}),
                 ("--in-progress-wait", ["upload", "-n", self.write("b.txt", "b\n"), "--in-progress-wait"],
                  {"in_progress_wait": None}),
                 ("--expire-after", ["upload", "-n", self.write("c.txt", "c\n"), "--expire-after"],
                  {"policies": {"default": {"expire_after": None}}}),
                 ("--stats", ["upload", "-n", self.write("d.txt", "d\n"), "--stats"], {"stats": None})]
        values = ["0", "0s", "1ms", "999ms", "1s", "2w", "1d", "25h", "36500d", "36501d", "5M", "64M", "6G"]

        def with_value(template, v):
            return {k: (v if x is None else with_value(x, v)) for k, x in template.items()}
        disagree = []
        for flag, argv, template in pairs:
            for v in values:
                by_flag = self.lodge(*(argv + [v]))
                cfg = self.write("k.json", json.dumps(with_value(template, v)))
                by_key = self.lodge("--config", cfg, "config")
                if (by_flag.rc == 2) != (by_key.rc == 2):
                    disagree.append(f"{flag} {v}: flag rc {by_flag.rc} {by_flag.err.strip()!r}, "
                                    f"key rc {by_key.rc} {by_key.err.strip()!r}")
        self.assertEqual(disagree, [])

    def test_metadata_with_spaces_at_either_end_is_refused_naming_the_key(self):
        # S3 trims header values: the object held "x", the ledger " x ".
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        f = self.write("a.txt", "a\n")
        for v in (" x", "x ", "\tx", "x\t"):
            r = self.lodge("upload", "--metadata", f"note={v}", f)
            self.assertEqual(r.rc, 2, (v, r))
            self.assertIn("note", r.err)
            self.assertIn("(USAGE)", r.err)
        r, _ = self.config(json.dumps({"policies": {"default": {"metadata": {"note": "x "}}}}))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("note", r.err)
        self.assertIn("(CONFIG_INVALID)", r.err)
        self.assertEqual(self.lodge("upload", "--metadata", "note=a b", f).rc, 0)


class EmptyValues(LodgeTestCase):

    def test_an_empty_value_is_a_usage_error_for_every_flag(self):
        # --expire-after "$UNSET" silently meant never; --db '' the default ledger.
        checked = 0
        wrong = []
        for cmd in ("upload", "list", "get", "sweep", "reconcile", "prune", "url", "reserve", "consume",
                    "relay", "status", "tasks", "delete", "show", "cat", "lifecycle", "config"):
            help_text = self.lodge(cmd, "--help").out
            for line in help_text.splitlines():
                # CLI11's option column: "  --name TYPE" padded to 30 characters, or longer
                # with the description on the next line; a flag has no TYPE.
                column = line[:30].split() if len(line) > 30 and line[29] == " " else line.split()
                if len(column) != 2 or not column[0].split(",")[-1].startswith("--"):
                    continue
                name = column[0].split(",")[-1]
                if name == "--prefix" and cmd in ("list", "get"):
                    continue  # '' is a value there: the files uploaded without a prefix
                r = self.lodge(cmd, name, "")
                checked += 1
                # The flag named, USAGE (an option with a fixed set or a range may say so instead).
                if not (r.rc == 2 and "(USAGE)" in r.err and f"{name}: " in r.err):
                    wrong.append(f"{cmd} {name}='': rc {r.rc} {r.err.strip()!r}")
        self.assertGreater(checked, 40)
        self.assertEqual(wrong, [])
        r = self.lodge("upload", "--expire-after", "", self.write("a.txt", "a\n"))
        self.assertEqual(r.rc, 2, r)
        self.assertIn("--expire-after: empty value: give a value, or leave the option out", r.err)

    def test_list_and_get_keep_the_empty_prefix_meaning_no_prefix(self):
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        self.assertEqual(self.lodge("list", "--prefix", "").rc, 0)


RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class JsonTimes(LodgeTestCase):

    def times(self, value, path=""):
        """Every (path, value) of a field that holds a time: *_at, since, prune's time."""
        if isinstance(value, dict):
            for k, v in value.items():
                if k.endswith("_at") or k in ("since", "time"):
                    yield f"{path}.{k}", v
                yield from self.times(v, f"{path}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                yield from self.times(v, f"{path}[{i}]")

    def test_every_time_in_json_output_is_rfc3339_utc_with_milliseconds(self):
        # list --json mixed epoch milliseconds (created_at) and RFC 3339 strings (expires_at).
        self.env["LODGE_OWNER"] = "ci"
        self.init()
        f = self.write("a.txt", "a\n")
        self.assertEqual(self.lodge("upload", "--prefix", "b/1", "--expire-after", "14d", f).rc, 0)
        self.assertEqual(self.lodge("sweep").rc, 0)
        self.assertEqual(self.lodge("delete", "1").rc, 0)
        outputs = {
            "list": self.lodge("--json", "list", "--all").json_lines(),
            "show": self.lodge("--json", "show", "1").json_lines(),
            "status": self.lodge("--json", "status").json_lines(),
            "tasks": self.lodge("--json", "tasks", "--status", "all").json_lines(),
            "prune": self.lodge("--json", "prune", "--dry-run", "--prefix-glob", "b/*", "--keep-last", "1")
            .json_lines(),
        }
        seen, wrong = 0, []
        for cmd, lines in outputs.items():
            for path, v in self.times(lines, cmd):
                if v is None:
                    continue
                seen += 1
                if not (isinstance(v, str) and RFC3339_MS.match(v)):
                    wrong.append(f"{path}: {v!r}")
        self.assertEqual(wrong, [])
        self.assertGreaterEqual(seen, 8)


class VersionInHelp(LodgeTestCase):

    def test_every_commands_help_lists_version(self):
        for cmd in ("upload", "list", "sweep", "status", "get"):
            r = self.lodge(cmd, "--help")
            self.assertEqual(r.rc, 0, r)
            self.assertIn("--version", r.out, cmd)


if __name__ == "__main__":
    main()
