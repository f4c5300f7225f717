#!/usr/bin/env bash
# As run: the THRESHOLDS="" below fell back to "knee 3" in nps.sh before 2544a51, so both
# invocations also ran the one-connection Monitors (knee and 3 ms) on the demand port.
# Pilot 48: No-Prefetching with and without a SCHED_IDLE spinner on the server's core.
cd /work/main
export SHARE=100 SERVE_SET="serve.cpu_cost_us=25" AGENT_PRIORITY=idle REPS=2 WARM=10s RUN=10s BURSTY=0 LEVELS="400 800" THRESHOLDS="" BASE_POLICIES="noprefetch"
OUT=/tmp/p48a ./experiments/000/nps.sh > /tmp/p48a/log.txt 2>&1
chrt -i 0 taskset -c 0 bash -c 'while :; do :; done' &
hog=$!
OUT=/tmp/p48b ./experiments/000/nps.sh > /tmp/p48b/log.txt 2>&1
kill $hog
