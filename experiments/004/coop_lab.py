"""Shared by the cooperative-cache experiments (experiments/004/*.py): child processes, a
seeded site, Zipf popularity, the nodes' status, keep-alive clients through the browser
proxies. Python 3 standard library only."""

import bisect
import http.client
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Proc:
    """A child process whose stdout lines are read on a thread and can be waited for."""

    def __init__(self, args, name, work):
        self.name = name
        self.args = args
        self.err_path = os.path.join(work, f"{name}.stderr")
        self.p = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=open(self.err_path, "w"),
            text=True,
            bufsize=1,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, marker, timeout=60):
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            if marker in line:
                return line
        tail = open(self.err_path).read()[-2000:]
        raise RuntimeError(f"{self.name}: no line with {marker!r}\n{tail}")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def addr_of(line):
    """The HOST:PORT of the first http(s) URL on `line`."""
    url = next(w for w in line.split() if w.startswith("http"))
    return url.split("://", 1)[1].rstrip("/").split("/")[0]


def make_site(path, n, seed):
    rng = random.Random(seed)
    files = {}
    for i in range(n):
        name = f"f{i:03d}.bin"
        body = rng.randbytes(rng.randint(1024, 100 * 1024))
        with open(os.path.join(path, name), "wb") as f:
            f.write(body)
        files[name] = body
    return files


def zipf_cdf(n, s):
    w = [1 / (k**s) for k in range(1, n + 1)]
    total = sum(w)
    acc, cdf = 0.0, []
    for x in w:
        acc += x / total
        cdf.append(acc)
    return cdf


def coop_status(addr):
    with urllib.request.urlopen(f"http://{addr}/_slipstream/coop", timeout=10) as r:
        return json.load(r)


def wait_for(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def classify(cs):
    """(kind, detail) of a response from its Cache-Status."""
    if "revalidated" in cs:
        return "revalidated"
    if "slipstream-coop; hit" in cs:
        return "hit"
    if "slipstream-coop; fwd=miss" in cs or "slipstream-coop; fwd=stale" in cs:
        return "origin"
    return "other"


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]




def start_node(bin_, name, extra, work, procs):
    """Starts `slipstream node` (loopback origins allowed); its (proxy address, p2p address)."""
    common = ["node", "--listen", "127.0.0.1:0",
              "--set", 'proxy.allow_destinations=["127.0.0.0/8"]']
    p = Proc([bin_] + common + extra, name, work)
    procs.append(p)
    addr = addr_of(p.wait_line("browser proxy on"))
    p2p = p.wait_line("p2p: ").split("p2p: ", 1)[1].strip()
    return p, addr, p2p


def run_clients(nodes, origin_addr, files, order, cdf, seed, clients, think, end, t0,
                max_requests=20000):
    """Keep-alive clients (one connection each, client i through node i mod len(nodes)) asking
    for Zipf-popular files until `end` (monotonic). Returns (records, errors): a record is
    (start s since t0, node name, status, latency ms, Cache-Status, file name, body correct)."""
    records, errors, lock = [], [], threading.Lock()

    def client(ci):
        node_name, addr = nodes[ci % len(nodes)]
        rng = random.Random(seed * 100 + ci)
        conn = http.client.HTTPConnection(addr, timeout=30)
        mine = []
        try:
            for _ in range(max_requests):
                if time.monotonic() >= end:
                    break
                name = order[bisect.bisect_left(cdf, rng.random())]
                start = time.monotonic()
                try:
                    conn.request("GET", f"http://{origin_addr}/{name}")
                    r = conn.getresponse()
                    body = r.read()
                    cs = r.getheader("Cache-Status", "")
                    status = r.status
                    if r.getheader("Connection", "").lower() == "close":
                        conn.close()
                except Exception as e:  # noqa: BLE001 - recorded, then a new connection
                    conn.close()
                    conn = http.client.HTTPConnection(addr, timeout=30)
                    body, cs, status = None, f"error: {e!r}", 0
                done = time.monotonic()
                ok = status == 200 and body == files[name]
                mine.append((round(start - t0, 4), node_name, status,
                             round((done - start) * 1000, 3), cs, name, ok))
                time.sleep(think)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            conn.close()
            with lock:
                records.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0, end - time.monotonic()) + 60)
    records.sort()
    return records, errors
