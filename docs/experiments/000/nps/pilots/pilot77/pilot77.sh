#!/usr/bin/env bash
# Pilot 77: what knee the knee Monitor finds at 250 µs a request when its load waits for the
# start-up curve (CALIBRATE_IDLE=1, nps.sh's default since a6973c3). Every knee run before it
# calibrated under demand and took its 1 ms floor. One repetition at 50 and 150 documents/s
# against No-Prefetching: the thresholds and curves are in the status files; the response
# times of one repetition decide nothing.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="50 150" BASE_POLICIES="noprefetch" \
  THRESHOLDS="knee@1.0:idle" OUT=${OUT:-/tmp/p77} ./experiments/000/nps.sh
