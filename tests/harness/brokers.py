"""Message brokers for lodge's tests: a private RabbitMQ per test run, and SQS from moto_server.

As a module:

    with RabbitMQ() as mq:                       # its own node, ports, data and logs
        url = mq.url("events")                    # amqp://lodge:PASS@127.0.0.1:PORT/?queue=events
        mq.ctl("list_queues", "name", "messages") # rabbitmqctl against this node only

As a command (CTest's mq_contract_sqs and mq_contract_amqp):

    python3 tests/harness/brokers.py run sqs|amqp -- CMD ARGS...

starts the broker, exports LODGE_TEST_MQ=sqs|amqp with LODGE_TEST_SQS_ENDPOINT (moto's
http://127.0.0.1:PORT) or LODGE_TEST_AMQP_URL (the broker's URL, no queue), runs CMD, stops the
broker by its PID and exits with CMD's status. For sqs a second moto checks every signature
(SignedSqs): LODGE_TEST_SQS_SIGNED_ENDPOINT, with its IAM key in LODGE_TEST_SQS_KEY_ID and
LODGE_TEST_SQS_SECRET.

The RabbitMQ node is Debian's rabbitmq-server run directly (not through the wrapper that
switches to the rabbitmq user), as lodge-test-PORT@localhost, with everything it writes under
its own temporary directory (HOME for the Erlang cookie, mnesia, logs, the PID file, an empty
plugin list) and every port its own: the AMQP port, the distribution port, the port range of
rabbitmqctl, and an epmd on a free port (ERL_EPMD_PORT), so it never meets another node on the
machine. It listens on 127.0.0.1 only. It is stopped by `rabbitmqctl stop`, then by its PID,
and its epmd by `epmd -kill` on that port: nothing else is touched."""

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lodgetest import Moto, aws, free_port  # noqa: E402

RABBITMQ_BIN = "/usr/lib/rabbitmq/bin"
USER = "lodge"


class RabbitMQ:
    NAME = "rabbitmq-server"

    def __init__(self, timeout=120):
        if not os.path.exists(os.path.join(RABBITMQ_BIN, "rabbitmq-server")):
            raise RuntimeError("rabbitmq-server not found: install rabbitmq-server (scripts/packages.txt)")
        self.dir = tempfile.mkdtemp(prefix="lodge-rabbitmq-")
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.ctl_port = free_port()
        self.password = "pw-" + os.urandom(6).hex()
        self.node = f"lodge-test-{self.port}@localhost"
        self.pid = None
        self.proc = None
        conf = os.path.join(self.dir, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write(f"default_user = {USER}\ndefault_pass = {self.password}\nloopback_users = none\n"
                    "disk_free_limit.absolute = 1MB\n")
        plugins = os.path.join(self.dir, "enabled_plugins")
        with open(plugins, "w") as f:
            f.write("[].\n")
        self.env = dict(os.environ, HOME=self.dir, RABBITMQ_NODENAME=self.node, RABBITMQ_USE_LONGNAME="false",
                        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(self.port),
                        RABBITMQ_DIST_PORT=str(self.dist_port), ERL_EPMD_PORT=str(self.epmd_port),
                        ERL_EPMD_ADDRESS="127.0.0.1",
                        RABBITMQ_CTL_DIST_PORT_MIN=str(self.ctl_port), RABBITMQ_CTL_DIST_PORT_MAX=str(self.ctl_port),
                        RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"),
                        RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"),
                        RABBITMQ_PID_FILE=os.path.join(self.dir, "rabbitmq.pid"),
                        RABBITMQ_CONFIG_FILE=conf, RABBITMQ_ENABLED_PLUGINS_FILE=plugins,
                        RABBITMQ_CONF_ENV_FILE=os.path.join(self.dir, "rabbitmq-env.conf"),
                        RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(self.dir, "advanced.config"))
        atexit.register(self.stop)
        self.log = open(os.path.join(self.dir, "server.out"), "wb")
        self.proc = subprocess.Popen([os.path.join(RABBITMQ_BIN, "rabbitmq-server")], cwd=self.dir, env=self.env,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        try:
            self._await_startup(timeout)
        except BaseException:
            self.stop()
            raise

    def _await_startup(self, timeout):
        # `rabbitmqctl wait PIDFILE` waits for the node to write its PID file and then for its
        # application to start (await_startup alone fails at once while the node is not yet
        # registered with epmd); await_startup then confirms it is fully booted.
        p = self.ctl("wait", self.env["RABBITMQ_PID_FILE"], "--timeout", str(timeout), check=False,
                     timeout=timeout + 30)
        if p.returncode != 0 or self.proc.poll() is not None:
            raise AssertionError(f"{self.NAME} did not start within {timeout}s: {p.stdout}{p.stderr}"
                                 f"{self.output()}")
        self.ctl("await_startup", "--timeout", str(timeout), timeout=timeout + 30)

    def output(self):
        with open(os.path.join(self.dir, "server.out"), "rb") as f:
            return f.read()[-4000:].decode(errors="replace")

    def ctl(self, *args, check=True, timeout=60):
        """rabbitmqctl against this node only."""
        p = subprocess.run([os.path.join(RABBITMQ_BIN, "rabbitmqctl"), "-n", self.node, *args], env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(args)}: {p.stdout}{p.stderr}")
        return p

    def url(self, queue=None, vhost="", password=None):
        u = f"amqp://{USER}:{self.password if password is None else password}@127.0.0.1:{self.port}/{vhost}"
        return u + (f"?queue={queue}" if queue else "")

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.ctl("stop", check=False, timeout=60)
            except subprocess.TimeoutExpired:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        # The epmd the node started on its own port (a daemon outlives the node).
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], env=self.env, capture_output=True,
                       timeout=30, check=False)
        self.proc = None
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class SignedSqs(Moto):
    """A moto_server that checks the SigV4 signature of every request after its first three
    actions, which make an IAM user allowed sqs:* and its access key (`key_id`, `secret`)."""

    NAME = "moto_server (signatures checked)"

    def __init__(self):
        super().__init__({"INITIAL_NO_AUTH_ACTION_COUNT": "3"})
        aws(self.endpoint, "iam", "create-user", "--user-name", "lodge")
        key = aws(self.endpoint, "iam", "create-access-key", "--user-name", "lodge")["AccessKey"]
        aws(self.endpoint, "iam", "put-user-policy", "--user-name", "lodge", "--policy-name", "sqs",
            "--policy-document",
            '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:*","Resource":"*"}]}')
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]


def _main(argv):
    if len(argv) < 4 or argv[0] != "run" or argv[1] not in ("sqs", "amqp") or argv[2] != "--":
        print("usage: brokers.py run sqs|amqp -- CMD [ARGS...]", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: sys.exit(128 + n))
    env = dict(os.environ, LODGE_TEST_MQ=argv[1])
    servers = []
    try:
        if argv[1] == "sqs":
            servers.append(Moto())
            signed = SignedSqs()
            servers.append(signed)
            env.update(LODGE_TEST_SQS_ENDPOINT=servers[0].endpoint, LODGE_TEST_SQS_SIGNED_ENDPOINT=signed.endpoint,
                       LODGE_TEST_SQS_KEY_ID=signed.key_id, LODGE_TEST_SQS_SECRET=signed.secret)
        else:
            servers.append(RabbitMQ())
            env["LODGE_TEST_AMQP_URL"] = servers[0].url()
        return subprocess.run(argv[3:], env=env).returncode
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
