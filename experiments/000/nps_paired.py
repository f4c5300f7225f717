"""The paired response-time change of nps.sh's runs, shared by nps_relative.py and
nps_stalls.py: a run's mean document response time over the No-Prefetching run of the same
repetition and rate, less one. (nps_table.py computes the same for its paired table; it runs
as a script on import, so it keeps its own.)
"""
import csv


def response_times(runs_csv):
    """Each run's mean document response time in ms, by (policy, rate, rep), all strings as
    in the CSV; and the policies and rates in the CSV's order (rates by value)."""
    rows = list(csv.DictReader(open(runs_csv)))
    rt = {(r["policy"], r["rate"], r["rep"]): float(r["doc_mean_ms"]) for r in rows}
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    rates = sorted({r["rate"] for r in rows}, key=float)
    return rt, policies, rates


def changes(rt, policy, rate):
    """(rep, change) for each repetition of `policy` at `rate` with a No-Prefetching run beside
    it, in repetition order."""
    reps = sorted((k[2] for k in rt if k[0] == policy and k[1] == rate), key=int)
    return [(rep, rt[(policy, rate, rep)] / rt[("noprefetch", rate, rep)] - 1)
            for rep in reps if ("noprefetch", rate, rep) in rt]
