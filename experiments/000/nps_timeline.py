"""Lines up one run's demand timeline (the bench report nps.sh keeps, bench-POLICY-RATE-REP.json)
with its monitor's samples (status-POLICY-RATE-REP.json), 100 ms by 100 ms, and says where the
slow documents were: how much of the run's summed response time the tenth of its 100 ms
buckets that weigh most carry, and what the monitor saw (load, probe, budget, change) in the
epochs around them. With a bench report that has them, each bucket also shows the load
generator's own start lag (mean and largest: how late its clients began their first request):
a lag near the document's response time says the generator, not the server, was behind.

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


def epoch_finder(bench, status):
    """A function from a bucket's start (Unix ms) to the monitor's epoch sample that covers it:
    the first taken after the bucket ended, re-probes (which carry no load) skipped; None
    without a status, or for a bucket no sample covers."""
    # The server's clock: its uptime when the status was read, and the wall clock then.
    offset = None
    if status is not None and "status_read_unix_ms" in bench:
        offset = status["uptime_ms"] - bench["status_read_unix_ms"]  # server ms = unix ms + offset
    samples = status.get("samples", []) if status else []

    def epoch_at(unix_ms):
        if offset is None:
            return None
        at = unix_ms + offset
        for s in samples:
            if s["at_ms"] >= at + 100 and s.get("load") is not None:
                return s
        return None

    return epoch_at


def median_bucket_ms(bench):
    """The run's typical 100 ms: the median over its buckets of their mean response time
    (buckets with no completed document left out); None when no document completed."""
    t = bench["timeline"]
    means = sorted(m for d, m in zip(t["documents"], t["mean_ms"]) if d)
    return means[len(means) // 2] if means else None


def main(path):
    bench, status = load(path)
    t = bench["timeline"]
    docs, means, maxes = t["documents"], t["mean_ms"], t["max_ms"]
    total = sum(d * m for d, m in zip(docs, means))
    n = sum(docs)
    if n == 0:
        print("no documents")
        return
    epoch_at = epoch_finder(bench, status)
    # The buckets that weigh most in the run's mean: the most summed response time.
    order = sorted(range(len(docs)), key=lambda i: -(docs[i] * means[i]))
    worst = order[: max(1, len(docs) // 10)]
    extra = sum(docs[i] * means[i] for i in worst)
    base = median_bucket_ms(bench)
    print(f"{path}: {n} documents, mean {total / n:.3f} ms, median bucket mean {base:.3f} ms")
    print(f"the tenth of 100 ms buckets with the most summed response time ({len(worst)}) hold "
          f"{extra / total * 100:.0f} % of it; at the median bucket's mean the run's mean would be "
          f"{(total - sum(docs[i] * (means[i] - base) for i in worst)) / n:.3f} ms")
    failed = t.get("failed", [0] * len(docs))
    if sum(failed):
        print(f"{sum(failed)} documents failed, in buckets "
              + ", ".join(str(i) for i, f in enumerate(failed) if f))
    lag_mean, lag_max = t.get("lag_mean_ms"), t.get("lag_max_ms")
    print("bucket  docs  mean_ms  max_ms"
          + ("  lag_ms (max)" if lag_mean else "")
          + "   | server: load  probe_ms  budget  change")
    for i in sorted(worst):
        e = epoch_at(t["measured_start_unix_ms"] + i * t["bucket_ms"])
        probe = f"{e['rt_us'] / 1000:7.2f}" if e and e.get("rt_us") is not None else "   fail"
        srv = (f"{e['load']:.2f}  {probe}  "
               f"{e['budget_per_s']:7.0f}  {e['change']}") if e else "-"
        lag = f"  {lag_mean[i]:6.2f} ({lag_max[i]:6.2f})" if lag_mean else ""
        print(f"{i:6d}  {docs[i]:4d}  {means[i]:7.2f}  {maxes[i]:7.2f}{lag}   | {srv}")


if __name__ == "__main__":
    try:
        for p in sys.argv[1:]:
            main(p)
    except BrokenPipeError:  # piped into head
        pass
