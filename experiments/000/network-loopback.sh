#!/usr/bin/env bash
# Paper 000 §7.1 "Loaded network", Fig. 13(c), on real sockets: a client network namespace
# reaches the server through a veth pair whose server-side egress is a 1 Mbit/s bottleneck
# (htb; this kernel has no netem), shared by demand and prefetch traffic. Cases:
#
#   no-prefetching   clients fetch their documents only
#   no-avoidance     clients prefetch 5 hint lists after each document over the demand port
#                    (normal priority), whatever the load
#   nps              the monitor's budget, prefetches through the prefetch listener (DSCP
#                    Lower-Effort), and a bottleneck that honours LE (RFC 8622: LE gets what
#                    the other classes leave)
#   nps-no-le        the same, but the bottleneck ignores DSCP (what NPS gets where networks
#                    do not honour LE: this kernel has no less-than-best-effort congestion
#                    control to fall back on)
#   nps-no-le-nice   the same, with the prefetch listener's application-level back-off on
#                    (prefetch.experimental.rtt_backoff: its connections give way as their RTT
#                    rises, TCP Nice's signal read from TCP_INFO), one window for all the
#                    connections to the client address (the default)
#   nps-no-le-nice-own  the same with a window for each connection (backoff_shared = false;
#                    not in the default cases)
#
#   ./experiments/000/network-loopback.sh     # RUN=60s RATE=1.2 REPS=1; needs root (netns, tc)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/experiments/000}
RUN=${RUN:-60s}
RATE=${RATE:-1.2}
REPS=${REPS:-1}
LINK=${LINK:-1mbit}
NS=slipstream-nps-cli
cargo build --release --locked -p slipstream >&2
B=$PWD/target/release/slipstream
work=$(mktemp -d)
cleanup() {
  [ -n "${SP:-}" ] && kill "$SP" 2>/dev/null
  ip netns del "$NS" 2>/dev/null || true
  ip link del slip-s 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
cleanup

# The site: 1,000 files of 4 KB; a document is a page and the four files after it.
mkdir -p "$work/site"
for i in $(seq -w 0 999); do head -c 4000 /dev/zero | tr '\0' "${i: -1}" > "$work/site/f$i.html"; done
seq -w 0 999 | sed 's|^|/f|; s|$|.html|' > "$work/urls.txt"

ip netns add "$NS"
ip link add slip-s type veth peer name slip-c
ip link set slip-c netns "$NS"
ip addr add 10.77.0.1/24 dev slip-s
ip link set slip-s up
ip netns exec "$NS" ip addr add 10.77.0.2/24 dev slip-c
ip netns exec "$NS" ip link set slip-c up
ip netns exec "$NS" ip link set lo up

# The bottleneck, server to client: one htb class at the link rate for everything, or (le)
# a class for best effort that may take the whole link first and one for DSCP LE (TOS 0x04)
# that gets only what is left.
bottleneck() {
  tc qdisc del dev slip-s root 2>/dev/null || true
  tc qdisc add dev slip-s root handle 1: htb default 10
  tc class add dev slip-s parent 1: classid 1:1 htb rate "$LINK" ceil "$LINK"
  tc class add dev slip-s parent 1:1 classid 1:10 htb rate "$LINK" ceil "$LINK" prio 0
  tc qdisc add dev slip-s parent 1:10 handle 10: pfifo limit 50
  if [ "$1" = le ]; then
    tc class add dev slip-s parent 1:1 classid 1:20 htb rate 8kbit ceil "$LINK" prio 7
    tc qdisc add dev slip-s parent 1:20 handle 20: pfifo limit 50
    tc filter add dev slip-s parent 1: protocol ip prio 1 u32 match ip tos 0x04 0xfc flowid 1:20
  fi
}

mkdir -p "$OUT/network-loopback"
csv="$OUT/network-loopback/runs.csv"
echo "rep,case,docs_per_s,doc_mean_ms,doc_p50_ms,doc_p90_ms,doc_p99_ms,demand_kbit_s,prefetch_kbit_s,prefetches,errors" > "$csv"
cases=${CASES:-"no-prefetching no-avoidance nps nps-no-le nps-no-le-nice"}
total=$(( REPS * $(echo $cases | wc -w) )); n=0
for rep in $(seq 1 "$REPS"); do
for case in $cases; do
  n=$((n + 1)); echo "[$n/$total] rep $rep, $case" >&2
  sets=(--set prefetch.experimental.doc_files=10 --set prefetch.probe_path=/f000.html)
  case $case in
    no-prefetching) bottleneck plain; sets+=(--set prefetch.experimental.budget=unlimited); agents=off ;;
    no-avoidance) bottleneck plain; sets+=(--set prefetch.experimental.budget=unlimited); agents=5 ;;
    nps) bottleneck le; sets+=(--set prefetch.listen=10.77.0.1:0); agents=hinted ;;
    nps-no-le) bottleneck plain; sets+=(--set prefetch.listen=10.77.0.1:0); agents=hinted ;;
    nps-no-le-nice) bottleneck plain; sets+=(--set prefetch.listen=10.77.0.1:0 --set prefetch.experimental.rtt_backoff=true); agents=hinted ;;
    nps-no-le-nice-own) bottleneck plain; sets+=(--set prefetch.listen=10.77.0.1:0 --set prefetch.experimental.rtt_backoff=true --set prefetch.experimental.backoff_shared=false); agents=hinted ;;
    *) echo "unknown case $case" >&2; exit 2 ;;
  esac
  "$B" serve "$work/site" --listen 10.77.0.1:0 --workers 1 --prefetch "${sets[@]}" > "$work/serve.out" 2> "$work/serve.err" &
  SP=$!
  for _ in $(seq 100); do grep -q "slipstream serve:" "$work/serve.out" && break; sleep 0.1; done
  base=$(grep -o 'serve: .* on http://[0-9.:]*' "$work/serve.out" | grep -o 'http://[0-9.:]*')
  ip netns exec "$NS" "$B" bench "$base" --urls "$work/urls.txt" --rate "$RATE" --agents "$agents" \
    --doc-files 5 --visit 10s --max-in-flight 256 --timeout 60s --duration "$RUN" -q --json "$work/run.json" > /dev/null
  # The node's view (its budget, and the listener's back-off counters), for the nps cases.
  case $case in nps*) python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "$base/_slipstream/prefetch" > "$OUT/network-loopback/status-$case-$rep.json" ;; esac
  kill "$SP"; wait "$SP" 2>/dev/null || true; SP=
  tc -s class show dev slip-s > "$OUT/network-loopback/tc-$case-$rep.txt"
  python3 - "$work/run.json" "$rep,$case" >> "$csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); d = r["demand"]; l = d["latency_ms"]
errors = sum(d.get("errors", {}).values())
print(f'{sys.argv[2]},{r["documents_per_s"]:.2f},{l["mean"]:.1f},{l["p50"]:.1f},{l["p90"]:.1f},{l["p99"]:.1f},'
      f'{r["demand_bytes_per_s"]*8/1e3:.1f},{r["prefetch_bytes_per_s"]*8/1e3:.1f},{r["prefetches"]},{errors}')
PY
done; done
column -s, -t "$csv" >&2
