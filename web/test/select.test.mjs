// Unit tests of web/agent/select.mjs beyond the shared vectors: the normal quantile against the
// Rust module's reference values and coefficients, configuration checks, the JSON state (a
// round-tripped selector makes the same choices), and what the module may not touch.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { AS241, ConfigError, DEFAULTS, Refresh, STATE_FORMAT, quantile } from '../agent/select.mjs';
import { ReplayError, replay, vectors } from './replay.mjs';

const repo = (path) => new URL(`../../${path}`, import.meta.url);

test('quantile matches the reference values of normal.rs', () => {
  // The Rust unit test's table (CPython's statistics.NormalDist().inv_cdf, also AS 241).
  const cases = [
    [0.5, 0.0],
    [0.55, 0.12566134685507413],
    [0.975, 1.9599639845400536],
    [0.999, 3.090232306167813],
    [0.1, -1.2815515655446008],
    [0.9, 1.2815515655446008],
    [0.02425, -1.9729610513118845],
    [1e-10, -6.361340902404056],
  ];
  for (const [p, want] of cases) {
    const got = quantile(p);
    assert.ok(Math.abs(got - want) <= 1e-14, `quantile(${p}) = ${got}, want ${want}`);
  }
});

test('quantile is odd, increasing and bounded at the ends', () => {
  let last = -Infinity;
  for (let i = 1; i < 1000; i++) {
    const p = i / 1000;
    const x = quantile(p);
    assert.ok(x > last, `not increasing at ${p}`);
    assert.ok(Math.abs(x + quantile(1 - p)) < 1e-12, `not odd at ${p}`);
    last = x;
  }
  assert.equal(quantile(0), -Infinity);
  assert.equal(quantile(1), Infinity);
  assert.ok(Number.isNaN(quantile(1.5)));
  assert.ok(Number.isNaN(quantile(-0.1)));
  assert.ok(Number.isNaN(quantile(NaN)));
});

test('the AS 241 coefficients are those of normal.rs', () => {
  const src = readFileSync(repo('crates/slipstream-select/src/normal.rs'), 'utf8');
  const names = Object.keys(AS241);
  assert.equal(names.length, 6);
  for (const name of names) {
    const m = src.match(new RegExp(`const ${name}: \\[f64; 8\\] = \\[([^\\]]*)\\]`));
    assert.ok(m, `${name} not found in normal.rs`);
    const rust = m[1]
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)
      .map(Number);
    assert.deepEqual(AS241[name], rust, name);
  }
});

test('n in (1) is capped by formula (5)', () => {
  const bare = { min_timeout_ms: 0, min_timeout_factor: 0 };
  const withR = (r) => new Refresh(['e0'], { ...bare, r }, 0).samplesCounted();
  // The Rust unit test: ln(0.01)/ln(0.05) - 1 = 0.537 -> 1; ln(0.01)/ln(0.5) - 1 = 5.64 -> 6.
  assert.equal(withR(0.95), 1);
  assert.equal(withR(0.5), 6);
  assert.equal(withR(1), 1);
  const s = new Refresh(['e0'], { ...bare, r: 0.5 }, 0);
  for (const v of [10, 20, 30]) s.record('e0', 'answered', 0, v);
  assert.deepEqual(s.estimate('e0'), { avg_ms: 22.5, var_ms2: 34.375, samples: 3 });
  assert.ok(Math.abs(s.scoreMs('e0') - 22.92536566992871) < 1e-9);
});

test('a configuration that cannot work is refused, naming the field', () => {
  const refused = (config) => {
    try {
      new Refresh(['a'], config, 0);
    } catch (e) {
      assert.ok(e instanceof ConfigError, `${e}`);
      return e.field;
    }
    assert.fail(`${JSON.stringify(config)} accepted`);
  };
  assert.equal(refused({ r: 0 }), 'r');
  assert.equal(refused({ r: 1.5 }), 'r');
  assert.equal(refused({ choice_percentile: 100 }), 'choice_percentile');
  assert.equal(refused({ timeout_percentile: 0 }), 'timeout_percentile');
  assert.equal(refused({ weight_share: 1 }), 'weight_share');
  assert.equal(refused({ probe_interval_ms: 0 }), 'probe_interval');
  assert.equal(refused({ probe_interval_ms: 10, max_probe_interval_ms: 5 }), 'probe_interval');
  assert.equal(refused({ min_timeout_factor: -1 }), 'min_timeout_factor');
  assert.equal(refused({ min_timeout_factor: Infinity }), 'min_timeout_factor');
  assert.equal(refused({ min_timeout_ms: 2000, max_timeout_ms: 1000 }), 'min_timeout');
  assert.equal(refused({ ttl: 5 }), 'ttl', 'unknown field');
  assert.equal(refused({ r: '0.5' }), 'r', 'not a number');
  assert.equal(refused({ ttl_ms: -1 }), 'ttl_ms', 'a negative duration');
  assert.equal(refused({ ttl_ms: NaN }), 'ttl_ms');
  // The defaults are 001 §6's, and work.
  assert.deepEqual(new Refresh([], {}, 0).config, DEFAULTS);
});

test('durations and latencies are whole nanoseconds, as Rust Durations', () => {
  const s = new Refresh(['a'], { default_timeout_ms: 1.00000049 }, 0);
  assert.equal(s.config.default_timeout_ms, 1);
  assert.equal(s.timeout('a', 0), 1);
  s.record('a', 'answered', 0, 12.3456789);
  assert.equal(s.estimate('a').avg_ms, 12.345679);
  s.record('a', 'answered', 0, -5);
  assert.equal(s.estimate('a').samples, 2);
  assert.ok(Math.abs(s.estimate('a').avg_ms - 0.05 * 12.345679) < 1e-12, 'a negative latency counts as 0');
});

test('bad calls throw instead of corrupting the table', () => {
  const s = new Refresh(['a'], {}, 0);
  assert.throws(() => s.record('a', 'timeout', 0), TypeError);
  assert.throws(() => s.record('a', 'answered', 0), TypeError);
  assert.throws(() => s.record('a', 'answered', 0, NaN), TypeError);
  assert.throws(() => s.order(undefined), TypeError);
  assert.throws(() => s.probes(NaN), TypeError);
  assert.throws(() => s.update(['a', 1], 0), TypeError);
  assert.equal(s.estimate('a'), null);
  assert.deepEqual(s.health(0), [['a', true]]);
});

/** Whether replaying every vector, with `between` applied after each step, passes. */
function replayAll(between) {
  const failures = [];
  for (const [name, v] of vectors()) {
    try {
      replay(v, { between });
    } catch (e) {
      if (!(e instanceof ReplayError)) throw e;
      failures.push(`${name}: ${e.message}`);
    }
  }
  return failures;
}

test('a selector round-tripped through JSON text makes the same choices', () => {
  let roundTrips = 0;
  const failures = replayAll((s) => {
    const text = JSON.stringify(s);
    const back = Refresh.fromJSON(JSON.parse(text));
    assert.equal(JSON.stringify(back), text, 'the state survives a round trip unchanged');
    assert.equal(back.samplesCounted(), s.samplesCounted());
    roundTrips += 1;
    return back;
  });
  assert.deepEqual(failures, []);
  assert.ok(roundTrips >= 100, `only ${roundTrips} round trips`);
  // fromJSON takes the text too.
  const s = new Refresh(['a', 'b'], { ttl_ms: 5 }, 0);
  s.record('b', 'answered', 1, 7);
  s.record('a', 'broken', 2);
  const back = Refresh.fromJSON(JSON.stringify(s));
  assert.deepEqual(back.order(3), ['b', 'a']);
  assert.deepEqual(back.probes(10), [{ endpoint: 'b', kind: 'refresh' }]);
});

test('the round-trip test would see any part of the state lost', () => {
  // Each lossy round trip forgets one thing; some vector must then fail, or the test above
  // could not tell a faithful round trip from a lossy one.
  const lossy = {
    estimate: (e) => (e.estimate = null),
    samples: (e) => e.estimate && (e.estimate.samples = 1),
    var_ms2: (e) => e.estimate && (e.estimate.var_ms2 = 0),
    updated_ms: (e) => (e.updated_ms = 0),
    failed: (e) => (e.failed = null),
    interval_ms: (e) => e.failed && (e.failed.interval_ms = 1000),
    next_probe_ms: (e) => e.failed && (e.failed.next_probe_ms = 0),
    refresh_sent_ms: (e) => (e.refresh_sent_ms = null),
    entry_order: (_e, state) => state.entries.reverse(),
    config: (_e, state) => (state.config = { ...DEFAULTS }),
  };
  for (const [what, forget] of Object.entries(lossy)) {
    const failures = replayAll((s) => {
      const state = JSON.parse(JSON.stringify(s));
      for (const e of state.entries) forget(e, state);
      return Refresh.fromJSON(state);
    });
    assert.ok(failures.length > 0, `losing ${what} goes unnoticed`);
  }
});

test('fromJSON refuses what toJSON did not make', () => {
  const s = new Refresh(['a'], {}, 0);
  s.record('a', 'answered', 0, 10);
  s.record('a', 'timed_out', 0);
  const good = s.toJSON();
  assert.equal(good.format, STATE_FORMAT);
  Refresh.fromJSON(good);
  const bad = (f, Err = TypeError) => {
    const state = JSON.parse(JSON.stringify(good));
    f(state);
    assert.throws(() => Refresh.fromJSON(state), Err, JSON.stringify(state));
  };
  bad((st) => (st.format = 'slipstream-select/refresh@0'));
  bad((st) => (st.extra = 1));
  bad((st) => delete st.entries);
  bad((st) => (st.entries = {}));
  bad((st) => delete st.config.ttl_ms);
  bad((st) => (st.config.r = 7), ConfigError);
  bad((st) => (st.entries[0].name = 1));
  bad((st) => (st.entries[0].updated = 0));
  bad((st) => (st.entries[0].estimate.samples = 1.5));
  bad((st) => (st.entries[0].estimate.var_ms2 = -1));
  bad((st) => (st.entries[0].estimate.avg_ms = null));
  bad((st) => delete st.entries[0].failed.next_probe_ms);
  bad((st) => (st.entries[0].refresh_sent_ms = 'now'));
});

test('the module reads no clock, draws no randomness and uses no Node-only API', () => {
  const src = readFileSync(repo('web/agent/select.mjs'), 'utf8').replace(/\/\/.*$/gm, '');
  for (const forbidden of ['Date', 'performance', 'Math.random', 'crypto', 'process', 'require', 'import ', 'globalThis', 'Buffer']) {
    assert.ok(!src.includes(forbidden), `select.mjs uses ${forbidden}`);
  }
});
