#!/usr/bin/env bash
# Paper 000 §7.1, "Loaded network" (Fig. 13(c)), in the packet simulator: two clients share a
# 1 Mb/s cable (10 ms round-trip) with ~92 kb/s of web demand each, and prefetch 70 files
# after every 10-file document, in hint lists of 10 files (one connection per list, a
# client's lists one after another). Three cases as in the paper:
#   No-Prefetching  experiments/000/network.toml
#   No-Avoidance    network.toml      --prefetch-files 70   (prefetch over Reno)
#   NPS             network-nps.toml  --prefetch-files 70   (prefetch over TCP Nice)
# and two variations: both prefetching cases again with hint lists of 70 files (longer
# flows: No-Avoidance/70, NPS/70), and NPS with Nice's delay threshold t at 0.02 and 0.3
# instead of 0.1. Each case runs with SEEDS (the scenario's seed: demand arrivals and sizes,
# and the prefetched files' sizes).
#
#   ./experiments/000/network.sh      # writes docs/experiments/000/network-sim.json and .svg
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/experiments/000}
SEEDS=${SEEDS:-"1 2 3"}
PREFETCH_FILES=70

cargo build --release --locked -p slipstream >&2
B=$PWD/target/release/slipstream
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# case name, scenario, extra flags
cases=(
  "No-Prefetching|network.toml|"
  "No-Avoidance|network.toml|--prefetch-files $PREFETCH_FILES --hint-files 10"
  "NPS|network-nps.toml|--prefetch-files $PREFETCH_FILES --hint-files 10"
  "No-Avoidance/70|network.toml|--prefetch-files $PREFETCH_FILES --hint-files 70"
  "NPS/70|network-nps.toml|--prefetch-files $PREFETCH_FILES --hint-files 70"
  "NPS t=0.02|network-nps-t0.02.toml|--prefetch-files $PREFETCH_FILES --hint-files 10"
  "NPS t=0.3|network-nps-t0.3.toml|--prefetch-files $PREFETCH_FILES --hint-files 10"
)

mkdir -p "$work/runs"
: > "$work/runs.tsv"
for seed in $SEEDS; do
  for scenario in network.toml network-nps.toml; do
    sed "s/^seed = 1$/seed = $seed/" "experiments/000/$scenario" > "$work/$seed-$scenario"
    grep -q "^seed = $seed$" "$work/$seed-$scenario"
  done
  for t in 0.02 0.3; do
    sed "s/^threshold = 0.1 /threshold = $t /" "$work/$seed-network-nps.toml" \
      > "$work/$seed-network-nps-t$t.toml"
    grep -q "^threshold = $t " "$work/$seed-network-nps-t$t.toml"
  done
  i=0
  for c in "${cases[@]}"; do
    IFS='|' read -r name scenario flags <<< "$c"
    i=$((i + 1))
    dir="$work/runs/$seed-$i"
    echo "seed $seed: $name" >&2
    # shellcheck disable=SC2086  # flags are words
    "$B" sim "$work/$seed-$scenario" $flags --out "$dir" > "$dir.txt" 2> "$dir.err"
    printf '%s\t%s\t%s\t%s\n' "$seed" "$name" "$flags" "$dir" >> "$work/runs.tsv"
  done
done

mkdir -p "$OUT"
python3 - "$work/runs.tsv" "$OUT/network-sim.json" "$SEEDS" <<'PY'
import csv, json, statistics, sys

runs_tsv, out, seeds = sys.argv[1], sys.argv[2], sys.argv[3]
cases = {}
for line in open(runs_tsv):
    seed, name, flags, d = line.rstrip("\n").split("\t")
    rows = list(csv.DictReader(open(f"{d}/transfers.csv")))
    summary = json.load(open(f"{d}/summary.json"))
    demand = [r for r in rows if r["source"] == "origin"]
    prefetch = [r for r in rows if r["source"] == "parent"]
    # The demand period: from 0 to the last demand request. Bandwidth counts the payload of
    # the transfers completed within it.
    t_end = max(float(r["start_s"]) for r in demand)
    def kbps(rs):
        return sum(int(r["size_bytes"]) for r in rs if float(r["end_s"]) <= t_end) * 8 / t_end / 1e3
    lat = [float(r["latency_s"]) for r in demand]
    cases.setdefault(name, {"case": name, "flags": flags, "runs": []})["runs"].append({
        "seed": int(seed),
        "demand_requests": len(demand),
        "demand_mean_s": statistics.fmean(lat),
        "demand_median_s": statistics.median(lat),
        "demand_kbps": kbps(demand),
        "prefetch_kbps": kbps(prefetch),
        "prefetch_connections_completed": len(prefetch),
        "drops": summary["drops"],
        "period_s": t_end,
    })
base = {r["seed"]: r for r in cases["No-Prefetching"]["runs"]}
for c in cases.values():
    for r in c["runs"]:
        b = base[r["seed"]]
        r["demand_mean_vs_none"] = r["demand_mean_s"] / b["demand_mean_s"]
        r["demand_median_vs_none"] = r["demand_median_s"] / b["demand_median_s"]
    for k in ["demand_mean_s", "demand_median_s", "demand_kbps", "prefetch_kbps",
              "demand_mean_vs_none", "demand_median_vs_none", "drops"]:
        c[k] = statistics.fmean(r[k] for r in c["runs"])
json.dump({
    "experiment": "paper 000 §7.1 Fig. 13(c), loaded network, in slipstream sim",
    "command": "./experiments/000/network.sh",
    "seeds": [int(s) for s in seeds.split()],
    "bottleneck": "1 Mb/s, 4 ms (10 ms round-trip), DropTail 100 packets; ns-2.35 TCP defaults",
    "paper": {"no_avoidance_demand_response_factor": 7, "nps_demand_response_increase_below": 0.30},
    "cases": list(cases.values()),
}, open(out, "w"), indent=2)
print(f"{'case':30} {'mean s':>8} {'x none':>7} {'median s':>9} {'x none':>7} {'demand kb/s':>12} {'prefetch kb/s':>14} {'drops':>7}")
for c in cases.values():
    print(f"{c['case']:30} {c['demand_mean_s']:8.3f} {c['demand_mean_vs_none']:7.2f} {c['demand_median_s']:9.3f} "
          f"{c['demand_median_vs_none']:7.2f} {c['demand_kbps']:12.0f} {c['prefetch_kbps']:14.0f} {c['drops']:7.0f}")
PY

# Charts of the paper's three cases: demand response time, and what prefetching got (means
# over the seeds).
bars() {
  python3 - "$OUT/network-sim.json" "$1" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["case"] in ("No-Prefetching", "No-Avoidance", "NPS"):
        print(f"{c['case']}={c[sys.argv[2]]:.4f}")
PY
}
mapfile -t t < <(bars demand_mean_s)
"$B" experiment bars --out "$OUT/network-sim.svg" \
  --title "Fig. 13(c) in simulation: demand response time on a loaded 1 Mb/s cable" \
  --y-label "mean demand response time (s)" "${t[@]}"
mapfile -t p < <(bars prefetch_kbps)
"$B" experiment bars --out "$OUT/network-sim-prefetch.svg" \
  --title "Fig. 13(c) in simulation: prefetch bandwidth" \
  --y-label "prefetch bandwidth (kb/s)" "${p[@]}"
echo "wrote $OUT/network-sim.json, network-sim.svg, network-sim-prefetch.svg" >&2
