#!/usr/bin/env bash
# Paper 004 (Riptide) on this machine, one command: the simulator's 1,100-node transit-stub run
# (Fig. 22 and a flash crowd at scale) and the live experiments with real `slipstream node`
# processes behind Toxiproxy (Table 1, Figs. 16-19, 23-24, memory and lookups per node).
#
#   ./experiments/004/riptide.sh                 # everything, about 10 minutes
#   ./experiments/004/riptide.sh --parts fig16   # one part (riptide.py --help lists them)
#
# Writes CSVs, SVG charts and summary.md into OUT (docs/experiments/004).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/experiments/004}
cargo build --release --locked -p slipstream >&2
./scripts/install-toxiproxy >&2
B=target/release/slipstream
mkdir -p "$OUT/sim"
"$B" sim riptide --out "$OUT/sim" | tee "$OUT/sim/summary.txt"
python3 experiments/004/riptide.py --out "$OUT" "$@"

lines() { [ -f "$1" ] && "$B" experiment lines --csv "$@" || true; }
lines "$OUT/fig16.csv" --x latency_ms --y fraction --series system --out "$OUT/fig16.svg" \
  --title "Fig. 16: hit latency (CDF), central proxy against Riptide" --x-label "ms" --y-label "fraction of requests"
lines "$OUT/fig17.csv" --x t_s --y hints --series manager --out "$OUT/fig17.svg" \
  --title "Fig. 17: hints each cache manager takes as managers join" --x-label "s" --y-label "hints per interval"
lines "$OUT/fig18.csv" --x t_s --y served --series node --out "$OUT/fig18.svg" \
  --title "Fig. 18: a flash crowd, requests served per node" --x-label "s" --y-label "requests per interval"
lines "$OUT/fig23.csv" --x latency_ms --y fraction --series series --out "$OUT/fig23.svg" \
  --title "Fig. 23: request latency behind a 10 Mbit/s origin link (CDF)" --x-label "ms" --y-label "fraction of requests"
lines "$OUT/fig24.csv" --x clients --y requests_per_s --series system --out "$OUT/fig24.svg" \
  --title "Fig. 24: throughput behind a 10 Mbit/s origin link" --x-label "clients" --y-label "requests / s"
if [ -f "$OUT/fig19.csv" ]; then
  "$B" experiment bars --out "$OUT/fig19.svg" --title "Fig. 19: requests served per node (flash crowd)" \
    --y-label "requests" $(tail -n +2 "$OUT/fig19.csv" | tr ',' '=')
fi
python3 experiments/004/riptide_table.py "$OUT" | tee "$OUT/summary.md"
