#!/usr/bin/env python3
"""What the node itself saw in each Monitor run of an nps.sh run directory.

    python3 experiments/000/nps_costs.py RUN_DIR [SAMPLES=100]

For each status-*.json: the demand threads' run-queue delay (`demand_wait`, ms per second)
and the budget over the last SAMPLES monitor samples (the measured run, at 100 ms epochs);
with the cost brake on (prefetch.experimental.cost_target), each closed cycle's cost from medians and from
means, the estimate, how often the brake cut the budget, and the first cycle's halves (it
has no cost: the node's start). Last, the spread of the cycles'
costs over every run: the noise the brake's estimate carries.
"""
import glob
import json
import os
import statistics as st
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    run_dir = sys.argv[1]
    last = int(sys.argv[2]) if len(sys.argv) == 3 else 100
    files = sorted(glob.glob(os.path.join(run_dir, "status-*.json")))
    if not files:
        sys.exit(f"no status-*.json in {run_dir}")
    medians, means = [], []
    for f in files:
        try:
            with open(f) as fh:
                s = json.load(fh)
        except (OSError, ValueError) as e:
            print(f"{f}: unreadable ({e})", file=sys.stderr)
            continue
        name = os.path.basename(f)[len("status-"):-len(".json")]
        samples = [x for x in s.get("samples", [])][-last:]
        waits = [x["demand_wait"] for x in samples if x.get("demand_wait") is not None]
        budgets = [x["budget_per_s"] for x in samples]
        line = f"{name}: budget {st.mean(budgets):.0f} files/s" if budgets else f"{name}: no samples"
        if waits:
            line += f", demand wait {1000 * st.mean(waits):.1f} ms/s (p90 {1000 * sorted(waits)[int(0.9 * (len(waits) - 1))]:.1f})"
        cost = s.get("cost")
        if cost:
            cycles = [c for c in cost["cycles"] if c["cost"] is not None]
            medians += [c["cost"] for c in cycles]
            means += [c["mean_cost"] for c in cycles if c.get("mean_cost") is not None]
            est = cost["estimate"]
            braked = sum(1 for x in s.get("samples", []) if x["change"] == "braked")
            line += (f"; cost estimate {'-' if est is None else f'{100 * est:+.1f} %'}, braked {braked}, cycles "
                     + ", ".join(f"{100 * c['cost']:+.1f} %" for c in cycles))
            # The first cycle, which has no cost (the node's start): its halves as they were.
            # (Pilots 70-71's statuses kept means under quiet_ms and busy_ms.)
            first = next((c for c in cost["cycles"] if c["cycle"] == 0), None)
            if first:
                q = first.get("quiet_median_ms", first.get("quiet_ms"))
                b = first.get("busy_median_ms", first.get("busy_ms"))
                if q is not None and b is not None:
                    line += f"; cycle 0: quiet {q:.2f} ms, busy {b:.2f} ms"
        print(line)
    if len(medians) > 1:
        print(f"\n{len(medians)} cycles with a cost: from medians mean {100 * st.mean(medians):+.1f} %, "
              f"SD {100 * st.stdev(medians):.1f} points", end="")
        if len(means) > 1:
            print(f"; from means mean {100 * st.mean(means):+.1f} %, SD {100 * st.stdev(means):.1f} points")
        else:
            print()


if __name__ == "__main__":
    main()
