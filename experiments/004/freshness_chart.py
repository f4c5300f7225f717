#!/usr/bin/env python3
"""Draws the origin's full bodies (200s) per second, before vs after the coop freshness change,
from the JSON files experiments/004/freshness.py writes; a hand-written SVG.

    python3 experiments/004/freshness_chart.py \
        docs/experiments/data/004-freshness/{before-1,before-2,after-1,after-2}.json \
        --out docs/experiments/004-freshness.svg

A file's label starting with "before" is drawn in red, "after" in blue; a second run of each
dashed. The 304s the origin answered are drawn as thin dotted lines. Grey lines mark the
warm-up's end and each expiry period.
"""

import argparse
import json
import os

W, H = 800, 500
L, R, T, B = 70, 170, 50, 60  # margins


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_max(v):
    for step in (1, 2, 5):
        for e in range(0, 6):
            m = step * 10**e
            if m >= v:
                return m
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title")
    a = ap.parse_args()
    runs = [json.load(open(f)) for f in a.files]
    s0 = runs[0]["settings"]
    tmax = s0["warm"] + s0["periods"] * s0["max_age"]
    title = a.title or (f"Origin full bodies (200s) per second, max-age={s0['max_age']} s, "
                        f"{s0['clients']} clients")
    ymax_raw = max(max(max(r["origin_200"], r["origin_304"]) for r in run["series"]
                       if r["t"] < tmax) for run in runs)
    ymax = nice_max(max(ymax_raw, 1))
    pw, ph = W - L - R, H - T - B

    def x(t):
        return L + pw * t / tmax

    def y(v):
        return T + ph * (1 - v / ymax)

    out = [f'<svg width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'xmlns="http://www.w3.org/2000/svg" font-family="sans-serif">',
           f'<rect x="0" y="0" width="{W}" height="{H}" fill="#FFFFFF"/>',
           f'<text x="{L + pw / 2}" y="28" text-anchor="middle" font-size="16">{esc(title)}</text>']
    # grid and axes
    for i in range(6):
        v = ymax * i / 5
        out.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{L + pw}" y2="{y(v):.1f}" '
                   'stroke="#000" stroke-opacity="0.1"/>')
        out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
                   f'{v:g}</text>')
    step = 5
    for t in range(0, int(tmax) + 1, step):
        out.append(f'<text x="{x(t):.1f}" y="{T + ph + 16}" text-anchor="middle" '
                   f'font-size="11">{t}</text>')
    marks = [s0["warm"] + i * s0["max_age"] for i in range(s0["periods"] + 1)]
    for m in marks[:-1]:
        out.append(f'<line x1="{x(m):.1f}" y1="{T}" x2="{x(m):.1f}" y2="{T + ph}" '
                   'stroke="#888" stroke-dasharray="2,3"/>')
    names = ["warm-up"] + [f"period {i + 1}" for i in range(s0["periods"])]
    for (lo, hi), n in zip(zip([0] + marks[:-1], marks), names):
        out.append(f'<text x="{(x(lo) + x(hi)) / 2:.1f}" y="{T + 14}" text-anchor="middle" '
                   f'font-size="11" fill="#555">{n}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="#000"/>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 18}" text-anchor="middle" font-size="12">'
               'seconds since the clients started</text>')
    out.append(f'<text x="18" y="{T + ph / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 18 {T + ph / 2})">origin responses per second</text>')
    # series
    seen = {}
    legend = []
    for run in runs:
        label = run["label"]
        kind = "before" if label.startswith("before") else "after"
        color = "#D62728" if kind == "before" else "#1F77B4"
        n = seen[kind] = seen.get(kind, 0) + 1
        dash = "" if n == 1 else ' stroke-dasharray="6,3"'
        pts = [r for r in run["series"] if r["t"] < tmax]
        path = " ".join(f"{x(r['t'] + 0.5):.1f},{y(r['origin_200']):.1f}" for r in pts)
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8"{dash} '
                   f'points="{path}"/>')
        legend.append((f"{label}: 200s", color, dash, 1.8))
        if any(r["origin_304"] for r in pts):
            path = " ".join(f"{x(r['t'] + 0.5):.1f},{y(r['origin_304']):.1f}" for r in pts)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1" '
                       f'stroke-dasharray="1,2" points="{path}"/>')
            legend.append((f"{label}: 304s", color, ' stroke-dasharray="1,2"', 1))
    for i, (text, color, dash, w) in enumerate(legend):
        ly = T + 10 + i * 18
        out.append(f'<line x1="{L + pw + 10}" y1="{ly}" x2="{L + pw + 34}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="{w}"{dash}/>')
        out.append(f'<text x="{L + pw + 40}" y="{ly + 4}" font-size="11">{esc(text)}</text>')
    out.append("</svg>")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
