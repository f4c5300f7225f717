# Pilot 64 (4): the median monitor probe of each Monitor run of a full nps.sh run (its
# status-*.json files, the samples of the measured RUN seconds), beside the run's prefetch
# bandwidth and demand response time (runs.csv). Usage: probe_medians.py DIR [RUN_SECONDS]
import csv, json, os, statistics, sys

d = sys.argv[1]
run_ms = int(sys.argv[2]) * 1000 if len(sys.argv) > 2 else 15000
rows = {(r["rep"], r["rate"], r["policy"]): r for r in csv.DictReader(open(os.path.join(d, "runs.csv")))}
print("docs/s policy rep: probe median us (p25), prefetch MB/s")
for (rep, rate, policy), r in sorted(rows.items(), key=lambda k: (int(k[0][1]), k[0][2], k[0][0])):
    if not policy.startswith("monitor"):
        continue
    f = os.path.join(d, f"status-{policy}-{rate}-{rep}.json")
    if not os.path.exists(f):
        continue
    s = json.load(open(f))
    xs = sorted(x["rt_us"] for x in s["samples"] if x["rt_us"] is not None and x["at_ms"] >= s["uptime_ms"] - run_ms)
    if not xs:
        continue
    print(f"{rate} {policy} {rep}: {statistics.median(xs):.0f} ({xs[len(xs) // 4]}), {float(r['prefetch_kBps']) / 1e3:.1f}")
