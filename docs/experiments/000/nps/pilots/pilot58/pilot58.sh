#!/usr/bin/env bash
# Pilot 58: the generator's idle prefetching thread on the server's core (0) or beside its
# demand clients (1, as every run up to 0be9bcc), interleaved by invocation.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p58}
export REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="200 400 800" THRESHOLDS="knee:idle knee@0.5:idle"
for round in ${ROUNDS:-1 2}; do
  for c in 0 1; do
    mkdir -p "$out/cpu$c-$round"
    AGENT_PREFETCH_CPU=$c OUT="$out/cpu$c-$round" ./experiments/000/nps.sh > "$out/cpu$c-$round/log.txt" 2>&1
  done
done
