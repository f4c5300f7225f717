#!/usr/bin/env bash
# What Web++'s page pre-processing costs (issue 10): a 100 KB HTML page naming 400 resources,
# served by three `slipstream serve` nodes of this checkout side by side:
#   plain:     no cluster, the page as the file is;
#   processed: a cluster member with pre-processing and no page cache (every request rewritten);
#   cached:    a cluster member with pre-processing and its page cache (rewritten once).
# Every server runs with one worker pinned to SERVER_CPU; wrk runs on CLIENT_CPU. For each
# client concurrency and repetition the three are measured interleaved (the order rotates) and
# every run is recorded, with the server's CPU time per request read from /proc.
# Writes docs/experiments/001/preprocess.md (summary) and preprocess-runs.tsv (every run).
# Needs: apt-get install wrk curl
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/slipstream}
OUT=${OUT:-docs/experiments/001}
WORK=${WORK:-/tmp/slipstream-preprocess}
DURATION=${DURATION:-5s}
REPS=${REPS:-3}
CONNS=${CONNS:-"32 50"}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
for tool in wrk curl python3 taskset; do command -v $tool >/dev/null || { echo "needs $tool (apt-get install wrk curl)" >&2; exit 1; }; done
mkdir -p "$OUT" "$WORK"
cargo build --release --locked -p slipstream
rm -rf "$WORK/www" "$WORK/data"; mkdir -p "$WORK/www/img" "$WORK/data"

# The page: 400 links and images to resources of the site, padded with text to 100 KB.
python3 - "$WORK/www" <<'PY'
import os, sys
root = sys.argv[1]
parts = ["<!doctype html><html><head><title>A 100 KB page</title>"
         "<link rel=stylesheet href=/style.css></head><body>"]
for i in range(400):
    parts.append(f'<p>Item {i}: <a href="/item/{i}.html">item {i}</a> '
                 f'<img src="img/{i}.png" srcset="img/{i}.png 1x, img/{i}@2x.png 2x" alt=""> ')
    parts.append("lorem ipsum dolor sit amet " * 4 + "</p>\n")
page = "".join(parts)
page += "<p>" + "x" * max(0, 100 * 1024 - len(page) - 20) + "</p></body></html>\n"
open(os.path.join(root, "page.html"), "w").write(page)
open(os.path.join(root, "style.css"), "w").write("body{font:14px sans-serif}\n")
print(f"page.html: {len(page.encode())} bytes", file=sys.stderr)
PY

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
declare -A PORT=([plain]=18701 [processed]=18702 [cached]=18703) PID
gossip=18711
for side in plain processed cached; do
  args=(serve "$WORK/www" --listen "127.0.0.1:${PORT[$side]}" --workers 1)
  if [ "$side" != plain ]; then
    cache=16MiB; [ "$side" = processed ] && cache=0
    args+=(--set "cluster.name=$side" --set "cluster.gossip_listen=127.0.0.1:$gossip"
           --set "cluster.data_dir=$WORK/data/$side" --set 'cluster.publish=["/*"]'
           --set "cluster.page_cache_bytes=$cache")
    gossip=$((gossip + 1))
  fi
  taskset -c "$SERVER_CPU" "$BIN" "${args[@]}" >/dev/null & pids+=($!); PID[$side]=$!
done
for side in plain processed cached; do
  url="http://127.0.0.1:${PORT[$side]}/page.html"
  for _ in $(seq 100); do curl -s -o /dev/null "$url" && break; sleep 0.1; done
  for _ in 1 2 3; do curl -s -o "$WORK/$side.html" "$url"; done
done
# The processed pages are the plain page plus the agent's script and the replica block.
grep -q 'id="slipstream-replicas"' "$WORK/processed.html"
# The same page from both (each names its own address).
cmp -s <(sed "s/:${PORT[processed]}/:PORT/g" "$WORK/processed.html") <(sed "s/:${PORT[cached]}/:PORT/g" "$WORK/cached.html") \
  || { echo "cached and processed pages differ" >&2; exit 1; }
sizes="$(wc -c < "$WORK/plain.html") $(wc -c < "$WORK/processed.html")"

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# url conns pid -> "req/s cpu-us/request p50-ms p99-ms"
run() {
  local before after out
  before=$(ticks "$3")
  out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$2" -d"$DURATION" --latency "$1")
  after=$(ticks "$3")
  echo "$out" | awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /requests in/{n=$1} /Requests\/sec/{r=$2} $1=="50%"{p50=ms($2)} $1=="99%"{p99=ms($2)}
    END{printf "%s\t%.1f\t%.3f\t%.3f\n", r, t * 1e6 / hz / n, p50, p99}'
}
runs="$OUT/preprocess-runs.tsv"
printf 'conns\trep\tside\treq_per_s\tcpu_us_per_req\tp50_ms\tp99_ms\n' > "$runs"
total=$(( $(wc -w <<<"$CONNS") * REPS * 3 )); n=0
for c in $CONNS; do
  for rep in $(seq "$REPS"); do
    case $((rep % 3)) in 1) order="plain processed cached";; 2) order="processed cached plain";; *) order="cached plain processed";; esac
    for side in $order; do
      r=$(run "http://127.0.0.1:${PORT[$side]}/page.html" "$c" "${PID[$side]}")
      printf '%s\t%s\t%s\t%s\n' "$c" "$rep" "$side" "$r" >> "$runs"
      n=$((n + 1)); printf '\r%d/%d runs' "$n" "$total" >&2
    done
  done
done
echo >&2

python3 - "$runs" "$OUT/preprocess.md" "$(git rev-parse --short HEAD)" "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$DURATION" "$REPS" "$sizes" <<'PY'
import csv, statistics, sys
runs, out, rev, machine, duration, reps, sizes = sys.argv[1:]
plain_b, processed_b = sizes.split()
rows = list(csv.DictReader(open(runs), delimiter="\t"))
cells = {}
for r in rows:
    cells.setdefault((int(r["conns"]), r["side"]), []).append(r)
med = lambda rs, f: statistics.median(float(r[f]) for r in rs)
lines = [
    "<!-- generated by experiments/001/preprocess.sh -->",
    f"Commit {rev}. {machine}; each server one worker pinned to a core, wrk (1 thread) on the other;"
    f" {reps} interleaved runs of {duration} per cell, every run in `preprocess-runs.tsv`."
    f" The page: {plain_b} bytes as a file, {processed_b} bytes processed.",
    "",
    "| conns | server | req/s (median; min–max) | server CPU µs/request | p50 / p99 ms | req/s vs plain |",
    "|---|---|---|---|---|---|",
]
for c in sorted({k[0] for k in cells}):
    base = med(cells[(c, "plain")], "req_per_s")
    for side in ["plain", "processed", "cached"]:
        rs = cells[(c, side)]
        rps = [float(r["req_per_s"]) for r in rs]
        lines.append(
            f"| {c} | {side} | {statistics.median(rps):,.0f}; {min(rps):,.0f}–{max(rps):,.0f} |"
            f" {med(rs, 'cpu_us_per_req'):.1f} | {med(rs, 'p50_ms'):.2f} / {med(rs, 'p99_ms'):.2f} |"
            f" {statistics.median(rps) / base:.3f} |")
lines.append("")
for c in sorted({k[0] for k in cells}):
    plain = med(cells[(c, "plain")], "cpu_us_per_req")
    processed = med(cells[(c, "processed")], "cpu_us_per_req")
    cached_min = min(float(r["req_per_s"]) for r in cells[(c, "cached")])
    plain_max = max(float(r["req_per_s"]) for r in cells[(c, "plain")])
    lines.append(
        f"- {c} connections: rewriting costs {processed - plain:.0f} µs of server CPU per page"
        f" ({(processed - plain) / processed:.0%} of the processed page's {processed:.0f} µs);"
        f" the cached page's slowest run reaches {cached_min / plain_max:.3f}× the plain page's fastest.")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
