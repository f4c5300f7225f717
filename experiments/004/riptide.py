#!/usr/bin/env python3
"""Paper 004's live experiments with real `slipstream node` processes on loopback.

Each node's peer-to-peer port sits behind a Toxiproxy proxy of its own that adds a one-way
latency in each direction, and the node announces that proxy's address as its only address
(`--external`), so every libp2p connection to the node crosses it. The origin sits behind a
"WAN" proxy. Run by experiments/004/riptide.sh, which builds slipstream and Toxiproxy first.

Parts (each writes CSVs into OUT; riptide.sh draws the charts):
  table1   proxy overhead by object size: direct, through a node as a transparent proxy
           (Cache-Control: no-store skips the cooperative cache) and a hit in the node's store
  fig16    hit latency: a central `slipstream proxy` against a Riptide ring with and without
           Bloom-filter digests, requests interleaved; also memory per node and lookups/s
  fig17    cache managers joining a running ring: hints each receives per interval
  fig18    a flash crowd spread over replicas: requests each node serves per interval
  fig23    push caching behind a 10 Mbit/s origin link: latency and throughput by clients
"""

import argparse
import csv
import http.client
import json
import os
import queue
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process whose stdout lines are read on a thread and can be waited for."""

    def __init__(self, args, name, work):
        self.name = name
        self.err_path = os.path.join(work, f"{name}.log")
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

    def wait_line(self, prefix, timeout=60):
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            if prefix in line:
                return line
        tail = open(self.err_path).read()[-2000:]
        raise RuntimeError(f"{self.name}: no line starting with {prefix!r}\n{tail}")

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def cpu_s(self):
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Toxi:
    """A Toxiproxy server and its HTTP API."""

    def __init__(self, binary, work):
        self.port = free_port()
        self.proc = Proc([binary, "-host", "127.0.0.1", "-port", str(self.port)], "toxiproxy", work)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.api("GET", "/version")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def api(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError(f"toxiproxy {method} {path}: {r.status} {data[:200]!r}")
        return data

    def proxy(self, name, upstream_port, latency_ms=0.0, rate_kBps=None, host="127.0.0.1"):
        """A proxy to host:upstream_port adding latency_ms each way; its port."""
        port = free_port()
        self.api("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}",
                                      "upstream": f"{host}:{upstream_port}", "enabled": True})
        if latency_ms > 0:
            for stream in ("upstream", "downstream"):
                self.api("POST", f"/proxies/{name}/toxics",
                         {"name": f"lat-{stream}", "type": "latency", "stream": stream,
                          "attributes": {"latency": int(round(latency_ms)), "jitter": 0}})
        if rate_kBps:
            self.api("POST", f"/proxies/{name}/toxics",
                     {"name": "rate", "type": "bandwidth", "stream": "downstream",
                      "attributes": {"rate": int(rate_kBps)}})
        return port

    def drop(self, name):
        self.api("DELETE", f"/proxies/{name}")


class Lab:
    """Everything one part starts, stopped together."""

    def __init__(self, args, toxi):
        self.args = args
        self.toxi = toxi
        self.procs = []
        self.proxies = []
        self.work = tempfile.mkdtemp(prefix="riptide-")
        self.n = 0
        self.undo = []

    def close(self):
        for p in reversed(self.procs):
            p.stop()
        for cmd in self.undo:
            subprocess.run(cmd, capture_output=True)
        for name in self.proxies:
            try:
                self.toxi.drop(name)
            except Exception:
                pass

    def uniq(self, name):
        self.n += 1
        return f"{name}-{self.n}-{os.getpid()}"

    def proxy(self, name, upstream, latency_ms=0.0, rate_kBps=None, host="127.0.0.1"):
        name = self.uniq(name)
        self.proxies.append(name)
        return self.toxi.proxy(name, upstream, latency_ms, rate_kBps, host)

    def origin(self, site, max_age=600):
        port = free_port()
        p = Proc([self.args.bin, "serve", site, "--listen", f"127.0.0.1:{port}",
                  "--cache-control", f"max-age={max_age}", "--workers", "1"],
                 self.uniq("origin"), self.work)
        self.procs.append(p)
        wait_http(port)
        return port

    def shaped_origin(self, site, max_age, rate):
        """An origin in a network namespace of its own whose only link sends at `rate` (tc
        tbf on its side of a veth pair, so every connection shares it); its address."""
        ns, outer, inner = f"rip{os.getpid()}", f"rip{os.getpid()}o", f"rip{os.getpid()}i"
        net = f"10.231.{os.getpid() % 250}"
        cmds = [["ip", "netns", "add", ns],
                ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
                ["ip", "link", "set", inner, "netns", ns],
                ["ip", "addr", "add", f"{net}.1/30", "dev", outer],
                ["ip", "link", "set", outer, "up"],
                ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{net}.2/30", "dev", inner],
                ["ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"],
                ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", inner, "root", "tbf",
                 "rate", rate, "burst", "32kb", "latency", "400ms"]]
        self.undo += [["ip", "link", "del", outer], ["ip", "netns", "del", ns]]
        for c in cmds:
            r = subprocess.run(c, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"{' '.join(c)}: {r.stderr.strip()} (needs root for a "
                                   "network namespace and tc)")
        port = 8080
        p = Proc(["ip", "netns", "exec", ns, self.args.bin, "serve", site, "--listen",
                  f"{net}.2:{port}", "--cache-control", f"max-age={max_age}", "--workers", "1"],
                 self.uniq("origin"), self.work)
        self.procs.append(p)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection((f"{net}.2", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the shaped origin does not answer")
                time.sleep(0.05)
        return f"{net}.2", port

    def keygen(self):
        path = os.path.join(self.work, self.uniq("provider") + ".key")
        out = subprocess.run([self.args.bin, "node", "keygen", path], check=True,
                             capture_output=True, text=True)
        return path, out.stdout.strip()

    def node(self, name, provider, latency_ms, key=None, roles=(), bootstrap=(), sets=(),
             flags=()):
        """A node whose p2p port is behind a Toxiproxy of latency_ms each way."""
        p2p_port = free_port()
        front = self.proxy(name, p2p_port, latency_ms)
        data = os.path.join(self.work, self.uniq(name))
        os.makedirs(data)
        # The origin is on loopback, which a browser (forward) proxy reaches only when told to.
        args = [self.args.bin, "node", "--listen", "127.0.0.1:0",
                "--set", 'proxy.allow_destinations=["127.0.0.0/8"]',
                "--p2p-listen", f"/ip4/127.0.0.1/tcp/{p2p_port}",
                "--external", f"/ip4/127.0.0.1/tcp/{front}",
                "--data-dir", data]
        args += ["--provider-key", key] if key else ["--provider", provider]
        for r in roles:
            args += ["--role", r]
        for b in bootstrap:
            args += ["--bootstrap", b]
        for s in sets:
            args += ["--set", s]
        args += list(flags)
        p = Proc(args, self.uniq(name), self.work)
        self.procs.append(p)
        first = p.wait_line("browser proxy on http://")
        addr = first.split("browser proxy on http://", 1)[1].split("/", 1)[0]
        p2p = p.wait_line("p2p: ").split("p2p: ", 1)[1]
        host, port = addr.rsplit(":", 1)
        return {"name": name, "proc": p, "http": (host, int(port)), "p2p": p2p,
                "latency_ms": latency_ms}

    def central(self, origin_port, latency_ms):
        port = free_port()
        p = Proc([self.args.bin, "proxy", "--listen", f"127.0.0.1:{port}", "--cache-size",
                  "256MiB"], self.uniq("central"), self.work)
        self.procs.append(p)
        wait_http(port)
        front = self.proxy("central", port, latency_ms)
        return ("127.0.0.1", front), p


def wait_http(port, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {port}")
            time.sleep(0.05)


def status(node):
    c = http.client.HTTPConnection(*node["http"], timeout=10)
    c.request("GET", "/_slipstream/coop")
    r = c.getresponse()
    body = r.read()
    c.close()
    return json.loads(body)


def wait_status(node, what, done, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        s = status(node)
        if done(s):
            return s
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node['name']}: timed out waiting for {what}")
        time.sleep(0.2)


class Client:
    """Keep-alive GETs through a forward proxy (absolute-form) or straight to an origin."""

    def __init__(self, addr, proxied=True):
        self.addr = addr
        self.proxied = proxied
        self.conn = None

    def get(self, url, headers=None):
        """(latency s, status, body bytes, Cache-Status)."""
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(*self.addr, timeout=30)
            target = url if self.proxied else "/" + url.split("/", 3)[3]
            h = {"Host": url.split("/", 3)[2]}
            h.update(headers or {})
            try:
                t0 = time.perf_counter()
                self.conn.request("GET", target, headers=h)
                r = self.conn.getresponse()
                body = r.read()
                dt = time.perf_counter() - t0
                return dt, r.status, len(body), r.getheader("cache-status", "")
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


def detail(cache_status):
    for member in cache_status.split(","):
        if "slipstream-coop" in member:
            if "detail=" in member:
                return member.split("detail=", 1)[1].split(";")[0].strip()
            if "fwd=" in member:
                return member.split("fwd=", 1)[1].split(";")[0].strip()
    return "hit" if "hit" in cache_status else "miss"


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)


def specweb_site(site, n, rng):
    """n files with SPECweb99's class mix (35 % < 1 KB, 50 % < 10 KB, 14 % < 100 KB, 1 % <
    1 MB); their names."""
    names = []
    for i in range(n):
        r = rng.random()
        cls = 0 if r < 0.35 else 1 if r < 0.85 else 2 if r < 0.99 else 3
        size = int(102.4 * (10 ** cls) * rng.randint(1, 9))
        name = f"c{cls}_{i}.bin"
        with open(os.path.join(site, name), "wb") as f:
            f.write(bytes([65 + i % 26]) * size)
        names.append(name)
    return names


# ---------------------------------------------------------------- Table 1


def table1(args, toxi, out):
    lab = Lab(args, toxi)
    try:
        site = os.path.join(lab.work, "site")
        os.makedirs(site)
        sizes = [1024, 4096, 10240, 40960, 102400, 409600]
        for s in sizes:
            with open(os.path.join(site, f"t{s}.bin"), "wb") as f:
                f.write(b"x" * s)
        origin = lab.origin(site)
        key, provider = lab.keygen()
        n = lab.node("table1", provider, 0, key=key, roles=("gateway", "manager"),
                     sets=("coop.spread_copies=0",))
        direct = Client(("127.0.0.1", origin), proxied=False)
        via = Client(n["http"])
        rows = []
        for s in sizes:
            url = f"http://127.0.0.1:{origin}/t{s}.bin"
            # The first request is a miss whose hint makes the node's own replica.
            via.get(url)
            wait_status(n, f"a replica of {url}",
                        lambda st: any(o["url"] == url for o in st["objects"]))
            for _ in range(3):
                direct.get(url)
                via.get(url, {"Cache-Control": "no-store"})
                via.get(url)
            for i in range(args.reps):
                d = direct.get(url)
                t = via.get(url, {"Cache-Control": "no-store"})
                h = via.get(url)
                assert d[1] == t[1] == h[1] == 200 and d[2] == t[2] == h[2] == s, (d, t, h)
                assert detail(h[3]) == "store", h[3]
                rows.append((s, i, d[0] * 1e3, t[0] * 1e3, h[0] * 1e3))
        write_csv(os.path.join(out, "table1.csv"),
                  ["size_bytes", "rep", "direct_ms", "transparent_ms", "store_hit_ms"], rows)
        log("table1: done")
    finally:
        lab.close()


# ---------------------------------------------------------------- Fig. 16


def ring(lab, provider, key, origin_wan, lat, digests, spread=0, hot_after=8, clients=2,
         caches=3, monitor=(), sets=()):
    """A gateway+manager and `caches` cache nodes and `clients` client nodes."""
    common = [f"coop.spread_copies={spread}", f"coop.hot_after={hot_after}",
              "coop.lookup_budget_ms=2000"] + list(sets)
    flags = [] if digests else ["--no-digests"]
    g_flags = flags + [f for m in monitor for f in ("--monitor", m)]
    g = lab.node("gateway", provider, lat["gateway"], key=key, roles=("gateway", "manager"),
                 sets=common + ["coop.monitor_period_ms=1s"], flags=g_flags)
    boot = [g["p2p"]]
    nodes = [g]
    for i in range(caches):
        nodes.append(lab.node(f"cache{i}", provider, lat["cache"][i], bootstrap=boot,
                              sets=common, flags=flags))
    cl = []
    for i in range(clients):
        c = lab.node(f"client{i}", provider, lat["client"][i], bootstrap=boot, sets=common,
                     flags=flags)
        nodes.append(c)
        cl.append(c)
    # Every node is connected (to the gateway at least).
    for n in nodes:
        wait_status(n, "a peer", lambda s: len(s["peers"]) >= 1)
    return g, cl, nodes


def fig16(args, toxi, out, rng):
    lab = Lab(args, toxi)
    rows, mem, speed = [], [], []
    try:
        site = os.path.join(lab.work, "site")
        os.makedirs(site)
        names = specweb_site(site, args.objects, rng)
        origin = lab.origin(site)
        wan = lab.proxy("wan", origin, args.wan_ms)
        key, provider = lab.keygen()
        lat = {"gateway": args.stub_ms, "cache": [rng.uniform(1.0, 3.5) for _ in range(3)],
               "client": [rng.uniform(1.0, 3.5) for _ in range(2)]}
        central_addr, central = lab.central(wan, args.stub_ms)
        urls = [f"http://127.0.0.1:{wan}/{n}" for n in names]
        for digests in (True, False):
            system = "riptide" if digests else "riptide-dht"
            g, clients, nodes = ring(lab, provider, key, wan, lat, digests)
            # Warm both caches: every object through the central proxy and through a client's
            # node, whose miss hint makes the manager's replica (004 §6.4: the simple primitive,
            # replicas on the manager's node).
            c0 = Client(clients[0]["http"])
            cc = Client(central_addr)
            for u in urls:
                cc.get(u)
                c0.get(u)
            wait_status(g, "every replica", lambda s: s["store"]["objects"] >= len(urls), 180)
            if digests:
                # The clients' nodes have the manager's digest (sent every 2 s).
                for c in clients:
                    cl = Client(c["http"])
                    deadline = time.monotonic() + 30
                    while detail(cl.get(urls[0])[3]) != "nearby":
                        if time.monotonic() > deadline:
                            raise RuntimeError("no digest reached the clients")
                        time.sleep(0.2)
            lock = threading.Lock()
            before = {n["name"]: n["proc"].cpu_s() for n in nodes}
            looked = {n["name"]: lookups(status(n)) for n in nodes}
            t0 = time.monotonic()

            def run(c, seed):
                r = random.Random(seed)
                mine = Client(c["http"])
                central_c = Client(central_addr)
                for i in range(args.requests):
                    u = r.choice(urls)
                    # Interleaved: the central proxy and the ring take turns.
                    for sys_name, cl in ((("central", central_c), (system, mine))
                                         if i % 2 == 0 else
                                         ((system, mine), ("central", central_c))):
                        dt, st, size, cs = cl.get(u)
                        assert st == 200, (sys_name, u, st)
                        with lock:
                            rows.append((sys_name, c["name"], u.rsplit("/", 1)[1], size,
                                         dt * 1e3, detail(cs) if sys_name != "central"
                                         else ("hit" if "hit" in cs else "miss")))

            threads = [threading.Thread(target=run, args=(c, i)) for i, c in enumerate(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            for n in nodes:
                s = status(n)
                mem.append((system, n["name"], n["proc"].rss_kib(), s["store"]["objects"],
                            s["store"]["bytes"]))
                cpu = n["proc"].cpu_s() - before[n["name"]]
                lk = lookups(s) - looked[n["name"]]
                speed.append((system, n["name"], lk, round(elapsed, 2), round(lk / elapsed, 1),
                              round(cpu, 3), round(lk / cpu, 1) if cpu > 0 else ""))
            mem.append(("central", "central-proxy", central.rss_kib(), len(urls), ""))
            for n in nodes:
                n["proc"].stop()
            log(f"fig16: {system} done")
        write_csv(os.path.join(out, "fig16-requests.csv"),
                  ["system", "client", "object", "bytes", "latency_ms", "outcome"], rows)
        write_csv(os.path.join(out, "memory.csv"),
                  ["system", "node", "rss_kib", "objects", "object_bytes"], mem)
        write_csv(os.path.join(out, "lookups.csv"),
                  ["system", "node", "lookups", "seconds", "lookups_per_s", "cpu_s",
                   "lookups_per_cpu_s"], speed)
        cdf = []
        for system in ("central", "riptide", "riptide-dht"):
            xs = sorted(r[4] for r in rows if r[0] == system)
            for i, x in enumerate(xs):
                if i % max(1, len(xs) // 100) == 0 or i == len(xs) - 1:
                    cdf.append((system, round(x, 3), round((i + 1) / len(xs), 4)))
        write_csv(os.path.join(out, "fig16.csv"), ["system", "latency_ms", "fraction"], cdf)
    finally:
        lab.close()


def one_file_site(args, lab, name, body):
    """An origin serving one file behind the WAN proxy, and a new provider key:
    (the WAN proxy's port, the key's path, the provider's id)."""
    site = os.path.join(lab.work, "site")
    os.makedirs(site)
    with open(os.path.join(site, name), "w") as f:
        f.write(body)
    wan = lab.proxy("wan", lab.origin(site), args.wan_ms)
    key, provider = lab.keygen()
    return wan, key, provider


def lookups(s):
    lk = s["lookups"]
    return sum(lk[k] for k in ("store", "nearby", "dht", "miss", "stale"))


# ---------------------------------------------------------------- Fig. 17


def fig17(args, toxi, out, rng):
    """Managers join a running ring: M1 far, then M2 nearer, then M3 as near as M2."""
    lab = Lab(args, toxi)
    try:
        wan, key, provider = one_file_site(args, lab, "s.txt", "s" * 2000)
        common = ["coop.spread_copies=0", "coop.lookup_budget_ms=2000"]
        g = lab.node("gateway", provider, 10.0, key=key, roles=("gateway",), sets=common)
        boot = [g["p2p"]]
        clients = [lab.node(f"client{i}", provider, 2.0, bootstrap=boot, sets=common)
                   for i in range(3)]
        managers = []
        plan = [(0.0, "manager1", 8.0), (args.fig17_step, "manager2", 2.0),
                (2 * args.fig17_step, "manager3", 2.0)]
        stop = threading.Event()
        counter = [0]
        lock = threading.Lock()

        def load(c):
            cl = Client(c["http"])
            while not stop.is_set():
                with lock:
                    counter[0] += 1
                    i = counter[0]
                # A new URL each time: a miss, whose hint goes to the nearest manager.
                cl.get(f"http://127.0.0.1:{wan}/s.txt?n={i}")
                time.sleep(1.0 / args.fig17_rate)

        rows = []
        t0 = time.monotonic()
        threads = []
        seen = {}
        interval = args.fig17_interval
        end = 3 * args.fig17_step
        k = 0
        while True:
            now = time.monotonic() - t0
            while plan and plan[0][0] <= now:
                _, name, latency = plan.pop(0)
                managers.append(lab.node(name, provider, latency, bootstrap=boot,
                                         roles=("manager",), sets=common))
                log(f"fig17: {name} joined at {time.monotonic() - t0:.1f} s")
                if not threads:
                    threads = [threading.Thread(target=load, args=(c,), daemon=True)
                               for c in clients]
                    for t in threads:
                        t.start()
            if now >= end:
                break
            k += 1
            # Intervals are measured from the start; the last may be short of the next.
            time.sleep(max(0.0, t0 + k * interval - time.monotonic()))
            for m in managers:
                h = status(m)["manager"]["hints"]
                rows.append((k, round(k * interval, 1), m["name"], h - seen.get(m["name"], 0)))
                seen[m["name"]] = h
        stop.set()
        for t in threads:
            t.join(10)
        write_csv(os.path.join(out, "fig17.csv"), ["interval", "t_s", "manager", "hints"], rows)
        log("fig17: done")
    finally:
        lab.close()


# ---------------------------------------------------------------- Figs. 18-19


def fig18(args, toxi, out, rng):
    """A flash crowd for one object; the manager spreads it; requests served per node."""
    lab = Lab(args, toxi)
    try:
        wan, key, provider = one_file_site(args, lab, "hot.html", "h" * 8000)
        lat = {"gateway": 3.0, "cache": [rng.uniform(1.0, 3.5) for _ in range(4)],
               "client": [rng.uniform(1.0, 3.5) for _ in range(5)]}
        g, clients, nodes = ring(lab, provider, key, wan, lat, True, spread=args.spread,
                                 hot_after=args.hot_after, clients=5, caches=4)
        url = f"http://127.0.0.1:{wan}/hot.html"
        stop = threading.Event()

        def load(c):
            cl = Client(c["http"])
            while not stop.is_set():
                assert cl.get(url)[1] == 200
                time.sleep(1.0 / args.fig18_rate)

        def served(n):
            s = status(n)
            return s["net"]["served"] + s["lookups"]["store"]

        base = {n["name"]: served(n) for n in nodes}
        threads = [threading.Thread(target=load, args=(c,), daemon=True) for c in clients]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        rows = []
        prev = dict(base)
        for k in range(1, int(args.fig18_seconds / args.fig18_interval) + 1):
            time.sleep(max(0.0, t0 + k * args.fig18_interval - time.monotonic()))
            for n in nodes:
                v = served(n)
                rows.append((k, round(k * args.fig18_interval, 1), n["name"], v - prev[n["name"]]))
                prev[n["name"]] = v
        stop.set()
        for t in threads:
            t.join(10)
        write_csv(os.path.join(out, "fig18.csv"), ["interval", "t_s", "node", "served"], rows)
        totals = sorted(((n["name"], prev[n["name"]] - base[n["name"]]) for n in nodes),
                        key=lambda x: -x[1])
        write_csv(os.path.join(out, "fig19.csv"), ["node", "served"], totals)
        log("fig18: done", totals)
    finally:
        lab.close()


# ---------------------------------------------------------------- Figs. 23-24


def fig23(args, toxi, out, rng):
    """Push caching: a 16 KB document that changes every 30 s, stale after 5 s, behind a
    10 Mbit/s origin link; clients straight to the origin against clients of a ring whose
    gateway monitors the document and pushes each change."""
    lab = Lab(args, toxi)
    try:
        site = os.path.join(lab.work, "site")
        os.makedirs(site)
        doc = os.path.join(site, "news.html")
        version = [0]

        def publish():
            version[0] += 1
            body = (f"<!-- version {version[0]} -->\n" + "n" * 16384)[:16384]
            tmp = doc + ".tmp"
            with open(tmp, "w") as f:
                f.write(body)
            os.replace(tmp, doc)

        publish()
        # The origin's link is shared by every connection (a per-connection Toxiproxy
        # bandwidth toxic would give each its own 10 Mbit/s): tc tbf in a namespace.
        host, port = lab.shaped_origin(site, 5, "10mbit")
        slow = lab.proxy("slow", port, args.wan_ms, host=host)
        url = f"http://127.0.0.1:{slow}/news.html"
        key, provider = lab.keygen()
        lat = {"gateway": 3.0, "cache": [rng.uniform(1.0, 3.5) for _ in range(2)],
               "client": [rng.uniform(1.0, 3.5) for _ in range(4)]}
        g, clients, nodes = ring(lab, provider, key, slow, lat, True, spread=0,
                                 clients=4, caches=2, monitor=(url,))
        # The first request through each client's node makes the replica.
        Client(clients[0]["http"]).get(url)
        wait_status(g, "the replica", lambda s: s["store"]["objects"] >= 1)
        stop_changes = threading.Event()

        def changes():
            while not stop_changes.wait(30):
                publish()

        threading.Thread(target=changes, daemon=True).start()
        rows, tput = [], []
        for n_clients in args.fig23_clients:
            for system in ("origin", "riptide"):
                lock = threading.Lock()
                done = []
                stop = threading.Event()

                def run(i):
                    if system == "origin":
                        cl = Client(("127.0.0.1", slow), proxied=False)
                    else:
                        cl = Client(clients[i % len(clients)]["http"])
                    while not stop.is_set():
                        try:
                            dt, st, size, cs = cl.get(url)
                        except (http.client.HTTPException, OSError):
                            dt, st, cs = 0.0, 0, "error"
                        with lock:
                            done.append((time.monotonic(), dt, st, detail(cs)))

                threads = [threading.Thread(target=run, args=(i,), daemon=True)
                           for i in range(n_clients)]
                t0 = time.monotonic()
                for t in threads:
                    t.start()
                time.sleep(args.fig23_seconds)
                stop.set()
                for t in threads:
                    t.join(30)
                ok = [d for d in done if d[2] == 200]
                for d in ok:
                    rows.append((system, n_clients, round(d[1] * 1e3, 3), d[3]))
                per_s = [sum(1 for d in ok if t0 + s <= d[0] < t0 + s + 1)
                         for s in range(int(args.fig23_seconds))]
                tput.append((system, n_clients, round(statistics.mean(per_s), 1),
                             round(statistics.pstdev(per_s), 1), len(done) - len(ok)))
                log(f"fig23: {system}, {n_clients} clients: {statistics.mean(per_s):.0f} req/s")
        stop_changes.set()
        write_csv(os.path.join(out, "fig23-requests.csv"),
                  ["system", "clients", "latency_ms", "outcome"], rows)
        write_csv(os.path.join(out, "fig24.csv"),
                  ["system", "clients", "requests_per_s", "sd", "failed"], tput)
        cdf = []
        for system in ("origin", "riptide"):
            for n_clients in args.fig23_clients:
                xs = sorted(r[2] for r in rows if r[0] == system and r[1] == n_clients)
                for i, x in enumerate(xs):
                    if i % max(1, len(xs) // 50) == 0 or i == len(xs) - 1:
                        cdf.append((f"{system}-{n_clients}", x,
                                    round((i + 1) / len(xs), 4)))
        write_csv(os.path.join(out, "fig23.csv"), ["series", "latency_ms", "fraction"], cdf)
    finally:
        lab.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/slipstream"))
    ap.add_argument("--toxiproxy", default=os.path.join(ROOT, "target/tools/toxiproxy-server"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/experiments/004"))
    ap.add_argument("--parts", default="table1,fig16,fig17,fig18,fig23")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=20, help="Table 1: requests per size and path")
    ap.add_argument("--objects", type=int, default=200, help="Fig. 16: objects")
    ap.add_argument("--requests", type=int, default=300,
                    help="Fig. 16: requests per client and system")
    ap.add_argument("--stub-ms", type=float, default=3.0,
                    help="one-way latency to the central proxy and to the manager's node")
    ap.add_argument("--wan-ms", type=float, default=20.0, help="one-way latency to the origin")
    ap.add_argument("--fig17-step", type=float, default=20.0)
    ap.add_argument("--fig17-interval", type=float, default=2.0)
    ap.add_argument("--fig17-rate", type=float, default=10.0, help="misses/s per client")
    ap.add_argument("--spread", type=int, default=3)
    ap.add_argument("--hot-after", type=int, default=8)
    ap.add_argument("--fig18-seconds", type=float, default=30.0)
    ap.add_argument("--fig18-interval", type=float, default=2.0)
    ap.add_argument("--fig18-rate", type=float, default=50.0, help="requests/s per client")
    ap.add_argument("--fig23-clients", default="1,5,10,20,40")
    ap.add_argument("--fig23-seconds", type=float, default=10.0)
    args = ap.parse_args()
    args.fig23_clients = [int(x) for x in args.fig23_clients.split(",")]
    for path, what in ((args.bin, "slipstream"), (args.toxiproxy, "Toxiproxy")):
        if not os.access(path, os.X_OK):
            sys.exit(f"no {what} at {path}: run experiments/004/riptide.sh")
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="riptide-toxi-")
    toxi = Toxi(args.toxiproxy, work)
    try:
        parts = args.parts.split(",")
        for part in parts:
            t = time.monotonic()
            {"table1": lambda: table1(args, toxi, args.out),
             "fig16": lambda: fig16(args, toxi, args.out, rng),
             "fig17": lambda: fig17(args, toxi, args.out, rng),
             "fig18": lambda: fig18(args, toxi, args.out, rng),
             "fig23": lambda: fig23(args, toxi, args.out, rng)}[part]()
            log(f"{part}: {time.monotonic() - t:.0f} s")
    finally:
        toxi.proc.stop()


if __name__ == "__main__":
    main()
