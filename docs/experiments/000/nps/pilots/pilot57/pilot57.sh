#!/usr/bin/env bash
# Pilot 57: every policy with and without ballast on the load generator's core, interleaved by invocation.
set -euo pipefail
cd /work/main
out=${OUT:-/tmp/p57}
export REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="200 400 800" THRESHOLDS="knee:idle knee@0.5:idle"
for round in ${ROUNDS:-1}; do
  for b in 1 0; do
    mkdir -p "$out/b$b-$round"
    CLIENT_BALLAST=$b OUT="$out/b$b-$round" ./experiments/000/nps.sh > "$out/b$b-$round/log.txt" 2>&1
  done
done
