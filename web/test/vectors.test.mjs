// The shared selection test vectors against the JavaScript selectors (Refresh in
// `agent/select.mjs`, Decay in `agent/decay.mjs`); the Rust twin is
// `crates/slipstream-select/tests/vectors.rs`. Also Decay's own checks beyond the vectors: its
// configuration against the Rust `Config`, its JSON state, what the module may not touch. Run
// with `node --test web/test/*.test.mjs`.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { ConfigError, DEFAULTS, Decay, STATE_FORMAT } from '../agent/decay.mjs';

import { replay, mutations, vectors, VECTOR_DIR, ReplayError } from './replay.mjs';

const repo = (path) => new URL(`../../${path}`, import.meta.url);

/** The replay's error message, or null if it passed. */
function replayError(v, options) {
  try {
    replay(v, options);
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

test('the decay vectors cover every decay expectation', () => {
  const seen = new Set();
  for (const [name, v] of vectors()) {
    if (!name.startsWith('decay-')) continue;
    assert.equal(v.policy, 'decay', name);
    for (const step of v.steps) for (const k of Object.keys(step)) seen.add(k);
  }
  for (const action of [
    'update', 'record', 'request', 'hedged', 'expect_order', 'expect_health', 'expect_timeout_ms',
    'expect_estimate', 'expect_probes', 'expect_race', 'expect_hedge_after_ms', 'expect_tokens',
  ]) {
    assert.ok(seen.has(action), `no decay vector uses ${action}`);
  }
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
  // Decay: its own config names and estimate fields, its actions' arguments; tokens are decay's.
  const decay = (f) => {
    const v = structuredClone(ok);
    v.policy = 'decay';
    f(v);
    return replayError(v);
  };
  assert.equal(decay(() => {}), null);
  assert.match(decay((v) => (v.config = { r: 0.5 })), /unknown field r/);
  assert.match(decay((v) => (v.config = { budget: 1 })), /`budget`/);
  assert.match(bad((v) => (v.config = { budget: 0.5 })), /budget/);
  assert.match(decay((v) => (v.steps[0] = { at_ms: 0, request: 1 })), /request/);
  assert.match(decay((v) => (v.steps[0] = { at_ms: 0, hedged: ['a'] })), /hedged/);
  assert.match(decay((v) => (v.steps[0] = { at_ms: 0, expect_race: '1' })), /expect_race/);
  assert.match(decay((v) => (v.steps[0] = { at_ms: 0, expect_tokens: null })), /expect_tokens/);
  assert.match(decay((v) => (v.steps[0] = { at_ms: 0, expect_hedge_after_ms: { a: 'x' } })), /hedge_after of a/);
  assert.equal(decay((v) => (v.steps[0] = { at_ms: 0, expect_estimate: { a: null } })), null);
  assert.match(
    decay((v) => (v.steps[0] = { at_ms: 0, expect_estimate: { a: { avg_ms: 1, var_ms2: 0, samples: 1, score_ms: 1 } } })),
    /estimate of a/,
  );
  assert.match(bad((v) => (v.steps[0] = { at_ms: 0, expect_tokens: 2 })), /only decay/);
  assert.equal(decay((v) => (v.steps[0] = { at_ms: 0, expect_tokens: 2 })), null);
});

// ---------------------------------------------------------------------------------------------
// Decay beyond the vectors.

test('the decay configuration has the Rust Config fields, defaults and checks', () => {
  const src = readFileSync(repo('crates/slipstream-select/src/decay.rs'), 'utf8');
  const fields = src.match(/pub const FIELDS: &'static \[&'static str\] = &\[([^\]]*)\]/);
  assert.ok(fields, 'Config::FIELDS not found in decay.rs');
  const names = [...fields[1].matchAll(/"([a-z_]+)"/g)].map((m) => m[1]);
  assert.deepEqual(Object.keys(DEFAULTS), names);
  const refused = (config) => {
    try {
      new Decay(['a'], config, 0);
    } catch (e) {
      assert.ok(e instanceof ConfigError, `${e}`);
      return e.message;
    }
    assert.fail(`${JSON.stringify(config)} accepted`);
  };
  // Field and reason as the Rust ConfigError says them (both found in decay.rs's check).
  const rust = [
    [{ decay_ms: 0 }, 'decay', 'must be positive'],
    [{ long_decay_ms: 0 }, 'long_decay', 'must be positive'],
    [{ min_weight: 0 }, 'min_weight', 'must be in (0, 1]'],
    [{ min_weight: 1.5 }, 'min_weight', 'must be in (0, 1]'],
    [{ budget: 1 }, 'budget', 'must be in [0, 1)'],
    [{ budget: -0.1 }, 'budget', 'must be in [0, 1)'],
    [{ burst: Infinity }, 'burst', 'must be finite and >= 0'],
    [{ burst: -1 }, 'burst', 'must be finite and >= 0'],
    [{ backoff_ms: 0 }, 'backoff', 'must be positive and at most max_backoff'],
    [{ backoff_ms: 10, max_backoff_ms: 5 }, 'backoff', 'must be positive and at most max_backoff'],
    [{ hedge_percentile: 100 }, 'hedge_percentile', 'must be in (0, 100)'],
    [{ timeout_percentile: 0 }, 'timeout_percentile', 'must be in (0, 100)'],
    [{ min_timeout_factor: -1 }, 'min_timeout_factor', 'must be finite and >= 0'],
    [{ min_timeout_ms: 2000, max_timeout_ms: 1000 }, 'min_timeout', 'must be at most max_timeout'],
  ];
  // What only the JavaScript side can be given (the Rust Config is typed).
  const jsOnly = [
    [{ r: 0.5 }, 'r', 'is not a field'],
    [{ budget: '0.1' }, 'budget', 'must be a number'],
    [{ backoff_ms: -1 }, 'backoff_ms', 'must be a finite number of ms >= 0'],
  ];
  for (const [config, field, reason] of [...rust, ...jsOnly]) {
    assert.equal(refused(config), `selection policy: \`${field}\` ${reason}`, JSON.stringify(config));
  }
  for (const [, field, reason] of rust) {
    assert.ok(src.includes(`"${field}"`) && src.includes(`"${reason}"`), `decay.rs does not say ${field} ${reason}`);
  }
  // Config::default(), as decay.rs writes it.
  assert.deepEqual(new Decay([], {}, 0).config, DEFAULTS);
  assert.deepEqual(DEFAULTS, {
    decay_ms: 10000, min_weight: 0.1, budget: 0.02, burst: 2, explore_after_ms: 10000,
    backoff_ms: 1000, max_backoff_ms: 120000, hedge_percentile: 99, timeout_percentile: 99.9,
    default_timeout_ms: 10000, min_timeout_ms: 1000, min_timeout_factor: 4, max_timeout_ms: 60000,
    relax_ms: 2000, long_decay_ms: 60000,
  });
});

test('decay: the back-off doubles from 1 s to the 2-minute cap (the Rust unit test)', () => {
  const d = new Decay(['a', 'b'], {}, 0);
  d.record('b', 'answered', 0, 50);
  let t = 0;
  const waits = [];
  for (let i = 0; i < 10; i++) {
    d.record('a', 'connect_failed', t);
    let due = t;
    while (!d.probes(due).some((p) => p.kind === 'recover')) due += 1000;
    waits.push((due - t) / 1000);
    t = due;
  }
  assert.deepEqual(waits, [1, 2, 4, 8, 16, 32, 64, 120, 120, 120]);
  d.record('a', 'answered', t, 10);
  assert.deepEqual(d.order(t), ['a', 'b']);
});

test('decay: bad calls throw instead of corrupting the table', () => {
  const s = new Decay(['a'], {}, 0);
  assert.throws(() => s.record('a', 'timeout', 0), TypeError);
  assert.throws(() => s.record('a', 'answered', 0), TypeError);
  assert.throws(() => s.record('a', 'answered', 0, NaN), TypeError);
  assert.throws(() => s.order(undefined), TypeError);
  assert.throws(() => s.probes(NaN), TypeError);
  assert.throws(() => s.requested(NaN), TypeError);
  assert.throws(() => s.update(['a', 1], 0), TypeError);
  assert.equal(s.estimate('a'), null);
  assert.equal(s.tokens(), 2);
  assert.deepEqual(s.health(0), [['a', true]]);
});

test('decay: a selector round-tripped through JSON text makes the same choices', () => {
  let roundTrips = 0;
  const decayVectors = vectors().filter(([, v]) => v.policy === 'decay');
  const replayAll = (betweenDecay) =>
    decayVectors.flatMap(([name, v]) => {
      const e = replayError(v, { betweenDecay });
      return e === null ? [] : [`${name}: ${e}`];
    });
  const failures = replayAll((s) => {
    const text = JSON.stringify(s);
    const back = Decay.fromJSON(JSON.parse(text));
    assert.equal(JSON.stringify(back), text, 'the state survives a round trip unchanged');
    roundTrips += 1;
    return back;
  });
  assert.deepEqual(failures, []);
  assert.ok(roundTrips >= 100, `only ${roundTrips} round trips`);
  // Each lossy round trip forgets one thing; some vector must then fail.
  const lossy = {
    estimate: (e) => (e.estimate = null),
    samples: (e) => e.estimate && (e.estimate.samples = 1),
    var_ms2: (e) => e.estimate && (e.estimate.var_ms2 = 0),
    sampled_ms: (e) => (e.sampled_ms = 0),
    failures: (e) => (e.failures = 0),
    retry_at_ms: (e) => (e.retry_at_ms = 0),
    explored_ms: (e) => (e.explored_ms = null),
    tokens: (_e, state) => (state.tokens = state.config.burst),
    entry_order: (_e, state) => state.entries.reverse(),
    config: (_e, state) => (state.config = { ...DEFAULTS }),
  };
  for (const [what, forget] of Object.entries(lossy)) {
    const lost = replayAll((s) => {
      const state = JSON.parse(JSON.stringify(s));
      for (const e of state.entries) forget(e, state);
      return Decay.fromJSON(state);
    });
    assert.ok(lost.length > 0, `losing ${what} goes unnoticed`);
  }
});

test('decay: fromJSON refuses what toJSON did not make', () => {
  const s = new Decay(['a', 'b'], {}, 0);
  s.record('a', 'answered', 0, 10);
  s.record('b', 'timed_out', 0);
  s.probes(5);
  const good = s.toJSON();
  assert.equal(good.format, STATE_FORMAT);
  assert.equal(STATE_FORMAT, 'slipstream-select/decay@2');
  Decay.fromJSON(JSON.stringify(good));
  const bad = (f, Err = TypeError) => {
    const state = JSON.parse(JSON.stringify(good));
    f(state);
    assert.throws(() => Decay.fromJSON(state), Err, JSON.stringify(state));
  };
  bad((st) => (st.format = 'slipstream-select/refresh@1'));
  bad((st) => (st.extra = 1));
  bad((st) => delete st.tokens);
  bad((st) => (st.tokens = 3));
  bad((st) => (st.tokens = -1));
  bad((st) => (st.entries = {}));
  bad((st) => delete st.config.decay_ms);
  bad((st) => (st.config.budget = 7), ConfigError);
  bad((st) => (st.entries[0].name = 1));
  bad((st) => (st.entries[0].estimate.samples = 1.5));
  bad((st) => (st.entries[0].estimate.var_ms2 = -1));
  bad((st) => (st.entries[1].failures = 0.5));
  bad((st) => (st.entries[1].explored_ms = 'now'));
  bad((st) => delete st.entries[0].retry_at_ms);
});

test('decay.mjs reads no clock, draws no randomness and uses no Node-only API', () => {
  const src = readFileSync(repo('web/agent/decay.mjs'), 'utf8').replace(/\/\/.*$/gm, '');
  for (const forbidden of ['Date', 'performance', 'Math.random', 'crypto', 'process', 'require', 'globalThis', 'Buffer']) {
    assert.ok(!src.includes(forbidden), `decay.mjs uses ${forbidden}`);
  }
  // Its only import is the sibling module.
  const imports = [...src.matchAll(/^\s*import .* from '([^']+)';/gm)].map((m) => m[1]);
  assert.deepEqual(imports, ['./select.mjs']);
});
