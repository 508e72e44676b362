#!/usr/bin/env python3
"""The benchmark of scripts/bench (stdlib only): lodge side by side with rclone, curl and cp.

Starts, on free loopback ports, an nginx WebDAV PUT sink on tmpfs (a server with no cost of
its own: the physical limit for a client; config scripts/bench-nginx.conf), an nginx latency
sink that answers every PUT after a fixed delay (S3's first-byte latency; config
scripts/bench-echo-nginx.conf), moto_server (direct, and behind tests/harness/faultproxy.py to
count requests) and s3rver, and runs the workloads in interleaved rounds: round r runs every
tool of a (workload, target) cell once, in an order rotated by r. Every server is stopped by
its PID on every exit. A run that fails, or leaves the wrong number of objects, fails the
benchmark.

The cells: W1 and W2 to the WebDAV sink; W4 to the latency sink at 8, 64 and 256 requests in
flight and with each tool's defaults (lodge without --jobs, rclone's 4 transfers, curl -Z's
50); W1 and W3 to file:// (rclone and cp followed by `sync -f`: lodge's objects are durable
before confirm); W1 to moto and s3rver; the re-run cell (lodge uploads R files to moto, then
uploads the unchanged tree again; both through the fault proxy, which counts the requests);
the list cell (`lodge list` and `lodge --json list` of a SQLite ledger of L rows, made with the
sqlite3 CLI as scripts/bench-search makes them: wall time and max RSS); the sweep cell (S dead
objects lodge uploaded and deleted, removed by `lodge sweep` a day later under libfaketime, and
the same number removed by `aws s3 rm --recursive`). The goals are checked against the medians
at the end.
"""
import argparse
import atexit
import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KiB, MiB = 1024, 1024 * 1024
JOBS = 8
RCLONE_LEAN = ["--no-check-dest", "--no-traverse", "--s3-no-head", "--s3-no-check-bucket"]
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"  # libnginx-mod-http-echo
OWNER = "bench"


def log(*a):
    print(*a, flush=True)


def die(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, name, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            die(f"{name} exited at start (status {proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    die(f"{name} did not listen on 127.0.0.1:{port} within {timeout} s")


BENCH_TMP = [None]  # the work dir, for time(1)'s reports
SERVERS = []  # (name, Popen) stopped by PID at exit, in reverse order


def stop_servers():
    while SERVERS:
        name, p = SERVERS.pop()
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            except ProcessLookupError:
                pass


def on_signal(signum, _frame):
    sys.exit(128 + signum)  # SystemExit runs the atexit cleanup


def start_server(name, argv, port, logfile, env=None):
    p = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    SERVERS.append((name, p))
    wait_listening(p, port, name)
    return p


# ---------------------------------------------------------------------------- inputs

WORDS = ("ledger upload object store quota owner sweep reconcile confirm reserve "
         "durable checksum bucket prefix key task lease commit batch writer").split()


def make_files(d, n, size, kind, seed):
    """kind 'random': random bytes; 'mix': even-numbered files are text (lines of words),
    odd-numbered ones random bytes."""
    os.makedirs(d)
    rnd = random.Random(seed)
    for i in range(n):
        if kind == "mix" and i % 2 == 0:
            out, total = [], 0
            while total < size:
                line = " ".join(rnd.choice(WORDS) for _ in range(10)) + f" {i}\n"
                out.append(line)
                total += len(line)
            data = "".join(out).encode()[:size]
        else:
            data = rnd.randbytes(size)
        with open(os.path.join(d, f"f{i:06d}.{'txt' if kind == 'mix' and i % 2 == 0 else 'bin'}"), "wb") as f:
            f.write(data)


def count_files(d, skip=None):
    """Files under d, leaving out the directory d/skip."""
    n = 0
    for top, dirs, files in os.walk(d):
        if top == d and skip in dirs:
            dirs.remove(skip)
        n += len(files)
    return n


# ---------------------------------------------------------------------------- running one

class Run:
    def __init__(self, wall, cpu, rss_kib):
        self.wall, self.cpu, self.rss_kib = wall, cpu, rss_kib


def timed(argv, env, what):
    """Runs argv under /usr/bin/time; returns its wall seconds, user+sys CPU seconds and max
    RSS. (Python's own wait4 would report at least Python's RSS: a forked child keeps its
    parent's high-water mark across exec; time(1) forks from a 2 MB process.) A non-zero
    exit fails the benchmark."""
    errf = tempfile.TemporaryFile()
    with tempfile.NamedTemporaryFile("r", prefix="time-", dir=BENCH_TMP[0]) as tf:
        t0 = time.perf_counter()
        # In its own process group, so that a benchmark stopped mid-run (SIGINT, SIGTERM)
        # stops the tool under time(1) too.
        p = subprocess.Popen(["/usr/bin/time", "-f", "%U %S %M", "-o", tf.name, *argv], env=env,
                             stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
        try:
            p.wait()
        except BaseException:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            errf.seek(0)
            die(f"{what} failed (exit {p.returncode}): {' '.join(argv)}\n"
                f"{errf.read().decode(errors='replace')[-3000:]}")
        user, sys_, rss_kib = tf.read().split()[-3:]
    errf.close()
    return Run(wall, float(user) + float(sys_), int(rss_kib))


def quiet(argv, env=None, what=None):
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        die(f"{what or argv[0]} failed (exit {r.returncode}): {' '.join(argv)}\n{r.stderr[-3000:]}")
    return r.stdout


def jobs_flag(flag, jobs):
    """[flag, jobs], or nothing for the tool's own default."""
    return [flag, str(jobs)] if jobs else []


class Bench:
    def __init__(self, args):
        self.a = args
        self.lodge = args.lodge
        self.work = tempfile.mkdtemp(prefix="lodge-bench-", dir=args.dir)  # real disk
        self.shm = tempfile.mkdtemp(prefix="lodge-bench-", dir="/dev/shm")  # the sink's bodies
        atexit.register(shutil.rmtree, self.shm, True)
        atexit.register(shutil.rmtree, self.work, True)
        BENCH_TMP[0] = self.work
        self.seq = 0
        self.env = dict(os.environ)
        # rclone refuses AWS_CA_BUNDLE on its HTTP transport ("LoadCustomCABundleError"): every
        # endpoint here is plain http on loopback, so it is dropped for every tool alike.
        self.env.pop("AWS_CA_BUNDLE", None)
        self.env.update(AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")
        for k in [k for k in self.env if k.startswith("RCLONE_") or k.startswith("LODGE_")]:
            del self.env[k]
        self.targets = {}

    # ------------------------------------------------------------------------ servers
    def start(self):
        logs = os.path.join(self.work, "logs")
        os.makedirs(logs)
        # nginx
        port = free_port()
        ngx = os.path.join(self.work, "nginx")
        os.makedirs(ngx)
        conf = open(os.path.join(ROOT, "scripts", "bench-nginx.conf")).read()
        for k, v in {"@PORT@": str(port), "@ROOT@": self.shm, "@TMP@": ngx,
                     "@USER@": quiet(["id", "-un"]).strip(), "@GROUP@": quiet(["id", "-gn"]).strip()}.items():
            conf = conf.replace(k, v)
        with open(os.path.join(ngx, "nginx.conf"), "w") as f:
            f.write(conf)
        os.makedirs(os.path.join(self.shm, "sink"))
        start_server("nginx", ["nginx", "-p", ngx, "-c", os.path.join(ngx, "nginx.conf")], port,
                     open(os.path.join(logs, "nginx.log"), "w"))
        self.targets["nginx"] = dict(endpoint=f"http://127.0.0.1:{port}", bucket="sink", key="bench",
                                     secret="bench", sign=False)
        self.start_echo(logs)
        # moto, and the fault proxy in front of it (no rules: it forwards and logs every request)
        port = free_port()
        start_server("moto_server", ["moto_server", "-H", "127.0.0.1", "-p", str(port)], port,
                     open(os.path.join(logs, "moto.log"), "w"))
        self.targets["moto"] = dict(endpoint=f"http://127.0.0.1:{port}", bucket="bench", key="bench",
                                    secret="bench", sign=True)
        proxy_port = free_port()
        self.proxy_log = os.path.join(self.work, "faultproxy.jsonl")
        start_server("faultproxy", [sys.executable, os.path.join(ROOT, "tests", "harness", "faultproxy.py"),
                                    str(proxy_port), str(port), os.path.join(self.work, "faultproxy-rules.json"),
                                    self.proxy_log], proxy_port, open(os.path.join(logs, "faultproxy.log"), "w"))
        self.targets["moto-proxy"] = dict(self.targets["moto"], endpoint=f"http://127.0.0.1:{proxy_port}")
        # s3rver (npm, tests/node from the lockfile: scripts/node-deps)
        script = os.path.join(ROOT, "tests", "node", "node_modules", "s3rver", "bin", "s3rver.js")
        if os.path.exists(script) and shutil.which("node"):
            port = free_port()
            d = os.path.join(self.work, "s3rver")
            os.makedirs(d)
            env = dict(os.environ)
            env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
            start_server("s3rver", ["node", script, "-d", d, "-a", "127.0.0.1", "-p", str(port), "--silent"],
                         port, open(os.path.join(logs, "s3rver.log"), "w"), env)
            self.targets["s3rver"] = dict(endpoint=f"http://127.0.0.1:{port}", bucket="bench", key="S3RVER",
                                          secret="S3RVER", sign=True)
        else:
            log(f"note: s3rver is not installed ({script} missing; scripts/node-deps installs it): "
                "its row is skipped")
        for name in ("moto", "s3rver"):
            if name in self.targets:
                quiet(["rclone", "mkdir", f"{self.rclone_remote(name)}:{self.targets[name]['bucket']}"],
                      self.rclone_env(name), f"creating the bucket on {name}")

    def start_echo(self, logs):
        """The latency sink: answers every PUT 201 after a fixed delay and logs it (method,
        status, path) to tmpfs, where check_s3 counts each run's objects."""
        if not os.path.exists(ECHO_MODULE):
            log(f"note: {ECHO_MODULE} is missing (Debian's libnginx-mod-http-echo): the W4 cells are skipped")
            return
        port = free_port()
        ngx = os.path.join(self.shm, "echo")
        os.makedirs(ngx)
        conf = open(os.path.join(ROOT, "scripts", "bench-echo-nginx.conf")).read()
        for k, v in {"@PORT@": str(port), "@TMP@": ngx, "@DELAY@": f"{self.a.latency_ms / 1000:.3f}",
                     "@USER@": quiet(["id", "-un"]).strip(), "@GROUP@": quiet(["id", "-gn"]).strip()}.items():
            conf = conf.replace(k, v)
        with open(os.path.join(ngx, "nginx.conf"), "w") as f:
            f.write(conf)
        start_server("nginx (latency sink)", ["nginx", "-p", ngx, "-c", os.path.join(ngx, "nginx.conf")], port,
                     open(os.path.join(logs, "nginx-echo.log"), "w"))
        self.echo_log = os.path.join(ngx, "access.log")
        self.echo_seen = 0  # how far check_s3 has read the access log
        self.targets["echo"] = dict(endpoint=f"http://127.0.0.1:{port}", bucket="sink", key="bench",
                                    secret="bench", sign=False)

    def echo_count(self, prefix, n):
        """PUTs answered 201 under /sink/<prefix>/ (lodge's id marker .lodge/ left out) in the
        sink's access log since the last call. nginx logs a request just after its answer is
        sent, so the count is awaited (briefly) rather than read once."""
        want = f"/{self.targets['echo']['bucket']}/{prefix}/"
        got, end = 0, time.monotonic() + 5
        while True:
            with open(self.echo_log, "rb") as f:
                f.seek(self.echo_seen)
                data = f.read()
            cut = data.rfind(b"\n") + 1
            for line in data[:cut].decode().splitlines():
                method, status, path = line.split(" ", 2)
                if method == "PUT" and status == "201" and path.startswith(want) and "/.lodge/" not in path:
                    got += 1
            self.echo_seen += cut
            if got >= n or time.monotonic() > end:
                return got
            time.sleep(0.05)

    # ------------------------------------------------------------------------ tools
    def rclone_remote(self, target):
        return "t" + target

    def rclone_env(self, target):
        t = self.targets[target]
        env = dict(self.env)
        p = "RCLONE_CONFIG_T" + target.upper() + "_"
        env.update({p + "TYPE": "s3", p + "PROVIDER": "Other", p + "ENDPOINT": t["endpoint"],
                    p + "ACCESS_KEY_ID": t["key"], p + "SECRET_ACCESS_KEY": t["secret"],
                    p + "FORCE_PATH_STYLE": "true", p + "REGION": "us-east-1"})
        return env

    def fresh(self, tag):
        self.seq += 1
        return f"{tag}{self.seq:04d}"

    def lodge_s3(self, target, src, n, jobs=JOBS):
        """jobs None: lodge's own choice (no --jobs)."""
        t = self.targets[target]
        prefix = self.fresh("lodge")
        db = os.path.join(self.work, prefix + ".db")
        env = dict(self.env, AWS_ACCESS_KEY_ID=t["key"], AWS_SECRET_ACCESS_KEY=t["secret"])
        common = [self.lodge, "--db", db, "--store", f"s3://{t['bucket']}/{prefix}", "--endpoint", t["endpoint"]]
        quiet(common + ["-q", "init"], env, "lodge init")
        run = timed(common + ["--owner", OWNER, "-q", "upload", *jobs_flag("--jobs", jobs), src], env,
                    f"lodge upload to {target}")
        self.check_s3(target, prefix, n, "lodge", lodge_db=db)
        return run

    def rclone_s3(self, target, src, n, jobs=JOBS):
        """jobs None: rclone's defaults (4 transfers, a listing of the destination, a HEAD after
        each PUT), except --s3-no-head on the latency sink, which answers nothing but PUT."""
        prefix = self.fresh("rclone")
        env = self.rclone_env(target)
        flags = [*RCLONE_LEAN, "--transfers", str(jobs)] if jobs else (["--s3-no-head"] if target == "echo" else [])
        run = timed(["rclone", "copy", "--config", "/dev/null", *flags, src,
                     f"{self.rclone_remote(target)}:{self.targets[target]['bucket']}/{prefix}"], env,
                    f"rclone copy to {target}")
        self.check_s3(target, prefix, n, "rclone")
        return run

    def curl_s3(self, target, src, n, jobs=JOBS):
        """jobs None: curl -Z's default --parallel-max (50)."""
        t = self.targets[target]
        prefix = self.fresh("curl")
        cfg = os.path.join(self.work, prefix + ".curlrc")
        with open(cfg, "w") as f:
            f.write("silent\nno-progress-meter\nshow-error\nfail\n")
            if t["sign"]:
                # Signed like any S3 client, the payload unsigned (as lodge's and rclone's
                # small PUTs are not: they hash it; curl cannot).
                f.write(f'aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "{t["key"]}:{t["secret"]}"\n'
                        'header = "x-amz-content-sha256: UNSIGNED-PAYLOAD"\n')
            for name in sorted(os.listdir(src)):
                f.write(f'upload-file = "{os.path.join(src, name)}"\nurl = "{t["endpoint"]}/{t["bucket"]}/{prefix}/{name}"\n'
                        'output = "/dev/null"\n')
        run = timed(["curl", "-Z", *jobs_flag("--parallel-max", jobs), "--config", cfg], self.env,
                    f"curl -Z to {target}")
        self.check_s3(target, prefix, n, "curl")
        return run

    def check_s3(self, target, prefix, n, tool, lodge_db=None):
        t = self.targets[target]
        if target == "echo":
            got = self.echo_count(prefix, n)
        elif target == "nginx":
            d = os.path.join(self.shm, t["bucket"], prefix)
            got = count_files(d, skip=".lodge")  # lodge's id-block marker, .lodge/<uuid>
            shutil.rmtree(d, ignore_errors=True)  # tmpfs: keep it small
        else:
            env = self.rclone_env(target)
            where = f"{self.rclone_remote(target)}:{t['bucket']}/{prefix}"
            out = quiet(["rclone", "lsf", "--config", "/dev/null", "-R", "--files-only", where], env, f"listing {target}")
            got = len([ln for ln in out.splitlines() if ln and not ln.startswith(".lodge/")])
            quiet(["rclone", "purge", "--config", "/dev/null", where], env, f"emptying {target}")
        if got != n:
            die(f"{tool} left {got} objects of {n} on {target} ({prefix})")
        if lodge_db:
            self.check_lodge_ledger(lodge_db, n)

    def check_lodge_ledger(self, db, n):
        out = quiet([self.lodge, "--db", db, "--owner", OWNER, "--json", "list"], self.env, "lodge list")
        active = sum(1 for ln in out.splitlines() if ln.strip() and json.loads(ln)["status"] == "ACTIVE")
        if active != n:
            die(f"lodge's ledger {db} has {active} active files of {n}")

    def lodge_file(self, _target, src, n, jobs=JOBS):
        tag = self.fresh("lodgefs")
        store = os.path.join(self.work, tag)
        db = store + ".db"
        common = [self.lodge, "--db", db, "--store", "file://" + store]
        quiet(common + ["-q", "init"], self.env, "lodge init")
        run = timed(common + ["--owner", OWNER, "-q", "upload", *jobs_flag("--jobs", jobs), src], self.env,
                    "lodge upload to file://")
        got = count_files(os.path.join(store, OWNER))
        if got != n:
            die(f"lodge left {got} objects of {n} in {store}")
        self.check_lodge_ledger(db, n)
        # Kept until the end of the run (see check_dir).
        return run

    # rclone and cp are followed by `sync -f` (syncfs of the work dir's filesystem) in the time
    # measured: lodge's file:// objects are durable before their confirm, theirs are not.
    def cp_file(self, _target, src, n, _jobs=JOBS):
        dst = os.path.join(self.work, self.fresh("cp"))
        run = timed(["sh", "-c", 'cp -r "$1" "$2" && sync -f "$2"', "cp", src, dst], self.env, "cp -r + sync")
        self.check_dir(dst, n, "cp -r")
        return run

    def rclone_file(self, _target, src, n, jobs=JOBS):
        dst = os.path.join(self.work, self.fresh("rclonefs"))
        run = timed(["sh", "-c", 'rclone copy --config /dev/null --no-check-dest --no-traverse --transfers "$3" '
                     '"$1" "$2" && sync -f "$2"', "rclone", src, dst, str(jobs or 4)], self.env,
                    "rclone copy to a local directory + sync")
        self.check_dir(dst, n, "rclone")
        return run

    def check_dir(self, d, n, tool):
        """Counts what a tool left in d. d stays until the run ends: ext4 skips the inodes of
        recently deleted files one by one when it allocates new ones (for a minute or more), so
        a run after another's removal of 10,000 files was 2-3x slower in the kernel, whichever
        tool it was."""
        got = count_files(d)
        if got != n:
            die(f"{tool} left {got} files of {n} in {d}")


    # ------------------------------------------------------------------------ lodge-only cells
    def proxy_requests(self):
        """Requests the fault proxy has logged so far (it logs each before answering it)."""
        try:
            with open(self.proxy_log, "rb") as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def lodge_rerun(self, src, n):
        """The re-run cell: n files uploaded to moto through the fault proxy, then the same
        unchanged tree uploaded again with the same ledger and store. Returns the two runs with
        the requests each sent (the re-run must leave the n objects as they were)."""
        t = self.targets["moto-proxy"]
        prefix = self.fresh("rerun")
        db = os.path.join(self.work, prefix + ".db")
        env = dict(self.env, AWS_ACCESS_KEY_ID=t["key"], AWS_SECRET_ACCESS_KEY=t["secret"])
        common = [self.lodge, "--db", db, "--store", f"s3://{t['bucket']}/{prefix}", "--endpoint", t["endpoint"]]
        quiet(common + ["-q", "init"], env, "lodge init")
        out = []
        for what in ("first upload", "re-run"):
            before = self.proxy_requests()
            run = timed(common + ["--owner", OWNER, "-q", "upload", "--jobs", str(JOBS), src], env,
                        f"lodge {what} to moto (through the fault proxy)")
            run.requests = self.proxy_requests() - before
            out.append(run)
        self.check_s3("moto", prefix, n, "lodge", lodge_db=db)
        return out

    def dead_objects(self, src, n, tag):
        """n objects on moto uploaded by lodge under a fresh prefix (lodge id markers aside).
        Returns (prefix, the lodge command line of its ledger, env)."""
        t = self.targets["moto"]
        prefix = self.fresh(tag)
        db = os.path.join(self.work, prefix + ".db")
        env = dict(self.env, AWS_ACCESS_KEY_ID=t["key"], AWS_SECRET_ACCESS_KEY=t["secret"])
        common = [self.lodge, "--db", db, "--store", f"s3://{t['bucket']}/{prefix}", "--endpoint", t["endpoint"],
                  "--owner", OWNER]
        quiet(common + ["-q", "init"], env, "lodge init")
        quiet(common + ["-q", "upload", "--jobs", str(JOBS), src], env, f"lodge upload to moto ({tag})")
        return prefix, common, env

    def moto_left(self, prefix):
        """Objects left under prefix on moto, lodge's id markers aside."""
        t = self.targets["moto"]
        where = f"{self.rclone_remote('moto')}:{t['bucket']}/{prefix}"
        out = quiet(["rclone", "lsf", "--config", "/dev/null", "-R", "--files-only", where], self.rclone_env("moto"),
                    "listing moto")
        return len([ln for ln in out.splitlines() if ln and not ln.startswith(".lodge/")])

    def lodge_sweep(self, src, n):
        """The sweep cell, lodge: n files uploaded, every one deleted (`lodge delete`), then
        `lodge sweep` timed a day later (libfaketime: every grace past) with its defaults."""
        prefix, common, env = self.dead_objects(src, n, "sweep")
        rows = json.loads("[" + ",".join(quiet(common + ["--json", "list"], env, "lodge list").split()) + "]")
        ids = [str(r["id"]) for r in rows]
        if len(ids) != n:
            die(f"lodge list shows {len(ids)} files of the {n} uploaded for the sweep cell")
        quiet(common + ["-q", "delete", *ids], env, "lodge delete")
        run = timed(["faketime", "-f", "+1d", *common, "-q", "sweep", "--limit", str(n)], env, "lodge sweep")
        if self.moto_left(prefix) != 0:
            die(f"lodge sweep left objects under {prefix}")
        return run

    def aws_rm(self, src, n):
        """The sweep cell, its peer: the same n files (uploaded by lodge), removed by
        `aws s3 rm --recursive` of their prefix."""
        prefix, _, env = self.dead_objects(src, n, "awsrm")
        t = self.targets["moto"]
        run = timed(["aws", "--endpoint-url", t["endpoint"], "s3", "rm", "--recursive", "--quiet",
                     f"s3://{t['bucket']}/{prefix}/"], env, "aws s3 rm --recursive")
        if self.moto_left(prefix) != 0:
            die(f"aws s3 rm left objects under {prefix}")
        return run

    def make_list_ledger(self, rows):
        """A SQLite ledger of `rows` valid rows of one owner, made with the sqlite3 CLI in one
        transaction by scripts/bench-search's fill (the rows lodge's reserve would write)."""
        loader = importlib.machinery.SourceFileLoader("bench_search", os.path.join(ROOT, "scripts", "bench-search"))
        spec = importlib.util.spec_from_loader("bench_search", loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        db = os.path.join(self.work, "list.db")
        self.list_common = [self.lodge, "--db", db, "--store", "file://" + os.path.join(self.work, "liststore"),
                            "--owner", mod.OWNER]
        quiet(self.list_common + ["-q", "init"], self.env, "lodge init")
        p = subprocess.run(["sqlite3", "-bail", db], input=mod.SQLITE_FILL.format(n=rows, owner=mod.OWNER, t0=mod.T0),
                           capture_output=True, text=True)
        if p.returncode != 0:
            die(f"filling {db} with sqlite3: {p.stderr.strip()[-2000:]}")
        got = sum(1 for ln in quiet(self.list_common + ["--json", "list"], self.env, "lodge list").splitlines()
                  if ln.strip())
        if got != rows:
            die(f"lodge --json list printed {got} rows of the {rows} in {db}")
        return os.path.getsize(db)

    def lodge_list(self, json_out):
        return timed(self.list_common + (["--json", "list"] if json_out else ["list"]), self.env,
                     "lodge list" + (" --json" if json_out else ""))


# ---------------------------------------------------------------------------- main

def fmt_rss(kib):
    return f"{kib / 1024:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ.get
    ap.add_argument("--rounds", type=int, default=int(env("BENCH_ROUNDS", "7")))
    ap.add_argument("--tiny", action="store_true", help="every cell once with tiny sizes (keeps the script working)")
    ap.add_argument("--w1", default=env("BENCH_W1", "1000x16K"), help="W1 files x size (default 1000x16K)")
    ap.add_argument("--w2", default=env("BENCH_W2", "4x64M"), help="W2 files x size (default 4x64M)")
    ap.add_argument("--w3", default=env("BENCH_W3", "10000x4K"), help="W3 files x size (default 10000x4K)")
    ap.add_argument("--w4", default=env("BENCH_W4", "1000x16K"),
                    help="W4 files x size, to the latency sink (default 1000x16K)")
    ap.add_argument("--latency-ms", type=int, default=int(env("BENCH_LATENCY_MS", "20")),
                    help="the latency sink's delay before it answers a PUT (default 20)")
    ap.add_argument("--rerun", default=env("BENCH_RERUN", "10000x1K"),
                    help="the re-run cell's files x size, on moto (default 10000x1K)")
    ap.add_argument("--rerun-rounds", type=int, default=int(env("BENCH_RERUN_ROUNDS", "3")),
                    help="rounds of the re-run and list cells (default 3; at most --rounds)")
    ap.add_argument("--list-rows", type=int, default=int(env("BENCH_LIST_ROWS", "1000000")),
                    help="rows of the list cell's ledger (default 1,000,000)")
    ap.add_argument("--sweep", type=int, default=int(env("BENCH_SWEEP", "10000")),
                    help="dead objects of the sweep cell, on moto (default 10,000; rounds as --rerun-rounds)")
    ap.add_argument("--only", default=env("BENCH_ONLY", ""),
                    help="comma-separated targets to run (nginx,echo,file,moto,s3rver,list,sweep; default all)")
    ap.add_argument("--lodge", required=True)
    ap.add_argument("--dir", default=env("BENCH_DIR", tempfile.gettempdir()),
                    help="where inputs, ledgers and file:// stores go (the real disk; default $TMPDIR or /tmp)")
    a = ap.parse_args()
    if a.tiny:
        a.rounds, a.w1, a.w2, a.w3, a.w4, a.rerun, a.list_rows = 1, "20x16K", "2x1M", "20x4K", "20x16K", "20x1K", 2000
        a.sweep = 20

    def parse(spec):
        n, _, size = spec.lower().partition("x")
        mult = {"k": KiB, "m": MiB}.get(size[-1:], 1)
        return int(n), int(size.rstrip("km")) * mult

    w = {"W1": parse(a.w1), "W2": parse(a.w2), "W3": parse(a.w3), "W4": parse(a.w4), "RR": parse(a.rerun),
         "SW": (a.sweep, 1 * KiB)}
    for tool in ("rclone", "curl", "nginx", "moto_server", "cp", "sqlite3", "/usr/bin/time", "aws", "faketime"):
        if not shutil.which(tool):
            die(f"{tool} is not installed (scripts/deps installs the packages in scripts/packages.txt)")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    atexit.register(stop_servers)

    b = Bench(a)
    log(f"lodge benchmark: {a.rounds} round(s), --jobs/--transfers/--parallel-max {JOBS}; work dir {b.work} "
        f"(real disk), nginx sink bodies in {b.shm} (tmpfs)")
    log(f"nproc {os.cpu_count()}; load before: {quiet(['uptime']).strip()}")
    log("versions: " + " | ".join([
        quiet([b.lodge, "--version"]).strip().splitlines()[0],
        quiet(["rclone", "version"]).splitlines()[0],
        quiet(["curl", "--version"]).splitlines()[0].split(" (")[0],
        subprocess.run(["nginx", "-v"], stderr=subprocess.PIPE, text=True).stderr.strip(),
    ]))
    t_start = time.monotonic()
    b.start()
    inputs = {}
    for name, (n, size) in w.items():
        kind = "random" if name == "W2" else "mix"
        d = os.path.join(b.work, "in-" + name)
        make_files(d, n, size, kind, seed=14)
        inputs[name] = (d, n, size, kind)
    log("inputs: " + "; ".join(
        f"{ {'RR': 're-run', 'SW': 'sweep'}.get(k, k)} {n:,} x {size // KiB if size < MiB else size // MiB} {'KiB' if size < MiB else 'MiB'} "
        f"({'random bytes' if kind == 'random' else 'half text (lines of words), half random bytes'})"
        for k, (_, n, size, kind) in inputs.items()))

    s3_tools = [("lodge", b.lodge_s3), ("rclone", b.rclone_s3), ("curl", b.curl_s3)]
    file_tools = [("lodge", b.lodge_file), ("rclone+sync", b.rclone_file), ("cp+sync", b.cp_file)]

    def cell(wl, target, tools, jobs=JOBS, label=None):
        d, n, _, _ = inputs[wl]
        return dict(wl=wl, target=target, label=label or target, n=n, names=[t for t, _ in tools],
                    tools=[(t, lambda fn=fn: fn(target, d, n, jobs)) for t, fn in tools])

    cells = [cell("W1", "nginx", s3_tools), cell("W2", "nginx", s3_tools)]
    # W4: the latency sink, at 8, 64 and 256 in flight, and with each tool's defaults.
    cells += [cell("W4", "echo", s3_tools, j, f"echo/{j or 'def'}") for j in (8, 64, 256, None)]
    cells += [cell("W1", "file", file_tools), cell("W3", "file", file_tools),
              cell("W1", "moto", s3_tools), cell("W1", "s3rver", s3_tools)]
    d_rr, n_rr, _, _ = inputs["RR"]
    cells.append(dict(wl="RERUN", target="moto-proxy", label="moto", n=n_rr, names=["first", "re-run"],
                      rounds=a.rerun_rounds,
                      tools=[("lodge", lambda: dict(zip(("first", "re-run"), b.lodge_rerun(d_rr, n_rr))))]))
    cells.append(dict(wl="LIST", target="list", label="sqlite", n=a.list_rows, names=["list", "list --json"],
                      rounds=a.rerun_rounds,
                      tools=[("list", lambda: b.lodge_list(False)), ("list --json", lambda: b.lodge_list(True))]))
    d_sw, n_sw, _, _ = inputs["SW"]
    cells.append(dict(wl="SWEEP", target="sweep", label="moto", n=n_sw, names=["lodge", "aws s3 rm"],
                      rounds=a.rerun_rounds,
                      tools=[("lodge", lambda: b.lodge_sweep(d_sw, n_sw)), ("aws s3 rm", lambda: b.aws_rm(d_sw, n_sw))]))
    only = {t for t in a.only.split(",") if t}
    known = set(b.targets) | {"file", "list", "sweep"}
    cells = [c for c in cells if c["target"] in known and (not only or c["target"].split("-")[0] in only)]
    if any(c["wl"] == "LIST" for c in cells):
        t0 = time.monotonic()
        size = b.make_list_ledger(a.list_rows)
        log(f"list ledger: {a.list_rows:,} rows made with sqlite3 in {time.monotonic() - t0:.0f} s "
            f"({size / MiB:.0f} MiB, {size / a.list_rows:.0f} bytes per row)")
    runs = {}
    for r in range(a.rounds):
        for c in cells:
            if r >= c.get("rounds", a.rounds):
                continue
            tools = c["tools"]
            k = r % len(tools)
            for tool, fn in tools[k:] + tools[:k]:
                got = fn()
                for name, run in (got.items() if isinstance(got, dict) else [(tool, got)]):
                    runs.setdefault((c["wl"], c["label"], name), []).append(run)
        log(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)")
    log(f"load after: {quiet(['uptime']).strip()}")
    log("")
    table(cells, runs)
    log("")
    log(f"lodge's speed vs a peer = the peer's median wall time / lodge's (above 1: lodge is faster). "
        f"CPU = user+sys of the client process, median over rounds. W4 is {a.latency_ms} ms a PUT; "
        f"echo/N: N in flight (--jobs, --transfers, --parallel-max), echo/def: each tool's defaults. "
        f"RERUN: lodge's first upload and its re-run of the unchanged tree, requests counted by the "
        f"fault proxy. LIST: rows/s in the files/s column. Total {time.monotonic() - t_start:.0f} s.")
    log("")
    goals(cells, runs)


def table(cells, runs):
    head = f"{'workload':<8} {'target':<8} {'tool':<11} {'median s':>9} {'min-max s':>15} {'files/s':>9} " \
           f"{'CPU-ms/file':>11} {'max RSS':>8}  lodge's speed vs / notes"
    log(head)
    log("-" * len(head))
    for c in cells:
        wl, label, n = c["wl"], c["label"], c["n"]
        med = {t: statistics.median([x.wall for x in runs[(wl, label, t)]]) for t in c["names"]}
        for tool in c["names"]:
            rs = runs[(wl, label, tool)]
            walls = [x.wall for x in rs]
            cpu = statistics.median([x.cpu for x in rs]) / n
            note = ""
            if tool == "lodge":
                note = "  ".join(f"{peer} {med[peer] / med['lodge']:.2f}x" for peer in c["names"] if peer != "lodge")
            elif wl == "RERUN":
                reqs = statistics.median([x.requests for x in rs])
                note = f"{reqs:.0f} requests ({n / max(reqs, 1):.0f} files per request)"
                if tool == "re-run":
                    note += f"; {med['first'] / med['re-run']:.2f}x faster than the first upload"
            log(f"{wl:<8} {label:<8} {tool:<11} {med[tool]:>9.3f} {min(walls):>7.3f}-{max(walls):<7.3f} "
                f"{n / med[tool]:>9.0f} {cpu * 1000:>11.3f} {fmt_rss(max(x.rss_kib for x in rs)):>8}  {note}")


def goals(cells, runs):
    """The goals (issues 30 and 48), checked against this run's medians (a goal whose cells did
    not run is said so)."""
    def walls(wl, label, tool):
        rs = runs.get((wl, label, tool))
        return [x.wall for x in rs] if rs else None

    def ratio(a, b):  # median(a) / median(b), and the worst round's a[r] / b[r]
        wa, wb = walls(*a), walls(*b)
        if not wa or not wb:
            return None
        return statistics.median(wa) / statistics.median(wb), min(x / y for x, y in zip(wa, wb))

    out = []

    def check(what, got, bound, worst_too=False):
        if got is None:
            out.append(f"  not run   {what}")
            return
        med, worst = got
        ok = (worst if worst_too else med) >= bound
        extra = f", worst round {worst:.2f}x" if worst_too else ""
        out.append(f"  {'met' if ok else 'NOT met':<9} {what}: {med:.2f}x{extra} (goal >= {bound}x)")

    check("W4 8 in flight, lodge vs curl -Z, every round", ratio(("W4", "echo/8", "curl"), ("W4", "echo/8", "lodge")),
          1.0, True)
    check("W4 64 in flight, lodge vs curl -Z", ratio(("W4", "echo/64", "curl"), ("W4", "echo/64", "lodge")), 0.9)
    check("W4 256 in flight, lodge vs rclone", ratio(("W4", "echo/256", "rclone"), ("W4", "echo/256", "lodge")), 1.0)
    check("W4 defaults, lodge vs rclone's defaults", ratio(("W4", "echo/def", "rclone"), ("W4", "echo/def", "lodge")),
          3.0)
    check("W4 lodge's defaults vs curl -Z 64", ratio(("W4", "echo/64", "curl"), ("W4", "echo/def", "lodge")), 0.8)
    check("W1 (no latency) lodge vs rclone", ratio(("W1", "nginx", "rclone"), ("W1", "nginx", "lodge")), 1.5)
    lc, rc = runs.get(("W1", "nginx", "lodge")), runs.get(("W1", "nginx", "rclone"))
    if lc and rc:
        r = statistics.median([x.cpu for x in lc]) / statistics.median([x.cpu for x in rc])
        out.append(f"  {'met' if r <= 0.7 else 'NOT met':<9} W1 client CPU per file, lodge / rclone: {r:.2f} (goal <= 0.7)")
    check("W3 file://, lodge vs rclone + sync", ratio(("W3", "file", "rclone+sync"), ("W3", "file", "lodge")), 0.6)
    rr = runs.get(("RERUN", "moto", "re-run"))
    if rr:
        n = next(c["n"] for c in cells if c["wl"] == "RERUN")
        per = max(x.requests for x in rr) / n
        out.append(f"  {'met' if per <= 1 / 500 else 'NOT met':<9} re-run of {n:,} unchanged files: "
                   f"{max(x.requests for x in rr)} requests at most, 1 per {1 / per if per else float('inf'):.0f} files "
                   "(goal <= 1 per 500)")
    check("re-run vs first upload on moto", ratio(("RERUN", "moto", "first"), ("RERUN", "moto", "re-run")), 10.0)
    for tool in ("list", "list --json"):
        rs = runs.get(("LIST", "sqlite", tool))
        if rs:
            n = next(c["n"] for c in cells if c["wl"] == "LIST")
            mib = max(x.rss_kib for x in rs) / 1024
            out.append(f"  {'met' if mib <= 64 else 'NOT met':<9} `lodge {tool}` of {n:,} rows: {mib:.0f} MiB max RSS "
                       f"(goal <= 64 MiB at 1,000,000 rows)")
    check("sweep of dead objects on moto, lodge vs aws s3 rm --recursive",
          ratio(("SWEEP", "moto", "aws s3 rm"), ("SWEEP", "moto", "lodge")), 1.0)
    check("`lodge --json list` vs `lodge list`", ratio(("LIST", "sqlite", "list"), ("LIST", "sqlite", "list --json")),
          0.8)
    log("goals:")
    for line in out:
        log(line)

if __name__ == "__main__":
    main()
