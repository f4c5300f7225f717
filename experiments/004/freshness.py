#!/usr/bin/env python3
"""Origin load and hit ratio of the cooperative cache (paper 004) across expiry periods.

One origin (`slipstream serve`, every file `Cache-Control: max-age=20`, an access log), one
gateway + cache manager node and three cache nodes (`slipstream node`), all on loopback. Ten
keep-alive clients (one connection each, through a node's browser proxy, spread over the four
nodes) request a seeded site of 200 files of 1-100 KB with Zipf(0.8) popularity and a 20 ms
think time, for a warm-up (20 s) and two expiry periods (20 s each). Every body is checked
against its file. The origin's access log, read as it grows, gives the origin's 200s (full
bodies) and 304s per second.

Run (from the repository root), once per binary:

    python3 experiments/004/freshness.py --bin /work/target-before/release/slipstream \
        --label before-1
    python3 experiments/004/freshness.py --bin /work/target-after/release/slipstream \
        --label after-1

It prints a summary and writes docs/experiments/data/004-freshness/LABEL.json (per-period
totals and a per-second series). Defaults: --files 200 --clients 10 --zipf 0.8 --think 0.02
--max-age 20 --warm 20 --periods 2 --seed 4.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coop_lab import (  # noqa: E402
    Proc, addr_of, classify, coop_status, log, make_site, pct, run_clients, start_node,
    wait_for, zipf_cdf,
)


LOG_RE = re.compile(r'\[([^\]]+)\] "(\S+) (\S+) [^"]*" (\d{3}) (\S+)(?: "[^"]*" "([^"]*)")?')


class LogTail:
    """Reads the origin's access log as it grows; each complete line is stamped with the second
    (since the run's start) at which it was first seen."""

    def __init__(self, path, t0):
        self.path, self.t0 = path, t0
        self.lines = []  # (seen_s, line)
        self.buf = b""
        self.pos = 0
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return
        if not data:
            return
        self.pos += len(data)
        now = time.monotonic() - self.t0
        self.buf += data
        *complete, self.buf = self.buf.split(b"\n")
        for line in complete:
            if line.strip():
                self.lines.append((now, line.decode("utf-8", "replace")))

    def _run(self):
        while not self.stop_ev.is_set():
            self.poll()
            time.sleep(0.1)

    def finish(self):
        self.stop_ev.set()
        self.th.join()
        self.poll()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", help="JSON path (default docs/experiments/data/004-freshness/LABEL.json)")
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--zipf", type=float, default=0.8)
    ap.add_argument("--think", type=float, default=0.02)
    ap.add_argument("--max-age", type=int, default=20)
    ap.add_argument("--warm", type=float, default=20)
    ap.add_argument("--periods", type=int, default=2)
    ap.add_argument("--max-requests", type=int, default=20000, help="per client")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    out = a.out or os.path.join(ROOT, "docs/experiments/data/004-freshness", f"{a.label}.json")
    duration = a.warm + a.periods * a.max_age
    bounds = [("warm-up", 0.0, a.warm)] + [
        (f"period {i + 1}", a.warm + i * a.max_age, a.warm + (i + 1) * a.max_age)
        for i in range(a.periods)
    ]

    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="freshness-")
    procs = []
    try:
        site = os.path.join(work, "site")
        os.mkdir(site)
        files = make_site(site, a.files, a.seed)
        access_log = os.path.join(work, "origin.log")
        origin = Proc(
            [a.bin, "serve", site, "--listen", "127.0.0.1:0",
             "--cache-control", f"max-age={a.max_age}",
             "--set", f'serve.access_log="{access_log}"'],
            "origin", work)
        procs.append(origin)
        origin_addr = addr_of(origin.wait_line("slipstream serve:"))
        key = os.path.join(work, "provider.key")
        provider = subprocess.run([a.bin, "node", "keygen", key], check=True,
                                  capture_output=True, text=True).stdout.strip()
        _, gw_addr, gw_p2p = start_node(
            a.bin, "gateway", ["--provider-key", key, "--role", "gateway", "--role", "manager"],
            work, procs)
        nodes = [("gateway", gw_addr)]
        for i in range(3):
            _, addr, _ = start_node(a.bin, f"cache{i + 1}",
                                    ["--provider", provider, "--bootstrap", gw_p2p], work, procs)
            nodes.append((f"cache{i + 1}", addr))
        for name, addr in nodes[1:]:
            wait_for(f"{name} to see the gateway",
                     lambda: bool(coop_status(addr).get("peers")))
        log(f"origin {origin_addr}; nodes {nodes}")

        names = sorted(files)
        cdf = zipf_cdf(len(names), a.zipf)
        rng0 = random.Random(a.seed * 1000 + 7)
        order = names[:]
        rng0.shuffle(order)  # popularity rank -> file, seeded
        t0 = time.monotonic()
        tail = LogTail(access_log, t0)
        records, errors = run_clients(nodes, origin_addr, files, order, cdf, a.seed, a.clients,
                                      a.think, t0 + duration, t0, a.max_requests)
        time.sleep(1)  # let the origin's log catch up with the last requests
        statuses = {}
        for name, addr in nodes:
            try:
                s = coop_status(addr)
                s["objects"] = len(s.get("objects") or [])
                statuses[name] = s
            except Exception as e:  # noqa: BLE001
                statuses[name] = {"error": repr(e)}
        origin.stop()  # SIGTERM: the origin flushes its access log
        tail.finish()

        # The origin's log: (second seen, method, path, status, user agent).
        olog = []
        for seen, line in tail.lines:
            m = LOG_RE.search(line)
            if not m:
                continue
            olog.append((seen, m.group(2), m.group(3), int(m.group(4)), m.group(6) or ""))

        nsec = int(duration) + 1
        series = [
            {"t": s, "requests": 0, "hits": 0, "revalidated": 0, "origin": 0, "other": 0,
             "wrong": 0, "origin_200": 0, "origin_304": 0, "origin_other": 0}
            for s in range(nsec + 1)
        ]
        for t, node, status, lat, cs, name, ok in records:
            row = series[min(int(t), nsec)]
            row["requests"] += 1
            kind = classify(cs)
            row["hits" if kind == "hit" else kind] += 1
            row["wrong"] += 0 if ok else 1
        for seen, method, path, status, ua in olog:
            row = series[min(int(seen), nsec)]
            key_ = {200: "origin_200", 304: "origin_304"}.get(status, "origin_other")
            row[key_] += 1

        def period_of(t):
            for name, lo, hi in bounds:
                if lo <= t < hi:
                    return name
            return "after"

        periods = {}
        for name, lo, hi in bounds + [("after", duration, float("inf"))]:
            recs = [r for r in records if period_of(r[0]) == name]
            logs = [l for l in olog if period_of(l[0]) == name]
            if name == "after" and not recs and not logs:
                continue
            lats = [r[3] for r in recs]
            kinds = [classify(r[4]) for r in recs]
            reval = [r for r in recs if classify(r[4]) == "revalidated"]
            origin_recs = [r for r in recs if classify(r[4]) == "origin"]
            p = {
                "from_s": lo,
                "to_s": None if hi == float("inf") else hi,
                "requests": len(recs),
                "coop_hits": kinds.count("hit"),
                "revalidated": len(reval),
                "revalidated_304": sum("fwd-status=304" in r[4] for r in reval),
                "revalidated_200": sum("fwd-status=200" in r[4] for r in reval),
                "origin_requests": sum("fwd-status=200" in r[4] for r in origin_recs),
                "origin_requests_other_status": sum(
                    "fwd-status=200" not in r[4] for r in origin_recs),
                "other": kinds.count("other"),
                "stale_served": sum("detail=stale" in r[4] for r in recs),
                "wrong_bodies": sum(not r[6] for r in recs),
                "non_200": sum(r[2] != 200 for r in recs),
                "origin_log_200": sum(l[3] == 200 for l in logs),
                "origin_log_304": sum(l[3] == 304 for l in logs),
                "origin_log_200_gateway_agent": sum(
                    l[3] == 200 and "gateway" in l[4] for l in logs),
                "origin_log_304_gateway_agent": sum(
                    l[3] == 304 and "gateway" in l[4] for l in logs),
                "origin_log_other": sum(l[3] not in (200, 304) for l in logs),
                "origin_log_200_distinct_paths": len({l[2] for l in logs if l[3] == 200}),
                "origin_log_304_distinct_paths": len({l[2] for l in logs if l[3] == 304}),
                "distinct_objects_requested": len({r[5] for r in recs}),
                "node_object_pairs_forwarded": len(
                    {(r[1], r[5]) for r in recs if classify(r[4]) in ("origin", "revalidated")}),
                "p50_ms": pct(lats, 0.5),
                "p99_ms": pct(lats, 0.99),
            }
            p["hit_ratio"] = round(p["coop_hits"] / p["requests"], 4) if p["requests"] else None
            periods[name] = p

        per_node = {}
        for node, _ in nodes:
            recs = [r for r in records if r[1] == node]
            per_node[node] = {k: sum(classify(r[4]) == k for r in recs)
                              for k in ("hit", "revalidated", "origin", "other")}
            per_node[node]["requests"] = len(recs)
        agents = {}
        for l in olog:
            agents.setdefault(l[4], {}).setdefault(str(l[3]), 0)
            agents[l[4]][str(l[3])] += 1
        cs_kinds = {}
        for r in records:
            k = re.sub(r'peer \w+ via', "peer * via", re.sub(r"gateway \w+", "gateway *", r[4]))
            cs_kinds[k] = cs_kinds.get(k, 0) + 1
        fw = {}  # per (node, object): the seconds of its forwards (to the origin or a gateway)
        for r in records:
            if classify(r[4]) in ("origin", "revalidated"):
                fw.setdefault(f"{r[1]} {r[5]}", []).append(r[0])

        result = {
            "label": a.label,
            "bin": a.bin,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "settings": {k: getattr(a, k) for k in
                         ("files", "clients", "zipf", "think", "max_age", "warm", "periods",
                          "max_requests", "seed")},
            "loadavg_start": load_before,
            "loadavg_end": os.getloadavg(),
            "site_bytes": sum(len(b) for b in files.values()),
            "client_errors": errors,
            "periods": periods,
            "per_node": per_node,
            "cache_status_counts": dict(sorted(cs_kinds.items(), key=lambda kv: -kv[1])),
            "origin_log_by_agent": agents,
            "origin_log_lines": len(olog),
            "forwards_per_node_object_max": max((len(v) for v in fw.values()), default=0),
            "node_status_at_end": statuses,
            "series": series,
        }
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")

        print(f"{a.label}: {a.bin}")
        hdr = ("period", "req", "hits", "hit%", "reval", "origin", "log200", "log304",
               "wrong", "p50ms", "p99ms")
        print("  ".join(f"{h:>8}" for h in hdr))
        for name, p in periods.items():
            vals = (name, p["requests"], p["coop_hits"],
                    f"{100 * (p['hit_ratio'] or 0):.1f}", p["revalidated"],
                    p["origin_requests"], p["origin_log_200"], p["origin_log_304"],
                    p["wrong_bodies"], f"{p['p50_ms']:.1f}" if p["p50_ms"] is not None else "-",
                    f"{p['p99_ms']:.1f}" if p["p99_ms"] is not None else "-")
            print("  ".join(f"{v:>8}" for v in vals))
        print(f"wrote {os.path.relpath(out, ROOT)}")
    finally:
        for p in reversed(procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001
                pass
        if a.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
