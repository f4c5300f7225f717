#!/usr/bin/env python3
"""Pilot 66's noise floor: No-Prefetching against itself.

For each load of each runs.csv given: the runs' mean response times, their coefficient of
variation, and what a paired comparison of two policies with that noise can tell: the 95 %
half-interval of a paired difference over n repetitions (n = 3, 6, 20), taking each run's
noise as independent. Usage: aa.py runs.csv [runs.csv ...]
"""
import csv
import math
import statistics
import sys

# Student's t, two-sided 95 %, by degrees of freedom.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 19: 2.093, 29: 2.045}


def half_interval(cv, n):
    """95 % half-interval, in % of the mean, of the mean of n paired differences of two runs
    whose means each vary with coefficient of variation cv (a fraction)."""
    return 100 * T95[n - 1] * math.sqrt(2) * cv / math.sqrt(n)


def needed(cv, target=2.0):
    """Repetitions for a paired half-interval of `target` % (normal approximation)."""
    return math.ceil((1.96 * math.sqrt(2) * cv * 100 / target) ** 2)


for path in sys.argv[1:]:
    by_rate = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["policy"] == "noprefetch":
                by_rate.setdefault(int(row["rate"]), []).append(float(row["doc_mean_ms"]))
    print(path)
    print("| docs/s | runs (ms) | mean | CV | paired ± at n = 3 | n = 6 | n = 20 | n for ± 2 |")
    print("|---|---|---|---|---|---|---|---|")
    for rate, xs in sorted(by_rate.items()):
        m = statistics.mean(xs)
        cv = statistics.stdev(xs) / m
        runs = " · ".join(f"{x:.2f}" for x in xs)
        print(
            f"| {rate} | {runs} | {m:.3f} | {100 * cv:.1f} % | ± {half_interval(cv, 3):.1f} % "
            f"| ± {half_interval(cv, 6):.1f} % | ± {half_interval(cv, 20):.1f} % | {needed(cv)} |"
        )
    print()
