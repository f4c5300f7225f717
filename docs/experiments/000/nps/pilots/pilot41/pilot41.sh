#!/bin/bash
# Pilot 41: does the monitor itself (probes, CPU meter, no prefetching) cost demand?
# The same server as nps.sh's, with budget=unlimited (no monitor) or the 0.6 knee Monitor,
# and clients that never prefetch (--agents off). Interleaved, 3 reps at 400 and 800.
# Needs root, a release build and the cgroup experiments/000/nps.sh sets up (run it once first).
set -euo pipefail
cd "$(dirname "$0")/../../../../../.."
B=$PWD/target/release/slipstream
work=$(mktemp -d)
mkdir -p "$work/site"; : > "$work/urls.txt"
for i in $(seq -w 0 999); do
  if [ "${i: -1}" = 0 ]; then f=f$i.html; w=1; else f=f$i.png; w=0; fi
  head -c 8000 /dev/zero | tr '\0' "${i: -1}" > "$work/site/$f"; echo "$w /$f" >> "$work/urls.txt"
done
cg=/sys/fs/cgroup/cpu/slipstream-nps
exec 3> /dev/cpu_dma_latency; printf '\0\0\0\0' >&3
echo "rep,rate,server,mean_ms,p50_ms,p99_ms"
for rep in 1 2 3; do for rate in 400 800; do for srv in unlimited monitor; do
  if [ $srv = unlimited ]; then set_=(--set prefetch.budget=unlimited); else set_=(--set prefetch.probe_path=/f000.html --set prefetch.cpu_target=0.6); fi
  taskset -c 0 "$B" serve "$work/site" --listen 127.0.0.1:0 --workers 1 --prefetch --set serve.max_connections_per_ip=10000 \
    --set prefetch.doc_files=10 "${set_[@]}" > "$work/serve.out" 2> "$work/serve.err" 3>&- &
  SP=$!; echo "$SP" > "$cg/cgroup.procs"
  for _ in $(seq 100); do grep -q "slipstream serve:" "$work/serve.out" && break; sleep 0.1; done
  base=$(grep 'slipstream serve:' "$work/serve.out" | grep -o 'http://[0-9.:]*' | head -1)
  taskset -c 1 "$B" bench "$base" --urls "$work/urls.txt" --rate $rate --agents off --doc-files 10 --visit 2s \
    --max-in-flight 4096 --timeout 10s -q --warmup 10s --duration 10s --json "$work/run.json" > /dev/null 3>&-
  kill $SP; wait $SP 2>/dev/null || true
  python3 -c "
import json,sys; d=json.load(open('$work/run.json'))['demand']['latency_ms']
print('$rep,$rate,$srv,%.3f,%.3f,%.3f' % (d['mean'], d['p50'], d['p99']))"
done; done; done
rm -rf "$work"
