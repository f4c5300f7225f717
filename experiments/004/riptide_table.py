#!/usr/bin/env python3
"""Markdown tables of experiments/004/riptide.sh's CSVs, the paper's numbers beside ours."""

import csv
import os
import statistics
import sys
from collections import defaultdict

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


PAPER_T1 = {1024: (1.35, 23.30), 4096: (1.70, 24.07), 10240: (1.90, 24.40),
            40960: (5.25, 25.35), 102400: (9.90, 38.81), 409600: (36.00, 63.35)}

t = rows("table1.csv")
if t:
    print("## Table 1: proxy overhead by object size (mean of the requests, ms)\n")
    print("| size | direct | through the node, transparent | overhead | hit in the node's store "
          "| paper: direct | paper: proxy | paper: overhead |")
    print("|---|---|---|---|---|---|---|---|")
    by = defaultdict(list)
    for r in t:
        by[int(r["size_bytes"])].append(r)
    for size in sorted(by):
        d = statistics.mean(float(r["direct_ms"]) for r in by[size])
        tr = statistics.mean(float(r["transparent_ms"]) for r in by[size])
        h = statistics.mean(float(r["store_hit_ms"]) for r in by[size])
        pd, pp = PAPER_T1.get(size, (float("nan"), float("nan")))
        print(f"| {size:,} B | {d:.2f} | {tr:.2f} | +{tr - d:.2f} | {h:.2f} | {pd:.2f} | {pp:.2f} "
              f"| +{pp - pd:.2f} |")
    print(f"\n{len(by[min(by)])} requests per size and path, interleaved.\n")

r = rows("fig16-requests.csv")
if r:
    print("## Fig. 16: hit latency (ms)\n")
    print("| system | requests | p50 | p80 | p90 | p99 | mean | outcomes |")
    print("|---|---|---|---|---|---|---|---|")
    p80 = {}
    for system in ("central", "riptide", "riptide-dht"):
        xs = [float(x["latency_ms"]) for x in r if x["system"] == system]
        if not xs:
            continue
        p80[system] = pct(xs, 0.8)
        outcomes = defaultdict(int)
        for x in r:
            if x["system"] == system:
                outcomes[x["outcome"]] += 1
        oc = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        print(f"| {system} | {len(xs)} | {pct(xs, .5):.2f} | {pct(xs, .8):.2f} | "
              f"{pct(xs, .9):.2f} | {pct(xs, .99):.2f} | {statistics.mean(xs):.2f} | {oc} |")
    if "central" in p80:
        for s in ("riptide", "riptide-dht"):
            if s in p80:
                print(f"\n{s}: p80 {p80[s] / p80['central']:.2f}× the central proxy's "
                      f"(target ≤ 1.2× with the fast path).")
    print("\nPaper (Fig. 16): 80 % of hits under 50 ms with the proxy cache, under ~120 ms with "
          "Riptide without Bloom filters; with them, some hits rival the proxy cache.\n")



def table(title, header, cells):
    """A markdown table under a heading; `cells` rows of strings."""
    print(f"## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for c in cells:
        print("| " + " | ".join(str(x) for x in c) + " |")
    print()


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
    print("## Fig. 17: hints per cache manager per interval\n")
    managers = sorted({x["manager"] for x in f17})
    print("| t (s) | " + " | ".join(managers) + " |")
    print("|---|" + "---|" * len(managers))
    by = defaultdict(dict)
    for x in f17:
        by[float(x["t_s"])][x["manager"]] = x["hints"]
    for t_s in sorted(by):
        print(f"| {t_s:.0f} | " + " | ".join(by[t_s].get(mm, "") for mm in managers) + " |")
    print()

f19 = rows("fig19.csv")
if f19:
    print("## Figs. 18–19: requests served per node in the flash crowd\n")
    print("| node | served |")
    print("|---|---|")
    for x in f19:
        print(f"| {x['node']} | {x['served']} |")
    print()

f24 = rows("fig24.csv")
f23 = rows("fig23-requests.csv")
if f24:
    print("## Figs. 23–24: behind a 10 Mbit/s origin link\n")
    print("| system | clients | requests/s (sd) | p50 ms | p90 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|---|")
    for x in f24:
        xs = [float(y["latency_ms"]) for y in (f23 or [])
              if y["system"] == x["system"] and y["clients"] == x["clients"]]
        print(f"| {x['system']} | {x['clients']} | {x['requests_per_s']} ({x['sd']}) | "
              f"{pct(xs, .5):.1f} | {pct(xs, .9):.1f} | {pct(xs, .99):.1f} | {x['failed']} |")
    print()
