#!/usr/bin/env python3
"""A fault-injecting HTTP/1.1 proxy for lodge's tests: lodge -> proxy -> moto_server.

Rules live in a JSON file (a list) that is re-read whenever it changes; each request is
matched on method and a substring of its path, and the first rule with times left acts:
  503              answer 503 SlowDown without forwarding
  403              answer 403 AccessDenied without forwarding
  reset_before     reset the client connection before forwarding anything
  reset_mid_body   read `bytes` bytes of the request body, then reset
  forward_then_reset  forward the whole request, wait for the answer, then reset the
                   client (the server acted; the client cannot know)
  blackhole        accept and say nothing until the client gives up
  stall            read `bytes` bytes of the request body (default: half), then take no
                   more and say nothing until the client gives up (a link that stops)
  delay            wait `ms` milliseconds, then forward
  cut_body         forward, then pass on the answer's head and only the first `bytes`
                   bytes of its body, and close (the client sees a partial transfer)
Every request is logged as one JSON line: time, method, path, action, body bytes seen,
and the Range header when the request had one.

usage: faultproxy.py LISTEN_PORT UPSTREAM_PORT RULES_FILE LOG_FILE [CERT_PEM KEY_PEM]
With a certificate and key it speaks TLS to its clients (plain HTTP upstream).
"""

import json
import os
import socket
import ssl
import struct
import sys
import threading
import time

LISTEN_PORT, UPSTREAM_PORT = int(sys.argv[1]), int(sys.argv[2])
RULES_FILE, LOG_FILE = sys.argv[3], sys.argv[4]
TLS = None
if len(sys.argv) > 6:
    TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    TLS.load_cert_chain(sys.argv[5], sys.argv[6])

lock = threading.Lock()
state = {"mtime": None, "rules": []}


def current_rules():
    try:
        mtime = os.stat(RULES_FILE).st_mtime_ns
    except FileNotFoundError:
        return []
    if mtime != state["mtime"]:
        with open(RULES_FILE) as f:
            text = f.read().strip()
        state["rules"] = json.loads(text) if text else []
        state["mtime"] = mtime
    return state["rules"]


def pick(method, path):
    with lock:
        for rule in current_rules():
            if rule.get("method", method) != method:
                continue
            if rule.get("path_contains", "") not in path:
                continue
            if rule.get("times", 1) <= 0:
                continue
            rule["times"] = rule.get("times", 1) - 1
            return rule
    return None


def log(entry):
    entry["t"] = time.time()
    line = json.dumps(entry) + "\n"
    with lock:
        with open(LOG_FILE, "a") as f:
            f.write(line)


def reset(sock):
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def read_exact(sock, n, have):
    data = have
    while len(data) < n:
        chunk = sock.recv(min(65536, n - len(data)))
        if not chunk:
            break
        data += chunk
    return data


def handle(client):
    try:
        if TLS is not None:
            try:
                client = TLS.wrap_socket(client, server_side=True)
            except (ssl.SSLError, OSError):
                client.close()  # a client that refused our certificate
                return
        head, rest = read_head(client)
        if head is None:
            client.close()
            return
        lines = head.split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = [l for l in lines[1:] if l]
        length = 0
        for h in headers:
            name, _, value = h.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        rule = pick(method, path)
        action = rule["action"] if rule else "forward"
        entry = {"method": method, "path": path, "action": action, "length": length}
        for h in headers:
            name, _, value = h.partition(":")
            if name.strip().lower() == "range":
                entry["range"] = value.strip()
        if action in ("503", "403"):
            read_exact(client, length, rest)
            if action == "503":
                body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                head = b"HTTP/1.1 503 Service Unavailable"
            else:
                body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
                head = b"HTTP/1.1 403 Forbidden"
            client.sendall(head + b"\r\nContent-Type: application/xml\r\n"
                           b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            client.close()
            log(entry)
            return
        if action == "reset_before":
            log(entry)
            reset(client)
            return
        if action == "reset_mid_body":
            got = read_exact(client, min(length, rule.get("bytes", length // 2)), rest)
            entry["body_bytes"] = len(got)
            log(entry)
            reset(client)
            return
        if action == "stall":
            got = read_exact(client, min(length, rule.get("bytes", length // 2)), rest)
            entry["body_bytes"] = len(got)
            log(entry)
            time.sleep(rule.get("hold_s", 60))
            client.close()
            return
        if action == "blackhole":
            log(entry)
            client.settimeout(rule.get("hold_s", 60))
            try:
                while client.recv(65536):
                    pass
            except OSError:
                pass
            client.close()
            return
        if action == "delay":
            time.sleep(rule.get("ms", 1000) / 1000.0)
        body = read_exact(client, length, rest)
        entry["body_bytes"] = len(body)
        upstream = socket.create_connection(("127.0.0.1", UPSTREAM_PORT))
        kept = [h for h in headers if h.split(":", 1)[0].strip().lower() != "connection"]
        out = "\r\n".join([lines[0]] + kept + ["Connection: close", "", ""]).encode("latin-1")
        upstream.sendall(out + body)
        answer = b""
        while True:
            chunk = upstream.recv(65536)
            if not chunk:
                break
            answer += chunk
        upstream.close()
        entry["status"] = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
        log(entry)
        if action == "forward_then_reset":
            reset(client)
            return
        if action == "cut_body":
            head, sep, rest_of_answer = answer.partition(b"\r\n\r\n")
            client.sendall(head + sep + rest_of_answer[:rule.get("bytes", len(rest_of_answer) // 2)])
            client.close()
            return
        client.sendall(answer)
        client.close()
    except Exception as e:  # a test proxy: report and drop the connection
        sys.stderr.write(f"faultproxy: {e!r}\n")
        try:
            client.close()
        except OSError:
            pass


def main():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", LISTEN_PORT))
    server.listen(128)
    while True:
        client, _ = server.accept()
        threading.Thread(target=handle, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()
