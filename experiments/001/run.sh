#!/usr/bin/env bash
# Reproduces docs/experiments/001-webpp.md: paper 001's live experiment (Web++, Figs. 11-14) on
# loopback. Builds the release binary and runs `slipstream experiment webpp`, which starts three
# replica servers, nine WAN-emulating relays and twelve client lanes in one process and writes
# results.json, results.md, requests.csv and the SVG charts into docs/experiments/001/.
# About 7 minutes on 2 cores: the build, then one compressed day of 6 minutes. Other load on the
# machine (a compiler) shows up in the response times; run it on an otherwise idle machine.
# Extra arguments go to the command (e.g. --seed 2, --day-secs 720).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p slipstream
B=${CARGO_TARGET_DIR:-target}/release/slipstream
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || COMMIT="$COMMIT+changes"
"$B" experiment webpp --out docs/experiments/001 --seed 1 --label "commit $COMMIT" "$@"
# Every logical request is a row of requests.csv (about 60,000 rows); kept compressed.
gzip -9f docs/experiments/001/requests.csv
