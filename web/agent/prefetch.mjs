// NPS's browser side (paper 000 §5, §6.1), the decisions without I/O: whether to prefetch at
// all (Save-Data, slow connections), how many bytes a page may prefetch (§5: "services place a
// limit on the ratio of prefetched bytes to demand bytes"), how long a prefetched entry may
// serve a demand request (§5: a short lifetime, so prefetched data leaves the cache early), and
// how to read the hint server's answer. sw.js does the fetching and the Cache Storage.

/** The agent's settings (fixed for now; the functions take them as an argument for tests). */
export const PREFETCH_DEFAULTS = Object.freeze({
  /** Prefetched bytes allowed per demand byte of the page that asked (§5's ratio). */
  bytes_per_demand_byte: 10,
  /** A page with no measurable demand bytes may still prefetch this much. */
  min_bytes: 256 * 1024,
  /** A prefetched entry serves demand requests for this long, then is dropped. */
  ttl_ms: 5 * 60 * 1000,
  /** Waits a page accepts before giving up: the hint server's, and the page's own. */
  max_waits: 3,
  /** A page's own wait is read only from a copy of the page this fresh (by its
   * `data-hints-wait-at`): an older one is a cached copy, or the clocks disagree too much. */
  page_wait_max_age_ms: 10000,
  /** The longest single wait. */
  max_wait_ms: 10000,
  /** Turns (hint lists) a page follows at most. */
  max_turns: 10,
});

/**
 * Whether to prefetch on this connection: never with Save-Data (the user asked for fewer
 * bytes), nor on connections the browser rates 2G or slower. `connection` is
 * `navigator.connection` (absent in browsers without the Network Information API: prefetch).
 */
export function mayPrefetch(connection) {
  if (!connection) return { ok: true, why: null };
  if (connection.saveData === true) return { ok: false, why: 'save-data' };
  if (['slow-2g', '2g'].includes(connection.effectiveType)) return { ok: false, why: 'slow-connection' };
  return { ok: true, why: null };
}

/**
 * Whether a prefetched response may be kept for a later navigation: not when caches may not
 * share or keep it (`Cache-Control: private` or `no-store`; the node never hints such URLs,
 * this is the agent's own check). `cacheControl` is the header's value, or null.
 */
export function storable(cacheControl) {
  if (typeof cacheControl !== 'string') return true;
  return !cacheControl
    .split(',')
    .map((d) => d.split('=')[0].trim().toLowerCase())
    .some((name) => name === 'private' || name === 'no-store');
}

/** The bytes a page whose own bytes were `demandBytes` may prefetch. */
export function byteAllowance(demandBytes, config = PREFETCH_DEFAULTS) {
  const d = Number.isFinite(demandBytes) && demandBytes > 0 ? demandBytes : 0;
  return Math.max(config.min_bytes, d * config.bytes_per_demand_byte);
}

/** Whether an entry stored at `storedMs` may still serve a demand request at `nowMs`. */
export function isFresh(storedMs, nowMs, config = PREFETCH_DEFAULTS) {
  return Number.isFinite(storedMs) && nowMs >= storedMs && nowMs - storedMs < config.ttl_ms;
}

/**
 * Reads a `/_slipstream/hints` answer: `{hints, base, nextTurn, waitMs}`; a malformed answer
 * reads as "nothing, and stop" (a page never fails because of its hints).
 */
export function readHints(json, origin) {
  const out = { hints: [], base: origin, nextTurn: null, waitMs: null };
  if (json === null || typeof json !== 'object') return out;
  if (Array.isArray(json.hints)) {
    out.hints = json.hints.filter((h) => typeof h === 'string' && h.startsWith('/') && !h.startsWith('//'));
  }
  // A base that is not an http(s) URL: prefetch from the page's origin.
  out.base = baseOrigin(json.prefetch_base) ?? origin;
  if (Number.isInteger(json.next_turn) && json.next_turn >= 0) out.nextTurn = json.next_turn;
  if (Number.isInteger(json.retry_after_ms) && json.retry_after_ms >= 0) out.waitMs = json.retry_after_ms;
  return out;
}

/**
 * What is left at `nowMs` of the wait a page asked for before its first hint request: its
 * munged script's `data-hints-wait-ms`, given at `data-hints-wait-at` (Unix ms, the node's
 * clock). Null, so that the agent asks at once and the hint server answers, for a malformed
 * value, a wait already over, or a page given more than `page_wait_max_age_ms` from now in
 * either direction (a cached copy, or clocks too far apart to tell). Never more than the wait
 * itself, whatever the clocks say.
 */
export function pageWaitLeft(waitValue, atValue, nowMs, config = PREFETCH_DEFAULTS) {
  const whole = (v, digits) => (typeof v === 'string' && new RegExp(`^\\d{1,${digits}}$`).test(v.trim()) ? Number(v.trim()) : null);
  const wait = whole(waitValue, 9);
  const at = whole(atValue, 15);
  if (wait === null || at === null || !Number.isFinite(nowMs)) return null;
  if (Math.abs(nowMs - at) > config.page_wait_max_age_ms) return null;
  const left = Math.min(wait, at + wait - nowMs);
  return left > 0 ? left : null;
}

/**
 * The report a page's first hint request carries for the node's cost measurement (`served_ms`,
 * `page_us`; `prefetch.experimental.cost_target`), or null for none: when the node served the
 * page (its munged script's `data-served-ms`, which only pages the node served on demand
 * carry) and how long its response took as the browser saw it, Navigation Timing's
 * `responseEnd − requestStart` (`nav`, a PerformanceNavigationTiming or a plain object with
 * those fields and `transferSize`). Null for a malformed value, a page that came from a cache (`transferSize`
 * 0: the node's time is not its), or a time that is no page's (negative, over a minute).
 */
export function pageReport(servedValue, nav) {
  if (typeof servedValue !== 'string' || !/^\d{1,15}$/.test(servedValue.trim())) return null;
  if (!nav || nav.transferSize === 0) return null;
  const ms = Number(nav.responseEnd) - Number(nav.requestStart);
  if (!Number.isFinite(ms) || ms < 0 || ms > 60000) return null;
  return { served_ms: servedValue.trim(), page_us: String(Math.round(ms * 1000)) };
}

/**
 * The origin of an http(s) base URL (the hint server's `prefetch_base`, the prefetch listener a
 * page names in its munged script's `data-prefetch-base`), or null for anything else.
 */
export function baseOrigin(value) {
  if (typeof value !== 'string') return null;
  try {
    const u = new URL(value);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.origin : null;
  } catch {
    return null;
  }
}
