#!/usr/bin/env bash
# Pilot 70: the cost brake (prefetch.cost_target, "+cost5": 5 %) at 250 µs a request. The 3 ms
# Monitor with no CPU target (probes alone, "3@0") against the same with the brake, and the knee
# Monitor at a CPU target of 1.0 with the brake, beside No-Prefetching; two repetitions.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="50 150 250" BASE_POLICIES="noprefetch" \
  THRESHOLDS="3@0:idle 3@0:idle+cost5 knee@1.0:idle+cost5" OUT=${OUT:-/tmp/p70} ./experiments/000/nps.sh
