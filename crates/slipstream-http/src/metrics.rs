//! Metrics in the OpenMetrics text format, served at `/_slipstream/metrics`, kept and encoded by
//! the `prometheus-client` crate.
//!
//! This module keeps a small API over it: counters and histograms are atomics updated on the
//! request path without locks; gauges, and counters kept elsewhere (the cache engine's
//! statistics), are closures read at scrape time by a [`Collector`]. Counters are named with
//! `_total`, as they appear on the wire; the crate adds that suffix to a counter's family name,
//! so it is taken off when registering (the `# TYPE` line names the family without it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::{ConstCounter, Counter as Count};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// The content type of [`Registry::render`]'s output (OpenMetrics 1.0 text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A monotonically increasing count.
#[derive(Debug, Default, Clone)]
pub struct Counter(Count);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.inc_by(n);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.0.inc();
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// A histogram with fixed bucket upper bounds, in seconds: atomics updated without a lock (the
/// `prometheus-client` histogram takes a mutex per observation, and every response of every
/// node is observed), encoded by the crate at scrape time.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then one for `+Inf`; not cumulative.
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// Latency buckets from 50 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

impl Histogram {
    /// A histogram over `bounds` (ascending upper bounds in seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(self.bounds.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// A registered histogram: the registry holds it shared with the code that observes.
#[derive(Debug)]
struct SharedHistogram(Arc<Histogram>);

impl EncodeMetric for SharedHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = &self.0;
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(h.buckets.iter().map(|b| b.load(Ordering::Relaxed)))
            .collect();
        let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            sum,
            h.count(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

type ReadFn = Arc<dyn Fn() -> f64 + Send + Sync>;
type Labels = Vec<(String, String)>;

/// A value read at scrape time.
struct Read {
    name: String,
    help: String,
    labels: Labels,
    counter: bool,
    f: ReadFn,
}

/// Encodes the values read at scrape time, each name's series together under one descriptor.
#[derive(Clone, Default)]
struct ReadAtScrape(Arc<Mutex<Vec<Read>>>);

impl std::fmt::Debug for ReadAtScrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAtScrape")
            .field("series", &self.0.lock().len())
            .finish()
    }
}

impl Collector for ReadAtScrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let reads = self.0.lock();
        let mut done: Vec<&str> = Vec::new();
        for first in reads.iter() {
            if done.contains(&first.name.as_str()) {
                continue;
            }
            done.push(&first.name);
            let (name, kind) = if first.counter {
                (family_name(&first.name), MetricType::Counter)
            } else {
                (first.name.as_str(), MetricType::Gauge)
            };
            let mut family = encoder.encode_descriptor(name, &first.help, None, kind)?;
            if first.labels.is_empty() {
                // One series without labels, written without braces.
                write(first.counter, (first.f)(), family)?;
                continue;
            }
            for r in reads.iter().filter(|r| r.name == first.name) {
                write(r.counter, (r.f)(), family.encode_family(&r.labels)?)?;
            }
        }
        Ok(())
    }
}

/// One series' value, as a counter or a gauge.
/// Whole values (byte counts, objects, up/down) are written as integers, as they were before
/// this module used `prometheus-client`, so scripts reading them see `42`, not `42.0`.
fn write(counter: bool, value: f64, series: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
    // Below 2^53 every whole f64 is exact as an integer.
    let whole = value.fract() == 0.0 && value.abs() < 9_007_199_254_740_992.0;
    match (counter, whole) {
        (true, true) if value >= 0.0 => ConstCounter::new(value as u64).encode(series),
        (true, _) => ConstCounter::new(value).encode(series),
        (false, true) => ConstGauge::new(value as i64).encode(series),
        (false, false) => ConstGauge::new(value).encode(series),
    }
}

/// A counter's family name: its wire name without `_total`, which the encoder adds back.
fn family_name(name: &str) -> &str {
    name.strip_suffix("_total").unwrap_or(name)
}

struct Inner {
    registry: prometheus_client::registry::Registry,
    /// Labelled counters by wire name, so that a name registered again adds a series.
    families: HashMap<String, Family<Labels, Count>>,
    reads: ReadAtScrape,
}

/// The metrics of one node.
pub struct Registry {
    inner: Mutex<Inner>,
}

impl Default for Registry {
    fn default() -> Self {
        let reads = ReadAtScrape::default();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(reads.clone()));
        Registry {
            inner: Mutex::new(Inner {
                registry,
                families: HashMap::new(),
                reads,
            }),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("Registry")
            .field("counter_families", &inner.families.len())
            .field("read_at_scrape", &inner.reads)
            .finish()
    }
}

/// `prometheus-client` ends every help text with a period; ours already do.
fn help_text(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
}

fn owned(labels: &[(&str, &str)]) -> Labels {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl Registry {
    /// A counter named `name` (ending in `_total`). `labels` is a list of `(name, value)` pairs;
    /// registering the same name with other labels adds a series to it.
    pub fn counter(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Arc<Counter> {
        let mut inner = self.inner.lock();
        if labels.is_empty() {
            let c = Counter::default();
            inner
                .registry
                .register(family_name(name), help_text(help), c.0.clone());
            return Arc::new(c);
        }
        let family = match inner.families.get(name) {
            Some(f) => f.clone(),
            None => {
                let f = Family::<Labels, Count>::default();
                inner
                    .registry
                    .register(family_name(name), help_text(help), f.clone());
                inner.families.insert(name.to_owned(), f.clone());
                f
            }
        };
        let series = family.get_or_create(&owned(labels)).clone();
        Arc::new(Counter(series))
    }

    /// A gauge read from `f` at scrape time.
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        f: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        self.read(name, help, labels, false, Arc::new(f));
    }

    /// A counter whose value `f` reads at scrape time from where it is kept; `name` should end
    /// in `_total`, and `f` must never decrease.
    pub fn counter_fn(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        f: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        self.read(name, help, labels, true, Arc::new(f));
    }

    fn read(&self, name: &str, help: &str, labels: &[(&str, &str)], counter: bool, f: ReadFn) {
        let inner = self.inner.lock();
        inner.reads.0.lock().push(Read {
            name: name.to_owned(),
            help: help.to_owned(),
            labels: owned(labels),
            counter,
            f,
        });
    }

    /// A new histogram over `bounds` (seconds).
    pub fn histogram(&self, name: &str, help: &str, bounds: &'static [f64]) -> Arc<Histogram> {
        let h = Arc::new(Histogram::new(bounds));
        self.inner
            .lock()
            .registry
            .register(name, help_text(help), SharedHistogram(h.clone()));
        h
    }

    /// The OpenMetrics text format (served as [`CONTENT_TYPE`]), ending with `# EOF`.
    pub fn render(&self) -> String {
        let inner = self.inner.lock();
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail, and our collector returns only the encoder's errors.
        let _ = prometheus_client::encoding::text::encode(&mut out, &inner.registry);
        out
    }
}

/// What every node counts about its responses: how many, by status class, and how long each
/// took to its head. Registered under the names the status page reads.
#[derive(Debug)]
pub struct Responses {
    by_class: [Arc<Counter>; 5],
    latency: Arc<Histogram>,
}

impl Responses {
    /// Registers `slipstream_requests_total{status}` and `slipstream_response_seconds`.
    pub fn register(r: &Registry) -> Responses {
        let class = |c: &str| {
            r.counter(
                "slipstream_requests_total",
                "Responses sent, by status class.",
                &[("status", c)],
            )
        };
        Responses {
            by_class: [
                class("1xx"),
                class("2xx"),
                class("3xx"),
                class("4xx"),
                class("5xx"),
            ],
            latency: r.histogram(
                "slipstream_response_seconds",
                "Time from request to response head.",
                LATENCY_BUCKETS,
            ),
        }
    }

    /// Counts one response.
    pub fn observe(&self, status: http::StatusCode, elapsed: std::time::Duration) {
        let class = (status.as_u16() / 100).clamp(1, 5) as usize - 1;
        self.by_class[class].inc();
        self.latency.observe(elapsed);
    }
}

/// `slipstream_byte_hit_ratio`: bytes from memory over all bytes sent, from two counters.
pub fn byte_hit_ratio(r: &Registry, help: &str, memory: Arc<Counter>, other: Arc<Counter>) {
    r.gauge("slipstream_byte_hit_ratio", help, &[], move || {
        let (m, o) = (memory.get() as f64, other.get() as f64);
        if m + o > 0.0 {
            m / (m + o)
        } else {
            0.0
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_format() {
        let r = Registry::default();
        let a = r.counter("x_total", "X things.", &[("kind", "a")]);
        let b = r.counter("x_total", "X things.", &[("kind", "b\"q")]);
        r.gauge("y_ratio", "Y.", &[], || 0.5);
        r.gauge("up", "Up.", &[("peer", "p1")], || 1.0);
        r.gauge("up", "Up.", &[("peer", "p2")], || 0.0);
        r.counter_fn("kept_total", "Kept elsewhere.", &[], || 7.0);
        let h = r.histogram("z_seconds", "Z.", &[0.1, 1.0]);
        a.add(3);
        b.inc();
        h.observe(std::time::Duration::from_millis(50));
        h.observe(std::time::Duration::from_secs(5));
        let text = r.render();
        println!("{text}");
        // OpenMetrics: a counter's family is named without `_total`, its samples with it.
        assert_eq!(text.matches("# TYPE x counter").count(), 1, "{text}");
        assert_eq!(text.matches("# HELP x X things.\n").count(), 1, "{text}");
        assert!(text.contains("x_total{kind=\"a\"} 3\n"), "{text}");
        assert!(text.contains("x_total{kind=\"b\\\"q\"} 1\n"), "{text}");
        assert!(
            text.contains("# TYPE y_ratio gauge\ny_ratio 0.5\n"),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE up gauge").count(), 1, "{text}");
        assert!(
            text.contains("up{peer=\"p1\"} 1\nup{peer=\"p2\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE kept counter\nkept_total 7\n"),
            "{text}"
        );
        assert!(text.contains("z_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("z_seconds_bucket{le=\"1.0\"} 1\n"), "{text}");
        assert!(text.contains("z_seconds_bucket{le=\"+Inf\"} 2\n"), "{text}");
        assert!(text.contains("z_seconds_count 2\n"), "{text}");
        assert_eq!(h.count(), 2);
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
