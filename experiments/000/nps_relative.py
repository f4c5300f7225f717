"""Writes the paired response-time change of each policy against No-Prefetching, by rate, as a
CSV for `slipstream experiment lines` (nps.sh draws it as fig4-relative.svg): for each rate,
the mean over repetitions of a run's mean document response time over the No-Prefetching run
of the same repetition, less one, in per cent. Fig. 4 in milliseconds is drawn to the scale
of No-Avoidance's collapses, where a Monitor's few per cent cannot be seen; this chart leaves
out the cells whose change is over LIMIT per cent (100 by default), so that it keeps the scale
of the target's 5 %.

    python3 experiments/000/nps_relative.py docs/experiments/000/slow/nps/runs.csv OUT.csv [LIMIT]
"""
import csv
import sys

from nps_paired import changes, response_times


def main(runs_path, out_path, limit):
    rt, policies, rates = response_times(runs_path)
    with open(out_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rate", "policy", "rt_change_pct"])
        for p in policies:
            for rate in rates:
                ds = [d for _, d in changes(rt, p, rate)]
                if ds and 100 * sum(ds) / len(ds) <= limit:
                    w.writerow([rate, p, f"{100 * sum(ds) / len(ds):.2f}"])


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) == 4 else 100.0)
