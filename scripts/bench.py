#!/usr/bin/env python3
"""The benchmark of scripts/bench (stdlib only): lodge side by side with rclone, curl and cp.

Starts, on free loopback ports, an nginx WebDAV PUT sink on tmpfs (a server with no cost of
its own: the physical limit for a client; config scripts/bench-nginx.conf), moto_server and
s3rver, and runs the workloads in interleaved rounds: round r runs every tool of a
(workload, target) cell once, in an order rotated by r. Every server is stopped by its PID on
every exit. A run that fails, or leaves the wrong number of objects, fails the benchmark.
"""
import argparse
import atexit
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
        # moto
        port = free_port()
        start_server("moto_server", ["moto_server", "-H", "127.0.0.1", "-p", str(port)], port,
                     open(os.path.join(logs, "moto.log"), "w"))
        self.targets["moto"] = dict(endpoint=f"http://127.0.0.1:{port}", bucket="bench", key="bench",
                                    secret="bench", sign=True)
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

    def lodge_s3(self, target, src, n):
        t = self.targets[target]
        prefix = self.fresh("lodge")
        db = os.path.join(self.work, prefix + ".db")
        env = dict(self.env, AWS_ACCESS_KEY_ID=t["key"], AWS_SECRET_ACCESS_KEY=t["secret"])
        common = [self.lodge, "--db", db, "--store", f"s3://{t['bucket']}/{prefix}", "--endpoint", t["endpoint"]]
        quiet(common + ["-q", "init"], env, "lodge init")
        run = timed(common + ["--owner", OWNER, "-q", "upload", "--jobs", str(JOBS), src], env, f"lodge upload to {target}")
        self.check_s3(target, prefix, n, "lodge", lodge_db=db)
        return run

    def rclone_s3(self, target, src, n):
        prefix = self.fresh("rclone")
        env = self.rclone_env(target)
        run = timed(["rclone", "copy", "--config", "/dev/null", *RCLONE_LEAN, "--transfers", str(JOBS), src,
                     f"{self.rclone_remote(target)}:{self.targets[target]['bucket']}/{prefix}"], env,
                    f"rclone copy to {target}")
        self.check_s3(target, prefix, n, "rclone")
        return run

    def curl_s3(self, target, src, n):
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
        run = timed(["curl", "-Z", "--parallel-max", str(JOBS), "--config", cfg], self.env, f"curl -Z to {target}")
        self.check_s3(target, prefix, n, "curl")
        return run

    def check_s3(self, target, prefix, n, tool, lodge_db=None):
        t = self.targets[target]
        if target == "nginx":
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

    def lodge_file(self, _target, src, n):
        tag = self.fresh("lodgefs")
        store = os.path.join(self.work, tag)
        db = store + ".db"
        common = [self.lodge, "--db", db, "--store", "file://" + store]
        quiet(common + ["-q", "init"], self.env, "lodge init")
        run = timed(common + ["--owner", OWNER, "-q", "upload", "--jobs", str(JOBS), src], self.env, "lodge upload to file://")
        got = count_files(os.path.join(store, OWNER))
        if got != n:
            die(f"lodge left {got} objects of {n} in {store}")
        self.check_lodge_ledger(db, n)
        # Kept until the end of the run (see check_dir).
        return run

    def cp_file(self, _target, src, n):
        dst = os.path.join(self.work, self.fresh("cp"))
        run = timed(["cp", "-r", src, dst], self.env, "cp -r")
        self.check_dir(dst, n, "cp -r")
        return run

    def rclone_file(self, _target, src, n):
        dst = os.path.join(self.work, self.fresh("rclonefs"))
        run = timed(["rclone", "copy", "--config", "/dev/null", "--no-check-dest", "--no-traverse",
                     "--transfers", str(JOBS), src, dst], self.env, "rclone copy to a local directory")
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
    ap.add_argument("--only", default=env("BENCH_ONLY", ""),
                    help="comma-separated targets to run (nginx,file,moto,s3rver; default all)")
    ap.add_argument("--lodge", required=True)
    ap.add_argument("--dir", default=env("BENCH_DIR", tempfile.gettempdir()),
                    help="where inputs, ledgers and file:// stores go (the real disk; default $TMPDIR or /tmp)")
    a = ap.parse_args()
    if a.tiny:
        a.rounds, a.w1, a.w2, a.w3 = 1, "20x16K", "2x1M", "20x4K"

    def parse(spec):
        n, _, size = spec.lower().partition("x")
        mult = {"k": KiB, "m": MiB}.get(size[-1:], 1)
        return int(n), int(size.rstrip("km")) * mult

    w = {"W1": parse(a.w1), "W2": parse(a.w2), "W3": parse(a.w3)}
    for tool in ("rclone", "curl", "nginx", "moto_server", "cp", "/usr/bin/time"):
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
        f"{k} {n:,} x {size // KiB if size < MiB else size // MiB} {'KiB' if size < MiB else 'MiB'} "
        f"({'random bytes' if kind == 'random' else 'half text (lines of words), half random bytes'})"
        for k, (_, n, size, kind) in inputs.items()))

    s3_tools = [("lodge", b.lodge_s3), ("rclone", b.rclone_s3), ("curl", b.curl_s3)]
    file_tools = [("lodge", b.lodge_file), ("rclone", b.rclone_file), ("cp", b.cp_file)]
    cells = [("W1", "nginx", s3_tools), ("W2", "nginx", s3_tools),
             ("W1", "file", file_tools), ("W3", "file", file_tools),
             ("W1", "moto", s3_tools), ("W1", "s3rver", s3_tools)]
    only = {t for t in a.only.split(",") if t}
    cells = [c for c in cells if (c[1] in b.targets or c[1] == "file") and (not only or c[1] in only)]
    runs = {}
    for r in range(a.rounds):
        for wl, target, tools in cells:
            k = r % len(tools)
            for tool, fn in tools[k:] + tools[:k]:
                d, n, _, _ = inputs[wl]
                runs.setdefault((wl, target, tool), []).append(fn(target, d, n))
        log(f"round {r + 1}/{a.rounds} done ({time.monotonic() - t_start:.0f} s)")
    log(f"load after: {quiet(['uptime']).strip()}")
    log("")
    head = f"{'workload':<8} {'target':<7} {'tool':<7} {'median s':>9} {'min-max s':>15} {'files/s':>9} " \
           f"{'CPU-ms/file':>11} {'max RSS':>8}  lodge's speed vs"
    log(head)
    log("-" * len(head))
    for wl, target, tools in cells:
        n = inputs[wl][1]
        med = {}
        for tool, _ in tools:
            rs = runs[(wl, target, tool)]
            walls = [x.wall for x in rs]
            med[tool] = statistics.median(walls)
        for tool, _ in tools:
            rs = runs[(wl, target, tool)]
            walls = [x.wall for x in rs]
            cpu = statistics.median([x.cpu for x in rs]) / n
            ratio = ""
            if tool == "lodge":
                ratio = "  ".join(f"{peer} {med[peer] / med['lodge']:.2f}x" for peer, _ in tools if peer != "lodge")
            log(f"{wl:<8} {target:<7} {tool:<7} {med[tool]:>9.3f} {min(walls):>7.3f}-{max(walls):<7.3f} "
                f"{n / med[tool]:>9.0f} {cpu * 1000:>11.3f} {fmt_rss(max(x.rss_kib for x in rs)):>8}  {ratio}")
    log("")
    log(f"lodge's speed vs a peer = the peer's median wall time / lodge's (above 1: lodge is faster). "
        f"CPU = user+sys of the client process, median over rounds. Total {time.monotonic() - t_start:.0f} s.")


if __name__ == "__main__":
    main()
