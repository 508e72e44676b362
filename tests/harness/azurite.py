"""Runs a command with a throwaway Azurite (tests/node, scripts/node-deps) on a free
loopback port, its account endpoint in LODGE_TEST_AZ_ENDPOINT and LODGE_TEST_STORE=az;
stops it by its PID afterwards, whatever the command did. CTest's store_contract_azure:

    python3 tests/harness/azurite.py run -- CMD ARGS...

Exits with the command's status."""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lodgetest import Azurite  # noqa: E402


def _main(argv):
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: azurite.py run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    # CTest's timeout (SIGTERM) still stops the server: the handler unwinds through finally.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda n, _f: sys.exit(128 + n))
    server = Azurite()
    try:
        env = dict(os.environ, LODGE_TEST_STORE="az", LODGE_TEST_AZ_ENDPOINT=server.endpoint)
        return subprocess.run(argv[2:], env=env).returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
