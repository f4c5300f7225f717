// NPS's browser side in a real browser (paper 000 §5, §6): headless Chromium against real
// `slipstream serve --prefetch` nodes on loopback.
//
//  1. Two connections, budget unlimited: a page's hinted link is prefetched by the Service
//     Worker through the node's prefetch listener into Cache Storage (its hint requests go
//     there too: the munged page names the listener); the click on it is then answered from
//     there, and no request for it reaches the demand server.
//  1b. The same with `Save-Data: on` on every request the browser sends: nothing is
//     prefetched, no prefetch reaches the node, and the click loads from the demand server.
//  2. A saturated server (every monitor probe fails, so the budget is nothing): the page tells
//     the worker to wait, so it waits without asking for hints, and issues no prefetch; a browser's own Speculation Rules prefetch is
//     refused with 503, and the click still loads the page normally.
//
// What reached the server is read from the node's own counters (/_slipstream/prefetch:
// demand, prefetch and prefetch-listener responses, refused browser prefetches), what the
// browser did from Playwright's events and the worker's state.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { CHROMIUM_ARGS, Cleanup, Proc, chromiumBinary, freePort, slipstreamBinary, tempDir, waitFor } from './harness.mjs';

async function playwright() {
  try {
    return await import('playwright-core');
  } catch (e) {
    throw new Error(`playwright-core is not installed: run \`npm ci\` in web/browser (.ci/run does) (${e.message})`);
  }
}

/** Pages a → b → c → d, each linking to the next, with no subresources. */
function writePages(dir) {
  const names = ['a', 'b', 'c', 'd'];
  names.forEach((n, i) => {
    const next = names[(i + 1) % names.length];
    writeFileSync(
      join(dir, `${n}.html`),
      `<!doctype html>\n<html><head><meta charset="utf-8"><title>${n}</title></head>\n<body><h1 id="name">${n}</h1>\n<a id="next" href="/${next}.html">next</a>\n<p>${'x'.repeat(2000)}</p></body></html>\n`,
    );
  });
}

/** A `slipstream serve --prefetch` node with `sets` (`--set` values); resolves once it listens. */
async function startNode(cleanup, root, sets) {
  const site = tempDir(cleanup, 'slipstream-nps-site-');
  writePages(site);
  const port = await freePort();
  const args = ['serve', site, '--listen', `127.0.0.1:${port}`, '--prefetch'];
  for (const s of sets) args.push('--set', s);
  const proc = new Proc('node', slipstreamBinary(), args);
  cleanup.add(() => proc.kill());
  const origin = `http://127.0.0.1:${port}`;
  await waitFor(`the node on ${origin} (output: ${proc.output()})`, 30000, async () => (await fetch(`${origin}/_slipstream/prefetch`)).ok);
  return { proc, origin, status: async () => (await fetch(`${origin}/_slipstream/prefetch`)).json() };
}

/** Six clients (told apart by user agent) walk a → b → c → d, and the node learns it. */
async function train(node) {
  for (let c = 0; c < 6; c++) {
    for (const p of ['a', 'b', 'c', 'd']) {
      const r = await fetch(`${node.origin}/${p}.html`, { headers: { 'user-agent': `trainer-${c}` } });
      assert.equal(r.status, 200);
      await r.arrayBuffer();
    }
  }
  await waitFor('the node to learn 24 demand requests', 10000, async () => (await node.status()).model.learnt >= 24);
}

/** A node that gives every hint request a list of two, through a prefetch listener. */
const UNLIMITED = ['prefetch.experimental.budget=unlimited', 'prefetch.listen=127.0.0.1:0', 'prefetch.experimental.doc_files=2'];

/** A headless Chromium on a fresh profile; `extraHTTPHeaders` on every request it sends. */
async function browser(cleanup, chromium, extraHTTPHeaders = undefined) {
  const profile = tempDir(cleanup, 'slipstream-nps-profile-');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumBinary(),
    headless: true,
    args: CHROMIUM_ARGS,
    extraHTTPHeaders,
  });
  cleanup.add(() => context.close());
  const page = context.pages()[0] ?? (await context.newPage());
  return { context, page };
}

test('NPS agent: hinted pages prefetched through the prefetch listener are served from Cache Storage', { timeout: 120000 }, async (t) => {
  const cleanup = new Cleanup();
  t.after(() => cleanup.run());
  const { chromium } = await playwright();
  const root = tempDir(cleanup, 'slipstream-nps-');
  // With the cost measurement on, so that the page says when it was served and the worker
  // reports it (the budget is unlimited: no quiet period, nothing braked).
  const node = await startNode(cleanup, root, [...UNLIMITED, 'prefetch.experimental.cost_target=0.05']);
  await train(node);
  const listener = (await node.status()).listener;
  assert.ok(listener && listener.base.startsWith('http://127.0.0.1:'), `a prefetch listener: ${JSON.stringify(listener)}`);
  assert.notEqual(new URL(listener.base).port, new URL(node.origin).port);

  const { page } = await browser(cleanup, chromium);
  await page.goto(`${node.origin}/a.html`);
  // The munger added the registration; the worker prefetches for the page once it is idle.
  const counts = await page.evaluate(() => window.slipstreamAgent.prefetched);
  assert.ok(counts && counts.prefetch.fetched >= 1, `the worker prefetched: ${JSON.stringify(counts)}`);
  const afterPrefetch = await node.status();
  assert.ok(afterPrefetch.via_listener.requests >= 1, `prefetches went to the listener: ${JSON.stringify(afterPrefetch.via_listener)}`);
  assert.equal(afterPrefetch.via_listener.requests, afterPrefetch.prefetch.requests, 'every prefetch through the listener');
  // The munged page named the listener, so even the worker's first hint request went there.
  assert.ok(afterPrefetch.hint_requests_via_listener >= 1, `hint requests through the listener: ${JSON.stringify(afterPrefetch)}`);
  assert.equal(afterPrefetch.hint_requests_via_listener, counts.prefetch.asked, 'every hint request the worker made went through the listener');
  // Its first hint request reported how long the page took, as Chromium timed it.
  assert.equal(counts.prefetch.reported, 1, `the worker reported the page: ${JSON.stringify(counts.prefetch)}`);
  const reports = afterPrefetch.cost.reports;
  const taken = reports.quiet + reports.busy + reports.settling + reports.late;
  assert.equal(taken + reports.implausible, 1, `one report reached the node: ${JSON.stringify(afterPrefetch.cost)}`);
  assert.equal(reports.implausible, 0, `the report was plausible: ${JSON.stringify(afterPrefetch.cost)}`);

  // The click on the hinted link: answered by the worker from Cache Storage.
  const demandBefore = afterPrefetch.demand.requests;
  const [response] = await Promise.all([page.waitForNavigation(), page.click('#next')]);
  assert.equal(await page.textContent('#name'), 'b');
  assert.ok(response.fromServiceWorker(), 'the navigation was answered by the worker');
  const state = await page.evaluate(() => window.slipstreamAgent.state());
  assert.ok(state.prefetch.served >= 1, `the worker served a prefetched page: ${JSON.stringify(state.prefetch)}`);
  // Wait for b's own prefetching to settle before reading the server's counts.
  await page.evaluate(() => window.slipstreamAgent.prefetched);
  const after = await node.status();
  assert.equal(after.demand.requests, demandBefore, 'no request for b.html reached the demand server');
});

test('NPS agent: Save-Data turns prefetching off', { timeout: 120000 }, async (t) => {
  const cleanup = new Cleanup();
  t.after(() => cleanup.run());
  const { chromium } = await playwright();
  // The node of the first test (without the cost measurement), whose unlimited budget would
  // prefetch for this page.
  const node = await startNode(cleanup, tempDir(cleanup, 'slipstream-nps-'), UNLIMITED);
  await train(node);
  // A browser whose user asked to save data: every request it sends, the worker's included,
  // says `Save-Data: on`.
  const { page } = await browser(cleanup, chromium, { 'Save-Data': 'on' });
  await page.goto(`${node.origin}/a.html`);
  const counts = await page.evaluate(() => window.slipstreamAgent.prefetched);
  t.diagnostic(`the worker's prefetch record: ${JSON.stringify(counts.prefetch)}`);
  assert.equal(counts.prefetch.fetched, 0, `the worker prefetched nothing: ${JSON.stringify(counts.prefetch)}`);
  const status = await node.status();
  assert.equal(status.prefetch.requests, 0, `no prefetch reached the node: ${JSON.stringify(status.prefetch)}`);
  // Either the worker did not ask (it saw the data saver) or the node answered with nothing.
  assert.equal(counts.prefetch.asked, status.guards.save_data_requests, `every hint request was answered with nothing: ${JSON.stringify(status)}`);
  // The click still loads the next page, from the demand server.
  const demandBefore = status.demand.requests;
  await Promise.all([page.waitForNavigation(), page.click('#next')]);
  assert.equal(await page.textContent('#name'), 'b');
  assert.ok((await node.status()).demand.requests > demandBefore, 'b.html came from the demand server');
});

test('NPS agent: a saturated server gets no prefetch, and a refused Speculation Rules prefetch leaves the click working', { timeout: 120000 }, async (t) => {
  const cleanup = new Cleanup();
  t.after(() => cleanup.run());
  const { chromium } = await playwright();
  const root = tempDir(cleanup, 'slipstream-nps-');
  // Every probe fails (the probed file does not exist): the monitor reads a saturated server.
  const node = await startNode(cleanup, root, [
    'prefetch.probe_path=/missing.html',
    'prefetch.experimental.threshold_ms=2s',
    'prefetch.listen=127.0.0.1:0',
    'prefetch.speculation_rules=true',
    'prefetch.experimental.doc_files=2',
  ]);
  await train(node);
  await waitFor('the budget to fall to nothing', 20000, async () => (await node.status()).budget_per_s < 0.01);
  const { context, page } = await browser(cleanup, chromium);
  const specPrefetches = [];
  context.on('request', (r) => {
    if (r.headers()['sec-purpose']?.includes('prefetch')) specPrefetches.push(r.url());
  });
  const demandBefore = (await node.status()).demand.requests;
  const res = await page.goto(`${node.origin}/a.html`);
  assert.ok((res.headers()['speculation-rules'] ?? '').includes('/_slipstream/speculationrules'), 'the page names its rules');
  // The page itself says the hint server would only say wait (the node is shedding, its budget
  // nothing), so the worker waits without asking first.
  const pageWait = Number(res.headers()['slipstream-hints-wait-ms']);
  assert.ok(pageWait >= 2500 && pageWait <= 5000, `the page's wait: ${res.headers()['slipstream-hints-wait-ms']}`);
  await waitFor('the worker to wait as the page said', 30000, async () => (await page.evaluate(() => window.slipstreamAgent.state())).prefetch.page_waits >= 1);
  const state = (await page.evaluate(() => window.slipstreamAgent.state())).prefetch;
  assert.equal(state.asked_before_page_wait, 0, 'a hint request before the page\'s wait');
  // Chromium prefetches the rules' list natively; the node refuses it.
  await waitFor(`a refused browser prefetch (Chromium sent: ${JSON.stringify(specPrefetches)})`, 30000, async () => (await node.status()).refused_browser_prefetches >= 1);
  const s = await node.status();
  assert.equal(s.prefetch.requests, 0, 'no prefetch was served');
  assert.equal(s.via_listener.requests, 0, 'nothing through the prefetch listener');
  // The click works as if nothing had been prefetched: b.html from the demand server.
  await Promise.all([page.waitForNavigation(), page.click('#next')]);
  assert.equal(await page.textContent('#name'), 'b');
  const after = await node.status();
  assert.equal(after.demand.requests, demandBefore + 2, 'a.html and b.html, both from the demand server');
  assert.equal(after.prefetch.requests, 0);
});
