# Shared by the paper 002 experiment scripts: binary, output paths, and waiting for a port.
BIN=${BIN:-target/release/slipstream}
OUT=${OUT:-docs/experiments/002}
WORK=${WORK:-/tmp/slipstream-002}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
mkdir -p "$OUT" "$WORK"

# Waits until something answers HTTP on 127.0.0.1:$1 (bounded: 100 tries).
wait_port() {
  for _ in $(seq 100); do
    if curl -s -o /dev/null "http://127.0.0.1:$1/"; then return 0; fi
    sleep 0.1
  done
  echo "nothing answered on port $1" >&2
  return 1
}

# Median of the throughput_rps fields of JSON reports given as arguments.
median_rps() {
  python3 - "$@" <<'PY'
import json, statistics, sys
print(round(statistics.median(json.load(open(f))["throughput_rps"] for f in sys.argv[1:]), 1))
PY
}

machine() {
  echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r)"
}
