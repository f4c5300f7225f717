#!/usr/bin/env bash
# Pilot 76: pilot 72 again after the budget fix (pilot 75); each cycle's cost from medians (and means, to
# compare their noise): the knee Monitor with and without the cost brake at 25 µs a request,
# beside No-Prefetching; three repetitions.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=25 REPS=3 WARM=10s RUN=10s BURSTY=0 LEVELS="200 400" BASE_POLICIES="noprefetch" \
  THRESHOLDS="knee:idle knee:idle+cost5" OUT=${OUT:-/tmp/p76} ./experiments/000/nps.sh
