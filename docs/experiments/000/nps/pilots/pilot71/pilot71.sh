#!/usr/bin/env bash
# Pilot 71: the cost brake at the published server speed (25 µs a request), where the knee
# Monitor at the node's default CPU target (0.7) cost demand +19 % to +32 % at 200-400
# documents/s in the 9fe872a run. The knee Monitor with and without the brake ("+cost5"),
# beside No-Prefetching; two repetitions.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=25 REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="200 400" BASE_POLICIES="noprefetch" \
  THRESHOLDS="knee:idle knee:idle+cost5" OUT=${OUT:-/tmp/p71} ./experiments/000/nps.sh
