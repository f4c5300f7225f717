#!/usr/bin/env bash
# Reproduces docs/experiments/003-network-impacts.md's simulations: the figure panels (with
# latency-vs-size charts), the hit-ratio and size-threshold experiments in both ns-2 eras, and
# the whole Table 1 factorial. About 15 s on 2 cores after the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p slipstream
B=target/release/slipstream
OUT=${OUT:-out/003}
DOCS=docs/experiments/003
mkdir -p "$DOCS"
$B sim design experiments/003/figures.toml --out "$OUT/figures" --plot
$B sim design experiments/003/hitratio-2.26.toml --out "$OUT/hitratio-2.26"
$B sim design experiments/003/threshold.toml --out "$OUT/threshold" --plot
$B sim design experiments/003/threshold-2.26.toml --out "$OUT/threshold-2.26" --plot
# Timed from scratch: a finished run would otherwise be resumed, not redone.
rm -rf "$OUT/table1"
start=$(date +%s.%N)
$B sim design experiments/003/table1.toml --out "$OUT/table1"
echo "Table 1 factorial wall time: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee "$DOCS/table1-walltime.txt"
for run in "$OUT"/figures/runs/*/; do cp "$run/latency.svg" "$DOCS/$(basename "$run").svg"; done
for run in "$OUT"/threshold-2.26/runs/*/; do
  name=$(basename "$run")
  policy=default; case "$name" in *8KB*) policy=threshold;; esac
  c1=10mb; case "$name" in *capacity=100Mb*) c1=100mb;; esac
  cp "$run/latency.svg" "$DOCS/fig7-$policy-c1-$c1.svg"
done
for d in figures hitratio-2.26 threshold threshold-2.26 table1; do cp "$OUT/$d/results.csv" "$DOCS/$d.csv"; done
echo "wrote $DOCS"
