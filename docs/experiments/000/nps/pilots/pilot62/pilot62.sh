#!/usr/bin/env bash
# Pilot 62: a server ten times slower (250 µs of CPU a request instead of 25), so that 5 % of a
# document is several times the machine's own wake-up noise (pilot 64); one round.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
REPS=1 WARM=10s RUN=10s BURSTY=0 CPU_COST_US=250 LEVELS="100 200 300" THRESHOLDS="knee:idle" OUT=${OUT:-/tmp/p62} ./experiments/000/nps.sh
