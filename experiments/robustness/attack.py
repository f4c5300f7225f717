#!/usr/bin/env python3
"""Attack clients for experiments/robustness/run.sh (bounded in count and time, loopback only).

unique-paths PORT COUNT PATH_BYTES [PREFIX]  GETs of unique made-up paths on one keep-alive
                                             connection; prints the status counts as JSON.
silent PORT COUNT PROBE_FROM                 opens COUNT connections from 127.0.0.1 that send
                                             nothing, then times one GET from PROBE_FROM; prints
                                             the probe's status and milliseconds as JSON.
ssrf PROXY_PORT TARGET_PORT                  asks the forward proxy for the loopback service on
                                             TARGET_PORT and for its own control endpoints, in
                                             every spelling, by GET and CONNECT; prints each
                                             answer's status as JSON (all should be 403).
session-origin PORT                          serves, until killed, the page of the session its
                                             Cookie names for any path, as text/html with a
                                             Last-Modified and no Cache-Control.
deception PROXY_PORT                         a victim with a session cookie asks for
                                             /account.php/x.css, then a client without one
                                             asks for the same; prints whether it got the
                                             victim's page as JSON.
slow-readers PORT COUNT PREFIX RATE SECONDS  opens COUNT connections, each a GET of PREFIX
                                             followed by its own number (a unique query
                                             string), each reading RATE bytes a second for
                                             SECONDS, then closing; prints the statuses and
                                             bytes read as JSON.
chunked-origin PORT                          serves, until killed, a cacheable body without
                                             Content-Length that never ends (chunked, 64 KiB a
                                             chunk, as fast as it is read).
surrogate-origin PORT KEY_BYTES              serves, until killed, a cacheable 1 KB body for any
                                             path with a Surrogate-Key field of KEY_BYTES
                                             holding keys unique to that path.
"""
import http.client
import json
import socket
import sys
import time

# The Surrogate-Key attack's responses carry 200 KB fields, past http.client's 64 KiB line limit.
http.client._MAXLINE = 1 << 20


def unique_paths(port, count, path_bytes, prefix="/"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    statuses = {}
    pad = "x" * max(0, path_bytes - 32)
    for i in range(count):
        path = f"{prefix}{i:012d}-{pad}"
        try:
            conn.request("GET", path, headers={"Host": "a"})
            r = conn.getresponse()
            r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
        except (OSError, http.client.HTTPException):
            statuses["error"] = statuses.get("error", 0) + 1
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    print(json.dumps({"requests": count, "statuses": {str(k): v for k, v in statuses.items()}}))


def silent(port, count, probe_from):
    held = []
    refused = 0
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            held.append(s)
        except OSError:
            refused += 1
    start = time.monotonic()
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(10)
    probe.bind((probe_from, 0))
    probe.connect(("127.0.0.1", port))
    probe.sendall(b"GET /index.html HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = probe.recv(65536)
        if not chunk:
            break
        data += chunk
    ms = (time.monotonic() - start) * 1000
    status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none"
    # How many of the silent connections the server had already closed.
    closed = 0
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    print(json.dumps({"silent": count, "refused_at_connect": refused, "closed_by_server": closed,
                      "probe_status": status, "probe_ms": round(ms, 2)}))


def status_of(port, raw):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none", data


def ssrf(proxy_port, target_port):
    # Loopback spellings name this machine; the private and link-local ones are refused before
    # connecting (the proxy checks the address it would connect to), so no packet leaves it.
    hosts = ["127.0.0.1", "localhost", "2130706433", "0x7f.1", "127.1", "0.0.0.0", "[::1]",
             "[::ffff:127.0.0.1]", "10.0.0.1", "192.168.0.1", "172.16.0.1", "169.254.169.254",
             "[::ffff:10.0.0.1]", "[fe80::1]", "[fc00::1]"]
    answers = {}
    for h in hosts:
        url = f"http://{h}:{target_port}/"
        answers["GET " + url], _ = status_of(
            proxy_port, f"GET {url} HTTP/1.1\r\nHost: {h}:{target_port}\r\nConnection: close\r\n\r\n".encode())
    for path in ["/_slipstream/metrics", "/_slipstream/status"]:
        url = f"http://127.0.0.1:{proxy_port}{path}"
        answers["GET " + url], _ = status_of(
            proxy_port, f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{proxy_port}\r\nConnection: close\r\n\r\n".encode())
    for h in ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"]:
        target = f"{h}:{target_port}"
        answers["CONNECT " + target], _ = status_of(
            proxy_port, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
    print(json.dumps({"answers": answers, "all_refused": all(v == "403" for v in answers.values())}))


def serve(port, do_get, keep_alive=False):
    """Serves GET on 127.0.0.1:PORT with `do_get(handler)` until killed, logging nothing."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def do_GET(self):
            do_get(self)

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def answer(handler, body, fields):
    """A 200 with `fields` and `body` (its Content-Length added)."""
    handler.send_response(200)
    for name, value in fields:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def session_origin(port):
    def do_get(h):
        cookie = h.headers.get("Cookie", "")
        who = cookie.split("session=", 1)[1] if "session=" in cookie else "nobody"
        answer(h, f"account of {who}".encode(), [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")])

    serve(port, do_get)


def deception(proxy_port):
    path = "/account.php/x.css"
    victim_status, victim = status_of(
        proxy_port, f"GET {path} HTTP/1.1\r\nHost: a\r\nCookie: session=victim\r\nConnection: close\r\n\r\n".encode())
    status, data = status_of(
        proxy_port, f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".encode())
    print(json.dumps({"victim_status": victim_status, "attacker_status": status,
                      "victim_page_served_to_attacker": b"account of victim" in data}))


def slow_readers(port, count, prefix, rate, seconds):
    import threading

    results = [None] * count

    def reader(i):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            s.sendall(f"GET {prefix}{i} HTTP/1.1\r\nHost: a\r\n\r\n".encode())
            got, status = 0, "none"
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                chunk = s.recv(max(1, rate // 10))
                if not chunk:
                    break
                if got == 0 and chunk.startswith(b"HTTP/"):
                    status = chunk.split(b" ", 2)[1].decode()
                got += len(chunk)
                time.sleep(0.1)
            s.close()
            results[i] = (status, got)
        except OSError as e:
            results[i] = ("error " + type(e).__name__, 0)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    print(json.dumps({"clients": count, "statuses": statuses,
                      "bytes_read": sum(g for _, g in results)}))


def chunked_origin(port):
    def do_get(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Cache-Control", "max-age=3600")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b"%x\r\n%s\r\n" % (65536, b"c" * 65536)
        try:
            while True:
                h.wfile.write(chunk)
        except OSError:
            pass
        h.close_connection = True

    serve(port, do_get, keep_alive=True)


def surrogate_origin(port, key_bytes):
    def do_get(h):
        tag = "".join(c if c.isalnum() else "-" for c in h.path)[-40:]
        keys, size, j = [], 0, 0
        while size < key_bytes:
            k = f"{tag}-{j}"
            keys.append(k)
            size += len(k) + 1
            j += 1
        answer(h, b"s" * 1024, [
            ("Content-Type", "application/octet-stream"),
            ("Cache-Control", "max-age=3600"),
            ("Surrogate-Key", " ".join(keys))])

    serve(port, do_get, keep_alive=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "unique-paths":
        unique_paths(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *(sys.argv[5:6]))
    elif cmd == "silent":
        silent(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "ssrf":
        ssrf(int(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "session-origin":
        session_origin(int(sys.argv[2]))
    elif cmd == "deception":
        deception(int(sys.argv[2]))
    elif cmd == "slow-readers":
        slow_readers(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]),
                     float(sys.argv[6]))
    elif cmd == "chunked-origin":
        chunked_origin(int(sys.argv[2]))
    elif cmd == "surrogate-origin":
        surrogate_origin(int(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {cmd}")
