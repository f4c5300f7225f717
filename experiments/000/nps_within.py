#!/usr/bin/env python3
"""Within each Monitor run of an nps.sh run directory: are the documents slower while the
budget is high?

    python3 experiments/000/nps_within.py RUN_DIR

Each measured 100 ms bucket of a run's timeline (bench-*.json) is paired with the monitor
sample that covers it (status-*.json), as nps_timeline.py lines them up. The buckets are
sorted by budget; the documents' mean response time in the top third is compared with the
bottom third's. Printed per policy and rate: the mean budgets of both thirds, their response
times (each the mean over the runs), the difference, and its spread over the runs.
"""
import collections
import glob
import os
import statistics as st
import sys

from nps_timeline import epoch_finder, load


def thirds(bench, status):
    t = bench["timeline"]
    epoch_at = epoch_finder(bench, status)
    points = []
    for i, m in enumerate(t["mean_ms"]):
        if m is None or t["documents"][i] == 0:
            continue
        e = epoch_at(t["measured_start_unix_ms"] + i * t["bucket_ms"])
        if e is not None:
            points.append((e["budget_per_s"], m))
    if len(points) < 30:
        return None
    points.sort(key=lambda p: p[0])
    n = len(points) // 3
    lo, hi = points[:n], points[-n:]
    return (st.mean(p[0] for p in lo), st.mean(p[0] for p in hi),
            st.mean(p[1] for p in lo), st.mean(p[1] for p in hi))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: nps_within.py RUN_DIR")
    cells = collections.defaultdict(list)
    for bf in sorted(glob.glob(os.path.join(sys.argv[1], "bench-monitor-*.json"))):
        name = os.path.basename(bf)[len("bench-"):]
        try:
            r = thirds(*load(bf))
        except (OSError, ValueError, KeyError) as e:
            print(f"{name}: left out ({e})", file=sys.stderr)
            continue
        if r:
            cells[name.rsplit("-", 1)[0]].append(r)
    for cell, rs in sorted(cells.items()):
        diffs = [100 * (r[3] / r[2] - 1) for r in rs]
        spread = f"SD {st.stdev(diffs):.1f}" if len(diffs) > 1 else "one run"
        print(f"{cell:42s} runs {len(rs):2d}  budget {st.mean(r[0] for r in rs):7.0f} / {st.mean(r[1] for r in rs):7.0f} files/s  "
              f"RT {st.mean(r[2] for r in rs):.3f} / {st.mean(r[3] for r in rs):.3f} ms  top third {st.mean(diffs):+.1f} % ({spread})")


if __name__ == "__main__":
    main()
