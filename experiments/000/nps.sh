#!/usr/bin/env bash
# Paper 000, Figs. 4–6 (server interference): demand response time, demand and prefetch
# bandwidth for No-Prefetching, No-Avoidance (pfrate 1 and 5) and the Monitor at several
# thresholds (the knee found at start-up, and fixed ones), at constant demand rates (Figs. 4–5)
# and under a bursty load (Fig. 6). Every run gets a fresh server; policies are interleaved
# within each rate; every run is recorded in runs.csv and bursty.csv.
#
#   ./experiments/000/nps.sh            # LEVELS, REPS, WARM, RUN, SHARE, THRESHOLDS, BURST_*, FIRST_REP below
#
# The server runs on core 0 with one worker. The paper's 450 MHz server was half as fast as its
# 930 MHz clients; as fast as the load generator on the other core, our server would never be
# loaded. It is made slower by CPU_COST_US of extra CPU work per request (`serve.cpu_cost_us`,
# on the thread that serves it), as a slower processor would take longer over each one. That
# work is preempted like any other, so the prefetch listener's SCHED_IDLE thread still gives
# way to demand. (Up to 7abb81a the server was capped instead, at SHARE % of its core by a
# cgroup quota with a PERIOD_US period: CFS then stops it for the rest of a period once it has
# used its share, whatever the priority of the thread that used it, so prefetching at idle
# priority spent demand's CPU all the same. SHARE below 100 still does that.) The agents
# (`slipstream bench --agents`) run on core 1. Needs root for the cgroup (kept uncapped, for
# its statistics); without it the script says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/experiments/000}
LEVELS=${LEVELS:-"200 400 600 800 1000 1200"}   # " " (a space): none, the bursty runs alone
REPS=${REPS:-1}
WARM=${WARM:-15s}   # the monitor slow-starts from 1 file/s: about 8 s to reach 10,000
RUN=${RUN:-8s}
CPU_COST_US=${CPU_COST_US:-25}     # extra CPU µs per request: a server about half as fast
SHARE=${SHARE:-100}           # a CPU quota, % of core 0 (100: none; the runs up to 7abb81a: 50)
PERIOD_US=${PERIOD_US:-2000}  # the CFS period; a capped server pauses at most (100 - SHARE) % of it
THRESHOLDS=${THRESHOLDS-"knee 3"}   # "knee": found at start-up; N: N ms; "knee@0.5": at cpu_target 0.5
CPU_TARGET=${CPU_TARGET:-}          # the monitor's prefetch.experimental.cpu_target (empty: the node's default)
MONITOR_AGENTS=${MONITOR_AGENTS:-hinted} # "off": the Monitors' clients never ask for hints (the
                                   # monitor's probes and sampling alone; pilot 59)
MONITOR_SET=${MONITOR_SET:-}        # more settings for the Monitor's server, e.g. "prefetch.experimental.hold_ms=10"
SERVE_SET=${SERVE_SET:-}            # more settings for every policy's server, e.g. "serve.revalidate_ms=1000"
LISTENER=${LISTENER:-none}         # the Monitors' prefetches: "none": to the demand port (one
                                   # connection); "normal": to the prefetch listener (000 §2.3.2, two
                                   # connections) on demand's thread; "idle": the listener's thread in
                                   # SCHED_IDLE. A threshold "knee:idle" sets its own.
SPLIT_WARMUP=${SPLIT_WARMUP:-0}    # 1: the warm-up in a bench process of its own (the runs up to
                                   # 4a1bf00); 0: one process, the warm-up unrecorded (--warmup)
BURSTY=${BURSTY:-1}                # 0: no Fig. 6 runs (a pilot)
BURST_RATE=${BURST_RATE:-250}      # Fig. 6: the bursty load's mean, documents/s
BURST_SECONDS=${BURST_SECONDS:-30} # and its length
DOC_FILES=10
AGENT_PRIORITY=${AGENT_PRIORITY:-idle} # the load generator's prefetching: "idle" (a SCHED_IDLE
                                   # thread of its own, as if on the clients' own devices: one
                                   # client's prefetching does not delay another's document) or
                                   # "normal" (on the demand clients' threads, the runs up to
                                   # 7abb81a); a threshold "knee+anormal" sets its own
AGENT_PREFETCH_CPU=${AGENT_PREFETCH_CPU:-1} # the core of the generator's idle prefetching thread:
                                   # 1, beside its demand clients (every run up to 0be9bcc); 0,
                                   # beside the server (pilot 58); 2 or more on a bigger machine
ARRIVALS=${ARRIVALS:-constant}     # the agents' arrivals: "constant" (httperf's, the paper's) or
                                   # "poisson" (exponential gaps of the same mean)
LATENCY_QOS=${LATENCY_QOS:-1}      # 1: hold /dev/cpu_dma_latency at 0 during the runs (below)
CLIENT_BALLAST=${CLIENT_BALLAST:-0} # 1: keep the load generator's core busy at SCHED_IDLE in every run (below)
CALIBRATE_IDLE=${CALIBRATE_IDLE:-1} # 1: the knee Monitor's load waits for its start-up curve (below)
FIRST_REP=${FIRST_REP:-1}          # > 1: go on with an earlier invocation's run in OUT, from this
                                   # repetition on, appending to its CSVs (its settings, below)
case $CALIBRATE_IDLE in 0|1) ;; *) echo "CALIBRATE_IDLE must be 0 or 1, not $CALIBRATE_IDLE" >&2; exit 2 ;; esac
case $FIRST_REP in ''|*[!0-9]*|0) echo "FIRST_REP must be a repetition number from 1, not $FIRST_REP" >&2; exit 2 ;; esac
[ "$FIRST_REP" -le "$REPS" ] || { echo "FIRST_REP ($FIRST_REP) is past REPS ($REPS): nothing to run" >&2; exit 2; }

cargo build --release --locked -p slipstream >&2
B=$PWD/target/release/slipstream
work=$(mktemp -d)
cleanup() { [ -n "${SP:-}" ] && kill "$SP" 2>/dev/null; [ -n "${BP:-}" ] && kill "$BP" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# A run that fails says which command failed, and what its server said, before the work
# directory goes.
set -E
failed() {  # once: the trap fires in command substitutions' subshells too (set -E)
  [ -e "$work/failed" ] && return 0
  : > "$work/failed"
  echo "nps.sh: line $1 failed: $2" >&2
  for f in "$work"/serve.err "$work"/serve.out; do
    [ -s "$f" ] && { echo "--- $f (last lines):" >&2; tail -20 "$f" >&2; }
  done
  return 0
}
trap 'failed "$LINENO" "$BASH_COMMAND"' ERR

# The site: 100 documents, each a page and nine embedded images (1,000 files of 8 KB). Clients
# arrive at pages (the images have weight 0 in the URL list) and fetch the nine that follow.
mkdir -p "$work/site"
: > "$work/urls.txt"
for i in $(seq -w 0 999); do
  if [ "${i: -1}" = 0 ]; then f=f$i.html; w=1; else f=f$i.png; w=0; fi
  head -c 8000 /dev/zero | tr '\0' "${i: -1}" > "$work/site/$f"
  echo "$w /$f" >> "$work/urls.txt"
done

cg=/sys/fs/cgroup/cpu/slipstream-nps
quota=$((SHARE * PERIOD_US / 100)); [ "$SHARE" -ge 100 ] && quota=-1
if mkdir -p "$cg" 2>/dev/null && echo "$PERIOD_US" > "$cg/cpu.cfs_period_us" 2>/dev/null \
   && echo "$quota" > "$cg/cpu.cfs_quota_us" 2>/dev/null; then
  capped=yes
else
  capped=no
  echo "warning: no cgroup v1 cpu controller here; the server runs uncapped" >&2
fi

# Idle CPUs poll instead of halting while the runs last (a PM QoS request of 0 µs exit
# latency, held as long as fd 3 stays open; latency-tuning profiles such as tuned's make the
# same kind of request). Children do not inherit fd 3 (`3>&-`), so a server left behind by a
# killed script cannot keep the CPUs polling.
# In this virtual machine an idle vCPU halts and exits to the hypervisor, and waking it takes
# time (not measured here on its own): a document's response time, three round trips through
# two cores, then fell as the machine got busier, and any policy that kept the cores busy
# (prefetching) looked faster than No-Prefetching for it (docs/experiments/000-nps.md, pilot
# 24). Without the file (or root) the CPUs idle as usual
# and the script says so.
qos=no
if [ "$LATENCY_QOS" = 1 ] && { exec 3> /dev/cpu_dma_latency; } 2>/dev/null; then
  printf '\0\0\0\0' >&3 && qos=yes
fi
[ "$qos" = yes ] || echo "warning: idle CPUs may halt (no /dev/cpu_dma_latency request)" >&2

# The load generator's core, kept busy at SCHED_IDLE in every run, whatever the policy. On this
# machine a core doing any work, even at idle priority, delays the demand clients on it: a busy
# loop there cost No-Prefetching +19..33 % (pilot 56; on the server's core, about 5 %, pilot 48).
# The generator's own prefetching (its SCHED_IDLE thread) is such work, so without ballast part
# of what a prefetching policy costs demand is the generator's, not the server's: one core of
# clients stands for thousands of devices, and a real client's prefetching does not make
# another client's device busy. Ballast was meant to make the generator's core as busy in
# No-Prefetching as in a prefetching policy; in pilot 57 it made No-Prefetching 7..30 % slower
# and prefetching costlier still, so it is off (kept to repeat that pilot).
BP=
case $CLIENT_BALLAST in
  1) chrt -i 0 taskset -c 1 sh -c 'while :; do :; done' 3>&- & BP=$! ;;
  0) ;;
  *) echo "CLIENT_BALLAST must be 0 or 1, not $CLIENT_BALLAST" >&2; exit 2 ;;
esac

policies=${BASE_POLICIES:-"noprefetch noavoid-1 noavoid-5"}   # a pilot may leave some out
# A threshold may name its own CPU target: "knee@0.5" is the knee Monitor at cpu_target 0.5
# (policy monitor-knee-cpu0.5); and its own LISTENER: "knee:none" (policy monitor-knee-lnone);
# "+costN" sets its prefetch.experimental.cost_target to N % (policy monitor-knee-cost5: the
# brake on what prefetching costs demand, as the agents report it; quiet periods of
# prefetch.experimental.quiet_ms every prefetch.experimental.cost_every_ms), "+noshed" turns
# its shedding off (prefetch.experimental.shed = false; policy monitor-knee-noshed), and
# "+anormal" or "+aidle" last sets its AGENT_PRIORITY (policy monitor-knee-anormal).
case $ARRIVALS in constant|poisson) ;; *) echo "ARRIVALS must be constant or poisson, not $ARRIVALS" >&2; exit 2 ;; esac
case $MONITOR_AGENTS in hinted|off) ;; *) echo "MONITOR_AGENTS must be hinted or off, not $MONITOR_AGENTS" >&2; exit 2 ;; esac
case $AGENT_PREFETCH_CPU in ''|*[!0-9]*) echo "AGENT_PREFETCH_CPU must be a CPU number, not $AGENT_PREFETCH_CPU" >&2; exit 2 ;; esac
case $AGENT_PRIORITY in idle|normal) ;; *) echo "AGENT_PRIORITY must be idle or normal, not $AGENT_PRIORITY" >&2; exit 2 ;; esac
for t in $THRESHOLDS; do
  given=$t
  ag=; case $t in *+anormal|*+aidle) ag=-a${t##*+a}; t=${t%+a*} ;; esac
  shed=; case $t in *+noshed) shed=-noshed; t=${t%+noshed} ;; esac
  cost=; case $t in *+cost*) cost=-cost${t##*+cost}; t=${t%+cost*}
    case ${cost#-cost} in ''|*[!0-9]*) echo "threshold $given: +costN takes a whole percentage, not ${cost#-cost}" >&2; exit 2 ;; esac ;; esac
  # What is left is THRESHOLD[@TARGET][:LISTENER]; a suffix out of order would be read as part
  # of the threshold and fail only when its server does, so it is refused here.
  case $t in *+*) echo "threshold $given: suffixes go in the order +costN, +noshed, +aidle/+anormal" >&2; exit 2 ;; esac
  lis=; case $t in *:*) lis=-l${t#*:}; t=${t%%:*} ;; esac
  th=${t%@*}; cpu=; [ "$t" != "$th" ] && cpu=-cpu${t#*@}
  if [ "$th" = knee ]; then policies="$policies monitor-knee$cpu$lis$cost$shed$ag"; else policies="$policies monitor-${th}ms$cpu$lis$cost$shed$ag"; fi
done

mkdir -p "$OUT/nps"
csv="$OUT/nps/runs.csv"
bcsv="$OUT/nps/bursty.csv"
header="rep,rate,policy,docs_per_s,doc_mean_ms,doc_p50_ms,doc_p90_ms,doc_p99_ms,demand_kBps,prefetch_kBps,prefetches,hint_requests,hint_waits,errors,final_budget,server_load,bench_cpu,server_stretch,server_wait,cpu_pressure,steal_ms_per_s,throttled_share,lag_mean_ms,prefetch_refused,page_waits,error_kinds"
# What the repetitions of one run must share. A run split over invocations (FIRST_REP) goes on
# only with the same settings, so that its CSVs never mix two configurations.
settings="$OUT/nps/settings.txt"
{
  for v in LEVELS WARM RUN CPU_COST_US SHARE PERIOD_US THRESHOLDS CPU_TARGET MONITOR_AGENTS \
    MONITOR_SET SERVE_SET LISTENER SPLIT_WARMUP BURSTY BURST_RATE BURST_SECONDS AGENT_PRIORITY \
    AGENT_PREFETCH_CPU ARRIVALS LATENCY_QOS CLIENT_BALLAST DOC_FILES CALIBRATE_IDLE; do
    printf '%s=%s\n' "$v" "${!v}"
  done
  echo "policies=$policies"
} > "$work/settings.txt"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$FIRST_REP" = 1 ]; then
  cp "$work/settings.txt" "$settings"
  echo "commit=$commit" > "$OUT/nps/commits.txt"
  echo "$header" > "$csv"
  echo "$header" > "$bcsv"
else
  for f in "$csv" "$bcsv" "$settings"; do
    [ -f "$f" ] || { echo "FIRST_REP=$FIRST_REP: $f is missing; start the run with FIRST_REP=1" >&2; exit 2; }
  done
  for f in "$csv" "$bcsv"; do
    [ "$(head -1 "$f")" = "$header" ] || { echo "FIRST_REP=$FIRST_REP: $f has other columns than this script writes" >&2; exit 2; }
  done
  if ! diff -u "$settings" "$work/settings.txt" >&2; then
    echo "FIRST_REP=$FIRST_REP: these settings differ from the run in $OUT/nps (above); set them as it had them" >&2
    exit 2
  fi
  if awk -F, -v r="$FIRST_REP" 'FNR > 1 && $1 + 0 >= r + 0 { found = 1 } END { exit !found }' "$csv" "$bcsv"; then
    echo "FIRST_REP=$FIRST_REP: $OUT/nps already has repetition $FIRST_REP or later" >&2
    exit 2
  fi
  grep -qx "commit=$commit" "$OUT/nps/commits.txt" || {
    echo "note: the run in $OUT/nps began at another commit ($(tr '\n' ' ' < "$OUT/nps/commits.txt")); this is $commit" >&2
    echo "commit=$commit" >> "$OUT/nps/commits.txt"
  }
fi

# Fig. 6's bursty load: each second's relative rate, a log-normal AR(1) process with spikes
# (seeded, so every policy and repetition sees the same seconds). Not the IBM trace (we do not
# have it); its 1-second peaks are several times its mean, as in the paper's Fig. 2(a).
profile="$OUT/nps/bursty-profile.txt"
python3 - "$BURST_SECONDS" > "$profile" <<'PY'
import math, random, sys
rng = random.Random(1); x = 0.0
for _ in range(int(sys.argv[1])):
    x = 0.7 * x + rng.gauss(0, 0.5)
    spike = 3.0 if rng.random() < 0.08 else 1.0
    print(f"{math.exp(x) * spike:.3f}")
PY

# The server's CPU and run-queue nanoseconds (all threads), the machine's PSI "some" CPU stall
# microseconds, the host's steal time (clock ticks: time the hypervisor ran something else on
# our vCPUs), the server cgroup's CFS periods and throttled periods (0 0 uncapped), and the
# time, in seconds.
snap() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{c += $1; w += $2} END {printf "%d %d ", c, w}'
  sed -n 's/^some .*total=//p' /proc/pressure/cpu | tr '\n' ' '
  awk '$1 == "cpu" {printf "%d ", $9}' /proc/stat
  if [ "$capped" = yes ]; then
    awk '$1 == "nr_periods" {p = $2} $1 == "nr_throttled" {t = $2} END {printf "%d %d ", p, t}' "$cg/cpu.stat"
  else
    printf '0 0 '
  fi
  date +%s.%N
}

# One run: a fresh server for POLICY, a warm-up at RATE documents/s (discarded), then the
# measured run (its extra bench arguments after the policy), one line appended to CSV.
one_run() {
  local rep=$1 rate=$2 policy=$3 out_csv=$4 tag=$5; shift 5
  local agent_priority=$AGENT_PRIORITY named=${policy%-anormal}; named=${named%-aidle}
  [ "$named" != "$policy" ] && agent_priority=${policy##*-a}
  local target=() shed=() bare=${named%-noshed} listener=$LISTENER
  [ "$bare" != "$named" ] && shed=(--set prefetch.experimental.shed=false)
  local costed=$bare; bare=${bare%-cost*}
  [ "$bare" != "$costed" ] && shed+=(--set prefetch.experimental.cost_target="$(awk "BEGIN { print ${costed##*-cost} / 100 }")")
  local policy_lis=$bare; bare=${bare%-l*}
  [ "$bare" != "$policy_lis" ] && listener=${policy_lis##*-l}
  local mon=${bare%-cpu*}
  [ -n "$CPU_TARGET" ] && target=(--set prefetch.experimental.cpu_target="$CPU_TARGET")
  [ "$mon" != "$bare" ] && target=(--set prefetch.experimental.cpu_target="${bare##*-cpu}")
  for kv in $MONITOR_SET; do target+=(--set "$kv"); done
  target+=("${shed[@]}")
  local every=(); for kv in $SERVE_SET; do every+=(--set "$kv"); done
  case $listener in
    idle|normal) target+=(--set prefetch.listen=127.0.0.1:0 --set prefetch.experimental.listener_priority="$listener") ;;
    none) ;;
    *) echo "a listener must be idle, normal or none, not $listener" >&2; exit 2 ;;
  esac
  case $mon in
    noprefetch) server=(--set prefetch.experimental.budget=unlimited); agents=off ;;
    noavoid-*) server=(--set prefetch.experimental.budget=unlimited); agents=${policy#noavoid-} ;;
    monitor-knee) server=(--set prefetch.probe_path=/f000.html "${target[@]}"); agents=$MONITOR_AGENTS ;;
    monitor-*) t=${mon#monitor-}; server=(--set prefetch.experimental.threshold_ms="$t" --set prefetch.probe_path=/f000.html "${target[@]}"); agents=$MONITOR_AGENTS ;;
  esac
  # The load generator is one address standing for thousands of clients: the per-address cap
  # on connections (a guard against one client taking every slot, 1,000 by default) would
  # close its 1,001st concurrent connection, and did in the earlier runs (their "collapses" at
  # 800–1,200 documents/s were those closed connections). Lifted to the overall cap here.
  taskset -c 0 "$B" serve "$work/site" --listen 127.0.0.1:0 --workers 1 --prefetch \
    --set serve.max_connections_per_ip=10000 \
    --set serve.cpu_cost_us="$CPU_COST_US" \
    --set prefetch.experimental.doc_files=$DOC_FILES "${server[@]}" "${every[@]}" > "$work/serve.out" 2> "$work/serve.err" 3>&- &
  SP=$!
  [ "$capped" = yes ] && echo "$SP" > "$cg/cgroup.procs"
  for _ in $(seq 100); do grep -q "slipstream serve:" "$work/serve.out" && break; sleep 0.1; done
  base=$(grep 'slipstream serve:' "$work/serve.out" | grep -o 'http://[0-9.:]*' | head -1)
  # The knee Monitor measures its start-up curve first, as a node started before its traffic
  # does. Demand arriving during the curve makes it fall back to its floor (1 ms), which is
  # what every knee run up to the third slow run got (CALIBRATE_IDLE=0 repeats that).
  # A status that cannot be read is not taken for a measured curve; after 30 s the run goes
  # on, and says that its knee Monitor may have calibrated under demand.
  if [ "$CALIBRATE_IDLE" = 1 ] && [ "$mon" = monitor-knee ]; then
    measured=no
    for _ in $(seq 300); do
      st=$(curl -s "$base/_slipstream/prefetch" || true)
      if [ -n "$st" ] && ! grep -q '"threshold_source":"pending"' <<< "$st"; then measured=yes; break; fi
      sleep 0.1
    done
    [ "$measured" = yes ] || echo "warning: $policy at $rate: no start-up curve within 30 s; its load starts anyway" >&2
  fi
  local pcpu=()
  [ "$agent_priority" = idle ] && [ "$agents" != off ] && pcpu=(--prefetch-cpu "$AGENT_PREFETCH_CPU")
  bench() { taskset -c 1 "$B" bench "$base" --urls "$work/urls.txt" --rate "$rate" \
      --agents "$agents" --prefetch-priority "$agent_priority" "${pcpu[@]}" --arrivals "$ARRIVALS" --doc-files $DOC_FILES --visit 2s --max-in-flight 4096 --timeout 10s -q "$@" 3>&-; }
  # A bench process of its own for the warm-up makes the measured run start with a cold
  # connection pool: thousands of new connections at once, a transient no real population
  # makes (the collapses at 1,000 documents/s at 4a1bf00 began there).
  local warm=(--warmup "$WARM")
  if [ "$SPLIT_WARMUP" = 1 ]; then bench --duration "$WARM" > /dev/null; warm=(); fi
  # The measured run, timed: the load generator's share of its core goes in the CSV (a
  # generator near 100 % measures itself, not the server).
  local TIMEFORMAT='%R %U %S'
  snap "$SP" > "$work/snap0.txt"
  { time bench --json "$work/run.json" "${warm[@]}" "$@" > /dev/null; } 2> "$work/time.txt"
  snap "$SP" > "$work/snap1.txt"
  local status="$OUT/nps/status-$policy-$tag-$rep.json"
  local read_ms; read_ms=$(date +%s%3N)
  curl -s "$base/_slipstream/prefetch" > "$status"
  kill "$SP"; wait "$SP" 2>/dev/null || true; SP=
  python3 - "$work/run.json" "$status" "$rep,$rate,$policy" "$work/time.txt" "$work/snap0.txt" "$work/snap1.txt" \
    "$read_ms" "$OUT/nps/bench-$policy-$tag-$rep.json" "$(getconf CLK_TCK)" >> "$out_csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2])); d = r["demand"]; l = d["latency_ms"]
# The bench's report, kept with the wall-clock time the status was read (the server's
# `uptime_ms` then), so that its timeline of documents lines up with the monitor's samples.
r["status_read_unix_ms"] = int(sys.argv[7])
json.dump(r, open(sys.argv[8], "w"))
errors = sum(d.get("errors", {}).values())
# The server's CPU load (of what its cgroup allows) over the measured run, from the monitor's
# samples of its last RUN seconds; empty when the server kept none (no monitor).
run_ms = r["window_s"] * 1000
loads = [x["load"] for x in s.get("samples", []) if x.get("load") is not None
         and x["at_ms"] >= s["uptime_ms"] - run_ms]
load = f"{sum(loads) / len(loads):.3f}" if loads else ""
wall, user, system = (float(x) for x in open(sys.argv[4]).read().split()[-3:])
# Over the whole bench process (warm-up and measured run): the server's CPU wait (its threads'
# run-queue delay, `schedstat`'s second field) per CPU second used ("stretch") and per wall
# second, and the machine's CPU pressure (PSI "some": the share of time a task waited).
# Also the host's steal time, in ms a second (a stall no policy caused), and the share of the
# server's CFS periods in which it used up its quota and was stopped.
(c0, w0, p0, s0, n0, h0, t0), (c1, w1, p1, s1, n1, h1, t1) = (
    [float(x) for x in open(f).read().split()] for f in sys.argv[5:7])
stretch, wait, pressure = (w1 - w0) / max(c1 - c0, 1), (w1 - w0) / 1e9 / (t1 - t0), (p1 - p0) / 1e6 / (t1 - t0)
hz = int(sys.argv[9])
steal = (s1 - s0) / hz * 1000 / (t1 - t0)
throttled = f"{(h1 - h0) / (n1 - n0):.4f}" if n1 > n0 else ""
# The load generator's start lag (how late after its scheduled arrival a client began), the
# mean over the measured documents: part of every document's response time that is the
# generator's, not the server's (empty from a bench without it). Failed documents count in it
# and not in doc_mean_ms: "less the lag" is exact only for runs with none (every Monitor run).
t = r["timeline"]
if "lag_mean_ms" in t:
    n = [a + b for a, b in zip(t["documents"], t["failed"])]
    lag = f'{sum(x * m for x, m in zip(n, t["lag_mean_ms"])) / max(sum(n), 1):.3f}'
else:
    lag = ""
print(f'{sys.argv[3]},{r["documents_per_s"]:.1f},{l["mean"]:.3f},{l["p50"]:.3f},{l["p90"]:.3f},{l["p99"]:.3f},'
      f'{r["demand_bytes_per_s"]/1e3:.1f},{r["prefetch_bytes_per_s"]/1e3:.1f},{r["prefetches"]},'
      f'{r["hint_requests"]},{r["hint_waits"]},{errors},{s["budget_per_s"]:.1f},{load},{(user + system) / wall:.3f},'
      f'{stretch:.3f},{wait:.3f},{pressure:.3f},{steal:.2f},{throttled},{lag},{r.get("prefetch_refused", "")},{r.get("page_waits", "")},'
      + " ".join(f"{k}={v}" for k, v in sorted(d.get("errors", {}).items())))
PY
}

total=$(( (REPS - FIRST_REP + 1) * ($(echo $LEVELS | wc -w) + BURSTY) * $(echo $policies | wc -w) )); n=0
for rep in $(seq "$FIRST_REP" "$REPS"); do
  for rate in $LEVELS; do
    for policy in $policies; do
      n=$((n + 1)); echo "[$n/$total] rep $rep, $rate documents/s, $policy" >&2
      one_run "$rep" "$rate" "$policy" "$csv" "$rate" --duration "$RUN"
    done
  done
  [ "$BURSTY" = 1 ] || continue
  for policy in $policies; do
    n=$((n + 1)); echo "[$n/$total] rep $rep, bursty (mean $BURST_RATE documents/s), $policy" >&2
    one_run "$rep" "$BURST_RATE" "$policy" "$bcsv" bursty --duration "${BURST_SECONDS}s" --rate-profile "$profile"
  done
done

chart() { "$B" experiment lines --csv "$csv" --x rate --series policy --x-label "demand documents / s" "$@"; }
chart --y doc_mean_ms --out "$OUT/nps/fig4-response.svg" --title "Fig. 4: demand response time (mean per document)" --y-label "ms"
chart --y demand_kBps --y-scale 1000 --out "$OUT/nps/fig5-demand.svg" --title "Fig. 5: demand bandwidth" --y-label "MB/s"
chart --y prefetch_kBps --y-scale 1000 --out "$OUT/nps/fig5-prefetch.svg" --title "Fig. 5: prefetch bandwidth" --y-label "MB/s"
# Fig. 4 again, as each policy's paired change against No-Prefetching: in milliseconds it is
# drawn to the scale of No-Avoidance's collapses, where a Monitor's few per cent cannot be seen.
if [[ " $policies " == *" noprefetch "* ]]; then
  python3 experiments/000/nps_relative.py "$csv" "$work/relative.csv"
  "$B" experiment lines --csv "$work/relative.csv" --x rate --series policy --x-label "demand documents / s" \
    --y rt_change_pct --out "$OUT/nps/fig4-relative.svg" \
    --title "Fig. 4: demand response time against No-Prefetching (paired)" --y-label "% (cells over +100 % left out)"
fi
bars() {  # Fig. 6: one bar per policy, the mean over repetitions of column $1 (scaled by $2)
  python3 - "$bcsv" "$1" "$2" <<'PY'
import csv, sys, collections
v = collections.defaultdict(list)
for row in csv.DictReader(open(sys.argv[1])): v[row["policy"]].append(float(row[sys.argv[2]]) / float(sys.argv[3]))
print(" ".join(f"{p}={sum(x) / len(x):.3f}" for p, x in v.items()))
PY
}
if [ "$BURSTY" = 1 ]; then
  "$B" experiment bars --out "$OUT/nps/fig6-response.svg" --title "Fig. 6: bursty load (mean $BURST_RATE documents/s), demand response time" --y-label "ms" $(bars doc_mean_ms 1)
  "$B" experiment bars --out "$OUT/nps/fig6-prefetch.svg" --title "Fig. 6: bursty load (mean $BURST_RATE documents/s), prefetch bandwidth" --y-label "MB/s" $(bars prefetch_kBps 1000)
fi
echo "server in a cgroup: $capped ($SHARE % of core 0), $CPU_COST_US µs extra a request; idle CPUs poll: $qos; results in $csv" >&2
