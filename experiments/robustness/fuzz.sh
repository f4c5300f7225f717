#!/usr/bin/env bash
# Runs every fuzz target (the `fuzz` test files, proptest on the stable toolchain) in release
# mode for SECONDS each, one at a time, and writes docs/experiments/robustness/fuzz.txt: target,
# cases, seconds, crashes. A crash is a failing target; its shrunk input is in the log.
#   experiments/robustness/fuzz.sh            # 60 s per target
#   SECONDS_PER_TARGET=10 experiments/robustness/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${SECONDS_PER_TARGET:-60}
out=docs/experiments/robustness/fuzz.txt
log=target/fuzz.log
mkdir -p "$(dirname "$out")" target
: >"$log"

# (package, cargo test selector, name filter)
suites=(
  "slipstream-http-rules|--test fuzz|"
  "slipstream-http-rules|--lib|rfc9111::fuzz::"
  "slipstream-units|--test fuzz|"
  "slipstream-workload|--test fuzz|"
  "slipstream-sim|--test fuzz|"
  "slipstream-node|--test fuzz|"
  "slipstream-replica|--test fuzz|"
)

rows=()
total_crashes=0
for suite in "${suites[@]}"; do
  IFS='|' read -r pkg sel filter <<<"$suite"
  # shellcheck disable=SC2086 # the selector is two words
  cargo test --locked --release -q -p "$pkg" $sel --no-run 2>>"$log"
  # shellcheck disable=SC2086
  targets=$(cargo test --locked --release -q -p "$pkg" $sel -- --list 2>>"$log" |
    sed -n 's/: test$//p' | grep -F "$filter")
  if [ "$sel" = "--lib" ]; then
    targets=$(grep -F "$filter" <<<"$targets")
  fi
  for t in $targets; do
    echo "== $pkg $t (${secs}s)" | tee -a "$log"
    crashes=0
    # shellcheck disable=SC2086
    if ! SLIPSTREAM_FUZZ_SECONDS=$secs cargo test --locked --release -q -p "$pkg" $sel \
      -- --exact "$t" --nocapture --test-threads 1 >>"$log" 2>&1; then
      crashes=1
      total_crashes=$((total_crashes + 1))
    fi
    result=$(grep "^fuzz-result ${t##*::} " "$log" | tail -1 || true)
    cases=$(awk '{print $3}' <<<"$result")
    took=$(awk '{print $4}' <<<"$result")
    rows+=("$(printf '%-24s %-60s %10s %8s %7s' "$pkg" "${t##*::}" "${cases:--}" "${took:--}" "$crashes")")
  done
done

{
  echo "# experiments/robustness/fuzz.sh at $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# ${secs} s per target, release build, $(nproc) cores shared with other builds; rustc $(rustc --version | cut -d' ' -f2)"
  echo "# cases: inputs generated and checked (batches of 512); crashes: 1 if the target failed"
  printf '%-24s %-60s %10s %8s %7s\n' crate target cases seconds crashes
  printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
[ "$total_crashes" -eq 0 ]
