#!/usr/bin/env bash
# Pilot 75: pilot 73 again after the budget fix (a slot counted at a small budget comes nearer when it grows) and with quiet periods that do not shed; the cost brake (medians) at 250 µs a request: the knee Monitor at a CPU target of
# 1.0 with and without it, beside No-Prefetching; three repetitions.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=3 WARM=10s RUN=10s BURSTY=0 LEVELS="50 150 250" BASE_POLICIES="noprefetch" \
  THRESHOLDS="knee@1.0:idle knee@1.0:idle+cost5" OUT=${OUT:-/tmp/p75} ./experiments/000/nps.sh
