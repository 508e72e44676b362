"""Every (failpoint, action) pair the binary declares (`lodge debug failpoints`), run for
real: the real binary against moto_server, the scenario that reaches the point, the
firing checked in LODGE_FAILPOINTS_LOG, and the effect asserted — crash: killed by
SIGKILL; error: the operation reports the failure with the right code and the ledger
stays consistent (and converges); sleep: fired, normal result; pause: blocks until the
file exists, then the normal result. A point added to the table without a scenario here
fails test_every_point_has_a_scenario."""

import concurrent.futures
import copy
import json
import os
import signal
import sys
import types
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import Result, S3TestCase, check_invariants, converge, main, wait_until  # noqa: E402

CONFIG = {
    # These scenarios test the deadline rule, which every row of another host, boot or
    # container keeps: the crashed run's rows are not failed early here (that path is
    # test_killed_runs.py's).
    "fail_killed_runs": False,
    "policies": {"default": {"max_size": "64MiB", "deadline": "10s", "grace": "5s"}},
    "multipart_threshold": "6MiB", "part_size": "5MiB",
    "sweep": {"lease": "30s", "max_retries": 3, "backoff_base": "1s", "backoff_max": "4s"},
    "status": {"sweep_max_age": "1d"},
}
LATER = "+20s"  # past deadline (10s) + grace (5s)
# Pairs exercised at once: each has its own ledger, bucket, directory and log, and spends most
# of its time starting lodge and waiting on moto.
PARALLEL_PAIRS = 4
STRAY = "lodge/stray.bin"  # an object no lodge wrote


class Point:
    """How to reach one failpoint, and what its normal and its `error` outcome are."""

    def __init__(self, prep, run, normal, error=None, extra="", strays=(), config=None):
        self.prep = prep        # tc -> state (what exists before the run)
        self.run = run          # tc, state -> (args, later)
        self.normal = normal    # tc, state, Result: the point fired but did no harm
        self.error = error      # tc, state, Result: the injected fault (None: refuses error)
        self.extra = extra      # more of the spec the scenario needs ("store.put=error")
        self.strays = strays    # objects the scenario puts there that no row owns
        self.config = config or {}  # configuration keys over CONFIG (the ledger is bound with them)


# --- what exists before the run ---

def prep_file(tc, size=0):
    data = os.urandom(size) if size else f"failpoint {uuid.uuid4()}\n".encode()
    return {"path": tc.write(f"in/{uuid.uuid4().hex}.bin" if size else f"in/{uuid.uuid4().hex}.txt", data)}


def prep_big(tc):
    return prep_file(tc, 7 << 20)  # two parts of the 5MiB part size


def prep_deleted(tc):
    st = prep_file(tc)
    r = tc.lodge("upload", "--json", st["path"])
    tc.assertEqual(r.rc, 0, r)
    st["id"] = r.json_lines()[0]["id"]
    st["key"] = r.json_lines()[0]["object_key"]
    d = tc.lodge("delete", st["id"])
    tc.assertEqual(d.rc, 0, d)
    return st


def prep_unconfirmed(tc):
    st = prep_file(tc)
    r = tc.lodge("upload", "--json", st["path"], env={"LODGE_FAILPOINTS": "upload.confirm=error"})
    st["id"] = r.json_lines()[0]["id"]
    tc.assertEqual(tc.row(st["id"])[0], "UPLOADING")
    return st


def prep_stray(tc):
    tc.s3.put_object(Bucket=tc.bucket, Key=STRAY, Body=b"not lodge's")
    return {}


def prep_uploaded(tc):
    st = prep_file(tc)
    tc.assertEqual(tc.lodge("upload", st["path"]).rc, 0)
    return st


# --- the commands ---

def run_upload(tc, st):
    return ["upload", "--json", st["path"]], None


def run_sweep(tc, st):
    return ["sweep", "--json"], LATER


def run_repair(tc, st):
    return ["repair", "--json"], LATER


def run_reconcile(tc, st):
    return ["reconcile", "--json", "--older-than", "0"], None


# --- outcomes ---

def file_result(tc, r):
    lines = [j for j in r.json_lines() if "summary" not in j]
    tc.assertEqual(len(lines), 1, r)
    return lines[0]


def active(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    res = file_result(tc, r)
    tc.assertEqual(res["outcome"], "active", r)
    tc.assertEqual(tc.row(res["id"])[:2], ("ACTIVE", 0))
    tc.assertEqual(tc.task(res["id"]), "IGNORED")
    tc.assertIn(res["object_key"], tc.objects())


def failed_with(code, status, task, object_kept, rc):
    def check(tc, st, r):
        tc.assertEqual(r.rc, rc, r)
        res = file_result(tc, r)
        tc.assertEqual((res["outcome"], res["error"]["code"]), ("failed", code), r)
        tc.assertEqual(tc.row(res["id"])[:2], status, r)
        tc.assertEqual(tc.task(res["id"]), task, r)
        tc.assertEqual(res["object_key"] in tc.objects(), object_kept, r)
        tc.assertEqual(tc.uploads_in_progress(), [], "no multipart upload left behind")
    return check


def failed_resumable(tc, st, r):
    # A part failed: the row fails, its staged upload is kept (its cleanup waits for the
    # grace), and the next upload of the file resumes it from the stored first part.
    tc.assertEqual(r.rc, 1, r)
    res = file_result(tc, r)
    tc.assertEqual((res["outcome"], res["error"]["code"]), ("failed", "STORAGE_UNAVAILABLE"), r)
    tc.assertEqual(tc.row(res["id"])[:2], FAILED, r)
    tc.assertEqual(tc.task(res["id"]), "PENDING", r)
    tc.assertEqual(tc.uploads_in_progress(), [res["object_key"]], "the staged upload is kept")
    again = tc.lodge("upload", "--json", st["path"])
    tc.assertEqual(again.rc, 0, again)
    res2 = file_result(tc, again)
    tc.assertEqual((res2["outcome"], res2["id"]), ("active", res["id"]), again)
    # Part 1 was stored (the failpoint turned its success into the failure); part 2 too when
    # it was sent alongside.
    tc.assertIn(res2["resumed_bytes"], (5 << 20, 7 << 20), again)
    tc.assertEqual(tc.uploads_in_progress(), [], again)


def rejected_unread(tc, st, r):
    # Refused before anything is recorded: no row, no task, no object.
    tc.assertEqual(r.rc, 1, r)
    res = file_result(tc, r)
    tc.assertEqual((res["outcome"], res["error"]["code"]), ("rejected", "UNREADABLE"), r)
    tc.assertIsNone(res["id"], r)
    tc.assertEqual(tc.sql("SELECT count(*) FROM file_upload"), [(0,)], r)
    tc.assertEqual(tc.objects(), {}, r)


def swept(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    tc.assertEqual(r.json()["deleted"], 1, r)
    tc.assertEqual(tc.task(st["id"]), "SUCCESS")
    tc.assertNotIn(st["key"], tc.objects())


def sweep_retried(rc, object_kept):
    def check(tc, st, r):
        tc.assertEqual(r.rc, rc, r)
        tc.assertEqual((r.json()["deleted"], r.json()["retried"]), (0, 1), r)
        tc.assertEqual(tc.task(st["id"]), "RETRY")
        tc.assertEqual(st["key"] in tc.objects(), object_kept, r)
    return check


def sweep_failed_after_claim(tc, st, r):
    # The run dies after its claim: recorded failed, the task keeps its lease until it
    # expires (converge then sweeps it), the object is untouched.
    tc.assertEqual(r.rc, 1, r)
    tc.assertEqual(r.json()["error"]["code"], "INTERNAL", r)
    tc.assertEqual(tc.task(st["id"]), "PROCESSING")
    tc.assertIn(st["key"], tc.objects())
    runs = tc.sql("SELECT outcome FROM job_run WHERE job = 'sweep' ORDER BY id DESC LIMIT 1")
    tc.assertEqual(runs, [("failed",)], "a sweep that failed leaves a failed job_run")


# --- cleanup through a queue (moto's SQS, on the same server as the bucket) ---

def prep_queued(tc):
    """A deleted file on a ledger whose cleanup runs through a fresh SQS queue."""
    cfg = dict(CONFIG, cleanup={"via": "queue",
                                "queue": f"sqs+{tc.moto.endpoint}/123456789012/q{uuid.uuid4().hex[:12]}"})
    tc.env["LODGE_CONFIG"] = tc.write("config.json", json.dumps(cfg))
    tc.init("--cleanup-via", "queue")
    return prep_deleted(tc)


def prep_relayed(tc):
    st = prep_queued(tc)
    r = tc.lodge("relay", "--json", later=LATER)
    tc.assertEqual((r.rc, r.json()["cleanup_published"]), (0, 1), r)
    return st


def run_relay(tc, st):
    return ["relay", "--json"], LATER


def run_consume(tc, st):
    return ["consume", "--json", "--wait", "1s"], LATER


def sent(tc, st):
    return tc.sql("SELECT sent_at IS NOT NULL FROM cleanup_task WHERE record_id = ?", (st["id"],))[0][0] == 1


def relayed(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    tc.assertEqual((r.json()["cleanup_published"], r.json()["cleanup_marked"]), (1, 1), r)
    tc.assertTrue(sent(tc, st))
    tc.assertIn(st["key"], tc.objects())


def relay_failed_after_publish(tc, st, r):
    # The broker has the message, the ledger no mark: the next relay publishes it again.
    tc.assertEqual(r.rc, 1, r)
    tc.assertEqual(r.json()["error"]["code"], "INTERNAL", r)
    tc.assertFalse(sent(tc, st))
    again = tc.lodge("relay", "--json", later=LATER)
    tc.assertEqual((again.rc, again.json()["cleanup_published"]), (0, 1), again)


def consumed(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    tc.assertEqual((r.json()["received"], r.json()["deleted"]), (1, 1), r)
    tc.assertEqual(tc.task(st["id"]), "SUCCESS")
    tc.assertNotIn(st["key"], tc.objects())


def consume_failed_before_ack(tc, st, r):
    # The delete is done and committed; only the acknowledgement is missing.
    tc.assertEqual(r.rc, 1, r)
    tc.assertEqual(r.json()["error"]["code"], "INTERNAL", r)
    tc.assertEqual(tc.task(st["id"]), "SUCCESS")
    tc.assertNotIn(st["key"], tc.objects())


def repaired(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    tc.assertEqual(r.json()["repaired"], 1, r)
    tc.assertEqual(tc.row(st["id"])[:2], ("UPLOAD_FAILED", 1))


def repair_rolled_back(tc, st, r):
    tc.assertEqual(r.rc, 1, r)
    tc.assertEqual(r.json()["error"]["code"], "INTERNAL", r)
    tc.assertEqual(tc.row(st["id"])[:2], ("UPLOADING", 0))
    tc.assertEqual(tc.task(st["id"]), "PENDING")


def found(kind):
    def check(tc, st, r):
        # Another writer's object is counted, not a finding (exit 0, unless --strict).
        tc.assertEqual(r.rc, 0 if kind in ("unmanaged", "foreign") else 1, r)
        counts = r.json()["found"]
        tc.assertEqual({k: v for k, v in counts.items() if v}, {kind: 1}, r)
        tc.assertIn(STRAY, tc.objects(), "reconcile touched an object it cannot tell is its own")
    return check


def orphan_aborted_by_reconcile(tc, st, r):
    active(tc, st, r)
    res = file_result(tc, r)
    tc.assertEqual(tc.uploads_in_progress(), [res["object_key"]], "the lost create's upload is left")
    rec = tc.lodge("reconcile", "--apply", "--json", "--older-than", "0")
    tc.assertEqual([(i["kind"], i["applied"]) for i in rec.json()["items"]], [("stale_multipart", True)], rec)
    tc.assertEqual(tc.uploads_in_progress(), [])


def reconciled_clean(tc, st, r):
    tc.assertEqual(r.rc, 0, r)
    tc.assertTrue(r.json()["clean"], r)


def storage_unavailable(tc, st, r):
    tc.assertEqual(r.rc, 4, r)
    tc.assertEqual(r.json()["error"]["code"], "STORAGE_UNAVAILABLE", r)


def state_tags(tc, key):
    """The object's tags, as S3 keeps them."""
    return {t["Key"]: t["Value"] for t in tc.s3.get_object_tagging(Bucket=tc.bucket, Key=key)["TagSet"]}


def active_tagged(tc, st, r):
    active(tc, st, r)
    tc.assertEqual(state_tags(tc, file_result(tc, r)["object_key"]), {"lodge-state": "committed"})


def tag_owed(tc, st, r):
    # The tag failed after the confirm: the file is stored (ACTIVE), its object still tagged
    # pending, the debt recorded on its task; the next sweep sets the tag.
    tc.assertEqual(r.rc, 0, r)
    res = file_result(tc, r)
    tc.assertEqual(res["outcome"], "active", r)
    tc.assertIn("lodge sweep tags it later", r.err)
    tc.assertEqual(tc.row(res["id"])[:2], UPLOADED)
    tc.assertEqual(tc.sql("SELECT status, tag_owed FROM cleanup_task WHERE record_id = ?", (res["id"],)),
                   [("PENDING", 1)])
    tc.assertEqual(state_tags(tc, res["object_key"]), {"lodge-state": "pending"})
    s = tc.lodge("sweep", "--json", later=LATER)
    tc.assertEqual(s.rc, 0, s)
    tc.assertEqual((s.json()["ignored"], s.json()["deleted"]), (1, 0), s)
    tc.assertEqual(state_tags(tc, res["object_key"]), {"lodge-state": "committed"})
    tc.assertEqual(tc.task(res["id"]), "IGNORED")


UPLOADED = ("ACTIVE", 0)
FAILED = ("UPLOAD_FAILED", 1)
UPLOADING = ("UPLOADING", 0)

POINTS = {
    "upload.after_walk": Point(prep_file, run_upload, active),
    "upload.before_read": Point(prep_file, run_upload, active, rejected_unread),
    "upload.while_hashing": Point(prep_big, run_upload, active),
    "upload.before_reserve": Point(prep_file, run_upload, active),
    "upload.after_reserve": Point(prep_file, run_upload, active),
    "upload.before_put": Point(prep_file, run_upload, active,
                               failed_with("STORAGE_UNAVAILABLE", FAILED, "SUCCESS", False, 1)),
    # The object landed but the answer was lost: the cleanup waits for the grace.
    "upload.after_put": Point(prep_file, run_upload, active,
                              failed_with("STORAGE_UNAVAILABLE", FAILED, "PENDING", True, 4)),
    "upload.confirm": Point(prep_file, run_upload, active,
                            failed_with("INTERNAL", UPLOADING, "PENDING", True, 1)),
    "upload.mark_failed": Point(prep_file, run_upload,
                                failed_with("STORAGE_UNAVAILABLE", FAILED, "SUCCESS", False, 1),
                                failed_with("STORAGE_UNAVAILABLE", UPLOADING, "PENDING", False, 1),
                                extra="store.put=error"),
    "upload.between_parts": Point(prep_big, run_upload, active, failed_resumable),
    "upload.after_part": Point(prep_big, run_upload, active),
    "sweep.after_claim": Point(prep_deleted, run_sweep, swept, sweep_failed_after_claim),
    # The delete happened but its answer was lost: retried, and the retry finds nothing.
    "sweep.after_delete": Point(prep_deleted, run_sweep, swept, sweep_retried(4, False)),
    # The broker confirmed but the relay died before marking: a duplicate, which owes nothing.
    "relay.after_publish": Point(prep_queued, run_relay, relayed, relay_failed_after_publish),
    # The delete committed but the ack never went: the message comes back and finds it done.
    "consume.before_ack": Point(prep_relayed, run_consume, consumed, consume_failed_before_ack),
    "repair.before_commit": Point(prep_unconfirmed, run_repair, repaired, repair_rolled_back),
    "store.put": Point(prep_file, run_upload, active,
                       failed_with("STORAGE_UNAVAILABLE", FAILED, "SUCCESS", False, 1)),
    # The first create's answer was lost: the upload completes on the second, and the first
    # stays incomplete at its ACTIVE row's key until reconcile --apply aborts it.
    "store.after_create": Point(prep_big, run_upload, active, orphan_aborted_by_reconcile),
    "store.delete": Point(prep_deleted, run_sweep, swept, sweep_retried(0, True)),
    "store.head": Point(prep_stray, run_reconcile, found("unmanaged"), found("unknown"), strays=(STRAY,)),
    "store.list": Point(prep_uploaded, run_reconcile, reconciled_clean, storage_unavailable),
    # On a store that tags objects: the tag after the confirm fails; the row stays ACTIVE.
    "store.tag": Point(prep_file, run_upload, active_tagged, tag_owed, config={"tag_state": True}),
}


class Failpoints(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.declared = {j["name"]: j["actions"] for j in self.lodge("debug", "failpoints", "--json").json_lines()}

    def fresh(self, name, action):
        """A new ledger, bucket and log for one pair."""
        tag = f"{name}-{action}".replace(".", "_")
        self.db = os.path.join(self.dir, f"{tag}.db")
        self.bucket = "b-" + uuid.uuid4().hex[:20]
        self.s3.create_bucket(Bucket=self.bucket)
        self.env["LODGE_STORE"] = f"s3://{self.bucket}/{self.prefix}"
        self.init()
        self.fplog = os.path.join(self.dir, f"{tag}.log")
        self.gate = os.path.join(self.dir, f"{tag}.gate")

    def fired(self):
        if not os.path.exists(self.fplog):
            return []
        with open(self.fplog) as f:
            return [line.split()[1] for line in f if line.strip()]

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (rid,))[0]

    def task(self, rid):
        return self.sql("SELECT status FROM cleanup_task WHERE record_id = ?", (rid,))[0][0]

    def pairs(self, action):
        for name, actions in sorted(self.declared.items()):
            if action in actions:
                yield name, POINTS[name]

    def exercise(self, name, point, action):
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(dict(CONFIG, **point.config)))
        self.fresh(name, action)
        st = point.prep(self)
        args, later = point.run(self, st)
        spec = {"crash": "crash", "error": "error", "sleep": "sleep:1", "pause": f"pause:{self.gate}"}[action]
        env = {"LODGE_FAILPOINTS": ";".join(s for s in (point.extra, f"{name}={spec}") if s),
               "LODGE_FAILPOINTS_LOG": self.fplog}
        if action == "pause":
            p = self.spawn(*args, env=env, later=later)
            wait_until(lambda: name in self.fired() or p.poll() is not None, 60, f"{name} to pause")
            if p.poll() is not None:
                self.fail(f"{name}=pause did not block: {p.communicate()}")
            open(self.gate, "w").close()
            out, err = p.communicate(timeout=120)
            r = Result(types.SimpleNamespace(returncode=p.returncode, stdout=out, stderr=err))
        else:
            r = self.lodge(*args, env=env, later=later)
        self.assertIn(name, self.fired(), f"{name}={spec} never fired: {r}")
        if action == "crash":
            self.assertEqual(r.rc, -signal.SIGKILL, r)
        elif action == "error":
            point.error(self, st, r)
        else:
            point.normal(self, st, r)
        # Whatever happened, the ledger and the bucket agree, and converge.
        objects = {k: v for k, v in self.objects().items() if k not in point.strays}
        check_invariants(self, objects)
        if not point.strays:
            converge(self)

    def test_every_point_has_a_scenario(self):
        self.assertEqual(sorted(self.declared), sorted(POINTS))
        for name, actions in self.declared.items():
            self.assertTrue({"crash", "sleep", "pause"} <= set(actions), name)
            self.assertEqual("error" in actions, POINTS[name].error is not None, name)

    def exercise_apart(self, name, point, action):
        """exercise() on a copy of this test whose directory (and with it its ledger, bucket,
        configuration and log) and environment are the pair's own, so that pairs run at once."""
        tc = copy.copy(self)
        tc.dir = os.path.join(self.dir, f"{name}-{action}")
        os.makedirs(tc.dir)
        tc.env = dict(self.env)
        tc.exercise(name, point, action)

    def exercise_every_pair(self, action):
        """Every pair of `action`, PARALLEL_PAIRS at once; each one's outcome (its failure
        raised again here) in a subtest of its own, in the table's order."""
        with concurrent.futures.ThreadPoolExecutor(PARALLEL_PAIRS) as pool:
            runs = [(name, pool.submit(self.exercise_apart, name, point, action))
                    for name, point in self.pairs(action)]
        for name, run in runs:
            with self.subTest(name):
                run.result()

    def test_crash(self):
        self.exercise_every_pair("crash")

    def test_error(self):
        self.exercise_every_pair("error")

    def test_sleep(self):
        self.exercise_every_pair("sleep")

    def test_pause(self):
        self.exercise_every_pair("pause")

    def test_a_refused_action_is_a_usage_error_naming_the_pair(self):
        refusing = [n for n, a in self.declared.items() if "error" not in a]
        self.assertTrue(refusing)
        for name in refusing:
            r = self.lodge("status", env={"LODGE_FAILPOINTS": f"{name}=error"})
            self.assertEqual(r.rc, 2, r)
            self.assertIn(f"{name}=error", r.err)
            self.assertIn("(USAGE)", r.err)


if __name__ == "__main__":
    main()
