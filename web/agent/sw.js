// The Web++ client agent as a Service Worker (paper 001 §3; the browser-side binding of §3.2
// done where §3.5 wished it could be: below the page, for every request). A module worker
// served at /_slipstream/sw.js; it imports ./agent/agent.mjs (/_slipstream/agent/agent.mjs),
// which holds every decision. This file is the I/O around it: it reads the replica block of
// each HTML page, binds each same-origin GET that has replicas (navigations and subresources
// alike) to the best replica with a timeout (racing the replicas while none is measured, and
// hedging to the next one when the selector says so, within its budget), fails over to the
// next and finally to the plain URL, sends the due probes, keeps the state in IndexedDB and
// answers the latency-table page. The agent's own files (`/_slipstream/agent/*`, served by
// every cluster member) come from the page's origin, or from the fastest live replica the
// agent knows while that origin is down.

import { AGENT_FORMAT, Agent, blockText, endpointOf, expandBlock, logicalKey, parseBlock } from './agent/agent.mjs';
import { baseOrigin, byteAllowance, isFresh, mayPrefetch, pageReport, pageWaitLeft, PREFETCH_DEFAULTS, readHints, storable } from './agent/prefetch.mjs';

const DB_NAME = 'slipstream-agent';
const DB_STORE = 'state';
const DB_KEY = 'agent';
/**
 * The least time between two writes of the state: changes within it are written together, so a
 * page load's dozens of samples cost one write. A change of an endpoint's health (a failure, or a
 * failed endpoint answering) is written at once. What a worker stopped by the browser loses is
 * at most this much of samples.
 */
const SAVE_INTERVAL_MS = 1000;
/** The longest wait between two looks at the probe schedule while the worker is alive. */
const TICK_MAX_MS = 1000;

/** This worker instance: a restart (the browser stops idle workers) gives a new id. */
const instance = Math.random().toString(36).slice(2) + Date.now().toString(36);
const startedMs = Date.now();
/** Whether the state was read back from IndexedDB at start, and any error doing so. */
let restored = false;
let loadError = null;
let lastError = null;
/** The format of a stored state dropped at start for being of another format, or null. */
let droppedFormat = null;
/** @type {Agent} */
let agent = null;
/** Changes not yet written, and when the last write was and how many there were. */
let dirty = false;
let savedMs = null;
let writes = 0;
/** Endpoints with a probe in flight (one at a time each). */
const probing = new Set();
let tick = null;

// ---------------------------------------------------------------------------------------------
// IndexedDB: one object store, one record holding the agent's JSON state. The database is
// opened once and kept open; it is opened again if the browser closes it or another version
// asks for it (the connection is then closed so the upgrade can go on).

/** @type {Promise<IDBDatabase> | null} */
let dbOpen = null;
/** How many times this worker opened the database. */
let dbOpens = 0;

function db() {
  if (dbOpen !== null) return dbOpen;
  dbOpens++;
  const opening = new Promise((resolve, reject) => {
    const req = indexedDB.open(DB_NAME, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(DB_STORE);
    req.onsuccess = () => {
      const conn = req.result;
      const forget = () => {
        if (dbOpen === opening) dbOpen = null;
      };
      conn.onclose = forget;
      conn.onversionchange = () => {
        forget();
        conn.close();
      };
      resolve(conn);
    };
    req.onerror = () => reject(req.error);
  });
  dbOpen = opening;
  opening.catch(() => {
    if (dbOpen === opening) dbOpen = null;
  });
  return opening;
}

async function dbDo(mode, fn) {
  let conn = await db();
  let tx;
  try {
    tx = conn.transaction(DB_STORE, mode);
  } catch (e) {
    // Closed under us (InvalidStateError) before onclose ran: open it again, once.
    if (dbOpen !== null && (await dbOpen) === conn) dbOpen = null;
    conn = await db();
    tx = conn.transaction(DB_STORE, mode);
  }
  return new Promise((resolve, reject) => {
    const req = fn(tx.objectStore(DB_STORE));
    let value;
    req.onsuccess = () => {
      value = req.result;
    };
    tx.oncomplete = () => resolve(value);
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

const loading = (async () => {
  try {
    const s = await dbDo('readonly', (st) => st.get(DB_KEY));
    if (s !== undefined && s?.format !== AGENT_FORMAT) {
      // A state of an older format (another selector's table): dropped, the agent starts afresh.
      droppedFormat = String(s?.format);
    } else if (s !== undefined) {
      agent = Agent.fromJSON(s);
      restored = true;
    }
  } catch (e) {
    loadError = String(e);
  }
  if (agent === null) agent = new Agent({}, Date.now());
  schedule();
})();

/** Settles once the changes made so far are written (or their write failed). */
let flushed = null;
let settleFlushed = null;
/** The planned write: its timer and when (performance.now()); whether one is running. */
let saveTimer = null;
let saveAt = Infinity;
let writing = false;
/** When the write running was asked for again, or Infinity. */
let againAt = Infinity;
let lastWriteAt = -Infinity;

/**
 * Marks the state changed; the returned promise settles once it is written: at once if
 * `urgent`, else at most one write each `SAVE_INTERVAL_MS`.
 */
function changed(urgent = false) {
  dirty = true;
  if (flushed === null) flushed = new Promise((resolve) => (settleFlushed = resolve));
  planSave(urgent ? 0 : lastWriteAt + SAVE_INTERVAL_MS);
  return flushed;
}

function planSave(at) {
  if (writing) {
    againAt = Math.min(againAt, at);
    return;
  }
  if (saveTimer !== null && saveAt <= at) return;
  clearTimeout(saveTimer);
  saveAt = at;
  saveTimer = setTimeout(save, Math.max(0, at - performance.now()));
}

async function save() {
  saveTimer = null;
  saveAt = Infinity;
  writing = true;
  dirty = false;
  const settle = settleFlushed;
  flushed = null;
  settleFlushed = null;
  lastWriteAt = performance.now();
  try {
    await dbDo('readwrite', (st) => st.put(agent.toJSON(), DB_KEY));
    savedMs = Date.now();
    writes++;
  } catch (e) {
    lastError = `saving the state: ${e}`;
    dirty = true;
  }
  writing = false;
  settle?.();
  if (dirty) {
    // Changed while writing, or the write failed: the next write, one interval on at the latest.
    const at = Math.min(againAt, lastWriteAt + SAVE_INTERVAL_MS);
    againAt = Infinity;
    if (flushed === null) flushed = new Promise((resolve) => (settleFlushed = resolve));
    planSave(at);
  }
  againAt = Infinity;
}

// ---------------------------------------------------------------------------------------------
// Learning replica lists.

/** Blocks learnt, by where they came from: a navigation the worker answered, or a page's message. */
const learnt = { navigation: 0, message: 0 };

async function learnText(text, origin, from) {
  learnt[from]++;
  try {
    agent.learn(parseBlock(await expandBlock(text), origin), Date.now());
  } catch (e) {
    lastError = `replica block of a page on ${origin}: ${e}`;
    return;
  }
  schedule();
  await changed();
}

// ---------------------------------------------------------------------------------------------
// Exchanges.

class Failure extends Error {
  constructor(outcome, message) {
    super(message);
    this.outcome = outcome;
  }
}

/**
 * One GET or HEAD to a replica. Resolves once the response head arrives to `{response, body}`,
 * `body` a stream passing the replica's body through as it comes (never buffered whole), or
 * records the failure and throws: no head within `timeoutMs` (001 §4.1's T-percentile timeout,
 * the one failure the paper names), no connection, or a 5xx status (these two counted as
 * failures by the project's rule, crates/slipstream-select/src/refresh.rs). Only these failures
 * before the head are failed over.
 *
 * The sample is the time to the response head (001 §4.1: HTTP request latency, "the time to
 * receive the first byte"), not to the end of the body, so a large resource does not make its
 * replica look slow. It is recorded once the body has passed through (or was cancelled), when
 * the browser's Resource Timing entry of the exchange exists and gives that time without the
 * browser's own queue (see `recordAnswered`); without an entry, the wall-clock time from calling
 * fetch() to its resolving, taken when the head arrived, is the sample. A body that breaks or
 * stalls beyond the configured greatest timeout after the head is recorded as a failure (the
 * page sees a network error): the project's rule, not the paper's.
 */
async function exchange(endpoint, url, method, timeoutMs, cacheMode, cancel) {
  const ctrl = new AbortController();
  let timedOut = false;
  // Cancelled by the caller (another replica of a race or hedge answered first): no outcome.
  let cancelled = false;
  cancel?.addEventListener('abort', () => {
    cancelled = true;
    ctrl.abort();
  });
  const arm = (ms) =>
    setTimeout(() => {
      timedOut = true;
      ctrl.abort();
    }, ms);
  const t0 = performance.now();
  let timer = arm(timeoutMs);
  let response;
  try {
    response = await fetch(url, {
      method,
      mode: 'cors',
      credentials: 'omit',
      cache: cacheMode,
      redirect: 'follow',
      signal: ctrl.signal,
    });
  } catch (e) {
    clearTimeout(timer);
    const outcome = timedOut ? 'timed_out' : cancelled ? 'cancelled' : 'connect_failed';
    if (outcome !== 'cancelled') recordNow(endpoint, outcome);
    throw new Failure(outcome, `${url}: ${e}`);
  }
  clearTimeout(timer);
  // The head is here: the time to first byte, on the wall clock.
  const headMs = performance.now() - t0;
  if (response.status >= 500) {
    response.body?.cancel().catch(() => {});
    recordNow(endpoint, 'broken');
    throw new Failure('broken', `${url}: status ${response.status}`);
  }
  if (method === 'HEAD' || response.body === null) {
    recordAnswered(endpoint, url, t0, headMs);
    return { response, body: null };
  }
  // The body, streamed through; the greatest timeout bounds it.
  timer = arm(Math.max(timeoutMs, agent.selector.config.max_timeout_ms));
  let done = false;
  const finish = (outcome) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    if (outcome === 'answered') recordAnswered(endpoint, url, t0, headMs);
    else recordNow(endpoint, outcome);
  };
  const reader = response.body.getReader();
  const body = new ReadableStream({
    async pull(controller) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        finish(timedOut ? 'timed_out' : 'broken');
        controller.error(e);
        return;
      }
      if (chunk.done) {
        controller.close();
        finish('answered');
      } else {
        controller.enqueue(chunk.value);
      }
    },
    cancel(reason) {
      // The page (or the fail-over past a 404) no longer wants the body: the head arrived.
      finish('answered');
      return reader.cancel(reason);
    },
  });
  return { response, body };
}

/** Records an outcome of an exchange with `endpoint` now, and marks the state changed. */
function recordNow(endpoint, outcome, latencyMs) {
  const now = Date.now();
  const liveBefore = isLive(endpoint, now);
  agent.record(endpoint, outcome, now, latencyMs);
  // A change of health is written at once, so a restarted worker does not send requests to a
  // replica found dead (or keep avoiding one found back) in the meantime.
  changed(isLive(endpoint, now) !== liveBefore);
}

function isLive(endpoint, now) {
  const entry = agent.selector.health(now).find(([name]) => name === endpoint);
  return entry ? entry[1] : null;
}

/** Resource Timing entries kept at most; beyond, the buffer is emptied (see `recordAnswered`). */
const TIMING_BUFFER = 1000;
performance.setResourceTimingBufferSize?.(TIMING_BUFFER);
/** How many samples came from Resource Timing, and how many from the wall clock. */
const sampled = { timing: 0, wall: 0 };

/** The longest wait for an exchange's Resource Timing entry after its body ended. */
const ENTRY_WAIT_MS = 1000;
/** Callbacks waiting for Resource Timing entries, by URL. */
const entryWaiters = new Map();
/**
 * Resource Timing entries added to the buffer since it was last emptied, as the observer counts
 * them; null without an observer (then the buffer is listed to count them). Listing the buffer
 * for every sample would build hundreds of entry objects each time.
 */
let entriesBuffered = null;
try {
  new PerformanceObserver((list) => {
    const entries = list.getEntries();
    entriesBuffered += entries.length;
    for (const e of entries) for (const fn of [...(entryWaiters.get(e.name) ?? [])]) fn(e);
  }).observe({ type: 'resource' });
  entriesBuffered = 0;
} catch {
  // No observer: the entry is looked for once, then the wall clock is the sample.
}

/** The exchange's Resource Timing entry with a time to first byte, or null. */
function timingEntry(url, t0) {
  const entries = performance.getEntriesByName(url, 'resource');
  for (let i = entries.length - 1; i >= 0; i--) if (isEntryOf(entries[i], t0)) return entries[i];
  return null;
}

/** Whether Resource Timing entry `e` is of an exchange started at `t0` and has a first byte. */
function isEntryOf(e, t0) {
  return e.startTime >= t0 && e.requestStart > 0 && e.responseStart >= e.requestStart;
}

/** The entry, waiting at most `ENTRY_WAIT_MS` for the browser to add it (it may come after the body's end). */
function awaitEntry(url, t0) {
  const now = timingEntry(url, t0);
  if (now !== null) return Promise.resolve(now);
  return new Promise((resolve) => {
    const waiters = entryWaiters.get(url) ?? new Set();
    entryWaiters.set(url, waiters);
    const done = (e) => {
      clearTimeout(timer);
      waiters.delete(check);
      if (waiters.size === 0) entryWaiters.delete(url);
      resolve(e);
    };
    const check = (e) => {
      if (isEntryOf(e, t0)) done(e);
    };
    const timer = setTimeout(() => done(null), ENTRY_WAIT_MS);
    waiters.add(check);
  });
}

/**
 * Records the latency of the exchange with `url` started at `t0` (its head having arrived):
 * from sending the request (after any new connection's setup) to the first byte of the
 * response, by the Resource Timing entry the replica's `Timing-Allow-Origin` exposes
 * (`responseStart - requestStart`, plus the connection's setup if it made one). That leaves out
 * the time the request waited in the browser for a free connection to the host, which would
 * otherwise charge the replica carrying the most traffic for the browser's own queue. The entry
 * exists once the body has ended; without one, `headMs` (the wall-clock time from calling
 * fetch() to the head, queue included) is the sample.
 */
function recordAnswered(endpoint, url, t0, headMs) {
  return awaitEntry(url, t0).then((e) => {
    const buffered = entriesBuffered ?? performance.getEntriesByType('resource').length;
    if (buffered >= TIMING_BUFFER * 0.8) {
      performance.clearResourceTimings();
      if (entriesBuffered !== null) entriesBuffered = 0;
    }
    let latency = headMs;
    if (e !== null) {
      const connect = e.connectEnd > e.connectStart ? e.connectEnd - e.connectStart : 0;
      latency = e.responseStart - e.requestStart + connect;
      sampled.timing++;
    } else {
      sampled.wall++;
    }
    recordNow(endpoint, 'answered', latency);
  });
}

/** The browser's cache mode for a bound request: every binding is a network exchange. */
function cacheModeFor(request) {
  return request.cache === 'no-store' || request.cache === 'reload' ? request.cache : 'no-cache';
}

/** Bound requests: how many, raced, hedged, and how many of the hedges answered first. */
const bound = { requests: 0, raced: 0, hedged: 0, hedges_won: 0 };

/**
 * The response of the first of `plan`'s replicas to answer with a head other than a 404/410, or
 * null when none did. The first `race()` replicas are asked at once (the selector races while
 * nothing is measured); with one asked, the next is asked as well once `hedgeAfter` passes
 * without a head (spending a token: `hedged`); a failure or a 404 asks the next one (fail-over,
 * 001 §4.1). The first head wins; the others are cancelled (no outcome recorded for them).
 */
function fromReplicas(plan, cacheMode, now) {
  return new Promise((resolve) => {
    const race = Math.max(1, Math.min(agent.race(now), plan.length));
    if (race > 1) bound.raced++;
    let next = 0;
    let inflight = 0;
    let settled = false;
    let hedgeTimer = null;
    const cancels = [];
    const finish = (answer) => {
      settled = true;
      clearTimeout(hedgeTimer);
      resolve(answer);
    };
    const lost = () => {
      // A failure ends the wait for a hedge: what follows is fail-over.
      clearTimeout(hedgeTimer);
      if (inflight === 0 && !start()) finish(null);
    };
    const start = (hedge = false) => {
      if (next >= plan.length) return false;
      const i = next++;
      const c = plan[i];
      const cancel = new AbortController();
      cancels.push(cancel);
      inflight++;
      exchange(c.endpoint, c.url, 'GET', c.timeoutMs, cacheMode, cancel.signal).then(
        ({ response, body }) => {
          inflight--;
          // A replica without the resource answered (it is alive), but another may have it.
          if (settled || response.status === 404 || response.status === 410) {
            body?.cancel().catch(() => {});
            if (!settled) lost();
            return;
          }
          if (hedge) bound.hedges_won++;
          for (const other of cancels) if (other !== cancel) other.abort();
          finish(new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers }));
        },
        () => {
          // Recorded by exchange(); fail over to the next replica.
          inflight--;
          if (!settled) lost();
        },
      );
      return true;
    };
    for (let i = 0; i < race; i++) start();
    if (race === 1 && plan.length > 1) {
      const after = agent.hedgeAfter(plan[0].endpoint, now);
      if (after !== null) {
        hedgeTimer = setTimeout(() => {
          if (settled || next >= plan.length) return;
          agent.hedged(plan[next].endpoint, Date.now());
          bound.hedged++;
          start(true);
        }, after);
      }
    }
  });
}

/** A same-origin GET: bound to a replica if it has any, the plain URL otherwise or at last. */
async function handle(event, request, url) {
  // Nothing is awaited before the exchange starts once the state is loaded (every request but
  // those of the worker's first moments).
  if (agent === null) await loading;
  const now = Date.now();
  const plan = agent.plan(logicalKey(url), now);
  // One user request: Decay earns part of a token for its probes and hedges (before `race` and
  // `hedgeAfter` spend them).
  if (plan !== null) {
    agent.requested(now);
    bound.requests++;
  }
  const replicas = plan === null ? null : fromReplicas(plan, cacheModeFor(request), now);
  // The due probes go out after the request, not before it.
  event.waitUntil(runProbes());
  let answer = replicas === null ? null : await replicas;
  if (answer === null) answer = await fetch(request);
  if (request.mode === 'navigate' && (answer.headers.get('content-type') ?? '').includes('text/html')) {
    const copy = answer.clone();
    event.waitUntil(
      copy.text().then((html) => {
        const text = blockText(html);
        return text === null ? undefined : learnText(text, self.location.origin, 'navigation');
      }),
    );
  }
  if (flushed !== null) event.waitUntil(flushed);
  return answer;
}

// ---------------------------------------------------------------------------------------------
// Probes: HEADs to endpoints the selector asks about (recover: failed; refresh: stale), each to
// the physical URL of it a page named last (`Agent#probeUrl`; 001 §4.1 picks a random resource).

function runProbes() {
  if (agent === null) return Promise.resolve();
  const now = Date.now();
  const sent = [];
  for (const p of agent.dueProbes(now)) {
    if (probing.has(p.endpoint)) continue;
    probing.add(p.endpoint);
    sent.push(
      exchange(p.endpoint, p.url, 'HEAD', p.timeoutMs, 'no-store')
        .catch(() => {})
        .finally(() => {
          probing.delete(p.endpoint);
          schedule();
        }),
    );
  }
  schedule();
  return Promise.all(sent);
}

/** Looks at the probe schedule again when the next probe is due (at most `TICK_MAX_MS` on). */
function schedule() {
  if (agent === null) return;
  const next = agent.nextProbeMs(Date.now());
  if (tick !== null) clearTimeout(tick);
  tick = null;
  if (next === null) return;
  const wait = Math.min(Math.max(next - Date.now(), 0), TICK_MAX_MS);
  tick = setTimeout(() => {
    tick = null;
    runProbes();
  }, wait);
}

// ---------------------------------------------------------------------------------------------
// Prefetching (paper 000 §6.1): once a page has loaded and the browser is idle, register.js
// asks this worker to prefetch for it. The worker asks the hint server for the page's lists
// (following their turns, waiting when told to), fetches what is not held yet from the
// prefetch base the server names (its low-priority listener, or the page's origin), and keeps
// each response in Cache Storage under its demand URL for a short lifetime, within a byte
// allowance proportional to the page's own bytes. A demand request for a URL held there is
// answered from it: no request reaches the demand server.

const PREFETCH_CACHE = 'slipstream-prefetch-v1';
const STORED_AT = 'x-slipstream-prefetched-at';
/** Demand URL -> when its prefetched response was stored. */
const prefetchedAt = new Map();
/** Pages with a prefetch in progress (one at a time each). */
const prefetching = new Set();
const prefetchStats = { asked: 0, lists: 0, waits: 0, page_waits: 0, reported: 0, asked_before_page_wait: null, gave_up: 0, fetched: 0, bytes: 0, failed: 0, refused: 0, personal: 0, served: 0, skipped: null };

/** The entries a previous worker stored, read once: fresh ones kept, stale ones deleted. */
const prefetchIndex = caches
  .open(PREFETCH_CACHE)
  .then(async (cache) => {
    const now = Date.now();
    for (const req of await cache.keys()) {
      const res = await cache.match(req);
      const at = Number(res?.headers.get(STORED_AT));
      if (isFresh(at, now)) prefetchedAt.set(req.url, at);
      else await cache.delete(req);
    }
  })
  .catch(() => {});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Prefetches for the page at `pagePath` (its previous page `prevPath`), which was `demandBytes`
 * long; `namedBase` is the prefetch listener the page named (its munged script's
 * `data-prefetch-base`), or null; `pageWaitMs` what is left of the wait the page asked for
 * before the first hint request (`pageWaitLeft`), or null; `report` what the first hint
 * request tells the node about the page (`pageReport`), or null.
 */
async function prefetchFor(pagePath, prevPath, demandBytes, namedBase, pageWaitMs, report) {
  const gate = mayPrefetch(self.navigator?.connection);
  if (!gate.ok) {
    prefetchStats.skipped = gate.why;
    return;
  }
  if (prefetching.has(pagePath)) return;
  prefetching.add(pagePath);
  try {
    await prefetchIndex;
    const cache = await caches.open(PREFETCH_CACHE);
    let allowance = byteAllowance(demandBytes);
    let turn = 0;
    let waits = 0;
    // The first hint request goes to the prefetch listener the page named, else to the page's
    // origin; the ones after it (a retry, the next turn) go where the answer sends
    // prefetches: through the prefetch listener they are served at its low priority, not on
    // demand's thread.
    let hintBase = baseOrigin(namedBase) ?? self.location.origin;
    if (pageWaitMs !== null) {
      // The page said the hint server would only tell it to wait (no budget now): wait out
      // what is left of it, without asking; it counts as one of the waits a page accepts.
      prefetchStats.page_waits++;
      prefetchStats.asked_before_page_wait = prefetchStats.asked;
      waits++;
      await sleep(Math.min(pageWaitMs, PREFETCH_DEFAULTS.max_wait_ms));
    }
    while (turn !== null && turn < PREFETCH_DEFAULTS.max_turns && allowance > 0) {
      const q = new URLSearchParams({ url: pagePath, turn: String(turn) });
      if (prevPath) q.set('prev', prevPath);
      if (report) {
        // The page's report goes with the first hint request only.
        q.set('served_ms', report.served_ms);
        q.set('page_us', report.page_us);
        prefetchStats.reported++;
        report = null;
      }
      prefetchStats.asked++;
      let answer;
      try {
        const r = await fetch(
          `${hintBase}/_slipstream/hints?${q}`,
          hintBase !== self.location.origin
            ? { mode: 'cors', credentials: 'omit', cache: 'no-store' }
            : { cache: 'no-store' },
        );
        if (!r.ok) return;
        answer = readHints(await r.json(), self.location.origin);
      } catch {
        return;
      }
      hintBase = answer.base;
      if (answer.waitMs !== null) {
        // No budget this epoch (000 §3.3): wait as told, a few times at most.
        prefetchStats.waits++;
        if (++waits > PREFETCH_DEFAULTS.max_waits) {
          prefetchStats.gave_up++;
          return;
        }
        await sleep(Math.min(answer.waitMs, PREFETCH_DEFAULTS.max_wait_ms));
        continue;
      }
      prefetchStats.lists++;
      const crossOrigin = answer.base !== self.location.origin;
      for (const path of answer.hints) {
        if (allowance <= 0) break;
        const demandUrl = new URL(path, self.location.origin).href;
        if (isFresh(prefetchedAt.get(demandUrl), Date.now())) continue;
        try {
          // Through the prefetch listener every request is a prefetch; on the page's own
          // origin, `Purpose: prefetch` says so (a worker cannot send Sec-Purpose).
          const r = await fetch(
            answer.base + path,
            crossOrigin
              ? { mode: 'cors', credentials: 'omit', cache: 'no-store' }
              : { headers: { Purpose: 'prefetch' }, cache: 'no-store' },
          );
          if (r.status === 503) {
            // No spare capacity now (the server sheds prefetches while overloaded): the rest
            // of the list and the chain wait for the next page.
            prefetchStats.refused++;
            return;
          }
          if (r.status !== 200) {
            prefetchStats.failed++;
            continue;
          }
          if (!storable(r.headers.get('cache-control'))) {
            // One user's page, or one no cache may keep: not stored (its bytes not read).
            prefetchStats.personal++;
            r.body?.cancel().catch(() => {});
            continue;
          }
          const body = await r.arrayBuffer();
          allowance -= body.byteLength;
          prefetchStats.bytes += body.byteLength;
          prefetchStats.fetched++;
          const headers = new Headers(r.headers);
          const now = Date.now();
          headers.set(STORED_AT, String(now));
          await cache.put(demandUrl, new Response(body, { status: 200, statusText: r.statusText, headers }));
          prefetchedAt.set(demandUrl, now);
        } catch {
          prefetchStats.failed++;
        }
      }
      turn = answer.nextTurn;
    }
  } finally {
    prefetching.delete(pagePath);
  }
}

/** The prefetched response for `request`, or null (none, or past its lifetime: then dropped). */
async function fromPrefetched(request) {
  const url = request.url;
  const at = prefetchedAt.get(url);
  if (!isFresh(at, Date.now())) {
    prefetchedAt.delete(url);
    caches.open(PREFETCH_CACHE).then((c) => c.delete(url)).catch(() => {});
    return null;
  }
  const res = await (await caches.open(PREFETCH_CACHE)).match(url);
  if (!res) {
    prefetchedAt.delete(url);
    return null;
  }
  prefetchStats.served++;
  return res;
}

// ---------------------------------------------------------------------------------------------
// Events.

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

// ---------------------------------------------------------------------------------------------
// The agent's own files (`/_slipstream/agent/*`: register.js, the modules, the table page),
// which every cluster member serves: from the page's origin, or, when it cannot be reached,
// from the live replica endpoints the agent knows, fastest first. They are served without CORS
// headers, so only a `no-cors` request (a classic script such as register.js) can take a
// replica's (opaque) answer; others get the origin's answer or its failure.

/** Until when (Date.now()) the origin is taken for down after it failed, and the fetches it cost. */
let originDownUntil = 0;
const ORIGIN_DOWN_MS = 10000;
const agentFiles = { origin: 0, replica: 0, failed: 0 };

async function agentFile(request, url) {
  await loading;
  if (Date.now() >= originDownUntil || request.mode !== 'no-cors') {
    try {
      const r = await fetch(request);
      if (r.status < 500) {
        agentFiles.origin++;
        originDownUntil = 0;
        return r;
      }
    } catch (e) {
      if (request.mode !== 'no-cors') {
        agentFiles.failed++;
        throw e;
      }
    }
    originDownUntil = Date.now() + ORIGIN_DOWN_MS;
  }
  const now = Date.now();
  const live = new Map(agent.selector.health(now));
  for (const endpoint of agent.selector.order(now)) {
    if (!live.get(endpoint)) continue;
    try {
      const r = await fetch(endpoint + url.pathname + url.search, { mode: 'no-cors', credentials: 'omit', cache: 'no-cache' });
      agentFiles.replica++;
      return r;
    } catch {
      // Next endpoint.
    }
  }
  agentFiles.failed++;
  return Response.error();
}

self.addEventListener('fetch', (event) => {
  const request = event.request;
  // Range requests (media) keep their headers on the plain URL; a bound request carries none.
  if (request.method !== 'GET' || request.headers.has('range')) return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  if (url.pathname.startsWith('/_slipstream/agent/')) {
    event.respondWith(agentFile(request, url));
    return;
  }
  if (url.pathname.startsWith('/_slipstream/')) return;
  // A prefetched response answers the demand request; without one, as if it had never been.
  if (prefetchedAt.has(url.href)) {
    event.respondWith(fromPrefetched(request).then((r) => r ?? handle(event, request, url)));
    return;
  }
  // Once the state is loaded, a subresource without replicas is left to the browser.
  if (agent !== null && request.mode !== 'navigate' && agent.replicas(logicalKey(url)) === null) {
    event.waitUntil(runProbes());
    return;
  }
  event.respondWith(handle(event, request, url));
});

/** The state as the latency-table page and the tests read it. */
function stateMessage() {
  const now = Date.now();
  return {
    type: 'slipstream-state',
    instance,
    started_ms: startedMs,
    now_ms: now,
    restored,
    dropped_format: droppedFormat,
    load_error: loadError,
    last_error: lastError,
    dirty,
    saved_ms: savedMs,
    writes,
    db_opens: dbOpens,
    samples_by: { ...sampled },
    blocks_learnt: { ...learnt },
    policy: agent.policy,
    config: agent.selector.config,
    tokens: agent.selector.tokens ? agent.selector.tokens() : null,
    bound: { ...bound },
    agent_files: { ...agentFiles },
    urls: agent.urlCount,
    rules: agent.ruleCount,
    table: agent.table(now),
    prefetch: { ...prefetchStats, entries: prefetchedAt.size },
  };
}

self.addEventListener('message', (event) => {
  const data = event.data ?? {};
  const reply = (msg) => (event.ports[0] ?? event.source)?.postMessage(msg);
  if (data.type === 'slipstream-prefetch' && data.announced !== true) {
    // The page's node does not announce prefetching (its script tag names no prefetch
    // listener, hint wait or served time): no hint request, which would only find a 404.
    prefetchStats.skipped = 'not announced';
    reply({ type: 'slipstream-prefetched', prefetch: { ...prefetchStats, entries: prefetchedAt.size } });
    return;
  }
  if (data.type === 'slipstream-prefetch' && typeof data.url === 'string' && data.url.startsWith('/')) {
    const prev = typeof data.prev === 'string' && data.prev.startsWith('/') ? data.prev : null;
    event.waitUntil(
      prefetchFor(
        data.url,
        prev,
        Number(data.demandBytes),
        data.base ?? null,
        pageWaitLeft(data.hintsWait, data.hintsWaitAt, Date.now()),
        pageReport(data.servedMs, data.navigation),
      ).then(() =>
        reply({ type: 'slipstream-prefetched', prefetch: { ...prefetchStats, entries: prefetchedAt.size } }),
      ),
    );
    return;
  }
  event.waitUntil(
    loading.then(async () => {
      if (data.type === 'slipstream-page' && typeof data.block === 'string') {
        // A page loaded without this worker hands over its block (register.js); a page whose
        // navigation it answered does not (its block was learnt from the response).
        await learnText(data.block, self.location.origin, 'message');
        reply({ type: 'slipstream-learnt', urls: agent.urlCount });
      } else if (data.type === 'slipstream-state') {
        reply(stateMessage());
      }
    }),
  );
});
