#!/usr/bin/env bash
# Reproduces docs/experiments/002-adaptive-cache.md: the cache figures by trace replay, the
# cache on/off throughput, and the nginx comparison. Needs nginx-light, wrk and curl
# (apt-get install nginx-light wrk curl). About 7 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p slipstream
target/release/slipstream experiment paper002 --out docs/experiments/002
experiments/002/throughput.sh
experiments/002/nginx.sh
