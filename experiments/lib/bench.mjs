// What the Chromium benchmarks share (experiments/001/page-bench.mjs, experiments/000/pages.mjs):
// a seeded PRNG, bounded waits, reading access logs as they grow, summary statistics, and a
// Toxiproxy proxy with a latency toxic. The browser tests' harness (web/browser/harness.mjs)
// gives the rest (Toxiproxy itself, Chromium, processes).

import { execFileSync } from 'node:child_process';
import { closeSync, openSync, readSync, statSync } from 'node:fs';

import { REPO, freePort } from '../../web/browser/harness.mjs';

/** A small seeded PRNG (mulberry32): the same draws on every run of a seed. */
export function prng(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    uniform: (lo, hi) => lo + (hi - lo) * next(),
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), // inclusive
    shuffle(xs) {
      for (let i = xs.length - 1; i > 0; i--) {
        const j = Math.floor(next() * (i + 1));
        [xs[i], xs[j]] = [xs[j], xs[i]];
      }
      return xs;
    },
    /** An index in [0, n) drawn Zipf(s): P(i) ∝ 1 / (i + 1)^s. */
    zipf(n, s = 1) {
      let total = 0;
      for (let i = 0; i < n; i++) total += 1 / (i + 1) ** s;
      let x = next() * total;
      for (let i = 0; i < n; i++) {
        x -= 1 / (i + 1) ** s;
        if (x < 0) return i;
      }
      return n - 1;
    },
  };
}

/** `git -C REPO args...`, trimmed; null when git fails. */
export function git(args) {
  try {
    return execFileSync('git', ['-C', REPO, ...args], { encoding: 'utf8', timeout: 10000 }).trim();
  } catch {
    return null;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** `promise`, or an error naming `what` after `ms`. */
export function withTimeout(what, ms, promise) {
  let timer;
  return Promise.race([promise, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)))]).finally(() => clearTimeout(timer));
}

export const log = (...a) => console.error(...a);

/** A file's size, 0 when it is not there. */
export function sizeOf(path) {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Waits until the logs stop growing for 100 ms (their writer drained), at most 2 s. */
export async function drainedSizes(paths) {
  let last = paths.map(sizeOf);
  for (let i = 0; i < 20; i++) {
    await sleep(100);
    const now = paths.map(sizeOf);
    if (now.every((s, k) => s === last[k])) return now;
    last = now;
  }
  return last;
}

/** The bytes [from, to) of a file, as text. */
export function readRange(path, from, to) {
  if (to <= from) return '';
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(to - from);
    readSync(fd, buf, 0, buf.length, from);
    return buf.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/** Each line of the bytes [from, to) of a file, read 8 MiB at a time (a loaded server's access
 * log passes the longest string V8 makes). A line cut by `to` is passed as it is. */
export function forEachLine(path, from, to, fn) {
  if (to <= from) return;
  const fd = openSync(path, 'r');
  try {
    const chunk = Buffer.alloc(8 << 20);
    let rest = Buffer.alloc(0);
    for (let at = from; at < to;) {
      const n = readSync(fd, chunk, 0, Math.min(chunk.length, to - at), at);
      if (n <= 0) break;
      at += n;
      const buf = Buffer.concat([rest, chunk.subarray(0, n)]);
      let start = 0;
      for (let i = buf.indexOf(10); i >= 0; i = buf.indexOf(10, start)) {
        fn(buf.toString('utf8', start, i));
        start = i + 1;
      }
      rest = Buffer.from(buf.subarray(start));
    }
    if (rest.length) fn(rest.toString('utf8'));
  } finally {
    closeSync(fd);
  }
}

/** n, mean, p50 and p95 (nearest rank, as the Python benches) of `values`. */
export function stats(values) {
  if (values.length === 0) return { n: 0 };
  const v = [...values].sort((a, b) => a - b);
  const q = (p) => v[Math.min(v.length - 1, Math.max(0, Math.ceil(p * v.length) - 1))];
  return { n: v.length, mean: v.reduce((a, b) => a + b, 0) / v.length, p50: q(0.5), p95: q(0.95) };
}

/**
 * A Toxiproxy proxy `name` to `upstreamPort` with a downstream latency toxic of `latencyMs`
 * and a jitter of `jitter` (a fraction of it, at least 1 ms), and any `more` toxics; its port.
 */
export async function latencyProxy(toxi, name, upstreamPort, latencyMs, jitter, more = [], upstreamHost = '127.0.0.1') {
  const port = await freePort();
  const call = (...a) => withTimeout(`Toxiproxy ${a[0]} ${a[1]}`, 5000, toxi.call(...a));
  await call('POST', '/proxies', { name, listen: `127.0.0.1:${port}`, upstream: `${upstreamHost}:${upstreamPort}`, enabled: true });
  await call('POST', `/proxies/${name}/toxics`, {
    name: 'latency', type: 'latency', stream: 'downstream', toxicity: 1,
    attributes: { latency: latencyMs, jitter: Math.max(1, Math.round(latencyMs * jitter)) },
  });
  for (const toxic of more) await call('POST', `/proxies/${name}/toxics`, toxic);
  return port;
}
