"""Counts the machine's stalls in a run directory of nps.sh: runs in which the load generator
itself began a document more than LAG_MS late (its timeline's largest start lag in any 100 ms
bucket). A generator that is tens of milliseconds behind was not running, so something on the
machine (the host's steal, another process) stopped it; the server's documents of those
buckets wait with it. Such a stall is the machine's, whichever policy's run it falls in, but a
single one moves a run's mean response time by several per cent at 250 µs a request. Where
the server collapsed (No-Avoidance at high load) the generator falls behind because its
clients all wait, so a count there is the policy's, not the machine's.

For each policy and rate: the runs, how many had a stall, and the paired mean response time
against No-Prefetching (as nps_table.py computes it) with and without the repetitions in
which either run of the pair stalled.

    python3 experiments/000/nps_stalls.py docs/experiments/000/slow/nps [LAG_MS]
"""
import json
import os
import sys

from nps_paired import changes, response_times


def largest_lag(path):
    t = json.load(open(path))["timeline"]
    return max(t.get("lag_max_ms") or [0.0])


def main(run_dir, lag_ms):
    rt, policies, rates = response_times(os.path.join(run_dir, "runs.csv"))
    stalled = {}
    for (policy, rate, rep) in rt:
        bench = os.path.join(run_dir, f"bench-{policy}-{rate}-{rep}.json")
        stalled[(policy, rate, rep)] = os.path.exists(bench) and largest_lag(bench) > lag_ms
    print(f"Runs whose load generator began a document more than {lag_ms:g} ms late (stalls), "
          "and the paired mean response time against No-Prefetching with every repetition and "
          "without those in which either run stalled.\n")
    print("| docs/s | policy | runs | stalled | paired, all | paired, no stall (reps) |")
    print("|---|---|---|---|---|---|")
    for rate in rates:
        for p in policies:
            reps = [k[2] for k in rt if k[0] == p and k[1] == rate]
            if not reps:
                continue
            n_stalled = sum(stalled[(p, rate, rep)] for rep in reps)
            if p == "noprefetch":
                print(f"| {rate} | {p} | {len(reps)} | {n_stalled} | | |")
                continue
            pairs = changes(rt, p, rate)
            clean = [d for rep, d in pairs
                     if not stalled[(p, rate, rep)] and not stalled[("noprefetch", rate, rep)]]

            def pct(ds):
                return f"{100 * sum(ds) / len(ds):+.1f} %" if ds else "–"
            print(f"| {rate} | {p} | {len(reps)} | {n_stalled} | {pct([d for _, d in pairs])} "
                  f"| {pct(clean)} ({len(clean)}) |")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) == 3 else 20.0)
