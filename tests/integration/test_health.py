"""status --check catches every failure the jobs and uploads leave behind, one reason per line
(and in --json, each with a stable code); the Prometheus textfile is readable by node_exporter
and follows the text exposition format."""

import json
import math
import os
import re
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import FaultProxy, LodgeTestCase, S3TestCase, main  # noqa: E402


def reason_codes(result):
    return sorted(r["code"] for r in result.json()["reasons"])


class Health(LodgeTestCase):
    """A file:// store (the default): every failure but an unreachable store can be made here."""

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"
        self.store_dir = os.path.join(self.dir, ".local/share/lodge/store")

    def upload(self, name, data, env=None, *flags):
        r = self.lodge("upload", "--json", *flags, self.write(name, data), env=env)
        return r, r.json_lines()[0]

    def config(self, status):
        return self.write("config.json", json.dumps({"status": status}))

    def check(self, *args, later=None, env=None):
        """status --check --json: (result, sorted reason codes)."""
        r = self.lodge(*args, "status", "--check", "--json", later=later, env=env)
        return r, reason_codes(r)

    def test_reconcile_finding_dangling_records_makes_status_unhealthy(self):
        # The scenario: reconcile found dangling records (its job_run says failed) and
        # status --check still said `health ok`, exit 0.
        self.init()
        _, res = self.upload("a.txt", "a file whose object goes missing\n")
        os.unlink(os.path.join(self.store_dir, res["object_key"]))
        self.assertEqual(self.lodge("sweep").rc, 0)
        rec = self.lodge("reconcile")
        self.assertEqual(rec.rc, 1, rec)
        self.assertIn("dangling 1", rec.out)
        st = self.lodge("status", "--check")
        self.assertEqual(st.rc, 1, st)
        self.assertIn("UNHEALTHY", st.out)
        self.assertRegex(st.out, r"reconcile_findings: the last reconcile \(.* ago\) found 1 dangling")
        self.assertIn("lodge: error: the ledger is unhealthy: 1 problem (UNHEALTHY)", st.err)
        r, codes = self.check()
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(codes, ["reconcile_findings"])
        self.assertFalse(r.json()["healthy"])
        self.assertIn("1 dangling", r.json()["reasons"][0]["message"])
        # -q: the reasons alone, one line each, on stdout (what cron mails).
        q = self.lodge("-q", "status", "--check")
        self.assertEqual(q.rc, 1, q)
        self.assertEqual(len(q.out.splitlines()), 1, q)
        self.assertTrue(q.out.startswith("reconcile_findings: "), q)
        # A clean reconcile afterwards makes it healthy again.
        self.assertEqual(self.lodge("delete", str(res["id"])).rc, 0)
        self.assertEqual(self.lodge("reconcile").rc, 0)
        r, codes = self.check()
        self.assertEqual((r.rc, codes), (0, []), r)

    def test_a_failed_job_run_is_unhealthy_until_the_job_succeeds(self):
        self.init()
        r = self.lodge("sweep", env={"LODGE_FAILPOINTS": "sweep.after_claim=error"})
        self.assertEqual(r.rc, 0, "no task is due: nothing claimed, the failpoint never fires")
        _, res = self.upload("a.txt", "confirmed never\n", {"LODGE_FAILPOINTS": "upload.confirm=error"})
        self.assertEqual(res["outcome"], "failed")
        sw = self.lodge("sweep", later="+30m", env={"LODGE_FAILPOINTS": "sweep.after_claim=error"})
        self.assertNotEqual(sw.rc, 0, sw)
        r, codes = self.check(later="+30m")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(codes, ["job_failed", "uploading_overdue"], "the sweep died before failing the row")
        self.assertIn("the last sweep", r.json()["reasons"][1]["message"])
        self.assertIn("injected failure after claiming", r.json()["reasons"][1]["message"])
        # Once the dead sweep's lease (2m) ran out, the next one takes the task and ends it.
        self.assertEqual(self.lodge("sweep", later="+33m").rc, 0)
        r, codes = self.check(later="+33m")
        self.assertEqual((r.rc, codes), (0, []), r)

    def test_a_job_that_has_not_run_within_its_interval_is_overdue(self):
        self.init()
        for job in ("sweep", "repair", "reconcile"):
            self.assertEqual(self.lodge(job).rc, 0)
        r, codes = self.check(later="+50m")
        self.assertEqual((r.rc, codes), (0, []), r)
        # Defaults: sweep and repair within 1h, reconcile within 8d.
        r, codes = self.check(later="+2h")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(codes, ["job_overdue", "job_overdue"])
        self.assertRegex(r.json()["reasons"][0]["message"], r"no (sweep|repair) for 2h.* \(limit 1h;")
        r, codes = self.check(later="+9d")
        self.assertEqual(codes, ["job_overdue"] * 3)
        # Each interval is a key.
        cfg = self.config({"sweep_max_age": "10d", "repair_max_age": "10d", "reconcile_max_age": "30d"})
        r, codes = self.check("--config", cfg, later="+9d")
        self.assertEqual((r.rc, codes), (0, []), r)

    def test_a_job_that_never_ran_is_overdue_only_when_required(self):
        self.init()
        self.assertEqual(self.lodge("sweep").rc, 0)
        # repair and reconcile never ran: not required by default.
        r, codes = self.check(later="+50m")
        self.assertEqual((r.rc, codes), (0, []), r)
        cfg = self.config({"required_jobs": ["sweep", "repair"]})
        r, codes = self.check("--config", cfg, later="+50m")
        self.assertEqual((r.rc, codes), (0, []), "the ledger is younger than repair's interval")
        r, codes = self.check("--config", cfg, later="+61m")
        self.assertEqual(r.rc, 1, r)
        self.assertEqual(codes, ["job_overdue", "job_overdue"])
        messages = " | ".join(x["message"] for x in r.json()["reasons"])
        self.assertIn("repair has never run on this ledger", messages)

    def test_sweep_never_run_is_required_by_default(self):
        self.init()
        r, codes = self.check(later="+2h")
        self.assertEqual(codes, ["job_overdue"])
        self.assertIn("sweep has never run", r.json()["reasons"][0]["message"])

    def test_dead_letters_and_overdue_uploads_have_their_codes(self):
        self.init()
        r = self.lodge("upload", self.write("a.txt", "killed\n"),
                       env={"LODGE_FAILPOINTS": "upload.after_reserve=crash"})
        self.assertNotEqual(r.rc, 0)
        self.assertEqual(self.lodge("sweep").rc, 0)
        r, codes = self.check(later="+16m")
        self.assertEqual(codes, ["uploading_overdue"], r)
        self.assertIn("1 upload past its deadline", r.json()["reasons"][0]["message"])
        self.sql_exec("UPDATE cleanup_task SET status = 'FAILED'")
        r, codes = self.check(later="+16m")
        self.assertEqual(codes, ["dead_letters", "uploading_overdue"], r)
        self.assertIn("1 cleanup task dead-lettered", json.dumps(r.json()["reasons"]))

    def test_failed_uploads_beyond_the_configured_rate_are_unhealthy(self):
        self.init()
        self.assertEqual(self.lodge("sweep").rc, 0)
        cfg = self.config({"upload_failed_max": 1, "upload_failed_window": "10m"})
        fail = {"LODGE_FAILPOINTS": "store.put=error"}  # the store refuses: UPLOAD_FAILED at once
        self.upload("a.txt", "one\n", fail)
        r, codes = self.check("--config", cfg)
        self.assertEqual((r.rc, codes), (0, []), "one failure is within the rate")
        self.upload("b.txt", "two\n", fail)
        r, codes = self.check("--config", cfg)
        self.assertEqual(codes, ["upload_failed_rate"], r)
        self.assertIn("2 uploads failed in the last 10m (limit 1;", r.json()["reasons"][0]["message"])
        self.assertEqual(self.lodge("sweep", later="+11m").rc, 0)
        r, codes = self.check("--config", cfg, later="+11m")
        self.assertEqual((r.rc, codes), (0, []), "older than the window")
        # The default: more than 10 an hour.
        r, codes = self.check()
        self.assertEqual((r.rc, codes), (0, []), r)

    def test_thresholds_are_validated(self):
        self.init()
        for status, want in (
                ({"sweep_max_age": "soon"}, "status.sweep_max_age: expected a duration"),
                ({"reconcile_max_age": 5}, "status.reconcile_max_age: expected a duration"),
                ({"upload_failed_max": -1}, "status.upload_failed_max: expected an integer from 0"),
                ({"upload_failed_window": "0s"}, "status.upload_failed_window: '0s' is too short"),
                ({"required_jobs": ["sweep", "nightly"]},
                 "status.required_jobs[1]: expected sweep, repair, reconcile, prune, relay or consume (got 'nightly')"),
                ({"required_jobs": "sweep"}, "status.required_jobs: expected a list of strings"),
                ({"prometheus_file_mode": "0999"},
                 "status.prometheus_file_mode: expected an octal mode like \"0644\""),
                ({"prometheus_file_mode": "04755"},
                 "status.prometheus_file_mode: expected an octal mode like \"0644\""),
                ({"prometheus_file_mode": 420},
                 "status.prometheus_file_mode: expected an octal mode like \"0644\""),
                ({"check_interval": "1h"}, "status.check_interval: unknown key")):
            r = self.lodge("--config", self.config(status), "status")
            self.assertEqual(r.rc, 2, (status, r))
            self.assertIn(want, r.err, status)
            self.assertIn("CONFIG_INVALID", r.err)

    def test_config_lists_every_status_key(self):
        j = self.lodge("--json", "config").json()
        self.assertEqual(j["status"], {
            "sweep_max_age": "1h", "repair_max_age": "1h", "reconcile_max_age": "8d", "prune_max_age": "2d",
            "relay_max_age": "1h", "consume_max_age": "1h", "required_jobs": ["sweep"], "upload_failed_max": 10, "upload_failed_window": "1h",
            "prometheus_file_mode": "0644"})


# The text exposition format (prometheus.io/docs/instrumenting/exposition_formats), parsed
# strictly: what promtool's `check metrics` would refuse fails here too.
METRIC = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
SAMPLE = re.compile(rf"^({METRIC})(\{{((?:{LABEL}=\"(?:[^\"\\\n]|\\[\\\"n])*\",?)*)\}})? (\S+)$")
LABEL_PAIR = re.compile(rf"({LABEL})=\"((?:[^\"\\\n]|\\[\\\"n])*)\"")
VALUE = re.compile(r"^(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)|[+-]Inf|NaN)$")


def parse_exposition(text):
    """{family: {"type": t, "help": h, "samples": {(name, labels): value}}}; raises
    AssertionError on anything the format does not allow."""
    assert text.endswith("\n"), "the last line must end with a newline"
    families, order, current = {}, [], None
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}: {line!r}"
        assert line and line == line.strip(), f"{where}: empty or padded"
        if line.startswith("#"):
            parts = line.split(" ", 3)
            assert parts[0] == "#" and parts[1] in ("HELP", "TYPE") and len(parts) == 4, where
            name = parts[2]
            assert re.fullmatch(METRIC, name), where
            fam = families.setdefault(name, {"type": None, "help": None, "samples": {}})
            if name not in order:
                order.append(name)
            assert current in (None, name) or not fam["samples"], f"{where}: family {name} split"
            key = parts[1].lower()
            assert fam[key] is None, f"{where}: a second {parts[1]} for {name}"
            assert not fam["samples"], f"{where}: {parts[1]} after the samples"
            if key == "type":
                assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), where
            fam[key] = parts[3]
            current = name
            continue
        m = SAMPLE.match(line)
        assert m, f"{where}: not a sample"
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        assert VALUE.match(value), f"{where}: value {value!r} (no exponent: timestamps must be exact)"
        pairs = tuple(LABEL_PAIR.findall(labels))
        assert len({k for k, _ in pairs}) == len(pairs), f"{where}: a label twice"
        assert name == current, f"{where}: sample of {name} outside its family ({current})"
        fam = families[name]
        assert fam["type"] is not None and fam["help"] is not None, f"{where}: no TYPE/HELP first"
        if fam["type"] == "counter":
            assert name.endswith("_total"), f"{where}: a counter's name ends in _total"
        else:
            assert not name.endswith("_total"), f"{where}: only counters end in _total"
        assert (name, pairs) not in fam["samples"], f"{where}: the same series twice"
        fam["samples"][(name, pairs)] = float(value)
    for name, fam in families.items():
        assert fam["samples"], f"family {name} has no samples"
    return families


class Prometheus(LodgeTestCase):

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"
        self.out = os.path.join(self.dir, "lodge.prom")

    def test_the_textfile_is_world_readable_under_umask_022(self):
        # node_exporter runs as its own user: a 0600 file (lodge's umask 077) is unreadable.
        self.init()
        self.assertEqual(self.lodge("-q", "status", "--prometheus", self.out, umask=0o022).rc, 0)
        self.assertEqual(stat.S_IMODE(os.stat(self.out).st_mode), 0o644)
        # It replaces an older file atomically, with the same mode.
        os.chmod(self.out, 0o600)
        self.assertEqual(self.lodge("-q", "status", "--prometheus", self.out).rc, 0)
        self.assertEqual(stat.S_IMODE(os.stat(self.out).st_mode), 0o644)
        self.assertEqual([f for f in os.listdir(self.dir) if ".prom" in f], ["lodge.prom"])

    def test_the_mode_is_configurable(self):
        self.init()
        cfg = self.write("c.json", json.dumps({"status": {"prometheus_file_mode": "0640"}}))
        self.assertEqual(self.lodge("--config", cfg, "-q", "status", "--prometheus", self.out).rc, 0)
        self.assertEqual(stat.S_IMODE(os.stat(self.out).st_mode), 0o640)

    def test_metrics_follow_the_exposition_format_and_prometheus_names(self):
        self.init()
        self.assertEqual(self.lodge("upload", self.write("a.txt", "kept\n")).rc, 0)
        for job in ("sweep", "repair"):
            self.assertEqual(self.lodge(job).rc, 0)
        self.lodge("upload", self.write("b.txt", "failed\n"), env={"LODGE_FAILPOINTS": "store.put=error"})
        self.assertEqual(self.lodge("-q", "status", "--prometheus", self.out).rc, 0)
        with open(self.out) as f:
            text = f.read()
        fams = parse_exposition(text)
        for name, fam in fams.items():
            self.assertTrue(name.startswith("lodge_"), name)
            self.assertEqual(fam["type"], "gauge", name)
        files = {dict(labels)["state"]: v for (_, labels), v in fams["lodge_files"]["samples"].items()}
        self.assertEqual(files, {"UPLOADING": 0, "ACTIVE": 1, "UPLOAD_FAILED": 1, "DELETED": 0})
        last_run = fams["lodge_job_last_run_timestamp_seconds"]["samples"]
        ok = fams["lodge_job_last_success_timestamp_seconds"]["samples"]
        ledger_runs = dict(self.sql("SELECT job, max(finished_at) FROM job_run GROUP BY job"))
        self.assertEqual({dict(lb)["job"]: v for (_, lb), v in last_run.items()},
                         {job: ms / 1000 for job, ms in ledger_runs.items()})
        self.assertEqual({dict(lb)["job"] for (_, lb) in ok}, {"sweep", "repair"})
        # Exact to the millisecond: "1.79611e+09" was over 1,000 s off.
        line = next(l for l in text.splitlines() if l.startswith('lodge_job_last_run_timestamp_seconds{job="sweep"}'))
        self.assertRegex(line, r" [0-9]{10}\.[0-9]{3}$")
        self.assertEqual(math.floor(float(line.split()[-1]) * 1000), ledger_runs["sweep"])
        self.assertEqual(fams["lodge_dead_letters"]["samples"], {("lodge_dead_letters", ()): 0})
        self.assertEqual(fams["lodge_health_ok"]["samples"], {("lodge_health_ok", ()): 1})
        reasons = {dict(lb)["code"]: v for (_, lb), v in fams["lodge_health_reasons"]["samples"].items()}
        self.assertEqual(set(reasons), {"ledger_diverged", "dead_letters", "uploading_overdue", "lease_expired",
                                        "job_failed", "job_overdue", "store_unreachable", "upload_failed_rate",
                                        "reconcile_findings"})
        self.assertEqual(set(reasons.values()), {0})
        self.assertIn("lodge_upload_failed_recent", fams)

    def test_an_unhealthy_ledger_shows_in_the_textfile(self):
        self.init()
        self.assertEqual(self.lodge("-q", "status", "--prometheus", self.out, later="+2h").rc, 0)
        with open(self.out) as f:
            fams = parse_exposition(f.read())
        self.assertEqual(fams["lodge_health_ok"]["samples"], {("lodge_health_ok", ()): 0})
        reasons = {dict(lb)["code"]: v for (_, lb), v in fams["lodge_health_reasons"]["samples"].items()}
        self.assertEqual(reasons["job_overdue"], 1)

    def test_the_parser_refuses_what_the_format_forbids(self):
        good = "# HELP a_b x\n# TYPE a_b gauge\na_b{l=\"v\"} 1\n"
        parse_exposition(good)
        for bad in ("# HELP a_b x\n# TYPE a_b gauge\na_b 1.79611e+09\n",  # no exponent
                    "a_b 1\n",  # no TYPE first
                    "# HELP a_b x\n# TYPE a_b gauge\na_b 1\na_b 2\n",  # the same series twice
                    "# HELP a_b x\n# TYPE a_b counter\na_b 1\n",  # a counter without _total
                    "# HELP a_b x\n# TYPE a_b gauge\na_b{l=\"v\",l=\"w\"} 1\n",
                    "# HELP a_b x\n# TYPE a_b gauge\na_b 1",  # no final newline
                    "# HELP a-b x\n# TYPE a-b gauge\na-b 1\n"):
            with self.assertRaises(AssertionError, msg=bad):
                parse_exposition(bad)


class Unreachable(S3TestCase):

    def test_sweeps_that_cannot_reach_the_store_are_unhealthy(self):
        self.assertEqual(self.lodge("sweep").rc, 0)
        r = self.lodge("upload", "--json", self.write("a.txt", "stays behind\n"),
                       env={"LODGE_FAILPOINTS": "upload.confirm=error"})
        self.assertEqual(r.json_lines()[0]["outcome"], "failed")
        proxy = FaultProxy(self.moto.port, self.dir)
        self.rebind({"AWS_ENDPOINT_URL": proxy.endpoint})
        proxy.stop()  # nothing listens there now: connection refused
        env = {"AWS_ENDPOINT_URL": proxy.endpoint, "AWS_MAX_ATTEMPTS": "1"}
        sw = self.lodge("sweep", later="+30m", env=env)
        self.assertEqual(sw.rc, 4, sw)
        st = self.lodge("status", "--check", "--json", later="+30m")
        self.assertEqual(st.rc, 1, st)
        self.assertEqual(reason_codes(st), ["store_unreachable", "uploading_overdue"], st)
        reason = next(x for x in st.json()["reasons"] if x["code"] == "store_unreachable")
        self.assertIn("the last sweep", reason["message"])
        self.assertIn("could not reach the store", reason["message"])


if __name__ == "__main__":
    main()
