//! The origin's metrics, in the names the status page reads.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use slipstream_cache::Cache;
use slipstream_http::metrics::{Counter, Histogram, Registry, LATENCY_BUCKETS};

use crate::entry::Entry;
use crate::SharedCache;

#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    by_class: [Arc<Counter>; 5],
    complete_hits: Arc<Counter>,
    incomplete_hits: Arc<Counter>,
    misses: Arc<Counter>,
    memory_bytes: Arc<Counter>,
    disk_bytes: Arc<Counter>,
    latency: Arc<Histogram>,
}

impl Metrics {
    pub(crate) fn new(cache: Option<SharedCache>) -> Metrics {
        let r = Registry::default();
        let req = |class: &str| {
            r.counter(
                "slipstream_requests_total",
                "Responses sent, by status class.",
                &[("status", class)],
            )
        };
        let by_class = [req("1xx"), req("2xx"), req("3xx"), req("4xx"), req("5xx")];
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
        let (m, d) = (memory_bytes.clone(), disk_bytes.clone());
        r.gauge(
            "slipstream_byte_hit_ratio",
            "Bytes sent from memory / file bytes sent (paper 002's BHR).",
            &[],
            move || {
                let (m, d) = (m.get() as f64, d.get() as f64);
                if m + d > 0.0 {
                    m / (m + d)
                } else {
                    0.0
                }
            },
        );
        let latency = r.histogram(
            "slipstream_response_seconds",
            "Time from request to response head.",
            LATENCY_BUCKETS,
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
                "slipstream_cache_free_list_bytes",
                "Bytes held by the free list (002 §4.1.5).",
                |c| c.free_list_bytes() as f64,
            );
            gauge(
                "slipstream_cache_evictions",
                "Entries evicted since start.",
                |c| c.stats().evictions as f64,
            );
            gauge(
                "slipstream_cache_admission_rejects",
                "Inserts refused by the admission rule.",
                |c| c.stats().admission_rejects as f64,
            );
            gauge(
                "slipstream_cache_revived",
                "Entries revived from the free list.",
                |c| c.stats().revived as f64,
            );
        }
        Metrics {
            registry: r,
            by_class,
            complete_hits,
            incomplete_hits,
            misses,
            memory_bytes,
            disk_bytes,
            latency,
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
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.by_class[class].inc();
        self.latency.observe(elapsed);
    }

    pub(crate) fn render(&self) -> String {
        self.registry.render()
    }
}
