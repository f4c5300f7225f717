#!/usr/bin/env bash
# Paper 000 Fig. 13 in Chromium, every condition in two series, then the report: the Fig. 13
# section of docs/experiments/000-nps.md and the charts docs/experiments/000-pages-*.svg.
# Method: docs/experiments/000-pages.md. Needs root (loaded-server: a cgroup for each server's
# CPU limit; loaded-network: a network namespace and tc), Chromium, Toxiproxy, playwright-core.
#
#   sudo ./experiments/000/fig13.sh              # about 1.5 hours on a 2-core machine
#   CONDITIONS="loaded-network" sudo -E ./experiments/000/fig13.sh
#   REPORT_ONLY=1 ./experiments/000/fig13.sh     # the report from the JSON files already written
set -euo pipefail
cd "$(dirname "$0")/../.."
CONDITIONS=${CONDITIONS:-"spare loaded-server loaded-network"}
SERIES=${SERIES:-1,2}
if [ "${REPORT_ONLY:-0}" != 1 ]; then
  [ -x target/tools/toxiproxy-server ] || ./scripts/install-toxiproxy
  [ -d web/browser/node_modules/playwright-core ] || (cd web/browser && npm ci)
  cargo build --release --locked -p slipstream
  for c in $CONDITIONS; do
    case $c in
      spare) sessions=16 ;;
      loaded-server) sessions=12 ;;
      loaded-network) sessions=6 ;;
      *) echo "unknown condition $c (spare, loaded-server, loaded-network)" >&2; exit 2 ;;
    esac
    node experiments/000/pages.mjs --bin target/release/slipstream --condition "$c" --series "$SERIES" --sessions "$sessions"
  done
fi
node experiments/000/pages.mjs --report
