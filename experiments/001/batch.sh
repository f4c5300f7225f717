#!/usr/bin/env bash
# Paper 001 (Web++) §3.4, batch resource transmission: one page and its embedded resources in a
# single response, against HTTP/1.1 with 6 and 4 connections and HTTP/2 (h2c) to the same
# `slipstream serve`, over an emulated fast and slow link. Writes docs/experiments/001/batch-runs.tsv
# (every load), batch-results.md (the table docs/experiments/001-batch.md quotes) and batch.svg.
#
# Chain, all on loopback: loader -> shaper (batch.mjs: one shared bandwidth queue per direction,
# one round trip per new connection) -> Toxiproxy (latency toxic each way) -> slipstream serve.
#
# Environment: BIN (default target/release/slipstream, built if missing), TOXIPROXY_BIN (default
# target/tools/toxiproxy-server, from scripts/install-toxiproxy), REPS (loads per loader per cell,
# default 15), REPS_SLOW (same on the slow link, default REPS), LINKS (fast,slow), RESOURCE_KB
# (8,40), RESOURCES (30), PAGE_BYTES (30720), LOADERS, OUT, TIME_LIMIT (seconds, default 3000),
# SUMMARY_ONLY=1 (rebuild the table and chart from OUT/batch-runs.tsv without measuring).
# With the defaults it takes about 17 minutes, most of it the 1.2 MB page on the 1 Mbit/s link.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${BIN:-}" ]; then
  BIN=${CARGO_TARGET_DIR:-target}/release/slipstream
  [ -x "$BIN" ] || cargo build --release --locked -p slipstream
fi
TOXIPROXY_BIN=${TOXIPROXY_BIN:-target/tools/toxiproxy-server}
[ -x "$TOXIPROXY_BIN" ] || { echo "no Toxiproxy at $TOXIPROXY_BIN: run ./scripts/install-toxiproxy or set TOXIPROXY_BIN" >&2; exit 1; }
command -v node >/dev/null || { echo "node (18 or newer) is needed" >&2; exit 1; }

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- crates Cargo.toml Cargo.lock 2>/dev/null || COMMIT="$COMMIT+changes"
export BIN TOXIPROXY_BIN LABEL="slipstream at commit $COMMIT, $(nproc) cores, node $(node --version)"
exec timeout --kill-after=10 "${TIME_LIMIT:-3000}" node experiments/001/batch.mjs run
