#!/usr/bin/env bash
# Pilot 49: No-Prefetching alone, and with a busy loop at SCHED_IDLE on each of the two cores
# (the server's and the load generator's), interleaved by invocation. What idle-priority work
# on both cores costs demand on this machine, with no prefetching at all.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p49}
export REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="400 800" THRESHOLDS= BASE_POLICIES=noprefetch
for round in 1 2; do
  mkdir -p "$out/none-$round" "$out/hogs-$round"
  OUT="$out/none-$round" ./experiments/000/nps.sh > "$out/none-$round/log.txt" 2>&1
  chrt -i 0 taskset -c 0 bash -c 'while :; do :; done' & h0=$!
  chrt -i 0 taskset -c 1 bash -c 'while :; do :; done' & h1=$!
  OUT="$out/hogs-$round" ./experiments/000/nps.sh > "$out/hogs-$round/log.txt" 2>&1 || true
  kill "$h0" "$h1"
done
