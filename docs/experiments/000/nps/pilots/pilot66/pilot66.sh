#!/usr/bin/env bash
# Pilot 66: the noise floor. No-Prefetching against itself (an A/A test): six repetitions of
# the published run's length (15 s warm-up, 15 s measured) at two loads, at the published
# server speed (25 µs of CPU a request; 200 and 800 documents/s) and ten times slower
# (250 µs; 50 and 150 documents/s). Two runs of one policy differ only by the machine.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
BASE_POLICIES=noprefetch THRESHOLDS= REPS=6 WARM=15s RUN=15s BURSTY=0 CPU_COST_US=25 LEVELS="200 800" OUT=${OUT:-/tmp/p66-25} ./experiments/000/nps.sh
BASE_POLICIES=noprefetch THRESHOLDS= REPS=6 WARM=15s RUN=15s BURSTY=0 CPU_COST_US=250 LEVELS="50 150" OUT=${OUT_B:-/tmp/p66-250} ./experiments/000/nps.sh
