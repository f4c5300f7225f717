// The Web++ agents' default replica selector, Decay: the browser agent's port of
// `crates/slipstream-select/src/decay.rs` (whose module documentation gives the reasons behind
// each rule). The fastest live replica by a latency estimate that decays with *time*, a small
// budgeted exploration of the others, failed replicas retried with a capped exponential
// back-off, hedging at a high percentile inside the same budget, and a race while nothing is
// measured. Both this port and the Rust code replay the shared test vectors
// `web/test-vectors/select/decay-*.json`, so they make the same choices.
//
// A plain ES module without Node-only APIs: it runs in a Service Worker. It reads no clock and
// draws no random numbers: every method that needs the time takes `nowMs`, a number of
// milliseconds on any monotonic scale the caller keeps. Its whole state is plain JSON
// (`toJSON()`, `Decay.fromJSON()`).
//
// Numbers follow the Rust code operation for operation, with the conventions of `select.mjs`
// (the Refresh port): times are ms numbers, durations and latencies whole nanoseconds
// (`wholeNanos`), the time between two instants is taken in whole nanoseconds and never
// negative (`Instant::saturating_duration_since`). The two may differ in the last bit of
// `Math.exp` (V8's fdlibm against the platform's libm), which the vectors' tolerance absorbs.

import { ConfigError, OUTCOMES, quantile, wholeNanos } from './select.mjs';

export { ConfigError, OUTCOMES };

/** The defaults of `config`, as the Rust `Config::default()`. */
export const DEFAULTS = Object.freeze({
  /** τ: a sample's weight is `1 − e^(−Δt/τ)`. 10 s (Finagle's decay time). */
  decay_ms: 10000,
  /** The least weight of a new sample once `1/(n+1)` is smaller, in (0, 1]. */
  min_weight: 0.1,
  /** Tokens earned per user request, for probes and hedges, in [0, 1). */
  budget: 0.02,
  /** The most tokens held, and those a new selector starts with. */
  burst: 2,
  /** A live replica not chosen whose last sample is this old may be explored. */
  explore_after_ms: 10000,
  /** The first back-off of a failed replica, doubled by each further failure. */
  backoff_ms: 1000,
  /** The longest back-off. 2 minutes. */
  max_backoff_ms: 120000,
  /** The percentile (in (0, 100)) of the chosen replica's latency after which to hedge. */
  hedge_percentile: 99,
  /** The percentile (in (0, 100)) of latency at which a request times out. */
  timeout_percentile: 99.9,
  /** The timeout before a replica's first sample. */
  default_timeout_ms: 10000,
  /** The least timeout. */
  min_timeout_ms: 1000,
  /** The timeout is at least this multiple of the mean. */
  min_timeout_factor: 4,
  /** The greatest timeout. */
  max_timeout_ms: 60000,
  /**
   * How fast an estimate with no new sample returns to the long-run mean: their distance
   * shrinks by `e^(−age/relax)`. 2 s; 0 keeps the estimate as it was sampled.
   */
  relax_ms: 2000,
  /** τ of the long-run mean (a sample weighs `1 − e^(−Δt/τ)`: a few quick outliers barely move it). 60 s. */
  long_decay_ms: 60000,
});

const DURATIONS = [
  'decay_ms',
  'explore_after_ms',
  'backoff_ms',
  'max_backoff_ms',
  'default_timeout_ms',
  'min_timeout_ms',
  'max_timeout_ms',
  'relax_ms',
  'long_decay_ms',
];

/** Failures in a row are a Rust u32, saturating. */
const U32_MAX = 4294967295;

function finite(x, what) {
  if (typeof x !== 'number' || !Number.isFinite(x)) {
    throw new TypeError(`${what}: not a finite number: ${x}`);
  }
  return x;
}

/** Rust's `f64::total_cmp` for the keys the order sorts by (NaN, if ever, goes last). */
function totalCmp(a, b) {
  if (a < b) return -1;
  if (a > b) return 1;
  if (a === b) {
    if (a !== 0) return 0;
    const na = Object.is(a, -0);
    const nb = Object.is(b, -0);
    return na === nb ? 0 : na ? -1 : 1;
  }
  const an = Number.isNaN(a);
  const bn = Number.isNaN(b);
  return an === bn ? 0 : an ? 1 : -1;
}

/** `Instant::saturating_duration_since` in ms: `later − earlier`, whole nanoseconds, at least 0. */
function since(laterMs, earlierMs) {
  return wholeNanos(laterMs - earlierMs);
}

/** `Config::check`: the same fields and reasons as the Rust ConfigError. */
function checkConfig(c) {
  const percent = (v) => v > 0 && v < 100;
  if (c.decay_ms === 0) throw new ConfigError('decay', 'must be positive');
  if (c.long_decay_ms === 0) throw new ConfigError('long_decay', 'must be positive');
  if (!(c.min_weight > 0 && c.min_weight <= 1)) throw new ConfigError('min_weight', 'must be in (0, 1]');
  if (!(c.budget >= 0 && c.budget < 1)) throw new ConfigError('budget', 'must be in [0, 1)');
  if (!(c.burst >= 0 && Number.isFinite(c.burst))) {
    throw new ConfigError('burst', 'must be finite and >= 0');
  }
  if (c.backoff_ms === 0 || c.max_backoff_ms < c.backoff_ms) {
    throw new ConfigError('backoff', 'must be positive and at most max_backoff');
  }
  if (!percent(c.hedge_percentile)) throw new ConfigError('hedge_percentile', 'must be in (0, 100)');
  if (!percent(c.timeout_percentile)) throw new ConfigError('timeout_percentile', 'must be in (0, 100)');
  if (!(c.min_timeout_factor >= 0 && Number.isFinite(c.min_timeout_factor))) {
    throw new ConfigError('min_timeout_factor', 'must be finite and >= 0');
  }
  if (c.min_timeout_ms > c.max_timeout_ms) {
    throw new ConfigError('min_timeout', 'must be at most max_timeout');
  }
}

/**
 * `DEFAULTS` with `overrides` (frozen, durations in whole nanoseconds); unknown fields,
 * non-numbers and configurations that cannot work are refused (ConfigError).
 */
export function makeConfig(overrides) {
  if (overrides === null || typeof overrides !== 'object' || Array.isArray(overrides)) {
    throw new ConfigError('config', 'must be an object');
  }
  const c = { ...DEFAULTS };
  for (const [key, value] of Object.entries(overrides)) {
    if (!Object.hasOwn(DEFAULTS, key)) throw new ConfigError(key, 'is not a field');
    if (typeof value !== 'number') throw new ConfigError(key, 'must be a number');
    if (DURATIONS.includes(key)) {
      // A Rust Duration: whole nanoseconds, never negative.
      if (!(Number.isFinite(value) && value >= 0)) {
        throw new ConfigError(key, 'must be a finite number of ms >= 0');
      }
      c[key] = wholeNanos(value);
    } else {
      c[key] = value;
    }
  }
  checkConfig(c);
  return Object.freeze(c);
}

function freshEntry(name, now) {
  return {
    name,
    /** `{avg_ms, var_ms2, samples, long_ms}` or null before the first sample. */
    estimate: null,
    /** The last sample, or when the replica joined the set. */
    sampled_ms: now,
    /** Failures in a row; 0 is live. */
    failures: 0,
    /** When a failed replica's back-off ends (its recovery probe is due). */
    retry_at_ms: now,
    /** When an exploration probe was last handed out, or null. */
    explored_ms: null,
  };
}

/** Sorting key: live measured by current mean, live unmeasured, failed by back-off end. */
function rank(d, e, base, now) {
  if (e.failures === 0) {
    return e.estimate !== null ? [0, d._relaxed(e.estimate, since(now, e.sampled_ms))] : [1, 0];
  }
  return [2, since(e.retry_at_ms, base)];
}

/** The JSON state's format tag; `fromJSON` refuses any other. */
export const STATE_FORMAT = 'slipstream-select/decay@2';

const ENTRY_FIELDS = ['name', 'estimate', 'sampled_ms', 'failures', 'retry_at_ms', 'explored_ms'];

/**
 * The Decay selector over a changing set of named endpoints (replica origins). Methods mirror
 * the Rust `Select` trait: `update`, `order`, `record`, `health`, `timeout`, `probes`,
 * `hedgeAfter`, `requested`, `hedged`, `race`, plus `estimate` and `tokens` as on the Rust
 * `Decay`.
 */
export class Decay {
  /**
   * A selector over `endpoints` (their order breaks ties), all unmeasured and live, with
   * `burst` tokens.
   * @param {string[]} endpoints
   * @param {object} [config] overrides of `DEFAULTS`, same field names
   * @param {number} nowMs
   */
  constructor(endpoints, config = {}, nowMs = 0) {
    this._setConfig(makeConfig(config));
    this._tokens = this._config.burst;
    this._entries = [];
    this.update(endpoints, nowMs);
  }

  _setConfig(config) {
    this._config = config;
    this._cHedge = quantile(config.hedge_percentile / 100);
    this._cTimeout = quantile(config.timeout_percentile / 100);
  }

  /**
   * Replaces the configuration by `DEFAULTS` with `overrides` (checked as the constructor does;
   * a refused one changes nothing), keeping the latency table and the tokens (at most the new
   * burst).
   */
  setConfig(overrides) {
    this._setConfig(makeConfig(overrides));
    this._tokens = Math.min(this._tokens, this._config.burst);
  }

  /** The configuration, every field filled in (frozen). */
  get config() {
    return this._config;
  }

  _entry(name) {
    return this._entries.find((e) => e.name === name);
  }

  /** `endpoint`'s estimate `{avg_ms, var_ms2, samples, long_ms}`; null before its first sample or outside the set. */
  estimate(endpoint) {
    const e = this._entry(endpoint);
    return e && e.estimate ? { ...e.estimate } : null;
  }

  /**
   * `endpoint`'s mean as of `nowMs`: the sampled mean drawn back toward the long-run mean as
   * its last sample ages (`relax_ms`); what the order ranks by. null before its first sample.
   */
  currentMs(endpoint, nowMs) {
    finite(nowMs, 'nowMs');
    const e = this._entry(endpoint);
    if (!e || e.estimate === null) return null;
    return this._relaxed(e.estimate, since(nowMs, e.sampled_ms));
  }

  /**
   * Estimate `x`'s mean `ageMs` after its last sample: drawn down toward the long-run mean,
   * never up (a replica that was faster of late keeps its recent estimate).
   */
  _relaxed(x, ageMs) {
    const relax = this._config.relax_ms;
    if (relax === 0 || x.avg_ms <= x.long_ms) return x.avg_ms;
    return x.long_ms + (x.avg_ms - x.long_ms) * Math.exp(-ageMs / relax);
  }

  /** The tokens held for probes and hedges. */
  tokens() {
    return this._tokens;
  }

  /** The back-off in ms after `failures` failures in a row: `backoff · 2^(failures−1)`, capped. */
  _backoff(failures) {
    const doublings = Math.min(Math.max(failures - 1, 0), 30);
    // Exact in f64 (a power of two), so the same as the Rust Duration's saturating_mul.
    return Math.min(this._config.backoff_ms * 2 ** doublings, this._config.max_backoff_ms);
  }

  _timeoutMs(e) {
    const c = this._config;
    if (e === null) return c.default_timeout_ms;
    // f64::max / f64::min: no NaN can arise here (finite samples, var >= 0).
    return Math.min(
      Math.max(Math.max(e.avg_ms + this._cTimeout * Math.sqrt(e.var_ms2), c.min_timeout_factor * e.avg_ms), c.min_timeout_ms),
      c.max_timeout_ms,
    );
  }

  /**
   * Replaces the set of endpoints. Those that stay keep what was learnt about them; new ones
   * start fresh (unmeasured, live, joined at `nowMs`); removed ones are forgotten.
   */
  update(endpoints, nowMs) {
    finite(nowMs, 'nowMs');
    if (!Array.isArray(endpoints) || !endpoints.every((n) => typeof n === 'string')) {
      throw new TypeError('endpoints: not a list of strings');
    }
    const old = this._entries;
    this._entries = endpoints.map((name) => {
      const i = old.findIndex((e) => e.name === name);
      if (i < 0) return freshEntry(name, nowMs);
      // Rust's Vec::swap_remove, as in select.mjs.
      const e = old[i];
      const last = old.pop();
      if (i < old.length) old[i] = last;
      return e;
    });
  }

  /**
   * The order in which to try the endpoints for one request: live measured ones by estimate,
   * live unmeasured ones, failed ones by when their back-off ends; ties keep set order.
   */
  order(nowMs) {
    finite(nowMs, 'nowMs');
    // Back-off ends are compared from a base no later than any of them.
    let base = nowMs;
    for (const e of this._entries) if (e.retry_at_ms < base) base = e.retry_at_ms;
    const ranked = this._entries.map((e) => {
      const [cls, key] = rank(this, e, base, nowMs);
      return { cls, key, name: e.name };
    });
    // Array.prototype.sort is stable (ES2019), as Rust's sort_by is.
    ranked.sort((a, b) => a.cls - b.cls || totalCmp(a.key, b.key));
    return ranked.map((x) => x.name);
  }

  /**
   * The outcome of one exchange with `endpoint` (ignored if it is not in the set): one of
   * `OUTCOMES`; `answered` needs `latencyMs` (rounded to whole nanoseconds, negative as 0).
   * An answer updates the estimate with the time-decayed weight and makes the replica live;
   * `timed_out`, `connect_failed` and `broken` count a failure and start its back-off;
   * `cancelled` changes nothing.
   */
  record(endpoint, outcome, nowMs, latencyMs) {
    finite(nowMs, 'nowMs');
    if (!OUTCOMES.includes(outcome)) throw new TypeError(`record: unknown outcome ${outcome}`);
    if (outcome === 'answered') finite(latencyMs, 'latencyMs');
    const e = this._entry(endpoint);
    if (!e) return;
    switch (outcome) {
      case 'answered': {
        const x = wholeNanos(latencyMs);
        const old = e.estimate;
        if (old === null) {
          e.estimate = { avg_ms: x, var_ms2: 0, samples: 1, long_ms: x };
        } else {
          const dt = since(nowMs, e.sampled_ms);
          const n = 1 / (old.samples + 1);
          const w = Math.min(
            Math.max(Math.max(1 - Math.exp(-dt / this._config.decay_ms), n), this._config.min_weight),
            1,
          );
          // The stale mean has returned part of the way to the long-run one.
          const base = this._relaxed(old, dt);
          const avg = (1 - w) * base + w * x;
          const dev = x - avg;
          const wl = 1 - Math.exp(-dt / this._config.long_decay_ms);
          e.estimate = {
            avg_ms: avg,
            var_ms2: (1 - w) * old.var_ms2 + w * dev * dev,
            samples: Math.min(old.samples + 1, Number.MAX_SAFE_INTEGER),
            long_ms: (1 - wl) * old.long_ms + wl * x,
          };
        }
        e.sampled_ms = nowMs;
        e.failures = 0;
        break;
      }
      case 'timed_out':
      case 'connect_failed':
      case 'broken': {
        const failures = Math.min(e.failures + 1, U32_MAX);
        e.failures = failures;
        e.retry_at_ms = nowMs + this._backoff(failures);
        break;
      }
      default: // cancelled
    }
  }

  /** Each endpoint and whether it counts as up, in set order: `[[name, live], ...]`. */
  health(nowMs) {
    finite(nowMs, 'nowMs');
    return this._entries.map((e) => [e.name, e.failures === 0]);
  }

  /**
   * How long in ms to wait for `endpoint`'s response head before recording `timed_out`; null
   * outside the set. Before the first sample `default_timeout_ms`, then the largest of
   * `avg + c_T·sd`, `min_timeout_factor` × the mean and `min_timeout_ms`, at most
   * `max_timeout_ms`; in whole nanoseconds.
   */
  timeout(endpoint, nowMs) {
    finite(nowMs, 'nowMs');
    const e = this._entry(endpoint);
    if (!e) return null;
    return wholeNanos(this._timeoutMs(e.estimate));
  }

  /**
   * The probes due at `nowMs`, each handed out once: a `recover` HEAD to every failed replica
   * whose back-off has ended (set order; a token spent if one is held, sent regardless), then, if a whole token is held, at most
   * one `refresh` (exploration) HEAD to a live replica other than the order's first: unmeasured
   * ones first (set order; once each, or again after `explore_after_ms`), else the one sampled
   * longest ago, once neither its sample nor its last exploration is newer than
   * `explore_after_ms`. An exploration costs one token.
   * @returns {{endpoint: string, kind: 'recover' | 'refresh'}[]}
   */
  probes(nowMs) {
    finite(nowMs, 'nowMs');
    const out = [];
    for (const e of this._entries) {
      if (e.failures > 0 && e.retry_at_ms <= nowMs) {
        // Handed out once; again after the next back-off if no outcome comes. It spends a
        // token when one is there (probes and hedges wait for the next), but is sent without
        // one: the back-off bounds it.
        this._tokens = Math.max(this._tokens - 1, 0);
        e.retry_at_ms = nowMs + this._backoff(Math.min(e.failures + 1, U32_MAX));
        out.push({ endpoint: e.name, kind: 'recover' });
      }
    }
    if (this._tokens < 1) return out;
    const chosen = this.order(nowMs)[0];
    const exploreAfter = this._config.explore_after_ms;
    let candidate = null;
    for (const e of this._entries) {
      if (e.failures !== 0 || e.name === chosen) continue;
      const last = e.explored_ms === null ? e.sampled_ms : Math.max(e.explored_ms, e.sampled_ms);
      const quiet = since(nowMs, last) >= exploreAfter;
      if (!(quiet || (e.estimate === null && e.explored_ms === null))) continue;
      // min_by_key((measured, sampled)): the first of equal minima.
      if (candidate === null) {
        candidate = e;
        continue;
      }
      const em = e.estimate !== null;
      const cm = candidate.estimate !== null;
      if ((!em && cm) || (em === cm && e.sampled_ms < candidate.sampled_ms)) candidate = e;
    }
    if (candidate !== null) {
      this._tokens -= 1;
      // Not explored again before another `explore_after` (the first entry of that name, as
      // the Rust entry_mut finds it).
      this._entry(candidate.name).explored_ms = nowMs;
      out.push({ endpoint: candidate.name, kind: 'refresh' });
    }
    return out;
  }

  /**
   * After how long in ms without an answer from `endpoint` (the order's first) to send the
   * request to the next replica as well: `avg + c_H·sd` in whole nanoseconds, once it has two
   * samples and a whole token is held; null otherwise (or outside the set).
   */
  hedgeAfter(endpoint, nowMs) {
    finite(nowMs, 'nowMs');
    if (this._tokens < 1) return null;
    const entry = this._entry(endpoint);
    if (!entry || entry.estimate === null) return null;
    const e = entry.estimate;
    if (e.samples < 2) return null;
    const avg = this._relaxed(e, since(nowMs, entry.sampled_ms));
    return wholeNanos(avg + this._cHedge * Math.sqrt(e.var_ms2));
  }

  /** A user request began (not a probe, hedge or fail-over): earns `budget` of a token, at most `burst` held. */
  requested(nowMs) {
    finite(nowMs, 'nowMs');
    this._tokens = Math.min(this._tokens + this._config.budget, this._config.burst);
  }

  /** A hedge was sent to `endpoint` after `hedgeAfter` said so: one token is spent. */
  hedged(endpoint, nowMs) {
    finite(nowMs, 'nowMs');
    this._tokens = Math.max(this._tokens - 1, 0);
  }

  /**
   * To how many of the order's first endpoints to send a request at once, the first answer
   * winning: every live one while none of them has a sample (at least 1), else 1.
   */
  race(nowMs) {
    finite(nowMs, 'nowMs');
    const live = this._entries.filter((e) => e.failures === 0);
    if (live.some((e) => e.estimate !== null)) return 1;
    return Math.max(live.length, 1);
  }

  /** The whole state as plain JSON data (the configuration, the tokens and the table). */
  toJSON() {
    return {
      format: STATE_FORMAT,
      config: { ...this._config },
      tokens: this._tokens,
      entries: this._entries.map((e) => ({
        name: e.name,
        estimate: e.estimate && { ...e.estimate },
        sampled_ms: e.sampled_ms,
        failures: e.failures,
        retry_at_ms: e.retry_at_ms,
        explored_ms: e.explored_ms,
      })),
    };
  }

  /**
   * A selector from `toJSON()`'s data (or its JSON text). Anything else is refused with a
   * TypeError (or a ConfigError for a configuration that cannot work), never half-loaded.
   */
  static fromJSON(state) {
    const s = typeof state === 'string' ? JSON.parse(state) : state;
    const obj = (v, what, keys) => {
      if (v === null || typeof v !== 'object' || Array.isArray(v)) {
        throw new TypeError(`state: ${what}: not an object`);
      }
      const extra = Object.keys(v).filter((k) => !keys.includes(k));
      const missing = keys.filter((k) => !Object.hasOwn(v, k));
      if (extra.length || missing.length) {
        throw new TypeError(`state: ${what}: fields ${JSON.stringify({ extra, missing })}`);
      }
      return v;
    };
    const num = (v, what) => finite(v, `state: ${what}`);
    obj(s, 'top level', ['format', 'config', 'tokens', 'entries']);
    if (s.format !== STATE_FORMAT) throw new TypeError(`state: format ${s.format}, want ${STATE_FORMAT}`);
    obj(s.config, 'config', Object.keys(DEFAULTS));
    const config = makeConfig(s.config);
    const tokens = num(s.tokens, 'tokens');
    if (!(tokens >= 0 && tokens <= config.burst)) {
      throw new TypeError(`state: tokens ${tokens}: must be in [0, burst]`);
    }
    if (!Array.isArray(s.entries)) throw new TypeError('state: entries: not a list');
    const entries = s.entries.map((e, i) => {
      const w = `entries[${i}]`;
      obj(e, w, ENTRY_FIELDS);
      if (typeof e.name !== 'string') throw new TypeError(`state: ${w}.name: not a string`);
      let estimate = null;
      if (e.estimate !== null) {
        obj(e.estimate, `${w}.estimate`, ['avg_ms', 'var_ms2', 'samples', 'long_ms']);
        const samples = num(e.estimate.samples, `${w}.estimate.samples`);
        const varMs2 = num(e.estimate.var_ms2, `${w}.estimate.var_ms2`);
        if (!(Number.isSafeInteger(samples) && samples >= 1) || varMs2 < 0) {
          throw new TypeError(`state: ${w}.estimate: samples must be a whole number >= 1, var_ms2 >= 0`);
        }
        estimate = {
          avg_ms: num(e.estimate.avg_ms, `${w}.estimate.avg_ms`),
          var_ms2: varMs2,
          samples,
          long_ms: num(e.estimate.long_ms, `${w}.estimate.long_ms`),
        };
      }
      const failures = num(e.failures, `${w}.failures`);
      if (!(Number.isInteger(failures) && failures >= 0 && failures <= U32_MAX)) {
        throw new TypeError(`state: ${w}.failures: not a whole number in [0, 2^32)`);
      }
      return {
        name: e.name,
        estimate,
        sampled_ms: num(e.sampled_ms, `${w}.sampled_ms`),
        failures,
        retry_at_ms: num(e.retry_at_ms, `${w}.retry_at_ms`),
        explored_ms: e.explored_ms === null ? null : num(e.explored_ms, `${w}.explored_ms`),
      };
    });
    const sel = Object.create(Decay.prototype);
    sel._setConfig(config);
    sel._tokens = tokens;
    sel._entries = entries;
    return sel;
  }
}
