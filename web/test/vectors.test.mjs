// The shared selection test vectors against the JavaScript selector; the Rust twin is
// `crates/slipstream-select/tests/vectors.rs`. Run with `node --test web/test/*.test.mjs`.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { replay, mutations, vectors, VECTOR_DIR, ReplayError } from './replay.mjs';

/** The replay's error message, or null if it passed. */
function replayError(v) {
  try {
    replay(v);
    return null;
  } catch (e) {
    if (!(e instanceof ReplayError)) throw e;
    return e.message;
  }
}

test('every vector replays', () => {
  const all = vectors();
  assert.ok(all.length >= 5, `the vectors are missing: ${VECTOR_DIR}`);
  const failures = all.flatMap(([name, v]) => {
    const e = replayError(v);
    return e === null ? [] : [`${name}: ${e}`];
  });
  assert.deepEqual(failures, []);
});

// One test per file as well, so a failure names its vector in the runner's report.
for (const [name, v] of vectors()) {
  test(`vector ${name}`, () => {
    assert.equal(replayError(v), null);
  });
}

test('every changed expectation fails', () => {
  let checked = 0;
  for (const [name, v] of vectors()) {
    v.steps.forEach((step, i) => {
      const action = Object.keys(step).find((k) => k.startsWith('expect_'));
      if (action === undefined) return;
      for (const changed of mutations(step[action], action)) {
        const w = structuredClone(v);
        w.steps[i][action] = changed;
        assert.notEqual(
          replayError(w),
          null,
          `${name} step ${i}: ${action} = ${JSON.stringify(changed)} passes too`,
        );
        checked += 1;
      }
    });
  }
  assert.ok(checked >= 30, `only ${checked} expectations changed`);
});

test('malformed vectors are refused', () => {
  const ok = {
    name: 'x',
    policy: 'refresh',
    endpoints: ['a'],
    steps: [{ at_ms: 0, expect_order: ['a'] }],
  };
  assert.equal(replayError(ok), null);
  const bad = (f) => {
    const v = structuredClone(ok);
    f(v);
    const e = replayError(v);
    assert.notEqual(e, null, `${JSON.stringify(v)} passes`);
    return e;
  };
  assert.match(bad((v) => (v.policy = 'p2c')), /policy/);
  assert.match(bad((v) => (v.confg = {})), /confg/);
  assert.match(bad((v) => (v.config = { rr: 1 })), /rr/);
  assert.match(
    bad((v) => {
      v.steps[0].expect_ordr = v.steps[0].expect_order;
      delete v.steps[0].expect_order;
    }),
    /expect_ordr/,
  );
  assert.match(bad((v) => (v.steps[0].update = ['a'])), /exactly one/);
  assert.match(
    bad((v) => (v.steps = [{ at_ms: 5, update: ['a'] }, { at_ms: 4, update: ['a'] }])),
    /goes back/,
  );
  assert.match(
    bad((v) => (v.steps[0] = { at_ms: 0, record: { endpoint: 'a', outcome: 'answered' } })),
    /latency_ms/,
  );
  // Beyond the Rust test's list: the other places a typo could hide.
  assert.match(
    bad((v) => (v.steps[0] = { at_ms: 0, record: { endpoint: 'a', outcome: 'timed_out', latency_ms: 1 } })),
    /unexpected field latency_ms/,
  );
  assert.match(
    bad((v) => (v.steps[0] = { at_ms: 0, record: { endpoint: 'a', outcome: 'timedout' } })),
    /unknown outcome timedout/,
  );
  assert.match(bad((v) => (v.steps[0] = { at_ms: 0, expect_estimate: { a: { avg: 1 } } })), /estimate of a/);
  assert.match(
    bad((v) => (v.steps[0] = { at_ms: 0, expect_estimate: { a: { avg_ms: 1, var_ms2: 0, samples: 1, score: 1 } } })),
    /estimate of a/,
  );
  assert.match(bad((v) => (v.config = { r: 2 })), /`r`/, 'a configuration that cannot work');
  assert.match(bad((v) => (v.steps[0] = { at_ms: 0, expect_probes: [{ endpoint: 'a', kind: 'recover', x: 1 }] })), /probes/);
  assert.match(bad((v) => (v.steps[0] = { at_ms: 0, expect_health: { a: 'yes' } })), /health of a/);
});
