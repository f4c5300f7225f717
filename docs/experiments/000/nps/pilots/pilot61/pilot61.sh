#!/usr/bin/env bash
# Pilot 61 (at 622f53c): do demand threads wait on locks that the idle-priority prefetch
# listener's thread holds (priority inversion: a SCHED_IDLE holder preempted inside the lock)?
# Installs lock_waits.rs as a diagnostic, routes the shared locks through it, runs one round
# at 200 and 400 documents/s, and leaves the edits in the work tree (git checkout crates to undo).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../../../../.."
cp "$here/lock_waits.rs" crates/slipstream-node/src/contention.rs
sed -i '21a pub mod contention;' crates/slipstream-node/src/lib.rs
sed -i 's/                        let _ = said.send(lower_this_thread());/                        crate::contention::mark_low();\n                        let _ = said.send(lower_this_thread());/' crates/slipstream-node/src/bootstrap.rs
sed -i 's/cache\.lock()/slipstream_node::contention::lock(cache, \&slipstream_node::contention::ORIGIN_CACHE)/' crates/slipstream-origin/src/lib.rs
sed -i 's/let mut m = model.model().lock();/let mut m = slipstream_node::contention::lock(model.model(), \&slipstream_node::contention::NPS_MODEL);/; s/let mut m = nps.model().lock();/let mut m = slipstream_node::contention::lock(nps.model(), \&slipstream_node::contention::NPS_MODEL);/' crates/slipstream-nps/src/demand.rs
sed -i 's/self\.control\.lock()/slipstream_node::contention::lock(\&self.control, \&slipstream_node::contention::NPS_CONTROL)/g; s/self\.model\.lock()/slipstream_node::contention::lock(\&self.model, \&slipstream_node::contention::NPS_MODEL)/g' crates/slipstream-nps/src/lib.rs
python3 - <<'PY'
p = 'crates/slipstream-nps/src/lib.rs'
s = open(p).read()
s = s.replace('''        serde_json::json!({
            "budget": match''', '''        serde_json::json!({
            "lock_waits": slipstream_node::contention::json(),
            "budget": match''', 1)
open(p, 'w').write(s)
PY
REPS=1 WARM=10s RUN=10s BURSTY=0 LEVELS="200 400" THRESHOLDS="knee:idle" OUT=${OUT:-/tmp/p61} ./experiments/000/nps.sh
