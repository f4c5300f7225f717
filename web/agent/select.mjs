// Web++'s extended Refresh replica selector (paper 001 §4.1, Fig. 4), the client agent's port of
// `crates/slipstream-select/src/refresh.rs` and `normal.rs`. Both replay the shared test vectors
// in `web/test-vectors/select/`, so they make the same choices; the Rust module documentation
// gives the reasons behind each rule (n capped by (5), the timeout floors, unmeasured endpoints
// first, what counts as a failure).
//
// A plain ES module without dependencies or Node-only APIs: it runs in a Service Worker. It reads
// no clock and draws no random numbers: every method that needs the time takes `nowMs`, a number
// of milliseconds on any monotonic scale the caller keeps (`Date.now()`, or
// `performance.timeOrigin + performance.now()`). Its whole state is plain JSON (`toJSON()`,
// `Refresh.fromJSON()`), so the agent can keep the latency table in IndexedDB.
//
// Numbers follow the Rust code operation for operation (the same f64 operations in the same
// order, no fused multiply-add). Rust keeps durations as whole nanoseconds (`Duration`); this
// port keeps milliseconds as numbers and rounds latencies, configured durations and returned
// timeouts to whole nanoseconds the way the Rust code and its vector replay do, so the values
// entering the formulas are the same. See web/README.md for where the two may still differ (the
// last bit of `Math.log`, times that are not whole milliseconds).

/** The defaults of `config`: 001 §6 (Fig. 10) where the paper gives one. */
export const DEFAULTS = Object.freeze({
  /** r in 001 (2) and (3): the weight of the newest sample, in (0, 1]. */
  r: 0.95,
  /** S: the percentile (in (0, 100)) whose least value chooses the endpoint. */
  choice_percentile: 55,
  /** T: the percentile (in (0, 100)) of latency at which a request times out. */
  timeout_percentile: 99.9,
  /** p in 001 (5), in (0, 1): the share of the weight whose samples n counts in (1). */
  weight_share: 0.99,
  /** TTL: an entry last updated longer ago is refreshed by a HEAD. 41 minutes. */
  ttl_ms: 41 * 60 * 1000,
  /** F: the first interval between probes of a failed endpoint. 28.8 hours. */
  probe_interval_ms: (28 * 3600 + 48 * 60) * 1000,
  /**
   * The bound on F's doubling: 16 × the *default* F (19.2 days), as in the Rust `Default`; it
   * does not follow an overridden `probe_interval_ms`.
   */
  max_probe_interval_ms: 16 * (28 * 3600 + 48 * 60) * 1000,
  /** The timeout before an endpoint's first sample. */
  default_timeout_ms: 10000,
  /** The least timeout. */
  min_timeout_ms: 1000,
  /** The timeout is at least this multiple of the mean latency. */
  min_timeout_factor: 4,
  /** The greatest timeout. */
  max_timeout_ms: 60000,
});

/** The outcomes `record` takes (`Outcome` in the Rust crate, snake_case as in the vectors). */
export const OUTCOMES = Object.freeze(['answered', 'timed_out', 'connect_failed', 'broken', 'cancelled']);

const DURATIONS = [
  'ttl_ms',
  'probe_interval_ms',
  'max_probe_interval_ms',
  'default_timeout_ms',
  'min_timeout_ms',
  'max_timeout_ms',
];

/** A configuration that cannot work (`ConfigError` in the Rust crate). */
export class ConfigError extends Error {
  constructor(field, reason) {
    super(`selection policy: \`${field}\` ${reason}`);
    this.name = 'ConfigError';
    this.field = field;
    this.reason = reason;
  }
}

// ---------------------------------------------------------------------------------------------
// The standard normal quantile: Wichura's AS 241 (PPND16), as `normal.rs` computes it.

const CENTRAL_NUM = [
  2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4,
  4.5921953931549871457e4, 1.3731693765509461125e4, 1.9715909503065514427e3,
  1.3314166789178437745e2, 3.387132872796366608,
];
const CENTRAL_DEN = [
  5.226495278852854561e3, 2.8729085735721942674e4, 3.930789580009271061e4,
  2.1213794301586595867e4, 5.3941960214247511077e3, 6.871870074920579083e2,
  4.2313330701600911252e1, 1.0,
];
const TAIL_NUM = [
  7.7454501427834140764e-4, 2.27238449892691845833e-2, 2.4178072517745061177e-1,
  1.27045825245236838258, 3.64784832476320460504, 5.7694972214606914055,
  4.6303378461565452959, 1.42343711074968357734,
];
const TAIL_DEN = [
  1.05075007164441684324e-9, 5.475938084995344946e-4, 1.51986665636164571966e-2,
  1.4810397642748007459e-1, 6.8976733498510000455e-1, 1.6763848301838038494,
  2.05319162663775882187, 1.0,
];
const FAR_NUM = [
  2.01033439929228813265e-7, 2.71155556874348757815e-5, 1.2426609473880784386e-3,
  2.6532189526576123093e-2, 2.9656057182850489123e-1, 1.7848265399172913358,
  5.4637849111641143699, 6.6579046435011037772,
];
const FAR_DEN = [
  2.04426310338993978564e-15, 1.4215117583164458887e-7, 1.8463183175100546818e-5,
  7.868691311456132591e-4, 1.48753612908506148525e-2, 1.3692988092273580531e-1,
  5.9983220655588793769e-1, 1.0,
];

/** AS 241's coefficients, highest power first, for the test that compares them with normal.rs. */
export const AS241 = Object.freeze({
  CENTRAL_NUM, CENTRAL_DEN, TAIL_NUM, TAIL_DEN, FAR_NUM, FAR_DEN,
});

/** `c[0] x^7 + c[1] x^6 + ... + c[7]`, evaluated as AS 241 writes it. */
function horner(c, x) {
  let acc = c[0];
  for (let i = 1; i < c.length; i++) acc = acc * x + c[i];
  return acc;
}

/**
 * The `p`-quantile of the standard normal distribution: `x` with `P(Z <= x) = p`. `p` outside
 * (0, 1) gives `-Infinity` at 0, `Infinity` at 1 and NaN beyond or for NaN.
 */
export function quantile(p) {
  if (Number.isNaN(p) || !(p >= 0 && p <= 1)) return NaN;
  if (p === 0) return -Infinity;
  if (p === 1) return Infinity;
  const q = p - 0.5;
  if (Math.abs(q) <= 0.425) {
    const r = 0.180625 - q * q;
    return (q * horner(CENTRAL_NUM, r)) / horner(CENTRAL_DEN, r);
  }
  let r = Math.sqrt(-Math.log(q <= 0 ? p : 1 - p));
  let x;
  if (r <= 5) {
    r -= 1.6;
    x = horner(TAIL_NUM, r) / horner(TAIL_DEN, r);
  } else {
    r -= 5;
    x = horner(FAR_NUM, r) / horner(FAR_DEN, r);
  }
  return q < 0 ? -x : x;
}

// ---------------------------------------------------------------------------------------------
// Helpers.

const U64_MAX_NS = 18446744073709551615;

/**
 * `ms` as Rust's `Duration::from_nanos((ms * 1e6).round() as u64)` holds it, back in ms: whole
 * nanoseconds, negative and NaN saturating to 0 and huge values to u64::MAX ns.
 */
export function wholeNanos(ms) {
  const ns = Math.round(ms * 1e6);
  if (!(ns > 0)) return 0;
  return Math.min(ns, U64_MAX_NS) / 1e6;
}

function finite(x, what) {
  if (typeof x !== 'number' || !Number.isFinite(x)) {
    throw new TypeError(`${what}: not a finite number: ${x}`);
  }
  return x;
}

/** Rust's `f64::total_cmp` for the values a score can take (NaN, if ever, goes last). */
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

function checkConfig(c) {
  const unit = (v) => v > 0 && v < 1;
  if (!(c.r > 0 && c.r <= 1)) throw new ConfigError('r', 'must be in (0, 1]');
  if (!unit(c.choice_percentile / 100)) {
    throw new ConfigError('choice_percentile', 'must be in (0, 100)');
  }
  if (!unit(c.timeout_percentile / 100)) {
    throw new ConfigError('timeout_percentile', 'must be in (0, 100)');
  }
  if (!unit(c.weight_share)) throw new ConfigError('weight_share', 'must be in (0, 1)');
  if (c.probe_interval_ms === 0 || c.max_probe_interval_ms < c.probe_interval_ms) {
    throw new ConfigError('probe_interval', 'must be positive and at most max_probe_interval');
  }
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

/** The estimate after one more sample: 001 (4) for the first, (2) and (3) after. */
function addSample(e, sampleMs, r) {
  if (e === null) return { avg_ms: sampleMs, var_ms2: 0, samples: 1 };
  const avg = (1 - r) * e.avg_ms + r * sampleMs;
  const d = sampleMs - avg;
  return {
    avg_ms: avg,
    var_ms2: (1 - r) * e.var_ms2 + r * d * d,
    samples: Math.min(e.samples + 1, Number.MAX_SAFE_INTEGER),
  };
}

/** 001 (1): `avg + c sqrt(var) / sqrt(n)`, n at most `nCap`. */
function percentile(e, c, nCap) {
  const n = Math.max(Math.min(e.samples, nCap), 1);
  return e.avg_ms + (c * Math.sqrt(e.var_ms2)) / Math.sqrt(n);
}

/** Sorting class of an entry: unmeasured live, measured live, measured failed, unmeasured failed. */
function rankClass(entry) {
  if (entry.failed === null) return entry.estimate === null ? 0 : 1;
  return entry.estimate === null ? 3 : 2;
}

function freshEntry(name, now) {
  return { name, estimate: null, updated_ms: now, failed: null, refresh_sent_ms: null };
}

// ---------------------------------------------------------------------------------------------
// The selector.

/** The JSON state's format tag; `fromJSON` refuses any other. */
export const STATE_FORMAT = 'slipstream-select/refresh@1';

/**
 * Web++'s extended Refresh selector over a changing set of named endpoints (replica origins).
 * Methods mirror the Rust `Select` trait: `update`, `order`, `record`, `health`, `timeout`,
 * `probes`, plus `estimate`, `scoreMs` and `samplesCounted` as on the Rust `Refresh`.
 */
export class Refresh {
  /**
   * A selector over `endpoints` (their order breaks ties), all unmeasured and live.
   * @param {string[]} endpoints
   * @param {object} [config] overrides of `DEFAULTS`, same field names
   * @param {number} nowMs
   */
  constructor(endpoints, config = {}, nowMs = 0) {
    this._setConfig(makeConfig(config));
    this._entries = [];
    this.update(endpoints, nowMs);
  }

  _setConfig(config) {
    this._config = config;
    this._cChoice = quantile(config.choice_percentile / 100);
    this._cTimeout = quantile(config.timeout_percentile / 100);
    // 001 (5): the least m with m >= ln(1 - p) / ln(1 - r) - 1 (r = 1: m = 1).
    const bound = Math.log(1 - config.weight_share) / Math.log(1 - config.r) - 1;
    this._nCap = Number.isFinite(bound) && bound > 1 ? Math.ceil(bound) : 1;
  }

  /**
   * Replaces the configuration by `DEFAULTS` with `overrides` (checked as the constructor does;
   * a refused one changes nothing), keeping the latency table.
   */
  setConfig(overrides) {
    this._setConfig(makeConfig(overrides));
  }

  /** The configuration, every field filled in (frozen). */
  get config() {
    return this._config;
  }

  /** The n cap of (1), m of 001 (5). */
  samplesCounted() {
    return this._nCap;
  }

  _entry(name) {
    return this._entries.find((e) => e.name === name);
  }

  /** `endpoint`'s estimates `{avg_ms, var_ms2, samples}`; null before its first sample or outside the set. */
  estimate(endpoint) {
    const e = this._entry(endpoint);
    return e && e.estimate ? { ...e.estimate } : null;
  }

  /** `endpoint`'s S-percentile of latency in ms (001 (1)), the key it is chosen by; null without a sample. */
  scoreMs(endpoint) {
    const e = this._entry(endpoint);
    return e && e.estimate ? percentile(e.estimate, this._cChoice, this._nCap) : null;
  }

  /**
   * Replaces the set of endpoints. Those that stay keep what was learnt about them; new ones
   * start fresh; removed ones are forgotten.
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
      // Rust's Vec::swap_remove, so that a set naming one endpoint twice pairs the entries as
      // the Rust code does.
      const e = old[i];
      const last = old.pop();
      if (i < old.length) old[i] = last;
      return e;
    });
  }

  /**
   * The order in which to try the endpoints for one request: the first is the choice, the rest
   * fail-over candidates. Unmeasured live ones (set order), measured live ones by score, failed
   * measured ones by score, failed unmeasured ones; ties keep set order.
   */
  order(nowMs) {
    finite(nowMs, 'nowMs');
    const ranked = this._entries.map((e) => {
      const cls = rankClass(e);
      const score = cls === 1 || cls === 2 ? percentile(e.estimate, this._cChoice, this._nCap) : 0;
      return { cls, score, name: e.name };
    });
    // Array.prototype.sort is stable (ES2019), as Rust's sort_by is.
    ranked.sort((a, b) => a.cls - b.cls || totalCmp(a.score, b.score));
    return ranked.map((x) => x.name);
  }

  /**
   * The outcome of one exchange with `endpoint` (ignored if it is not in the set): one of
   * `OUTCOMES`; `answered` needs `latencyMs` (rounded to whole nanoseconds, negative as 0).
   * `timed_out`, `connect_failed` and `broken` mark a live endpoint failed; `cancelled` changes
   * nothing.
   */
  record(endpoint, outcome, nowMs, latencyMs) {
    finite(nowMs, 'nowMs');
    if (!OUTCOMES.includes(outcome)) throw new TypeError(`record: unknown outcome ${outcome}`);
    if (outcome === 'answered') finite(latencyMs, 'latencyMs');
    const entry = this._entry(endpoint);
    if (!entry) return;
    switch (outcome) {
      case 'answered':
        entry.estimate = addSample(entry.estimate, wholeNanos(latencyMs), this._config.r);
        entry.updated_ms = nowMs;
        entry.failed = null;
        entry.refresh_sent_ms = null;
        break;
      case 'timed_out':
      case 'connect_failed':
      case 'broken': {
        entry.refresh_sent_ms = null;
        // A probe of an endpoint already failed keeps its schedule (F doubled when handed out).
        if (entry.failed === null) {
          const f = this._config.probe_interval_ms;
          entry.failed = { interval_ms: f, next_probe_ms: nowMs + f };
        }
        break;
      }
      default: // cancelled
    }
  }

  /** Each endpoint and whether it counts as up, in set order: `[[name, live], ...]`. */
  health(nowMs) {
    finite(nowMs, 'nowMs');
    return this._entries.map((e) => [e.name, e.failed === null]);
  }

  /**
   * How long in ms to wait for `endpoint`'s response head before recording `timed_out`; null
   * outside the set. Before the first sample `default_timeout_ms`, then the largest of the
   * T-percentile, `min_timeout_factor` × the mean and `min_timeout_ms`, at most
   * `max_timeout_ms`; in whole nanoseconds.
   */
  timeout(endpoint, nowMs) {
    finite(nowMs, 'nowMs');
    const entry = this._entry(endpoint);
    if (!entry) return null;
    const c = this._config;
    const e = entry.estimate;
    let ms;
    if (e === null) {
      ms = c.default_timeout_ms;
    } else {
      // f64::max / f64::min: no NaN can arise here (finite samples, var >= 0).
      ms = Math.min(
        Math.max(
          Math.max(percentile(e, this._cTimeout, this._nCap), c.min_timeout_factor * e.avg_ms),
          c.min_timeout_ms,
        ),
        c.max_timeout_ms,
      );
    }
    return wholeNanos(ms);
  }

  /**
   * The probes due at `nowMs`, each handed out once (the selector counts it as sent): a
   * `recover` HEAD to every failed endpoint whose next probe is due (set order; F doubles, up to
   * `max_probe_interval_ms`), then at most one `refresh` HEAD to the live measured entry updated
   * longest ago once older than the TTL (handed out again if still unanswered a TTL later).
   * @returns {{endpoint: string, kind: 'recover' | 'refresh'}[]}
   */
  probes(nowMs) {
    finite(nowMs, 'nowMs');
    const max = this._config.max_probe_interval_ms;
    const ttl = this._config.ttl_ms;
    const probes = [];
    for (const e of this._entries) {
      const f = e.failed;
      if (f !== null && f.next_probe_ms <= nowMs) {
        f.interval_ms = Math.min(f.interval_ms * 2, max);
        f.next_probe_ms = nowMs + f.interval_ms;
        probes.push({ endpoint: e.name, kind: 'recover' });
      }
    }
    const since = (t) => Math.max(nowMs - t, 0); // Instant::saturating_duration_since
    let stale = null;
    for (const e of this._entries) {
      if (e.failed !== null || e.estimate === null) continue;
      if (since(e.updated_ms) < ttl) continue;
      if (e.refresh_sent_ms !== null && since(e.refresh_sent_ms) < ttl) continue;
      // min_by_key: the first of equal minima.
      if (stale === null || e.updated_ms < stale.updated_ms) stale = e;
    }
    if (stale !== null) {
      stale.refresh_sent_ms = nowMs;
      probes.push({ endpoint: stale.name, kind: 'refresh' });
    }
    return probes;
  }

  /** The whole state as plain JSON data (the configuration and the latency table). */
  toJSON() {
    return {
      format: STATE_FORMAT,
      config: { ...this._config },
      entries: this._entries.map((e) => ({
        name: e.name,
        estimate: e.estimate && { ...e.estimate },
        updated_ms: e.updated_ms,
        failed: e.failed && { ...e.failed },
        refresh_sent_ms: e.refresh_sent_ms,
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
    obj(s, 'top level', ['format', 'config', 'entries']);
    if (s.format !== STATE_FORMAT) throw new TypeError(`state: format ${s.format}, want ${STATE_FORMAT}`);
    obj(s.config, 'config', Object.keys(DEFAULTS));
    if (!Array.isArray(s.entries)) throw new TypeError('state: entries: not a list');
    const entries = s.entries.map((e, i) => {
      const w = `entries[${i}]`;
      obj(e, w, ['name', 'estimate', 'updated_ms', 'failed', 'refresh_sent_ms']);
      if (typeof e.name !== 'string') throw new TypeError(`state: ${w}.name: not a string`);
      let estimate = null;
      if (e.estimate !== null) {
        obj(e.estimate, `${w}.estimate`, ['avg_ms', 'var_ms2', 'samples']);
        const samples = num(e.estimate.samples, `${w}.estimate.samples`);
        const varMs2 = num(e.estimate.var_ms2, `${w}.estimate.var_ms2`);
        if (!(Number.isSafeInteger(samples) && samples >= 1) || varMs2 < 0) {
          throw new TypeError(`state: ${w}.estimate: samples must be a whole number >= 1, var_ms2 >= 0`);
        }
        estimate = { avg_ms: num(e.estimate.avg_ms, `${w}.estimate.avg_ms`), var_ms2: varMs2, samples };
      }
      let failed = null;
      if (e.failed !== null) {
        obj(e.failed, `${w}.failed`, ['interval_ms', 'next_probe_ms']);
        failed = {
          interval_ms: num(e.failed.interval_ms, `${w}.failed.interval_ms`),
          next_probe_ms: num(e.failed.next_probe_ms, `${w}.failed.next_probe_ms`),
        };
      }
      return {
        name: e.name,
        estimate,
        updated_ms: num(e.updated_ms, `${w}.updated_ms`),
        failed,
        refresh_sent_ms: e.refresh_sent_ms === null ? null : num(e.refresh_sent_ms, `${w}.refresh_sent_ms`),
      };
    });
    const sel = Object.create(Refresh.prototype);
    sel._setConfig(makeConfig(s.config));
    sel._entries = entries;
    return sel;
  }
}
