// Registers the Web++ agent (sw.js) for the whole origin and hands it this page's replica block
// when the worker could not read it itself: the page was loaded without going through the worker
// (the first visit, before it controlled the page, or a page a worker took over only after it
// was loaded). A page whose navigation the worker answered is not posted: the worker learnt its
// block from the response already (sw.js, `handle`), and posting it again would parse and learn
// every block twice per page and write the state once more for nothing. A classic script, loaded with `defer` from the
// head of every page a cluster node serves (/_slipstream/agent/register.js); the worker is
// ../sw.js beside this directory. Without JavaScript or Service Workers the page's plain URLs
// keep working (001 §3.3).
//
// `window.slipstreamAgent.state()` resolves to the worker's latency table (the message
// table.html and the browser tests read).
(function () {
  'use strict';
  if (!('serviceWorker' in navigator)) return;
  var script = document.currentScript;
  // The node's prefetch listener, as the munger names it (data-prefetch-base): the worker's
  // first hint request for this page goes there, not to the demand server.
  var prefetchBase = (script && script.getAttribute('data-prefetch-base')) || null;
  // The wait before the first hint request when the node's hint server would only say wait
  // (data-hints-wait-ms: no budget now, or shedding); the worker reads it.
  var hintsWait = (script && script.getAttribute('data-hints-wait-ms')) || null;
  var hintsWaitAt = (script && script.getAttribute('data-hints-wait-at')) || null;
  // When the node served this page (data-served-ms, with its cost measurement on): the
  // worker reports it with the page's response time on its first hint request.
  var servedMs = (script && script.getAttribute('data-served-ms')) || null;
  // Whether the node prefetches: its munger announces it on this script tag (any of the
  // attributes above, or a bare data-prefetch). Without it the worker sends no hint request.
  var prefetchAnnounced = !!(prefetchBase || hintsWait || servedMs || (script && script.hasAttribute('data-prefetch')));
  var swUrl = new URL('../sw.js', (script && script.src) || location.href).href;
  // Whether a worker answered this page's navigation: Navigation Timing's workerStart is 0
  // unless a service worker handled the request, and the page is controlled from its start.
  var nav = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
  var seenByWorker = navigator.serviceWorker.controller !== null && !!nav && nav.workerStart > 0;

  function ask(worker, message) {
    return new Promise(function (resolve) {
      var channel = new MessageChannel();
      channel.port1.onmessage = function (event) {
        resolve(event.data);
      };
      worker.postMessage(message, [channel.port2]);
    });
  }

  // updateViaCache 'all': the browser's update checks of the worker and its modules may use
  // the HTTP cache (the node serves them with max-age=300 and an ETag), rather than
  // re-fetching the worker's script and modules on every navigation.
  var ready = navigator.serviceWorker
    .register(swUrl, { scope: '/', type: 'module', updateViaCache: 'all' })
    .then(function () {
      return navigator.serviceWorker.ready;
    })
    .then(function (registration) {
      // The server appends its block after anything the page holds: the last one counts.
      var blocks = document.querySelectorAll('script#slipstream-replicas');
      var block = blocks[blocks.length - 1];
      if (block && !seenByWorker) return ask(registration.active, { type: 'slipstream-page', block: block.textContent }).then(function () {
        return registration;
      });
      return registration;
    });

  // NPS (paper 000 §5, §6.1): once the page has loaded and the browser is idle, the worker is
  // asked to prefetch for it, with the page's own bytes (the allowance is proportional to
  // them) and the page before it on this site (the hint server's context).
  function pageBytes() {
    var total = nav ? nav.transferSize || nav.encodedBodySize || 0 : 0;
    var entries = (performance.getEntriesByType && performance.getEntriesByType('resource')) || [];
    for (var i = 0; i < entries.length; i++) total += entries[i].transferSize || entries[i].encodedBodySize || 0;
    return total;
  }
  function navigationTiming() {
    var nav = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
    return nav ? { requestStart: nav.requestStart, responseEnd: nav.responseEnd, transferSize: nav.transferSize } : null;
  }
  function previousPage() {
    try {
      var r = document.referrer ? new URL(document.referrer) : null;
      return r && r.origin === location.origin ? r.pathname + r.search : null;
    } catch (e) {
      return null;
    }
  }
  var prefetched = new Promise(function (resolve) {
    if (!prefetchAnnounced) {
      resolve(null);
      return;
    }
    function go() {
      ready.then(function (registration) {
        return ask(registration.active, {
          type: 'slipstream-prefetch',
          announced: true,
          url: location.pathname + location.search,
          prev: previousPage(),
          demandBytes: pageBytes(),
          base: prefetchBase,
          hintsWait: hintsWait,
          hintsWaitAt: hintsWaitAt,
          servedMs: servedMs,
          navigation: navigationTiming(),
        });
      }).then(resolve, function () {
        resolve(null);
      });
    }
    function idle() {
      if (window.requestIdleCallback) window.requestIdleCallback(go, { timeout: 2000 });
      else setTimeout(go, 200);
    }
    if (document.readyState === 'complete') idle();
    else window.addEventListener('load', idle);
  });

  window.slipstreamAgent = {
    /**
     * Resolves with the worker's prefetch counts once it has prefetched for this page, or with
     * null at once when the node does not announce prefetching.
     */
    prefetched: prefetched,
    /** Resolves once the worker is active and has this page's block (or read it itself). */
    ready: ready,
    /** The worker's state: instance, latency table, sample counts, probe schedule. */
    state: function () {
      return ready.then(function (registration) {
        return ask(registration.active, { type: 'slipstream-state' });
      });
    },
  };
})();
