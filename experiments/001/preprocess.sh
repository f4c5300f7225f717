#!/usr/bin/env bash
# What Web++'s page pre-processing costs (issue 10): a 100 KB HTML page naming 1,200 URLs,
# served by `slipstream serve` nodes of this checkout side by side:
#   plain:     no cluster, the page as the file is;
#   processed: a cluster member with pre-processing and no page cache (every request rewritten);
#   cached:    a cluster member with pre-processing and its page cache (rewritten once).
# processed and cached are two members of one four-node cluster (two more members, m1 and m2),
# so their pages' replica blocks name four servers. Two directories (MODES):
#   wildcard: every member publishes `/*` (a site replicated whole), and
#   exact:    m1 and m2 also hold each of the page's 1,200 URLs as its own replica, stored
#             through the replica API (the worst case: every URL listed on its own).
# Loopback: every server runs with one worker pinned to SERVER_CPU; wrk runs on CLIENT_CPU. For
# each mode, client concurrency and repetition the three are measured interleaved (the order
# rotates) and every run is recorded, with the server's CPU time per request read from /proc.
# WAN: each of the three behind its own Toxiproxy link (WAN_LATENCY_MS each way,
# WAN_RATE_KBPS down), WAN_FETCHES page fetches each on a fresh connection, interleaved: the
# serving time a client sees.
# Writes docs/experiments/001/preprocess.md (summary), preprocess-runs.tsv (every loopback run)
# and preprocess-wan.tsv (every WAN fetch).
# Needs: apt-get install wrk curl; Toxiproxy (scripts/install-toxiproxy).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/slipstream}
TOXIPROXY_BIN=${TOXIPROXY_BIN:-target/tools/toxiproxy-server}
OUT=${OUT:-docs/experiments/001}
WORK=${WORK:-/tmp/slipstream-preprocess}
DURATION=${DURATION:-5s}
REPS=${REPS:-3}
CONNS=${CONNS:-"32 50"}
MODES=${MODES:-"wildcard exact"}
WAN_LATENCY_MS=${WAN_LATENCY_MS:-25}
WAN_RATE_KBPS=${WAN_RATE_KBPS:-2500}
WAN_FETCHES=${WAN_FETCHES:-20}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
TOKEN=preprocess-benchmark-token
for tool in wrk curl python3 taskset; do command -v $tool >/dev/null || { echo "needs $tool (apt-get install wrk curl)" >&2; exit 1; }; done
mkdir -p "$OUT" "$WORK"
[ -n "${SKIP_BUILD:-}" ] || cargo build --release --locked -p slipstream
[ -x "$TOXIPROXY_BIN" ] || scripts/install-toxiproxy
rm -rf "$WORK/www"; mkdir -p "$WORK/www/img"

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
# The page's same-origin URLs, as the directory names them.
urls() {
  echo /style.css
  for i in $(seq 0 399); do echo "/item/$i.html"; echo "/img/$i.png"; echo "/img/$i@2x.png"; done
}

pids=()
stop_all() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
trap stop_all EXIT
wait_http() { for _ in $(seq 200); do curl -s -o /dev/null "$1" && return 0; sleep 0.05; done; echo "no answer from $1" >&2; exit 1; }
declare -A PORT=([plain]=18701 [processed]=18702 [cached]=18703 [m1]=18704 [m2]=18705) GOSSIP=([processed]=18712 [cached]=18713 [m1]=18714 [m2]=18715) PID
WAN_PORT0=18721

# Starts the five nodes of `mode` (and Toxiproxy), and waits until processed and cached serve
# the same page with the mode's directory.
start_nodes() {
  local mode=$1 side n
  rm -rf "$WORK/data"; mkdir -p "$WORK/data"
  for side in plain processed cached m1 m2; do
    args=(serve "$WORK/www" --listen "127.0.0.1:${PORT[$side]}" --workers 1)
    if [ "$side" != plain ]; then
      cache=16MiB; [ "$side" = processed ] && cache=0
      args+=(--set "cluster.name=$side" --set "cluster.gossip_listen=127.0.0.1:${GOSSIP[$side]}"
             --set "cluster.data_dir=$WORK/data/$side" --set 'cluster.publish=["/*"]'
             --set "cluster.page_cache_bytes=$cache" --set "cluster.token=$TOKEN")
      [ "$side" = processed ] || args+=(--set "cluster.seeds=[\"127.0.0.1:${GOSSIP[processed]}\"]")
    fi
    cpu=$SERVER_CPU; case $side in m1|m2) cpu=$CLIENT_CPU;; esac
    taskset -c "$cpu" "$BIN" "${args[@]}" >"$WORK/$side.log" 2>&1 & pids+=($!); PID[$side]=$!
  done
  for side in plain processed cached m1 m2; do wait_http "http://127.0.0.1:${PORT[$side]}/style.css"; done
  if [ "$mode" = exact ]; then
    for side in m1 m2; do
      n=0
      for u in $(urls); do
        code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "authorization: Bearer $TOKEN" \
          --data-binary x "http://127.0.0.1:${PORT[$side]}/_slipstream/replicas$u")
        [ "$code" = 201 ] || [ "$code" = 200 ] || { echo "PUT $u on $side: $code" >&2; exit 1; }
        n=$((n + 1)); [ $((n % 200)) -ne 0 ] || printf '\r%s: %d replicas stored' "$side" "$n" >&2
      done
    done
    echo >&2
  fi
  # Converged: the page's last URL resolves to all four members (in exact mode, m1's and m2's
  # stored copies), on both page nodes, and both serve the same page.
  want=4; stored=0; [ "$mode" = exact ] && stored=2
  for _ in $(seq 600); do
    ok=1
    for side in processed cached; do
      r=$(curl -s "http://127.0.0.1:${PORT[$side]}/_slipstream/resolve?url=/img/399@2x.png")
      python3 -c 'import json,sys; r=json.loads(sys.argv[1]); p=r.get("replicas") or r.get("physical") or []; sys.exit(0 if len(p)==int(sys.argv[2]) and sum("_slipstream/replicas" in x for x in p)==int(sys.argv[3]) else 1)' "$r" "$want" "$stored" || ok=0
    done
    if [ $ok = 1 ]; then
      for side in plain processed cached; do curl -s -o "$WORK/$side.html" "http://127.0.0.1:${PORT[$side]}/page.html"; done
      cmp -s "$WORK/processed.html" "$WORK/cached.html" && break
    fi
    ok=0; sleep 0.1
  done
  [ $ok = 1 ] || { echo "$mode: the cluster did not converge (last resolve: $r)" >&2; exit 1; }
  grep -q 'id="slipstream-replicas"' "$WORK/processed.html"
  # Toxiproxy: one WAN link per page server.
  "$TOXIPROXY_BIN" -port 18474 >"$WORK/toxiproxy.log" 2>&1 & pids+=($!)
  wait_http http://127.0.0.1:18474/version
  local port=$WAN_PORT0
  for side in plain processed cached; do
    curl -sf -X POST http://127.0.0.1:18474/proxies -d "{\"name\":\"$side\",\"listen\":\"127.0.0.1:$port\",\"upstream\":\"127.0.0.1:${PORT[$side]}\",\"enabled\":true}" >/dev/null
    for stream in upstream downstream; do
      curl -sf -X POST "http://127.0.0.1:18474/proxies/$side/toxics" -d "{\"name\":\"lat-$stream\",\"type\":\"latency\",\"stream\":\"$stream\",\"attributes\":{\"latency\":$WAN_LATENCY_MS,\"jitter\":0}}" >/dev/null
    done
    curl -sf -X POST "http://127.0.0.1:18474/proxies/$side/toxics" -d "{\"name\":\"rate\",\"type\":\"bandwidth\",\"stream\":\"downstream\",\"attributes\":{\"rate\":$WAN_RATE_KBPS}}" >/dev/null
    WAN[$side]=$port; port=$((port + 1))
  done
}
declare -A WAN

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
wan="$OUT/preprocess-wan.tsv"
printf 'mode\tconns\trep\tside\treq_per_s\tcpu_us_per_req\tp50_ms\tp99_ms\n' > "$runs"
printf 'mode\tfetch\tside\tbytes\tfirst_byte_ms\ttotal_ms\n' > "$wan"
sizes=""
total=$(( $(wc -w <<<"$MODES") * ($(wc -w <<<"$CONNS") * REPS * 3 + WAN_FETCHES * 3) )); n=0
for mode in $MODES; do
  start_nodes "$mode"
  sizes="$sizes $mode:$(wc -c < "$WORK/plain.html"):$(wc -c < "$WORK/processed.html")"
  cp "$WORK/processed.html" "$WORK/processed-$mode.html"
  for c in $CONNS; do
    for rep in $(seq "$REPS"); do
      case $((rep % 3)) in 1) order="plain processed cached";; 2) order="processed cached plain";; *) order="cached plain processed";; esac
      for side in $order; do
        r=$(run "http://127.0.0.1:${PORT[$side]}/page.html" "$c" "${PID[$side]}")
        printf '%s\t%s\t%s\t%s\t%s\n' "$mode" "$c" "$rep" "$side" "$r" >> "$runs"
        n=$((n + 1)); printf '\r%d/%d runs' "$n" "$total" >&2
      done
    done
  done
  for f in $(seq "$WAN_FETCHES"); do
    case $((f % 3)) in 1) order="plain processed cached";; 2) order="processed cached plain";; *) order="cached plain processed";; esac
    for side in $order; do
      r=$(taskset -c "$CLIENT_CPU" curl -s -o /dev/null -w '%{size_download}\t%{time_starttransfer}\t%{time_total}' "http://127.0.0.1:${WAN[$side]}/page.html")
      printf '%s\t%s\t%s\t%s\n' "$mode" "$f" "$side" "$(awk -F'\t' '{printf "%s\t%.2f\t%.2f", $1, $2 * 1000, $3 * 1000}' <<<"$r")" >> "$wan"
      n=$((n + 1)); printf '\r%d/%d runs' "$n" "$total" >&2
    done
  done
  stop_all
done
echo >&2

python3 - "$runs" "$wan" "$OUT/preprocess.md" "$(git rev-parse --short HEAD)" "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$DURATION" "$REPS" "$sizes" "$WAN_LATENCY_MS" "$WAN_RATE_KBPS" <<'PY'
import csv, statistics, sys
runs, wan, out, rev, machine, duration, reps, sizes, lat, rate = sys.argv[1:]
size = {m: (int(p), int(q)) for m, p, q in (s.split(":") for s in sizes.split())}
rows = list(csv.DictReader(open(runs), delimiter="\t"))
cells = {}
for r in rows:
    cells.setdefault((r["mode"], int(r["conns"]), r["side"]), []).append(r)
med = lambda rs, f: statistics.median(float(r[f]) for r in rs)
modes = list(dict.fromkeys(r["mode"] for r in rows))
lines = [
    "<!-- generated by experiments/001/preprocess.sh -->",
    f"Commit {rev}. {machine}; each page server one worker pinned to a core, wrk (1 thread) on the other;"
    f" {reps} interleaved runs of {duration} per cell, every run in `preprocess-runs.tsv`.",
    "",
    "| directory | page bytes: file / processed |",
    "|---|---|",
]
for m in modes:
    p, q = size[m]
    lines.append(f"| {m} | {p:,} / {q:,} (+{(q - p) / p:.1%}) |")
lines += [
    "",
    "Loopback:",
    "",
    "| directory | conns | server | req/s (median; min–max) | server CPU µs/request | p50 / p99 ms | req/s vs plain |",
    "|---|---|---|---|---|---|---|",
]
for m in modes:
    for c in sorted({k[1] for k in cells if k[0] == m}):
        base = med(cells[(m, c, "plain")], "req_per_s")
        for side in ["plain", "processed", "cached"]:
            rs = cells[(m, c, side)]
            rps = [float(r["req_per_s"]) for r in rs]
            lines.append(
                f"| {m} | {c} | {side} | {statistics.median(rps):,.0f}; {min(rps):,.0f}–{max(rps):,.0f} |"
                f" {med(rs, 'cpu_us_per_req'):.1f} | {med(rs, 'p50_ms'):.2f} / {med(rs, 'p99_ms'):.2f} |"
                f" {statistics.median(rps) / base:.3f} |")
lines.append("")
for m in modes:
    for c in sorted({k[1] for k in cells if k[0] == m}):
        plain = med(cells[(m, c, "plain")], "cpu_us_per_req")
        processed = med(cells[(m, c, "processed")], "cpu_us_per_req")
        ratios = [float(a["req_per_s"]) / float(b["req_per_s"])
                  for a, b in zip(sorted(cells[(m, c, "cached")], key=lambda r: r["rep"]),
                                  sorted(cells[(m, c, "plain")], key=lambda r: r["rep"]))]
        lines.append(
            f"- {m}, {c} connections: rewriting costs {processed - plain:.0f} µs of server CPU per page;"
            f" cached vs plain, run by run: {', '.join(f'{x:.3f}' for x in ratios)}.")
wrows = list(csv.DictReader(open(wan), delimiter="\t"))
lines += [
    "",
    f"Over an emulated WAN link (Toxiproxy: {lat} ms each way, {int(rate) * 8 / 1000:g} Mbit/s down), one fetch at a time"
    " on a fresh connection, every fetch in `preprocess-wan.tsv`:",
    "",
    "| directory | server | fetches | first byte ms (median) | page served ms (median; min–max) | vs plain |",
    "|---|---|---|---|---|---|",
]
for m in modes:
    base = statistics.median(float(r["total_ms"]) for r in wrows if r["mode"] == m and r["side"] == "plain")
    for side in ["plain", "processed", "cached"]:
        rs = [r for r in wrows if r["mode"] == m and r["side"] == side]
        t = [float(r["total_ms"]) for r in rs]
        lines.append(
            f"| {m} | {side} | {len(rs)} | {med(rs, 'first_byte_ms'):.1f} | {statistics.median(t):.1f}; {min(t):.1f}–{max(t):.1f} |"
            f" {statistics.median(t) / base - 1:+.1%} |")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
