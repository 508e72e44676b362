"""lodge replaces only regular files: `status --prometheus PATH` and `get -o PATH` at a FIFO, a
character device or a symlink are refused (IO_ERROR naming the path and what is there), and
the node is left exactly as it was. (status once turned a FIFO or a device node, /dev/null
included when run as root, into a regular file and exited 0.)"""

import os
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LodgeTestCase, main  # noqa: E402


class NonRegularTargets(LodgeTestCase):
    """A file:// store (the default) and its ledger."""

    def setUp(self):
        super().setUp()
        self.env["LODGE_OWNER"] = "ci"
        self.init()

    def node(self, path):
        """What lstat says of path: (type bits, device number, inode)."""
        st = os.lstat(path)
        return stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino

    def check_refused(self, r, path, kind):
        self.assertEqual(r.rc, 1, r)
        self.assertIn("IO_ERROR", r.err, r)
        self.assertIn(path, r.err, r)
        self.assertIn(kind, r.err, r)
        # Nothing of lodge's was left beside it.
        left = [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".lodge-")]
        self.assertEqual(left, [], r)

    def test_status_prometheus_at_a_fifo_is_refused_and_the_fifo_kept(self):
        fifo = os.path.join(self.dir, "metrics", "lodge.prom")
        os.makedirs(os.path.dirname(fifo))
        os.mkfifo(fifo)
        before = self.node(fifo)
        r = self.lodge("status", "-q", "--prometheus", fifo)
        self.check_refused(r, fifo, "a FIFO")
        self.assertEqual(self.node(fifo), before)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def test_status_prometheus_at_a_character_device_is_refused_and_the_device_kept(self):
        dev = os.path.join(self.dir, "metrics", "null")
        os.makedirs(os.path.dirname(dev))
        try:
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
        except PermissionError:
            self.skipTest("making a device node needs root (CAP_MKNOD)")
        before = self.node(dev)
        r = self.lodge("status", "-q", "--prometheus", dev)
        self.check_refused(r, dev, "a character device")
        self.assertEqual(self.node(dev), before)
        self.assertTrue(stat.S_ISCHR(os.lstat(dev).st_mode))

    def test_status_prometheus_at_a_symlink_is_refused_and_both_kept(self):
        real = self.write("metrics/real.prom", "# an operator's file\n")
        link = os.path.join(self.dir, "metrics", "lodge.prom")
        os.symlink(real, link)
        r = self.lodge("status", "-q", "--prometheus", link)
        self.check_refused(r, link, "a symlink")
        self.assertEqual(os.readlink(link), real)
        with open(real) as f:
            self.assertEqual(f.read(), "# an operator's file\n")

    def test_status_prometheus_replaces_a_regular_file(self):
        out = self.write("metrics/lodge.prom", "old\n")
        r = self.lodge("status", "-q", "--prometheus", out)
        self.assertEqual(r.rc, 0, r)
        with open(out) as f:
            self.assertIn("lodge_health_ok", f.read())

    def test_get_output_at_a_fifo_is_refused_with_or_without_force(self):
        up = self.lodge("--json", "upload", self.write("in/a.txt", "the bytes\n"))
        self.assertEqual(up.rc, 0, up)
        fid = str(up.json_lines()[0]["id"])
        fifo = os.path.join(self.dir, "out", "a.txt")
        os.makedirs(os.path.dirname(fifo))
        os.mkfifo(fifo)
        before = self.node(fifo)
        for extra in ([], ["--force"]):
            r = self.lodge("get", fid, "-o", fifo, *extra)
            self.check_refused(r, fifo, "a FIFO")
            self.assertEqual(self.node(fifo), before, extra)
        # A regular file there is still replaced with --force.
        os.unlink(fifo)
        self.write("out/a.txt", "something else\n")
        r = self.lodge("get", fid, "-o", fifo, "--force")
        self.assertEqual(r.rc, 0, r)
        with open(fifo) as f:
            self.assertEqual(f.read(), "the bytes\n")


if __name__ == "__main__":
    main()
