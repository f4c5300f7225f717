#!/usr/bin/env python3
"""Every number paper 003 prints, next to slipstream's and ns2's on the same transfers.

Usage: paper-table.py RUNS_DIR [NS2_DIR] [--splice REPORT.md]
  RUNS_DIR  out/003/figures-2.26/runs (one directory per panel, each with transfers.csv)
  NS2_DIR   directory with PANEL.csv from ns2 running each panel's --export-ns2 script
            (experiments/003/ns2-panels.sh writes them); without it the ns2 column is empty.
Prints a markdown table; with --splice, also writes it into REPORT.md between the lines
`<!-- paper-table:begin -->` and `<!-- paper-table:end -->`. The paper's values are typed in from the paper (Tables 2-5 and the
text of Figs. 2 and 5); everything else is computed from the CSVs.
"""
import csv
import os
import statistics
import sys

SOURCES = ("origin", "parent", "child")
NAME = {"origin": "Web Server", "parent": "Parent Proxy", "child": "Child Proxy"}


def load(path):
    if not path or not os.path.exists(path):
        return None
    with open(path) as f:
        return [
            {
                "id": int(r["id"]),
                "source": r["source"],
                "size": int(r["size_bytes"]),
                "start": float(r["start_s"]),
                "end": float(r["end_s"]),
                "latency": float(r["latency_s"]),
            }
            for r in csv.DictReader(f)
        ]


def of(rows, src):
    return [r for r in rows if r["source"] == src]


def mean_latency(rows, src=None):
    sel = rows if src is None else of(rows, src)
    return sum(r["latency"] for r in sel) / len(sel) if sel else float("nan")


def throughput_mbps(rows, src):
    """Least-squares slope of latency on size for transfers of 20+ segments, as Mb/s."""
    pts = [(r["size"], r["latency"]) for r in of(rows, src) if r["size"] > 19 * 512]
    if len(pts) < 3:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return 8 / (sxy / sxx) / 1e6 if sxy > 0 else float("nan")


def max_concurrent(rows):
    events = sorted([(r["start"], 1) for r in rows] + [(r["end"], -1) for r in rows],
                    key=lambda e: (e[0], e[1]))
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def offered_mbps(rows):
    span = max(r["start"] for r in rows) - min(r["start"] for r in rows)
    return sum(r["size"] for r in rows) * 8 / span / 1e6


def fmt(v, kind):
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if v != v:  # NaN
        return "n/a"
    return {
        "s": f"{v:.3f}",
        "int": f"{int(round(v)):,}",
        "pct": f"{100 * v:.1f} %",
        "mbps": f"{v:.1f}",
    }[kind]


def splice(report, table):
    with open(report) as f:
        text = f.read()
    begin, end = "<!-- paper-table:begin -->", "<!-- paper-table:end -->"
    if begin not in text or end not in text:
        sys.exit(f"{report}: no {begin} ... {end} markers to splice the table between")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(report, "w") as f:
        f.write(head + begin + "\n" + table + "\n" + end + tail)


def main():
    args = sys.argv[1:]
    report = None
    if "--splice" in args:
        i = args.index("--splice")
        report = args[i + 1]
        del args[i:i + 2]
    runs = args[0]
    ns2 = args[1] if len(args) > 1 else None
    panel = lambda name: (load(os.path.join(runs, name, "transfers.csv")),
                          load(os.path.join(ns2, name + ".csv")) if ns2 else None)
    out = ["| experiment | quantity | paper | slipstream | ns2 |", "|---|---|---|---|---|"]

    def row(exp, what, paper, fn, kind, pair, same=False):
        ours, theirs = pair
        a = fn(ours) if ours else None
        b = fn(theirs) if theirs else None
        if same and theirs:
            b = "same transfers"
        out.append(f"| {exp} | {what} | {paper} | {fmt(a, kind)} | {fmt(b, kind)} |")

    # Table 2: the workload (the same transfers on both engines).
    base = panel("fig2-baseline")
    t2 = [
        ("Total transfers", "5,000", lambda r: len(r), "int"),
        ("Total transferred bytes", "48,121,956", lambda r: sum(x["size"] for x in r), "int"),
        ("Smallest transfer (bytes)", "68", lambda r: min(x["size"] for x in r), "int"),
        ("Median transfer (bytes)", "3,958", lambda r: statistics.median_low([x["size"] for x in r]), "int"),
        ("Mean transfer (bytes)", "9,624", lambda r: sum(x["size"] for x in r) / len(r), "int"),
        ("Largest transfer (bytes)", "1,494,900", lambda r: max(x["size"] for x in r), "int"),
    ]
    paper2 = {
        "origin": ("2,252", "45.0 %", "43.6 %", "20,957,250", "9,306"),
        "parent": ("758", "15.2 %", "14.2 %", "6,821,625", "9,000"),
        "child": ("1,990", "39.8 %", "42.3 %", "20,343,081", "10,223"),
    }
    paper4 = {
        "origin": ("2,187", "43.74 %", "44.37 %", "21,353,484", "9,764"),
        "parent": ("723", "14.5 %", "42.2 %", "20,291,324", "28,065"),
        "child": ("2,090", "41.8 %", "13.5 %", "6,477,140", "3,099"),
    }

    def per_source(exp, pair, paper):
        for src in SOURCES:
            p = paper[src]
            n = lambda r, s=src: len(of(r, s))
            b = lambda r, s=src: sum(x["size"] for x in of(r, s))
            row(exp, f"{NAME[src]} transfers", p[0], n, "int", pair, same=True)
            row(exp, f"{NAME[src]} hit ratio", p[1], lambda r, s=src: len(of(r, s)) / len(r), "pct", pair, same=True)
            row(exp, f"{NAME[src]} byte hit ratio", p[2], lambda r, s=src: b(r) / sum(x["size"] for x in r), "pct", pair, same=True)
            row(exp, f"{NAME[src]} bytes served", p[3], b, "int", pair, same=True)
            row(exp, f"{NAME[src]} mean transfer (bytes)", p[4], lambda r, s=src: b(r) / max(1, n(r)), "int", pair, same=True)

    for what, paper, fn, kind in t2:
        row("Table 2 workload", what, paper, fn, kind, base, same=True)
    per_source("Table 2 workload", base, paper2)

    # Fig. 2 text: three lines and their throughputs; concurrency at light load.
    for src, paper in (("origin", "about 1"), ("parent", "about 6"), ("child", "about 8")):
        row("Fig. 2 baseline", f"{NAME[src]} line, Mb/s (slope, 20+ packets)", paper,
            lambda r, s=src: throughput_mbps(r, s), "mbps", base)
    row("Fig. 2 baseline", "mean latency (s)", "n/p", mean_latency, "s", base)
    row("Fig. 2 baseline", "most TCP connections at once", "up to 8", max_concurrent, "int", base)

    # Fig. 3 and 4 (the paper prints no numbers beyond the load; means for reference).
    for name, label in (("fig3-c1-100mb", "C1 = 100 Mb/s"),
                        ("fig3-c1-100mb-c2-100mb", "C1 = C2 = 100 Mb/s"),
                        ("fig3-c1-1000mb-c2-100mb", "C1 = 1 Gb/s, C2 = 100 Mb/s"),
                        ("fig4-d2-10ms", "d2 = 10 ms"), ("fig4-d3-60ms", "d3 = 60 ms"),
                        ("fig4-d2-10ms-d3-60ms", "d2 = 10, d3 = 60 ms")):
        pair = panel(name)
        fig = "Fig. 3" if name.startswith("fig3") else "Fig. 4"
        for src in ("child", "parent", "origin"):
            row(f"{fig} {label}", f"{NAME[src]} mean latency (s)", "n/p",
                lambda r, s=src: mean_latency(r, s), "s", pair)

    # Fig. 5: offered load, slow transfers, concurrency.
    for rate, name, load_paper in ((10, "fig2-baseline", "0.8"), (20, "fig5-rate-20", "1.5"),
                                   (40, "fig5-rate-40", "3.0"), (80, "fig5-rate-80", "6.0")):
        pair = panel(name)
        row(f"Fig. 5 λ = {rate}", "offered load on L1 (Mb/s)", load_paper, offered_mbps, "mbps", pair, same=True)
        row(f"Fig. 5 λ = {rate}", "mean latency (s)", "n/p", mean_latency, "s", pair)
    p40, p80 = panel("fig5-rate-40"), panel("fig5-rate-80")
    row("Fig. 5(b) λ = 40", "transfers over 1 s", "4", lambda r: sum(x["latency"] > 1 for x in r), "int", p40)
    small = lambda r: [x for x in r if x["size"] <= 19 * 512]
    row("Fig. 5(b) λ = 40", "... of them under 20 packets", "n/p (a 3-packet one)", lambda r: sum(x["latency"] > 1 for x in small(r)), "int", p40)
    row("Fig. 5(b) λ = 40", "slowest transfer (s)", "6.005", lambda r: max(x["latency"] for x in r), "s", p40)
    row("Fig. 5(b) λ = 40", "slowest transfer under 20 packets (s)", "6.005", lambda r: max(x["latency"] for x in small(r)), "s", p40)
    row("Fig. 5(c) λ = 80", "transfers over 1 s", "58", lambda r: sum(x["latency"] > 1 for x in r), "int", p80)
    row("Fig. 5(c) λ = 80", "... of them under 20 packets", "n/p", lambda r: sum(x["latency"] > 1 for x in small(r)), "int", p80)
    row("Fig. 5(c) λ = 80", "transfers of 6 s or more", "27", lambda r: sum(x["latency"] >= 6 for x in r), "int", p80)
    row("Fig. 5(c) λ = 80", "most TCP connections at once", "up to 43", max_concurrent, "int", p80)

    # Table 3.
    t3 = (("Good 40/15", "fig5-rate-40", "0.156", ("2,252", "0.306"), ("758", "0.058"), ("1,990", "0.025")),
          ("Average 30/10", "fig6-hr-30-10", "0.191", ("2,973", "0.302"), ("514", "0.058"), ("1,513", "0.018")),
          ("Poor 20/7", "fig6-hr-20-7", "0.229", ("3,642", "0.303"), ("354", "0.055"), ("1,004", "0.022")))
    for label, name, overall, *bysrc in t3:
        pair = panel(name)
        row(f"Table 3 {label}", "mean latency (s)", overall, mean_latency, "s", pair)
        for src, (n, lat) in zip(SOURCES, bysrc):
            row(f"Table 3 {label}", f"{NAME[src]} transfers", n, lambda r, s=src: len(of(r, s)), "int", pair, same=True)
            row(f"Table 3 {label}", f"{NAME[src]} mean latency (s)", lat, lambda r, s=src: mean_latency(r, s), "s", pair)

    # Table 4: the threshold workload.
    per_source("Table 4 threshold workload", panel("fig7-threshold-c1-10mb"), paper4)

    # Table 5, and the 80 req/s figures quoted in its text.
    t5 = (("default, C1 = 10", "fig5-rate-40", "0.156", "0.306", "0.058", "0.025"),
          ("threshold, C1 = 10", "fig7-threshold-c1-10mb", "0.150", "0.303", "0.096", "0.009"),
          ("default, C1 = 100", "fig7-default-c1-100mb", "0.144", "0.295", "0.052", "0.009"),
          ("threshold, C1 = 100", "fig7-threshold-c1-100mb", "0.148", "0.301", "0.092", "0.006"))
    for label, name, overall, *lat in t5:
        pair = panel(name)
        row(f"Table 5 {label}", "mean latency (s)", overall, mean_latency, "s", pair)
        for src, l in zip(SOURCES, lat):
            row(f"Table 5 {label}", f"{NAME[src]} mean latency (s)", l, lambda r, s=src: mean_latency(r, s), "s", pair)
    for label, name, paper in (("default, C1 = 10", "t5-rate-80-default-c1-10mb", "0.214"),
                               ("threshold, C1 = 10", "t5-rate-80-threshold-c1-10mb", "0.163"),
                               ("default, C1 = 100", "t5-rate-80-default-c1-100mb", "0.145"),
                               ("threshold, C1 = 100", "t5-rate-80-threshold-c1-100mb", "0.160")):
        row(f"Table 5 text, λ = 80, {label}", "mean latency (s)", paper, mean_latency, "s", panel(name))
    table = "\n".join(out)
    print(table)
    if report:
        splice(report, table)


if __name__ == "__main__":
    main()
