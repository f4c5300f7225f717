#!/usr/bin/env bash
# Backs docs/experiments/003-network-impacts.md's ns2 columns. Runs slipstream's simulator and
# Debian's ns2 on the same transfers -- ns2 runs the script `slipstream sim --export-ns2` writes
# for each scenario, plus the reference model crates/slipstream-sim/tests/it/ns2/proxyhier.tcl -- compares
# every pair with `slipstream sim compare` (ns2 as A, slipstream as B), and prints, teeing the
# output to docs/experiments/003/ns2-compare.txt:
#   1. Tables 3 and 5 (seed 1, 40 req/s, 5,000 transfers): per-source mean latency of ns2 and
#      slipstream in the paper's ns-2 era (2.26, handshake) and with Debian's defaults (2.35, no
#      handshake), with the transfers identical within 2 us;
#   2. the figure panels (experiments/003/figures.toml): one line per panel, means and identical count;
#   3. the baseline against the reference model itself (its own workload, 10 req/s, 5,000 transfers);
#   4. speed in this session: the baseline scenario (median whole-process wall and cpu time of 5 runs
#      each; packet-trace events per second, counted the same way on both sides) and the whole
#      Table 1 factorial (192 runs; ns2 two at a time), wall and cpu time;
#   5. congested agreement (80 req/s, seeds 1-6): per-seed KS distances and means, then pooled over
#      the seeds for ns2 vs slipstream, ns2 vs ns2 with another default-RNG seed (the noise floor),
#      and ns2 (export) vs the reference model (whose reused agents keep windowInit_ = 1 after loss).
# Needs Debian's ns2 (apt-get install ns2) and python3 (format glue only). About 2.5 minutes on 2
# cores, most of it ns2 running the Table 1 factorial. The timings assume an otherwise idle machine.
# SLIPSTREAM=path overrides the binary (default target/release/slipstream, built if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v ns >/dev/null || { echo "ns2's 'ns' is not on PATH: apt-get install ns2" >&2; exit 1; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 1; }
# REF=path runs another copy of the reference model (e.g. one in ../shared/reference/ns2/).
REF=${REF:-crates/slipstream-sim/tests/it/ns2/proxyhier.tcl}
[ -f "$REF" ] || { echo "reference model not found at $REF (set REF=...)" >&2; exit 1; }
REF=$(realpath "$REF")
B=${SLIPSTREAM:-target/release/slipstream}
if [ ! -x "$B" ]; then
  [ -z "${SLIPSTREAM:-}" ] || { echo "SLIPSTREAM=$B is not executable" >&2; exit 1; }
  cargo build --release --locked -p slipstream
fi
B=$(realpath "$B")
DOCS=docs/experiments/003
mkdir -p "$DOCS"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# Run a snapshot of the binary, so that a rebuild during the run cannot mix two versions.
BUILT=$(date -u -r "$B" '+%Y-%m-%d %H:%M UTC')
cp "$B" "$W/slipstream"
B=$W/slipstream

# ------------------------------------------------------------------ glue
# Wrapper that re-seeds ns-2's default RNG (only the per-connection TCP clock phase, boot_time_).
cat > "$W/reseed.tcl" <<'TCL'
global defaultRNG argv
$defaultRNG seed $env(NS_DEFAULT_SEED)
source $env(SCRIPT)
TCL

# glue.py MODE ...: format `sim compare` output (on stdin) or convert files.
cat > "$W/glue.py" <<'PY'
import re, statistics, sys

def parse(text):
    """`sim compare` output -> (summary line fields, {source: row})."""
    head, rows = None, {}
    for line in text.splitlines():
        m = re.match(r'(\d+) transfers in both; (\d+) finish within .* of each other; '
                     r'largest difference ([\d.]+) ms', line)
        if m:
            head = (int(m[1]), int(m[2]), m[3])
            continue
        m = re.match(r'(all|child|parent|origin)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+'
                     r'([+-][\d.]+%)\s+([\d.]+)\s+([\d.]+)(?:\s+differ)?\s*$', line)
        if m:
            rows[m[1]] = dict(na=int(m[2]), nb=int(m[3]), ma=m[4], mb=m[5], pct=m[6], d=m[7], crit=m[8])
    if head is None or 'all' not in rows:
        sys.exit('cannot parse sim compare output:\n' + text)
    return head, rows

SRC = ('all', 'child', 'parent', 'origin')
def means(rows, key):
    return '  '.join(rows[s][key] if s in rows else '   -  ' for s in SRC)

mode, args = sys.argv[1], sys.argv[2:]
if mode == 'ref2csv':  # reference-model results -> transfers.csv columns
    name = {'1': 'child', '2': 'parent', '3': 'origin'}
    with open(args[1], 'w') as out:
        out.write('id,source,size_bytes,start_s,end_s,latency_s,segments,retransmissions\n')
        for line in open(args[0]):
            if line.startswith('#') or not line.strip():
                continue
            i, src, size, npk, start, trx, tack, lrx, lack, nrx = line.split()
            out.write(f'{i},{name[src]},{size},{start},{trx},{lrx},{npk},{nrx}\n')
elif mode == 'pool':  # OUT SEED:FILE ...: one CSV, ids made unique as seed*100000+id
    with open(args[0], 'w') as out:
        out.write('id,source,size_bytes,start_s,end_s,latency_s,segments,retransmissions\n')
        for spec in args[1:]:
            seed, path = spec.split(':', 1)
            for n, line in enumerate(open(path)):
                if n == 0:
                    continue
                i, rest = line.split(',', 1)
                out.write(f'{int(seed) * 100000 + int(i)},{rest}')
elif mode == 'median':
    print(f'{statistics.median(float(a) for a in args):.3f}')
else:
    (n, same, largest), rows = parse(sys.stdin.read())
    label = args[0]
    agree = f'identical {same}/{n}, largest difference {largest} ms'
    if mode == 'case':  # two lines: ns2 means, slipstream means + agreement
        print(f'{label:<26} ns2         {means(rows, "ma")}')
        print(f'{"":<26} slipstream  {means(rows, "mb")}   all {rows["all"]["pct"]:>6}; {agree}')
    elif mode == 'panel':
        print(f'{label:<22} ns2 {means(rows, "ma")} | slipstream {means(rows, "mb")} | identical {same}/{n}')
    elif mode == 'agree':
        print(f'{label}{agree}')
    elif mode == 'ks':  # one line per source: KS against its critical value, means
        a, b = args[1], args[2]
        for s in SRC:
            if s not in rows:
                continue
            r = rows[s]
            verdict = 'ok' if float(r['d']) <= float(r['crit']) else 'EXCEEDS'
            print(f'{label:<12} {s:<7} n={r["na"]:>5}/{r["nb"]:<5} KS D {r["d"]} (5 % critical {r["crit"]}, '
                  f'{verdict:<7})  mean {a} {r["ma"]}  {b} {r["mb"]}  ({r["pct"]})')
        print(f'{"":<12} {agree}')
    else:
        sys.exit(f'unknown mode {mode}')
PY
glue() { python3 "$W/glue.py" "$@"; }
now() { date +%s.%N; }
measure() { # COMMAND... -> "wall cpu" seconds (cpu = user + sys, children included); output discarded
  local TIMEFORMAT='%R %U %S' t
  t=$( { time "$@" >/dev/null 2>&1; } 2>&1 )
  set -- $t
  python3 -c "print(f'$1 {$2 + $3:.3f}')"
}
since() { python3 -c "print(f'{$(now) - $1:.3f}')"; }
compare() { "$B" sim compare "$1" "$2"; }   # A B -> sim compare's table
scenario() { # FILE seed era syn rate c1 child parent threshold
  {
    echo "seed = $2"
    echo '[topology]'; echo "capacity = [\"$6\", \"10Mb\", \"10Mb\"]"
    echo '[tcp]'; echo "era = \"$3\""; echo "syn = $4"
    echo '[workload]'; echo "rate = $5"; echo 'transfers = 5000'
    echo '[hits]'; echo "child = $7"; echo "parent = $8"
    [ "$9" = none ] || echo "size_threshold = \"$9\""
  } > "$1"
}
# both_engines TOML DIR: slipstream -> DIR/ours/transfers.csv, exported script in ns2 -> DIR/ns.csv
both_engines() {
  mkdir -p "$2"
  "$B" sim "$1" --out "$2/ours" --export-ns2 "$2/ns.tcl" --dump-workload "$2/workload.txt" >/dev/null 2>&1
  (cd "$2" && ns ns.tcl out=ns.csv >/dev/null)
}

main() {
echo "ns2 vs slipstream -- experiments/003/ns2-compare.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "slipstream $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo ' + uncommitted changes') (binary built $BUILT), ns $(dpkg-query -W -f '${Version}' ns2 2>/dev/null || echo '?'), $(nproc) cores"
echo "Every comparison is \`slipstream sim compare\` with ns2 as A and slipstream as B; means in s;"
echo "identical = transfers whose latencies agree within 2 us."

echo
echo "== 1. Tables 3 and 5: 5,000 transfers, 40 req/s, seed 1; mean latency (s)"
for era in 2.26 2.35; do
  if [ $era = 2.26 ]; then syn=true; else syn=false; fi
  echo "-- era $era, syn = $syn$([ $era = 2.26 ] && echo ' (the paper'"'"'s ns-2)' || echo " (Debian's ns-2.35 defaults)")"
  printf '%-26s %-11s %-6s  %-6s  %-6s  %-6s\n' case engine all child parent origin
  while read -r -u 3 label c1 hr1 hr2 th; do
    d="$W/t/$era-$(echo "$label" | tr -c 'A-Za-z0-9=\n' _)"
    scenario "$W/s.toml" 1 $era $syn 40 "$c1" "$hr1" "$hr2" "$th"
    both_engines "$W/s.toml" "$d"
    compare "$d/ns.csv" "$d/ours/transfers.csv" | glue case "${label//_/ }"
  done 3<<'CASES'
T3_good_40/15 10Mb 0.40 0.15 none
T3_average_30/10 10Mb 0.30 0.10 none
T3_poor_20/7 10Mb 0.20 0.07 none
T5_default_C1=10Mb 10Mb 0.40 0.15 none
T5_threshold_8KB_C1=10Mb 10Mb 0.40 0.15 8KiB
T5_default_C1=100Mb 100Mb 0.40 0.15 none
T5_threshold_8KB_C1=100Mb 100Mb 0.40 0.15 8KiB
CASES
done

echo
echo "== 2. Figure panels (experiments/003/figures.toml, era 2.35, 5,000 transfers each)"
echo "   mean latency all child parent origin (s)"
"$B" sim design experiments/003/figures.toml --out "$W/figures" >/dev/null 2>&1
for run in "$W"/figures/runs/*/; do
  name=$(basename "$run")
  "$B" sim "$run/scenario.toml" --export-ns2 "$run/ns.tcl" >/dev/null 2>&1
  (cd "$run" && ns ns.tcl out=ns.csv >/dev/null)
  compare "$run/ns.csv" "$run/transfers.csv" | glue panel "$name"
done

echo
echo "== 3. Baseline against the reference model (proxyhier.tcl): era 2.35, 10 req/s, 5,000 transfers,"
echo "   the reference's own workload (seed 1), replayed by \`slipstream sim replay\`"
mkdir -p "$W/base"
(cd "$W/base" && ns "$REF" n=5000 rate=10 seed=1 dump=w.txt out=ref.out >/dev/null)
"$B" sim replay "$W/base/w.txt" --out "$W/base/ours.out" 2>/dev/null
glue ref2csv "$W/base/ref.out" "$W/base/ref.csv"
glue ref2csv "$W/base/ours.out" "$W/base/ours.csv"
compare "$W/base/ref.csv" "$W/base/ours.csv" | glue agree "reference vs slipstream replay: "
echo "   (the reference prints times to 1 us, so up to ~1 us of each difference is rounding)"

echo
echo "== 4. Speed, both engines in this session (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
echo "   wall = whole-process elapsed time; cpu = user + sys of the process and its children (less"
echo "   sensitive than wall time to other work on the machine; the load averages show any)"
echo "-- (a) baseline scenario (experiments/003/baseline.toml), median of 5 runs each"
mkdir -p "$W/speed"
"$B" sim experiments/003/baseline.toml --export-ns2 "$W/speed/base.tcl" \
  --dump-workload "$W/speed/w.txt" >/dev/null 2>&1
ours_w=(); ours_c=(); ns_w=(); ns_c=()
for rep in 1 2 3 4 5; do
  read -r w c < <(measure "$B" sim experiments/003/baseline.toml --out "$W/speed/ours$rep")
  ours_w+=("$w"); ours_c+=("$c")
  read -r w c < <(measure ns "$W/speed/base.tcl" out="$W/speed/ns$rep.csv")
  ns_w+=("$w"); ns_c+=("$c")
done
ours_wm=$(glue median "${ours_w[@]}"); ours_cm=$(glue median "${ours_c[@]}")
ns_wm=$(glue median "${ns_w[@]}"); ns_cm=$(glue median "${ns_c[@]}")
echo "slipstream wall ${ours_w[*]} s -> median $ours_wm s;  cpu ${ours_c[*]} s -> median $ours_cm s"
echo "ns2        wall ${ns_w[*]} s -> median $ns_wm s;  cpu ${ns_c[*]} s -> median $ns_cm s"
compare "$W/speed/ns1.csv" "$W/speed/ours1/transfers.csv" | glue agree "ns2 vs slipstream on these runs: "
# Packet-trace events, counted the same way on both sides. ns-2 writes + - r d; slipstream's
# trace (sim replay --trace) writes + - d only, so r lines are left out of both counts.
ns "$W/speed/base.tcl" out="$W/speed/traced.csv" trace="$W/speed/ns.tr" >/dev/null
"$B" sim replay "$W/speed/w.txt" --trace "$W/speed/ours.tr" --out "$W/speed/replay.out" >/dev/null 2>&1
count() { # TRACE -> "plus minus r d" line counts
  awk '{ c[$1]++ } END { printf "%d %d %d %d\n", c["+"], c["-"], c["r"], c["d"] }' "$1"
}
read -r ns_p ns_m ns_r ns_d < <(count "$W/speed/ns.tr")
read -r ours_p ours_m ours_r ours_d < <(count "$W/speed/ours.tr")
ns_ev=$((ns_p + ns_m + ns_d)); ours_ev=$((ours_p + ours_m + ours_d))
echo "trace lines  ns2: + $ns_p  - $ns_m  r $ns_r  d $ns_d;  slipstream: + $ours_p  - $ours_m  r $ours_r  d $ours_d"
echo "slipstream's trace has no r lines: events = + - d lines on both sides (ns2 $ns_ev, slipstream $ours_ev)"
echo "slipstream's own event count (summary.json \"events\", its queue's events): $(python3 -c "import json; print(json.load(open('$W/speed/ours1/summary.json'))['events'])")"
python3 - "$ns_ev" "$ns_wm" "$ns_cm" "$ours_ev" "$ours_wm" "$ours_cm" <<'PY'
import sys
ne, nw, nc, oe, ow, oc = int(sys.argv[1]), *map(float, sys.argv[2:4]), int(sys.argv[4]), *map(float, sys.argv[5:7])
print(f"events/s over the untraced median wall time: ns2 {ne / nw / 1e6:.3f} M/s, slipstream {oe / ow / 1e6:.3f} M/s "
      f"({(oe / ow) / (ne / nw):.1f}x)")
print(f"events/s over the untraced median cpu time:  ns2 {ne / nc / 1e6:.3f} M/s, slipstream {oe / oc / 1e6:.3f} M/s "
      f"({(oe / oc) / (ne / nc):.1f}x)")
PY

echo "-- (b) Table 1 factorial (experiments/003/table1.toml, 192 runs x 5,000 transfers; load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
read -r ours_w ours_c < <(measure "$B" sim design experiments/003/table1.toml --out "$W/table1")
runs=("$W"/table1/runs/*/)
for run in "${runs[@]}"; do "$B" sim "$run/scenario.toml" --export-ns2 "$run/ns.tcl" >/dev/null 2>&1; done
printf '%s\0' "${runs[@]}" > "$W/runs.lst"
read -r ns_w ns_c < <(measure xargs -0 -P 2 -n 1 -a "$W/runs.lst" sh -c 'cd "$1" && ns ns.tcl out=ns.csv' sh)
same=0; total=0; whole=0
for run in "${runs[@]}"; do
  read -r n s < <(compare "$run/ns.csv" "$run/transfers.csv" | sed -n 's/^\([0-9]*\) transfers in both; \([0-9]*\) finish.*/\1 \2/p')
  total=$((total + n)); same=$((same + s)); [ "$n" != "$s" ] || whole=$((whole + 1))
done
python3 - "${#runs[@]}" "$ours_w" "$ours_c" "$ns_w" "$ns_c" <<'PY'
import sys
n, ow, oc, nw, nc = int(sys.argv[1]), *map(float, sys.argv[2:])
print(f"slipstream sim design (2 threads): wall {ow:.3f} s ({ow / n:.4f} s per run), cpu {oc:.3f} s ({oc / n:.4f} s per run)")
print(f"ns2 on the exported scripts, xargs -P 2: wall {nw:.3f} s ({nw / n:.4f} s per run), cpu {nc:.3f} s ({nc / n:.4f} s per run)")
print(f"ratio ns2/slipstream over {n} runs: wall {nw / ow:.1f}x, cpu {nc / oc:.1f}x")
PY
echo "(agreement over the factorial: $same of $total transfers identical; $whole of ${#runs[@]} runs identical throughout)"
echo "(load average after the timings: $(cut -d' ' -f1-3 /proc/loadavg))"

echo
echo "== 5. Congested agreement: era 2.35, 80 req/s, 5,000 transfers, seeds 1-6"
echo "-- per seed, ns2 (exported script) vs slipstream"
pool_ns=(); pool_ours=(); pool_ns99=(); pool_ref=()
for seed in 1 2 3 4 5 6; do
  d="$W/c$seed"
  scenario "$W/s.toml" $seed 2.35 false 80 10Mb 0.40 0.15 none
  both_engines "$W/s.toml" "$d"
  (cd "$d" && SCRIPT=ns.tcl NS_DEFAULT_SEED=99 ns "$W/reseed.tcl" out=ns99.csv >/dev/null)
  (cd "$d" && ns "$REF" workload=workload.txt out=ref.out >/dev/null)
  glue ref2csv "$d/ref.out" "$d/ref.csv"
  compare "$d/ns.csv" "$d/ours/transfers.csv" | glue ks "seed $seed" ns2 slipstream
  pool_ns+=("$seed:$d/ns.csv"); pool_ours+=("$seed:$d/ours/transfers.csv")
  pool_ns99+=("$seed:$d/ns99.csv"); pool_ref+=("$seed:$d/ref.csv")
done
glue pool "$W/pool-ns.csv" "${pool_ns[@]}"; glue pool "$W/pool-ours.csv" "${pool_ours[@]}"
glue pool "$W/pool-ns99.csv" "${pool_ns99[@]}"; glue pool "$W/pool-ref.csv" "${pool_ref[@]}"
echo "-- pooled over the 6 seeds (30,000 transfers)"
echo "ns2 vs slipstream:"
compare "$W/pool-ns.csv" "$W/pool-ours.csv" | glue ks pooled ns2 slipstream
echo "ns2 vs ns2 with NS_DEFAULT_SEED=99 (only the TCP clock phase differs: the noise floor):"
compare "$W/pool-ns.csv" "$W/pool-ns99.csv" | glue ks pooled ns2 ns2/99
echo "ns2 (export, windowInit_ restored on reuse) vs the reference model (reused agents keep windowInit_ 1 after loss):"
compare "$W/pool-ns.csv" "$W/pool-ref.csv" | glue ks pooled export reference
}

start=$(now)
main | tee "$W/report.txt"
echo "total run time $(since "$start") s" | tee -a "$W/report.txt"
cp "$W/report.txt" "$DOCS/ns2-compare.txt"
echo "wrote $DOCS/ns2-compare.txt" >&2
