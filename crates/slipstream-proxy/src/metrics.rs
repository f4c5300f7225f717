//! The proxy's metrics, in the names the status page reads, plus upstream and parent health.

use std::sync::{Arc, Weak};
use std::time::Duration;

use http::StatusCode;
use slipstream_http::metrics::{self, Counter, Registry, Responses};

use crate::upstream::{UpstreamError, Upstreams};
use crate::Inner;

#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) registry: Arc<Registry>,
    responses: Responses,
    hits: Arc<Counter>,
    incomplete_hits: Arc<Counter>,
    misses: Arc<Counter>,
    revalidated: Arc<Counter>,
    collapsed: Arc<Counter>,
    memory_bytes: Arc<Counter>,
    upstream_bytes: Arc<Counter>,
    connect_errors: Arc<Counter>,
    timeouts: Arc<Counter>,
    protocol_errors: Arc<Counter>,
    skipped: [Arc<Counter>; 3],
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Arc::new(Registry::default());
        let responses = Responses::register(&r);
        let outcome = |o: &str| {
            r.counter(
                "slipstream_cache_requests_total",
                "Requests by cache outcome.",
                &[("outcome", o)],
            )
        };
        let incomplete_hits = outcome("incomplete_hit");
        let (hits, misses, revalidated, collapsed) = (
            outcome("complete_hit"),
            outcome("miss"),
            outcome("revalidated"),
            outcome("collapsed"),
        );
        let bytes = |s: &str| {
            r.counter(
                "slipstream_response_bytes_total",
                "Body bytes sent, by where they came from.",
                &[("source", s)],
            )
        };
        let (memory_bytes, upstream_bytes) = (bytes("memory"), bytes("upstream"));
        metrics::byte_hit_ratio(
            &r,
            "Bytes sent from the cache / bytes sent.",
            memory_bytes.clone(),
            upstream_bytes.clone(),
        );
        let err = |kind: &str| {
            r.counter(
                "slipstream_upstream_errors_total",
                "Failed upstream exchanges, by kind.",
                &[("kind", kind)],
            )
        };
        let (connect_errors, timeouts, protocol_errors) =
            (err("connect"), err("timeout"), err("protocol"));
        let skip = |reason: &str| {
            r.counter(
                "slipstream_store_skipped_total",
                "Cacheable responses streamed without being stored, by reason (large: past \
                 max_object_bytes; slow: past the store deadline; budget: no room in \
                 inflight_bytes).",
                &[("reason", reason)],
            )
        };
        let skipped = [skip("large"), skip("slow"), skip("budget")];
        Metrics {
            skipped,
            registry: r,
            responses,
            hits,
            incomplete_hits,
            misses,
            revalidated,
            collapsed,
            memory_bytes,
            upstream_bytes,
            connect_errors,
            timeouts,
            protocol_errors,
        }
    }
}

impl Metrics {
    /// Gauges that read the proxy's state at scrape time.
    pub(crate) fn register(&self, inner: &Arc<Inner>) {
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_cache_used_bytes",
            "Bytes held by stored responses.",
            &[],
            move || {
                w.upgrade()
                    .and_then(|i| i.store.as_ref().map(|s| s.usage().0 as f64))
                    .unwrap_or(0.0)
            },
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_cache_capacity_bytes",
            "Cache capacity.",
            &[],
            move || {
                w.upgrade()
                    .and_then(|i| i.store.as_ref().map(|s| s.usage().1 as f64))
                    .unwrap_or(0.0)
            },
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_cache_tracked_objects",
            "Objects the cache keeps a header for (frequency counts included).",
            &[],
            move || {
                w.upgrade()
                    .and_then(|i| i.store.as_ref().map(|s| s.tracked() as f64))
                    .unwrap_or(0.0)
            },
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_surrogate_keys",
            "Distinct surrogate keys indexed (keys of stored entries only).",
            &[],
            move || {
                w.upgrade()
                    .and_then(|i| i.store.as_ref().map(|s| s.surrogate_index().1 as f64))
                    .unwrap_or(0.0)
            },
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_inflight_bytes",
            "Bytes buffered for responses under way, charged to inflight_bytes.",
            &[],
            move || w.upgrade().map_or(0.0, |i| i.inflight.used() as f64),
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_inflight_limit_bytes",
            "The bound on bytes buffered for responses under way (inflight_bytes).",
            &[],
            move || w.upgrade().map_or(0.0, |i| i.inflight.limit() as f64),
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_collapsed_in_flight",
            "Upstream fetches other requests are waiting for.",
            &[],
            move || w.upgrade().map_or(0.0, |i| i.collapser.in_flight() as f64),
        );
        let w = weak.clone();
        self.registry.gauge(
            "slipstream_collapsed_waiting",
            "Requests waiting for another request's upstream fetch.",
            &[],
            move || w.upgrade().map_or(0.0, |i| i.collapser.waiting() as f64),
        );
        let parents = |u: &Upstreams| u.parent_health();
        let origins = |u: &Upstreams| u.origin_health();
        for (metric, help, label, health) in [
            (
                "slipstream_parent_up",
                "1 when the parent proxy is in use, 0 while skipped after a failure.",
                "parent",
                parents as fn(&Upstreams) -> Vec<(String, bool)>,
            ),
            (
                "slipstream_origin_up",
                "1 when the origin server is in use, 0 while skipped after a failure.",
                "origin",
                origins,
            ),
        ] {
            for (name, _) in health(&inner.upstreams) {
                let w = weak.clone();
                let value = name.clone();
                self.registry
                    .gauge(metric, help, &[(label, &value)], move || {
                        w.upgrade()
                            .and_then(|inner| {
                                health(&inner.upstreams)
                                    .iter()
                                    .find(|(n, _)| *n == name)
                                    .map(|(_, up)| f64::from(u8::from(*up)))
                            })
                            .unwrap_or(0.0)
                    });
            }
        }
    }

    pub(crate) fn hit(&self, bytes: usize) {
        self.hits.inc();
        self.memory_bytes.add(bytes as u64);
    }

    /// A hit on an incomplete entry: `chunk` bytes from memory, `rest` from upstream.
    pub(crate) fn incomplete_hit(&self, chunk: usize, rest: u64) {
        self.incomplete_hits.inc();
        self.memory_bytes.add(chunk as u64);
        self.upstream_bytes.add(rest);
    }

    pub(crate) fn miss(&self, bytes: usize) {
        self.misses.inc();
        self.upstream_bytes.add(bytes as u64);
    }

    /// A cacheable response streamed without being stored.
    pub(crate) fn skipped(&self, why: crate::inflight::Skip) {
        use crate::inflight::Skip;
        let i = match why {
            Skip::Large => 0,
            Skip::Slow => 1,
            Skip::Budget => 2,
        };
        self.skipped[i].inc();
    }

    pub(crate) fn revalidated(&self) {
        self.revalidated.inc();
    }

    pub(crate) fn collapsed(&self) {
        self.collapsed.inc();
    }

    pub(crate) fn upstream_error(&self, e: &UpstreamError) {
        match e {
            UpstreamError::Connect { .. } => self.connect_errors.inc(),
            UpstreamError::Timeout { .. } => self.timeouts.inc(),
            UpstreamError::Refused { .. } => {}
            UpstreamError::Protocol { .. } | UpstreamError::NoUpstream => {
                self.protocol_errors.inc()
            }
        }
    }

    pub(crate) fn response(&self, status: StatusCode, elapsed: Duration) {
        self.responses.observe(status, elapsed);
    }
}
