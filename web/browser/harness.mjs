// What the browser tests run against, all real processes on loopback: slipstream nodes, a
// Toxiproxy server in front of each, headless Chromium. Every wait is a condition polled until a
// deadline (`waitFor`), every process is killed when the test ends (`Cleanup`), and a missing
// prerequisite is an error that says how to get it, never a skip.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** Chromium's flags for a headless run in a container (Playwright adds --user-data-dir). */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Polls `check` (sync or async) until it returns a truthy value, or throws after `ms`. */
export async function waitFor(what, ms, check, everyMs = 50) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** A free TCP port on 127.0.0.1 (bound and released; the tests start at once after). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Things to undo when a test ends, last registered first. */
export class Cleanup {
  constructor() {
    this.steps = [];
  }
  add(fn) {
    this.steps.push(fn);
  }
  async run() {
    for (const fn of this.steps.reverse()) {
      try {
        await fn();
      } catch {
        // Best effort: the rest still runs.
      }
    }
    this.steps = [];
  }
}

/**
 * Promises of async event handlers still running: `settled()` resolves once every one tracked
 * so far (and any tracked while waiting) has settled, so a test reads what they count only after.
 */
export class Pending {
  constructor() {
    this.running = new Set();
  }
  track(promise) {
    const p = Promise.resolve(promise).catch(() => {});
    this.running.add(p);
    p.finally(() => this.running.delete(p));
    return p;
  }
  async settled() {
    while (this.running.size > 0) await Promise.all([...this.running]);
  }
}

/** A child process with its output kept (bounded) and its exit awaited. */
export class Proc {
  constructor(name, cmd, args, opts = {}) {
    this.name = name;
    this.lines = [];
    this.listeners = [];
    this.child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
    this.exited = new Promise((resolve) => this.child.on('exit', (code, signal) => resolve({ code, signal })));
    this.child.on('error', (e) => this._line(`spawn error: ${e}`));
    for (const stream of [this.child.stdout, this.child.stderr]) {
      let buf = '';
      stream.setEncoding('utf8');
      stream.on('data', (d) => {
        buf += d;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          this._line(buf.slice(0, i));
          buf = buf.slice(i + 1);
        }
      });
    }
  }
  _line(text) {
    const at = performance.now();
    this.lines.push({ at, text });
    if (this.lines.length > 20000) this.lines.splice(0, 10000);
    for (const fn of this.listeners) fn(text, at);
  }
  onLine(fn) {
    this.listeners.push(fn);
  }
  output() {
    return this.lines.map((l) => l.text).join('\n');
  }
  get alive() {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  async kill(signal = 'SIGKILL') {
    if (this.alive) this.child.kill(signal);
    await this.exited;
  }
}

/** The first existing file of `paths`, or an error naming them and `how`. */
function firstExisting(what, paths, how) {
  const found = paths.filter((p) => p && existsSync(p));
  if (found.length === 0) throw new Error(`${what} not found (looked at: ${paths.filter(Boolean).join(', ')}); ${how}`);
  // The newest build, so a stale release binary does not shadow a fresh debug one.
  return found.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
}

/** The slipstream binary: $SLIPSTREAM_BIN, else the newest of the Cargo target directories'. */
export function slipstreamBinary() {
  if (process.env.SLIPSTREAM_BIN) return firstExisting('SLIPSTREAM_BIN', [process.env.SLIPSTREAM_BIN], 'fix the variable');
  const target = process.env.CARGO_TARGET_DIR || join(REPO, 'target');
  return firstExisting(
    'the slipstream binary',
    [join(target, 'debug', 'slipstream'), join(target, 'release', 'slipstream')],
    'build it with `cargo build -p slipstream` (./scripts/test does) or set SLIPSTREAM_BIN',
  );
}

/** Where scripts/install-toxiproxy puts the server. */
export const TOXIPROXY_INSTALLED = join(REPO, 'target', 'tools', 'toxiproxy-server');

/** The Toxiproxy server binary: $TOXIPROXY_BIN, else scripts/install-toxiproxy's. */
export function toxiproxyBinary() {
  if (process.env.TOXIPROXY_BIN) return firstExisting('TOXIPROXY_BIN', [process.env.TOXIPROXY_BIN], 'fix the variable');
  return firstExisting(
    'the Toxiproxy server',
    [TOXIPROXY_INSTALLED],
    'install it with ./scripts/install-toxiproxy (.ci/run does) or set TOXIPROXY_BIN',
  );
}

/** Chromium: $CHROMIUM_BIN, else Debian's. */
export function chromiumBinary() {
  if (process.env.CHROMIUM_BIN) return firstExisting('CHROMIUM_BIN', [process.env.CHROMIUM_BIN], 'fix the variable');
  return firstExisting('Chromium', ['/usr/bin/chromium'], 'apt-get install chromium (.ci/run does) or set CHROMIUM_BIN');
}

/** A Toxiproxy server and its HTTP API. */
export class Toxiproxy {
  static async start(cleanup) {
    const bin = toxiproxyBinary();
    const port = await freePort();
    const proc = new Proc('toxiproxy', bin, ['-host', '127.0.0.1', '-port', String(port)]);
    cleanup.add(() => proc.kill());
    const t = new Toxiproxy(proc, `http://127.0.0.1:${port}`);
    await waitFor('the Toxiproxy API', 10000, async () => {
      if (!proc.alive) throw new Error(`toxiproxy exited:\n${proc.output()}`);
      return (await fetch(`${t.api}/version`)).ok;
    });
    return t;
  }
  constructor(proc, api) {
    this.proc = proc;
    this.api = api;
  }
  async call(method, path, body) {
    const r = await fetch(`${this.api}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`toxiproxy ${method} ${path}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : null;
  }
  /** A proxy `name` from a free port to `upstream`, with a downstream latency toxic. */
  async proxy(name, upstreamPort, latencyMs) {
    const port = await freePort();
    await this.call('POST', '/proxies', { name, listen: `127.0.0.1:${port}`, upstream: `127.0.0.1:${upstreamPort}`, enabled: true });
    await this.call('POST', `/proxies/${name}/toxics`, {
      name: 'latency',
      type: 'latency',
      stream: 'downstream',
      toxicity: 1,
      attributes: { latency: latencyMs, jitter: 0 },
    });
    return port;
  }
  async setLatency(name, latencyMs) {
    await this.call('POST', `/proxies/${name}/toxics/latency`, { attributes: { latency: latencyMs, jitter: 0 } });
  }
  /** Arrival times (performance.now()) of Toxiproxy's failed dials to `name`'s upstream. */
  failedDials(name, sinceMs = 0) {
    return this.proc.lines
      .filter((l) => l.at >= sinceMs && l.text.includes('Unable to open connection to upstream') && l.text.includes(`"name":"${name}"`))
      .map((l) => l.at);
  }
}

// ---------------------------------------------------------------------------------------------
// The test site: pages with many images and scripts of a few sizes.

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
/** A valid RGB PNG of `w`×`h` pixels of seeded noise (so it does not compress away). */
export function png(w, h, seed) {
  let x = seed >>> 0 || 1;
  const raw = Buffer.alloc((w * 3 + 1) * h);
  for (let i = 0; i < raw.length; i++) {
    if (i % (w * 3 + 1) === 0) continue; // filter byte 0
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    raw[i] = x & 0xff;
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

/** The pages of the site and what each must show once loaded. */
export const PAGES = ['/index.html', '/page2.html'];

/**
 * Writes the test site into `dir`: two pages linking each other, each with 12 images (about
 * 1, 8 and 40 KiB) and 3 scripts that mark themselves as run.
 */
export function writeSite(dir) {
  mkdirSync(join(dir, 'img'), { recursive: true });
  mkdirSync(join(dir, 'js'), { recursive: true });
  const sizes = [16, 48, 112]; // noise PNGs of ~0.8, ~7 and ~37 KiB
  for (let i = 0; i < 12; i++) {
    const s = sizes[i % 3];
    writeFileSync(join(dir, 'img', `i${i}.png`), png(s, s, i + 1));
  }
  for (let i = 0; i < 3; i++) {
    const pad = `/* ${'x'.repeat(1000 * (i + 1) * 4)} */\n`;
    writeFileSync(join(dir, 'js', `s${i}.js`), `${pad}(window.__ran = window.__ran || {})['s${i}'] = true;\n`);
  }
  for (const [page, other] of [
    ['index.html', 'page2.html'],
    ['page2.html', 'index.html'],
  ]) {
    const imgs = Array.from({ length: 12 }, (_, i) => `<img src="/img/i${i}.png" alt="i${i}">`).join('\n');
    const scripts = Array.from({ length: 3 }, (_, i) => `<script src="/js/s${i}.js"></script>`).join('\n');
    writeFileSync(
      join(dir, page),
      `<!doctype html>\n<html><head><meta charset="utf-8"><title>${page}</title></head>\n<body>\n<h1>${page}</h1>\n<a id="next" href="/${other}">next</a>\n${imgs}\n${scripts}\n</body></html>\n`,
    );
  }
}

/** A fresh temporary directory removed by `cleanup`. */
export function tempDir(cleanup, prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.add(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Requests in a combined-format access log, as `{method, path, status}`. */
export function accessLog(path) {
  if (!existsSync(path)) return [];
  const out = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const m = /"([A-Z]+) (\S+) HTTP\/[\d.]+" (\d{3})/.exec(line);
    if (m) out.push({ method: m[1], path: m[2], status: Number(m[3]) });
  }
  return out;
}
