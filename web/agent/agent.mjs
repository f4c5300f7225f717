// The Web++ client agent's decisions (paper 001 §3.2, §3.3, §4.1), without I/O: which replica
// to try for a logical URL and in which order, with what timeout, which probes are due, and
// what the latency table says. `sw.js` is the I/O shell around it (fetch, timers, IndexedDB,
// messages); it feeds this module the time (`nowMs`) and the outcome of every exchange.
//
// One replica selector runs over every replica endpoint the agent knows of: Decay (decay.mjs,
// the default: time-decayed estimates, budgeted probes and hedges, capped back-off, a race while
// nothing is measured) or Refresh (select.mjs, the paper's), as the block's `config.policy`
// says ("decay" when absent). It runs over every endpoint, an
// endpoint being a physical URL's origin (scheme://host:port), so a latency learnt through one
// logical URL serves every URL replicated there, on every page of the site. (001 §4.1 goes
// further: its latency table is shared by the clients through a shared file system, each client
// keeping its own only where there is none. Here a browser profile keeps its own, in the
// worker's IndexedDB, shared by every page and tab of the origin, not by other browsers.) The
// replica lists come from the `slipstream-replicas` block the
// server puts into every HTML page (001 §5.1; format in web/README.md).
//
// The server lists only the replicas on nodes its cluster holds alive, so a page served while a
// node is down no longer names it. The agent keeps such an endpoint all the same, with its
// latency history and its failure, and a physical URL of it to probe: the selector, not the
// latest page, says whether an endpoint is up (001 §4.1: a failed server is polled until it
// answers). A URL is bound only to the replicas its latest list names.
//
// A block binds logical URLs one by one, and (version 2) by rules: a key `P*` gives the stems of
// every URL under the prefix P that no key of its own names (`resolveKey`; the server sends,
// beside a rule, every directory pattern more specific than it, so the rule is never wrong for a
// URL it matches: crates/slipstream-replica/src/block.rs).
//
// Everything is bounded: at most `MAX_URLS` logical URLs and `MAX_RULES` rules (the oldest learnt
// forgotten first), at
// most `MAX_REPLICAS_PER_URL` replicas per URL (the rest ignored), at most `MAX_ENDPOINTS`
// endpoints (the one named longest ago forgotten first). The whole state is plain JSON
// (`toJSON`, `Agent.fromJSON`) for IndexedDB.

import { Refresh, makeConfig as refreshConfig } from './select.mjs';
import { Decay, makeConfig as decayConfig } from './decay.mjs';

/**
 * The JSON state's format tag; `fromJSON` refuses any other. Version 2 keeps the selector of
 * either policy (`overrides.policy`); a version 1 state (always Refresh, before Decay) is
 * refused, so the worker starts afresh rather than keep a table of the old policy.
 */
export const AGENT_FORMAT = 'slipstream-agent@2';

/** The replica selectors a block may name (`config.policy`), by name; the first is the default. */
export const POLICIES = Object.freeze({
  decay: { Selector: Decay, makeConfig: decayConfig },
  refresh: { Selector: Refresh, makeConfig: refreshConfig },
});

/** The policy used when a block names none. */
export const DEFAULT_POLICY = 'decay';

/**
 * A block's `config` split into the policy's name and the selector's settings (checked by that
 * selector, so a bad configuration is refused whole): `{policy, settings}`. Throws a TypeError
 * for an unknown policy, the selector's ConfigError for a bad setting.
 */
export function splitConfig(config) {
  const { policy = DEFAULT_POLICY, ...settings } = config ?? {};
  if (typeof policy !== 'string' || !Object.hasOwn(POLICIES, policy)) {
    throw new TypeError(`replica block: config.policy: ${JSON.stringify(policy)}, want one of ${Object.keys(POLICIES).join(', ')}`);
  }
  POLICIES[policy].makeConfig(settings);
  return { policy, settings };
}

/**
 * The replica block's format version (`"v"`) the server writes: 2 adds rules (keys ending in
 * `*`). Version 1 blocks (no rules) are still read; other versions are refused.
 */
export const BLOCK_VERSION = 2;

/** The version of a block whose entries travel compressed (`urls_z`; see `expandBlock`). */
export const BLOCK_VERSION_COMPRESSED = 3;

/** The most bytes a block's compressed entries may expand to (the server's `MAX_EXPANDED`). */
export const MAX_EXPANDED_BYTES = 8 << 20;

/** The most wildcard rules remembered; learning one more forgets the one learnt longest ago. */
export const MAX_RULES = 1024;

/** The most logical URLs remembered; learning one more forgets the one learnt longest ago. */
export const MAX_URLS = 4096;

/** The most replicas kept for one logical URL; the block's order decides which. */
export const MAX_REPLICAS_PER_URL = 16;

/** The most endpoints in the latency table; one more forgets the one named longest ago. */
export const MAX_ENDPOINTS = 256;

/** The id of the script element holding the replica block. */
export const BLOCK_ID = 'slipstream-replicas';

/** The longest HTML text searched for the block; a page beyond it is bound by its first part. */
export const MAX_HTML_CHARS = 8 * 1024 * 1024;

const BLOCK_RE = new RegExp(
  `<script\\b[^>]*\\bid\\s*=\\s*["']?${BLOCK_ID}["']?[^>]*>([\\s\\S]*?)</script\\s*>`,
  'gi',
);

/**
 * The replica block's JSON text in an HTML document's text, or null if it has none. The server
 * appends its block at the end of the document, after anything the page itself holds, so the
 * last block counts. At most `MAX_HTML_CHARS` are searched.
 */
export function blockText(html) {
  if (typeof html !== 'string') return null;
  let last = null;
  for (const m of html.slice(0, MAX_HTML_CHARS).matchAll(BLOCK_RE)) last = m[1];
  return last;
}

/** The logical key of a same-origin URL: its path and query, as the block names it. */
export function logicalKey(url) {
  const u = url instanceof URL ? url : new URL(url);
  return u.pathname + u.search;
}

/** A physical URL's endpoint: its origin. */
export function endpointOf(physical) {
  return new URL(physical).origin;
}

/**
 * A block with its entries readable: a version 3 block carries its `urls` object's JSON as
 * `urls_z`, the standard base64 of a zlib stream (RFC 1950), which this expands into `urls`
 * (`DecompressionStream('deflate')`); any other block is returned as it is. `text` is the
 * block's JSON text or its parsed value. Rejects with a TypeError when `urls_z` is not base64
 * of zlib, expands past `MAX_EXPANDED_BYTES` (read as it expands, never whole), or is not JSON.
 */
export async function expandBlock(text) {
  const b = typeof text === 'string' ? JSON.parse(text) : text;
  if (b === null || typeof b !== 'object' || !('urls_z' in b)) return b;
  if (typeof b.urls_z !== 'string') throw new TypeError('replica block: urls_z: not a string');
  let bytes;
  try {
    bytes = Uint8Array.from(atob(b.urls_z), (c) => c.charCodeAt(0));
  } catch {
    throw new TypeError('replica block: urls_z: not base64');
  }
  const reader = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate')).getReader();
  const chunks = [];
  let length = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      length += value.length;
      if (length > MAX_EXPANDED_BYTES) {
        reader.cancel().catch(() => {});
        throw new TypeError(`replica block: urls_z: expands past ${MAX_EXPANDED_BYTES} bytes`);
      }
      chunks.push(value);
    }
  } catch (e) {
    if (e instanceof TypeError && e.message.startsWith('replica block')) throw e;
    throw new TypeError(`replica block: urls_z: not zlib: ${e.message ?? e}`);
  }
  const all = new Uint8Array(length);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  let urls;
  try {
    urls = JSON.parse(new TextDecoder().decode(all));
  } catch {
    throw new TypeError('replica block: urls_z: not JSON');
  }
  const { urls_z: _, ...rest } = b;
  return { ...rest, urls };
}

/**
 * The replica block, checked: `{v, config, servers, urls}`, returned as `{config, urls, rules}`
 * with `urls` a list of `[key, [physical...]]` and `rules` a list of `[prefix, [stem...]]`, each
 * stem a physical URL ending in `*` that stands for the rest of the logical URL after the prefix.
 * A key ending in `*` (version 2) is a rule for its prefix. A list item in the block is a
 * physical URL (a stem in a rule), or the index `i` of a string in `servers`, meaning
 * `servers[i]` followed by the key. An empty list (version 2) says the URL has no replica and
 * keeps a rule from claiming it.
 * `text` is the block's JSON text or its parsed value; `pageOrigin` is the origin of the page
 * that carried it (keys are resolved against it and must stay on it). Throws a TypeError naming
 * what is wrong; physical URLs that are not absolute http(s) URLs are dropped, not refused, so
 * one bad entry does not cost the page its other bindings.
 */
export function parseBlock(text, pageOrigin) {
  const b = typeof text === 'string' ? JSON.parse(text) : text;
  if (b === null || typeof b !== 'object' || Array.isArray(b)) throw new TypeError('replica block: not an object');
  if (b.v !== 1 && b.v !== BLOCK_VERSION && b.v !== BLOCK_VERSION_COMPRESSED) {
    throw new TypeError(`replica block: version ${b.v}, want 1 to ${BLOCK_VERSION_COMPRESSED}`);
  }
  if ('urls_z' in b) throw new TypeError('replica block: urls_z: compressed; expandBlock it first');
  const config = b.config ?? {};
  if (config === null || typeof config !== 'object' || Array.isArray(config)) {
    throw new TypeError('replica block: config: not an object');
  }
  // The selector checks the values; check here that they would be accepted, so a bad block
  // is refused whole before anything is learnt from it.
  splitConfig(config);
  const urls = b.urls ?? {};
  if (urls === null || typeof urls !== 'object' || Array.isArray(urls)) {
    throw new TypeError('replica block: urls: not an object');
  }
  const servers = b.servers ?? [];
  if (!Array.isArray(servers)) throw new TypeError('replica block: servers: not a list');
  const origin = new URL(pageOrigin).origin;
  const out = [];
  const rules = [];
  for (const [rawKey, list] of Object.entries(urls)) {
    if (!Array.isArray(list)) throw new TypeError(`replica block: urls[${rawKey}]: not a list`);
    const rule = b.v >= 2 && rawKey.endsWith('*');
    const keyUrl = new URL(rule ? rawKey.slice(0, -1) : rawKey, pageOrigin);
    if (keyUrl.origin !== origin) continue;
    const physical = [];
    for (const item of list) {
      let p = item;
      if (Number.isInteger(item) && item >= 0 && item < servers.length && typeof servers[item] === 'string') {
        p = servers[item] + rawKey;
      }
      if (typeof p !== 'string' || (rule && !p.endsWith('*'))) continue;
      let u;
      try {
        u = new URL(p);
      } catch {
        continue;
      }
      if (u.protocol !== 'http:' && u.protocol !== 'https:') continue;
      if (rule && !u.href.endsWith('*')) continue;
      if (!physical.includes(u.href)) physical.push(u.href);
      if (physical.length === MAX_REPLICAS_PER_URL) break;
    }
    if (rule) {
      // The server matches prefixes on the text as the directory holds it, the agent on the
      // browser's request URL, which is normalised (dot segments removed, spaces escaped, an
      // empty query dropped). A prefix that normalising would change can match no request
      // the server would match to it: drop it rather than let it claim other URLs.
      const prefix = rawKey.slice(0, -1);
      if (prefix === '' || logicalKey(keyUrl) === prefix) rules.push([prefix, physical]);
    } else if (physical.length || b.v >= 2) out.push([logicalKey(keyUrl), physical]);
  }
  return { config: { ...config }, urls: out, rules };
}

/**
 * The physical URLs of logical `key` by `urls` (key → physical URLs) and `rules` (prefix →
 * stems), as the server's directory resolves it (crates/slipstream-replica/src/block.rs
 * `lookup`): the key's own entry, else the rule with the longest prefix of the key, each stem's
 * `*` replaced by the rest of the key; null when neither names it.
 */
export function resolveKey(urls, rules, key) {
  const own = urls.get(key);
  if (own !== undefined) return own;
  let best = null;
  for (const [prefix, stems] of rules) {
    if (key.startsWith(prefix) && (best === null || prefix.length > best[0].length)) best = [prefix, stems];
  }
  if (best === null) return null;
  const rest = key.slice(best[0].length);
  return best[1].map((stem) => stem.slice(0, -1) + rest);
}

/** `resolveKey` with one parsed block (`parseBlock`). */
export function blockLookup(block, key) {
  return resolveKey(new Map(block.urls), new Map(block.rules ?? []), key);
}

/**
 * The agent's state: the selector over all endpoints (Decay or Refresh), the
 * logical-to-physical map, the configuration overrides last received, and a physical URL per
 * endpoint to probe.
 */
export class Agent {
  /**
   * An agent that knows no URL yet, with `config`: `policy` ("decay", the default, or
   * "refresh") and overrides of that selector's `DEFAULTS`.
   */
  constructor(config = {}, nowMs = 0) {
    const { policy, settings } = splitConfig(config);
    this._overrides = { ...config };
    this._policy = policy;
    this._selector = new POLICIES[policy].Selector([], settings, nowMs);
    /** @type {Map<string, string[]>} logical key → physical URLs, oldest learnt first. */
    this._urls = new Map();
    /** @type {Map<string, string[]>} logical prefix → stems (`parseBlock`), oldest learnt first. */
    this._rules = new Map();
    /** @type {Map<string, string>} endpoint → a physical URL of it to probe, named longest ago first. */
    this._probeUrls = new Map();
  }

  /** The selector (for reading; the agent is its only writer). */
  get selector() {
    return this._selector;
  }

  /** How many logical URLs are remembered. */
  get urlCount() {
    return this._urls.size;
  }

  /** The selector's policy: "decay" or "refresh". */
  get policy() {
    return this._policy;
  }

  /** The configuration overrides in force. */
  get overrides() {
    return { ...this._overrides };
  }

  /** How many rules are remembered. */
  get ruleCount() {
    return this._rules.size;
  }

  /** The physical URLs of `key` (`resolveKey`), or null. */
  replicas(key) {
    return resolveKey(this._urls, this._rules, key);
  }

  /**
   * Learns a parsed block (`parseBlock`): its bindings replace those of the same keys and
   * become the newest; a changed configuration is applied keeping the latency table.
   */
  learn(block, nowMs) {
    if (JSON.stringify(block.config) !== JSON.stringify(this._overrides)) {
      const { policy, settings } = splitConfig(block.config);
      if (policy === this._policy) {
        this._selector.setConfig(settings);
      } else {
        // Another policy: its own table, started afresh over the same endpoints.
        const names = this._selector.health(nowMs).map(([name]) => name);
        this._selector = new POLICIES[policy].Selector(names, settings, nowMs);
        this._policy = policy;
      }
      this._overrides = { ...block.config };
    }
    const named = [];
    for (const [key, physical] of block.urls) {
      this._urls.delete(key);
      this._urls.set(key, physical);
      for (const p of physical) this._name(named, p, p);
    }
    // A stem cannot be probed; until a URL bound through its rule is fetched (`plan`), the
    // endpoint is probed at the stem's fixed part (any answer but a 5xx says it is up).
    for (const [prefix, stems] of block.rules ?? []) {
      this._rules.delete(prefix);
      this._rules.set(prefix, stems);
      for (const stem of stems) this._name(named, stem, this._probeUrls.get(endpointOf(stem)) ?? stem.slice(0, -1));
    }
    while (this._urls.size > MAX_URLS) this._urls.delete(this._urls.keys().next().value);
    while (this._rules.size > MAX_RULES) this._rules.delete(this._rules.keys().next().value);
    let evicted = false;
    while (this._probeUrls.size > MAX_ENDPOINTS) {
      this._probeUrls.delete(this._probeUrls.keys().next().value);
      evicted = true;
    }
    if (evicted) this._unbindForgotten();
    this._syncEndpoints(nowMs, named);
  }

  /** Notes that a block named `physical`'s endpoint, to be probed at `probe` from now on. */
  _name(named, physical, probe) {
    const ep = endpointOf(physical);
    if (!named.includes(ep)) named.push(ep);
    this._probeUrls.delete(ep);
    this._probeUrls.set(ep, probe);
  }

  /**
   * Drops every binding to an endpoint no longer known (forgotten for `MAX_ENDPOINTS`), and a
   * URL left without replicas: the selector has no entry for such an endpoint, so it would get
   * no timeout (`plan` would hand out `timeoutMs: null`) and no probe. A URL is bound only to
   * endpoints in the table; a page naming it again binds it afresh.
   */
  _unbindForgotten() {
    for (const [key, physical] of this._urls) {
      const kept = physical.filter((p) => this._probeUrls.has(endpointOf(p)));
      if (kept.length === 0 && physical.length !== 0) this._urls.delete(key);
      else if (kept.length !== physical.length) this._urls.set(key, kept);
    }
    for (const [prefix, stems] of this._rules) {
      const kept = stems.filter((p) => this._probeUrls.has(endpointOf(p)));
      if (kept.length === 0 && stems.length !== 0) this._rules.delete(prefix);
      else if (kept.length !== stems.length) this._rules.set(prefix, kept);
    }
  }

  /**
   * The known endpoints into the selector, keeping its order: those it has, then new ones in
   * the order the block named them (which breaks ties between unmeasured endpoints).
   */
  _syncEndpoints(nowMs, named) {
    const old = this._selector.health(nowMs).map(([name]) => name);
    const next = old.filter((n) => this._probeUrls.has(n));
    for (const n of named) if (this._probeUrls.has(n) && !next.includes(n)) next.push(n);
    if (next.length !== old.length || next.some((n, i) => n !== old[i])) this._selector.update(next, nowMs);
  }

  /**
   * The replicas to try for logical `key`, best first: `[{endpoint, url, timeoutMs}]` in the
   * selector's order of their endpoints (001 §4.1: the least S-percentile first; failed ones
   * last, where the paper leaves them out, so a request still has somewhere to go),
   * or null when the key has no replicas. The caller tries them in turn and then the plain URL.
   */
  plan(key, nowMs) {
    const physical = resolveKey(this._urls, this._rules, key);
    if (!physical || physical.length === 0) return null;
    if (!this._urls.has(key)) {
      // Bound through a rule: a URL to probe its endpoints at, better than a stem's fixed part.
      for (const p of physical) if (this._probeUrls.has(endpointOf(p))) this._probeUrls.set(endpointOf(p), p);
    }
    const rank = new Map(this._selector.order(nowMs).map((name, i) => [name, i]));
    return physical
      .map((url, i) => ({ url, endpoint: endpointOf(url), i }))
      .sort((a, b) => (rank.get(a.endpoint) ?? Infinity) - (rank.get(b.endpoint) ?? Infinity) || a.i - b.i)
      .map(({ url, endpoint }) => ({ endpoint, url, timeoutMs: this._selector.timeout(endpoint, nowMs) }));
  }

  /**
   * The outcome of one exchange with `endpoint` (select.mjs `OUTCOMES`). Which outcomes mark an
   * endpoint failed is the project's rule (crates/slipstream-select/src/refresh.rs, "What
   * counts as a failure"): 001 §4.1 names only the expired timeout.
   */
  record(endpoint, outcome, nowMs, latencyMs) {
    this._selector.record(endpoint, outcome, nowMs, latencyMs);
  }

  /**
   * A user request began (not a probe, hedge or fail-over): Decay earns part of a token for
   * probes and hedges. Call once per request the agent binds.
   */
  requested(nowMs) {
    this._selector.requested?.(nowMs);
  }

  /**
   * After how long (ms) without a response head from `endpoint`, the plan's first, to send the
   * request to the next replica as well; null for no hedge (Refresh never hedges).
   */
  hedgeAfter(endpoint, nowMs) {
    return this._selector.hedgeAfter ? this._selector.hedgeAfter(endpoint, nowMs) : null;
  }

  /** A hedge was sent after `hedgeAfter` said so (spends Decay's token). */
  hedged(endpoint, nowMs) {
    this._selector.hedged?.(endpoint, nowMs);
  }

  /** To how many of the plan's first replicas to send a request at once (Decay races while nothing is measured). */
  race(nowMs) {
    return this._selector.race ? this._selector.race(nowMs) : 1;
  }

  /**
   * A physical URL of `endpoint` to send a HEAD to: the last one a page named. 001 §4.1 probes
   * "a randomly chosen resource" of the server; the agent takes the last one named instead (no
   * randomness in this module, and a URL a page named recently is the likeliest to exist).
   */
  probeUrl(endpoint) {
    return this._probeUrls.get(endpoint) ?? null;
  }

  /**
   * The probes due now, each handed out once: `[{endpoint, kind, url, timeoutMs}]` (kind
   * `recover` for a failed endpoint, 001 §4.1's F doubling; `refresh` for one unused for TTL).
   */
  dueProbes(nowMs) {
    return this._selector
      .probes(nowMs)
      .map((p) => ({ ...p, url: this.probeUrl(p.endpoint), timeoutMs: this._selector.timeout(p.endpoint, nowMs) }))
      .filter((p) => p.url !== null);
  }

  /**
   * When the next probe falls due (ms, on the caller's clock), or null if none can. Refresh:
   * the earliest recover probe of a failed endpoint, or a refresh a TTL after the oldest
   * update. Decay: the earliest end of a failed endpoint's back-off, and, while a whole token
   * is held, when the exploration `probes` would hand out next falls due (as `probes` picks
   * it: a live endpoint other than the order's first, unmeasured and never explored at once,
   * else `explore_after_ms` after its last sample or exploration).
   */
  nextProbeMs(nowMs = 0) {
    const s = this._selector.toJSON();
    let next = null;
    const at = (t) => {
      if (next === null || t < next) next = t;
    };
    if (this._policy === 'decay') {
      const first = s.entries.length ? this._selector.order(nowMs)[0] : null;
      for (const e of s.entries) {
        if (e.failures > 0) at(e.retry_at_ms);
        else if (s.tokens >= 1 && e.name !== first) {
          if (e.estimate === null && e.explored_ms === null) at(e.sampled_ms);
          else at(Math.max(e.explored_ms ?? -Infinity, e.sampled_ms) + s.config.explore_after_ms);
        }
      }
      return next;
    }
    for (const e of s.entries) {
      if (e.failed) at(e.failed.next_probe_ms);
      else if (e.estimate) at(Math.max(e.updated_ms, e.refresh_sent_ms ?? -Infinity) + s.config.ttl_ms);
    }
    return next;
  }

  /**
   * The latency table as shown to people and tests: per endpoint in the selector's order its
   * estimate, S-percentile score, health, sample count, timeout and probe schedule.
   */
  table(nowMs) {
    const sel = this._selector;
    const state = sel.toJSON();
    const decay = this._policy === 'decay';
    const byName = new Map(state.entries.map((e) => [e.name, e]));
    const urlsPer = new Map();
    for (const list of [...this._urls.values(), ...this._rules.values()]) {
      for (const p of list) {
        const ep = endpointOf(p);
        urlsPer.set(ep, (urlsPer.get(ep) ?? 0) + 1);
      }
    }
    return sel.order(nowMs).map((name, rank) => {
      const e = byName.get(name);
      if (decay) {
        const failed = e.failures > 0;
        return {
          endpoint: name,
          rank,
          live: !failed,
          samples: e.estimate ? e.estimate.samples : 0,
          avg_ms: e.estimate ? e.estimate.avg_ms : null,
          var_ms2: e.estimate ? e.estimate.var_ms2 : null,
          // Decay ranks by the estimate itself.
          score_ms: e.estimate ? e.estimate.avg_ms : null,
          timeout_ms: sel.timeout(name, nowMs),
          updated_ms: e.sampled_ms,
          failures: e.failures,
          probe_interval_ms: failed ? sel._backoff(e.failures) : null,
          next_probe_ms: failed ? e.retry_at_ms : null,
          urls: urlsPer.get(name) ?? 0,
        };
      }
      return {
        endpoint: name,
        rank,
        live: e.failed === null,
        samples: e.estimate ? e.estimate.samples : 0,
        avg_ms: e.estimate ? e.estimate.avg_ms : null,
        var_ms2: e.estimate ? e.estimate.var_ms2 : null,
        score_ms: sel.scoreMs(name),
        timeout_ms: sel.timeout(name, nowMs),
        updated_ms: e.updated_ms,
        probe_interval_ms: e.failed ? e.failed.interval_ms : null,
        next_probe_ms: e.failed ? e.failed.next_probe_ms : null,
        urls: urlsPer.get(name) ?? 0,
      };
    });
  }

  /** The whole state as plain JSON data. */
  toJSON() {
    return {
      format: AGENT_FORMAT,
      overrides: { ...this._overrides },
      selector: this._selector.toJSON(),
      urls: [...this._urls.entries()].map(([k, v]) => [k, [...v]]),
      rules: [...this._rules.entries()].map(([k, v]) => [k, [...v]]),
      endpoints: [...this._probeUrls.entries()],
    };
  }

  /** An agent from `toJSON()`'s data or its text; anything else is refused (TypeError). */
  static fromJSON(state) {
    const s = typeof state === 'string' ? JSON.parse(state) : state;
    if (s === null || typeof s !== 'object' || s.format !== AGENT_FORMAT) {
      throw new TypeError(`agent state: format ${s && s.format}, want ${AGENT_FORMAT}`);
    }
    if (s.overrides === null || typeof s.overrides !== 'object' || Array.isArray(s.overrides)) {
      throw new TypeError('agent state: overrides: not an object');
    }
    if (!Array.isArray(s.urls) || s.urls.length > MAX_URLS) throw new TypeError('agent state: urls: not a bounded list');
    const bindings = (list, what, stems) => {
      const map = new Map();
      for (const entry of list) {
        const ok =
          Array.isArray(entry) &&
          entry.length === 2 &&
          typeof entry[0] === 'string' &&
          Array.isArray(entry[1]) &&
          entry[1].length <= MAX_REPLICAS_PER_URL &&
          entry[1].every((p) => typeof p === 'string' && endpointOf(p) && (!stems || p.endsWith('*')));
        if (!ok) throw new TypeError(`agent state: ${what}: bad entry ${JSON.stringify(entry)}`);
        map.set(entry[0], [...entry[1]]);
      }
      return map;
    };
    const urls = bindings(s.urls, 'urls', false);
    // `rules` came with block version 2; a state written before has none.
    const rulesList = s.rules ?? [];
    if (!Array.isArray(rulesList) || rulesList.length > MAX_RULES) throw new TypeError('agent state: rules: not a bounded list');
    const rules = bindings(rulesList, 'rules', true);
    if (!Array.isArray(s.endpoints) || s.endpoints.length > MAX_ENDPOINTS) {
      throw new TypeError('agent state: endpoints: not a bounded list');
    }
    const probeUrls = new Map();
    for (const entry of s.endpoints) {
      const ok = Array.isArray(entry) && entry.length === 2 && typeof entry[1] === 'string' && endpointOf(entry[1]) === entry[0];
      if (!ok) throw new TypeError(`agent state: endpoints: bad entry ${JSON.stringify(entry)}`);
      probeUrls.set(entry[0], entry[1]);
    }
    const { policy } = splitConfig(s.overrides);
    const a = Object.create(Agent.prototype);
    a._probeUrls = probeUrls;
    a._overrides = { ...s.overrides };
    a._policy = policy;
    a._selector = POLICIES[policy].Selector.fromJSON(s.selector);
    a._urls = urls;
    a._rules = rules;
    // A state written before bindings to forgotten endpoints were dropped may still hold some.
    a._unbindForgotten();
    return a;
  }
}
