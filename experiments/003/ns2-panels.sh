#!/usr/bin/env bash
# The ns2 column of docs/experiments/003/paper-table.md: every panel of
# experiments/003/figures-2.26.toml (every experiment of paper 003 in the paper's ns-2
# setting) is run by slipstream, exported with --export-ns2 and run by Debian's ns2 on the same
# transfers, then experiments/003/paper-table.py puts the paper, slipstream and ns2 side by side.
# Needs: apt-get install ns2. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v ns >/dev/null || { echo "needs Debian's ns2: apt-get install ns2" >&2; exit 1; }
B=target/release/slipstream
[ -x "$B" ] || cargo build --release --locked -p slipstream
OUT=${OUT:-out/003}
RUNS="$OUT/figures-2.26"
NS="$OUT/ns2/figures-2.26"
# FRESH=0 (as run.sh calls it) reuses the runs run.sh has just made.
rm -rf "$NS"
mkdir -p "$NS" docs/experiments/003
if [ "${FRESH:-1}" != 0 ] || [ ! -f "$RUNS/results.csv" ]; then
  rm -rf "$RUNS"
  "$B" sim design experiments/003/figures-2.26.toml --out "$RUNS" --plot
fi
for run in "$RUNS"/runs/*/; do
  name=$(basename "$run")
  "$B" sim "$run/scenario.toml" --export-ns2 "$NS/$name.tcl" 2>/dev/null
done
# Two ns processes at a time, one per core.
ls "$NS"/*.tcl | xargs -P 2 -I{} sh -c 'ns "$1" out="${1%.tcl}.csv" > "${1%.tcl}.log"' _ {}
for run in "$RUNS"/runs/*/; do
  name=$(basename "$run")
  printf '%-32s ' "$name"; "$B" sim compare "$NS/$name.csv" "$run/transfers.csv" | sed -n 3p
done | tee docs/experiments/003/ns2-panels.txt
python3 experiments/003/paper-table.py "$RUNS/runs" "$NS" \
  --splice docs/experiments/003-network-impacts.md > docs/experiments/003/paper-table.md
echo "wrote docs/experiments/003/paper-table.md"
