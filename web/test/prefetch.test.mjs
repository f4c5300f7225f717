// The agent's prefetch decisions (web/agent/prefetch.mjs), without a browser.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { baseOrigin, byteAllowance, isFresh, mayPrefetch, pageReport, pageWaitLeft, PREFETCH_DEFAULTS, readHints, storable } from '../agent/prefetch.mjs';

test('Save-Data and 2G connections do not prefetch; others and unknown ones do', () => {
  assert.equal(mayPrefetch(undefined).ok, true);
  assert.equal(mayPrefetch({ saveData: false, effectiveType: '4g' }).ok, true);
  assert.deepEqual(mayPrefetch({ saveData: true, effectiveType: '4g' }), { ok: false, why: 'save-data' });
  assert.deepEqual(mayPrefetch({ effectiveType: '2g' }), { ok: false, why: 'slow-connection' });
  assert.deepEqual(mayPrefetch({ effectiveType: 'slow-2g' }), { ok: false, why: 'slow-connection' });
  assert.equal(mayPrefetch({ effectiveType: '3g' }).ok, true);
});

test('a page may prefetch ten bytes per demand byte, and a floor without a measure', () => {
  assert.equal(byteAllowance(100_000), 1_000_000);
  assert.equal(byteAllowance(0), PREFETCH_DEFAULTS.min_bytes);
  assert.equal(byteAllowance(NaN), PREFETCH_DEFAULTS.min_bytes);
  assert.equal(byteAllowance(1000, { ...PREFETCH_DEFAULTS, bytes_per_demand_byte: 2, min_bytes: 0 }), 2000);
});

test('prefetched entries serve demand only within their lifetime', () => {
  assert.equal(isFresh(1000, 1000), true);
  assert.equal(isFresh(1000, 1000 + PREFETCH_DEFAULTS.ttl_ms - 1), true);
  assert.equal(isFresh(1000, 1000 + PREFETCH_DEFAULTS.ttl_ms), false);
  assert.equal(isFresh(2000, 1000), false, 'stored in the future: a clock jump, not fresh');
  assert.equal(isFresh(undefined, 1000), false);
});

test('hint answers are read defensively', () => {
  const o = 'http://site.example';
  assert.deepEqual(readHints({ hints: ['/a', '//evil/x', 'http://x/y', 3], prefetch_base: 'http://127.0.0.1:9/', next_turn: 1, retry_after_ms: null }, o), {
    hints: ['/a'],
    base: 'http://127.0.0.1:9',
    nextTurn: 1,
    waitMs: null,
  });
  assert.deepEqual(readHints({ hints: [], retry_after_ms: 250, next_turn: 0, prefetch_base: null }, o), {
    hints: [],
    base: o,
    nextTurn: 0,
    waitMs: 250,
  });
  assert.deepEqual(readHints('nonsense', o), { hints: [], base: o, nextTurn: null, waitMs: null });
  assert.deepEqual(readHints({ prefetch_base: 'javascript:alert(1)' }, o).base, o);
});

test('a prefetch base is an http(s) origin or nothing', () => {
  assert.equal(baseOrigin('http://127.0.0.1:8081'), 'http://127.0.0.1:8081');
  assert.equal(baseOrigin('https://pf.example/some/path?q'), 'https://pf.example');
  assert.equal(baseOrigin('javascript:alert(1)'), null);
  assert.equal(baseOrigin('not a url'), null);
  assert.equal(baseOrigin(null), null);
  assert.equal(baseOrigin(undefined), null);
});

test("a page's wait is what is left of it, from a fresh copy of the page only", () => {
  const at = 1_790_000_000_000;
  // Read 300 ms after it was given: 3,900 ms left.
  assert.equal(pageWaitLeft('4200', String(at), at + 300), 3900);
  // A client clock 2 s behind the node's never waits longer than the page said.
  assert.equal(pageWaitLeft('4200', String(at), at - 2000), 4200);
  // Over, or given more than 10 s from now either way (a cached copy, or clocks too far
  // apart): no wait, the agent asks.
  assert.equal(pageWaitLeft('4200', String(at), at + 4200), null);
  assert.equal(pageWaitLeft('4200', String(at), at + 10_001), null);
  assert.equal(pageWaitLeft('4200', String(at), at - 10_001), null);
  assert.equal(pageWaitLeft('0', String(at), at), null);
  // Malformed: no wait.
  for (const [w, a] of [[null, String(at)], ['4200', null], ['-1', String(at)], ['1.5', String(at)], ['12ms', String(at)], ['1e3', String(at)], ['9999999999', String(at)], ['4200', 'soon'], [4200, at]]) {
    assert.equal(pageWaitLeft(w, a, at), null, `${w} ${a}`);
  }
});

test("a page's report carries when the node served it and its response time, or nothing", () => {
  const nav = { requestStart: 10.25, responseEnd: 13.5, transferSize: 900 };
  assert.deepEqual(pageReport('1234', nav), { served_ms: '1234', page_us: '3250' });
  assert.deepEqual(pageReport(' 1234 ', nav), { served_ms: '1234', page_us: '3250' });
  // No value, a malformed one, or no timing: no report.
  for (const v of [null, undefined, '', '-1', '1.5', '12ab', '1'.repeat(16)]) assert.equal(pageReport(v, nav), null, String(v));
  assert.equal(pageReport('1234', undefined), null);
  // From a cache: the node's time is not the page's.
  assert.equal(pageReport('1234', { ...nav, transferSize: 0 }), null);
  // Times that are no page's.
  assert.equal(pageReport('1234', { ...nav, responseEnd: 5 }), null);
  assert.equal(pageReport('1234', { ...nav, responseEnd: 70000 }), null);
  assert.equal(pageReport('1234', { requestStart: 'x', responseEnd: 3, transferSize: 1 }), null);
});

test('a prefetched response that is private or no-store is not kept', () => {
  assert.equal(storable(null), true);
  assert.equal(storable('public, max-age=600'), true);
  assert.equal(storable('max-age=60, private'), false);
  assert.equal(storable('No-Store'), false);
  assert.equal(storable('private="set-cookie"'), false);
});
