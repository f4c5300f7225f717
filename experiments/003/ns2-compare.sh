#!/usr/bin/env bash
# Backs docs/experiments/003-network-impacts.md's ns2 columns: runs Debian's ns2 on the
# reference model (../shared/reference/ns2/proxyhier.tcl) and slipstream on the *same*
# transfers, and prints
#   1. Tables 3 and 5 (ns-2.26 timers, handshake, 40 req/s): mean latency per source, both engines;
#   2. the baseline (ns-2.35, 10 req/s, 5,000 transfers): transfers identical within 2 us, the
#      largest difference, and each engine's wall time;
#   3. the heavy load (80 req/s, seeds 1-3): per source, the two-sample KS distance against its
#      5 % critical value and the difference of the means.
# Needs: apt-get install ns2. About 40 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
REF=${REF:-../shared/reference/ns2/proxyhier.tcl}
[ -f "$REF" ] || { echo "reference model not found at $REF (set REF=...)" >&2; exit 1; }
command -v ns >/dev/null || { echo "needs Debian's ns2: apt-get install ns2" >&2; exit 1; }
B=target/release/slipstream
[ -x "$B" ] || cargo build --release --locked -p slipstream
REF=$(realpath "$REF")
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

means() { # reference-format results file -> "all child parent origin" mean lat_rx
  python3 - "$1" <<'PY'
import sys
g = {}
for line in open(sys.argv[1]):
    if line.startswith('#') or not line.strip():
        continue
    f = line.split()
    for k in (f[1], 'all'):
        g.setdefault(k, []).append(float(f[7]))
m = lambda k: sum(g.get(k, [0])) / max(1, len(g.get(k, [])))
print(f"all {m('all'):.4f}  child {m('1'):.4f}  parent {m('2'):.4f}  origin {m('3'):.4f}")
PY
}

echo "== Tables 3 and 5: era 2.26, handshake, 40 req/s, seed 1 (mean latency, s)"
case_run() { # label c1 child parent threshold
  local label=$1 c1=$2 hr1=$3 hr2=$4 th=$5
  {
    echo 'seed = 1'
    echo '[topology]'; echo "capacity = [\"$c1\", \"10Mb\", \"10Mb\"]"
    echo '[tcp]'; echo 'era = "2.26"'; echo 'syn = true'
    echo '[workload]'; echo 'rate = 40'
    echo '[hits]'; echo "child = $hr1"; echo "parent = $hr2"
    [ "$th" = none ] || echo "size_threshold = \"$th\""
  } > "$W/s.toml"
  "$B" sim "$W/s.toml" --dump-workload "$W/w.txt" >/dev/null 2>&1
  "$B" sim replay "$W/w.txt" --era 2.26 --syn --c1 "$c1" --out "$W/ours.out" 2>/dev/null
  (cd "$W" && ns "$REF" workload="$W/w.txt" era=2.26 syn=1 c1="$c1" out="$W/ns.out" >/dev/null 2>&1)
  printf '%-28s slipstream  %s\n' "$label" "$(means "$W/ours.out")"
  printf '%-28s ns2         %s\n' "" "$(means "$W/ns.out")"
}
case_run "T3 good 40/15" 10Mb 0.40 0.15 none
case_run "T3 average 30/10" 10Mb 0.30 0.10 none
case_run "T3 poor 20/7" 10Mb 0.20 0.07 none
case_run "T5 default C1=10Mb" 10Mb 0.40 0.15 none
case_run "T5 threshold C1=10Mb" 10Mb 0.40 0.15 8KB
case_run "T5 default C1=100Mb" 100Mb 0.40 0.15 none
case_run "T5 threshold C1=100Mb" 100Mb 0.40 0.15 8KB

echo "== Baseline, era 2.35, 10 req/s, 5,000 transfers (ns2's workload, seed 1)"
start=$(date +%s.%N)
(cd "$W" && ns "$REF" n=5000 rate=10 seed=1 dump="$W/base.txt" out="$W/base.ns" >/dev/null 2>&1)
ns_wall=$(python3 -c "print(round($(date +%s.%N) - $start, 3))")
start=$(date +%s.%N)
"$B" sim replay "$W/base.txt" --out "$W/base.ours" 2>/dev/null
ours_wall=$(python3 -c "print(round($(date +%s.%N) - $start, 3))")
python3 - "$W/base.ns" "$W/base.ours" <<'PY'
import sys
load = lambda p: {l.split()[0]: float(l.split()[7]) for l in open(p) if not l.startswith('#') and l.strip()}
a, b = load(sys.argv[1]), load(sys.argv[2])
diffs = [abs(a[k] - b[k]) for k in a if k in b]
print(f"transfers compared {len(diffs)}, identical within 2 us {sum(d < 2e-6 for d in diffs)}, "
      f"largest difference {max(diffs) * 1000:.2f} ms")
PY
echo "wall time (whole process, one run each): ns2 ${ns_wall} s, slipstream ${ours_wall} s"

echo "== Heavy load, era 2.35, 80 req/s, 5,000 transfers: per-source latency distributions"
for seed in 1 2 3; do
  (cd "$W" && ns "$REF" n=5000 rate=80 seed=$seed dump="$W/c.txt" out="$W/c.ns" >/dev/null 2>&1)
  "$B" sim replay "$W/c.txt" --out "$W/c.ours" 2>/dev/null
  python3 - "$W/c.ns" "$W/c.ours" "$seed" <<'PY'
import bisect, sys
def load(p):
    g = {}
    for line in open(p):
        if line.startswith('#') or not line.strip():
            continue
        f = line.split()
        g.setdefault(f[1], []).append(float(f[7]))
    return g
a, b = load(sys.argv[1]), load(sys.argv[2])
for src in sorted(a):
    x, y = sorted(a[src]), sorted(b[src])
    d = max(abs(bisect.bisect_right(x, v) / len(x) - bisect.bisect_right(y, v) / len(y)) for v in set(x) | set(y))
    crit = 1.358 * ((len(x) + len(y)) / (len(x) * len(y))) ** 0.5
    mx, my = sum(x) / len(x), sum(y) / len(y)
    print(f"seed {sys.argv[3]} source {src}: n={len(x)} KS D={d:.4f} (5 % critical {crit:.4f}) "
          f"mean ns2 {mx:.4f} slipstream {my:.4f} ({100 * (my / mx - 1):+.1f} %)")
PY
done
