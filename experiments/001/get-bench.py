#!/usr/bin/env python3
"""Issue 42 item 5, the `slipstream get` arms: one-shot `get` and `get -i` sessions against
single, random, Refresh and optimal on an emulated WAN triangle (Toxiproxy) whose latency order
is randomised per series, with injected latency outliers and a flapping replica.

Regenerate everything (docs/experiments/data/001-get/*.json, docs/experiments/001-get.svg):

    cargo build --release --locked -p slipstream && python3 experiments/001/get-bench.py
    python3 experiments/001/get-bench.py --outliers brownout

(`--bin` defaults to $CARGO_TARGET_DIR/release/slipstream, else target/release/slipstream.
Toxiproxy comes from target/tools/toxiproxy-server, installed by scripts/install-toxiproxy when
missing.) `--series 1,2`, `--oneshot N` and `--sessions N` bound the run; `--chart-only`
redraws the SVG from the JSON files.

Set-up per series (seed s): three `slipstream serve` cluster members on loopback serving the
same 50-file site (2-50 KB), each published (`cluster.publish=["/*"]`) and advertised through
its own Toxiproxy proxy, so every replica URL a client sees crosses the emulated WAN. Each
proxy has a downstream latency toxic (20, 60, 120 ms with 10 % jitter, assigned to the members
in a seeded random order); outliers on the fastest: with `--outliers short` (the default)
every 5-15 s it gets +300-500 ms for 0.15-0.3 s (about 2 % of the time), with
`--outliers brownout` every 4-9 s for 1-2 s (about 18 % of the time); one seeded member flaps (its proxy disabled for 3 s every 10 s). The URLs (Zipf over the files,
seeded) are the origin member n0's (through its proxy). Arms, order rotated per URL:
decay (`get`, its own state file), refresh (`get --policy refresh`), single (plain GET of the
mid-latency replica), random (plain GET of a random replica), optimal (plain GETs of all three
at once, first complete response wins).
"""

import argparse
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT_DATA = os.path.join(REPO, "docs", "experiments", "data", "001-get")
OUT_SVG = os.path.join(REPO, "docs", "experiments", "001-get.svg")
TOKEN = "bench-token-0123456789abcdef"
LATENCIES = [20, 60, 120]
ARMS = ["decay", "refresh", "single", "random", "optimal"]
UA = "bench-plain"
# Outlier schemes on the fastest member: (gap between outliers s, their length s), both drawn
# uniformly; the extra latency is 300-500 ms in both.
OUTLIERS = {"short": ((5, 15), (0.15, 0.3)), "brownout": ((4, 9), (1, 2))}


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Toxiproxy:
    def __init__(self, procs):
        binary = os.path.join(REPO, "target", "tools", "toxiproxy-server")
        if not os.access(binary, os.X_OK):
            subprocess.run([os.path.join(REPO, "scripts", "install-toxiproxy")], check=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "-host", "127.0.0.1", "-port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(self.proc)
        self.lock = threading.Lock()
        deadline = time.time() + 10
        while True:
            try:
                self.call("GET", "/version")
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("toxiproxy did not start")
                time.sleep(0.05)

    def call(self, method, path, body=None, tolerate=()):
        """One API call; statuses in `tolerate` (a retried call whose first try did reach the
        server: 404 for a DELETE, 409 for a POST) count as done."""
        with self.lock:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            data = None if body is None else json.dumps(body).encode()
            c.request(method, path, body=data, headers={"content-type": "application/json"})
            r = c.getresponse()
            text = r.read()
            c.close()
            if r.status in tolerate:
                return None
            if r.status >= 300:
                raise RuntimeError(f"toxiproxy {method} {path}: {r.status} {text!r}")
            return json.loads(text) if text else None

    def proxy(self, name, upstream, latency):
        port = free_port()
        self.call("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}",
                                       "upstream": f"127.0.0.1:{upstream}", "enabled": True})
        self.call("POST", f"/proxies/{name}/toxics", {
            "name": "latency", "type": "latency", "stream": "downstream", "toxicity": 1,
            "attributes": {"latency": latency, "jitter": max(1, latency // 10)}})
        return port


def make_site(root, rng):
    files = []
    for i in range(50):
        size = rng.randint(2, 50) * 1024
        name = f"f{i:02d}.bin"
        with open(os.path.join(root, name), "wb") as f:
            f.write(rng.randbytes(size))
        files.append(name)
    return files


def http_get(url, timeout=10.0):
    """Plain GET on a fresh connection: (ok, ms)."""
    u = urllib.parse.urlsplit(url)
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
        c.request("GET", u.path + (("?" + u.query) if u.query else ""), headers={"User-Agent": UA})
        r = c.getresponse()
        r.read()
        c.close()
        return r.status == 200, (time.perf_counter() - t0) * 1e3
    except (OSError, http.client.HTTPException):
        # A body cut short by a flap (IncompleteRead) is a failed fetch like a refused one.
        return False, (time.perf_counter() - t0) * 1e3


def http_race(urls, timeout=10.0):
    """GETs to every URL at once; the first complete 200 wins: (ok, ms, winner index)."""
    t0 = time.perf_counter()
    done = threading.Event()
    result = {}
    lock = threading.Lock()
    left = [len(urls)]

    def one(i, url):
        ok, ms = http_get(url, timeout)
        with lock:
            left[0] -= 1
            if ok and "ms" not in result:
                result["ms"] = (time.perf_counter() - t0) * 1e3
                result["i"] = i
                done.set()
            if left[0] == 0:
                done.set()

    for i, url in enumerate(urls):
        threading.Thread(target=one, args=(i, url), daemon=True).start()
    done.wait(timeout + 1)
    if "ms" in result:
        return True, result["ms"], result["i"]
    return False, (time.perf_counter() - t0) * 1e3, None


class AccessLogs:
    """Counts the lines the members' access logs gained that are not the plain arms'."""

    def __init__(self, paths):
        self.paths = paths
        self.offsets = {p: 0 for p in paths}

    def _sizes(self):
        return [os.path.getsize(p) if os.path.exists(p) else 0 for p in self.paths]

    def take(self):
        # Let the writer threads drain: sizes stable for 40 ms.
        last = self._sizes()
        for _ in range(25):
            time.sleep(0.04)
            now = self._sizes()
            if now == last:
                break
            last = now
        counts = {"get": 0, "head": 0, "resolve": 0}
        for p in self.paths:
            if not os.path.exists(p):
                continue
            with open(p, "rb") as f:
                f.seek(self.offsets[p])
                data = f.read()
            cut = data.rfind(b"\n") + 1
            self.offsets[p] += cut
            for line in data[:cut].decode("utf-8", "replace").splitlines():
                if UA in line:
                    continue
                if "/_slipstream/resolve" in line:
                    counts["resolve"] += 1
                elif '"HEAD ' in line:
                    counts["head"] += 1
                else:
                    counts["get"] += 1
        return counts


LINE = re.compile(r"^(\S+): (\d{3}) [^ ]* from (\S+) in ([\d.]+) ms \(whole ([\d.]+) ms(?:; (.*))?\)$")
SUMMARY = re.compile(r"^(\d+) fetched, (\d+) failed; (\d+) extra requests")


def parse_get(stderr):
    fetches, summary = [], None
    for line in stderr.splitlines():
        m = LINE.match(line)
        if m:
            notes = m.group(6) or ""
            extra = 0
            r = re.search(r"raced (\d+)", notes)
            if r:
                extra += int(r.group(1)) - 1
            r = re.search(r"after (\d+) failed", notes)
            if r:
                extra += int(r.group(1))
            if "hedged" in notes:
                extra += 1
            if "resolved" in notes:
                extra += 1
            fetches.append({"url": m.group(1), "ok": m.group(2) == "200", "from": m.group(3),
                            "head_ms": float(m.group(4)), "ms": float(m.group(5)),
                            "notes": notes, "extra_notes": extra})
            continue
        if ": failed:" in line:
            fetches.append({"url": line.split(": failed:")[0], "ok": False, "ms": None,
                            "notes": line, "extra_notes": 0})
            continue
        m = SUMMARY.match(line)
        if m:
            summary = {"fetched": int(m.group(1)), "failed": int(m.group(2)),
                       "extra": int(m.group(3))}
    return fetches, summary


class Weather(threading.Thread):
    """The spikes on the fastest and the flapping member, on a seeded timeline."""

    def __init__(self, tox, names, fastest, flapper, rng, outliers):
        super().__init__(daemon=True)
        self.tox, self.names, self.fastest, self.flapper = tox, names, fastest, flapper
        self.rng = rng
        self.gap, self.length = OUTLIERS[outliers]
        self.spiked_s = 0.0
        self.stop = threading.Event()
        self.events = []
        self.t0 = time.time()

    def note(self, what):
        self.events.append([round(time.time() - self.t0, 3), what])

    def run(self):
        next_spike = self.rng.uniform(*self.gap)
        next_flap = self.rng.uniform(0, 10)
        spike_end = flap_end = None
        while not self.stop.is_set():
            t = time.time() - self.t0
            # The spike and the flap each in their own try: a call that fails (a timeout on a
            # busy machine) is retried on the next tick and must not stop the other.
            try:
                if spike_end is None and t >= next_spike:
                    ms = self.rng.randint(300, 500)
                    dur = self.rng.uniform(*self.length)
                    self.tox.call("POST", f"/proxies/{self.names[self.fastest]}/toxics", {
                        "name": "spike", "type": "latency", "stream": "downstream",
                        "toxicity": 1, "attributes": {"latency": ms, "jitter": 0}},
                        tolerate=(409,))
                    self.note(f"spike {self.names[self.fastest]} +{ms} ms for {dur:.1f} s")
                    spike_end = t + dur
                    spike_start = t
                elif spike_end is not None and t >= spike_end:
                    self.tox.call("DELETE", f"/proxies/{self.names[self.fastest]}/toxics/spike",
                                  tolerate=(404,))
                    self.note("spike end")
                    self.spiked_s += t - spike_start
                    spike_end = None
                    next_spike = t + self.rng.uniform(*self.gap)
            except Exception as e:  # noqa: BLE001 - keep the weather going
                self.note(f"error {e}")
            try:
                if flap_end is None and t >= next_flap:
                    self.tox.call("POST", f"/proxies/{self.names[self.flapper]}",
                                  {"enabled": False})
                    self.note(f"flap {self.names[self.flapper]} down")
                    flap_end = t + 3
                elif flap_end is not None and t >= flap_end:
                    self.tox.call("POST", f"/proxies/{self.names[self.flapper]}",
                                  {"enabled": True})
                    self.note("flap up")
                    flap_end = None
                    next_flap = next_flap + 10
            except Exception as e:  # noqa: BLE001 - keep the weather going
                self.note(f"error {e}")
            self.stop.wait(0.005 if spike_end is not None else 0.02)
        # Calm: no spike, everything up.
        try:
            self.tox.call("DELETE", f"/proxies/{self.names[self.fastest]}/toxics/spike")
        except Exception:  # noqa: BLE001
            pass
        self.tox.call("POST", f"/proxies/{self.names[self.flapper]}", {"enabled": True})


def stats(values):
    if not values:
        return {}
    v = sorted(values)

    def q(p):
        return v[min(len(v) - 1, max(0, math.ceil(p * len(v)) - 1))]
    return {"n": len(v), "mean": statistics.fmean(v), "p50": q(0.5), "p95": q(0.95)}


def run_series(args, series, workdir, procs):
    seed = 1000 + series
    rng = random.Random(seed)
    order = LATENCIES[:]
    rng.shuffle(order)  # member i gets order[i] ms
    names = ["n0", "n1", "n2"]
    fastest = order.index(min(order))
    mid = order.index(sorted(order)[1])
    flapper = rng.randrange(3)
    log(f"series {series}: latencies {dict(zip(names, order))}, flapper {names[flapper]}")
    root = os.path.join(workdir, f"s{series}")
    site = os.path.join(root, "site")
    os.makedirs(site)
    files = make_site(site, random.Random(seed))
    tox = Toxiproxy(procs)
    members = []
    gossip = [free_port(socket.SOCK_DGRAM) for _ in names]
    logs = []
    for i, name in enumerate(names):
        http_port = free_port()
        proxy_port = tox.proxy(name, http_port, order[i])
        access = os.path.join(root, f"{name}.access.log")
        logs.append(access)
        cmd = [args.bin, "serve", site, "--listen", f"127.0.0.1:{http_port}"]
        for s in [f"cluster.name={name}", f"cluster.gossip_listen=127.0.0.1:{gossip[i]}",
                  f"cluster.data_dir={os.path.join(root, 'data', name)}",
                  f"cluster.token={TOKEN}", "cluster.gossip_interval_ms=100",
                  'cluster.publish=["/*"]', f"cluster.advertise=http://127.0.0.1:{proxy_port}",
                  f"serve.access_log={access}"]:
            cmd += ["--set", s]
        if i > 0:
            cmd += ["--cluster-seed", f"127.0.0.1:{gossip[0]}"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(root, f"{name}.stderr"), "wb"))
        procs.append(p)
        members.append({"name": name, "http": http_port, "proxy": proxy_port,
                        "latency_ms": order[i]})
    # Converged: n0 (directly) resolves a file to three replicas.
    probe_url = f"http://127.0.0.1:{members[0]['proxy']}/{files[0]}"
    deadline = time.time() + 30
    replicas = []
    while time.time() < deadline:
        try:
            q = urllib.parse.quote(probe_url, safe="")
            with urllib.request.urlopen(
                    f"http://127.0.0.1:{members[0]['http']}/_slipstream/resolve?url={q}",
                    timeout=2) as r:
                replicas = json.load(r).get("replicas", [])
            if len(replicas) == 3:
                break
        except OSError:
            pass
        time.sleep(0.2)
    if len(replicas) != 3:
        raise RuntimeError(f"the cluster did not converge: {replicas}")
    log(f"replicas of {files[0]}: {replicas}")
    # Physical URL of file f at member i (the replica URL rewritten per file).
    stems = {}
    for r in replicas:
        port = urllib.parse.urlsplit(r).port
        i = [m["proxy"] for m in members].index(port)
        stems[i] = r[: -len(files[0])]

    def replica(i, f):
        return stems[i] + f

    urng = random.Random(seed * 7)
    weights = [1 / (k + 1) for k in range(len(files))]
    zipf = files[:]
    urng.shuffle(zipf)

    def pick():
        return urng.choices(zipf, weights)[0]

    accesslogs = AccessLogs(logs)
    # One state file for both modes, as one user's cache directory holds one: it starts empty
    # with the series (the first one-shot fetches meet the replicas), and the sessions, which
    # run after the one-shot fetches, start from what those learnt.
    state = os.path.join(root, "decay-get.json")
    arng = random.Random(seed * 13)
    weather = Weather(tox, names, fastest, flapper, random.Random(seed * 17), args.outliers)
    weather.start()
    t_start = time.time()
    result = {"series": series, "seed": seed, "members": members, "outliers": args.outliers,
              "outlier_gap_s": OUTLIERS[args.outliers][0],
              "outlier_length_s": OUTLIERS[args.outliers][1],
              "fastest": names[fastest], "mid": names[mid], "flapper": names[flapper],
              "files": {f: os.path.getsize(os.path.join(site, f)) for f in files},
              "oneshot": {a: [] for a in ARMS}, "sessions": {a: [] for a in ARMS}}

    def get_cmd(arm, mode, extra):
        cmd = [args.bin, "get"] + extra
        if arm == "decay":
            cmd += ["--state", state]
        else:
            cmd += ["--policy", "refresh"]
        return cmd

    def run_get(cmd):
        accesslogs.take()
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        wall = (time.perf_counter() - t0) * 1e3
        counts = accesslogs.take()
        return p, wall, counts

    try:
        # One-shot: one process per URL.
        for n in range(args.oneshot):
            f = pick()
            url = f"http://127.0.0.1:{members[0]['proxy']}/{f}"
            rot = ARMS[n % 5:] + ARMS[: n % 5]
            for arm in rot:
                rec = {"n": n, "file": f, "t": round(time.time() - t_start, 3)}
                if arm in ("decay", "refresh"):
                    p, wall, counts = run_get(get_cmd(arm, "oneshot",
                                                      [url, "-o", os.devnull, "--summary"]))
                    fetches, summary = parse_get(p.stderr.decode("utf-8", "replace"))
                    fx = fetches[0] if fetches else {"ok": False, "ms": None, "extra_notes": 0}
                    rec.update({"ok": fx["ok"] and p.returncode == 0, "ms": fx.get("ms"),
                                "wall_ms": wall, "from": fx.get("from"),
                                "notes": fx.get("notes"), "extra_notes": fx["extra_notes"],
                                "summary": summary, "log": counts})
                    if not rec["ok"]:
                        rec["stderr"] = p.stderr.decode("utf-8", "replace")[-500:]
                elif arm == "single":
                    ok, ms = http_get(replica(mid, f))
                    rec.update({"ok": ok, "ms": ms, "extra": 0})
                elif arm == "random":
                    i = arng.randrange(3)
                    ok, ms = http_get(replica(i, f))
                    rec.update({"ok": ok, "ms": ms, "to": names[i], "extra": 0})
                else:
                    ok, ms, w = http_race([replica(i, f) for i in range(3)])
                    rec.update({"ok": ok, "ms": ms, "winner": None if w is None else names[w],
                                "extra": 2})
                result["oneshot"][arm].append(rec)
            if n % 25 == 0:
                log(f"  one-shot {n}/{args.oneshot}")
        # Sessions: one process (or one plain-HTTP loop) per session of L URLs.
        for n in range(args.sessions):
            urls = [pick() for _ in range(args.session_len)]
            rot = ARMS[n % 5:] + ARMS[: n % 5]
            for arm in rot:
                rec = {"n": n, "files": urls, "t": round(time.time() - t_start, 3)}
                if arm in ("decay", "refresh"):
                    listfile = os.path.join(root, f"session-{n}.txt")
                    with open(listfile, "w") as lf:
                        lf.write("".join(f"http://127.0.0.1:{members[0]['proxy']}/{u}\n"
                                         for u in urls))
                    p, wall, counts = run_get(get_cmd(
                        arm, "sessions", ["-i", listfile, "--parallel", "1",
                                          "-o", os.path.join(root, "out")]))
                    fetches, summary = parse_get(p.stderr.decode("utf-8", "replace"))
                    rec.update({"wall_ms": wall, "summary": summary, "log": counts,
                                "fetches": [{k: fx.get(k) for k in
                                             ("ok", "ms", "from", "notes", "extra_notes")}
                                            for fx in fetches]})
                    if summary is None or p.returncode != 0:
                        rec["stderr"] = p.stderr.decode("utf-8", "replace")[-800:]
                else:
                    t0 = time.perf_counter()
                    fx = []
                    for u in urls:
                        if arm == "single":
                            ok, ms = http_get(replica(mid, u))
                            fx.append({"ok": ok, "ms": ms})
                        elif arm == "random":
                            i = arng.randrange(3)
                            ok, ms = http_get(replica(i, u))
                            fx.append({"ok": ok, "ms": ms, "to": names[i]})
                        else:
                            ok, ms, w = http_race([replica(i, u) for i in range(3)])
                            fx.append({"ok": ok, "ms": ms,
                                       "winner": None if w is None else names[w]})
                    rec.update({"wall_ms": (time.perf_counter() - t0) * 1e3, "fetches": fx})
                result["sessions"][arm].append(rec)
            log(f"  session {n + 1}/{args.sessions}")
    finally:
        weather.stop.set()
        weather.join(5)
        result["events"] = weather.events
    result["duration_s"] = round(time.time() - t_start, 1)
    result["spiked_pct"] = round(100 * weather.spiked_s / max(result["duration_s"], 1e-9), 2)
    result["summary"] = summarise(result)
    return result


def summarise(result):
    out = {}
    for mode in ("oneshot", "sessions"):
        out[mode] = {}
        for arm in ARMS:
            recs = result[mode][arm]
            if mode == "oneshot":
                fetches = recs
            else:
                fetches = [fx for r in recs for fx in r["fetches"]]
            ok = [fx["ms"] for fx in fetches if fx.get("ok") and fx.get("ms") is not None]
            s = stats(ok)
            s["fetches"] = len(fetches) if mode == "oneshot" else sum(
                len(r.get("files", [])) for r in recs)
            s["failed"] = s["fetches"] - len(ok)
            useful = len(ok)
            if arm in ("decay", "refresh"):
                walls = [r["wall_ms"] for r in recs]
                s["wall_mean"] = statistics.fmean(walls) if walls else None
                # get's own count: its summary line (every resolve, race, probe, hedge and
                # failed attempt, refused connections included), else the fetch's notes.
                s["extra_notes"] = sum((r.get("summary") or {}).get("extra", r.get("extra_notes", 0))
                                       for r in recs)
                lg = [r.get("log", {}) for r in recs]
                tot = sum(c.get("get", 0) + c.get("head", 0) + c.get("resolve", 0) for c in lg)
                s["log_requests"] = tot
                s["log_resolve"] = sum(c.get("resolve", 0) for c in lg)
                s["log_head"] = sum(c.get("head", 0) for c in lg)
                s["extra_log"] = max(0, tot - useful)
                s["extra_pct_notes"] = 100 * s["extra_notes"] / useful if useful else None
                s["extra_pct_log"] = 100 * s["extra_log"] / useful if useful else None
            else:
                s["extra_pct_notes"] = s["extra_pct_log"] = 200.0 if arm == "optimal" else 0.0
            ports = {str(m["proxy"]): m["name"] for m in result["members"]}
            by = {}
            for fx in fetches:
                name = fx.get("to") or fx.get("winner")
                if fx.get("from"):
                    name = ports.get(str(urllib.parse.urlsplit(fx["from"]).port), "?")
                if arm == "single":
                    name = result["mid"]
                if fx.get("ok") and name:
                    by[name] = by.get(name, 0) + 1
            s["served_by"] = by
            out[mode][arm] = s
        opt = out[mode]["optimal"].get("mean")
        for arm in ARMS:
            s = out[mode][arm]
            if opt and s.get("mean"):
                s["ratio_mean"] = s["mean"] / opt
                s["ratio_p95"] = s["p95"] / out[mode]["optimal"]["p95"]
    return out


def table(result):
    lines = []
    for mode in ("oneshot", "sessions"):
        lines.append(f"\nseries {result['series']} {mode}")
        lines.append("| arm | fetches | failed | mean ms | p50 | p95 | mean / optimal | "
                     "extra % (get's count) | extra % (access logs) | process wall mean ms |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for arm in ARMS:
            s = result["summary"][mode][arm]
            f = lambda k, fmt="{:.1f}": "—" if s.get(k) is None else fmt.format(s[k])  # noqa: E731
            lines.append(f"| {arm} | {s['fetches']} | {s['failed']} | {f('mean')} | {f('p50')} | "
                         f"{f('p95')} | {f('ratio_mean', '{:.3f}')} | {f('extra_pct_notes')} | "
                         f"{f('extra_pct_log')} | {f('wall_mean')} |")
    return "\n".join(lines)


def chart(results, path, outliers):
    """Mean and p95 per arm relative to optimal, one group per (series, mode)."""
    groups = [(r, m) for r in results for m in ("oneshot", "sessions")]
    colors = {"decay": "#1f77b4", "refresh": "#ff7f0e", "single": "#2ca02c",
              "random": "#9467bd", "optimal": "#7f7f7f"}
    vals = [r["summary"][m][a].get(k) or 0 for r, m in groups for a in ARMS
            for k in ("ratio_mean", "ratio_p95")]
    top = max(2.0, math.ceil(max(vals + [1]) * 2) / 2)
    W, H, L, B, T = 120 + 230 * len(groups), 380, 60, 60, 40
    ph = H - B - T
    y = lambda v: T + ph * (1 - v / top)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">slipstream get on an '
           f'emulated triangle, {outliers} outliers: fetch time / optimal '
           f'(solid: mean, light: p95)</text>']
    v = 0.0
    while v <= top + 1e-9:
        out.append(f'<line x1="{L}" x2="{W - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#ddd"/><text x="{L - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:.1f}</text>')
        v += 0.5
    out.append(f'<line x1="{L}" x2="{W - 20}" y1="{y(1.05):.1f}" y2="{y(1.05):.1f}" '
               f'stroke="#d62728" stroke-dasharray="4 3"/><text x="{W - 22}" '
               f'y="{y(1.05) - 3:.1f}" text-anchor="end" fill="#d62728">+5 % target</text>')
    for gi, (r, m) in enumerate(groups):
        x0 = L + 20 + gi * 230
        for ai, a in enumerate(ARMS):
            s = r["summary"][m][a]
            x = x0 + ai * 40
            for k, op, dx in (("ratio_p95", 0.35, 0), ("ratio_mean", 1.0, 8)):
                val = s.get(k)
                if val is None:
                    continue
                out.append(f'<rect x="{x + dx}" y="{y(min(val, top)):.1f}" width="22" '
                           f'height="{y(0) - y(min(val, top)):.1f}" fill="{colors[a]}" '
                           f'fill-opacity="{op}"><title>{a} {k} {val:.3f}</title></rect>')
            mv = s.get("ratio_mean")
            if mv is not None:
                out.append(f'<text x="{x + 19}" y="{y(min(mv, top)) - 3:.1f}" '
                           f'text-anchor="middle" font-size="9">{mv:.2f}</text>')
            out.append(f'<text x="{x + 19}" y="{y(0) + 12:.1f}" text-anchor="middle" '
                       f'font-size="9">{a}</text>')
        lat = ", ".join(f"{mm['name']} {mm['latency_ms']}" for mm in r["members"])
        out.append(f'<text x="{x0 + 100}" y="{y(0) + 28:.1f}" text-anchor="middle">series '
                   f'{r["series"]}, {"one-shot get" if m == "oneshot" else "get -i sessions"}'
                   f'</text><text x="{x0 + 100}" y="{y(0) + 42:.1f}" text-anchor="middle" '
                   f'font-size="9">{lat} ms; flapper {r["flapper"]}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_bin = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")),
                               "release", "slipstream")
    ap.add_argument("--bin", default=default_bin)
    ap.add_argument("--series", default="1,2")
    ap.add_argument("--oneshot", type=int, default=300)
    ap.add_argument("--sessions", type=int, default=15)
    ap.add_argument("--session-len", type=int, default=20)
    ap.add_argument("--chart-only", action="store_true",
                    help="redraw the chart from the JSON files, and print their tables")
    ap.add_argument("--outliers", choices=sorted(OUTLIERS), default="short",
                    help="short: +300-500 ms for 0.15-0.3 s every 5-15 s; brownout: for 1-2 s "
                    "every 4-9 s [default: short]")
    ap.add_argument("--workdir", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else None,
                    help="where the site, data dirs and logs go [default: /dev/shm]")
    args = ap.parse_args()
    os.makedirs(OUT_DATA, exist_ok=True)
    series = [int(s) for s in args.series.split(",")]
    if not args.chart_only:
        for s in series:
            procs = []
            workdir = tempfile.mkdtemp(prefix="get-bench-", dir=args.workdir)
            try:
                result = run_series(args, s, workdir, procs)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
                for p in procs:
                    try:
                        p.wait(5)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                shutil.rmtree(workdir, ignore_errors=True)
            with open(os.path.join(OUT_DATA, f"{args.outliers}-{s}.json"), "w") as f:
                json.dump(result, f, indent=1)
            print(table(result), flush=True)
    results = []
    for name in sorted(os.listdir(OUT_DATA)):
        if name.startswith(f"{args.outliers}-") and name.endswith(".json"):
            with open(os.path.join(OUT_DATA, name)) as f:
                results.append(json.load(f))
    if args.chart_only:
        for r in results:
            lat = ", ".join(f"{m['name']} {m['latency_ms']} ms" for m in r["members"])
            print(f"\n## {r['outliers']} outliers, series {r['series']}: {lat}, flapper "
                  f"{r['flapper']}, spiked {r.get('spiked_pct')} % of {r['duration_s']} s")
            print(table(r))
    svg = OUT_SVG if args.outliers == "short" else OUT_SVG.replace(".svg", f"-{args.outliers}.svg")
    chart(results, svg, args.outliers)


if __name__ == "__main__":
    main()
