#!/usr/bin/env bash
# Runs the HTTP cache test suite (cache-tests.fyi, npm package http-cache-tests) against
# `slipstream proxy` and prints the required checks passed, failed, and not applicable.
# The suite's server is the origin; the proxy is a reverse proxy in front of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/slipstream}
WORK=${WORK:-/tmp/slipstream-cache-tests}
ORIGIN=18700 PROXY=18701
[ -x "$BIN" ] || cargo build --release --locked -p slipstream
mkdir -p "$WORK"
[ -d "$WORK/node_modules/http-cache-tests" ] || (cd "$WORK" && npm install --silent --no-audit --no-fund http-cache-tests@0.4.5)
suite="$WORK/node_modules/http-cache-tests"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
(cd "$suite" && npm_config_port=$ORIGIN npm_config_protocol=http npm_config_pidfile="$WORK/server.pid" exec node server/server.mjs) >"$WORK/server.log" 2>&1 & pids+=($!)
"$BIN" proxy --listen 127.0.0.1:$PROXY --origin http://127.0.0.1:$ORIGIN --name slipstream >"$WORK/proxy.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PROXY/_slipstream/metrics" && break; sleep 0.1; done
(cd "$suite" && npm_config_base=http://127.0.0.1:$PROXY npm_package_config_id="" node --no-warnings cli.mjs) > "$WORK/results.json"
cat > "$WORK/summary.mjs" <<JS
import tests from '$suite/tests/index.mjs'
import surrogate from '$suite/tests/surrogate-control.mjs'
import * as display from '$suite/lib/display.mjs'
import fs from 'fs'
tests.push(surrogate)
const results = JSON.parse(fs.readFileSync('$WORK/results.json'))
const names = { '#1aa123': 'pass', '#c33131': 'fail', '#4c61ae': 'setup failure', '#b4b2b2': 'dependency not met', '': 'untested' }
const counts = {}
const notPassed = []
for (const suite of tests) for (const t of suite.tests) {
  if ((t.kind || 'required') !== 'required') continue
  const r = display.determineTestResult(tests, t.id, results)
  const name = names[r[1]] || r[2]
  counts[name] = (counts[name] || 0) + 1
  if (name === 'fail' || name === 'setup failure') notPassed.push('  ' + name + ': ' + t.id + ' - ' + JSON.stringify(results[t.id]))
}
console.log('required checks:', JSON.stringify(counts))
console.log(notPassed.join('\n'))
JS
node "$WORK/summary.mjs"
