// Unit tests of web/agent/agent.mjs, the agent's decisions without I/O: reading the replica
// block, binding a logical URL to replicas in the selector's order, fail-over order, probes
// with F doubling, the bounds, and the JSON state. The browser tests (web/browser/) run the
// same module inside a real Service Worker against real servers.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  AGENT_FORMAT,
  Agent,
  MAX_ENDPOINTS,
  MAX_REPLICAS_PER_URL,
  MAX_RULES,
  MAX_URLS,
  blockLookup,
  blockText,
  endpointOf,
  expandBlock,
  logicalKey,
  MAX_EXPANDED_BYTES,
  parseBlock,
} from '../agent/agent.mjs';
import { DEFAULTS } from '../agent/select.mjs';
import { DEFAULTS as DECAY } from '../agent/decay.mjs';

const ORIGIN = 'http://127.0.0.1:8000';
const A = 'http://127.0.0.1:21001';
const B = 'http://127.0.0.1:21002';
const C = 'http://127.0.0.1:21003';
// Most tests below exercise the agent with the Refresh policy (named in the block); those of
// the default, Decay, say so.
const CONFIG = { policy: 'refresh', probe_interval_ms: 1000, max_probe_interval_ms: 16000 };

function block(urls, config = CONFIG) {
  return parseBlock({ v: 1, config, urls }, ORIGIN);
}

function agentWith(urls, config = CONFIG) {
  const a = new Agent({}, 0);
  a.learn(block(urls, config), 0);
  return a;
}

test('blockText finds the block anywhere, the last one counting', () => {
  const json = '{"v":1,"urls":{}}';
  const page = `<!doctype html><html><head><script src="/_slipstream/agent/register.js" defer></script></head><body><p>x</p><script type="application/json" id="slipstream-replicas">${json}</script></body></html>`;
  assert.equal(blockText(page), json);
  assert.equal(blockText(`<head><SCRIPT id=slipstream-replicas type="application/json">${json}</SCRIPT></head>`), json);
  // A block the page itself holds is overridden by the server's, appended after it.
  assert.equal(blockText(`<body><script id="slipstream-replicas">{"v":0}</script><script id="slipstream-replicas">${json}</script></body>`), json);
  assert.equal(blockText('<html><head><title>x</title></head><script id="other">{}</script></html>'), null);
  assert.equal(blockText(null), null);
});

test('parseBlock keeps same-origin keys and absolute http(s) replicas, bounded', () => {
  const many = Array.from({ length: MAX_REPLICAS_PER_URL + 5 }, (_, i) => `http://127.0.0.1:${30000 + i}/x`);
  const b = parseBlock(
    {
      v: 1,
      config: { policy: 'refresh', probe_interval_ms: 500, max_probe_interval_ms: 4000 },
      urls: {
        '/a.png': [`${A}/a.png`, `${B}/a.png`, `${A}/a.png`, 'ftp://x/a.png', 'not a url', 7],
        '/q?x=1': [`${C}/q?x=1`],
        'http://elsewhere.example/z': [`${A}/z`],
        '/none': ['javascript:alert(1)'],
        '/many': many,
      },
    },
    ORIGIN,
  );
  assert.deepEqual(b.config, { policy: 'refresh', probe_interval_ms: 500, max_probe_interval_ms: 4000 });
  assert.deepEqual(b.urls, [
    ['/a.png', [`${A}/a.png`, `${B}/a.png`]],
    ['/q?x=1', [`${C}/q?x=1`]],
    ['/many', many.slice(0, MAX_REPLICAS_PER_URL)],
  ]);
});

test('parseBlock expands server indexes to the base followed by the logical URL', () => {
  const b = parseBlock(
    {
      v: 1,
      servers: ['http://r1:8080', 'https://r2', 5],
      urls: { '/a.png?x=1': [0, 1, 'http://r3/other/a.png', 2, 7, -1, 0.5] },
    },
    ORIGIN,
  );
  assert.deepEqual(b.urls, [
    ['/a.png?x=1', ['http://r1:8080/a.png?x=1', 'https://r2/a.png?x=1', 'http://r3/other/a.png']],
  ]);
  assert.throws(() => parseBlock({ v: 1, servers: 'x', urls: {} }, ORIGIN), /servers: not a list/);
});

test('parseBlock refuses a block of another version, shape or configuration', () => {
  assert.throws(() => parseBlock({ v: 4, urls: {} }, ORIGIN), /version/);
  assert.throws(() => parseBlock('[]', ORIGIN), /not an object/);
  assert.throws(() => parseBlock({ v: 1, urls: { '/a': 'x' } }, ORIGIN), /not a list/);
  assert.throws(() => parseBlock({ v: 1, config: { nope: 1 }, urls: {} }, ORIGIN), /not a field/);
  assert.throws(() => parseBlock({ v: 1, config: { policy: 'refresh', r: 2 }, urls: {} }, ORIGIN), /\(0, 1\]/);
  // The default policy, Decay, checks its own fields; an unknown policy is refused.
  assert.throws(() => parseBlock({ v: 1, config: { probe_interval_ms: 5 }, urls: {} }, ORIGIN), /not a field/);
  assert.throws(() => parseBlock({ v: 1, config: { budget: 2 }, urls: {} }, ORIGIN), /\[0, 1\)/);
  assert.throws(() => parseBlock({ v: 1, config: { policy: 'fastest' }, urls: {} }, ORIGIN), /policy/);
  assert.throws(() => parseBlock({ v: 1, config: { policy: 3 }, urls: {} }, ORIGIN), /policy/);
  assert.throws(() => parseBlock('{"v":1,', ORIGIN), SyntaxError);
});

test('logicalKey and endpointOf', () => {
  assert.equal(logicalKey(`${ORIGIN}/img/a.png?w=2#frag`), '/img/a.png?w=2');
  assert.equal(endpointOf(`${A}/img/a.png?w=2`), A);
});

test('plan: unmeasured replicas in block order, then the fastest first, failed last', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`, `${C}/x`], '/y': [`${C}/y`, `${A}/y`] });
  assert.equal(a.plan('/nothing', 0), null);
  assert.deepEqual(
    a.plan('/x', 0).map((c) => c.endpoint),
    [A, B, C],
  );
  // Before a sample the timeout is the default one.
  assert.equal(a.plan('/x', 0)[0].timeoutMs, 10000);
  a.record(A, 'answered', 1, 80);
  a.record(B, 'answered', 2, 10);
  a.record(C, 'answered', 3, 40);
  assert.deepEqual(
    a.plan('/x', 4).map((c) => c.url),
    [`${B}/x`, `${C}/x`, `${A}/x`],
  );
  // /y has no replica on B: its best is C, learnt through /x.
  assert.deepEqual(
    a.plan('/y', 4).map((c) => c.url),
    [`${C}/y`, `${A}/y`],
  );
  a.record(B, 'connect_failed', 5);
  assert.deepEqual(
    a.plan('/x', 6).map((c) => c.endpoint),
    [C, A, B],
  );
  // A response after the failure makes B live and first again.
  a.record(B, 'answered', 7, 10);
  assert.equal(a.plan('/x', 8)[0].endpoint, B);
});

test('a slowed replica loses its place once its samples say so', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`] });
  let t = 0;
  for (let i = 0; i < 10; i++) {
    a.record(A, 'answered', ++t, 5);
    a.record(B, 'answered', ++t, 20);
  }
  assert.equal(a.plan('/x', t)[0].endpoint, A);
  let moved = 0;
  for (let i = 0; i < 10 && a.plan('/x', t)[0].endpoint === A; i++) {
    a.record(A, 'answered', ++t, 300);
    moved = i + 1;
  }
  assert.equal(a.plan('/x', t)[0].endpoint, B, 'traffic moves off the slowed replica');
  assert.ok(moved <= 3, `moved after ${moved} slow samples`);
});

test('probes of a failed endpoint: due after F, F doubling, a URL of that endpoint', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`], '/z': [`${B}/z`] });
  a.record(A, 'answered', 0, 5);
  a.record(B, 'answered', 0, 5);
  a.record(B, 'timed_out', 100);
  assert.deepEqual(a.dueProbes(100), []);
  assert.equal(a.nextProbeMs(), 1100);
  const sent = [];
  for (let t = 100; t <= 20000; t += 50) {
    for (const p of a.dueProbes(t)) {
      assert.equal(p.endpoint, B);
      assert.equal(p.kind, 'recover');
      assert.equal(endpointOf(p.url), B);
      sent.push(t);
    }
  }
  // Due at 1100 (F = 1 s), then 2 s, 4 s, 8 s later.
  assert.deepEqual(sent, [1100, 3100, 7100, 15100]);
  // The newest page's URL of B is the one probed.
  assert.equal(a.probeUrl(B), `${B}/z`);
});

test('a stale live endpoint is refreshed after the TTL', () => {
  const a = agentWith({ '/x': [`${A}/x`] }, { policy: 'refresh', ttl_ms: 5000 });
  a.record(A, 'answered', 0, 5);
  assert.deepEqual(a.dueProbes(4999), []);
  assert.equal(a.nextProbeMs(), 5000);
  assert.deepEqual(
    a.dueProbes(5000).map((p) => [p.endpoint, p.kind]),
    [[A, 'refresh']],
  );
  assert.deepEqual(a.dueProbes(5001), []);
});

test('learning is bounded: the oldest URLs are dropped', () => {
  const a = new Agent({}, 0);
  const urls = {};
  for (let i = 0; i < MAX_URLS; i++) urls[`/u${i}`] = [`${A}/u${i}`];
  a.learn(block(urls), 0);
  a.learn(block({ '/new': [`${B}/new`] }), 1);
  assert.equal(a.urlCount, MAX_URLS);
  assert.equal(a.replicas('/u0'), null);
  assert.deepEqual(a.replicas('/new'), [`${B}/new`]);
  assert.deepEqual(
    a.selector.health(2).map(([n]) => n),
    [A, B],
  );
});

test('an endpoint the pages stop naming keeps its history and is probed until it answers', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`] });
  a.record(A, 'answered', 0, 5);
  a.record(B, 'answered', 0, 50);
  a.record(A, 'connect_failed', 10);
  // The server, finding A's node dead, lists only B now.
  a.learn(block({ '/x': [`${B}/x`] }), 20);
  assert.deepEqual(
    a.plan('/x', 20).map((c) => c.endpoint),
    [B],
  );
  assert.equal(a.selector.estimate(A).samples, 1, 'A keeps its history');
  assert.deepEqual(
    a.dueProbes(1010).map((p) => [p.endpoint, p.url]),
    [[A, `${A}/x`]],
  );
  // A answers a probe, and the server lists it again: it is the fastest again at once.
  a.record(A, 'answered', 1020, 5);
  a.learn(block({ '/x': [`${B}/x`, `${A}/x`] }), 1030);
  assert.equal(a.plan('/x', 1030)[0].endpoint, A);
});

test('the endpoints are bounded: the one named longest ago is forgotten', () => {
  const a = new Agent({}, 0);
  for (let i = 0; i <= MAX_ENDPOINTS; i++) a.learn(block({ [`/e${i}`]: [`http://127.0.0.1:${20000 + i}/e`] }), i);
  const names = a.selector.health(0).map(([n]) => n);
  assert.equal(names.length, MAX_ENDPOINTS);
  assert.ok(!names.includes('http://127.0.0.1:20000'));
  assert.ok(names.includes(`http://127.0.0.1:${20000 + MAX_ENDPOINTS}`));
  assert.equal(a.probeUrl('http://127.0.0.1:20000'), null);
});

test('a URL is never bound to a forgotten endpoint', () => {
  const a = new Agent({}, 0);
  const ep = (i) => `http://127.0.0.1:${20000 + i}`;
  // /s is bound to endpoints 0 and 1, /only0 to endpoint 0 alone; 0 is named longest ago.
  a.learn(block({ '/only0': [`${ep(0)}/only0`], '/s': [`${ep(0)}/s`, `${ep(1)}/s`] }), 0);
  for (let i = 2; i <= MAX_ENDPOINTS; i++) a.learn(block({ [`/e${i}`]: [`${ep(i)}/e`] }), i);
  assert.equal(a.probeUrl(ep(0)), null, 'endpoint 0 forgotten');
  // /s keeps its other replica, with the selector's timeout; /only0 has none left.
  assert.deepEqual(a.replicas('/s'), [`${ep(1)}/s`]);
  assert.deepEqual(a.plan('/s', 1000), [{ endpoint: ep(1), url: `${ep(1)}/s`, timeoutMs: 10000 }]);
  assert.equal(a.replicas('/only0'), null);
  assert.equal(a.plan('/only0', 1000), null);
  // No URL in the state refers to an endpoint outside the table, and every plan has timeouts.
  const state = a.toJSON();
  const known = new Set(state.endpoints.map(([e]) => e));
  for (const [key, list] of state.urls) {
    for (const p of list) assert.ok(known.has(endpointOf(p)), `${key} bound to forgotten ${p}`);
    for (const c of a.plan(key, 1000)) assert.equal(typeof c.timeoutMs, 'number', `${key}: timeout of ${c.endpoint}`);
  }
  // A state written with such bindings loads without them.
  state.urls.push(['/stale', [`${ep(0)}/stale`, `${ep(1)}/stale`]]);
  assert.deepEqual(Agent.fromJSON(state).replicas('/stale'), [`${ep(1)}/stale`]);
});

test('a new configuration applies and keeps the latency table', () => {
  const a = agentWith({ '/x': [`${A}/x`] });
  a.record(A, 'answered', 0, 40);
  a.learn(block({ '/x': [`${A}/x`] }, { policy: 'refresh', probe_interval_ms: 300, max_probe_interval_ms: 900 }), 1);
  assert.equal(a.selector.config.probe_interval_ms, 300);
  assert.equal(a.selector.estimate(A).samples, 1);
  assert.equal(a.selector.estimate(A).avg_ms, 40);
  assert.deepEqual(a.overrides, { policy: 'refresh', probe_interval_ms: 300, max_probe_interval_ms: 900 });
  // A block without overrides goes back to the defaults, still keeping the table.
  a.learn(block({ '/x': [`${A}/x`] }, { policy: 'refresh' }), 2);
  assert.equal(a.selector.config.probe_interval_ms, DEFAULTS.probe_interval_ms);
  assert.equal(a.selector.estimate(A).samples, 1);
});

test('the JSON state round-trips: same table, same choices', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`, `${C}/x`] });
  a.record(A, 'answered', 1, 30);
  a.record(B, 'answered', 2, 10);
  a.record(C, 'connect_failed', 3);
  const text = JSON.stringify(a);
  const b = Agent.fromJSON(text);
  assert.equal(JSON.parse(text).format, AGENT_FORMAT);
  assert.deepEqual(b.table(10), a.table(10));
  assert.deepEqual(b.plan('/x', 10), a.plan('/x', 10));
  assert.deepEqual(b.dueProbes(2000), a.dueProbes(2000));
  assert.deepEqual(b.overrides, a.overrides);
  // Losing a part of the state changes something observable, or is refused.
  const s = JSON.parse(text);
  assert.throws(() => Agent.fromJSON({ ...s, format: 'x' }), /format/);
  assert.throws(() => Agent.fromJSON({ ...s, urls: [['/x', 'nope']] }), /bad entry/);
  assert.throws(() => Agent.fromJSON({ ...s, endpoints: [[A, `${B}/x`]] }), /bad entry/);
  assert.equal(Agent.fromJSON({ ...s, endpoints: [] }).probeUrl(A), null);
  assert.equal(Agent.fromJSON({ ...s, urls: [] }).plan('/x', 10), null);
});

test('the table shows estimates, scores, health and the probe schedule', () => {
  const a = agentWith({ '/x': [`${A}/x`, `${B}/x`] });
  a.record(A, 'answered', 1, 30);
  a.record(B, 'answered', 1, 10);
  a.record(B, 'answered', 2, 14);
  a.record(A, 'broken', 3);
  const [first, second] = a.table(4);
  assert.equal(first.endpoint, B);
  assert.equal(first.live, true);
  assert.equal(first.samples, 2);
  assert.ok(first.score_ms > 10 && first.score_ms < 14);
  assert.equal(first.next_probe_ms, null);
  assert.equal(second.endpoint, A);
  assert.equal(second.live, false);
  assert.equal(second.probe_interval_ms, 1000);
  assert.equal(second.next_probe_ms, 1003);
  assert.equal(second.urls, 1);
});

test('the agent core reads no clock, draws no randomness and uses no browser or Node API', () => {
  const src = readFileSync(new URL('../agent/agent.mjs', import.meta.url), 'utf8')
    .split('\n')
    .filter((l) => !l.trim().startsWith('//') && !l.trim().startsWith('*') && !l.trim().startsWith('/**'))
    .join('\n');
  for (const forbidden of ['Date', 'performance', 'Math.random', 'crypto', 'fetch(', 'indexedDB', 'setTimeout', 'process', 'require(']) {
    assert.ok(!src.includes(forbidden), `agent.mjs uses ${forbidden}`);
  }
});

for (const file of ['lookup.json', 'compressed.json']) {
  test(`the shared block vector ${file}: expandBlock, parseBlock and blockLookup resolve as the directory of the server does`, async () => {
    const v = JSON.parse(readFileSync(new URL(`../test-vectors/block/${file}`, import.meta.url), 'utf8'));
    const b = parseBlock(await expandBlock(v.block), v.origin);
    const lookups = Object.entries(v.lookups);
    assert.ok(lookups.length >= 8);
    for (const [key, want] of lookups) {
      const got = blockLookup(b, key);
      assert.deepEqual(got === null ? null : [...got].sort(), want === null ? null : [...want].sort(), key);
    }
  });
}

/** `bytes` as zlib in base64, as the server writes `urls_z`. */
async function zlibBase64(bytes) {
  const z = new Uint8Array(await new Response(new Blob([bytes]).stream().pipeThrough(new CompressionStream('deflate'))).arrayBuffer());
  return btoa(String.fromCharCode(...z));
}

test('a compressed block must be expanded, and a bad or overlong one is refused', async () => {
  const v = JSON.parse(readFileSync(new URL('../test-vectors/block/compressed.json', import.meta.url), 'utf8'));
  assert.throws(() => parseBlock(v.block, v.origin), /expandBlock it first/);
  const block = (urls_z) => ({ v: 3, config: {}, servers: [], urls_z });
  await assert.rejects(expandBlock(block('not base64!')), /not base64/);
  await assert.rejects(expandBlock(block(btoa('not zlib'))), /not zlib/);
  await assert.rejects(expandBlock(block(7)), /not a string/);
  await assert.rejects(expandBlock(block(await zlibBase64(new TextEncoder().encode('{"a":')))), /not JSON/);
  // Expands past the bound: refused as it expands.
  const bomb = new Uint8Array(MAX_EXPANDED_BYTES + 2).fill(32);
  bomb[0] = 123; // {
  bomb[bomb.length - 1] = 125; // }
  await assert.rejects(expandBlock(block(await zlibBase64(bomb))), /expands past/);
  // A block without urls_z is returned as it is.
  const plain = { v: 2, config: {}, urls: { '/a': [] } };
  assert.equal(await expandBlock(plain), plain);
});

test('version 2 rules bind every URL under their prefix, the longest prefix and own keys first', () => {
  const b = parseBlock(
    {
      v: 2,
      config: CONFIG,
      servers: [A, B],
      urls: { '/*': [0, 1], '/img/*': [1], '/img/x.png': [], '/bad/*': ['http://c.test/no-star', 'ftp://c/*'] },
    },
    ORIGIN,
  );
  assert.deepEqual(b.rules, [
    ['/', [`${A}/*`, `${B}/*`]],
    ['/img/', [`${B}/img/*`]],
    ['/bad/', []],
  ]);
  assert.deepEqual(b.urls, [['/img/x.png', []]]);
  const agent = new Agent(CONFIG, 0);
  agent.learn(b, 0);
  assert.equal(agent.ruleCount, 3);
  assert.deepEqual(
    agent.plan('/a.html', 0).map((c) => c.url).sort(),
    [`${A}/a.html`, `${B}/a.html`],
  );
  assert.deepEqual(agent.plan('/img/y.png', 0).map((c) => c.url), [`${B}/img/y.png`]);
  // An empty own list: no replica, fetched as it is (the rule for /img/ does not claim it).
  assert.equal(agent.plan('/img/x.png', 0), null);
  assert.equal(agent.plan('/bad/z', 0), null);
  // Every plan has a timeout: the rules' endpoints are in the table.
  assert.ok(agent.plan('/a.html', 0).every((c) => Number.isFinite(c.timeoutMs)));
  // A URL bound through a rule becomes its endpoints' probe URL (a stem cannot be probed).
  agent.plan('/img/y.png', 0);
  assert.equal(agent.probeUrl(B), `${B}/img/y.png`);
  assert.equal(agent.probeUrl(A), `${A}/a.html`);
});

test('a rule whose prefix a browser would normalise is dropped, not widened', () => {
  const b = parseBlock(
    { v: 2, config: CONFIG, servers: [A, B], urls: { '/*': [0], '/x?*': [1], '/a/./*': [1], '/my dir/*': [1], '*': [0] } },
    ORIGIN,
  );
  assert.deepEqual(
    b.rules.map(([p]) => p),
    ['/', ''],
  );
  // Left to the wider rule, as the server resolves them: no request the browser sends matches
  // `/x?`, `/a/./` or `/my dir/` as text.
  assert.deepEqual(blockLookup(b, '/xyz'), [`${A}/xyz`]);
  assert.deepEqual(blockLookup(b, '/a/b'), [`${A}/a/b`]);
});

test('rules survive the JSON state, are bounded, and a state without rules still loads', () => {
  const agent = new Agent(CONFIG, 0);
  agent.learn(parseBlock({ v: 2, config: CONFIG, servers: [A], urls: { '/*': [0] } }, ORIGIN), 0);
  const again = Agent.fromJSON(JSON.parse(JSON.stringify(agent.toJSON())));
  assert.deepEqual(again.plan('/p', 0).map((c) => c.url), [`${A}/p`]);
  const old = agent.toJSON();
  delete old.rules;
  assert.equal(Agent.fromJSON(old).plan('/p', 0), null);
  assert.throws(() => Agent.fromJSON({ ...agent.toJSON(), rules: [['/', [`${A}/no-star`]]] }), /rules: bad entry/);
  const many = {};
  for (let i = 0; i < MAX_RULES + 5; i++) many[`/r${i}/*`] = [0];
  agent.learn(parseBlock({ v: 2, config: CONFIG, servers: [A], urls: many }, ORIGIN), 0);
  assert.equal(agent.ruleCount, MAX_RULES);
  // The oldest learnt forgotten first: /* and /r0/* to /r4/*.
  assert.equal(agent.plan('/r0/x', 0), null);
  assert.equal(agent.plan('/other', 0), null);
  assert.deepEqual(agent.replicas('/r5/x'), [`${A}/r5/x`]);
});

// ---------------------------------------------------------------------------------------------
// The default policy, Decay (decay.mjs; its own rules are held to the Rust code by the shared
// vectors): what the agent adds around it.

function decayAgent(urls, config = {}) {
  const a = new Agent({}, 0);
  a.learn(block(urls, config), 0);
  return a;
}

test('Decay is the default: races while nothing is measured, then hedges within the budget', () => {
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`, `${C}/x`] });
  assert.equal(a.policy, 'decay');
  assert.equal(a.race(0), 3, 'all three raced while none is measured');
  assert.equal(a.hedgeAfter(A, 0), null, 'no hedge before two samples');
  a.record(B, 'answered', 10, 20);
  assert.equal(a.race(10), 1);
  assert.equal(a.plan('/x', 10)[0].endpoint, B);
  a.record(B, 'answered', 20, 22);
  const after = a.hedgeAfter(B, 20);
  assert.ok(after > 21 && after < 60, `hedge after ${after} ms`);
  // The two burst tokens pay for two hedges; then requests must earn one (budget 0.02 each).
  a.hedged(B, 21);
  a.hedged(B, 22);
  assert.equal(a.hedgeAfter(B, 23), null, 'no token left');
  for (let i = 0; i < 50; i++) a.requested(30 + i);
  assert.notEqual(a.hedgeAfter(B, 100), null, '50 requests earn a token');
});

test('Decay: one slow sample among quick ones does not reorder; a stale estimate is explored again', () => {
  // Relaxation off: what brings A back here is the exploration probe alone (the next test
  // has relaxation on, the default).
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`] }, { relax_ms: 0 });
  for (let t = 0; t < 20; t++) a.record(A, 'answered', 100 + t, 10);
  a.record(B, 'answered', 120, 100);
  a.record(A, 'answered', 121, 300); // the outlier, 1 ms after the previous sample
  assert.equal(a.plan('/x', 122)[0].endpoint, A, 'an outlier weighs min_weight (0.1): A stays first');
  // A burst of slow samples does move the traffic...
  for (let t = 0; t < 10; t++) a.record(A, 'answered', 130 + t, 300);
  assert.equal(a.plan('/x', 140)[0].endpoint, B);
  // ...until A, explored once `explore_after_ms` has passed since its last sample (a token
  // held), answers quickly: the sample weighs 1 − e^(−Δt/τ).
  assert.equal(a.nextProbeMs(140), 139 + DECAY.explore_after_ms);
  assert.deepEqual(a.dueProbes(139 + DECAY.explore_after_ms - 1), []);
  const due = a.dueProbes(139 + DECAY.explore_after_ms);
  assert.deepEqual(due.map((p) => [p.endpoint, p.kind, p.url]), [[A, 'refresh', `${A}/x`]]);
  a.record(A, 'answered', 40000, 10);
  assert.equal(a.plan('/x', 40001)[0].endpoint, A, 'A is first again after one quick sample');
});

test('Decay: after a slow spell the stale estimate relaxes to the long-run mean and A is used again without a probe', () => {
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`] });
  for (let t = 0; t < 20; t++) a.record(A, 'answered', 500 * t, 10);
  a.record(B, 'answered', 9600, 100);
  for (let t = 1; t <= 10; t++) a.record(A, 'answered', 9500 + 100 * t, 300);
  assert.equal(a.plan('/x', 10500)[0].endpoint, B, 'the spell moved the traffic to B');
  // A's long-run mean barely moved (ten samples 0.1 s apart weigh 1 − e^(−0.1/60) each), so
  // its stale estimate is back under B's within a few relax times (2 s), no probe sent.
  let back = null;
  for (let t = 10500; t <= 30000 && back === null; t += 100) {
    if (a.plan('/x', t)[0].endpoint === A) back = t;
  }
  assert.ok(back !== null && back - 10500 <= 10000, `A first again ${back - 10500} ms after the spell`);
  assert.deepEqual(a.dueProbes(back).filter((p) => p.endpoint === A), [], 'no probe of A was needed');
});

test('Decay: a failed endpoint is retried after a back-off doubling to its cap, and used again', () => {
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`] }, { backoff_ms: 400, max_backoff_ms: 1600 });
  a.record(A, 'answered', 0, 5);
  a.record(B, 'answered', 0, 50);
  a.record(A, 'connect_failed', 100);
  assert.deepEqual(a.plan('/x', 101).map((c) => c.endpoint), [B, A], 'failed last');
  const [, failed] = a.table(101);
  assert.deepEqual([failed.live, failed.failures, failed.probe_interval_ms, failed.next_probe_ms], [false, 1, 400, 500]);
  const sent = [];
  for (let t = 100; t <= 6000; t += 10) {
    for (const p of a.dueProbes(t)) {
      assert.equal(p.kind, 'recover');
      sent.push(t);
      a.record(A, 'connect_failed', t);
    }
  }
  assert.deepEqual(sent, [500, 1300, 2900, 4500], 'after 0.4, 0.8, 1.6, 1.6 s');
  assert.equal(a.nextProbeMs(4500), 6100);
  a.record(A, 'answered', 6100, 5);
  assert.equal(a.plan('/x', 6101)[0].endpoint, A, 'used again once it answers');
  assert.equal(a.nextProbeMs(6101) === null || a.nextProbeMs(6101) > 6101, true);
});

test('the policy is chosen by the block: another policy starts its own table over the same endpoints', () => {
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`] });
  a.record(A, 'answered', 1, 10);
  a.learn(block({ '/x': [`${A}/x`, `${B}/x`] }, {}), 2);
  assert.equal(a.selector.estimate(A).samples, 1, 'the same policy keeps its table');
  a.learn(block({ '/x': [`${A}/x`, `${B}/x`] }, { policy: 'refresh' }), 3);
  assert.equal(a.policy, 'refresh');
  assert.equal(a.race(3), 1, 'Refresh never races');
  assert.equal(a.hedgeAfter(A, 3), null, 'nor hedges');
  a.requested(3);
  assert.deepEqual(a.selector.health(3).map(([n]) => n), [A, B]);
  assert.equal(a.selector.estimate(A), null);
  const back = Agent.fromJSON(JSON.stringify(a));
  assert.equal(back.policy, 'refresh');
});

test('the JSON state keeps the Decay selector; a state of the old format is refused', () => {
  const a = decayAgent({ '/x': [`${A}/x`, `${B}/x`] });
  a.record(A, 'answered', 1, 30);
  a.record(B, 'answered', 2, 10);
  a.record(A, 'timed_out', 3);
  a.requested(4);
  const s = JSON.parse(JSON.stringify(a));
  assert.equal(s.format, 'slipstream-agent@2');
  assert.equal(s.selector.format, 'slipstream-select/decay@2');
  const b = Agent.fromJSON(s);
  assert.deepEqual(b.table(10), a.table(10));
  assert.equal(b.selector.tokens(), a.selector.tokens());
  assert.deepEqual(b.dueProbes(2000), a.dueProbes(2000));
  assert.throws(() => Agent.fromJSON({ ...s, format: 'slipstream-agent@1' }), /format/);
  assert.throws(() => Agent.fromJSON({ ...s, overrides: { policy: 'nope' } }), /policy/);
});
