"""Summarises experiments/000/nps.sh's runs.csv as the report's markdown table (stdout)."""
import csv
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
by = defaultdict(list)
for r in rows:
    by[(int(r["rate"]), r["policy"])].append(r)
rates = sorted({k[0] for k in by})
policies = []
for r in rows:
    if r["policy"] not in policies:
        policies.append(r["policy"])

def mean(rate, policy, col):
    v = [float(r[col]) for r in by.get((rate, policy), [])]
    return sum(v) / len(v) if v else float("nan")

print("| docs/s | " + " | ".join(policies) + " |")
print("|---|" + "---|" * len(policies))
for rate in rates:
    base = mean(rate, "noprefetch", "doc_mean_ms")
    cells = []
    for p in policies:
        rt = mean(rate, p, "doc_mean_ms")
        pf = mean(rate, p, "prefetch_kBps") / 1000
        err = mean(rate, p, "errors")
        cell = f"{rt:.2f} ms"
        if p != "noprefetch":
            cell += f" ({(rt / base - 1) * 100:+.0f} %), {pf:.1f} MB/s"
        if err > 0:
            cell += f", {err:.0f} failed"
        cells.append(cell)
    print(f"| {rate} | " + " | ".join(cells) + " |")

print()
print("| docs/s | spare taken by No-Avoidance, MB/s (policy, its RT) | " + " | ".join(p for p in policies if p.startswith("monitor")) + " |")
print("|---|---|" + "---|" * len([p for p in policies if p.startswith("monitor")]))
for rate in rates:
    base = mean(rate, "noprefetch", "doc_mean_ms")
    # The spare bandwidth No-Avoidance takes: the most it prefetched while demand stayed
    # within 5 % of No-Prefetching (beyond that it took more than the spare).
    na = [(mean(rate, p, "prefetch_kBps") / 1000, mean(rate, p, "doc_mean_ms"), p)
          for p in policies if p.startswith("noavoid") and mean(rate, p, "errors") == 0
          and mean(rate, p, "doc_mean_ms") <= base * 1.05]
    # Neither pfrate within 5 %: No-Avoidance takes no spare safely, and the Monitor's cell
    # is judged on its response time alone.
    best = max(na) if na else None
    cells = []
    for p in policies:
        if not p.startswith("monitor"):
            continue
        pf = mean(rate, p, "prefetch_kBps") / 1000
        rt = mean(rate, p, "doc_mean_ms")
        ok = "✓" if rt <= base * 1.05 and (best is None or pf >= 0.8 * best[0]) else "✗"
        share = f"{pf / best[0] * 100:.0f} % of it" if best else f"{pf:.0f} MB/s"
        cells.append(f"{share}, RT {(rt / base - 1) * 100:+.0f} % {ok}")
    spare = (f"{best[0]:.1f} ({best[2]}, {(best[1] / base - 1) * 100:+.0f} %)" if best
             else "none (no pfrate within 5 %)" if any(p.startswith("noavoid") for p in policies)
             else "— (no No-Avoidance runs)")
    print(f"| {rate} | {spare} | " + " | ".join(cells) + " |")

# Each run, for the Monitors and No-Prefetching: mean RT (prefetch MB/s, failed documents).
print()
print("| docs/s | " + " | ".join(p for p in policies if p == "noprefetch" or p.startswith("monitor")) + " |")
print("|---|" + "---|" * len([p for p in policies if p == "noprefetch" or p.startswith("monitor")]))
for rate in rates:
    cells = []
    for p in policies:
        if p != "noprefetch" and not p.startswith("monitor"):
            continue
        runs = []
        for r in by.get((rate, p), []):
            run = f"{float(r['doc_mean_ms']):.2f} ms"
            if p != "noprefetch":
                run += f", {float(r['prefetch_kBps']) / 1000:.0f}"
            if float(r["errors"]) > 0:
                run += f", {r['errors']} failed"
            runs.append(run)
        cells.append(" · ".join(runs))
    print(f"| {rate} | " + " | ".join(cells) + " |")

# Fig. 6: the bursty run, when its CSV sits beside runs.csv.
import os
bursty = os.path.join(os.path.dirname(sys.argv[1]), "bursty.csv")
if os.path.exists(bursty) and sum(1 for _ in open(bursty)) > 1:
    b = defaultdict(list)
    for r in csv.DictReader(open(bursty)):
        b[r["policy"]].append(r)
    def bmean(p, col):
        v = [float(r[col]) for r in b[p]]
        return sum(v) / len(v)
    base = bmean("noprefetch", "doc_mean_ms")
    print()
    print("| policy | mean RT | p90 | p99 | vs No-Prefetching | prefetch MB/s | failed documents | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for p in b:
        rt = bmean(p, "doc_mean_ms")
        print(f"| {p} | {rt:.2f} ms | {bmean(p, 'doc_p90_ms'):.2f} ms | {bmean(p, 'doc_p99_ms'):.1f} ms | "
              f"{(rt / base - 1) * 100:+.0f} % | {bmean(p, 'prefetch_kBps') / 1000:.1f} | "
              f"{bmean(p, 'errors'):.0f} | {len(b[p])} |")
