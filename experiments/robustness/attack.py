#!/usr/bin/env python3
"""Attack clients for experiments/robustness/run.sh (bounded in count and time, loopback only).

unique-paths PORT COUNT PATH_BYTES [PREFIX]  GETs of unique made-up paths on one keep-alive
                                             connection; prints the status counts as JSON.
silent PORT COUNT PROBE_FROM                 opens COUNT connections from 127.0.0.1 that send
                                             nothing, then times one GET from PROBE_FROM; prints
                                             the probe's status and milliseconds as JSON.
"""
import http.client
import json
import socket
import sys
import time


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


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "unique-paths":
        unique_paths(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), *(sys.argv[5:6]))
    elif cmd == "silent":
        silent(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown command {cmd}")
