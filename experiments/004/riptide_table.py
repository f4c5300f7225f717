#!/usr/bin/env python3
"""Markdown tables of experiments/004/riptide.sh's CSVs, the paper's numbers beside ours."""

import csv
import os
import statistics
import sys
from collections import Counter, defaultdict

out = sys.argv[1] if len(sys.argv) > 1 else "docs/experiments/004"


def rows(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return list(csv.DictReader(f))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def table(title, header, cells, after=""):
    """A markdown table under a heading; `cells` rows of values; `after` a paragraph below."""
    print(f"## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for c in cells:
        print("| " + " | ".join(str(x) for x in c) + " |")
    print(f"\n{after}\n" if after else "")


PAPER_T1 = {1024: (1.35, 23.30), 4096: (1.70, 24.07), 10240: (1.90, 24.40),
            40960: (5.25, 25.35), 102400: (9.90, 38.81), 409600: (36.00, 63.35)}

t = rows("table1.csv")
if t:
    by = defaultdict(list)
    for r in t:
        by[int(r["size_bytes"])].append(r)
    cells = []
    for size in sorted(by):
        d, tr, h = (statistics.mean(float(r[k]) for r in by[size])
                    for k in ("direct_ms", "transparent_ms", "store_hit_ms"))
        pd, pp = PAPER_T1.get(size, (float("nan"), float("nan")))
        cells.append((f"{size:,} B", f"{d:.2f}", f"{tr:.2f}", f"+{tr - d:.2f}", f"{h:.2f}",
                      f"{pd:.2f}", f"{pp:.2f}", f"+{pp - pd:.2f}"))
    table("Table 1: proxy overhead by object size (mean of the requests, ms)",
          ["size", "direct", "through the node, transparent", "overhead",
           "hit in the node's store", "paper: direct", "paper: proxy", "paper: overhead"],
          cells, f"{len(by[min(by)])} requests per size and path, interleaved.")

r = rows("fig16-requests.csv")
if r:
    p80, cells = {}, []
    for system in ("central", "riptide", "riptide-dht"):
        xs = [float(x["latency_ms"]) for x in r if x["system"] == system]
        if not xs:
            continue
        p80[system] = pct(xs, 0.8)
        outcomes = Counter(x["outcome"] for x in r if x["system"] == system)
        cells.append((system, len(xs), *(f"{pct(xs, q):.2f}" for q in (.5, .8, .9, .99)),
                      f"{statistics.mean(xs):.2f}",
                      ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))))
    ratios = "".join(f"{s}: p80 {p80[s] / p80['central']:.2f}× the central proxy's "
                     f"(target ≤ 1.2× with the fast path).\n\n"
                     for s in ("riptide", "riptide-dht") if s in p80 and "central" in p80)
    table("Fig. 16: hit latency (ms)",
          ["system", "requests", "p50", "p80", "p90", "p99", "mean", "outcomes"], cells,
          ratios + "Paper (Fig. 16): 80 % of hits under 50 ms with the proxy cache, under "
          "~120 ms with Riptide without Bloom filters; with them, some hits rival the proxy "
          "cache.")

m = rows("memory.csv")
if m:
    table("Memory per node (resident set)",
          ["system", "node", "RSS", "objects held", "object bytes"],
          [(x["system"], x["node"], f"{int(x['rss_kib']) / 1024:.1f} MiB", x["objects"],
            x["object_bytes"]) for x in m])

lk = rows("lookups.csv")
if lk:
    table("Lookups per node",
          ["system", "node", "lookups", "per second (offered)", "CPU s",
           "lookups per CPU second"],
          [(x["system"], x["node"], x["lookups"], x["lookups_per_s"], x["cpu_s"],
            x["lookups_per_cpu_s"]) for x in lk])

f17 = rows("fig17.csv")
if f17:
    managers = sorted({x["manager"] for x in f17})
    by = defaultdict(dict)
    for x in f17:
        by[float(x["t_s"])][x["manager"]] = x["hints"]
    table("Fig. 17: hints per cache manager per interval", ["t (s)", *managers],
          [(f"{t_s:.0f}", *(by[t_s].get(mm, "") for mm in managers)) for t_s in sorted(by)])

f19 = rows("fig19.csv")
if f19:
    table("Figs. 18–19: requests served per node in the flash crowd", ["node", "served"],
          [(x["node"], x["served"]) for x in f19])

f24 = rows("fig24.csv")
f23 = rows("fig23-requests.csv") or []
if f24:
    cells = []
    for x in f24:
        xs = [float(y["latency_ms"]) for y in f23
              if y["system"] == x["system"] and y["clients"] == x["clients"]]
        cells.append((x["system"], x["clients"], f"{x['requests_per_s']} ({x['sd']})",
                      *(f"{pct(xs, q):.1f}" for q in (.5, .9, .99)), x["failed"]))
    table("Figs. 23–24: behind a 10 Mbit/s origin link",
          ["system", "clients", "requests/s (sd)", "p50 ms", "p90 ms", "p99 ms", "failed"],
          cells)
