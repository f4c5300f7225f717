#!/usr/bin/env python3
"""A gateway of the cooperative cache (paper 004) SIGKILLed under load: the hit ratio, the p80
latency and the failures by second, and the replicas of the hot objects by node at the end.

One origin (`slipstream serve`, `Cache-Control: max-age=300`), two gateway + cache manager
nodes that sign under the provider's delegation (neither holds the provider's key) and three
cache nodes, all on loopback. Ten keep-alive clients, spread over the three cache nodes' browser
proxies, request a seeded site of 200 files of 1-100 KB with Zipf(0.8) popularity and a 20 ms
think time. At --kill-at seconds the first gateway is SIGKILLed; the run goes on to --duration.
Every body is checked against its file.

Run (from the repository root, after `cargo build --release -p slipstream`):

    python3 experiments/004/gateway_kill.py --bin target/release/slipstream --label run-1

It prints a summary and writes docs/experiments/data/004-gateway-kill/LABEL.json; then
`python3 experiments/004/gateway_kill.py --chart docs/experiments/data/004-gateway-kill/*.json`
draws docs/experiments/004-gateway-kill.svg.
"""

import argparse
import json
import os
import random
import shutil
import signal
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


def fetch_once(proxy, url):
    """One GET of `url` through the browser proxy at `proxy`: (status, Cache-Status, body)."""
    import http.client
    conn = http.client.HTTPConnection(proxy, timeout=30)
    try:
        conn.request("GET", url)
        r = conn.getresponse()
        return r.status, r.getheader("Cache-Status", ""), r.read()
    except Exception as e:  # noqa: BLE001
        return 0, f"error: {e!r}", b""
    finally:
        conn.close()


def held_files(addr):
    """The file names whose objects the node at `addr` holds."""
    try:
        return {o["url"].rsplit("/", 1)[-1] for o in coop_status(addr).get("objects") or []}
    except Exception:  # noqa: BLE001
        return set()


def delegated_gateway(bin_, name, key, provider, work, procs, bootstrap):
    """A gateway + manager signing with its own node key under a one-hour delegation."""
    data = os.path.join(work, name)
    node_id = subprocess.run([bin_, "node", "id", data], check=True, capture_output=True,
                             text=True).stdout.strip()
    delegation = os.path.join(work, f"{name}.delegation")
    subprocess.run([bin_, "node", "delegate", "--provider-key", key, "--node", node_id,
                    "--valid", "1h", delegation], check=True, capture_output=True)
    extra = ["--provider", provider, "--data-dir", data, "--delegation", delegation,
             "--role", "gateway", "--role", "manager"]
    for b in bootstrap:
        extra += ["--bootstrap", b]
    return start_node(bin_, name, extra, work, procs)


def run(a):
    out = a.out or os.path.join(ROOT, "docs/experiments/data/004-gateway-kill", f"{a.label}.json")
    work = tempfile.mkdtemp(prefix="gateway-kill-")
    procs = []
    load_before = os.getloadavg()
    try:
        site = os.path.join(work, "site")
        os.mkdir(site)
        files = make_site(site, a.files + a.new, a.seed)
        origin = Proc([a.bin, "serve", site, "--listen", "127.0.0.1:0",
                       "--cache-control", "max-age=300"], "origin", work)
        procs.append(origin)
        origin_addr = addr_of(origin.wait_line("slipstream serve:"))
        key = os.path.join(work, "provider.key")
        provider = subprocess.run([a.bin, "node", "keygen", key], check=True,
                                  capture_output=True, text=True).stdout.strip()
        g1, g1_addr, g1_p2p = delegated_gateway(a.bin, "gateway1", key, provider, work, procs, [])
        _, g2_addr, g2_p2p = delegated_gateway(a.bin, "gateway2", key, provider, work, procs,
                                               [g1_p2p])
        caches = []
        for i in range(3):
            _, addr, _ = start_node(a.bin, f"cache{i + 1}",
                                    ["--provider", provider, "--bootstrap", g1_p2p,
                                     "--bootstrap", g2_p2p], work, procs)
            caches.append((f"cache{i + 1}", addr))
        for name, addr in caches:
            wait_for(f"{name} to see both gateways",
                     lambda: len(coop_status(addr).get("peers") or []) >= 2)
        log(f"origin {origin_addr}; gateways {g1_addr} {g2_addr}; caches {caches}")

        # The clients' universe; the last --new files are asked for only after the kill.
        names = sorted(files)[:a.files]
        fresh = sorted(files)[a.files:]
        cdf = zipf_cdf(len(names), a.zipf)
        order = names[:]
        random.Random(a.seed * 1000 + 7).shuffle(order)  # popularity rank -> file
        t0 = time.monotonic()
        killed = {}

        new_objects = []

        def killer():
            time.sleep(max(0.0, t0 + a.kill_at - time.monotonic()))
            killed["at"] = round(time.monotonic() - t0, 3)
            g1.stop(signal.SIGKILL)
            # Objects never asked for before: a miss each through a cache node, then, once a
            # node holds it (through the surviving gateway), a second request elsewhere.
            for i, name in enumerate(fresh):
                url = f"http://{origin_addr}/{name}"
                first = fetch_once(caches[i % len(caches)][1], url)
                cached = False
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and not cached:
                    cached = any(name in held_files(addr) for _, addr in
                                 [("gateway2", g2_addr)] + caches)
                    if not cached:
                        time.sleep(0.1)
                second = fetch_once(caches[(i + 1) % len(caches)][1], url)
                new_objects.append({
                    "file": name,
                    "first": first[1], "first_ok": first[0] == 200 and first[2] == files[name],
                    "cached_within_10s": cached,
                    "second": second[1],
                    "second_ok": second[0] == 200 and second[2] == files[name],
                })

        k = threading.Thread(target=killer)
        k.start()
        records, errors = run_clients(caches, origin_addr, files, order, cdf, a.seed,
                                      a.clients, a.think, t0 + a.duration, t0)
        k.join()

        # Replicas of the hot objects by node, on the survivors.
        holders = {}
        for name, addr in [("gateway2", g2_addr)] + caches:
            try:
                s = coop_status(addr)
                holders[name] = {o["url"].rsplit("/", 1)[-1] for o in s.get("objects") or []}
            except Exception as e:  # noqa: BLE001
                holders[name] = set()
                log(f"{name}: {e!r}")
        hot = [{"rank": r + 1, "file": order[r],
                "held_by": sorted(n for n, held in holders.items() if order[r] in held)}
               for r in range(a.hot)]

        nsec = int(a.duration) + 1
        series = []
        for sec in range(nsec):
            recs = [r for r in records if int(r[0]) == sec]
            lats = [r[3] for r in recs]
            series.append({
                "t": sec,
                "requests": len(recs),
                "hits": sum(classify(r[4]) == "hit" for r in recs),
                "failed": sum(not r[6] for r in recs),
                "p80_ms": pct(lats, 0.8),
            })
        for row in series:
            row["hit_ratio"] = round(row["hits"] / row["requests"], 4) if row["requests"] else None
        # Objects first asked for after the kill, and whether later requests were hits.
        first = {}
        for r in records:
            first.setdefault(r[5], r[0])
        late = {n for n, t in first.items() if t >= killed.get("at", a.kill_at)}
        late_hits = {r[5] for r in records
                     if r[5] in late and r[0] > first[r[5]] and classify(r[4]) == "hit"}

        def phase(lo, hi):
            recs = [r for r in records if lo <= r[0] < hi]
            lats = [r[3] for r in recs]
            return {"from_s": lo, "to_s": hi, "requests": len(recs),
                    "hit_ratio": round(sum(classify(r[4]) == "hit" for r in recs) / len(recs), 4)
                    if recs else None,
                    "failed": sum(not r[6] for r in recs),
                    "p50_ms": pct(lats, 0.5), "p80_ms": pct(lats, 0.8),
                    "p99_ms": pct(lats, 0.99)}

        at = killed.get("at", a.kill_at)
        result = {
            "label": a.label,
            "bin": a.bin,
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "settings": {k: getattr(a, k) for k in
                         ("files", "new", "clients", "zipf", "think", "duration", "kill_at",
                          "seed")},
            "killed_at_s": at,
            "loadavg_start": load_before,
            "loadavg_end": os.getloadavg(),
            "client_errors": errors,
            "before_kill": phase(0, at),
            "first_5s_after": phase(at, at + 5),
            "after_kill": phase(at, a.duration),
            "objects_first_asked_after_kill": len(late),
            "of_which_later_hits": len(late_hits),
            "new_objects_after_kill": new_objects,
            "objects_held_by_node": {n: len(h) for n, h in holders.items()},
            "hot_objects": hot,
            "series": series,
        }
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        for p in ("before_kill", "first_5s_after", "after_kill"):
            q = result[p]
            print(f"{a.label} {p:>15}: {q['requests']:6} requests, hit ratio {q['hit_ratio']}, "
                  f"{q['failed']} failed, p80 {q['p80_ms']} ms")
        print(f"new objects after the kill: {len(new_objects)}, cached "
              f"{sum(o['cached_within_10s'] for o in new_objects)}, second request a hit "
              f"{sum('slipstream-coop; hit' in o['second'] for o in new_objects)}, wrong bodies "
              f"{sum(not (o['first_ok'] and o['second_ok']) for o in new_objects)}")
        print(f"wrote {os.path.relpath(out, ROOT)}")
    finally:
        for p in reversed(procs):
            try:
                p.stop()
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(work, ignore_errors=True)


def chart(paths, out):
    """Hit ratio (top) and p80 latency (bottom) by second, one line per run, the kill marked."""
    runs = [json.load(open(p)) for p in paths]
    w, h, left, top = 720, 445, 60, 30
    pw, ph = w - left - 20, 150
    tmax = max(r["settings"]["duration"] for r in runs)
    p80max = max((s["p80_ms"] or 0) for r in runs for s in r["series"]) or 1
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    x = lambda t: left + pw * t / tmax  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    for i, (label, key, y0, scale, fmt) in enumerate([
            ("cooperative hit ratio", "hit_ratio", top, 1.0, "{:.0%}"),
            ("p80 latency (ms)", "p80_ms", top + ph + 60, p80max, "{:.0f}")]):
        parts.append(f'<text x="{left}" y="{y0 - 8}">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y0}" width="{pw}" height="{ph}" fill="none" '
                     f'stroke="#999"/>')
        for frac in (0, 0.5, 1):
            yy = y0 + ph * (1 - frac)
            parts.append(f'<text x="{left - 6}" y="{yy + 4}" text-anchor="end">'
                         f'{fmt.format(frac * scale)}</text>')
        for j, r in enumerate(runs):
            pts = [(x(s["t"] + 0.5), y0 + ph * (1 - min(1, (s[key] or 0) / scale)))
                   for s in r["series"] if s[key] is not None]
            d = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            parts.append(f'<polyline points="{d}" fill="none" stroke="{colours[j % 4]}" '
                         f'stroke-width="1.5"/>')
            kx = x(r["killed_at_s"])
            parts.append(f'<line x1="{kx:.1f}" y1="{y0}" x2="{kx:.1f}" y2="{y0 + ph}" '
                         f'stroke="#000" stroke-dasharray="4,3"/>')
    axis_y = top + 2 * ph + 60 + 16
    for t in range(0, int(tmax) + 1, 5):
        parts.append(f'<text x="{x(t):.1f}" y="{axis_y}" text-anchor="middle">{t} s</text>')
    parts.append(f'<text x="{left}" y="{h - 8}">dashed: the first gateway SIGKILLed; '
                 + ", ".join(f'<tspan fill="{colours[j % 4]}">{r["label"]}</tspan>'
                             for j, r in enumerate(runs)) + "</text>")
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")
    print(f"wrote {os.path.relpath(out, ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin")
    ap.add_argument("--label")
    ap.add_argument("--out")
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--zipf", type=float, default=0.8)
    ap.add_argument("--think", type=float, default=0.02)
    ap.add_argument("--duration", type=float, default=40)
    ap.add_argument("--kill-at", type=float, default=15)
    ap.add_argument("--hot", type=int, default=10, help="hot objects whose replicas are listed")
    ap.add_argument("--new", type=int, default=20, help="files asked for only after the kill")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--chart", nargs="+", metavar="JSON")
    ap.add_argument("--chart-out", default=os.path.join(ROOT, "docs/experiments/004-gateway-kill.svg"))
    a = ap.parse_args()
    if a.chart:
        return chart(a.chart, a.chart_out)
    if not (a.bin and a.label):
        ap.error("--bin and --label are needed for a run")
    run(a)


if __name__ == "__main__":
    main()
