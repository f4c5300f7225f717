#!/usr/bin/env bash
# Pilot 59: what the 0.5 Monitor costs where its budget is (almost) empty: its clients asking
# for hints as usual (one request per document, answered with a wait), against the same
# Monitor whose clients never ask (its probes and CPU sampling alone), each beside
# No-Prefetching, the two kinds of invocation interleaved.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p59}
export REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="800 1200" THRESHOLDS="knee@0.5:idle" BASE_POLICIES=noprefetch
for round in ${ROUNDS:-1 2}; do
  for agents in hinted off; do
    mkdir -p "$out/$agents-$round"
    MONITOR_AGENTS=$agents OUT="$out/$agents-$round" ./experiments/000/nps.sh > "$out/$agents-$round/log.txt" 2>&1
  done
done
