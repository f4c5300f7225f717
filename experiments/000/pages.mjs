#!/usr/bin/env node
// Issue 43 item 1, the Chromium arm (paper 000 §7, Fig. 13): what NPS prefetching gains real
// page loads. Headless Chromium replays MSNBC user sessions (data/msnbc990928.zip) on a
// generated site, each against its own `slipstream serve --prefetch` node behind its own
// Toxiproxy proxy, under four arms interleaved per session. Method, caveats and how to read the
// output: docs/experiments/000-pages.md.
//
//   node experiments/000/pages.mjs --bin target/release/slipstream [--quick] [--series 1,2]
//        [--condition spare|loaded-network|loaded-server] [--sessions N] [--train N]
//        [--latency MS] [--listener] [--load-rates R1,R2] [--server-cpus F] [--link-kbit N]
//        [--le-bottleneck] [--rtt-backoff] [--variant NAME] [--workdir DIR] [--tables-only] [--report]
//
// Per series (seed 2000 + series):
//  - a seeded site: 17 categories (MSNBC's) of 10 pages each, every page with 4-10 noise PNGs
//    of 2-60 KB, a link to one page of every other category and to two other pages of its own
//    (link targets drawn Zipf within the category), and /index.html (the monitor's probe);
//  - sessions from msnbc990928.seq (read with `unzip -p`), truncated to 8 pages: a measured set
//    (length >= 3) and a training set (any length), disjoint, both seeded. A session's category
//    sequence becomes a page sequence: the first page is drawn Zipf(1) within its category; a
//    later visit to category c follows the current page's link to c with probability 0.7,
//    else draws Zipf within c (never the current page again);
//  - four nodes, one per arm (arms below), each behind its own Toxiproxy proxy (downstream
//    latency 80 ms ±10 %); every node is trained by replaying the training sessions as plain
//    HTTP GETs straight to its port (each page, then its images six at a time; one User-Agent
//    per session), until its /_slipstream/prefetch says it learnt them;
//  - the measured sessions: for each, the four arms one after another (order rotated per
//    session), each in a fresh persistent Chromium context (profile) kept for the session's
//    pages and closed after it. The first page by page.goto, each later one by
//    `location.assign` from the page before it (a renderer-initiated navigation, with the
//    referrer set, as a click: Chromium only uses a Speculation Rules prefetch for a navigation
//    the prefetching document starts), after a seeded think time of 1-3 s.
//
// Arms (every page identical but for the munged script's data-prefetch-base, see the doc):
//   none          No-Prefetching: a node that prefetches (so it learns, and munges the agent's
//                 registration into its pages as the others do) but names a prefetch listener
//                 at a closed port, so the agent's first hint request fails and it fetches
//                 nothing (the node has no setting that tells the agent not to prefetch);
//   nps           the default [prefetch] settings (the monitor's budget);
//   no-avoidance  prefetch.experimental.budget = "unlimited";
//   speculation   prefetch.speculation_rules = true (Chromium prefetches the budgeted hints
//                 natively), the agent turned off as in `none`.
// With --listener, nps and no-avoidance also get a prefetch listener, reached through a proxy
// of its own with the same toxics.
//
// Conditions (Fig. 13 a-c): `spare` as above. `loaded-server`: every server is one worker
// pinned to core 0 and held to --server-cpus of it by a cgroup quota (0.25: `docker run
// --cpus 0.25`; the server's own code is not slowed), this script, Chromium, Toxiproxy and the
// load on the other cores; while each arm's browser runs its session, `slipstream bench
// --agents` loads that arm's node straight (as the paper's LAN client) at one of --load-rates
// documents/s (sessions take the levels in turn; every arm of a session the same level), its
// agents prefetching as the arm does (none: off; nps and no-avoidance: the hints, turn after
// turn; speculation: off, see LOAD_POLICY), from --load-warm-ms before the browser starts to
// its end. A failed page load is recorded and the session goes on. `loaded-network`: the
// clients (Chromium, its Toxiproxy, the background load) in a network namespace behind an htb
// bottleneck of --link-kbit shared by all of them (makeNetwork).
//
// Writes docs/experiments/data/000-pages/<condition>-<series>.json (--quick: quick-<condition>-
// <series>.json) and prints markdown tables. Every wait has a deadline; every process is killed
// on exit or error.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';

import { CHROMIUM_ARGS, Cleanup, Proc, REPO, Toxiproxy, chromiumBinary, freePort, png, tempDir, toxiproxyBinary, waitFor } from '../../web/browser/harness.mjs';
import { drainedSizes, forEachLine, git, latencyProxy, log, prng as basePrng, sleep, stats, withTimeout } from '../lib/bench.mjs';

/** The shared PRNG, its Zipf at this site's exponent. */
function prng(seed) {
  const r = basePrng(seed);
  return { ...r, zipf: (n, s = ZIPF_S) => r.zipf(n, s) };
}

// --- parameters ----------------------------------------------------------------------------------

const CATEGORIES = ['frontpage', 'news', 'tech', 'local', 'opinion', 'on-air', 'misc', 'weather', 'msn-news', 'health', 'living', 'business', 'msn-sports', 'sports', 'summary', 'bbs', 'travel'];
const PAGES_PER_CATEGORY = 10;
const IMAGES_PER_PAGE = [4, 10];
const IMAGE_KB = [2, 60];
const ZIPF_S = 1.0; // popularity of the pages within a category
const SAME_CATEGORY_LINKS = 2;
const FOLLOW_LINK = 0.7; // a later visit follows the current page's link to its category
const MAX_PAGES = 8; // a session is cut after this many pages
const MIN_MEASURED_PAGES = 3;
const THINK_MS = [1000, 3000]; // before each later page, seeded, the same in every arm
const LATENCY_MS = 80; // downstream, ±JITTER
const JITTER = 0.1;
const TRAIN_CONCURRENCY = 8; // training sessions in flight (over the four nodes)
const TRAIN_IMAGE_PARALLEL = 6; // a training session's images at once, as a browser
const ARMS = ['none', 'nps', 'no-avoidance', 'speculation'];
// loaded-server: the background load (paper 000 §7: "a client machine connected on a LAN to
// the server running httperf that replays a heavier subset of the IBM trace and also
// prefetches like the WAN client"), `slipstream bench --agents` against the measured arm's
// node while its browser runs, with that arm's prefetching.
const DEFAULT_LOAD_RATES = { server: '150,300', network: '1.5' };
const LOAD_DOC_FILES = 8; // a background document: its page and the 7 files after it in the list
// The speculation arm's pages name a closed prefetch listener (to keep the agent off), where
// the bench's agents would send their first hint request: its background load does not
// prefetch (many browsers' own Speculation Rules prefetches are not modelled).
const LOAD_POLICY = { none: 'off', nps: 'hinted', 'no-avoidance': 'hinted', speculation: 'off' };
const CONDITIONS = ['spare', 'loaded-network', 'loaded-server'];
const UA_PREFIX = 'Mozilla/5.0 (X11; Linux x86_64) slipstream-000-pages';
const UA = (arm, session) => `${UA_PREFIX}/${arm}/s${session}`;
const CACHE_CONTROL = 'max-age=300';
const STORED_AT = 'x-slipstream-prefetched-at'; // the worker's mark on a prefetched response
const LAUNCH_TIMEOUT_MS = 60000;
const GOTO_TIMEOUT_MS = 20000;
const LOAD_TIMEOUT_MS = 30000; // navigation start to every image settled
const EVAL_TIMEOUT_MS = 5000;
const CLOSE_TIMEOUT_MS = 15000;
const FETCH_TIMEOUT_MS = 15000;

// --- arguments -----------------------------------------------------------------------------------

function parseArgs(argv) {
  const a = {
    bin: process.env.SLIPSTREAM_BIN || join(REPO, 'target', 'release', 'slipstream'),
    series: null, sessions: null, train: null, quick: false, condition: 'spare', latency: LATENCY_MS,
    linkKbit: 5000, leBottleneck: false, rttBackoff: false, listener: false, loadRates: null, loadWarmMs: 5000, serverCpus: 0.25, workdir: existsSync('/dev/shm') ? '/dev/shm' : undefined, tablesOnly: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case '--bin': a.bin = resolve(v()); break;
      case '--series': a.series = v(); break;
      case '--sessions': a.sessions = Number(v()); break;
      case '--train': a.train = Number(v()); break;
      case '--quick': a.quick = true; break;
      case '--condition': a.condition = v(); break;
      case '--latency': a.latency = Number(v()); break;
      case '--link-kbit': a.linkKbit = Number(v()); break;
      case '--le-bottleneck': a.leBottleneck = true; break;
      case '--rtt-backoff': a.rttBackoff = true; break;
      case '--listener': a.listener = true; break;
      case '--load-rates': a.loadRates = v(); break;
      case '--load-warm-ms': a.loadWarmMs = Number(v()); break;
      case '--server-cpus': a.serverCpus = Number(v()); break;
      case '--workdir': a.workdir = v(); break;
      case '--tables-only': a.tablesOnly = true; break;
      case '--report': a.report = true; break;
      case '--variant': a.variant = v(); break;
      case '-h':
      case '--help':
        console.log(`node experiments/000/pages.mjs [--bin PATH] [--quick] [--series 1,2] [--condition spare|loaded-network|loaded-server] [--sessions N (measured sessions; 40, --quick 4)] [--train N (training sessions; 3000, --quick 300)] [--latency MS (80)] [--link-kbit N (loaded-network: the shared bottleneck, kbit/s; 5000)] [--le-bottleneck (loaded-network: the bottleneck gives DSCP Lower-Effort only what is left)] [--rtt-backoff (with --listener: prefetch.experimental.rtt_backoff on the nps node)] [--listener (a prefetch listener for nps and no-avoidance)] [--load-rates R1,R2 (loaded-server and loaded-network: the background load's documents/s, one level a session in turn; ${DEFAULT_LOAD_RATES.server} and ${DEFAULT_LOAD_RATES.network})] [--load-warm-ms MS (loaded-server: the load runs this long before the browser starts; 5000)] [--server-cpus F (loaded-server: each server's CPU limit, a cgroup quota as docker --cpus sets it; 0.25)] [--workdir DIR] [--tables-only (recompute the summaries of the JSON files and print them)] [--variant NAME (a run with settings other than the defaults: its files and chart are named <condition>-NAME-<series>)] [--report (from every condition's JSON files: the charts, and the Fig. 13 section of docs/experiments/000-nps.md)]`);
        process.exit(0);
        break;
      default: throw new Error(`unknown argument ${argv[i]}`);
    }
  }
  a.series = (a.series ?? '1').split(',').map(Number);
  a.sessions = a.sessions ?? (a.quick ? 4 : 40);
  a.train = a.train ?? (a.quick ? 300 : 3000);
  if (!a.series.every((s) => Number.isInteger(s) && s > 0)) throw new Error('bad --series');
  if (!(Number.isInteger(a.sessions) && a.sessions > 0) || !(Number.isInteger(a.train) && a.train >= 0)) throw new Error('bad --sessions or --train');
  if (a.variant !== undefined && !/^[a-z0-9][a-z0-9-]*$/.test(a.variant)) throw new Error('--variant: lower-case letters, digits and dashes');
  if (!CONDITIONS.includes(a.condition)) throw new Error(`--condition ${a.condition}: want ${CONDITIONS.join(', ')}`);
  const loaded = { 'loaded-server': DEFAULT_LOAD_RATES.server, 'loaded-network': DEFAULT_LOAD_RATES.network }[a.condition];
  a.loadRates = loaded ? (a.loadRates ?? loaded).split(',').map(Number) : null;
  if (a.rttBackoff && !a.listener) throw new Error('--rtt-backoff needs --listener (the back-off paces the prefetch listener\'s connections)');
  if (a.loadRates && !a.loadRates.every((r) => r > 0 && Number.isFinite(r))) throw new Error('bad --load-rates: want positive documents a second, e.g. 200,400');
  if (!(a.loadWarmMs >= 0)) throw new Error('bad --load-warm-ms');
  if (!(a.serverCpus > 0)) throw new Error('bad --server-cpus: want a positive number of CPUs, e.g. 0.1');
  if (!(a.latency >= 0) || !(a.linkKbit > 0)) throw new Error('bad --latency or --link-kbit');
  if (!a.tablesOnly && !a.report && !existsSync(a.bin)) throw new Error(`the slipstream binary ${a.bin} is missing (build it, or pass --bin)`);
  return a;
}

const round1 = (x) => Math.round(x * 10) / 10;

// --- the MSNBC sessions ----------------------------------------------------------------------------

/** Every session of msnbc990928.seq as a line of category numbers (1-17), unparsed. */
function readMsnbc() {
  const zip = join(REPO, 'data', 'msnbc990928.zip');
  // `unzip -p` (Info-ZIP) writes the member to stdout: simpler than reading the archive here.
  const text = execFileSync('unzip', ['-p', zip, 'msnbc990928.seq'], { encoding: 'latin1', maxBuffer: 64 << 20, timeout: 60000 });
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.startsWith('% Sequences:'));
  if (start < 0) throw new Error(`${zip}: no "% Sequences:" line`);
  const out = [];
  for (let i = start + 1; i < lines.length; i++) {
    const l = lines[i].trim();
    if (l) out.push(l);
  }
  if (out.length < 900000) throw new Error(`${zip}: only ${out.length} sessions`);
  return out;
}

const parseSession = (line) => line.split(/\s+/).map(Number).filter((c) => c >= 1 && c <= CATEGORIES.length).map((c) => c - 1).slice(0, MAX_PAGES);

/** Seeded, disjoint: `measured` sessions of at least MIN_MEASURED_PAGES pages and `train` of any length. */
function pickSessions(lines, rng, measured, train) {
  const used = new Set();
  const pick = (want, ok) => {
    const out = [];
    let tries = 0;
    while (out.length < want) {
      if (++tries > want * 1000 + 100000) throw new Error('could not draw the sessions');
      const i = Math.floor(rng.next() * lines.length);
      if (used.has(i)) continue;
      const cats = parseSession(lines[i]);
      if (!ok(cats)) continue;
      used.add(i);
      out.push({ index: i, cats });
    }
    return out;
  };
  const m = pick(measured, (c) => c.length >= MIN_MEASURED_PAGES);
  const t = pick(train, (c) => c.length >= 1);
  return { measured: m, train: t };
}

/** A session's categories as pages, by the seeded rule (see the header). */
function pagesOf(cats, site, rng) {
  const out = [];
  let cur = null;
  for (const c of cats) {
    const inCat = site.byCategory[c];
    let next = null;
    if (cur !== null && rng.next() < FOLLOW_LINK) {
      const links = cur.links.filter((l) => site.byPath.get(l).category === c);
      if (links.length) next = site.byPath.get(links[Math.floor(rng.next() * links.length)]);
    }
    if (next === null) {
      for (let k = 0; k < 100 && (next === null || next === cur); k++) next = inCat[rng.zipf(inCat.length)];
      if (next === cur) next = inCat[(inCat.indexOf(cur) + 1) % inCat.length];
    }
    out.push(next);
    cur = next;
  }
  return out;
}

// --- the site ------------------------------------------------------------------------------------

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
    var nav = performance.getEntriesByType('navigation')[0];
    var res = performance.getEntriesByType('resource').filter(function (e) { return e.name.indexOf('/img/') >= 0; });
    window.__bench = { ms: at, images: imgs.length,
      delivery_type: nav ? (nav.deliveryType === undefined ? null : nav.deliveryType) : null,
      nav_type: nav ? nav.type : null,
      worker_start: nav ? nav.workerStart : null,
      html_end: nav ? nav.responseEnd : null,
      html_transfer: nav ? nav.transferSize : null,
      img_transfer: res.reduce(function (a, e) { return a + (e.transferSize || 0); }, 0),
      img_last_end: res.length ? Math.max.apply(null, res.map(function (e) { return e.responseEnd; })) : null,
      controlled: navigator.serviceWorker ? navigator.serviceWorker.controller !== null : false,
      broken: imgs.filter(function (i) { return !(i.naturalWidth > 0); }).map(function (i) { return i.getAttribute('src'); }) };
  });
})();
</script>`;

function writeSite(dir, rng) {
  mkdirSync(join(dir, 'img'), { recursive: true });
  const pages = [];
  const byCategory = CATEGORIES.map(() => []);
  CATEGORIES.forEach((cat, c) => {
    for (let p = 0; p < PAGES_PER_CATEGORY; p++) {
      const name = `${cat}-${p}`;
      const n = rng.int(...IMAGES_PER_PAGE);
      const images = [];
      for (let i = 0; i < n; i++) {
        const kb = rng.int(IMAGE_KB[0], IMAGE_KB[1]);
        // A noise PNG: about 3 bytes a pixel, so a side of sqrt(size / 3).
        const side = Math.max(8, Math.round(Math.sqrt((kb * 1024) / 3)));
        const file = `/img/${name}-${i}.png`;
        const body = png(side, side, ((c * 100 + p) * 100 + i + 1) ^ Math.floor(rng.next() * 0x7fffffff));
        writeFileSync(join(dir, file), body);
        images.push({ src: file, bytes: body.length, side });
      }
      const page = { path: `/${name}.html`, category: c, rank: p, images, links: [] };
      pages.push(page);
      byCategory[c].push(page);
    }
  });
  // Links: one page of every other category, and two other pages of its own (Zipf draws).
  for (const page of pages) {
    for (let c = 0; c < CATEGORIES.length; c++) {
      const inCat = byCategory[c];
      if (c !== page.category) {
        page.links.push(inCat[rng.zipf(inCat.length)].path);
      } else {
        const own = new Set();
        for (let k = 0; k < 100 && own.size < SAME_CATEGORY_LINKS; k++) {
          const q = inCat[rng.zipf(inCat.length)];
          if (q !== page) own.add(q.path);
        }
        page.links.push(...own);
      }
    }
  }
  for (const page of pages) {
    const links = page.links.map((l) => `<a href="${l}">${l.slice(1, -5)}</a>`).join(' ');
    const tags = page.images.map((im) => `<img src="${im.src}" width="${im.side}" height="${im.side}" alt="">`).join('\n');
    const html = `<!doctype html>\n<html><head><meta charset="utf-8"><title>${page.path.slice(1, -5)}</title></head>\n<body>\n<h1>${page.path.slice(1, -5)}</h1>\n<nav>${links}</nav>\n${tags}\n${PAGE_SCRIPT}\n</body></html>\n`;
    writeFileSync(join(dir, page.path), html);
    page.bytes = Buffer.byteLength(html);
  }
  // The monitor's probe target (prefetch.probe_path "/"): a small page, never visited.
  writeFileSync(join(dir, 'index.html'), `<!doctype html>\n<html><head><meta charset="utf-8"><title>index</title></head><body>\n${byCategory.map((ps) => `<a href="${ps[0].path}">${ps[0].path}</a>`).join('\n')}\n</body></html>\n`);
  const byPath = new Map(pages.map((p) => [p.path, p]));
  const sizes = new Map();
  for (const p of pages) {
    sizes.set(p.path, p.bytes);
    for (const im of p.images) sizes.set(im.src, im.bytes);
  }
  return { pages, byCategory, byPath, sizes };
}

// --- processes -----------------------------------------------------------------------------------

/** A proxy to `upstreamPort` with the WAN's latency (in `loaded-network`, on the client's side
 * of the bottleneck, to the server's address on the link). */
function toxiproxyProxy(toxi, name, upstreamPort, args) {
  return latencyProxy(toxi, name, upstreamPort, args.latency, JITTER, [], args.net ? args.net.server : '127.0.0.1');
}

/**
 * loaded-server: a cgroup (v1 cpu controller) that holds a server to `cpus` of a CPU, with
 * docker's period (`docker run --cpus`): a small container, so that a load generator on the
 * other core can fill it. Removed at cleanup, after its process is gone.
 */
const CFS_PERIOD_US = 100000;
function makeCgroup(cleanup, arm, cpus) {
  const dir = `/sys/fs/cgroup/cpu/slipstream-pages-${process.pid}-${arm}`;
  try {
    mkdirSync(dir);
    writeFileSync(join(dir, 'cpu.cfs_period_us'), String(CFS_PERIOD_US));
    writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(Math.round(cpus * CFS_PERIOD_US)));
  } catch (e) {
    throw new Error(`--condition loaded-server needs a cgroup v1 cpu controller it may write (root), to limit each server to ${cpus} CPU: ${e.message}`);
  }
  cleanup.add(() => rmdirSync(dir));
  return dir;
}

/** One arm's node: config file, JSON access log, its proxies. */
async function startNode(cleanup, root, bin, arm, site, toxi, args) {
  const dir = join(root, arm);
  mkdirSync(dir, { recursive: true });
  const q = JSON.stringify;
  const accessLog = join(dir, 'access.log');
  const port = await freePort();
  const proxyPort = await toxiproxyProxy(toxi, arm, port, args);
  const prefetch = [];
  let listenerProxy = null;
  let deadPort = null;
  if (arm === 'none' || arm === 'speculation') {
    // A prefetch listener whose public URL is a closed port: the munged pages name it, the
    // agent's first hint request fails there, and the agent prefetches nothing.
    deadPort = await freePort();
    prefetch.push('listen = "127.0.0.1:0"', `public_url = ${q(`http://127.0.0.1:${deadPort}`)}`);
  } else if (args.listener) {
    const lport = await freePort();
    listenerProxy = await toxiproxyProxy(toxi, `${arm}-listener`, lport, args);
    prefetch.push(`listen = ${q(`${args.net ? args.net.server : '127.0.0.1'}:${lport}`)}`, `public_url = ${q(`http://127.0.0.1:${listenerProxy}`)}`);
  }
  const experimental = [
    ...(arm === 'no-avoidance' ? ['budget = "unlimited"'] : []),
    ...(arm === 'nps' && args.rttBackoff ? ['rtt_backoff = true'] : []),
  ];
  if (experimental.length) experimental.unshift('', '[prefetch.experimental]');
  if (arm === 'speculation') prefetch.push('speculation_rules = true');
  const toml = [
    '[serve]',
    `access_log = ${q(accessLog)}`,
    'access_log_format = "json"',
    `cache_control = ${q(CACHE_CONTROL)}`,
    '',
    '[prefetch]',
    ...prefetch,
    ...experimental,
    '',
  ].join('\n');
  const config = join(dir, 'node.toml');
  writeFileSync(config, toml);
  const host = args.net ? args.net.server : '127.0.0.1';
  const serve = ['serve', site, '--config', config, '--listen', `${host}:${port}`, '--prefetch'];
  // loaded-server: the server is one worker on core 0; this script, Chromium, Toxiproxy and
  // the background load run on the other cores (runSeries), so that what the load takes is
  // the server's capacity, not the browsers'.
  const [cmd, argv] = args.condition === 'loaded-server' ? ['taskset', ['-c', '0', bin, ...serve, '--workers', '1']] : [bin, serve];
  const cgroup = args.condition === 'loaded-server' ? makeCgroup(cleanup, arm, args.serverCpus) : null;
  const proc = new Proc(arm, cmd, argv, { env: { ...process.env, RUST_LOG: 'warn' } });
  cleanup.add(() => proc.kill());
  // Moved with all its threads before it serves (the monitor reads its allowance again).
  if (cgroup) writeFileSync(join(cgroup, 'cgroup.procs'), String(proc.child.pid));
  const direct = `http://${host}:${port}`;
  await waitFor(`the ${arm} node on port ${port}`, 20000, async () => {
    if (!proc.alive) throw new Error(`${arm} exited: ${proc.output()}`);
    return (await fetch(`${direct}/_slipstream/prefetch`)).ok;
  });
  const status = async () => withTimeout(`${arm}'s status`, 5000, (await fetch(`${direct}/_slipstream/prefetch`, { signal: AbortSignal.timeout(5000) })).json());
  return { arm, proc, pid: proc.child.pid, cgroup, port, direct, origin: `http://127.0.0.1:${proxyPort}`, proxyPort, listenerProxy, deadPort, accessLog, toml, status };
}

// --- training ------------------------------------------------------------------------------------

/** One training session against one node: each page, then its images (plain GETs). */
async function trainSession(node, session, site, ua) {
  let ok = 0;
  let failed = 0;
  const get = async (path) => {
    try {
      const r = await fetch(node.direct + path, { headers: { 'user-agent': ua }, signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
      await r.arrayBuffer();
      if (r.status === 200) ok++;
      else failed++;
    } catch {
      failed++;
    }
  };
  for (const page of session.pages) {
    await get(page.path);
    const srcs = page.images.map((im) => im.src);
    for (let i = 0; i < srcs.length; i += TRAIN_IMAGE_PARALLEL) await Promise.all(srcs.slice(i, i + TRAIN_IMAGE_PARALLEL).map(get));
  }
  return { ok, failed };
}

async function train(nodes, sessions, site) {
  const tasks = [];
  sessions.forEach((s, i) => nodes.forEach((n) => tasks.push({ node: n, session: s, ua: `${UA_PREFIX}/train/t${i}` })));
  const sent = Object.fromEntries(nodes.map((n) => [n.arm, { ok: 0, failed: 0 }]));
  let next = 0;
  let done = 0;
  const t = performance.now();
  await Promise.all(Array.from({ length: TRAIN_CONCURRENCY }, async () => {
    while (next < tasks.length) {
      const task = tasks[next++];
      const r = await trainSession(task.node, task.session, site, task.ua);
      sent[task.node.arm].ok += r.ok;
      sent[task.node.arm].failed += r.failed;
      if (++done % 2000 === 0 || done === tasks.length) log(`  training: ${done}/${tasks.length} session replays, ${((performance.now() - t) / 1000).toFixed(0)} s`);
    }
  }));
  // Learning is off the request path: wait until every node's model has taken every request
  // (learnt, or counted as not queued or refused by a bound).
  const learnt = {};
  for (const n of nodes) {
    const s = await waitFor(`${n.arm}'s model to learn ${sent[n.arm].ok} requests`, 60000, async () => {
      const st = await n.status();
      const m = st.model;
      return m.learnt + m.unqueued + m.refused >= sent[n.arm].ok ? st : false;
    }, 200);
    learnt[n.arm] = { sent: sent[n.arm], model: s.model };
  }
  return { replays: tasks.length, seconds: round1((performance.now() - t) / 1000), by_arm: learnt };
}

// --- access logs ---------------------------------------------------------------------------------

function countLog(node, from, to) {
  const c = { requests: 0, bytes: 0, page: 0, image: 0, hints: 0, speculationrules: 0, agent: 0, other: 0, page_bytes: 0, image_bytes: 0, status: {}, not_browser: 0 };
  const mine = `${UA_PREFIX}/${node.arm}/`;
  forEachLine(node.accessLog, from, to, (line) => {
    if (!line.trim()) return;
    // The monitor's probes, a background load and anything else not from the arm's browsers
    // (most lines, under a load: passed over before they are parsed).
    if (!line.includes(mine)) {
      c.not_browser++;
      return;
    }
    let r;
    try {
      r = JSON.parse(line);
    } catch {
      return;
    }
    if (!(r.user_agent || '').startsWith(mine)) {
      c.not_browser++;
      return;
    }
    const bytes = Number(r.bytes) || 0;
    c.requests++;
    c.bytes += bytes;
    c.status[r.status] = (c.status[r.status] ?? 0) + 1;
    const target = String(r.target).split('?')[0];
    if (target.startsWith('/_slipstream/hints')) c.hints++;
    else if (target.startsWith('/_slipstream/speculationrules')) c.speculationrules++;
    else if (target.startsWith('/_slipstream/')) c.agent++;
    else if (target.startsWith('/img/')) {
      c.image++;
      c.image_bytes += bytes;
    } else if (target.endsWith('.html')) {
      c.page++;
      c.page_bytes += bytes;
    } else c.other++;
  });
  return c;
}

// --- node counters -------------------------------------------------------------------------------

/** The status without its long arrays. */
const trimStatus = (s) => {
  const { samples, startup_curve, ...rest } = s;
  return rest;
};

function statusDelta(a, b) {
  const d = (f) => f(b) - f(a);
  return {
    demand_requests: d((s) => s.demand.requests),
    demand_bytes: d((s) => s.demand.bytes),
    prefetch_requests: d((s) => s.prefetch.requests),
    prefetch_bytes: d((s) => s.prefetch.bytes),
    via_listener_requests: d((s) => s.via_listener.requests),
    lists: d((s) => s.lists),
    granted_files: d((s) => s.granted_files),
    waits: d((s) => s.waits),
    refused_browser_prefetches: d((s) => s.refused_browser_prefetches),
    shed_prefetches: d((s) => s.shed_prefetches),
    page_waits: d((s) => s.page_waits),
    hint_requests_via_listener: d((s) => s.hint_requests_via_listener),
  };
}

// --- the loaded server's background load ----------------------------------------------------------

/** The background load's URL list: every page, weighted by its visits in the training sessions
 * (plus one), followed by its images at weight 0 (`bench --doc-files` takes the files after a
 * drawn page as its embedded objects; a page with fewer images than that takes the next page's
 * first files too). */
function writeLoadUrls(file, site, trainSessions) {
  const visits = new Map();
  for (const s of trainSessions) for (const p of s.pages) visits.set(p.path, (visits.get(p.path) ?? 0) + 1);
  const lines = [];
  for (const p of site.pages) {
    lines.push(`${(visits.get(p.path) ?? 0) + 1} ${p.path}`);
    for (const im of p.images) lines.push(`0 ${im.src}`);
  }
  writeFileSync(file, lines.join('\n') + '\n');
}

/** A process's CPU time (user + system), in seconds, from /proc (null elsewhere). */
function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / CLK_TCK;
  } catch {
    return null;
  }
}

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8', timeout: 5000 }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * The node's status while it is loaded: a saturated server may reset or delay the request
 * (then asked again, three times at most); null if it never answers. The page loads are the
 * measurement: a missing status only leaves the load's counters out.
 */
async function statusUnderLoad(node) {
  for (let i = 0; i < 3; i++) {
    try {
      return await node.status();
    } catch {
      // asked again
    }
  }
  return null;
}

/** Starts the background load on `node` at `rate` documents/s for at most `seconds`. */
function startLoad(args, node, rate, seconds, urlsFile, seed) {
  const policy = LOAD_POLICY[node.arm];
  const argv = ['bench', node.direct, '--urls', urlsFile, '--rate', String(rate), '--agents', policy,
    '--doc-files', String(LOAD_DOC_FILES), '--duration', `${Math.ceil(seconds)}s`, '--max-in-flight', '4096',
    '--timeout', '10s', '--seed', String(seed), '-q'];
  if (policy !== 'off') argv.push('--prefetch-priority', 'idle');
  // loaded-network: from the clients' side of the bottleneck, sharing it with the browser.
  const [cmd, full] = args.net ? ['ip', ['netns', 'exec', args.net.ns, args.bin, ...argv]] : [args.bin, argv];
  return new Proc(`${node.arm}-load`, cmd, full, { env: { ...process.env, RUST_LOG: 'warn' } });
}

// --- the loaded network --------------------------------------------------------------------------

/**
 * loaded-network: a network namespace for the clients (Chromium, its Toxiproxy, the background
 * load) joined to the servers' side by a veth pair whose server-side egress is the shared
 * bottleneck: htb at `linkKbit` with a 50-packet FIFO (this kernel has no netem: the WAN
 * latency stays Toxiproxy's, in the namespace, after the bottleneck), and with `le` a class for
 * DSCP Lower-Effort that gets what best effort leaves (as experiments/000/network-loopback.sh).
 * The servers listen on the link's server address; this script reaches them there without
 * crossing it (a local address). Needs root (`ip`, `tc`).
 */
function makeNetwork(cleanup, linkKbit, le) {
  const tag = String(process.pid % 100000);
  const net = { ns: `slp-pages-${tag}`, hostIf: `slpS${tag}`, nsIf: `slpC${tag}`, server: '10.78.0.1', client: '10.78.0.2' };
  const run = (...argv) => execFileSync(argv[0], argv.slice(1), { timeout: 10000, stdio: ['ignore', 'ignore', 'pipe'] });
  const undo = () => {
    try { run('ip', 'netns', 'del', net.ns); } catch { /* not there */ }
    try { run('ip', 'link', 'del', net.hostIf); } catch { /* not there */ }
  };
  undo();
  try {
    run('ip', 'netns', 'add', net.ns);
    cleanup.add(undo);
    run('ip', 'link', 'add', net.hostIf, 'type', 'veth', 'peer', 'name', net.nsIf);
    run('ip', 'link', 'set', net.nsIf, 'netns', net.ns);
    run('ip', 'addr', 'add', `${net.server}/24`, 'dev', net.hostIf);
    run('ip', 'link', 'set', net.hostIf, 'up');
    run('ip', 'netns', 'exec', net.ns, 'ip', 'addr', 'add', `${net.client}/24`, 'dev', net.nsIf);
    run('ip', 'netns', 'exec', net.ns, 'ip', 'link', 'set', net.nsIf, 'up');
    run('ip', 'netns', 'exec', net.ns, 'ip', 'link', 'set', 'lo', 'up');
    const rate = `${linkKbit}kbit`;
    const tc = (...a) => run('tc', ...a);
    tc('qdisc', 'add', 'dev', net.hostIf, 'root', 'handle', '1:', 'htb', 'default', '10');
    tc('class', 'add', 'dev', net.hostIf, 'parent', '1:', 'classid', '1:1', 'htb', 'rate', rate, 'ceil', rate);
    tc('class', 'add', 'dev', net.hostIf, 'parent', '1:1', 'classid', '1:10', 'htb', 'rate', rate, 'ceil', rate, 'prio', '0');
    tc('qdisc', 'add', 'dev', net.hostIf, 'parent', '1:10', 'handle', '10:', 'pfifo', 'limit', '50');
    if (le) {
      tc('class', 'add', 'dev', net.hostIf, 'parent', '1:1', 'classid', '1:20', 'htb', 'rate', '8kbit', 'ceil', rate, 'prio', '7');
      tc('qdisc', 'add', 'dev', net.hostIf, 'parent', '1:20', 'handle', '20:', 'pfifo', 'limit', '50');
      tc('filter', 'add', 'dev', net.hostIf, 'parent', '1:', 'protocol', 'ip', 'prio', '1', 'u32', 'match', 'ip', 'tos', '0x04', '0xfc', 'flowid', '1:20');
    }
  } catch (e) {
    throw new Error(`--condition loaded-network needs root to make a network namespace and its bottleneck (ip, tc): ${String(e.stderr || e.message).trim()}`);
  }
  return net;
}

/** The bottleneck's class counters (`tc -s class show`), for the record. */
function bottleneckStats(net) {
  try {
    return execFileSync('tc', ['-s', 'class', 'show', 'dev', net.hostIf], { encoding: 'utf8', timeout: 10000 });
  } catch (e) {
    return `tc failed: ${e.message}`;
  }
}

/** Toxiproxy in the clients' namespace, its API on the link's client address. */
async function toxiproxyIn(cleanup, net) {
  const port = await freePort();
  const proc = new Proc('toxiproxy', 'ip', ['netns', 'exec', net.ns, toxiproxyBinary(), '-host', net.client, '-port', String(port)]);
  cleanup.add(() => proc.kill());
  const t = new Toxiproxy(proc, `http://${net.client}:${port}`);
  await waitFor('the Toxiproxy API in the clients\' namespace', 10000, async () => {
    if (!proc.alive) throw new Error(`toxiproxy exited:\n${proc.output()}`);
    return (await fetch(`${t.api}/version`)).ok;
  });
  return t;
}

/** A Chromium executable that runs in the clients' namespace (Playwright talks to it over pipes). */
function chromiumIn(dir, net, chromium) {
  const file = join(dir, 'chromium-in-netns');
  writeFileSync(file, `#!/bin/sh\nexec ip netns exec ${net.ns} ${chromium} "$@"\n`, { mode: 0o755 });
  return file;
}

// --- one series ----------------------------------------------------------------------------------

async function runSeries(args, series, playwright, msnbc) {
  const cleanup = new Cleanup();
  const seed = 2000 + series;
  const onSignal = async (sig) => {
    log(`${sig}: cleaning up`);
    await cleanup.run();
    process.exit(130);
  };
  const sigs = ['SIGINT', 'SIGTERM'].map((s) => [s, () => onSignal(s)]);
  for (const [s, fn] of sigs) process.once(s, fn);
  const started = Date.now();
  const loadStart = loadavg();
  const t0 = performance.now();
  const sinceStart = () => round1(performance.now() - t0);
  try {
    let work;
    if (args.workdir) {
      work = mkdtempSync(join(args.workdir, `000-pages-s${series}-`));
      cleanup.add(() => rmSync(work, { recursive: true, force: true }));
    } else {
      work = tempDir(cleanup, `000-pages-s${series}-`);
    }
    const siteDir = join(work, 'site');
    const site = writeSite(siteDir, prng(seed * 3));
    const picked = pickSessions(msnbc, prng(seed * 5), args.sessions, args.train);
    const mapRng = prng(seed * 7);
    for (const s of [...picked.measured, ...picked.train]) s.pages = pagesOf(s.cats, site, mapRng);
    const thinkRng = prng(seed * 11);
    for (const s of picked.measured) {
      s.think = s.pages.map((_, k) => (k === 0 ? 0 : Math.round(thinkRng.uniform(...THINK_MS))));
      s.leave = Math.round(thinkRng.uniform(...THINK_MS)); // reading the last page
    }
    log(`series ${series} (seed ${seed}): ${site.pages.length} pages, ${picked.measured.length} measured sessions (${picked.measured.reduce((a, s) => a + s.pages.length, 0)} pages), ${picked.train.length} training sessions; condition ${args.condition}`);

    let urlsFile = null;
    let pinned = null;
    if (args.condition === 'loaded-server') {
      urlsFile = join(work, 'load-urls.txt');
      writeLoadUrls(urlsFile, site, picked.train);
      // This process and everything it starts but the servers (Chromium, Toxiproxy, the load)
      // leave core 0 to the servers (startNode pins them there).
      if (cpus().length >= 2) {
        const others = `1-${cpus().length - 1}`;
        execFileSync('taskset', ['-a', '-p', '-c', others, String(process.pid)], { timeout: 5000, stdio: 'ignore' });
        pinned = { servers: '0', others };
      } else {
        log('  one CPU: the servers are not pinned apart from the browsers');
      }
    }

    if (args.condition === 'loaded-network') {
      urlsFile = join(work, 'load-urls.txt');
      writeLoadUrls(urlsFile, site, picked.train);
      args.net = makeNetwork(cleanup, args.linkKbit, args.leBottleneck);
    } else {
      args.net = null;
    }
    const toxi = args.net ? await toxiproxyIn(cleanup, args.net) : await Toxiproxy.start(cleanup);
    const nodes = [];
    for (const arm of ARMS) nodes.push(await startNode(cleanup, work, args.bin, arm, siteDir, toxi, args));
    const nodeOf = Object.fromEntries(nodes.map((n) => [n.arm, n]));
    // The monitors calibrate their threshold at start-up (no threshold configured): waited
    // for, so that training traffic does not land in the start-up curve.
    for (const n of nodes) {
      await waitFor(`${n.arm}'s start-up calibration`, 30000, async () => {
        const s = await n.status();
        return s.budget !== 'monitor' || (Array.isArray(s.startup_curve) && s.startup_curve.length > 0) || s.threshold_configured;
      }, 200);
    }
    // The pages are munged (the agent's registration), with the listener each arm should name.
    for (const n of nodes) {
      const html = await (await fetch(n.direct + site.pages[0].path)).text();
      const m = /<script src="\/_slipstream\/agent\/register\.js"[^>]*>/.exec(html);
      if (!m) throw new Error(`${n.arm}'s pages are not munged: ${html.slice(0, 300)}`);
      n.munged_script = m[0];
      if (n.deadPort && !m[0].includes(`:${n.deadPort}`)) throw new Error(`${n.arm}'s page does not name the closed listener: ${m[0]}`);
    }
    const swBytes = Buffer.from(await (await fetch(`${nodes[0].direct}/_slipstream/sw.js`)).arrayBuffer());
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
      sw_js_has_storable: swBytes.includes('storable('),
      git_head: git(['rev-parse', 'HEAD']),
      git_dirty: git(['status', '--porcelain', '--', 'web/agent', 'crates', 'experiments/000/pages.mjs']),
    };

    log(`  training ${picked.train.length} sessions on each of the ${nodes.length} nodes`);
    const training = await train(nodes, picked.train, site);
    log(`  trained in ${training.seconds} s`);
    const statusBefore = {};
    for (const n of nodes) statusBefore[n.arm] = await n.status();
    const logFrom = await drainedSizes(nodes.map((n) => n.accessLog));

    // The measured sessions. A browser still open when the series fails is closed with it.
    const chromiumPath = args.net ? chromiumIn(work, args.net, chromiumBinary()) : chromiumBinary();
    const live = new Set();
    cleanup.add(() => Promise.all([...live].map((c) => withTimeout('closing a browser', CLOSE_TIMEOUT_MS, c.close()).catch(() => {}))));
    const loads = [];
    const sessions = [];
    const budgets = [];
    const deadline = Date.now() + 300000 + picked.measured.reduce((a, s) => a + s.pages.length, 0) * ARMS.length * 15000;
    const measuredFrom = sinceStart();

    /** One session in one arm's fresh browser; never throws (a failure is recorded). */
    async function runSession(arm, s, k) {
      const node = nodeOf[arm];
      const rec = { arm, session: k, msnbc_index: s.index, pages: s.pages.length, t_ms: sinceStart() };
      const profile = mkdtempSync(join(work, `profile-${arm}-`));
      let context = null;
      let load = null;
      const responses = [];
      const specRequests = [];
      try {
        if (args.loadRates) {
          // The background load starts first and runs through the session; what the server
          // did meanwhile is recorded from its counters and its CPU time.
          const rate = args.loadRates[k % args.loadRates.length];
          const planned = s.think.reduce((a, b) => a + b, 0) + s.leave + s.pages.length * 2000 + LAUNCH_TIMEOUT_MS;
          load = startLoad(args, node, rate, (args.loadWarmMs + planned) / 1000, urlsFile, seed * 13 + k);
          const st = await statusUnderLoad(node);
          rec.load = { rate, policy: LOAD_POLICY[arm], status_start: st && trimStatus(st), cpu_start: cpuSeconds(node.pid), at_start: performance.now() };
          await sleep(args.loadWarmMs);
          if (!load.alive) throw new Error(`the background load exited: ${load.output().slice(-500)}`);
          rec.load.warm_budget_per_s = (await statusUnderLoad(node))?.budget_per_s ?? null;
        }
        context = await withTimeout(`Chromium for ${arm} to start`, LAUNCH_TIMEOUT_MS + 10000, playwright.chromium.launchPersistentContext(profile, {
          executablePath: chromiumPath,
          headless: true,
          args: [...CHROMIUM_ARGS, `--user-agent=${UA(arm, k)}`],
          serviceWorkers: 'allow',
          timeout: LAUNCH_TIMEOUT_MS,
        }));
        live.add(context);
        const page = context.pages()[0] ?? (await context.newPage());
        page.on('response', (r) => {
          try {
            const u = new URL(r.url());
            if (u.origin !== node.origin) return;
            const h = r.headers();
            responses.push({ path: u.pathname, sw: r.fromServiceWorker(), prefetched: h[STORED_AT] !== undefined, status: r.status() });
          } catch {
            // a response from elsewhere
          }
        });
        context.on('request', (r) => {
          const p = r.headers()['sec-purpose'];
          if (p && p.includes('prefetch')) specRequests.push({ url: r.url(), t_ms: sinceStart() });
        });
        let prevFailed = false;
        for (let step = 0; step < s.pages.length; step++) {
          const pg = s.pages[step];
          const url = node.origin + pg.path;
          const lr = { arm, session: k, step, load_rate: rec.load ? rec.load.rate : null, page: pg.path, category: CATEGORIES[pg.category], images: pg.images.length, think_ms: s.think[step] };
          if (step > 0) {
            await sleep(s.think[step]);
            // What the worker held when the user moved on.
            lr.worker_before = await withTimeout('the worker state', EVAL_TIMEOUT_MS, page.evaluate(() => window.slipstreamAgent ? window.slipstreamAgent.state().then((st) => st.prefetch) : null)).catch((e) => ({ error: e.message }));
          }
          const from = responses.length;
          lr.t_ms = sinceStart();
          try {
            let resp;
            if (step === 0 || prevFailed) {
              // After a failed load (loaded-server goes on, as a user would), from the error page.
              resp = await page.goto(url, { waitUntil: 'commit', timeout: GOTO_TIMEOUT_MS });
            } else {
              const nav = page.waitForNavigation({ waitUntil: 'commit', timeout: GOTO_TIMEOUT_MS });
              await page.evaluate((u) => {
                setTimeout(() => location.assign(u), 0);
              }, url);
              resp = await nav;
            }
            const handle = await page.waitForFunction(() => window.__bench, null, { timeout: LOAD_TIMEOUT_MS, polling: 20 });
            const r = await withTimeout('the load result', EVAL_TIMEOUT_MS, handle.jsonValue());
            if (!page.url().endsWith(pg.path)) throw new Error(`landed on ${page.url()}, not ${pg.path}`);
            const mine = responses.slice(from);
            Object.assign(lr, {
              ok: true,
              ms: r.ms,
              broken: r.broken.length,
              html_from_sw: resp ? resp.fromServiceWorker() : null,
              html_prefetched: resp ? resp.headers()[STORED_AT] !== undefined : null,
              images_prefetched: mine.filter((x) => x.path.startsWith('/img/') && x.prefetched).length,
              images_from_sw: mine.filter((x) => x.path.startsWith('/img/') && x.sw).length,
              delivery_type: r.delivery_type,
              speculative: r.delivery_type === 'navigational-prefetch',
              controlled: r.controlled,
              worker_start_ms: r.worker_start,
              html_end_ms: r.html_end,
              html_transfer: r.html_transfer,
              img_transfer: r.img_transfer,
              img_last_end_ms: r.img_last_end,
            });
            if (r.broken.length) lr.broken_src = r.broken;
          } catch (e) {
            Object.assign(lr, { ok: false, error: String(e.message).split('\n')[0].slice(0, 300) });
          }
          lr.end_ms = sinceStart();
          loads.push(lr);
          // Elsewhere the rest of this session would navigate from a broken page; under a loaded
          // server a failed load is an outcome, and the session goes on.
          if (!lr.ok && !args.loadRates) break;
          prevFailed = !lr.ok;
        }
        // The user reads the last page, then leaves: what the worker prefetched by then.
        await sleep(s.leave);
        rec.worker = await withTimeout('the worker state', EVAL_TIMEOUT_MS, page.evaluate(() => window.slipstreamAgent ? window.slipstreamAgent.state().then((st) => st.prefetch) : null)).catch((e) => ({ error: e.message }));
        // Bytes used: the distinct URLs the worker answered from its prefetch cache (by the
        // mark it puts on them), at their sizes in the site (a munged page is ~150 bytes more).
        const used = new Set(responses.filter((x) => x.prefetched).map((x) => x.path));
        rec.used_urls = used.size;
        rec.used_bytes = [...used].reduce((a, p) => a + (site.sizes.get(p) ?? 0), 0);
        rec.served_responses = responses.filter((x) => x.prefetched).length;
        rec.speculation_requests = specRequests.length;
        rec.speculation_urls = specRequests.map((x) => new URL(x.url).pathname);
        if (load) {
          if (!load.alive) throw new Error(`the background load ended before the session did: ${load.output().slice(-500)}`);
          const cpu = cpuSeconds(node.pid);
          const secs = (performance.now() - rec.load.at_start) / 1000;
          const st = await statusUnderLoad(node);
          Object.assign(rec.load, {
            seconds: round1(secs),
            server_cpu: cpu !== null && rec.load.cpu_start !== null ? Math.round((cpu - rec.load.cpu_start) / secs * 1000) / 1000 : null,
            counters: st && rec.load.status_start ? statusDelta(rec.load.status_start, st) : null,
            budget_per_s_end: st ? st.budget_per_s : null,
          });
          delete rec.load.status_start;
          delete rec.load.at_start;
        }
      } catch (e) {
        rec.error = `${String(e.message).split('\n')[0].slice(0, 300)}${e.cause ? ` (${e.cause.code ?? e.cause.message})` : ''}`;
      } finally {
        if (load) await load.kill();
        if (context) {
          await withTimeout(`closing ${arm}'s browser`, CLOSE_TIMEOUT_MS, context.close()).catch((e) => (rec.close_error = e.message));
          live.delete(context);
        }
        rmSync(profile, { recursive: true, force: true });
      }
      rec.end_ms = sinceStart();
      return rec;
    }

    for (let k = 0; k < picked.measured.length; k++) {
      if (Date.now() > deadline) throw new Error(`series ${series} ran past its deadline after ${k} sessions`);
      const s = picked.measured[k];
      const order = [...ARMS.slice(k % ARMS.length), ...ARMS.slice(0, k % ARMS.length)];
      for (const arm of order) sessions.push(await runSession(arm, s, k));
      const b = { session: k, t_ms: sinceStart() };
      for (const n of nodes) {
        const st = await n.status().catch(() => null);
        b[n.arm] = st ? { budget_per_s: st.budget_per_s, shedding: st.shedding, threshold_us: st.threshold_us } : null;
      }
      budgets.push(b);
      log(`  session ${k + 1}/${picked.measured.length} (${s.pages.length} pages) at ${(sinceStart() / 1000).toFixed(0)} s`);
    }

    const logTo = await drainedSizes(nodes.map((n) => n.accessLog));
    const statusAfter = {};
    for (const n of nodes) statusAfter[n.arm] = await n.status();
    const origin = {};
    nodes.forEach((n, i) => {
      let accessLog;
      try {
        accessLog = countLog(n, logFrom[i], logTo[i]);
      } catch (e) {
        accessLog = { error: e.message }; // the page loads are kept whatever happens here
      }
      origin[n.arm] = { counters: statusDelta(statusBefore[n.arm], statusAfter[n.arm]), access_log: accessLog };
    });

    const result = {
      experiment: 'paper 000 Fig. 13 in Chromium: page loads with and without NPS prefetching (issue 43 item 1)',
      series, seed, quick: args.quick, condition: args.condition,
      started: new Date(started).toISOString(),
      build,
      host: { cpus: cpus().length, loadavg_start: loadStart, loadavg_end: loadavg() },
      parameters: {
        CATEGORIES, PAGES_PER_CATEGORY, IMAGES_PER_PAGE, IMAGE_KB, ZIPF_S, SAME_CATEGORY_LINKS, FOLLOW_LINK, MAX_PAGES, MIN_MEASURED_PAGES,
        THINK_MS, latency_ms: args.latency, jitter: JITTER,
        link_kbit: args.condition === 'loaded-network' ? args.linkKbit : null, le_bottleneck: args.condition === 'loaded-network' ? args.leBottleneck : null, rtt_backoff: args.rttBackoff,
        listener: args.listener, load_rates: args.loadRates, load_warm_ms: args.loadRates ? args.loadWarmMs : null,
        load_doc_files: args.loadRates ? LOAD_DOC_FILES : null, load_policy: args.loadRates ? LOAD_POLICY : null, pinned,
        server_cpus: args.loadRates ? args.serverCpus : null, cfs_period_us: args.loadRates ? CFS_PERIOD_US : null,
        cache_control: CACHE_CONTROL, sessions: args.sessions, train_sessions: args.train, TRAIN_CONCURRENCY, TRAIN_IMAGE_PARALLEL,
      },
      network: args.net ? { ...args.net, link_kbit: args.linkKbit, le_bottleneck: args.leBottleneck, tc_class_stats: bottleneckStats(args.net) } : null,
      nodes: nodes.map((n) => ({ arm: n.arm, port: n.port, proxy: n.proxyPort, listener_proxy: n.listenerProxy, dead_listener_port: n.deadPort, config: n.toml, munged_script: n.munged_script })),
      site: { pages: site.pages.length, images: site.pages.reduce((a, p) => a + p.images.length, 0), bytes: [...site.sizes.values()].reduce((a, b) => a + b, 0), mean_page_bytes: Math.round(site.pages.reduce((a, p) => a + p.bytes + p.images.reduce((b, im) => b + im.bytes, 0), 0) / site.pages.length) },
      measured_sessions: picked.measured.map((s) => ({ msnbc_index: s.index, categories: s.cats.map((c) => CATEGORIES[c]), pages: s.pages.map((p) => p.path), think_ms: s.think, leave_ms: s.leave })),
      training,
      measured_from_ms: measuredFrom,
      loads,
      sessions,
      budgets,
      origin,
      status_before: Object.fromEntries(Object.entries(statusBefore).map(([k, v]) => [k, trimStatus(v)])),
      status_after: Object.fromEntries(Object.entries(statusAfter).map(([k, v]) => [k, trimStatus(v)])),
      startup_curves: Object.fromEntries(Object.entries(statusAfter).map(([k, v]) => [k, { threshold_us: v.threshold_us, source: v.threshold_source, curve: v.startup_curve }])),
      duration_s: round1((performance.now() - t0) / 1000),
    };
    result.summary = summarise(result);
    return result;
  } finally {
    for (const [s, fn] of sigs) process.removeListener(s, fn);
    await cleanup.run();
  }
}

// --- statistics ----------------------------------------------------------------------------------


function summarise(result) {
  const out = summariseLoads(result, result.loads, result.sessions);
  const rates = result.parameters.load_rates;
  if (rates) {
    // Per load level: the sessions run at it (every arm of a session runs at the same level).
    out.levels = {};
    for (const rate of rates) {
      const loads = result.loads.filter((r) => r.load_rate === rate);
      const sessions = result.sessions.filter((s) => s.load && s.load.rate === rate);
      const level = summariseLoads(result, loads, sessions);
      for (const arm of ARMS) {
        const ls = sessions.filter((s) => s.arm === arm && typeof s.load.seconds === 'number');
        const lc = ls.filter((s) => s.load.counters);
        const lb = ls.filter((s) => typeof s.load.budget_per_s_end === 'number');
        const sum = (xs, f) => xs.reduce((a, s) => a + f(s), 0);
        const secs = sum(lc, (s) => s.load.seconds);
        level.arms[arm].server = {
          sessions: ls.length,
          cpu: ls.length && ls.every((s) => s.load.server_cpu !== null) ? sum(ls, (s) => s.load.server_cpu * s.load.seconds) / sum(ls, (s) => s.load.seconds) : null,
          status_missing: ls.length - lc.length,
          demand_per_s: secs ? sum(lc, (s) => s.load.counters.demand_requests) / secs : null,
          prefetch_per_s: secs ? sum(lc, (s) => s.load.counters.prefetch_requests) / secs : null,
          prefetch_kb_per_s: secs ? sum(lc, (s) => s.load.counters.prefetch_bytes) / 1024 / secs : null,
          budget_per_s_mean_end: lb.length ? sum(lb, (s) => s.load.budget_per_s_end) / lb.length : null,
        };
      }
      out.levels[rate] = level;
    }
  }
  return out;
}

/** Per arm over `loads` and `sessions`, and each arm paired with `none` page by page. */
function summariseLoads(result, loads, sessions) {
  const out = { arms: {}, paired: {} };
  const key = (r) => `${r.session}/${r.step}`;
  const byArm = Object.fromEntries(ARMS.map((a) => [a, loads.filter((r) => r.arm === a)]));
  for (const arm of ARMS) {
    const recs = byArm[arm];
    const good = recs.filter((r) => r.ok && r.broken === 0);
    const later = good.filter((r) => r.step > 0);
    const sess = sessions.filter((s) => s.arm === arm);
    const w = sess.map((s) => s.worker).filter((x) => x && typeof x.fetched === 'number');
    const fetchedBytes = w.reduce((a, x) => a + x.bytes, 0);
    const usedBytes = sess.reduce((a, s) => a + (s.used_bytes ?? 0), 0);
    out.arms[arm] = {
      loads: recs.length,
      failed: recs.filter((r) => !r.ok).length,
      with_broken: recs.filter((r) => r.ok && r.broken > 0).length,
      all: stats(good.map((r) => r.ms)),
      later: stats(later.map((r) => r.ms)),
      later_pages: recs.filter((r) => r.step > 0).length,
      html_prefetched: recs.filter((r) => r.step > 0 && r.html_prefetched).length,
      speculative: recs.filter((r) => r.step > 0 && r.speculative).length,
      images_prefetched: recs.reduce((a, r) => a + (r.images_prefetched ?? 0), 0),
      images: recs.reduce((a, r) => a + (r.ok ? r.images : 0), 0),
      not_controlled: recs.filter((r) => r.ok && r.step > 0 && !r.controlled).length,
      sessions: sess.length,
      session_errors: sess.filter((s) => s.error).length,
      worker: {
        asked: w.reduce((a, x) => a + x.asked, 0),
        lists: w.reduce((a, x) => a + x.lists, 0),
        waits: w.reduce((a, x) => a + x.waits + x.page_waits, 0),
        fetched: w.reduce((a, x) => a + x.fetched, 0),
        failed: w.reduce((a, x) => a + x.failed + x.refused, 0),
        served: w.reduce((a, x) => a + x.served, 0),
        bytes: fetchedBytes,
      },
      used_bytes: usedBytes,
      wasted_bytes: Math.max(0, fetchedBytes - usedBytes),
      speculation_requests: sess.reduce((a, s) => a + (s.speculation_requests ?? 0), 0),
      origin: result.origin[arm],
    };
  }
  // Paired per (session, page): each arm against none, pages after the first, both complete.
  const base = new Map(byArm.none.filter((r) => r.ok && r.broken === 0 && r.step > 0).map((r) => [key(r), r.ms]));
  for (const arm of ARMS.filter((a) => a !== 'none')) {
    const d = [];
    const ratios = [];
    for (const r of byArm[arm]) {
      if (!(r.ok && r.broken === 0 && r.step > 0) || !base.has(key(r))) continue;
      d.push(r.ms - base.get(key(r)));
      ratios.push(r.ms / base.get(key(r)));
    }
    const s = stats(d);
    if (s.n > 1) {
      const sd = Math.sqrt(d.reduce((a, x) => a + (x - s.mean) ** 2, 0) / (d.length - 1));
      s.ci95 = 1.96 * sd / Math.sqrt(d.length);
    }
    const mine = out.arms[arm].later.mean;
    const theirs = out.arms.none.later.mean;
    out.paired[arm] = { pairs: s.n, mean_diff_ms: s.mean ?? null, ci95_ms: s.ci95 ?? null, median_ratio: stats(ratios).p50 ?? null, ratio_of_means: mine && theirs ? mine / theirs : null };
  }
  return out;
}

function tables(result) {
  const f = (v, d = 0) => (v === undefined || v === null || Number.isNaN(v) ? '—' : v.toFixed(d));
  const kb = (b) => (b === undefined || b === null ? '—' : (b / 1024).toFixed(0));
  const h = result.host;
  const lines = [
    `\n${result.quick ? 'QUICK run (development only, not a result): ' : ''}condition ${result.condition}, series ${result.series}: ${result.measured_sessions.length} sessions, ${result.loads.length} page loads, latency ${result.parameters.latency_ms} ms ±${result.parameters.jitter * 100} %, ${result.training.replays / ARMS.length} training sessions a node (${result.training.seconds} s); ${result.duration_s} s; load average ${h.loadavg_start[0].toFixed(2)} at the start, ${h.loadavg_end[0].toFixed(2)} at the end (${h.cpus} CPUs)`,
  ];
  const loadTable = (summary, title) => {
    lines.push('', ...(title ? [title, ''] : []),
      '| arm | loads | failed | broken | mean ms (pages 2+) | p50 | p95 | mean ms (all pages) | p95 | paired diff vs none (ms, ±95 %) | ratio of means | pages from prefetch (2+) | images from prefetch |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    for (const arm of ARMS) {
      const s = summary.arms[arm];
      const p = summary.paired[arm];
      const fromPrefetch = arm === 'speculation' ? s.speculative : s.html_prefetched;
      lines.push(`| ${arm} | ${s.loads} | ${s.failed} | ${s.with_broken} | ${f(s.later.mean)} | ${f(s.later.p50)} | ${f(s.later.p95)} | ${f(s.all.mean)} | ${f(s.all.p95)} | ${p ? `${f(p.mean_diff_ms)} ± ${f(p.ci95_ms)} (${p.pairs})` : '—'} | ${p ? f(p.ratio_of_means, 3) : '—'} | ${fromPrefetch}/${s.later_pages} | ${s.images_prefetched}/${s.images} |`);
    }
  };
  if (result.summary.levels) {
    for (const [rate, level] of Object.entries(result.summary.levels)) {
      loadTable(level, `Background load ${rate} documents/s (${LOAD_DOC_FILES} files each):`);
      lines.push('', '| arm | sessions | server CPU (of its core) | demand requests/s | prefetch requests/s | prefetch KB/s | budget at the end, files/s (mean) |', '|---|---|---|---|---|---|---|');
      for (const arm of ARMS) {
        const v = level.arms[arm].server;
        lines.push(`| ${arm} | ${v.sessions} | ${v.cpu === null ? '—' : `${(v.cpu * 100).toFixed(0)} %`} | ${f(v.demand_per_s)} | ${f(v.prefetch_per_s)} | ${f(v.prefetch_kb_per_s)} | ${arm === 'nps' || arm === 'speculation' ? f(v.budget_per_s_mean_end) : '—'} |`);
      }
    }
    lines.push('', 'All load levels:');
  }
  loadTable(result.summary);
  lines.push('', '| arm | worker: hint requests | lists | waits | files prefetched | KB prefetched | KB used | KB wasted | browser prefetches (Sec-Purpose) | node: demand requests | demand KB | prefetch requests | prefetch KB | refused browser prefetches | access log: requests | KB |', '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const arm of ARMS) {
    const s = result.summary.arms[arm];
    const c = s.origin.counters;
    const a = s.origin.access_log;
    lines.push(`| ${arm} | ${s.worker.asked} | ${s.worker.lists} | ${s.worker.waits} | ${s.worker.fetched} | ${kb(s.worker.bytes)} | ${kb(s.used_bytes)} | ${kb(s.wasted_bytes)} | ${s.speculation_requests} | ${c.demand_requests} | ${kb(c.demand_bytes)} | ${c.prefetch_requests} | ${kb(c.prefetch_bytes)} | ${c.refused_browser_prefetches} | ${a.requests} | ${kb(a.bytes)} |`);
  }
  return lines.join('\n');
}

// --- main ----------------------------------------------------------------------------------------

/**
 * The chart of `results` (one per series): per series, each arm's mean load time of the pages
 * after a session's first (solid) and its p95 (light), and the prefetched bytes used and
 * wasted per page. SVG, no dependencies.
 */
function chart(series, condition) {
  // One group per series, or per series and load level (loaded-server).
  const results = series.flatMap((r) => (r.summary.levels
    ? Object.entries(r.summary.levels).map(([rate, level]) => ({ label: `series ${r.series}, load ${rate}/s`, summary: level }))
    : [{ label: `series ${r.series}`, summary: r.summary }]));
  const colors = { none: '#7f7f7f', nps: '#1f77b4', 'no-avoidance': '#ff7f0e', speculation: '#2ca02c' };
  const groupW = 4 * 44 + 40;
  const W = 90 + results.length * groupW * 2 + 40;
  const H = 330;
  const T = 44;
  const B = 70;
  const ph = H - T - B;
  // The scale from the arms whose loads all completed; a longer bar is cut at the top (its
  // value is in the label), and an arm with failed loads says how many.
  const ms = results.flatMap((r) => ARMS.filter((a) => r.summary.arms[a].failed === 0).map((a) => r.summary.arms[a].later.p95 ?? 0));
  const top = Math.max(100, Math.ceil(Math.max(...ms) / 100) * 100);
  const kb = results.flatMap((r) => ARMS.map((a) => (r.summary.arms[a].worker.bytes ?? 0) / 1024 / Math.max(1, r.summary.arms[a].loads)));
  const topKb = Math.max(100, Math.ceil(Math.max(...kb) / 250) * 250);
  const y = (v, max) => T + ph * (1 - Math.min(v, max) / max);
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="13">NPS in Chromium, ${condition}: load time of later pages (left) and prefetched KB per page (right)</text>`,
    `<text x="${W / 2}" y="33" text-anchor="middle" font-size="10">left: mean (solid) and p95 (light), ms; right: the agent's prefetches, used (solid) and wasted (light), KB per page load (Chromium's own Speculation Rules prefetches are not in it)</text>`,
  ];
  const x0 = 60;
  for (let v = 0; v <= top; v += top / 5) {
    out.push(`<line x1="${x0}" x2="${x0 + results.length * groupW}" y1="${y(v, top).toFixed(1)}" y2="${y(v, top).toFixed(1)}" stroke="#ddd"/><text x="${x0 - 5}" y="${(y(v, top) + 4).toFixed(1)}" text-anchor="end">${v}</text>`);
  }
  const x1 = x0 + results.length * groupW + 60;
  for (let v = 0; v <= topKb; v += topKb / 5) {
    out.push(`<line x1="${x1}" x2="${x1 + results.length * groupW}" y1="${y(v, topKb).toFixed(1)}" y2="${y(v, topKb).toFixed(1)}" stroke="#ddd"/><text x="${x1 - 5}" y="${(y(v, topKb) + 4).toFixed(1)}" text-anchor="end">${Math.round(v)}</text>`);
  }
  results.forEach((r, g) => {
    ARMS.forEach((a, i) => {
      const s = r.summary.arms[a];
      const bx = x0 + 20 + g * groupW + i * 44;
      const bar = (x, v, max, opacity, title) => `<rect x="${x}" y="${y(v, max).toFixed(1)}" width="16" height="${(y(0, max) - y(v, max)).toFixed(1)}" fill="${colors[a]}" fill-opacity="${opacity}"><title>${title}</title></rect>`;
      out.push(bar(bx, s.later.p95 ?? 0, top, 0.35, `${a} p95 ${(s.later.p95 ?? 0).toFixed(0)} ms`));
      out.push(bar(bx + 8, s.later.mean ?? 0, top, 1, `${a} mean ${(s.later.mean ?? 0).toFixed(0)} ms`));
      out.push(`<text x="${bx + 12}" y="${(y(s.later.mean ?? 0, top) - 3).toFixed(1)}" text-anchor="middle" font-size="9">${s.later.mean === undefined || s.later.mean === null ? '—' : s.later.mean.toFixed(0)}</text>`);
      if (s.failed > 0) out.push(`<text x="${bx + 12}" y="${(y(0, top) - 14).toFixed(1)}" text-anchor="middle" font-size="9" fill="#c00">${s.failed}/${s.loads}</text><text x="${bx + 12}" y="${(y(0, top) - 4).toFixed(1)}" text-anchor="middle" font-size="9" fill="#c00">failed</text>`);
      out.push(`<text x="${bx + 12}" y="${(y(0, top) + 12).toFixed(1)}" text-anchor="end" font-size="9" transform="rotate(-35 ${bx + 12} ${(y(0, top) + 12).toFixed(1)})">${a}</text>`);
      const used = s.used_bytes / 1024 / Math.max(1, s.loads);
      const wasted = s.wasted_bytes / 1024 / Math.max(1, s.loads);
      const kx = x1 + 20 + g * groupW + i * 44;
      out.push(`<rect x="${kx}" y="${y(used + wasted, topKb).toFixed(1)}" width="20" height="${(y(0, topKb) - y(wasted, topKb)).toFixed(1)}" fill="${colors[a]}" fill-opacity="0.35"><title>${a} wasted ${wasted.toFixed(0)} KB a page</title></rect>`);
      out.push(`<rect x="${kx}" y="${y(used, topKb).toFixed(1)}" width="20" height="${(y(0, topKb) - y(used, topKb)).toFixed(1)}" fill="${colors[a]}"><title>${a} used ${used.toFixed(0)} KB a page</title></rect>`);
      out.push(`<text x="${kx + 10}" y="${(y(0, topKb) + 12).toFixed(1)}" text-anchor="end" font-size="9" transform="rotate(-35 ${kx + 10} ${(y(0, topKb) + 12).toFixed(1)})">${a}</text>`);
    });
    const label = r.label;
    out.push(`<text x="${x0 + 20 + g * groupW + 80}" y="${H - 8}" text-anchor="middle">${label}</text>`);
    out.push(`<text x="${x1 + 20 + g * groupW + 80}" y="${H - 8}" text-anchor="middle">${label}</text>`);
  });
  out.push('</svg>');
  return out.join('\n') + '\n';
}

// --- the report ----------------------------------------------------------------------------------

const REPORT_BEGIN = '<!-- fig13: written by `node experiments/000/pages.mjs --report`; edits here are lost -->';
const REPORT_END = '<!-- fig13 end -->';
const TARGETS = {
  spare: 'NPS lowers the mean load time of later pages against No-Prefetching by at least 20 %',
  'loaded-server': 'NPS is never more than 5 % slower than No-Prefetching at any load level, while No-Avoidance is',
  'loaded-network': 'with NPS, page load time rises less than 30 % over No-Prefetching (the paper\'s Fig. 13(c) bound)',
};

/** Every (non-quick) series of a set (a condition, or a condition and a variant) on disk. */
function seriesOn(outDir, set) {
  return [1, 2, 3, 4, 5, 6, 7, 8, 9]
    .map((s) => join(outDir, `${set}-${s}.json`))
    .filter((f) => existsSync(f))
    .map((f) => {
      const r = JSON.parse(readFileSync(f, 'utf8'));
      r.summary = summarise(r);
      return r;
    });
}

/** A condition's sets on disk: the default settings first, then each --variant. */
function setsOf(outDir, condition) {
  const variants = new Set();
  for (const f of readdirSync(outDir)) {
    const m = new RegExp(`^${condition}-([a-z0-9][a-z0-9-]*)-\\d+\\.json$`).exec(f);
    if (m) variants.add(m[1]);
  }
  return [{ set: condition, variant: null }, ...[...variants].sort().map((v) => ({ set: `${condition}-${v}`, variant: v }))];
}

/** The Fig. 13 section of 000-nps.md from the results on disk: per condition, a row per series
 * (and load level), each arm's mean load time of later pages and its ratio to none, and the
 * target's verdict computed from them. */
function reportSection(outDir) {
  const pct = (r) => (r === null || r === undefined ? '—' : `${r >= 1 ? '+' : '−'}${Math.abs((r - 1) * 100).toFixed(0)} %`);
  const ms = (v) => (v === null || v === undefined ? '—' : v.toFixed(0));
  const out = [REPORT_BEGIN, '', '## Fig. 13 in Chromium: what NPS does for page loads (issue 43)', '',
    'Headless Chromium replays MSNBC sessions (pages after the first, each against its own node, four arms',
    'interleaved per session; method in [`000-pages.md`](000-pages.md)), on the unslowed server with',
    'the node\'s default `[prefetch]` settings for NPS. Regenerated from the JSON files in',
    '`docs/experiments/data/000-pages/` by `node experiments/000/pages.mjs --report`; every run by',
    '`sudo ./experiments/000/fig13.sh` (about 1.5 hours: spare 2 × 16 sessions, loaded-server 2 × 12, loaded-network 2 × 6).', ''];
  for (const condition of ['spare', 'loaded-server', 'loaded-network']) {
   for (const { set, variant } of setsOf(outDir, condition)) {
    const results = seriesOn(outDir, set);
    if (variant === null) out.push(`### ${condition}`, '', `Target: ${TARGETS[condition]}.`, '');
    else out.push(`#### ${condition}, variant \`${variant}\` (not the default settings: no verdict on the target)`, '');
    if (results.length === 0) {
      out.push('Not measured yet.', '');
      continue;
    }
    const p = results[0].parameters;
    if (condition === 'loaded-server') out.push(`Each server one worker held to ${p.server_cpus} CPU (a cgroup quota, as \`docker run --cpus ${p.server_cpus}\`); a background \`slipstream bench --agents\` load at the level shown, its clients prefetching as the arm's.`, '');
    if (condition === 'loaded-network') out.push(`A ${p.link_kbit} kbit/s bottleneck (htb${p.le_bottleneck ? ', DSCP Lower-Effort served last' : ', DSCP ignored'}) shared by the browser and a background \`slipstream bench --agents\` client at the level shown, prefetching as the arm's${p.listener ? '; prefetches through the prefetch listener' : ''}${p.rtt_backoff ? ' with its RTT back-off' : ''}.`, '');
    out.push('| series | load | none, ms | nps | no-avoidance | speculation | failed loads (none / nps / no-av. / spec.) | verdict |', '|---|---|---|---|---|---|---|---|');
    const rows = [];
    for (const r of results) {
      const groups = r.summary.levels ? Object.entries(r.summary.levels) : [[null, r.summary]];
      for (const [rate, sm] of groups) {
        const a = sm.arms;
        const ratio = (arm) => sm.paired[arm]?.ratio_of_means ?? null;
        const cell = (arm) => {
          if (a[arm].loads > 0 && a[arm].failed === a[arm].loads) return 'every load failed';
          const r = ratio(arm);
          return `${ms(a[arm].later.mean)} (${r !== null && r >= 2 ? `×${r.toFixed(1)}` : pct(r)})`;
        };
        const failed = ARMS.map((arm) => `${a[arm].failed}/${a[arm].loads}`).join(' / ');
        let verdict;
        const nps = ratio('nps');
        if (condition === 'spare') verdict = nps !== null && nps <= 0.8 ? 'met' : 'missed';
        else if (condition === 'loaded-server') {
          const npsOk = nps !== null && nps <= 1.05 && a.nps.failed <= a.none.failed;
          const noAvBad = (ratio('no-avoidance') ?? Infinity) > 1.05 || a['no-avoidance'].failed > a.none.failed;
          verdict = npsOk && noAvBad ? 'met' : `missed (${npsOk ? '' : 'NPS over 5 %'}${!npsOk && !noAvBad ? ', ' : ''}${noAvBad ? '' : 'No-Avoidance not over 5 %'})`;
        } else verdict = nps !== null && nps < 1.3 && a.nps.failed <= a.none.failed ? 'met' : 'missed';
        if (variant !== null) verdict = `(${verdict})`;
        rows.push(verdict);
        out.push(`| ${r.series} | ${rate === null ? '—' : `${rate} docs/s`} | ${ms(a.none.later.mean)} | ${cell('nps')} | ${cell('no-avoidance')} | ${cell('speculation')} | ${failed} | ${verdict} |`);
      }
    }
    const met = rows.filter((v) => v === 'met').length;
    if (variant === null) out.push('', `**${met} of ${rows.length} cells met** (a cell: one series${results[0].summary.levels ? ' at one load level' : ''}; the ratios are of mean load times of later pages against the none arm of the same sessions).`, '');
    else out.push('');
    out.push(`![${set}: load time of later pages per arm, and prefetched KB per page](000-pages-${set}.svg)`, '');
   }
  }
  out.push(REPORT_END);
  return out.join('\n');
}

function writeReport(outDir) {
  for (const condition of CONDITIONS) {
    for (const { set } of setsOf(outDir, condition)) {
      const results = seriesOn(outDir, set);
      if (results.length) writeFileSync(join(REPO, 'docs', 'experiments', `000-pages-${set}.svg`), chart(results, set));
    }
  }
  const doc = join(REPO, 'docs', 'experiments', '000-nps.md');
  const text = readFileSync(doc, 'utf8');
  const section = reportSection(outDir);
  const i = text.indexOf(REPORT_BEGIN);
  const j = text.indexOf(REPORT_END);
  let next;
  if (i >= 0 && j > i) next = text.slice(0, i) + section + text.slice(j + REPORT_END.length);
  else {
    // First time: after the title and the paper's paragraph.
    const k = text.indexOf('\n\n', text.indexOf('\n\n') + 2);
    next = `${text.slice(0, k + 2)}${section}\n\n${text.slice(k + 2)}`;
  }
  writeFileSync(doc, next);
  log(`wrote ${doc} and the charts`);
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (args.report) {
    writeReport(join(REPO, 'docs', 'experiments', 'data', '000-pages'));
    return;
  }
  const require = createRequire(join(REPO, 'web', 'browser', 'package.json'));
  let playwright;
  try {
    playwright = require('playwright-core');
  } catch (e) {
    throw new Error(`playwright-core is not installed: run \`npm ci\` in web/browser (${e.message})`);
  }
  const outDir = join(REPO, 'docs', 'experiments', 'data', '000-pages');
  mkdirSync(outDir, { recursive: true });
  const set = args.variant ? `${args.condition}-${args.variant}` : args.condition;
  const fileOf = (s) => join(outDir, `${args.quick ? 'quick-' : ''}${set}-${s}.json`);
  // The chart of every series of this condition on disk (not of quick runs).
  const drawChart = () => {
    if (args.quick) return;
    const results = [1, 2, 3, 4, 5, 6, 7, 8, 9]
      .filter((s) => existsSync(fileOf(s)))
      .map((s) => JSON.parse(readFileSync(fileOf(s), 'utf8')));
    if (results.length === 0) return;
    const svg = join(REPO, 'docs', 'experiments', `000-pages-${set}.svg`);
    writeFileSync(svg, chart(results, set));
    log(`  wrote ${svg}`);
  };
  if (args.tablesOnly) {
    for (const s of args.series) {
      const result = JSON.parse(readFileSync(fileOf(s), 'utf8'));
      result.summary = summarise(result);
      writeFileSync(fileOf(s), JSON.stringify(result, null, 1) + '\n');
      console.log(tables(result));
    }
    drawChart();
    return;
  }
  const t = performance.now();
  const msnbc = readMsnbc();
  log(`msnbc990928.seq: ${msnbc.length} sessions`);
  for (const s of args.series) {
    const result = await runSeries(args, s, playwright, msnbc);
    writeFileSync(fileOf(s), JSON.stringify(result, null, 1) + '\n');
    console.log(tables(result));
    log(`  wrote ${fileOf(s)}`);
  }
  drawChart();
  log(`done in ${((performance.now() - t) / 1000).toFixed(0)} s`);
}

main().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(1);
});
