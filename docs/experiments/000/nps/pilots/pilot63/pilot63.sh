#!/usr/bin/env bash
# Pilot 63: pages that say "wait" (prefetch.page_wait, d99e1c1) where the 0.5 Monitor's budget
# is (almost) empty: its clients then wait without asking, against the same Monitor with the
# page's wait turned off (every client asks once and is told to wait, as in pilot 59), each
# beside No-Prefetching, the two kinds of invocation interleaved.
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
out=${OUT:-/tmp/p63}
export REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="800 1200" THRESHOLDS="knee@0.5:idle" BASE_POLICIES=noprefetch
for round in ${ROUNDS:-1 2}; do
  for wait in on off; do
    mkdir -p "$out/$wait-$round"
    set=""; [ "$wait" = off ] && set="prefetch.page_wait=false"
    MONITOR_SET="$set" OUT="$out/$wait-$round" ./experiments/000/nps.sh > "$out/$wait-$round/log.txt" 2>&1
  done
done
