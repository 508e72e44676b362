"""A small loopback stand-in for the two credential services lodge reads on AWS compute, in
a thread of the test process, recording every request:

- the EC2 instance metadata service (IMDSv2): PUT /latest/api/token with
  X-aws-ec2-metadata-token-ttl-seconds, then GET /latest/meta-data/iam/security-credentials/
  (the role's name) and .../ROLE (the credentials), each with X-aws-ec2-metadata-token;
- the ECS/EKS container credentials endpoint: GET /creds with the Authorization token.

Each credentials answer holds a new access key id (ASIA...0001, ...0002), so a test can see
which answer signed which request; `expires_in` sets how far ahead Expiration is.
`hang=True` accepts connections and never answers (a link-local address that is not
there, or a stuck service)."""

import datetime
import http.server
import json
import socket
import threading


class Seen:
    def __init__(self, method, path, headers):
        self.method, self.path = method, path
        self.headers = {k.lower(): v for k, v in headers.items()}

    def __repr__(self):
        return f"{self.method} {self.path}"


class MetadataFake:
    def __init__(self, role="lodge-instance", prefix="ASIAIMDS", expires_in=3600, container_token="",
                 hang=False):
        self.role, self.prefix, self.expires_in = role, prefix, expires_in
        self.container_token = container_token
        self.token = "imds-session-token-" + prefix
        self.lock = threading.Lock()
        self._seen = []
        self.issued = 0
        self.hang = hang
        if hang:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.sock.listen(16)  # accepted by the kernel, never read or answered
            self.port = self.sock.getsockname()[1]
            return
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, status, body=b"", ctype="text/plain"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                fake.record(self)
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                if self.path != "/latest/api/token" or not ttl:
                    return self.answer(400)
                self.answer(200, fake.token.encode())

            def do_GET(self):
                fake.record(self)
                base = "/latest/meta-data/iam/security-credentials/"
                if self.path.startswith(base):
                    if self.headers.get("X-aws-ec2-metadata-token") != fake.token:
                        return self.answer(401)  # IMDSv2 only, as a hardened instance
                    name = self.path[len(base):]
                    if not name:
                        return self.answer(200, fake.role.encode())
                    if name != fake.role:
                        return self.answer(404)
                    return self.answer(200, fake.credentials(imds=True), "application/json")
                if self.path == "/creds":
                    if self.headers.get("Authorization", "") != fake.container_token:
                        return self.answer(401, b'{"message": "bad token"}')
                    return self.answer(200, fake.credentials(imds=False), "application/json")
                self.answer(404)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def record(self, h):
        with self.lock:
            self._seen.append(Seen(h.command, h.path, dict(h.headers)))

    def credentials(self, imds):
        with self.lock:
            self.issued += 1
            n = self.issued
        expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=self.expires_in)
        doc = {"AccessKeyId": f"{self.prefix}{n:04d}", "SecretAccessKey": f"secret{n}",
               "Token": f"session-token-{n}", "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if imds:
            doc.update({"Code": "Success", "Type": "AWS-HMAC"})
        else:
            doc["RoleArn"] = "arn:aws:iam::123456789012:role/task"
        return json.dumps(doc).encode()

    def requests(self):
        with self.lock:
            return list(self._seen)

    def stop(self):
        if self.hang:
            self.sock.close()
            return
        self.server.shutdown()
        self.server.server_close()
