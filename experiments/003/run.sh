#!/usr/bin/env bash
# Reproduces docs/experiments/003-network-impacts.md. With Debian's ns2 installed it ends by
# running ns2-panels.sh (the ns2 column of the big table) and ns2-compare.sh (Tables 3/5 in both
# eras, speed, congestion); NS2=0 skips them. Without ns2, the report's ns2 numbers are kept.
#   - every experiment of the paper in its ns-2 setting (figures-2.26.toml), with charts;
#   - the same panels with Debian's ns-2.35 defaults (figures.toml);
#   - the hit-ratio and size-threshold designs in both eras, and with real LRU caches;
#   - the whole Table 1 factorial, timed from scratch, and its main-effect charts;
#   - docs/experiments/003/paper-table.md (paper vs slipstream, plus ns2 if ns2-panels.sh ran).
# About 30 s on 2 cores after the build, plus about 3 minutes for the ns2 part.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p slipstream
B=target/release/slipstream
OUT=${OUT:-out/003}
DOCS=docs/experiments/003
mkdir -p "$DOCS"
# Fresh runs: a design resumes finished runs, which would keep results of an older build.
for d in figures-2.26 figures hitratio-2.26 threshold threshold-2.26 caches-threshold table1; do
  rm -rf "${OUT:?}/$d"
done
$B sim design experiments/003/figures-2.26.toml --out "$OUT/figures-2.26" --plot
$B sim design experiments/003/figures.toml --out "$OUT/figures" --plot
$B sim design experiments/003/hitratio-2.26.toml --out "$OUT/hitratio-2.26"
$B sim design experiments/003/threshold.toml --out "$OUT/threshold"
$B sim design experiments/003/threshold-2.26.toml --out "$OUT/threshold-2.26"
$B sim design experiments/003/caches-threshold.toml --out "$OUT/caches-threshold" --plot
start=$(date +%s.%N)
$B sim design experiments/003/table1.toml --out "$OUT/table1"
echo "Table 1 factorial wall time: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee "$DOCS/table1-walltime.txt"
# The request leg beyond the paper: the baseline in the paper's setting with a 300-byte request.
{
  echo "experiments/003/paper.toml, as is and with tcp.request_bytes = 300 (mean latency, s)"
  $B sim experiments/003/paper.toml 2>/dev/null
  sed 's/^syn = true$/syn = true\nrequest_bytes = 300/' experiments/003/paper.toml > "$OUT/paper-request.toml"
  echo "-- request_bytes = 300"
  $B sim "$OUT/paper-request.toml" 2>/dev/null
} | tee "$DOCS/request.txt"
# Charts after the timing (the runs are resumed, only drawn).
$B sim design experiments/003/table1.toml --out "$OUT/table1" --plot >/dev/null
cp "$OUT"/table1/main-effect-*.svg "$DOCS/"
for run in "$OUT"/figures-2.26/runs/*/; do cp "$run/latency.svg" "$DOCS/$(basename "$run").svg"; done
for d in figures-2.26 figures hitratio-2.26 threshold threshold-2.26 caches-threshold table1; do
  cp "$OUT/$d/results.csv" "$DOCS/$d.csv"
done
# The paper-vs-slipstream table; with ns2, ns2-panels.sh adds ns2's column (on the runs above)
# and splices the table into the report. Without ns2 the report keeps its last table.
python3 experiments/003/paper-table.py "$OUT/figures-2.26/runs" > "$DOCS/paper-table.md"
echo "wrote $DOCS"
if [ "${NS2:-1}" != 0 ] && command -v ns >/dev/null; then
  FRESH=0 experiments/003/ns2-panels.sh
  experiments/003/ns2-compare.sh
fi
