// Registers the Web++ agent (sw.js) for the whole origin and hands it this page's replica block,
// which the worker could not read itself if it did not yet control the page (the first visit)
// or the page came from the browser's cache. A classic script, loaded with `defer` from the
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
      if (block) return ask(registration.active, { type: 'slipstream-page', block: block.textContent }).then(function () {
        return registration;
      });
      return registration;
    });

  window.slipstreamAgent = {
    /** Resolves once the worker is active and has this page's block. */
    ready: ready,
    /** The worker's state: instance, latency table, sample counts, probe schedule. */
    state: function () {
      return ready.then(function (registration) {
        return ask(registration.active, { type: 'slipstream-state' });
      });
    },
  };
})();
