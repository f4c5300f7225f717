#!/usr/bin/env bash
# Pilot 68: how far a CPU target can go at 250 µs a request. In the slow run (000/slow) the
# Monitors at a CPU target of 0.9 took 55-61 % of No-Avoidance pfrate 1's 12 MB/s at 150
# documents/s: demand alone loads the server's core to about 0.55, pfrate 1 to about 0.97 for
# +4 %, and a growth step aims at 0.9 of the target (LOAD_AIM), so 0.9 stops near 0.81. This
# runs the knee Monitor at a CPU target of 1.0 (aim 0.9) on the idle listener against
# No-Prefetching at the three loads where the slow run's Monitors took little or nothing,
# four repetitions.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=4 WARM=10s RUN=10s BURSTY=0 LEVELS="150 200 250" BASE_POLICIES="noprefetch" \
  THRESHOLDS="knee@1.0:idle" OUT=${OUT:-/tmp/p68} ./experiments/000/nps.sh
