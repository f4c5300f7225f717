#!/usr/bin/env bash
# The sensitivity runs docs/experiments/001-webpp.md quotes besides the main one: the same day
# (seed 1) with Refresh's F cut to one hour of the compressed day, with its TTL stretched to the
# whole day, and the main configuration under a second seed. About 19 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p slipstream
B=${CARGO_TARGET_DIR:-target}/release/slipstream
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || COMMIT="$COMMIT+changes"
run() {
  local dir=docs/experiments/001/$1
  shift
  "$B" experiment webpp --out "$dir" --label "commit $COMMIT" "$@"
  gzip -9f "$dir/requests.csv"
}
run f-1h --seed 1 --f-hours 1
run ttl-day --seed 1 --ttl-minutes 1440
run seed-2 --seed 2
