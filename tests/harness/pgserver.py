"""A throwaway PostgreSQL server for lodge's tests, from the Debian packages (PostgreSQL 15).

As a module:

    with PgServer() as pg:
        url = pg.create_database("t1")     # postgres://lodge@127.0.0.1:<port>/t1
        pg.sql("SELECT 1", db="t1")         # rows via psql, for checks in tests
        pg.pause(); ...; pg.resume()        # the whole server SIGSTOPped, then continued

As a command (used by CTest for the libpq-driver tests):

    python3 tests/harness/pgserver.py run -- CMD ARGS...

starts a server, exports LODGE_TEST_PG_URL (the URL of a fresh database) and
LODGE_TEST_PG_ADMIN_URL (the server's `postgres` database), runs CMD, stops the server and
exits with CMD's status.

The server lives in a temporary directory: data directory, log and Unix socket. initdb
refuses to run as root, so when this runs as root the directory is chowned to the `postgres`
system user and initdb/pg_ctl run via `runuser -u postgres --`; as any other user they run
directly. It listens on 127.0.0.1 at a free port, trusts every local connection (user
`lodge`, a superuser), and is stopped by the postmaster's PID (read from postmaster.pid),
on __exit__ and at interpreter exit.
"""

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

USER = "lodge"


def _bindir():
    for d in ("/usr/lib/postgresql/15/bin",):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    try:
        d = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True,
                           check=True).stdout.strip()
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    except (OSError, subprocess.CalledProcessError):
        pass
    raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found: "
                       "install postgresql-15 (scripts/deps installs scripts/packages.txt)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid):
    """True while `pid` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _state(pid):
    """The process's state letter (R, S, T...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


class PgServer:
    def __init__(self, start_timeout=60.0, stop_timeout=30.0, durable=False):
        self.durable = durable  # fsync on, as a real server runs (scripts/bench-ledger)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.bindir = _bindir()
        self.dir = None
        self.port = None
        self.pid = None
        self._as_postgres = os.geteuid() == 0
        self._stopped = []  # what pause() stopped

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _run(self, argv, check=True):
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--"] + argv
        p = subprocess.run(argv, cwd=self.dir, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stdout}{p.stderr}"
                               f"{self.log_tail()}")
        return p

    def log_tail(self, n=40):
        try:
            with open(os.path.join(self.dir, "log")) as f:
                lines = f.readlines()[-n:]
            return "\n--- server log ---\n" + "".join(lines)
        except OSError:
            return ""

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="lodge-pg-")
        atexit.register(self.stop)
        if self._as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        data = os.path.join(self.dir, "data")
        self._run([os.path.join(self.bindir, "initdb"), "-D", data, "-A", "trust", "-U", USER,
                   "--no-sync", "-E", "UTF8", "--locale=C"])
        # A free port can be taken between our probe and the server's bind: try a few.
        last = None
        for _ in range(5):
            self.port = _free_port()
            # fsync=off: a test server's data is thrown away, so a crash of the machine
            # losing it does not matter, and it saves the tests much time. Never use it
            # for a real ledger.
            opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} "
                    f"-c fsync={'on' if self.durable else 'off'} -c max_connections=200")
            p = self._run([os.path.join(self.bindir, "pg_ctl"), "-w", "-t",
                           str(int(self.start_timeout)), "-D", data, "-l",
                           os.path.join(self.dir, "log"), "-o", opts, "start"], check=False)
            if p.returncode == 0:
                break
            last = f"pg_ctl start failed ({p.returncode}):\n{p.stdout}{p.stderr}{self.log_tail()}"
        else:
            raise RuntimeError(last)
        with open(os.path.join(data, "postmaster.pid")) as f:
            self.pid = int(f.readline().strip())
        # pg_ctl -w has waited for the server to accept connections; pg_isready confirms it
        # on the TCP address the tests use.
        subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t",
                        str(int(self.start_timeout))], check=True)
        return self

    def stop(self):
        """Stops the server by its PID (fast shutdown: SIGINT ends every session, where
        SIGTERM's smart shutdown would wait for clients to leave; SIGKILL after
        stop_timeout) and removes its directory. Safe to call twice."""
        self.resume()  # a paused server cannot act on SIGINT
        if self.pid is not None:
            pid, self.pid = self.pid, None
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + self.stop_timeout
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                deadline = time.monotonic() + self.stop_timeout
                while _alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.02)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- a server that stops answering ----------------------------------------------------

    def processes(self):
        """The postmaster's PID, then its children's (backends, checkpointer, walwriter...),
        read from /proc."""
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.pid:
                children.append(int(entry))
        return [self.pid] + sorted(children)

    def pause(self):
        """SIGSTOPs the whole server, the postmaster first (so it forks nothing more), and
        waits until each process is stopped: a hung host as its clients see it (the kernel
        still accepts connections and acknowledges what is sent; nothing answers). The
        stopped PIDs are returned; resume() continues them."""
        self._stopped = []
        for pid in [self.pid] + [p for p in self.processes() if p != self.pid]:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            self._stopped.append(pid)
            deadline = time.monotonic() + 10
            while _state(pid) not in ("T", "t", None) and time.monotonic() < deadline:
                time.sleep(0.005)
        return list(self._stopped)

    def resume(self):
        """SIGCONTs what pause() stopped (children first); safe to call twice."""
        stopped, self._stopped = self._stopped, []
        for pid in reversed(stopped):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    # -- use -------------------------------------------------------------------------------

    @property
    def url(self):
        return self.db_url("postgres")

    def db_url(self, name):
        return f"postgres://{USER}@127.0.0.1:{self.port}/{name}"

    def sql(self, query, db="postgres", check=True):
        """Runs `query` with psql in database `db`; the rows, each a list of column texts."""
        p = subprocess.run(["psql", "-X", "-q", "-At", "-F", "\x1f", "-v", "ON_ERROR_STOP=1",
                            "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-d", db,
                            "-c", query], capture_output=True, text=True,
                           env=dict(os.environ, PGCONNECT_TIMEOUT="10"))
        if check and p.returncode != 0:
            raise RuntimeError(f"psql {query!r} on {db}: {p.stderr.strip()}")
        return [line.split("\x1f") for line in p.stdout.splitlines() if line != ""]

    def create_database(self, name):
        """Creates database `name` (dropping one of that name first); returns its URL."""
        quoted = '"' + name.replace('"', '""') + '"'
        self.sql(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")
        self.sql(f"CREATE DATABASE {quoted}")
        return self.db_url(name)


def _main(argv):
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: pgserver.py run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    cmd = argv[2:]

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    with PgServer() as pg:
        env = dict(os.environ, LODGE_TEST_PG_URL=pg.create_database("lodge_test"),
                   LODGE_TEST_PG_ADMIN_URL=pg.url)
        proc = subprocess.Popen(cmd, env=env)
        try:
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
