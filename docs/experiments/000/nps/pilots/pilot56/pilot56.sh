#!/usr/bin/env bash
# Pilot 56: No-Prefetching alone, and with a busy loop at SCHED_IDLE on the load generator's
# core only (core 1), interleaved by invocation. With pilot 48 (the server's core only) and
# pilot 49 (both cores): which side's idle work costs demand on this machine.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p56}
export REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="400 800" THRESHOLDS= BASE_POLICIES=noprefetch
for round in 1 2; do
  mkdir -p "$out/none-$round" "$out/hog1-$round"
  OUT="$out/none-$round" ./experiments/000/nps.sh > "$out/none-$round/log.txt" 2>&1
  chrt -i 0 taskset -c 1 bash -c 'while :; do :; done' & h1=$!
  OUT="$out/hog1-$round" ./experiments/000/nps.sh > "$out/hog1-$round/log.txt" 2>&1 || true
  kill "$h1"
done
