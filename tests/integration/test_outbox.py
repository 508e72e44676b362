"""Outbox + MQ on real brokers: SQS from moto_server (the same server as the S3 store) and a
private RabbitMQ (tests/harness), on SQLite and PostgreSQL (the _pg entry). The recovery
table's rows in queue mode: a crash after the PUT (repair, relay, consume: the object gone,
the row failed, I7); a confirm before the event is due publishes nothing; an event published
for a row confirmed since is consumed and the object kept; the same message twice (a relay
killed after its publish and before marking it sent: a duplicate, harmless); a consumer
killed after the delete and before the ack (redelivered, converges); a store that refuses
deletes (retries with back-off, a dead letter in the broker's DLQ and in the ledger, status
--check unhealthy, lodge retry revives it); a forged message with a key lodge does not own
deletes nothing (I8). Upload events: every ACTIVE row yields exactly one file.active event id
(de-duplicated by the test's consumer) with relays killed at random, and the body matches the
row."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from brokers import RabbitMQ  # noqa: E402
from lodgetest import S3TestCase, check_invariants, converge, main, wait_until  # noqa: E402

DEADLINE = "20s"
LATER = "+2m"  # past every deadline and grace of the policy below
CONFIG = {"policies": {"default": {"deadline": DEADLINE, "grace": "1s"}},
          "sweep": {"max_retries": 2, "backoff_base": "1s", "backoff_max": "2s"}}


class OutboxMixin:
    """A queue per test on the class's broker; the ledger's cleanup runs through it. `wait` is
    how long a receive (consume, debug queue receive) waits for a message not there yet (the
    broker's class says); what the tests receive was published and confirmed before, so it is
    also what a run spends on the empty receive that ends it."""

    def setUp(self):
        super().setUp()
        name = "q" + uuid.uuid4().hex[:12]
        self.cleanup_url = self.queue_url(name)
        self.events_url = self.queue_url(name + "-ev")
        self.dlq_url = self.queue_url(name + "-dlq")
        self.configure()
        r = self.lodge("init", "--cleanup-via", "queue", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json()["cleanup_via"], "queue", r)
        self.uuid = r.json()["ledger_uuid"]

    def configure(self, events=None, **extra):
        cfg = json.loads(json.dumps(CONFIG))
        cfg["cleanup"] = {"via": "queue", "queue": self.cleanup_url}
        if events is not None:
            cfg["events"] = {"queue": self.events_url, "types": events}
        cfg.update(extra)
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(cfg))

    # --- the broker, as a test sees it (lodge debug queue: independent of relay/consume) ---
    def receive(self, url, ack=True, most=1000):
        args = ["debug", "queue", "receive", url, "--max", str(most), "--wait", self.wait]
        r = self.lodge(*(args + (["--ack"] if ack else [])))
        self.assertEqual(r.rc, 0, r)
        return [json.loads(line) for line in r.out.splitlines() if line.strip()]

    def publish(self, url, body):
        r = self.lodge("debug", "queue", "publish", url, json.dumps(body))
        self.assertEqual(r.rc, 0, r)

    def dead_letters(self):
        return [json.loads(m["body"]) if m["body"].startswith("{") else m["body"]
                for m in self.receive(self.dlq_url, ack=False)]

    # --- lodge ---
    def upload(self, name, data, env=None, check=True):
        path = self.write(name, data)
        r = self.lodge("upload", "--json", path, env=env)
        if check:
            self.assertEqual(r.rc, 0, r)
        return r

    def relay(self, *args, later=LATER, env=None, rc=0):
        r = self.lodge("relay", "--json", *args, later=later, env=env)
        if rc is not None:
            self.assertEqual(r.rc, rc, r)
        return r

    def consume(self, *args, later=LATER, env=None, rc=0, wait=None):
        r = self.lodge("consume", "--json", "--wait", wait or self.wait, *args, later=later, env=env)
        if rc is not None:
            self.assertEqual(r.rc, rc, r)
        return r

    def row(self, rid):
        return self.sql("SELECT upload_status, is_deleted FROM file_upload WHERE id = ?", (rid,))[0]

    def task(self, rid):
        return self.sql("SELECT id, status FROM cleanup_task WHERE record_id = ?", (rid,))[0]

    def assert_verify_pass_owed(self, rid):
        """A delete done and committed: the task waits (PENDING) for its verify pass
        (verify_pass 2: the next run is that pass), which sweep runs, not the queue."""
        self.assertEqual(self.sql("SELECT status, verify_pass, sent_at FROM cleanup_task WHERE record_id = ?",
                                  (rid,)), [("PENDING", 2, None)])

    def converged(self):
        """I7 in queue mode (the harness's converge runs repair, relay, consume, sweep), then
        once more past every back-off: nothing is left in flight."""
        converge(self, later="+1h", wait=self.wait)
        st = converge(self, later="+3h", wait=self.wait)
        self.assertEqual(st["outbox"]["cleanup_in_flight"], 0, st)
        check_invariants(self)

    def test_a_configuration_edited_since_init_is_named_and_the_ledger_record_runs(self):
        self.configure(events=["file.active"])
        r = self.relay(later=None)
        self.assertIn("events.types differ from what ledger", r.err)
        self.assertIn("`lodge init` records the configuration's", r.err)
        self.assertEqual(r.json()["events_published"], 0)  # the ledger records none: none written
        self.assertEqual(self.lodge("init", "--json").rc, 0)
        self.assertNotIn("warning", self.relay(later=None).err)

    # --- the recovery table in queue mode ---
    def test_crash_after_put_is_repaired_relayed_and_consumed(self):
        r = self.upload("a.bin", b"a" * 100, env={"LODGE_FAILPOINTS": "upload.after_put=crash"}, check=False)
        self.assertEqual(r.rc, -signal.SIGKILL, r)
        (rid, key, status), = self.sql("SELECT id, object_key, upload_status FROM file_upload")
        self.assertEqual(status, "UPLOADING")
        self.assertIn(key, self.objects())
        # Nothing is due before the deadline and grace: the relay sends nothing.
        self.assertEqual(self.relay(later=None).json()["cleanup_published"], 0)
        self.assertEqual(self.lodge("repair", later=LATER).rc, 0)
        self.assertEqual(self.row(rid), ("UPLOAD_FAILED", 1))
        self.assertEqual(self.relay().json()["cleanup_published"], 1)
        c = self.consume().json()
        self.assertEqual((c["received"], c["deleted"]), (1, 1), c)
        self.assertNotIn(key, self.objects())
        self.converged()

    def test_confirmed_upload_publishes_nothing(self):
        r = self.upload("ok.txt", b"kept\n")
        key = r.json_lines()[0]["object_key"]
        self.assertEqual(self.relay(later="+1d").json()["cleanup_published"], 0)
        self.assertEqual(self.receive(self.cleanup_url, ack=False), [])
        self.assertIn(key, self.objects())

    def test_event_for_a_row_confirmed_since_is_consumed_and_the_object_kept(self):
        path = self.write("late.bin", b"late" * 10)
        res = self.lodge("reserve", "--json", "late.bin", "--size", "40", "--sha256",
                         hashlib.sha256(b"late" * 10).hexdigest())
        self.assertEqual(res.rc, 0, res)
        plan = res.json()
        rid = plan["id"]
        cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", plan["method"], "--upload-file", path]
        for k, v in plan["headers"].items():
            cmd += ["-H", f"{k}: {v}"]
        put = subprocess.run(cmd + [plan["url"]], capture_output=True, text=True, timeout=60)
        self.assertIn(put.stdout, ("200", "201"), put)
        # Past its deadline (the presigned URL's hour) and grace by the relay's clock: the
        # cleanup event goes out...
        self.assertEqual(self.relay(later="+2h").json()["cleanup_published"], 1)
        # ...and then the confirm lands after all (the task is not held: the confirm wins).
        c = self.lodge("confirm", "--json", str(rid))
        self.assertEqual(c.rc, 0, c)
        got = self.consume(later="+2h").json()
        self.assertEqual((got["received"], got["duplicates"], got["deleted"]), (1, 1, 0), got)
        self.assertEqual(self.row(rid), ("ACTIVE", 0))
        self.assertIn(plan["object_key"], self.objects())
        self.assertEqual(self.task(rid)[1], "IGNORED")

    def test_relay_killed_after_publish_sends_a_duplicate_that_changes_nothing(self):
        r = self.upload("a.bin", b"x" * 10, env={"LODGE_FAILPOINTS": "upload.after_put=crash"}, check=False)
        self.assertEqual(r.rc, -signal.SIGKILL, r)
        (rid, key), = self.sql("SELECT id, object_key FROM file_upload")
        self.assertEqual(self.lodge("repair", later=LATER).rc, 0)
        k = self.relay(env={"LODGE_FAILPOINTS": "relay.after_publish=crash"}, rc=None)
        self.assertEqual(k.rc, -signal.SIGKILL, k)
        self.assertEqual(self.sql("SELECT sent_at FROM cleanup_task WHERE record_id = ?", (rid,)), [(None,)])
        self.assertEqual(self.relay().json()["cleanup_published"], 1)  # the same event, again
        c = self.consume().json()
        self.assertEqual((c["received"], c["deleted"], c["duplicates"]), (2, 1, 1), c)
        self.assertNotIn(key, self.objects())
        self.assert_verify_pass_owed(rid)
        self.converged()

    def test_consumer_killed_after_delete_before_ack_is_redelivered_and_converges(self):
        r = self.upload("a.bin", b"y" * 10, env={"LODGE_FAILPOINTS": "upload.after_put=crash"}, check=False)
        (rid, key), = self.sql("SELECT id, object_key FROM file_upload")
        self.assertEqual(self.lodge("repair", later=LATER).rc, 0)
        self.relay()
        # A short lease: SQS hands the message out again once it ends (the receive's visibility
        # timeout is the lease; the queue's own is 30 s), RabbitMQ once the connection closes.
        k = self.consume("--lease", "2s", env={"LODGE_FAILPOINTS": "consume.before_ack=crash"}, rc=None)
        self.assertEqual(k.rc, -signal.SIGKILL, k)
        self.assertNotIn(key, self.objects())
        self.assert_verify_pass_owed(rid)
        # The message comes back (the visibility timeout, or the closed connection).
        seen = {}

        def redelivered():
            c = self.consume(rc=None, wait="1s")  # each run waits a while for it
            self.assertEqual(c.rc, 0, c)
            seen.update(c.json())
            return c.json()["received"] >= 1
        wait_until(redelivered, timeout=15, what="the unacknowledged message to come back")
        self.assertEqual((seen["duplicates"], seen["deleted"]), (1, 0), seen)
        self.assertEqual(self.receive(self.cleanup_url, ack=False), [])
        self.converged()

    def test_a_store_refusing_deletes_ends_in_both_dead_letter_queues_then_retry_revives_it(self):
        r = self.upload("a.bin", b"z" * 10, env={"LODGE_FAILPOINTS": "upload.after_put=crash"}, check=False)
        (rid, key), = self.sql("SELECT id, object_key FROM file_upload")
        self.assertEqual(self.lodge("repair", later=LATER).rc, 0)
        self.relay()
        # max_retries 2: three refused deletes, each retry waiting out the ledger's back-off in
        # the broker (never handed straight back), then the dead letter. Following, each
        # receive waits (one that does not would ask the broker again and again meanwhile).
        c = self.consume("--follow", "--max-messages", "3", "--max-runtime", "60s",
                         env={"LODGE_FAILPOINTS": "store.delete=error"}, rc=None, wait="1s")
        self.assertEqual(c.rc, 1, c)
        got = c.json()
        self.assertEqual((got["received"], got["retried"], got["dead_lettered"], got["deleted"]), (3, 2, 1, 0), got)
        self.assertEqual(self.task(rid)[1], "FAILED")
        self.assertIn(key, self.objects())
        dead = self.dead_letters()
        self.assertEqual([m["task_id"] for m in dead if isinstance(m, dict)], [self.task(rid)[0]], dead)
        st = self.lodge("status", "--check", "--json", later=LATER)
        self.assertEqual(st.rc, 1, st)
        self.assertIn("dead_letters", [x["code"] for x in st.json()["reasons"]])
        self.assertEqual(st.json()["outbox"]["cleanup_dead_lettered"], 1, st.json())
        self.assertEqual(self.lodge("retry", str(self.task(rid)[0])).rc, 0)
        self.assertEqual(self.relay().json()["cleanup_published"], 1)
        self.assertEqual(self.consume().json()["deleted"], 1)
        self.assertNotIn(key, self.objects())
        self.converged()

    def test_a_forged_message_deletes_nothing(self):
        other = "lodge/other-tool/report.pdf"
        self.put_object(other, b"not lodge's")
        ok = self.upload("ok.txt", b"keep me").json_lines()[0]
        r = self.upload("a.bin", b"w" * 10, env={"LODGE_FAILPOINTS": "upload.after_put=crash"}, check=False)
        (rid, key), = self.sql("SELECT id, object_key FROM file_upload WHERE upload_status = 'UPLOADING'")
        tid = self.task(rid)[0]
        # A real, due task's id with another tool's key; the ACTIVE row's own task; another ledger.
        self.publish(self.cleanup_url, {"type": "cleanup", "ledger": self.uuid, "task_id": tid,
                                        "record_id": rid, "key": other})
        self.publish(self.cleanup_url, {"type": "cleanup", "ledger": self.uuid, "task_id": self.task(ok["id"])[0],
                                        "record_id": ok["id"], "key": ok["object_key"]})
        self.publish(self.cleanup_url, {"type": "cleanup", "ledger": str(uuid.uuid4()), "task_id": tid,
                                        "record_id": rid, "key": key})
        c = self.consume("--max-messages", "3", later=LATER, rc=1).json()
        self.assertEqual((c["received"], c["rejected"], c["duplicates"], c["deleted"]), (3, 2, 1, 0), c)
        objects = self.objects()
        self.assertIn(other, objects)
        self.assertIn(ok["object_key"], objects)
        self.assertIn(key, objects)
        self.assertEqual(len([m for m in self.dead_letters() if isinstance(m, dict)]), 2)

    # --- upload events ---
    def test_every_active_row_yields_exactly_one_file_active_event_with_relays_killed(self):
        self.configure(events=["file.active", "file.deleted", "file.failed"])
        r = self.lodge("init", "--json")
        self.assertEqual(r.rc, 0, r)
        self.assertEqual(r.json()["event_types"], ["file.active", "file.deleted", "file.failed"], r)
        rng = random.Random(7)
        for batch in range(3):
            d = os.path.join(self.dir, f"tree{batch}")
            os.makedirs(d)
            for i in range(10):
                with open(os.path.join(d, f"f{i}.txt"), "w") as f:
                    f.write(f"{batch}-{i}\n")
            follower = self.spawn("relay", "--follow", "--poll-interval", "50ms")
            up = self.lodge("upload", "--json", d)
            self.assertEqual(up.rc, 0, up)
            # Killed at a random moment of its work: no condition to await, the moment is the point.
            time.sleep(rng.uniform(0, 0.2))
            follower.send_signal(signal.SIGKILL)
            follower.wait()
            k = self.relay(later=None, env={"LODGE_FAILPOINTS": "relay.after_publish=crash"}, rc=None)
            self.assertIn(k.rc, (0, -signal.SIGKILL), k)
        self.assertEqual(self.lodge("delete", str(self.sql("SELECT MIN(id) FROM file_upload")[0][0])).rc, 0)
        self.relay(later=None)
        events = {}
        for m in self.receive(self.events_url):
            body = json.loads(m["body"])
            events.setdefault(body["id"], body)  # de-duplicated by the event's id
        rows = {r["id"]: r for r in self.ledger_files()}
        active = [e for e in events.values() if e["type"] == "file.active"]
        self.assertEqual(sorted(e["record_id"] for e in active), sorted(rows), "one file.active per row")
        self.assertEqual(len({e["record_id"] for e in active}), len(active))
        for e in active:
            row = rows[e["record_id"]]
            self.assertEqual((e["key"], e["size"], e["sha256"], e["owner"]),
                             (row["object_key"], row["size"], row["sha256"], row["owner"]))
            self.assertEqual(e["ledger"], self.uuid)
        deleted = [e for e in events.values() if e["type"] == "file.deleted"]
        self.assertEqual([e["record_id"] for e in deleted], [min(rows)])
        st = self.lodge("status", "--json").json()
        self.assertEqual(st["outbox"]["events_unsent"], 0, st)


class OutboxSqs(OutboxMixin, S3TestCase):
    # moto answers a receive that does not wait (WaitTimeSeconds 0) with every message visible
    # at once, as the one server it is; SQS's least wait otherwise is a whole second.
    wait = "0s"

    def queue_url(self, name):
        return f"sqs+{self.moto.endpoint}/123456789012/{name}"


class OutboxRabbit(OutboxMixin, S3TestCase):
    # A consumer's deliveries come after it subscribes: the first is waited for, from once the
    # consumer is subscribed (a message already queued comes within milliseconds on loopback).
    wait = "500ms"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rabbit = RabbitMQ()

    @classmethod
    def tearDownClass(cls):
        cls.rabbit.stop()
        super().tearDownClass()

    def queue_url(self, name):
        return self.rabbit.url(name)


if __name__ == "__main__":
    main()
