#!/usr/bin/env node
// Issue 42 item 5, the Chromium arm: page loads in headless Chromium with the Web++ agent (the
// Service Worker, web/agent/) against the agent with Refresh, a single replica and optimal, on
// the emulated WAN triangle of experiments/001/get-bench.py. Method, caveats and how to read the
// output: docs/experiments/001-page.md.
//
//   node experiments/001/page-bench.mjs --bin target/release/slipstream [--series 1,2] [--pages N] [--quick]
//        [--outliers short|brownout] [--workdir DIR] [--tables-only]
//
// Per series (seed 1000 + series): a seeded site of 20 pages with 8-12 PNG images of 2-50 KB
// each; two clusters of three `slipstream serve` members (n0, n1, n2), one per agent policy
// (the policy is a node setting, `[cluster.agent] policy`, carried in the pages' replica
// block): `decay` (no [cluster.agent]: the default) and `refresh` (`policy = "refresh"`).
// Every member is advertised through its own Toxiproxy proxy with a downstream latency toxic
// of 20, 60 or 120 ms (±10 % jitter), the order drawn per series and the same for both
// clusters; the weather (outliers on the fastest member as get-bench.py's OUTLIERS: `short`,
// +300-500 ms for 0.15-0.3 s every 5-15 s; one member's proxy disabled 3 s in every 10 s) hits
// the same member of both clusters at once. Arms, one headless Chromium each (fresh profile, kept for
// the series), interleaved with the order rotated per page:
//   decay    the agent, default policy: the page at the decay cluster's n0 (through its proxy);
//   refresh  the agent, `policy = "refresh"`: the page at the refresh cluster's n0;
//   single   no agent (service workers blocked): the page at the mid-latency member's replica
//            URL of the decay cluster, every resource from that member;
//   optimal  a shell page from a local server (no latency) whose script fetches the page's HTML
//            and then each image from the three decay-cluster members at once (CORS), the
//            first complete answer used and the others aborted.
// The time of a load: the page's performance.now() once every image has loaded or failed
// (from navigation start). Extra requests: each member's access-log lines (JSON) of the arm
// (told apart by the browser's User-Agent), minus one per useful resource.
//
// Writes docs/experiments/data/001-page/<series>.json (--quick: quick-<series>.json) and prints
// markdown tables. Every wait has a deadline; every process is killed on exit or error.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';

import { blockLookup, parseBlock } from '../../web/agent/agent.mjs';
import { CHROMIUM_ARGS, Cleanup, Proc, REPO, Toxiproxy, chromiumBinary, freePort, png, tempDir, waitFor } from '../../web/browser/harness.mjs';
import { drainedSizes, git, latencyProxy, log, prng, readRange, sleep, stats, withTimeout } from '../lib/bench.mjs';

// --- parameters (the WAN and the weather as get-bench.py names them) ---------------------------

const LATENCIES = [20, 60, 120]; // ms, downstream, one per member, order drawn per series
const JITTER = 0.1; // ±10 % of the latency (Toxiproxy's jitter attribute)
// Outlier schemes on the fastest member, as get-bench.py's OUTLIERS: (gap between outliers s,
// their length s), both drawn uniformly; the extra latency is SPIKE_MS in both. `short` (the
// default) is about 2 % of the time, `brownout` (the first get-bench.py runs') about 18 %.
const OUTLIERS = { short: [[5, 15], [0.15, 0.3]], brownout: [[4, 9], [1, 2]] };
const SPIKE_MS = [300, 500]; // extra latency of an outlier (seeded, whole ms)
const FLAP_EVERY_S = 10; // the flapping member's proxy goes down every 10 s...
const FLAP_DOWN_S = 3; // ...for 3 s (its first time drawn in [0, FLAP_EVERY_S))
const THINK_MS = [100, 300]; // before each page load (seeded)
const PAGES_IN_SITE = 20;
const IMAGES_PER_PAGE = [8, 12];
const IMAGE_KB = [2, 50];
const WARMUP_LOADS = 2; // per arm, before the measured loads (not in the summaries)
const ARMS = ['decay', 'refresh', 'single', 'optimal'];
const POLICIES = ['decay', 'refresh']; // one cluster each
const NAMES = ['n0', 'n1', 'n2'];
const TOKEN = 'bench-token-0123456789abcdef';
const UA = (arm) => `Mozilla/5.0 (X11; Linux x86_64) slipstream-page-bench/${arm}`;
const GOTO_TIMEOUT_MS = 20000;
const LOAD_TIMEOUT_MS = 20000; // navigation start to every image settled
const EVAL_TIMEOUT_MS = 5000;

// --- arguments --------------------------------------------------------------------------------

function parseArgs(argv) {
  const a = { outliers: 'short', bin: process.env.SLIPSTREAM_BIN || join(REPO, 'target', 'release', 'slipstream'), series: null, pages: null, quick: false, workdir: existsSync('/dev/shm') ? '/dev/shm' : undefined };
  for (let i = 0; i < argv.length; i++) {
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case '--bin': a.bin = resolve(v()); break;
      case '--series': a.series = v(); break;
      case '--pages': a.pages = Number(v()); break;
      case '--quick': a.quick = true; break;
      case '--tables-only': a.tablesOnly = true; break;
      case '--outliers': a.outliers = v(); break;
      case '--workdir': a.workdir = v(); break;
      case '-h':
      case '--help':
        console.log('node experiments/001/page-bench.mjs [--bin PATH] [--series 1,2] [--pages N (loads per arm per series)] [--quick] [--outliers short|brownout] [--workdir DIR] [--tables-only (recompute the summaries of the JSON files and print them)]');
        process.exit(0);
        break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  a.series = (a.series ?? (a.quick ? '1' : '1,2')).split(',').map(Number);
  a.pages = a.pages ?? (a.quick ? 6 : 100);
  if (!a.series.every((s) => Number.isInteger(s) && s > 0) || !(a.pages > 0)) throw new Error('bad --series or --pages');
  if (!OUTLIERS[a.outliers]) throw new Error(`--outliers ${a.outliers}: want ${Object.keys(OUTLIERS).join(' or ')}`);
  if (!a.tablesOnly && !existsSync(a.bin)) throw new Error(`the slipstream binary ${a.bin} is missing (build it, or pass --bin)`);
  return a;
}

// --- the site ----------------------------------------------------------------------------------

/** In every page: once every image has loaded or failed, the time since navigation start. */
const PAGE_SCRIPT = `<script>
(function () {
  var imgs = Array.prototype.slice.call(document.images);
  Promise.all(imgs.map(function (img) {
    return new Promise(function (done) {
      if (img.complete) return done();
      img.addEventListener('load', done, { once: true });
      img.addEventListener('error', done, { once: true });
    });
  })).then(function () {
    var at = performance.now();
    var res = performance.getEntriesByType('resource').filter(function (e) { return e.name.indexOf('/img/') >= 0; });
    window.__bench = { ms: at, images: imgs.length,
      img_first_start: res.length ? Math.min.apply(null, res.map(function (e) { return e.startTime; })) : null,
      img_last_end: res.length ? Math.max.apply(null, res.map(function (e) { return e.responseEnd; })) : null,
      broken: imgs.filter(function (i) { return !(i.naturalWidth > 0); }).map(function (i) { return i.getAttribute('src'); }) };
  });
})();
</script>`;

/** The optimal arm's shell: the HTML and then every image from the three members at once. */
function shellPage(members) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>optimal</title></head><body><div id="imgs"></div>
<script>
const MEMBERS = ${JSON.stringify(members)};
async function first(path, kind) {
  const ctrl = MEMBERS.map(() => new AbortController());
  const tries = MEMBERS.map((m, i) =>
    fetch(m + path, { mode: 'cors', cache: 'no-store', signal: ctrl[i].signal }).then(async (r) => {
      if (!r.ok) throw new Error(m + path + ': ' + r.status);
      return { i, body: kind === 'text' ? await r.text() : await r.blob() };
    }));
  try {
    const w = await Promise.any(tries);
    ctrl.forEach((c, i) => { if (i !== w.i) c.abort(); });
    return w;
  } catch (e) {
    return null;
  }
}
(async () => {
  const path = new URLSearchParams(location.search).get('p');
  const html = await first(path, 'text');
  const htmlAt = performance.now();
  const rt = performance.getEntriesByName(MEMBERS[html.i] + path).pop();
  const htmlRt = rt ? [rt.startTime, rt.connectStart, rt.connectEnd, rt.requestStart, rt.responseStart, rt.responseEnd].map((x) => Math.round(x * 10) / 10) : null;
  const doneAt = [];
  if (html === null) {
    window.__bench = { ms: performance.now(), images: 0, broken: [], failed: 'html' };
    return;
  }
  const srcs = [...html.body.matchAll(/<img[^>]*\\ssrc="([^"]+)"/g)].map((m) => m[1]);
  const winners = [];
  const imgs = await Promise.all(srcs.map(async (src) => {
    const img = new Image();
    img.setAttribute('data-src', src);
    document.getElementById('imgs').appendChild(img);
    const w = await first(src, 'blob');
    doneAt.push(performance.now());
    if (w === null) return img;
    winners.push(w.i);
    await new Promise((done) => {
      img.addEventListener('load', done, { once: true });
      img.addEventListener('error', done, { once: true });
      img.src = URL.createObjectURL(w.body);
    });
    return img;
  }));
  window.__bench = { ms: performance.now(), images: srcs.length, html_from: html.i, winners, html_ms: htmlAt, html_rt: htmlRt,
    img_last_end: Math.max(...doneAt),
    broken: imgs.filter((i) => !(i.naturalWidth > 0)).map((i) => i.getAttribute('data-src')) };
})();
</script></body></html>
`;
}

function writeSite(dir, rng) {
  mkdirSync(join(dir, 'img'), { recursive: true });
  const pages = [];
  for (let p = 0; p < PAGES_IN_SITE; p++) {
    const name = `p${String(p).padStart(2, '0')}`;
    const n = rng.int(...IMAGES_PER_PAGE);
    const images = [];
    for (let i = 0; i < n; i++) {
      const kb = rng.int(IMAGE_KB[0], IMAGE_KB[1]);
      // A noise PNG: about 3 bytes a pixel, so a side of sqrt(size / 3).
      const side = Math.max(8, Math.round(Math.sqrt((kb * 1024) / 3)));
      const file = `/img/${name}-i${String(i).padStart(2, '0')}.png`;
      const body = png(side, side, (p * 100 + i + 1) ^ Math.floor(rng.next() * 0x7fffffff));
      writeFileSync(join(dir, file), body);
      images.push({ src: file, bytes: body.length, side });
    }
    const tags = images.map((im) => `<img src="${im.src}" width="${im.side}" height="${im.side}" alt="">`).join('\n');
    writeFileSync(join(dir, `${name}.html`), `<!doctype html>\n<html><head><meta charset="utf-8"><title>${name}</title></head>\n<body>\n<h1>${name}</h1>\n${tags}\n${PAGE_SCRIPT}\n</body></html>\n`);
    pages.push({ path: `/${name}.html`, images });
  }
  return pages;
}

// --- processes ----------------------------------------------------------------------------------

/** A Toxiproxy proxy with the series' latency and ±10 % jitter (harness's has no jitter). */
/** One cluster member: config file, data dir, JSON access log. */
async function startMember(cleanup, root, bin, spec) {
  const dir = join(root, `${spec.policy}-${spec.name}`);
  mkdirSync(join(dir, 'data'), { recursive: true });
  const q = JSON.stringify;
  const accessLog = join(dir, 'access.log');
  const toml = [
    '[serve]',
    `access_log = ${q(accessLog)}`,
    'access_log_format = "json"',
    // Every load fetches every resource again (no HTTP cache hit in any arm).
    'cache_control = "no-store"',
    '',
    '[cluster]',
    `name = ${q(spec.name)}`,
    `cluster_id = ${q(`page-bench-${spec.policy}`)}`,
    `gossip_listen = ${q(`127.0.0.1:${spec.gossipPort}`)}`,
    `seeds = [${spec.seeds.map((p) => q(`127.0.0.1:${p}`)).join(', ')}]`,
    `advertise = ${q(spec.advertise)}`,
    `data_dir = ${q(join(dir, 'data'))}`,
    `token = ${q(TOKEN)}`,
    'gossip_interval_ms = 100',
    'publish = ["/*"]',
    '',
    ...(spec.policy === 'decay' ? [] : ['[cluster.agent]', `policy = ${q(spec.policy)}`, '']),
  ].join('\n');
  const config = join(dir, 'node.toml');
  writeFileSync(config, toml);
  const proc = new Proc(`${spec.policy}-${spec.name}`, bin, ['serve', spec.site, '--config', config, '--listen', `127.0.0.1:${spec.port}`], { env: { ...process.env, RUST_LOG: 'warn' } });
  cleanup.add(() => proc.kill());
  await waitFor(`member ${spec.policy}-${spec.name} on port ${spec.port}`, 20000, async () => {
    if (!proc.alive) throw new Error(`${spec.policy}-${spec.name} exited: ${proc.output()}`);
    return (await fetch(`http://127.0.0.1:${spec.port}/_slipstream/metrics`)).ok;
  });
  return { ...spec, proc, accessLog };
}

// --- access logs -------------------------------------------------------------------------------

/** Lines of the bench's arms in [from, to) of each member's log, counted per arm and member. */
function countLines(members, from, to) {
  const out = {};
  for (const arm of ARMS) out[arm] = { total: 0, page: 0, image: 0, head: 0, control: 0, other: 0, by_member: {}, image_by_member: {}, status: {}, control_targets: {} };
  let unknown = 0;
  members.forEach((m, k) => {
    const text = readRange(m.accessLog, from[k], to[k]);
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      let r;
      try {
        r = JSON.parse(line);
      } catch {
        continue;
      }
      const ua = r.user_agent || '';
      const arm = ARMS.find((a) => ua.endsWith(`slipstream-page-bench/${a}`));
      if (!arm) {
        unknown++;
        continue;
      }
      const c = out[arm];
      c.total++;
      const key = `${m.policy}-${m.name}`;
      c.by_member[key] = (c.by_member[key] ?? 0) + 1;
      c.status[r.status] = (c.status[r.status] ?? 0) + 1;
      if (r.control) {
        c.control++;
        const t = r.target.split('?')[0];
        c.control_targets[t] = (c.control_targets[t] ?? 0) + 1;
      }
      else if (r.method === 'HEAD') c.head++;
      else if (/^\/img\//.test(r.target)) {
        c.image++;
        c.image_by_member[key] = (c.image_by_member[key] ?? 0) + 1;
      }
      else if (/^\/p\d+\.html/.test(r.target)) c.page++;
      else c.other++;
    }
  });
  return { arms: out, other_lines: unknown };
}

// --- the weather ---------------------------------------------------------------------------------

/**
 * Spikes on the fastest member and the flapping member, on a seeded timeline (drawn in
 * get-bench.py's order: the first spike's time, the first flap's time, then per spike its
 * latency, its length and the gap to the next), applied to that member's proxy in both clusters.
 */
class Weather {
  constructor(toxi, fastest, flapper, rng, t0, outliers) {
    Object.assign(this, { toxi, fastest, flapper, rng, t0 });
    [this.gap, this.length] = OUTLIERS[outliers];
    this.events = [];
    this.stopped = false;
    this.wake = null;
  }
  now() {
    return performance.now() - this.t0;
  }
  note(what, extra = {}) {
    this.events.push({ t_ms: Math.round(this.now() * 10) / 10, what, ...extra });
  }
  async nap(untilMs) {
    while (!this.stopped && this.now() < untilMs) await sleep(Math.min(100, untilMs - this.now()));
  }
  async all(fn) {
    await withTimeout('Toxiproxy', 5000, Promise.all(POLICIES.map((p) => fn(`${p}-${NAMES[this.fastest]}`, `${p}-${NAMES[this.flapper]}`))));
  }
  start() {
    let nextSpike = this.rng.uniform(...this.gap) * 1000;
    let nextFlap = this.rng.uniform(0, FLAP_EVERY_S) * 1000;
    const guard = (p) => p.catch((e) => this.note(`error ${e.message}`));
    this.spikes = guard((async () => {
      while (!this.stopped) {
        await this.nap(nextSpike);
        if (this.stopped) break;
        const ms = this.rng.int(...SPIKE_MS);
        const dur = this.rng.uniform(...this.length) * 1000;
        const asked = this.now();
        await this.all((spiked) => this.toxi.call('POST', `/proxies/${spiked}/toxics`, { name: 'spike', type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: ms, jitter: 0 } }));
        this.note(`spike ${NAMES[this.fastest]} +${ms} ms for ${(dur / 1000).toFixed(1)} s`, { kind: 'spike', member: NAMES[this.fastest], ms, dur_ms: Math.round(dur), api_ms: Math.round((this.now() - asked) * 10) / 10 });
        const end = asked + dur;
        while (this.now() < end) await sleep(end - this.now()); // short: not cut by stop
        const asked2 = this.now();
        await this.all((spiked) => this.toxi.call('DELETE', `/proxies/${spiked}/toxics/spike`));
        this.note('spike end', { kind: 'spike_end', member: NAMES[this.fastest], api_ms: Math.round((this.now() - asked2) * 10) / 10 });
        nextSpike = this.now() + this.rng.uniform(...this.gap) * 1000;
      }
    })());
    this.flaps = guard((async () => {
      while (!this.stopped) {
        await this.nap(nextFlap);
        if (this.stopped) break;
        const asked = this.now();
        await this.all((_, flapping) => this.toxi.call('POST', `/proxies/${flapping}`, { enabled: false }));
        this.note(`flap ${NAMES[this.flapper]} down`, { kind: 'flap', member: NAMES[this.flapper], api_ms: Math.round((this.now() - asked) * 10) / 10 });
        await this.nap(asked + FLAP_DOWN_S * 1000);
        const asked2 = this.now();
        await this.all((_, flapping) => this.toxi.call('POST', `/proxies/${flapping}`, { enabled: true }));
        this.note('flap up', { kind: 'flap_end', member: NAMES[this.flapper], api_ms: Math.round((this.now() - asked2) * 10) / 10 });
        nextFlap += FLAP_EVERY_S * 1000;
      }
    })());
  }
  async stop() {
    this.stopped = true;
    await withTimeout('the weather to stop', 10000, Promise.all([this.spikes, this.flaps])).catch(() => {});
  }
  /** The windows [start, end) of spikes and flaps, in ms of the series. */
  windows() {
    const out = [];
    let open = {};
    for (const e of this.events) {
      if (e.kind === 'spike' || e.kind === 'flap') open[e.kind] = e;
      else if ((e.kind === 'spike_end' || e.kind === 'flap_end') && open[e.kind.replace('_end', '')]) {
        const s = open[e.kind.replace('_end', '')];
        out.push({ kind: s.kind, from: s.t_ms, to: e.t_ms });
        open[s.kind] = null;
      }
    }
    for (const s of Object.values(open)) if (s) out.push({ kind: s.kind, from: s.t_ms, to: Infinity });
    return out;
  }
}

// --- one series -------------------------------------------------------------------------------

async function runSeries(args, series, playwright) {
  const cleanup = new Cleanup();
  const seed = 1000 + series;
  const rng = prng(seed);
  const order = rng.shuffle([...LATENCIES]); // member i gets order[i] ms
  const flapper = rng.int(0, 2);
  const fastest = order.indexOf(Math.min(...order));
  const mid = order.indexOf([...order].sort((a, b) => a - b)[1]);
  log(`series ${series} (seed ${seed}): latencies ${NAMES.map((n, i) => `${n} ${order[i]} ms`).join(', ')}; fastest ${NAMES[fastest]}, mid ${NAMES[mid]}, flapper ${NAMES[flapper]}`);
  const onSignal = async (sig) => {
    log(`${sig}: cleaning up`);
    await cleanup.run();
    process.exit(130);
  };
  const sigs = ['SIGINT', 'SIGTERM'].map((s) => [s, () => onSignal(s)]);
  for (const [s, fn] of sigs) process.once(s, fn);
  const started = Date.now();
  const loadStart = loadavg();
  try {
    let work;
    if (args.workdir) {
      work = mkdtempSync(join(args.workdir, `page-bench-s${series}-`));
      cleanup.add(() => rmSync(work, { recursive: true, force: true }));
    } else {
      work = tempDir(cleanup, `page-bench-s${series}-`);
    }
    const site = join(work, 'site');
    const pages = writeSite(site, prng(seed * 3));

    // The triangle, twice (one cluster per agent policy), behind one Toxiproxy server.
    const toxi = await Toxiproxy.start(cleanup);
    const members = [];
    for (const policy of POLICIES) {
      const ports = [];
      const gossip = [];
      for (let i = 0; i < 3; i++) {
        ports.push(await freePort());
        gossip.push(await freePort());
      }
      const proxies = [];
      for (let i = 0; i < 3; i++) proxies.push(await latencyProxy(toxi, `${policy}-${NAMES[i]}`, ports[i], order[i], JITTER));
      for (let i = 0; i < 3; i++) {
        members.push(await startMember(cleanup, work, args.bin, {
          policy, name: NAMES[i], site, port: ports[i], gossipPort: gossip[i], proxyPort: proxies[i], latency_ms: order[i],
          seeds: gossip.filter((_, k) => k !== i), advertise: `http://127.0.0.1:${proxies[i]}`,
        }));
      }
    }
    const member = (policy, i) => members.find((m) => m.policy === policy && m.name === NAMES[i]);
    const proxyOrigin = (policy, i) => `http://127.0.0.1:${member(policy, i).proxyPort}`;

    // Converged: every member's pages name the three replicas (its cluster's proxies) of every
    // image, read as the agent reads the block; the refresh cluster's block names its policy.
    const probe = pages[0];
    for (const m of members) {
      const want = new Set([0, 1, 2].map((i) => proxyOrigin(m.policy, i)));
      const at = `http://127.0.0.1:${m.port}`;
      await waitFor(`${m.policy}-${m.name}'s ${probe.path} to carry a block naming three replicas of every image`, 30000, async () => {
        const html = await (await fetch(at + probe.path)).text();
        const all = [...html.matchAll(/<script[^>]*id="slipstream-replicas"[^>]*>([\s\S]*?)<\/script>/g)];
        if (all.length === 0) return false;
        const text = all[all.length - 1][1];
        const policyOk = m.policy === 'decay' ? !/"policy"/.test(text) : text.includes(`"policy":"${m.policy}"`);
        const block = parseBlock(text, at);
        return policyOk && probe.images.every(({ src }) => {
          const v = blockLookup(block, src);
          return v !== null && v.length === 3 && v.every((u) => want.has(new URL(u).origin));
        });
      }, 200);
    }
    // What was measured: the agent's worker script as the members serve it (embedded in the
    // binary at its build), the binary, and the repository's state.
    const swBytes = Buffer.from(await (await fetch(`http://127.0.0.1:${members[0].port}/_slipstream/sw.js`)).arrayBuffer());
    const build = {
      binary: args.bin,
      binary_mtime: new Date(statSync(args.bin).mtimeMs).toISOString(),
      version: (() => {
        try {
          return execFileSync(args.bin, ['--version'], { encoding: 'utf8', timeout: 10000 }).trim();
        } catch (e) {
          return `unknown (${e.message.split('\n')[0]})`;
        }
      })(),
      served_sw_js_sha256: createHash('sha256').update(swBytes).digest('hex'),
      git_head: git(['rev-parse', 'HEAD']),
      git_dirty: git(['status', '--porcelain', '--', 'web/agent', 'crates', 'experiments/001/page-bench.mjs']),
    };
    // The replicas answer cross-origin reads (the optimal page needs them).
    {
      const r = await fetch(proxyOrigin('decay', 0) + probe.images[0].src, { headers: { origin: 'http://127.0.0.1:1' } });
      await r.arrayBuffer();
      if (r.headers.get('access-control-allow-origin') !== '*') throw new Error(`a replica's image has no CORS header: ${JSON.stringify([...r.headers])}`);
    }

    // The optimal arm's shell, from a local server (no WAN).
    const shellMembers = [0, 1, 2].map((i) => proxyOrigin('decay', i));
    const shell = shellPage(shellMembers);
    const shellPort = await freePort();
    const server = createServer((req, res) => {
      if (req.url.startsWith('/opt.html')) {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
        res.end(shell);
      } else {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise((ok) => server.listen(shellPort, '127.0.0.1', ok));
    cleanup.add(() => new Promise((ok) => server.close(ok)));

    // The browsers: one per arm, each a fresh profile kept for the series.
    let t0 = null; // the series' clock starts with the weather
    const chromiumPath = chromiumBinary();
    const browsers = {};
    for (const arm of ARMS) {
      const profile = tempDir(cleanup, `page-bench-${arm}-profile-`);
      const context = await withTimeout(`Chromium for ${arm} to start`, 60000, playwright.chromium.launchPersistentContext(profile, {
        executablePath: chromiumPath,
        headless: true,
        args: [...CHROMIUM_ARGS, `--user-agent=${UA(arm)}`],
        serviceWorkers: arm === 'decay' || arm === 'refresh' ? 'allow' : 'block',
        timeout: 60000,
      }));
      cleanup.add(() => withTimeout(`closing ${arm}'s browser`, 15000, context.close()));
      const page = context.pages()[0] ?? (await context.newPage());
      // When the browser fetches the agent's worker script (an update check), as it reports it.
      const swFetches = [];
      context.on('request', (r) => {
        if (r.url().includes('/_slipstream/sw.js')) swFetches.push(t0 === null ? null : Math.round(performance.now() - t0));
      });
      browsers[arm] = { context, page, swFetches };
    }
    const urlOf = (arm, path) => {
      switch (arm) {
        case 'decay':
        case 'refresh':
          return proxyOrigin(arm, 0) + path;
        case 'single':
          return proxyOrigin('decay', mid) + path;
        default:
          return `http://127.0.0.1:${shellPort}/opt.html?p=${encodeURIComponent(path)}`;
      }
    };

    t0 = performance.now();
    const t0Epoch = performance.timeOrigin + t0;
    const sinceStart = () => Math.round((performance.now() - t0) * 10) / 10;

    /** One page load in `arm`'s browser; never throws. */
    async function load(arm, pg) {
      const { page } = browsers[arm];
      const rec = { arm, page: pg.path, images: pg.images.length, t_ms: sinceStart() };
      try {
        await page.goto(urlOf(arm, pg.path), { waitUntil: 'commit', timeout: GOTO_TIMEOUT_MS });
        const handle = await page.waitForFunction(() => window.__bench, null, { timeout: LOAD_TIMEOUT_MS, polling: 20 });
        const r = await withTimeout('the load result', EVAL_TIMEOUT_MS, handle.jsonValue());
        const nav = await withTimeout('navigation timing', EVAL_TIMEOUT_MS, page.evaluate(() => {
          const n = performance.getEntriesByType('navigation')[0];
          return {
            origin_epoch_ms: performance.timeOrigin,
            controlled: navigator.serviceWorker ? navigator.serviceWorker.controller !== null : false,
            worker_start: n ? n.workerStart : null,
            response_end: n ? n.responseEnd : null,
          };
        }));
        Object.assign(rec, {
          ok: true,
          ms: r.ms,
          broken: r.broken.length,
          broken_src: r.broken,
          ...(r.failed ? { failed: r.failed } : {}),
          ...(r.winners ? { winners: r.winners.map((i) => NAMES[i]), html_from: NAMES[r.html_from], html_ms: r.html_ms, html_rt: r.html_rt } : {}),
          img_first_start_ms: r.img_first_start ?? null,
          img_last_end_ms: r.img_last_end ?? null,
          controlled: nav.controlled,
          worker_start_ms: nav.worker_start,
          html_end_ms: nav.response_end,
          nav_at_ms: Math.round((nav.origin_epoch_ms - t0Epoch) * 10) / 10,
        });
        if (r.failed) rec.ok = false;
        if (arm === 'optimal' && r.images !== pg.images.length) rec.image_count_mismatch = r.images;
      } catch (e) {
        Object.assign(rec, { ok: false, error: String(e.message).split('\n')[0].slice(0, 300), broken: pg.images.length });
      }
      rec.end_ms = sinceStart();
      return rec;
    }

    const weather = new Weather(toxi, fastest, flapper, prng(seed * 17), t0, args.outliers);
    const pageRng = prng(seed * 7);
    const thinkRng = prng(seed * 19);
    const loads = [];
    const warmup = [];
    const logPaths = members.map((m) => m.accessLog);
    let fromSizes;
    const deadline = Date.now() + 120000 + args.pages * ARMS.length * 2500; // a load takes ~0.4 s
    weather.start();
    try {
      // Warm-up: the agents register and take over; not in the summaries.
      for (let w = 0; w < WARMUP_LOADS; w++) {
        const pg = pages[pageRng.int(0, pages.length - 1)];
        for (const arm of ARMS) {
          await sleep(thinkRng.uniform(...THINK_MS));
          const rec = await load(arm, pg);
          rec.warmup = true;
          warmup.push(rec);
          if (w === 0 && (arm === 'decay' || arm === 'refresh')) {
            await waitFor(`${arm}'s agent to be ready and control the page`, 20000, () =>
              withTimeout('agent ready', EVAL_TIMEOUT_MS, browsers[arm].page.evaluate(() => window.slipstreamAgent && window.slipstreamAgent.ready.then(() => navigator.serviceWorker.controller !== null))), 100);
          }
        }
      }
      fromSizes = await drainedSizes(logPaths);
      const measuredFrom = sinceStart();
      log(`  warm-up done at ${(measuredFrom / 1000).toFixed(1)} s`);
      for (let n = 0; n < args.pages; n++) {
        if (Date.now() > deadline) throw new Error(`series ${series} ran past its deadline after ${n} rounds`);
        const pg = pages[pageRng.int(0, pages.length - 1)];
        const rot = [...ARMS.slice(n % ARMS.length), ...ARMS.slice(0, n % ARMS.length)];
        for (const arm of rot) {
          const think = thinkRng.uniform(...THINK_MS);
          await sleep(think);
          const rec = await load(arm, pg);
          rec.n = n;
          rec.think_ms = Math.round(think);
          loads.push(rec);
        }
        if ((n + 1) % 10 === 0 || n + 1 === args.pages) log(`  round ${n + 1}/${args.pages} at ${(sinceStart() / 1000).toFixed(1)} s`);
      }
    } finally {
      await weather.stop();
    }
    const toSizes = await drainedSizes(logPaths);
    const lines = countLines(members, fromSizes ?? logPaths.map(() => 0), toSizes);

    // What the agents hold at the end (their own counts; cross-checks only).
    const agents = {};
    for (const arm of ['decay', 'refresh']) {
      agents[arm] = await withTimeout(`${arm}'s agent state`, EVAL_TIMEOUT_MS, browsers[arm].page.evaluate(() => window.slipstreamAgent && window.slipstreamAgent.state())).catch((e) => ({ error: e.message }));
    }

    // Each load with the weather it overlapped (from navigation start to its end).
    const windows = weather.windows();
    for (const r of [...warmup, ...loads]) {
      const from = r.nav_at_ms ?? r.t_ms;
      const to = r.ok && r.nav_at_ms !== undefined ? r.nav_at_ms + r.ms : r.end_ms;
      r.during = [...new Set(windows.filter((w) => w.from < to && w.to > from).map((w) => w.kind))];
    }

    const result = {
      series, seed, quick: args.quick, pages_per_arm: args.pages, warmup_loads_per_arm: WARMUP_LOADS,
      started: new Date(started).toISOString(),
      build,
      // The machine: a timing run wants the load average near 0 (nothing else running).
      host: { cpus: cpus().length, loadavg_start: loadStart, loadavg_end: loadavg() },
      outliers: args.outliers, outlier_gap_s: OUTLIERS[args.outliers][0], outlier_length_s: OUTLIERS[args.outliers][1],
      spiked_pct: Math.round((100 * windows.filter((w) => w.kind === 'spike').reduce((a, w) => a + (Math.min(w.to, performance.now() - t0) - w.from), 0)) / (performance.now() - t0) * 100) / 100,
      parameters: { LATENCIES, JITTER, OUTLIERS, SPIKE_MS, FLAP_EVERY_S, FLAP_DOWN_S, THINK_MS, PAGES_IN_SITE, IMAGES_PER_PAGE, IMAGE_KB },
      members: members.map((m) => ({ policy: m.policy, name: m.name, latency_ms: m.latency_ms, proxy: m.proxyPort, port: m.port })),
      fastest: NAMES[fastest], mid: NAMES[mid], flapper: NAMES[flapper],
      site: pages,
      events: weather.events,
      warmup, loads,
      access_logs: lines,
      agents,
      sw_script_fetches: Object.fromEntries(['decay', 'refresh'].map((a) => [a, browsers[a].swFetches])),
      duration_s: Math.round((performance.now() - t0) / 100) / 10,
    };
    result.summary = summarise(result);
    return result;
  } finally {
    for (const [s, fn] of sigs) process.removeListener(s, fn);
    await cleanup.run();
  }
}

function summarise(result) {
  const out = {};
  for (const arm of ARMS) {
    const recs = result.loads.filter((r) => r.arm === arm);
    const complete = recs.filter((r) => r.ok && r.broken === 0);
    const s = stats(complete.map((r) => r.ms));
    s.loads = recs.length;
    s.failed = recs.filter((r) => !r.ok).length;
    s.with_broken = recs.filter((r) => r.ok && r.broken > 0).length;
    s.broken_images = recs.reduce((a, r) => a + (r.broken ?? 0), 0);
    s.images = recs.reduce((a, r) => a + r.images, 0);
    // Useful resources: each page's HTML and images that arrived, and register.js as often as
    // it was fetched, at most once for each page that carries it (every page a member serves;
    // the optimal shell only reads the HTML). The nodes serve it max-age=300, so a browser
    // fetches it again only every five minutes.
    const c = result.access_logs.arms[arm];
    const okImages = recs.reduce((a, r) => a + (r.ok ? r.images - r.broken : 0), 0);
    const okPages = recs.filter((r) => r.ok).length;
    const registerFetched = c.control_targets['/_slipstream/agent/register.js'] ?? 0;
    const registerUseful = arm === 'optimal' ? 0 : Math.min(okPages, registerFetched);
    s.useful = okImages + okPages + registerUseful;
    s.log_lines = c.total;
    s.log = { page: c.page, image: c.image, head: c.head, control: c.control, other: c.other, by_member: c.by_member, image_by_member: c.image_by_member, status: c.status, control_targets: c.control_targets };
    s.extra = c.total - s.useful;
    s.extra_pct = s.useful ? (100 * s.extra) / s.useful : null;
    // The extra split: the agent's own files beyond register.js (the worker script and its
    // modules, fetched again at the browser's update checks), and the rest (probes, hedges,
    // races, fail-overs, responses lost in a proxy as it went down).
    s.extra_agent_files = c.control - registerUseful;
    s.extra_selection = s.extra - s.extra_agent_files;
    s.extra_selection_pct = s.useful ? (100 * s.extra_selection) / s.useful : null;
    // Loads that overlapped a spike or a flap.
    s.during_spike = recs.filter((r) => r.during?.includes('spike')).length;
    s.during_flap = recs.filter((r) => r.during?.includes('flap')).length;
    out[arm] = s;
  }
  const opt = out.optimal;
  for (const arm of ARMS) {
    const s = out[arm];
    if (opt.mean && s.mean) {
      s.ratio_mean = s.mean / opt.mean;
      s.ratio_p95 = s.p95 / opt.p95;
    }
  }
  return out;
}

function table(result) {
  const f = (v, d = 1) => (v === undefined || v === null ? '—' : v.toFixed(d));
  const lat = result.members.filter((m) => m.policy === 'decay').map((m) => `${m.name} ${m.latency_ms} ms`).join(', ');
  const lines = [
    `\nseries ${result.series}${result.quick ? ' (QUICK run: development only, not a result)' : ''}: ${lat}; fastest ${result.fastest} (spiked), mid ${result.mid} (single), flapper ${result.flapper}; ${result.pages_per_arm} loads per arm, ${result.duration_s} s, outliers ${result.outliers ?? 'short'} (${result.spiked_pct ?? '?'} % of the time); load average ${result.host.loadavg_start[0].toFixed(2)} at the start, ${result.host.loadavg_end[0].toFixed(2)} at the end (${result.host.cpus} CPUs)`,
    '| arm | loads | failed | with broken images | broken images | mean ms | p50 | p95 | mean / optimal | p95 / optimal | extra % (access logs) | extra % without agent files | HEAD | agent files |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const arm of ARMS) {
    const s = result.summary[arm];
    lines.push(`| ${arm} | ${s.loads} | ${s.failed} | ${s.with_broken} | ${s.broken_images} | ${f(s.mean)} | ${f(s.p50)} | ${f(s.p95)} | ${f(s.ratio_mean, 3)} | ${f(s.ratio_p95, 3)} | ${f(s.extra_pct)} | ${f(s.extra_selection_pct)} | ${s.log.head} | ${s.log.control} |`);
  }
  lines.push('', '| arm | image GETs per member | all requests per member | loads during a spike | loads during a flap |', '|---|---|---|---|---|');
  const per = (o) => Object.entries(o).sort().map(([k, v]) => `${k} ${v}`).join(', ');
  for (const arm of ARMS) {
    const s = result.summary[arm];
    lines.push(`| ${arm} | ${per(s.log.image_by_member)} | ${per(s.log.by_member)} | ${s.during_spike} | ${s.during_flap} |`);
  }
  return lines.join('\n');
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const require = createRequire(join(REPO, 'web', 'browser', 'package.json'));
  let playwright;
  try {
    playwright = require('playwright-core');
  } catch (e) {
    throw new Error(`playwright-core is not installed: run \`npm ci\` in web/browser (${e.message})`);
  }
  const outDir = join(REPO, 'docs', 'experiments', 'data', '001-page');
  mkdirSync(outDir, { recursive: true });
  if (args.tablesOnly) {
    for (const s of args.series) {
      const file = join(outDir, `${args.quick ? 'quick-' : ''}${s}.json`);
      const result = JSON.parse(readFileSync(file, 'utf8'));
      result.summary = summarise(result);
      writeFileSync(file, JSON.stringify(result, null, 1) + '\n');
      console.log(table(result));
    }
    return;
  }
  const t = performance.now();
  for (const s of args.series) {
    const result = await runSeries(args, s, playwright);
    const file = join(outDir, `${args.quick ? 'quick-' : ''}${s}.json`);
    writeFileSync(file, JSON.stringify(result, null, 1) + '\n');
    console.log(table(result));
    log(`  wrote ${file}`);
  }
  log(`done in ${((performance.now() - t) / 1000).toFixed(0)} s`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
