#!/usr/bin/env python3
"""Attack clients for the cluster parts of experiments/robustness/run.sh (issue 40): the
prefetch model, the cooperative cache's browser proxy, and Web++ gossip. Bounded in count and
time, loopback only; each prints JSON.

nps-flood PORT COUNT QUERY_BYTES          GETs of /index.html?q=<unique, QUERY_BYTES long>, each
                                          with its own User-Agent, on one keep-alive connection.
forward-unique PROXY_PORT COUNT URL_BASE  GETs of URL_BASE?q=<unique> through a forward proxy
                                          (absolute-form), one keep-alive connection.
replica-flood PORT COUNT TOKEN            PUTs COUNT replicas under ~1.9 KB URLs to a member's
                                          replica API (each entry about 3.9 KB of gossip).
gossip-forge UDP_PORT COUNT HTTP_PORT     sends COUNT datagrams a stranger could send to a
                                          member's gossip port: random bytes, unsealed chitchat
                                          SYNs (some listing 1,070 made-up nodes), cut and
                                          altered copies; waits (by the member's counters) for
                                          each batch to be read before the next, so the kernel
                                          drops none unseen; prints what the member counted.
"""
import http.client
import json
import random
import socket
import struct
import sys
import time


def count_status(statuses, key):
    statuses[key] = statuses.get(key, 0) + 1


def requests(port, count, request, timeout=10):
    """Sends `request(conn, i)` for i in 0..count on one keep-alive connection (a new one after
    an error); prints the answers' status counts as JSON."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    statuses = {}
    for i in range(count):
        try:
            request(conn, i)
            r = conn.getresponse()
            r.read()
            count_status(statuses, r.status)
        except (OSError, http.client.HTTPException):
            count_status(statuses, "error")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    print(json.dumps({"statuses": statuses}))


def nps_flood(port, count, query_bytes):
    pad = "x" * max(0, query_bytes - 12)
    requests(port, count, lambda c, i: c.request(
        "GET", f"/index.html?q={i:012d}{pad}",
        headers={"User-Agent": f"agent-{i:08d}-" + "u" * 200}))


def forward_unique(proxy_port, count, url_base):
    requests(proxy_port, count, lambda c, i: c.request("GET", f"{url_base}?q={i:012d}"))


def replica_flood(port, count, token):
    pad = "p" * 1900
    requests(port, count, lambda c, i: c.request(
        "PUT", f"/_slipstream/replicas/{i:06d}-{pad}", body=b"x",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"}),
        timeout=30)


def unsealed_syn(nodes):
    """A chitchat V0 SYN (magic 45139, version 0, type 0) whose digest lists `nodes` nodes."""
    m = bytearray(struct.pack("<HBB", 45139, 0, 0))
    m += struct.pack("<H", nodes)
    for i in range(nodes):
        name = f"fake-{i:05d}".encode()
        m += struct.pack("<H", len(name)) + name + struct.pack("<Q", 1)
        m += b"\x04" + bytes([127, 0, 0, 1]) + struct.pack("<H", 7946)
        m += bytes(24)
    cluster = b"slipstream"
    m += struct.pack("<H", len(cluster)) + cluster
    return bytes(m)


def refused(http_port):
    conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=10)
    conn.request("GET", "/_slipstream/directory")
    d = json.loads(conn.getresponse().read())
    return sum(d["gossip"]["refused"].values()), d


def gossip_forge(udp_port, count, http_port):
    rng = random.Random(40)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    small, huge = unsealed_syn(3), unsealed_syn(1070)
    start, _ = refused(http_port)
    sent, batch = 0, 0
    t0 = time.time()
    while sent < count:
        kind = sent % 4
        if kind == 0:
            p = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1400)))
        elif kind == 1:
            p = huge if sent % 1000 == 1 else small
        elif kind == 2:
            p = small[: rng.randrange(len(small))]
        else:
            b = bytearray(b"SSG1" + bytes(rng.getrandbits(8) for _ in range(rng.randrange(40, 600))))
            p = bytes(b)
        sock.sendto(p, ("127.0.0.1", udp_port))
        sent += 1
        batch += len(p)
        if batch > 16 * 1024 or sent % 32 == 0 or sent == count:
            deadline = time.time() + 10
            while refused(http_port)[0] < start + sent:
                if time.time() > deadline:
                    print(json.dumps({"error": f"the member read {refused(http_port)[0] - start} of {sent}"}))
                    sys.exit(1)
            batch = 0
    total, d = refused(http_port)
    print(json.dumps({"sent": sent, "refused": total - start, "by_reason": d["gossip"]["refused"],
                      "seconds": round(time.time() - t0, 1),
                      "nodes": {k: v["live"] for k, v in d["nodes"].items()},
                      "entries": len(d["entries"]), "rejected": d["rejected"],
                      "impostors": d["impostors"]}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "nps-flood":
        nps_flood(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "forward-unique":
        forward_unique(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "replica-flood":
        replica_flood(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif cmd == "gossip-forge":
        gossip_forge(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(f"unknown command {cmd}")
