#!/usr/bin/env bash
# Paper 000, Figs. 4–5 (server interference, constant-rate demand): demand response time,
# demand and prefetch bandwidth against the demand rate, for No-Prefetching, No-Avoidance
# (pfrate 1 and 5) and the Monitor at several thresholds (the knee found at start-up, and fixed ones). Every (rate, policy) run gets a fresh
# server; policies are interleaved within each rate; every run is recorded in runs.csv.
#
#   ./experiments/000/nps.sh            # LEVELS, REPS, WARM, RUN, SHARE, THRESHOLDS below
#
# The server runs on core 0 with one worker, its CPU capped at SHARE % of that core by a
# cgroup (the paper's 450 MHz server was half as fast as its 930 MHz clients; uncapped, our
# server outruns the load generator on the other core and nothing would ever be loaded).
# The agents (`slipstream bench --agents`) run on core 1. Needs root for the cgroup; without
# it the server runs uncapped and the script says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/experiments/000}
LEVELS=${LEVELS:-"50 100 200 300 400 500 600"}
REPS=${REPS:-1}
WARM=${WARM:-8s}
RUN=${RUN:-8s}
SHARE=${SHARE:-30}
THRESHOLDS=${THRESHOLDS:-"knee 1 3"}   # "knee": found at start-up; N: N ms
DOC_FILES=10

cargo build --release --locked -p slipstream >&2
B=$PWD/target/release/slipstream
work=$(mktemp -d)
cleanup() { [ -n "${SP:-}" ] && kill "$SP" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# The site: 1,000 files of 8 KB; a document is a page and the nine files after it.
mkdir -p "$work/site"
for i in $(seq -w 0 999); do head -c 8000 /dev/zero | tr '\0' "${i: -1}" > "$work/site/f$i.html"; done
seq -w 0 999 | sed 's|^|/f|; s|$|.html|' > "$work/urls.txt"

cg=/sys/fs/cgroup/cpu/slipstream-nps
if mkdir -p "$cg" 2>/dev/null && echo 5000 > "$cg/cpu.cfs_period_us" 2>/dev/null \
   && echo $((SHARE * 50)) > "$cg/cpu.cfs_quota_us" 2>/dev/null; then
  capped=yes
else
  capped=no
  echo "warning: no cgroup v1 cpu controller here; the server runs uncapped" >&2
fi

policies="noprefetch noavoid-1 noavoid-5"
for t in $THRESHOLDS; do
  if [ "$t" = knee ]; then policies="$policies monitor-knee"; else policies="$policies monitor-${t}ms"; fi
done

mkdir -p "$OUT/nps"
csv="$OUT/nps/runs.csv"
echo "rep,rate,policy,docs_per_s,doc_mean_ms,doc_p50_ms,doc_p90_ms,doc_p99_ms,demand_kBps,prefetch_kBps,prefetches,hint_requests,hint_waits,errors,final_budget" > "$csv"
total=$(( REPS * $(echo $LEVELS | wc -w) * $(echo $policies | wc -w) )); n=0
for rep in $(seq 1 "$REPS"); do
for rate in $LEVELS; do
for policy in $policies; do
  n=$((n + 1)); echo "[$n/$total] rep $rep, $rate documents/s, $policy" >&2
  case $policy in
    noprefetch) server=(--set prefetch.budget=unlimited); agents=off ;;
    noavoid-*) server=(--set prefetch.budget=unlimited); agents=${policy#noavoid-} ;;
    monitor-knee) server=(--set prefetch.probe_path=/f000.html); agents=hinted ;;
    monitor-*) t=${policy#monitor-}; server=(--set prefetch.threshold_ms="$t" --set prefetch.probe_path=/f000.html); agents=hinted ;;
  esac
  taskset -c 0 "$B" serve "$work/site" --listen 127.0.0.1:0 --workers 1 --prefetch \
    --set prefetch.doc_files=$DOC_FILES "${server[@]}" > "$work/serve.out" 2> "$work/serve.err" &
  SP=$!
  [ "$capped" = yes ] && echo "$SP" > "$cg/cgroup.procs"
  for _ in $(seq 100); do grep -q "slipstream serve:" "$work/serve.out" && break; sleep 0.1; done
  base=$(grep -o 'http://[0-9.:]*' "$work/serve.out" | head -1)
  bench() { taskset -c 1 "$B" bench "$base" --urls "$work/urls.txt" --rate "$rate" \
      --agents "$agents" --doc-files $DOC_FILES --visit 2s --max-in-flight 4096 --timeout 10s -q "$@"; }
  bench --duration "$WARM" > /dev/null
  bench --duration "$RUN" --json "$work/run.json" > /dev/null
  curl -s "$base/_slipstream/prefetch" > "$OUT/nps/status-$policy-$rate-$rep.json"
  kill "$SP"; wait "$SP" 2>/dev/null || true; SP=
  python3 - "$work/run.json" "$OUT/nps/status-$policy-$rate-$rep.json" "$rep,$rate,$policy" >> "$csv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2])); d = r["demand"]; l = d["latency_ms"]
errors = sum(d.get("errors", {}).values())
print(f'{sys.argv[3]},{r["documents_per_s"]:.1f},{l["mean"]:.3f},{l["p50"]:.3f},{l["p90"]:.3f},{l["p99"]:.3f},'
      f'{r["demand_bytes_per_s"]/1e3:.1f},{r["prefetch_bytes_per_s"]/1e3:.1f},{r["prefetches"]},'
      f'{r["hint_requests"]},{r["hint_waits"]},{errors},{s["budget_per_s"]:.1f}')
PY
done; done; done

chart() { "$B" experiment lines --csv "$csv" --x rate --series policy --x-label "demand documents / s" "$@"; }
chart --y doc_mean_ms --out "$OUT/nps/fig4-response.svg" --title "Fig. 4: demand response time (mean per document)" --y-label "ms"
chart --y demand_kBps --y-scale 1000 --out "$OUT/nps/fig5-demand.svg" --title "Fig. 5: demand bandwidth" --y-label "MB/s"
chart --y prefetch_kBps --y-scale 1000 --out "$OUT/nps/fig5-prefetch.svg" --title "Fig. 5: prefetch bandwidth" --y-label "MB/s"
echo "server capped: $capped ($SHARE % of core 0); results in $csv" >&2
