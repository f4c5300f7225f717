#!/usr/bin/env bash
# Pilot 60: pilot 58's sharpest-looking difference, at 400 documents/s alone: the knee Monitor
# beside No-Prefetching with the generator's idle prefetching on the server's core (0) or
# beside its demand clients (1), the placements interleaved, ROUNDS rounds of one repetition.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p60}
export REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS=400 THRESHOLDS="knee:idle" BASE_POLICIES=noprefetch
for round in ${ROUNDS:-1 2 3 4 5 6}; do
  for c in 0 1; do
    mkdir -p "$out/cpu$c-$round"
    AGENT_PREFETCH_CPU=$c OUT="$out/cpu$c-$round" ./experiments/000/nps.sh > "$out/cpu$c-$round/log.txt" 2>&1
  done
done
