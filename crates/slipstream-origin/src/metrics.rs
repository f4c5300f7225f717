//! The origin's metrics, in the names the status page reads.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use slipstream_cache::Cache;
use slipstream_http::metrics::{self, Counter, Registry, Responses};

use crate::entry::Entry;
use crate::SharedCache;

#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) registry: Arc<Registry>,
    responses: Responses,
    complete_hits: Arc<Counter>,
    incomplete_hits: Arc<Counter>,
    misses: Arc<Counter>,
    memory_bytes: Arc<Counter>,
    disk_bytes: Arc<Counter>,
}

impl Metrics {
    pub(crate) fn new(cache: Option<SharedCache>) -> Metrics {
        let r = Arc::new(Registry::default());
        let responses = Responses::register(&r);
        let outcome = |o: &str| {
            r.counter(
                "slipstream_cache_requests_total",
                "File requests by cache outcome.",
                &[("outcome", o)],
            )
        };
        let (complete_hits, incomplete_hits, misses) = (
            outcome("complete_hit"),
            outcome("incomplete_hit"),
            outcome("miss"),
        );
        let bytes = |s: &str| {
            r.counter(
                "slipstream_response_bytes_total",
                "File bytes sent, by where they came from.",
                &[("source", s)],
            )
        };
        let (memory_bytes, disk_bytes) = (bytes("memory"), bytes("disk"));
        metrics::byte_hit_ratio(
            &r,
            "Bytes sent from memory / file bytes sent (paper 002's BHR).",
            memory_bytes.clone(),
            disk_bytes.clone(),
        );
        if let Some(cache) = cache {
            let gauge = |name: &str, help: &str, f: fn(&Cache<String, Arc<Entry>>) -> f64| {
                let c = cache.clone();
                r.gauge(name, help, &[], move || f(&c.lock()));
            };
            gauge(
                "slipstream_cache_used_bytes",
                "Bytes held by cached entries.",
                |c| c.used_bytes() as f64,
            );
            gauge("slipstream_cache_capacity_bytes", "Cache capacity.", |c| {
                c.config().capacity_bytes as f64
            });
            gauge(
                "slipstream_cache_tracked_objects",
                "Objects the cache keeps a header for (frequency counts included).",
                |c| c.tracked() as f64,
            );
            gauge(
                "slipstream_cache_free_list_bytes",
                "Bytes held by the free list (002 §4.1.5).",
                |c| c.free_list_bytes() as f64,
            );
            let counter = |name: &str, help: &str, f: fn(&Cache<String, Arc<Entry>>) -> f64| {
                let c = cache.clone();
                r.counter_fn(name, help, &[], move || f(&c.lock()));
            };
            counter(
                "slipstream_cache_evictions_total",
                "Entries evicted since start.",
                |c| c.stats().evictions as f64,
            );
            counter(
                "slipstream_cache_admission_rejects_total",
                "Inserts refused by the admission rule.",
                |c| c.stats().admission_rejects as f64,
            );
            counter(
                "slipstream_cache_revived_total",
                "Entries revived from the free list.",
                |c| c.stats().revived as f64,
            );
        }
        Metrics {
            registry: r,
            responses,
            complete_hits,
            incomplete_hits,
            misses,
            memory_bytes,
            disk_bytes,
        }
    }

    pub(crate) fn hit(&self, complete: bool) {
        if complete {
            self.complete_hits.inc();
        } else {
            self.incomplete_hits.inc();
        }
    }

    pub(crate) fn miss(&self) {
        self.misses.inc();
    }

    pub(crate) fn bytes(&self, memory: u64, disk: u64) {
        if memory > 0 {
            self.memory_bytes.add(memory);
        }
        if disk > 0 {
            self.disk_bytes.add(disk);
        }
    }

    pub(crate) fn response(&self, status: StatusCode, elapsed: Duration) {
        self.responses.observe(status, elapsed);
    }
}
