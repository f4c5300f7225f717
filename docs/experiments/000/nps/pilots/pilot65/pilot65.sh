#!/usr/bin/env bash
# Pilot 65: the server ten times slower (250 µs of CPU a request), at five loads from 0.14 to
# 0.74 of its core, one round each: (a) the three Monitors of the 9fe872a run; (b) the
# paper's Monitor (probes alone, prefetch.cpu_target = 0) at the knee and at 3 ms, and the
# knee Monitor at CPU targets 0.7 and 0.9. Pilot 62 was one round at 100-300 documents/s.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="50 100 150 200 250" \
  THRESHOLDS="knee:idle 3:idle knee@0.5:idle" OUT=${OUT:-/tmp/p65} ./experiments/000/nps.sh
CPU_COST_US=250 REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="50 100 150 200" \
  THRESHOLDS="knee:idle knee@0:idle knee@0.9:idle 3@0:idle" OUT=${OUT_B:-/tmp/p65b} ./experiments/000/nps.sh
