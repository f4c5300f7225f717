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

  var ready = navigator.serviceWorker
    .register(swUrl, { scope: '/', type: 'module' })
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

  window.slipstreamAgent = {
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
