#!/usr/bin/env python3
"""Pilot 65: what each Monitor's probes found. For each kept status (the monitor's last 20-odd
seconds of samples): the threshold, the samples, how many probes came back over it, and what the
samples did to the budget (`increased`, `halved`, `cut` for load, ...).
Usage: probes.py status-a/*.json status-b/*.json"""
import collections
import json
import os
import sys

print("| status | threshold | samples | over it | changes |")
print("|---|---|---|---|---|")
for path in sys.argv[1:]:
    s = json.load(open(path))
    samples = s["samples"]
    th = s["threshold_us"]
    over = sum(1 for x in samples if x.get("rt_us") is not None and x["rt_us"] > th)
    changes = collections.Counter(x["change"] for x in samples)
    name = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
    print(f"| {name} | {th} µs | {len(samples)} | {over} | "
          + ", ".join(f"{k} {v}" for k, v in changes.most_common()) + " |")
