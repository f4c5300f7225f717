// Replays the shared selection test vectors (`web/test-vectors/select/*.json`, format in
// `web/test-vectors/README.md`) against the JavaScript selector, as
// `crates/slipstream-select/tests/vectors.rs` does against the Rust one: the same checks, the
// same strictness (unknown fields, actions and outcomes are errors), the same tolerance, and the
// same mutations of expectations. Two policies are shared: `refresh` (`agent/select.mjs`) and
// `decay` (`agent/decay.mjs`). A helper module, not a test file: the tests import it.

import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

import { Refresh, wholeNanos } from '../agent/select.mjs';
import { Decay, DEFAULTS as DECAY_DEFAULTS } from '../agent/decay.mjs';

export const VECTOR_DIR = fileURLToPath(new URL('../test-vectors/select/', import.meta.url));

/** Every vector, `[fileName, parsed]`, sorted by file name. */
export function vectors() {
  return readdirSync(VECTOR_DIR)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => {
      const text = readFileSync(VECTOR_DIR + f, 'utf8');
      try {
        return [f, JSON.parse(text)];
      } catch (e) {
        throw new Error(`${f}: not JSON: ${e.message}`);
      }
    });
}

/** The Rust replay's tolerance: `|got - want| <= 1e-6 + 1e-9 |want|` (ms or ms²). */
export function close(got, want) {
  return Math.abs(got - want) <= 1e-6 + 1e-9 * Math.abs(want);
}

/** A failed replay: the message names the step, as the Rust replay's `Err` does. */
export class ReplayError extends Error {}

const fail = (m) => {
  throw new ReplayError(m);
};
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const show = (v) => JSON.stringify(v);

function num(v, what) {
  if (typeof v !== 'number') fail(`${what}: not a number: ${show(v)}`);
  return v;
}

function strings(v, what) {
  if (!Array.isArray(v)) fail(`${what}: not an array`);
  for (const s of v) if (typeof s !== 'string') fail(`${what}: not a string: ${show(s)}`);
  return v;
}

function object(v, what) {
  if (!isObject(v)) fail(`${what}: not an object`);
  return v;
}

/** JSON value equality, object keys in any order (serde_json's `Value` equality). */
export function jsonEqual(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]))
    );
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]));
  }
  return a === b;
}

const REFRESH_FIELDS = [
  'r',
  'choice_percentile',
  'timeout_percentile',
  'weight_share',
  'ttl_ms',
  'probe_interval_ms',
  'max_probe_interval_ms',
  'default_timeout_ms',
  'min_timeout_ms',
  'min_timeout_factor',
  'max_timeout_ms',
];

/** Each shared policy: its selector, its config fields (`Config::FIELDS`), its estimate's fields. */
const POLICIES = {
  refresh: { Selector: Refresh, fields: REFRESH_FIELDS, estimate: ['avg_ms', 'var_ms2', 'samples', 'score_ms'] },
  decay: { Selector: Decay, fields: Object.keys(DECAY_DEFAULTS), estimate: ['avg_ms', 'var_ms2', 'samples', 'long_ms'] },
};

/**
 * The vector's config overrides, checked against the policy's own fields; durations whole
 * nanoseconds as the Rust `Config::set` makes them.
 */
function policyConfig(v, fields) {
  const c = {};
  if (v === undefined) return c;
  for (const [key, value] of Object.entries(object(v, 'config'))) {
    const x = num(value, key);
    if (!fields.includes(key)) fail(`config: unknown field ${key}`);
    c[key] = key.endsWith('_ms') ? wholeNanos(x) : x;
  }
  return c;
}

const OUTCOME_KINDS = ['answered', 'timed_out', 'connect_failed', 'broken', 'cancelled'];

/** `[kind, latencyMs]` of a `record` step's argument. */
function outcome(v) {
  const o = object(v, 'record');
  const kind = o.outcome;
  if (typeof kind !== 'string') fail('record: no outcome');
  const allowed = kind === 'answered' ? ['endpoint', 'outcome', 'latency_ms'] : ['endpoint', 'outcome'];
  const extra = Object.keys(o).find((k) => !allowed.includes(k));
  if (extra !== undefined) fail(`record: unexpected field ${extra}`);
  if (!OUTCOME_KINDS.includes(kind)) fail(`record: unknown outcome ${kind}`);
  if (kind !== 'answered') return [kind, undefined];
  if (!Object.hasOwn(o, 'latency_ms')) fail('answered: no latency_ms');
  return [kind, num(o.latency_ms, 'latency_ms')];
}

const TOP_FIELDS = ['name', 'description', 'policy', 'config', 'endpoints', 'steps'];
function checkEstimate(s, name, want, fields) {
  const got = s.estimate(name);
  if (got === null || want === null) return got === null && want === null;
  if (!isObject(want)) return false;
  if (!Object.keys(want).every((k) => fields.includes(k))) return false;
  const field = (k) => (typeof want[k] === 'number' ? want[k] : undefined);
  const avg = field('avg_ms');
  const v = field('var_ms2');
  const n = field('samples');
  // The last field is optional (Refresh's `score_ms`, Decay's `long_ms`); one that is not a
  // number fails, as in the Rust replay.
  const optional = fields[3];
  if (Object.hasOwn(want, optional) && field(optional) === undefined) return false;
  const score = field(optional);
  const gotScore = optional === 'score_ms' ? () => s.scoreMs(name) : () => got.long_ms;
  return (
    avg !== undefined &&
    close(got.avg_ms, avg) &&
    v !== undefined &&
    close(got.var_ms2, v) &&
    n !== undefined &&
    got.samples === n &&
    (score === undefined || close(gotScore(), score))
  );
}

/** A `{name: number or null}` expectation of durations in ms (`null`: none), within `close`. */
function durationsAre(arg, what, got) {
  for (const [name, want] of Object.entries(object(arg, `expect_${what}_ms`))) {
    const g = got(name);
    const ok = g !== null && typeof want === 'number' ? close(g, want) : g === null && want === null;
    if (!ok) fail(`${what} of ${name}: ${g} ms, want ${show(want)}`);
  }
}

/**
 * Replays one vector; throws a ReplayError naming the first step that did not go as expected.
 * `options.between(selector, i)` may return a replacement selector after each step of a
 * `refresh` vector, `options.betweenDecay(selector, i)` after each step of a `decay` one (the
 * JSON round-trip tests use them).
 */
export function replay(v, options = {}) {
  const top = object(v, 'vector');
  for (const key of Object.keys(top)) {
    if (!TOP_FIELDS.includes(key)) fail(`unknown top-level field ${key}`);
  }
  if (!Object.hasOwn(POLICIES, top.policy)) fail('policy: only "refresh" and "decay" are shared');
  const policy = POLICIES[top.policy];
  const between = top.policy === 'refresh' ? options.between : options.betweenDecay;
  if (!Object.hasOwn(top, 'endpoints')) fail('no endpoints');
  const endpoints = strings(top.endpoints, 'endpoints');
  let s;
  try {
    s = new policy.Selector(endpoints, policyConfig(top.config, policy.fields), 0);
  } catch (e) {
    if (e instanceof ReplayError) throw e;
    fail(e.message);
  }
  if (!Array.isArray(top.steps)) fail('no steps');
  let lastAt = 0;
  top.steps.forEach((raw, i) => {
    try {
      step(s, raw);
    } catch (e) {
      if (e instanceof ReplayError) e.message = `step ${i}: ${e.message}`;
      throw e;
    }
    if (between) s = between(s, i);
  });

  function step(s, raw) {
    const st = object(raw, 'step');
    if (!Object.hasOwn(st, 'at_ms')) fail('no at_ms');
    const at = num(st.at_ms, 'at_ms');
    if (at < lastAt) fail(`at_ms goes back from ${lastAt} to ${at}`);
    lastAt = at;
    const now = wholeNanos(at);
    const actions = Object.keys(st).filter((k) => k !== 'at_ms' && k !== 'note');
    if (actions.length !== 1) fail('want exactly one action besides at_ms and note');
    const action = actions[0];
    const arg = st[action];
    switch (action) {
      case 'update':
        s.update(strings(arg, 'update'), now);
        break;
      case 'record': {
        const endpoint = isObject(arg) ? arg.endpoint : undefined;
        if (typeof endpoint !== 'string') fail('record: no endpoint');
        const [kind, latency] = outcome(arg);
        s.record(endpoint, kind, now, latency);
        break;
      }
      case 'expect_order': {
        const want = strings(arg, 'expect_order');
        const got = s.order(now);
        if (!jsonEqual(got, want)) fail(`order ${show(got)}, want ${show(want)}`);
        break;
      }
      case 'expect_health': {
        const health = s.health(now);
        for (const [name, want] of Object.entries(object(arg, 'expect_health'))) {
          const h = health.find(([n]) => n === name);
          const got = h ? h[1] : null;
          // null: not in the set (as in the Rust replay); any other non-boolean is refused.
          if (!(typeof want === 'boolean' || want === null) || got !== want) {
            fail(`health of ${name}: ${got}, want ${show(want)}`);
          }
        }
        break;
      }
      case 'expect_timeout_ms':
        durationsAre(arg, 'timeout', (name) => s.timeout(name, now));
        break;
      case 'expect_hedge_after_ms':
        // Refresh has no hedging: null, as the Rust trait's default.
        durationsAre(arg, 'hedge_after', (name) => (s.hedgeAfter ? s.hedgeAfter(name, now) : null));
        break;
      case 'expect_estimate': {
        for (const [name, want] of Object.entries(object(arg, 'expect_estimate'))) {
          if (!checkEstimate(s, name, want, policy.estimate)) {
            const score = s.scoreMs ? ` score ${s.scoreMs(name)}` : '';
            fail(`estimate of ${name}: ${show(s.estimate(name))}${score}, want ${show(want)}`);
          }
        }
        break;
      }
      case 'request':
        if (arg !== true) fail(`request: want true, not ${show(arg)}`);
        // The Rust trait's defaults for a policy without a budget: nothing.
        if (s.requested) s.requested(now);
        break;
      case 'hedged':
        if (typeof arg !== 'string') fail(`hedged: not an endpoint name: ${show(arg)}`);
        if (s.hedged) s.hedged(arg, now);
        break;
      case 'expect_race': {
        const want = num(arg, 'expect_race');
        const got = s.race ? s.race(now) : 1;
        if (got !== want) fail(`race ${got}, want ${want}`);
        break;
      }
      case 'expect_tokens': {
        const want = num(arg, 'expect_tokens');
        if (!s.tokens) fail('expect_tokens: only decay holds tokens');
        if (!close(s.tokens(), want)) fail(`tokens ${s.tokens()}, want ${want}`);
        break;
      }
      case 'expect_probes': {
        if (!Array.isArray(arg)) fail('expect_probes: not an array');
        const got = s.probes(now);
        if (!jsonEqual(got, arg)) fail(`probes ${show(got)}, want ${show(arg)}`);
        break;
      }
      default:
        fail(`unknown action ${action}`);
    }
  }
}

/**
 * Every way to change one expectation, as the Rust test's `mutations`: the order's first two
 * swapped, a number moved by 1 % (a bare one too: race, tokens), a boolean flipped, a probe
 * dropped or added, an estimate wished away (and a null made a number).
 */
export function mutations(arg, action) {
  const out = [];
  if (action === 'expect_order' && Array.isArray(arg) && arg.length >= 2 && !jsonEqual(arg[0], arg[1])) {
    const b = arg.slice();
    [b[0], b[1]] = [b[1], b[0]];
    out.push(b);
  } else if (action === 'expect_probes' && Array.isArray(arg)) {
    if (arg.length > 0) out.push(arg.slice(1));
    out.push([...arg, { endpoint: 'nobody', kind: 'recover' }]);
  } else if (typeof arg === 'number') {
    out.push(arg * 1.01 + 0.01);
  } else if (isObject(arg)) {
    for (const [k, v] of Object.entries(arg)) {
      let changed = [];
      if (typeof v === 'boolean') changed = [!v];
      else if (typeof v === 'number') changed = [v * 1.01 + 0.01];
      else if (v === null) changed = [1.0];
      else if (isObject(v)) changed = mutations(v, 'nested');
      if (action === 'expect_estimate' && v !== null) out.push({ ...arg, [k]: null });
      for (const c of changed) out.push({ ...arg, [k]: c });
    }
  }
  return out;
}
