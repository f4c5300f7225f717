#!/usr/bin/env bash
# Pilot 67: the server ten times slower (250 µs of CPU a request), where No-Prefetching's own
# runs vary by 2-3 % (pilot 66) instead of 11-17 %: four repetitions at five loads (0.14 to
# 0.74 of the server's core) of No-Prefetching, No-Avoidance pfrate 1 and 5, the knee Monitor
# at the node's default CPU target (0.7), and the knee and 3 ms Monitors at a CPU target of
# 0.9, all on the idle listener.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
CPU_COST_US=250 REPS=4 WARM=10s RUN=10s BURSTY=0 LEVELS="50 100 150 200 250" \
  THRESHOLDS="knee:idle knee@0.9:idle 3@0.9:idle" OUT=${OUT:-/tmp/p67} ./experiments/000/nps.sh
# The run stopped at its 83rd run with no message; the reruns that did not fail:
#   CPU_COST_US=250 REPS=3 WARM=10s RUN=10s BURSTY=0 LEVELS=200 BASE_POLICIES=" " THRESHOLDS="knee@0.9:idle" OUT=/tmp/p67r ./experiments/000/nps.sh
#   CPU_COST_US=250 REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="200 250" BASE_POLICIES="noavoid-5" THRESHOLDS="knee:idle knee@0.9:idle" OUT=/tmp/p67s ./experiments/000/nps.sh
