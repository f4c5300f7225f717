// Paper 001 (Web++) §3.4 "Batch Resource Transmission": does HTTP/2 to the replica give the
// benefit of sending a page and its embedded resources in one response? Run by batch.sh, which
// documents the setup; docs/experiments/001-batch.md reports the numbers.
//
//   node batch.mjs shaper LINKS_JSON   one shared-bottleneck shaper process (see Shaper below)
//   node batch.mjs run                  the measurement (configured by environment variables)
//
// Every wait is a condition polled until a deadline; nothing sleeps to synchronise.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync, readFileSync, rmSync, createWriteStream } from 'node:fs';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { join } from 'node:path';
import { tmpdir } from 'node:os';

import { Toxiproxy } from '../../web/browser/harness.mjs';

const env = (k, d) => (process.env[k] === undefined || process.env[k] === '' ? d : process.env[k]);
const now = () => performance.now();

// ---------------------------------------------------------------------------------------------
// The shaper: a TCP relay with ONE bandwidth queue per direction shared by all connections of a
// link, so six HTTP/1.1 connections share the link's bandwidth as they would on a real access
// line. (Toxiproxy's bandwidth toxic limits each connection on its own, which would give six
// connections six times the link.) It also charges each new connection one round trip before
// its first request leaves (the TCP handshake, which the loopback hides). Latency itself is
// Toxiproxy's latency toxic, on the hop behind this relay.

class Pacer {
  constructor(bytesPerSec) {
    this.rate = bytesPerSec / 1000; // bytes per ms
    this.free = 0; // when the link finishes what it already holds
    this.queue = []; // {at, buf, dest}
    this.queued = 0;
    this.timer = null;
    this.sources = new Set();
    this.paused = false;
  }
  push(buf, dest, src) {
    this.sources.add(src);
    const PIECE = 4096;
    for (let off = 0; off < buf.length; off += PIECE) {
      const piece = buf.subarray(off, Math.min(buf.length, off + PIECE));
      this.free = Math.max(now(), this.free) + piece.length / this.rate;
      this.queue.push({ at: this.free, buf: piece, dest });
      this.queued += piece.length;
    }
    if (!this.paused && this.queued > 128 * 1024) {
      this.paused = true;
      for (const s of this.sources) s.pause();
    }
    this.arm();
  }
  arm() {
    if (this.timer || this.queue.length === 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.flush();
    }, Math.max(0, this.queue[0].at - now()));
  }
  flush() {
    const t = now();
    while (this.queue.length && this.queue[0].at <= t + 0.2) {
      const { buf, dest } = this.queue.shift();
      if (buf === null) {
        if (!dest.destroyed) dest.end();
        continue;
      }
      this.queued -= buf.length;
      if (!dest.destroyed) dest.write(buf);
    }
    if (this.paused && this.queued < 64 * 1024) {
      this.paused = false;
      for (const s of this.sources) if (!s.destroyed) s.resume();
    }
    this.arm();
  }
  // Closes `dest` once everything queued before now has gone out.
  end(dest) {
    this.queue.push({ at: Math.max(now(), this.free), buf: null, dest });
    this.arm();
  }
  forget(src) {
    this.sources.delete(src);
  }
}

function shaper(links) {
  const ready = [];
  for (const l of links) {
    const down = new Pacer(l.bytesPerSec);
    const up = new Pacer(l.bytesPerSec);
    const srv = net.createServer({ noDelay: true }, (client) => {
      const openAt = now() + l.handshakeMs;
      const upstream = net.connect({ host: '127.0.0.1', port: l.upstream, noDelay: true });
      const early = [];
      let open = false;
      const gate = setTimeout(() => {
        open = true;
        for (const b of early) up.push(b, upstream, client);
        early.length = 0;
      }, Math.max(0, openAt - now()));
      client.on('data', (b) => (open ? up.push(b, upstream, client) : early.push(b)));
      upstream.on('data', (b) => down.push(b, client, upstream));
      // The client going away ends both; the server going away ends the client only after
      // what the server sent before has crossed the link.
      const close = () => {
        clearTimeout(gate);
        up.forget(client);
        down.forget(upstream);
        client.destroy();
        upstream.destroy();
      };
      client.on('close', close);
      client.on('error', close);
      upstream.on('close', () => {
        down.forget(upstream);
        down.end(client);
      });
      upstream.on('error', () => {});
    });
    srv.listen(0, '127.0.0.1', () => {
      ready.push(`${l.name}=${srv.address().port}`);
      if (ready.length === links.length) process.stdout.write(`ready ${ready.join(' ')}\n`);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Loaders. Each starts from nothing (new connections), fetches the page, then its resources, and
// returns {ms, bytes} from the first request to the last byte of the last resource.

function h1Get(agent, port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, agent }, (res) => {
      let n = 0;
      res.on('data', (b) => (n += b.length));
      res.on('end', () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`${path}: ${res.statusCode}`))));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

async function loadH1(port, site, conns) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: conns, maxFreeSockets: conns });
  try {
    const t0 = now();
    let bytes = await h1Get(agent, port, site.page);
    const sizes = await Promise.all(site.resources.map((p) => h1Get(agent, port, p)));
    const ms = now() - t0;
    for (const s of sizes) bytes += s;
    return { ms, bytes };
  } finally {
    agent.destroy();
  }
}

function h2Get(session, path) {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':path': path });
    let n = 0;
    let status = 0;
    req.on('response', (h) => (status = h[':status']));
    req.on('data', (b) => (n += b.length));
    req.on('end', () => (status === 200 ? resolve(n) : reject(new Error(`${path}: ${status}`))));
    req.on('error', reject);
    req.end();
  });
}

// Chromium's HTTP/2 windows (6 MiB per stream, 15 MiB per connection); Node's default of 64 KiB
// would cap a 40 ms round trip at 1.6 MB/s, which no browser does.
function h2Session(port) {
  const session = http2.connect(`http://127.0.0.1:${port}`, {
    settings: { initialWindowSize: 6 * 1024 * 1024, enablePush: false },
  });
  session.on('error', () => {});
  session.once('connect', () => session.setLocalWindowSize(15 * 1024 * 1024));
  return session;
}

async function loadH2(port, site, preload) {
  const t0 = now(); // before connecting, as for HTTP/1.1 whose agent connects on first request
  const session = h2Session(port);
  try {
    let sizes;
    if (preload) {
      sizes = await Promise.all([site.page, ...site.resources].map((p) => h2Get(session, p)));
    } else {
      const page = await h2Get(session, site.page);
      sizes = [page, ...(await Promise.all(site.resources.map((p) => h2Get(session, p))))];
    }
    const ms = now() - t0;
    return { ms, bytes: sizes.reduce((a, b) => a + b, 0) };
  } finally {
    session.destroy();
  }
}

async function loadBatch(port, site) {
  const agent = new http.Agent({ keepAlive: false, maxSockets: 1 });
  try {
    const t0 = now();
    const bytes = await h1Get(agent, port, site.batch);
    return { ms: now() - t0, bytes };
  } finally {
    agent.destroy();
  }
}

const LOADERS = {
  'h1x6': (port, site) => loadH1(port, site, 6),
  'h1x4': (port, site) => loadH1(port, site, 4),
  'h2': (port, site) => loadH2(port, site, false),
  'h2-preload': (port, site) => loadH2(port, site, true),
  'batch': (port, site) => loadBatch(port, site),
};
const LOADER_TEXT = {
  'h1x6': 'HTTP/1.1, 6 connections',
  'h1x4': 'HTTP/1.1, 4 connections',
  'h2': 'HTTP/2, page then resources',
  'h2-preload': 'HTTP/2, resources with the page',
  'batch': 'batch (one response)',
};

// ---------------------------------------------------------------------------------------------
// Processes and polling.

class Proc {
  constructor(name, bin, args) {
    this.name = name;
    this.out = '';
    this.alive = true;
    this.child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b) => {
      this.out += b.toString();
      if (this.out.length > 200000) this.out = this.out.slice(-100000);
    };
    this.child.stdout.on('data', keep);
    this.child.stderr.on('data', keep);
    this.child.on('exit', () => (this.alive = false));
    this.child.on('error', (e) => {
      this.alive = false;
      this.out += String(e);
    });
  }
  kill() {
    if (this.alive) this.child.kill('SIGTERM');
  }
}

async function waitFor(what, ms, probe) {
  const deadline = now() + ms;
  let last;
  for (;;) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 25)); // poll interval, not synchronisation
  }
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([
    p,
    new Promise((_, rej) => (t = setTimeout(() => rej(new Error(`${what} took over ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(t));
}

// ---------------------------------------------------------------------------------------------
// Statistics and output.

function quantile(sorted, q) {
  const i = (sorted.length - 1) * q;
  const lo = Math.floor(i);
  const hi = Math.ceil(i);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo);
}
const pct = (x, sign = false) => {
  const r = Math.round(x * 100);
  return `${r < 0 ? '−' : sign && r > 0 ? '+' : ''}${Math.abs(r)}%`;
};
const fmt = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);

function svgChart(cells, loaders, title) {
  // One panel per (link, shape): a bar per loader at its median, a whisker from p10 to p90.
  const colors = { 'h1x6': '#4c72b0', 'h1x4': '#8172b2', 'h2': '#55a868', 'h2-preload': '#64b5cd', 'batch': '#c44e52' };
  const panelW = 300;
  const panelH = 230;
  const cols = 2;
  const rows = Math.ceil(cells.length / cols);
  const W = cols * panelW + 20;
  const H = rows * panelH + 90;
  const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  let s = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">\n`;
  s += `<rect width="${W}" height="${H}" fill="white"/>\n<text x="10" y="18" font-size="13" font-weight="bold">${esc(title)}</text>\n`;
  cells.forEach((c, i) => {
    const x0 = 10 + (i % cols) * panelW + 45;
    const y0 = 40 + Math.floor(i / cols) * panelH;
    const plotW = panelW - 65;
    const plotH = panelH - 70;
    const max = Math.max(...loaders.map((l) => c.stats[l]?.p90 ?? 0)) * 1.1 || 1;
    s += `<text x="${x0}" y="${y0 + 12}" font-weight="bold">${esc(c.title)}</text>\n`;
    const top = y0 + 22;
    s += `<line x1="${x0}" y1="${top}" x2="${x0}" y2="${top + plotH}" stroke="#333"/>`;
    s += `<line x1="${x0}" y1="${top + plotH}" x2="${x0 + plotW}" y2="${top + plotH}" stroke="#333"/>\n`;
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4;
      const y = top + plotH - (plotH * k) / 4;
      s += `<line x1="${x0 - 3}" y1="${y}" x2="${x0 + plotW}" y2="${y}" stroke="#ddd"/><text x="${x0 - 5}" y="${y + 4}" text-anchor="end">${esc(fmt(v))}</text>\n`;
    }
    const bw = plotW / loaders.length;
    loaders.forEach((l, j) => {
      const st = c.stats[l];
      if (!st) return;
      const bx = x0 + j * bw + bw * 0.15;
      const h = (plotH * st.median) / max;
      s += `<rect x="${bx}" y="${top + plotH - h}" width="${bw * 0.7}" height="${h}" fill="${colors[l]}"/>`;
      const cx = bx + bw * 0.35;
      const y10 = top + plotH - (plotH * st.p10) / max;
      const y90 = top + plotH - (plotH * st.p90) / max;
      s += `<line x1="${cx}" y1="${y10}" x2="${cx}" y2="${y90}" stroke="black"/>`;
      s += `<text x="${cx}" y="${top + plotH - h - 4 - (y10 - y90 > 0 ? 0 : 0)}" text-anchor="middle" font-size="9">${esc(fmt(st.median))}</text>`;
      s += `<text x="${cx}" y="${top + plotH + 13}" text-anchor="middle" font-size="9">${esc(l)}</text>\n`;
    });
  });
  const ly = H - 30;
  loaders.forEach((l, j) => {
    const lx = 10 + j * ((W - 20) / loaders.length);
    s += `<rect x="${lx}" y="${ly}" width="10" height="10" fill="${colors[l]}"/><text x="${lx + 14}" y="${ly + 9}">${esc(LOADER_TEXT[l])}</text>\n`;
  });
  s += `<text x="10" y="${H - 6}" fill="#555">Bars: median load time, fresh connections. Whiskers: p10 to p90.</text>\n</svg>\n`;
  return s;
}

// The table and the chart, from the loads in `runs`.
function summarize(OUT, links, shapes, LOADS, runs, LABEL) {
  // Summary.
  const cells = [];
  let md = `<!-- Generated by experiments/001/batch.sh; do not edit. -->\n`;
  md += `Load time from the first request to the last byte of the last resource, every load on new connections. `;
  md += `${links.map((l) => `${l.text} (${l.reps} loads per loader)`).join('; ')}. `;
  md += `Time vs HTTP/1.1×6: the median's change against HTTP/1.1 with 6 connections (−52% = takes 52% less time). Batch saves: 1 − batch median / this median. Floor = one handshake round trip + one request round trip + all bytes at the link rate.${LABEL ? ` ${LABEL}.` : ''}\n\n`;
  md += `| link | page | loader | median | p10 | p90 | time vs HTTP/1.1×6 | batch saves vs this |\n|---|---|---|---:|---:|---:|---:|---:|\n`;
  for (const link of links) {
    for (const shape of shapes) {
      const stats = {};
      for (const l of LOADS) {
        const xs = runs.filter((r) => r.link === link.name && r.shape === shape.name && r.loader === l).map((r) => r.ms).sort((a, b) => a - b);
        if (xs.length) stats[l] = { n: xs.length, median: quantile(xs, 0.5), p10: quantile(xs, 0.1), p90: quantile(xs, 0.9) };
      }
      const floor = 4 * link.oneWayMs + (shape.bytes * 8) / (link.mbit * 1e3);
      cells.push({ title: `${link.text}; ${shape.text} (floor ${fmt(floor)})`, stats });
      for (const l of LOADS) {
        const st = stats[l];
        const vsH1 = stats.h1x6 ? pct(st.median / stats.h1x6.median - 1, true) : '';
        const bs = stats.batch ? (l === 'batch' ? '—' : pct(1 - stats.batch.median / st.median)) : '';
        md += `| ${link.text} | ${shape.text} = ${(shape.bytes / 1024).toFixed(0)} KB, floor ${fmt(floor)} | ${LOADER_TEXT[l]} | ${fmt(st.median)} | ${fmt(st.p10)} | ${fmt(st.p90)} | ${l === 'h1x6' ? '—' : vsH1} | ${bs} |\n`;
      }
    }
  }
  writeFileSync(join(OUT, 'batch-results.md'), md);
  writeFileSync(join(OUT, 'batch.svg'), svgChart(cells, LOADS, 'Paper 001 §3.4: page + embedded resources, cold load, HTTP/1.1 vs HTTP/2 vs one batch response'));
  process.stdout.write(md);
}

// ---------------------------------------------------------------------------------------------
// The run.

async function run() {
  const BIN = env('BIN', 'target/release/slipstream');
  const TOXI = env('TOXIPROXY_BIN', 'target/tools/toxiproxy-server');
  const OUT = env('OUT', 'docs/experiments/001');
  const REPS = Number(env('REPS', '15'));
  const REPS_SLOW = Number(env('REPS_SLOW', String(REPS)));
  const N = Number(env('RESOURCES', '30'));
  const PAGE = Number(env('PAGE_BYTES', String(30 * 1024)));
  const SIZES = env('RESOURCE_KB', '8,40').split(',').map(Number);
  const LOADS = env('LOADERS', 'h1x6,h1x4,h2,h2-preload,batch').split(',');
  const LOAD_TIMEOUT = Number(env('LOAD_TIMEOUT_MS', '60000'));
  const LABEL = env('LABEL', '');
  for (const l of LOADS) if (!LOADERS[l]) throw new Error(`unknown loader ${l}`);
  const links = [
    { name: 'fast', oneWayMs: 20, mbit: 50, reps: REPS, text: 'fast: 40 ms RTT, 50 Mbit/s' },
    { name: 'slow', oneWayMs: 50, mbit: 1, reps: REPS_SLOW, text: 'slow: 100 ms RTT, 1 Mbit/s' },
  ].filter((l) => env('LINKS', 'fast,slow').split(',').includes(l.name));

  // The site: per shape a page, N resources and the batch file (page + resources concatenated).
  if (env('SUMMARY_ONLY', '') !== '') {
    // Rebuild the table and chart from an earlier run's batch-runs.tsv (same settings).
    const rows = readFileSync(join(OUT, 'batch-runs.tsv'), 'utf8').trim().split('\n').slice(1).map((l) => l.split('\t'));
    const runs = rows.map(([link, shape, loader, , , ms]) => ({ link, shape, loader, ms: Number(ms) }));
    for (const l of links) l.reps = runs.filter((r) => r.link === l.name && r.loader === LOADS[0]).length / SIZES.length;
    const shapes = SIZES.map((kb) => ({ name: `${N}x${kb}KB`, text: `${PAGE >> 10} KB page + ${N} × ${kb} KB`, bytes: PAGE + N * kb * 1024 }));
    summarize(OUT, links, shapes, LOADS, runs, LABEL);
    return;
  }
  const root = join(tmpdir(), `slipstream-batch-${process.pid}`);
  const cleanup = [() => rmSync(root, { recursive: true, force: true })];
  const procs = [];
  const stop = () => {
    for (const p of procs) p.kill();
    for (const c of cleanup) c();
  };
  process.on('SIGINT', () => (stop(), process.exit(130)));
  process.on('SIGTERM', () => (stop(), process.exit(143)));
  try {
    const shapes = SIZES.map((kb) => {
      const dir = join(root, `s${kb}`);
      mkdirSync(dir, { recursive: true });
      const page = randomBytes(PAGE);
      writeFileSync(join(dir, 'index.html'), page);
      const parts = [page];
      const resources = [];
      for (let i = 0; i < N; i++) {
        const b = randomBytes(kb * 1024);
        writeFileSync(join(dir, `img${i}.bin`), b);
        parts.push(b);
        resources.push(`/s${kb}/img${i}.bin`);
      }
      const batch = Buffer.concat(parts);
      writeFileSync(join(dir, 'batch.bin'), batch);
      return {
        name: `${N}x${kb}KB`,
        text: `${PAGE >> 10} KB page + ${N} × ${kb} KB`,
        page: `/s${kb}/index.html`,
        resources,
        batch: `/s${kb}/batch.bin`,
        bytes: batch.length,
      };
    });

    // slipstream serve, then Toxiproxy (latency both ways), then the shaper (bandwidth, handshake).
    const sport = await freePort();
    const server = new Proc('slipstream', BIN, ['serve', root, '--listen', `127.0.0.1:${sport}`, '--cache-size', '256MiB',
      // The links' buffers hold a response for seconds after the server wrote it; keep the
      // server from timing out a keep-alive connection whose client has not yet read it.
      '--set', 'serve.idle_timeout_ms=300s', '--set', 'serve.header_read_timeout_ms=300s']);
    procs.push(server);
    await waitFor('slipstream serve', 20000, async () => {
      if (!server.alive) throw new Error(`slipstream exited:\n${server.out}`);
      return (await fetch(`http://127.0.0.1:${sport}${shapes[0].page}`)).ok;
    });
    const tport = await freePort();
    const tp = new Proc('toxiproxy', TOXI, ['-host', '127.0.0.1', '-port', String(tport)]);
    procs.push(tp);
    const api = `http://127.0.0.1:${tport}`;
    await waitFor('the Toxiproxy API', 20000, async () => {
      if (!tp.alive) throw new Error(`toxiproxy exited:\n${tp.out}`);
      return (await fetch(`${api}/version`)).ok;
    });
    const toxi = new Toxiproxy(tp, api);
    for (const l of links) {
      l.toxiPort = await freePort();
      await toxi.call('POST', '/proxies', { name: l.name, listen: `127.0.0.1:${l.toxiPort}`, upstream: `127.0.0.1:${sport}`, enabled: true });
      for (const stream of ['downstream', 'upstream']) {
        await toxi.call('POST', `/proxies/${l.name}/toxics`, {
          name: `latency_${stream}`,
          type: 'latency',
          stream,
          toxicity: 1,
          attributes: { latency: l.oneWayMs, jitter: 0 },
        });
      }
    }
    const spec = links.map((l) => ({ name: l.name, upstream: l.toxiPort, bytesPerSec: (l.mbit * 1e6) / 8, handshakeMs: 2 * l.oneWayMs }));
    const sh = new Proc('shaper', process.execPath, [new URL(import.meta.url).pathname, 'shaper', JSON.stringify(spec)]);
    procs.push(sh);
    const ports = await waitFor('the shaper', 20000, async () => {
      if (!sh.alive) throw new Error(`shaper exited:\n${sh.out}`);
      const m = sh.out.match(/ready (.*)\n/);
      return m && Object.fromEntries(m[1].split(' ').map((kv) => kv.split('=').map((x, i) => (i ? Number(x) : x))));
    });
    for (const l of links) l.port = ports[l.name];

    mkdirSync(OUT, { recursive: true });
    const tsvPath = join(OUT, 'batch-runs.tsv');
    const tsv = createWriteStream(tsvPath);
    tsv.write('link\tshape\tloader\trep\torder\tms\tbytes\n');
    const runs = [];
    const total = links.reduce((a, l) => a + l.reps, 0) * shapes.length * LOADS.length;
    let done = 0;
    const started = now();
    for (const link of links) {
      for (const shape of shapes) {
        // One unrecorded load per loader first: the server's cache and the proxies warm up.
        for (const l of LOADS) await withTimeout(LOADERS[l](link.port, shape), LOAD_TIMEOUT, `warm-up ${l}`);
        for (let rep = 0; rep < link.reps; rep++) {
          const order = LOADS.map((_, i) => LOADS[(i + rep) % LOADS.length]);
          for (let k = 0; k < order.length; k++) {
            const l = order[k];
            const r = await withTimeout(LOADERS[l](link.port, shape), LOAD_TIMEOUT, `${link.name} ${shape.name} ${l}`);
            if (r.bytes !== shape.bytes) throw new Error(`${l} received ${r.bytes} bytes, expected ${shape.bytes}`);
            runs.push({ link: link.name, shape: shape.name, loader: l, ms: r.ms });
            tsv.write(`${link.name}\t${shape.name}\t${l}\t${rep + 1}\t${k + 1}\t${r.ms.toFixed(2)}\t${r.bytes}\n`);
            done++;
            const el = (now() - started) / 1000;
            process.stderr.write(
              `\r[${done}/${total}] ${link.name} ${shape.name} rep ${rep + 1}/${link.reps} ${l.padEnd(10)} ${fmt(r.ms).padStart(8)}  ${el.toFixed(0)} s elapsed, ~${((el / done) * (total - done)).toFixed(0)} s left   `,
            );
          }
        }
      }
    }
    process.stderr.write('\n');
    await new Promise((r) => tsv.end(r));

    summarize(OUT, links, shapes, LOADS, runs, LABEL);
  } finally {
    stop();
  }
}

const mode = process.argv[2];
if (mode === 'shaper') shaper(JSON.parse(process.argv[3]));
else if (mode === 'run') run().catch((e) => {
  process.stderr.write(`\nbatch.mjs: ${e.stack || e}\n`);
  process.exit(1);
});
else {
  process.stderr.write('usage: batch.mjs run | batch.mjs shaper LINKS_JSON\n');
  process.exit(2);
}
