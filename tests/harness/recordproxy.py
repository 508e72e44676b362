"""A recording HTTP proxy for lodge's tests, in a thread of the test process: it serves as a
reverse proxy (lodge's endpoint points at it, under any loopback name: 127.0.0.1,
localhost, NAME.localhost) and as a forward proxy (HTTPS_PROXY: it records each CONNECT
and refuses it, so nothing ever leaves the machine).

Each request is recorded with the Host it was sent to, its method and path, the
Authorization header's credential scope (access key id, date, region, service), its header
names and values (`headers`, names lowercased) and, for a POST, its body; then it is
forwarded to the upstream (moto) with the Host rewritten to the upstream's, a virtual-hosted
request (Host BUCKET.NAME.localhost or BUCKET.localhost) turned path-style on the way.
`fail_next(n, status, method)` answers the next n requests (of that method) with status
(503 SlowDown) instead."""

import http.client
import http.server
import re
import threading

from lodgetest import free_port

_SCOPE = re.compile(r"Credential=([^/]*)/([0-9]{8})/([^/]*)/([^/]*)/aws4_request")


class Recorded(dict):
    """One request: host, method, path, key_id, date, region, service (None when unsigned),
    headers (lowercased names), body (a POST's, as text)."""

    __getattr__ = dict.get


class RecordingProxy:
    def __init__(self, upstream_port, buckets=None):
        """`buckets`: a callable giving the bucket names that may appear as a Host's first
        label (for virtual-hosted requests)."""
        self.upstream_port = upstream_port
        self.port = free_port()
        self.buckets = buckets or (lambda: ())
        self.lock = threading.Lock()
        self.records = []
        self.failures = []  # statuses to answer instead of forwarding, one per request
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_CONNECT(self):
                proxy._record(self, self.path, "CONNECT", "")
                self.send_response(403, "lodge test proxy: no tunnels")
                self.send_header("Content-Length", "0")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True

            def _any(self):
                proxy._forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def endpoint(self, name="127.0.0.1"):
        return f"http://{name}:{self.port}"

    def clear(self):
        with self.lock:
            self.records = []
            self.failures = []

    def fail_next(self, n, status=503, method=None):
        """Answers the next n requests (of `method` only, when given) with `status`."""
        with self.lock:
            self.failures = [(status, method)] * n

    def requests(self):
        with self.lock:
            return list(self.records)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _record(self, handler, path, method, host):
        auth = handler.headers.get("Authorization", "")
        m = _SCOPE.search(auth)
        r = Recorded(host=host or handler.headers.get("Host", ""), method=method, path=path,
                     key_id=m and m.group(1), date=m and m.group(2), region=m and m.group(3),
                     service=m and m.group(4),
                     security_token=handler.headers.get("X-Amz-Security-Token"),
                     headers={k.lower(): v for k, v in handler.headers.items()})
        if method == "CONNECT":
            r["host"] = path
        handler.recorded = r  # this request's own record (others may be appended meanwhile)
        with self.lock:
            self.records.append(r)
            if self.failures and self.failures[0][1] in (None, method):
                return self.failures.pop(0)[0]
            return None

    def _forward(self, h):
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        host = h.headers.get("Host", "")
        fail = self._record(h, h.path, h.command, host)
        if h.command == "POST":  # an STS form, a multipart completion: kept to assert what was sent
            with self.lock:
                h.recorded["body"] = body.decode(errors="replace")
                if h.path == "/":
                    h.recorded["form"] = h.recorded["body"]
        if fail:
            payload = b"<Error><Code>SlowDown</Code><Message>recording proxy</Message></Error>"
            h.send_response(fail)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return
        path = h.path
        first = host.split(":")[0].split(".")[0]
        if "." in host.split(":")[0] and first in set(self.buckets()):
            path = "/" + first + (path if path.startswith("/") else "/" + path)
            if path.endswith("/") and path.count("/") == 2 and "?" not in path:
                path = path[:-1]
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection")}
        headers["Host"] = f"127.0.0.1:{self.upstream_port}"
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            conn.request(h.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            data = str(e).encode()
            h.send_response(502)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        finally:
            conn.close()
        h.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                h.send_header(k, v)
        # A HEAD answer's length is the object's, not the (empty) body's.
        h.send_header("Content-Length", resp.getheader("Content-Length", "0") if h.command == "HEAD"
                      else str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

