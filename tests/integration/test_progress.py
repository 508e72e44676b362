"""Honest progress: on a terminal, `lodge upload` redraws one line on stderr while nothing
finishes — the bytes sent so far (parts included, counted as they leave), the hashing pass
of a big file, and the total with a "+" while the walk is still listing inputs — and its
last line says when the run was interrupted. Never on a pipe, under --json or -q. Each
phase is held still with a failpoint's pause, so what the line shows is awaited, not
timed. Also: a file whose confirm is pending is confirmed when the input runs dry
(`--files-from -` fed slowly), not only when another file comes."""

import json
import os
import re
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
from lodgetest import LODGE, S3TestCase, check_invariants, main, wait_until  # noqa: E402

CONFIG = {
    "policies": {"default": {"max_size": "256MiB", "deadline": "10m", "grace": "5s"}},
    "multipart_threshold": "6MiB", "part_size": "5MiB",
}


class Reader:
    """Collects what a file descriptor yields, on a thread, until its end (EIO on a pty)."""

    def __init__(self, source):
        # A descriptor of our own (a pty's master), or a Popen's pipe (closed at the end).
        self.source = source
        self.fd = source if isinstance(source, int) else source.fileno()
        self.data = bytearray()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with self.lock:
                self.data += chunk

    def text(self):
        with self.lock:
            return self.data.decode(errors="replace")

    def join(self):
        self.thread.join(timeout=60)
        if isinstance(self.source, int):
            os.close(self.fd)
        else:
            self.source.close()
        return self.text()


class Progress(S3TestCase):
    def setUp(self):
        super().setUp()
        self.env["LODGE_CONFIG"] = self.write("config.json", json.dumps(CONFIG))
        self.init()
        self.gate = os.path.join(self.dir, "gate")

    def on_tty(self, *args, env=None, stdin=subprocess.DEVNULL):
        """Starts lodge with stderr on a pseudo-terminal and stdout on a pipe; returns the
        process and readers of both."""
        master, slave = os.openpty()
        e = dict(self.env)
        e.update(env or {})
        p = subprocess.Popen([LODGE, "--db", self.db, *args], env=e, stdin=stdin,
                             stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        return p, Reader(master), Reader(p.stdout)

    @staticmethod
    def frames(text):
        """The progress line's frames: what each carriage return and erase starts."""
        return [f.strip() for f in text.split("\r\033[K") if f.strip()]

    def release(self, p):
        open(self.gate, "w").close()
        self.assertEqual(p.wait(timeout=120), 0)

    def test_bytes_are_counted_as_they_are_sent(self):
        big = self.write("in/big.bin", os.urandom(12 << 20))  # three parts of 5 MiB
        p, err, out = self.on_tty("upload", big, env={
            "LODGE_FAILPOINTS": f"upload.between_parts=pause:{self.gate}"})
        # Held after its first part: its 5 MiB are counted while the file is not done (a
        # frame drawn while the part was still leaving shows less: await the whole part).
        sent = r"0/1 files? \(12\.0 MiB\), (\d+\.\d) MiB sent"

        def first_part_counted():
            return any(float(m) >= 5.0 for m in re.findall(sent, err.text()))
        wait_until(first_part_counted, 60, "the first part's 5 MiB on the progress line")
        self.assertIsNone(p.poll())
        self.release(p)
        text = err.join()
        self.assertRegex(text, r"1 file: 1 active, .*\(12\.0 MiB in ")
        self.assertNotIn("interrupted", text)
        # The result on stdout, and not a byte of the progress line there.
        stdout = out.join()
        self.assertNotIn("\r", stdout)
        self.assertRegex(stdout, r"^active ")

    def test_hashing_a_big_file_is_shown(self):
        big = self.write("in/big.bin", os.urandom(40 << 20))
        p, err, out = self.on_tty("upload", big, env={
            "LODGE_FAILPOINTS": f"upload.while_hashing=pause:{self.gate}"})
        wait_until(lambda: "hashing 1.0 MiB of 40.0 MiB" in err.text(), 60, "the hashing phase")
        frame = self.frames(err.text())[-1]
        self.assertRegex(frame, r"^0/1 files? \(40\.0 MiB\), 0 B sent")
        self.release(p)
        err.join()
        out.join()

    def test_the_total_is_a_lower_bound_while_the_walk_runs(self):
        paths = [self.write(f"in/{i}.txt", f"file {i}\n") for i in range(3)]
        p, err, out = self.on_tty("upload", "--files-from", "-",
                                  stdin=subprocess.PIPE)
        p.stdin.write((paths[0] + "\n" + paths[1] + "\n").encode())
        p.stdin.flush()
        # Both are done while the list is still open: the total is "2+".
        wait_until(lambda: any(re.match(r"2/2\+ files", f) for f in self.frames(err.text())), 60,
                   "2/2+ files")
        p.stdin.write((paths[2] + "\n").encode())
        p.stdin.close()
        self.assertEqual(p.wait(timeout=60), 0)
        text = err.join()
        out.join()
        self.assertIn("3 files: 3 active", text)

    def test_a_pending_confirm_does_not_wait_for_more_input(self):
        # Before: a stored file's confirm rode along with the next file's reserve, so with
        # the list still open it never came (and past the deadline the file failed).
        path = self.write("in/only.txt", "only\n")
        p = subprocess.Popen([LODGE, "--db", self.db, "upload", "--json", "--files-from", "-"],
                             env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        out = Reader(p.stdout)
        p.stdin.write((path + "\n").encode())
        p.stdin.flush()
        wait_until(lambda: '"outcome":"active"' in out.text(), 30, "the file confirmed with the list open")
        res = json.loads(out.text().splitlines()[0])
        self.assertEqual(self.sql("SELECT upload_status FROM file_upload WHERE id = ?", (res["id"],)),
                         [("ACTIVE",)])
        p.stdin.close()
        self.assertEqual(p.wait(timeout=60), 0)
        out.join()
        p.stderr.close()

    def test_an_interrupted_run_says_so_last(self):
        big = self.write("in/big.bin", os.urandom(12 << 20))
        small = [self.write(f"in/s{i}.txt", f"s {i}\n") for i in range(3)]
        p, err, out = self.on_tty("upload", "--jobs", "1", big, *small, env={
            "LODGE_FAILPOINTS": f"upload.between_parts=pause:{self.gate}"})
        wait_until(lambda: "MiB sent" in err.text(), 60, "the first part")
        p.send_signal(signal.SIGINT)
        wait_until(lambda: "finishing 1 upload in flight" in err.text(), 30, "the first Ctrl-C's message")
        open(self.gate, "w").close()
        self.assertEqual(p.wait(timeout=120), 130)
        text = err.join()
        out.join()
        after = text.rsplit("\r\033[K", 1)[-1]
        self.assertRegex(after, r"1 file: 1 active, .*, interrupted\r?\n")
        self.assertIn("(INTERRUPTED)", after)
        check_invariants(self)

    def test_never_on_a_pipe_or_under_json_or_quiet(self):
        big = self.write("in/big.bin", os.urandom(12 << 20))
        for flags in (["--json"], ["-q"], ["--no-progress"]):
            with self.subTest(flags=flags):
                p, err, out = self.on_tty("upload", *flags, "--checksum", big)
                self.assertIn(p.wait(timeout=120), (0,))
                self.assertNotIn("\r\033[K", err.join())
                out.join()
        # stderr on a pipe: the summary only.
        r = self.lodge("upload", "--checksum", big)
        self.assertNotIn("\r", r.err)
        self.assertIn("1 file: 0 active, 1 duplicate", r.err)


if __name__ == "__main__":
    main()
