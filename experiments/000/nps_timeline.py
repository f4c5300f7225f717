"""Lines up one run's demand timeline (the bench report nps.sh keeps, bench-POLICY-RATE-REP.json)
with its monitor's samples (status-POLICY-RATE-REP.json), 100 ms by 100 ms, and says where the
slow documents were: how much of the run's mean response time the slowest tenth of its 100 ms
buckets carry, and what the monitor saw (load, probe, budget, change) in the epochs around them.

    python3 experiments/000/nps_timeline.py docs/experiments/000/nps/bench-monitor-knee-600-1.json
"""
import json
import os
import sys


def load(bench_path):
    bench = json.load(open(bench_path))
    status_path = os.path.join(os.path.dirname(bench_path),
                               os.path.basename(bench_path).replace("bench-", "status-", 1))
    status = json.load(open(status_path)) if os.path.exists(status_path) else None
    return bench, status


def main(path):
    bench, status = load(path)
    t = bench["timeline"]
    docs, means, maxes = t["documents"], t["mean_ms"], t["max_ms"]
    total = sum(d * m for d, m in zip(docs, means))
    n = sum(docs)
    if n == 0:
        print("no documents")
        return
    # The server's clock: its uptime when the status was read, and the wall clock then.
    offset = None
    if status is not None and "status_read_unix_ms" in bench:
        offset = status["uptime_ms"] - bench["status_read_unix_ms"]  # server ms = unix ms + offset
    samples = status.get("samples", []) if status else []

    def epoch_at(unix_ms):
        if offset is None:
            return None
        at = unix_ms + offset
        best = None
        for s in samples:
            if s["at_ms"] <= at + 100:
                best = s
        return best

    order = sorted(range(len(docs)), key=lambda i: -(docs[i] * means[i]))
    worst = order[: max(1, len(docs) // 10)]
    extra = sum(docs[i] * means[i] for i in worst)
    base = sorted(means[i] for i in range(len(docs)) if docs[i])[len([d for d in docs if d]) // 2]
    print(f"{path}: {n} documents, mean {total / n:.3f} ms, median bucket mean {base:.3f} ms")
    print(f"the slowest tenth of 100 ms buckets ({len(worst)}) hold {extra / total * 100:.0f} % of the summed "
          f"response time; at the median bucket's mean the run's mean would be "
          f"{(total - sum(docs[i] * (means[i] - base) for i in worst)) / n:.3f} ms")
    print("bucket  docs  mean_ms  max_ms   | server: load  probe_ms  budget  change")
    for i in sorted(worst):
        e = epoch_at(t["measured_start_unix_ms"] + i * t["bucket_ms"])
        srv = (f"{e['load'] if e['load'] is not None else float('nan'):.2f}  {(e['rt_us'] or 0) / 1000:7.2f}  "
               f"{e['budget_per_s']:7.0f}  {e['change']}") if e else "-"
        print(f"{i:6d}  {docs[i]:4d}  {means[i]:7.2f}  {maxes[i]:7.2f}   | {srv}")


for p in sys.argv[1:]:
    main(p)
