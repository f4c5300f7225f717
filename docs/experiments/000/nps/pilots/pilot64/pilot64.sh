#!/usr/bin/env bash
# Pilot 64: what a request costs after the machine has been idle for a while. (1) A Python
# ping-pong over loopback TCP (8,000-byte answers, no slipstream), the client on core 1 or on
# core 0 beside the server, with and without the /dev/cpu_dma_latency request nps.sh holds;
# (2) a slipstream node (the nps.sh server, 25 µs of CPU a request) probed by one keep-alive
# client after gaps of 0-100 ms; (3) the monitor's own probes of an idle node (5 an epoch,
# 20 ms apart) against its start-up curve's back-to-back probes at concurrency 1; (4) the
# probes of the 9fe872a run's Monitors, run by run, against their prefetch bandwidth.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../../.."
cargo build --release --locked -p slipstream >&2
B=$PWD/target/release/slipstream
site=$(mktemp -d); trap 'rm -rf "$site"; [ -n "${SP:-}" ] && kill "$SP" 2>/dev/null' EXIT
for i in $(seq -w 0 99); do head -c 8000 /dev/zero | tr '\0' a > "$site/f0$i.html"; done
qos() { exec 3> /dev/cpu_dma_latency && printf '\0\0\0\0' >&3; }
echo "== (1) ping-pong, no latency request"; for c in 1 0; do echo "client core $c:"; python3 "$here/pingpong.py" "$c"; done
( qos && echo "== (1) ping-pong, cpu_dma_latency 0 held" && for c in 1 0; do echo "client core $c:"; python3 "$here/pingpong.py" "$c"; done ) || echo "(no /dev/cpu_dma_latency)"
start() {
  taskset -c 0 "$B" serve "$site" --listen 127.0.0.1:0 --workers 1 --prefetch --set serve.cpu_cost_us=25 "$@" > "$site/out" 2>&1 &
  SP=$!
  for _ in $(seq 100); do grep -q "slipstream serve:" "$site/out" && break; sleep 0.1; done
  port=$(grep -o '127.0.0.1:[0-9]*' "$site/out" | head -1 | cut -d: -f2)
}
echo "== (2) a slipstream node, one client after gaps, no latency request"
start --set prefetch.budget=unlimited
for c in 1 0; do echo "client core $c:"; taskset -c "$c" python3 "$here/gap.py" 127.0.0.1 "$port"; done
( qos && echo "== (2) the same node, cpu_dma_latency 0 held" && for c in 1 0; do echo "client core $c:"; taskset -c "$c" python3 "$here/gap.py" 127.0.0.1 "$port"; done ) || echo "(no /dev/cpu_dma_latency)"
kill "$SP"; wait "$SP" 2>/dev/null || true
echo "== (3) the monitor's probes of an idle node (six fresh nodes)"
for i in 1 2 3 4 5 6; do
  start --set prefetch.probe_path=/f000.html
  # The start-up curve takes about a second; then 5 probes an epoch.
  sleep 6
  curl -s "http://127.0.0.1:$port/_slipstream/prefetch" | python3 -c "
import json, statistics as st, sys
s = json.load(sys.stdin); xs = [x['rt_us'] for x in s['samples'] if x['rt_us']]
print('node', $i, 'epoch samples', len(xs), 'median', st.median(xs), 'us; start-up curve at 1, 2, 4:', s['startup_curve'][:3])"
  kill "$SP"; wait "$SP" 2>/dev/null || true
done
echo "== (4) the 9fe872a run's probes, by run (its status files)"
python3 "$here/probe_medians.py" docs/experiments/000/nps
