"""Summarises experiments/000/nps.sh's runs.csv as the report's markdown tables (stdout), with
the bench reports and monitor status files beside it when they are there.

    python3 experiments/000/nps_table.py docs/experiments/000/nps/runs.csv
    python3 experiments/000/nps_table.py pilots/pilot58/runs-cpu0-*.csv   # rounds as repetitions
"""
import csv
import glob
import json
import os
import sys
from collections import defaultdict

# Several runs.csv files (pilot rounds of one invocation each) are read as one run: each file's
# repetitions are numbered after the previous files', so that the paired tables pair them by
# file. The bench and status files are read from beside the first only.
# The bursty CSV is read from beside the first runs.csv (Fig. 6, below); given as an argument it
# would be read as one more round and mix its runs into the constant-rate cell of its mean rate.
for path in sys.argv[1:]:
    if os.path.basename(path) == "bursty.csv":
        sys.exit(f"{path}: the bursty runs are read from beside runs.csv; pass runs.csv files only")
rows = []
for path in sys.argv[1:]:
    offset = max((int(r["rep"]) for r in rows), default=0)
    for r in csv.DictReader(open(path)):
        r["rep"] = str(int(r["rep"]) + offset)
        rows.append(r)
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

# Two-sided 95 % Student t quantiles by degrees of freedom (1..30; beyond, the normal's).
T95 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
       2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04]

def noise(rate, policy):
    """Half the width of a 95 % confidence interval (Welch) on the policy's mean response time
    minus No-Prefetching's, in % of No-Prefetching's: how far apart the two could be by run-to-run
    noise alone. NaN with fewer than two runs of either."""
    a = [float(r["doc_mean_ms"]) for r in by.get((rate, policy), [])]
    b = [float(r["doc_mean_ms"]) for r in by.get((rate, "noprefetch"), [])]
    if len(a) < 2 or len(b) < 2:
        return float("nan")
    var = lambda v: sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1)
    va, vb = var(a) / len(a), var(b) / len(b)
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = T95[min(max(int(df), 1), 30) - 1] if df < 31 else 1.96
    return t * (va + vb) ** 0.5 / (sum(b) / len(b)) * 100

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
print("RT: the Monitor's mean response time against No-Prefetching's; ± half a 95 % confidence")
print("interval on that difference (Welch), from the spread of the runs.")
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
        cells.append(f"{share}, RT {(rt / base - 1) * 100:+.0f} % (± {noise(rate, p):.0f}) {ok}")
    spare = (f"{best[0]:.1f} ({best[2]}, {(best[1] / base - 1) * 100:+.0f} %)" if best
             else "none (no pfrate within 5 %)" if any(p.startswith("noavoid") for p in policies)
             else "— (no No-Avoidance runs)")
    print(f"| {rate} | {spare} | " + " | ".join(cells) + " |")

# Paired by repetition: the runs of one repetition and rate are interleaved, minutes apart, so
# they share the machine's state (a slow repetition is slow for every policy); the ratio of a
# policy's run to No-Prefetching's in the same repetition takes that drift out.
def paired(rate, policy):
    base = {r["rep"]: float(r["doc_mean_ms"]) for r in by.get((rate, "noprefetch"), [])}
    v = [float(r["doc_mean_ms"]) / base[r["rep"]] - 1 for r in by.get((rate, policy), [])
         if r["rep"] in base]
    if not v:
        return "—"
    m = sum(v) / len(v)
    if len(v) < 2:
        return f"{m * 100:+.0f} %"
    sd = (sum((x - m) ** 2 for x in v) / (len(v) - 1)) ** 0.5
    t = T95[min(len(v) - 1, 30) - 1]
    return f"{m * 100:+.0f} % (± {t * sd / len(v) ** 0.5 * 100:.0f})"

def heading(caption, cols):
    """A table's caption (lines), then its head: a docs/s column and `cols`."""
    print()
    print("\n".join(caption))
    print()
    print("| docs/s | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))

shown = [p for p in policies if p != "noprefetch" and not p.startswith("noavoid-5")]
heading(["Paired: the mean over repetitions of each run's response time against the No-Prefetching",
         "run of the same repetition and rate, ± half a 95 % interval (Student, repetitions − 1)."],
        shown)
for rate in rates:
    print(f"| {rate} | " + " | ".join(paired(rate, p) for p in shown) + " |")

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

# The load generator's start lag: how late after its scheduled arrival a client began its
# first request (runs.csv's lag_mean_ms, from bench reports that record it). It is in every
# document's response time and is the generator's, not the server's: the same change measured
# on the time less the lag is the server's share.
def has_lag(rs):
    return bool(rs) and all(r.get("lag_mean_ms") for r in rs)

if rates and all(has_lag(by[(rate, "noprefetch")]) for rate in rates if (rate, "noprefetch") in by):
    heading(["Less the generator's start lag: each policy's mean response time minus its runs' mean start",
             "lag, against No-Prefetching's the same way (the lag, in ms, in brackets)."], policies)
    for rate in rates:
        if not has_lag(by.get((rate, "noprefetch"))):
            continue
        base = mean(rate, "noprefetch", "doc_mean_ms") - mean(rate, "noprefetch", "lag_mean_ms")
        cells = []
        for p in policies:
            if not has_lag(by.get((rate, p))):
                cells.append("—")
                continue
            lag = mean(rate, p, "lag_mean_ms")
            net = mean(rate, p, "doc_mean_ms") - lag
            cell = f"{net:.2f} ms ({lag:.2f})"
            if p != "noprefetch":
                cell += f" {(net / base - 1) * 100:+.0f} %"
            cells.append(cell)
        print(f"| {rate} | " + " | ".join(cells) + " |")

# Each run's typical 100 ms and its slowest document, from the bench reports nps.sh keeps
# beside runs.csv (bench-POLICY-RATE-REP.json), when they are there: a mean response time is
# carried by its rare slow seconds as much as by its typical ones.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nps_timeline import median_bucket_ms  # noqa: E402

here = os.path.dirname(sys.argv[1])
typical = defaultdict(list)  # (tag, policy) -> [(median bucket ms, slowest ms)]
for path in glob.glob(os.path.join(here, "bench-*.json")):
    policy, tag, _rep = os.path.basename(path)[len("bench-"):-len(".json")].rsplit("-", 2)
    bench = json.load(open(path))
    med = median_bucket_ms(bench)
    if med is not None:
        typical[(tag, policy)].append((med, max(bench["timeline"]["max_ms"])))
if typical:
    tags = sorted({t for t, _ in typical}, key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0))
    cols = [p for p in policies if p != "noprefetch"]
    print()
    print("Typical 100 ms: each run's median 100 ms bucket of mean response time, averaged over the")
    print("runs, against No-Prefetching's; then the slowest document of any run, in ms.")
    print()
    print("| docs/s | noprefetch slowest | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for tag in tags:
        base = typical.get((tag, "noprefetch"))
        if not base:
            continue
        b = sum(m for m, _ in base) / len(base)
        cells = []
        for p in cols:
            v = typical.get((tag, p))
            if not v:
                cells.append("—")
                continue
            m = sum(x for x, _ in v) / len(v)
            cells.append(f"{(m / b - 1) * 100:+.0f} %, {max(x for _, x in v):.0f} ms")
        print(f"| {tag} | {max(x for _, x in base):.0f} ms | " + " | ".join(cells) + " |")

# Demand's own load: the Monitors' CPU load samples while their budget was still under 200
# files a second (demand, its hint requests and the probes, before prefetching took much).
own = defaultdict(list)
for path in glob.glob(os.path.join(here, "status-monitor-*.json")):
    policy, tag, _rep = os.path.basename(path)[len("status-"):-len(".json")].rsplit("-", 2)
    loads = [x["load"] for x in json.load(open(path)).get("samples", [])
             if x.get("load") is not None and x["budget_per_s"] < 200]
    if loads:
        own[(tag, policy)].append(sum(loads) / len(loads))
if own:
    print()
    print("Demand's own CPU load: each Monitor run's mean load while its budget was under 200 files/s")
    print("(min–max over its runs).")
    print()
    mons = [p for p in policies if p.startswith("monitor")]
    print("| docs/s | " + " | ".join(mons) + " |")
    print("|---|" + "---|" * len(mons))
    for tag in sorted({t for t, _ in own}, key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0)):
        cells = [f"{min(own[(tag, p)]):.2f}–{max(own[(tag, p)]):.2f}" if own.get((tag, p)) else "—"
                 for p in mons]
        print(f"| {tag} | " + " | ".join(cells) + " |")

# Fig. 6: the bursty run, when its CSV sits beside runs.csv.
bursty = os.path.join(os.path.dirname(sys.argv[1]), "bursty.csv")
if os.path.exists(bursty) and sum(1 for _ in open(bursty)) > 1:
    b = defaultdict(list)
    for r in csv.DictReader(open(bursty)):
        b[r["policy"]].append(r)
    def bmean(p, col):
        v = [float(r[col]) for r in b[p]]
        return sum(v) / len(v)
    base = bmean("noprefetch", "doc_mean_ms")
    lagged = all(has_lag(b[p]) for p in b)
    net_base = base - bmean("noprefetch", "lag_mean_ms") if lagged else None
    print()
    print("| policy | mean RT | p90 | p99 | vs No-Prefetching | prefetch MB/s | failed documents | runs |"
          + (" start lag | less the lag, vs |" if lagged else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if lagged else ""))
    for p in b:
        rt = bmean(p, "doc_mean_ms")
        extra = ""
        if lagged:
            lag = bmean(p, "lag_mean_ms")
            extra = f" {lag:.2f} ms | {((rt - lag) / net_base - 1) * 100:+.0f} % |"
        print(f"| {p} | {rt:.2f} ms | {bmean(p, 'doc_p90_ms'):.2f} ms | {bmean(p, 'doc_p99_ms'):.1f} ms | "
              f"{(rt / base - 1) * 100:+.0f} % | {bmean(p, 'prefetch_kBps') / 1000:.1f} | "
              f"{bmean(p, 'errors'):.0f} | {len(b[p])} |" + extra)
