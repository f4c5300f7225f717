//! Metrics in the Prometheus text exposition format, served at `/_slipstream/metrics`.
//!
//! A deliberately small registry: counters and histograms are atomics updated on the request
//! path without locks; gauges are closures read at scrape time.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A histogram with fixed bucket upper bounds, in seconds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
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
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

type GaugeFn = Arc<dyn Fn() -> f64 + Send + Sync>;

enum Metric {
    Counter(Arc<Counter>),
    /// A counter kept elsewhere (the cache engine's statistics), read at scrape time.
    CounterFn(GaugeFn),
    Gauge(GaugeFn),
    Histogram(Arc<Histogram>),
}

struct Entry {
    name: String,
    help: String,
    labels: String,
    metric: Metric,
}

/// The metrics of one node.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<Vec<Entry>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("metrics", &self.entries.lock().len())
            .finish()
    }
}

impl Registry {
    /// A new counter. `labels` is a list of `(name, value)` pairs.
    pub fn counter(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Arc<Counter> {
        let c = Arc::new(Counter::default());
        self.push(name, help, labels, Metric::Counter(c.clone()));
        c
    }

    /// A gauge read from `f` at scrape time.
    pub fn gauge(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        f: impl Fn() -> f64 + Send + Sync + 'static,
    ) {
        self.push(name, help, labels, Metric::Gauge(Arc::new(f)));
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
        self.push(name, help, labels, Metric::CounterFn(Arc::new(f)));
    }

    /// A new histogram over `bounds` (seconds).
    pub fn histogram(&self, name: &str, help: &str, bounds: &'static [f64]) -> Arc<Histogram> {
        let h = Arc::new(Histogram::new(bounds));
        self.push(name, help, &[], Metric::Histogram(h.clone()));
        h
    }

    fn push(&self, name: &str, help: &str, labels: &[(&str, &str)], metric: Metric) {
        let labels = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",");
        self.entries.lock().push(Entry {
            name: name.into(),
            help: help.into(),
            labels,
            metric,
        });
    }

    /// The text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let entries = self.entries.lock();
        let mut out = String::with_capacity(4096);
        let mut seen: Vec<&str> = Vec::new();
        for e in entries.iter() {
            if !seen.contains(&e.name.as_str()) {
                seen.push(&e.name);
                let kind = match e.metric {
                    Metric::Counter(_) | Metric::CounterFn(_) => "counter",
                    Metric::Gauge(_) => "gauge",
                    Metric::Histogram(_) => "histogram",
                };
                let _ = writeln!(
                    out,
                    "# HELP {} {}\n# TYPE {} {kind}",
                    e.name, e.help, e.name
                );
                // Emit every entry of the same family together.
                for same in entries.iter().filter(|x| x.name == e.name) {
                    render_one(&mut out, same);
                }
            }
        }
        out
    }
}

fn render_one(out: &mut String, e: &Entry) {
    let braces = |extra: &str| match (e.labels.is_empty(), extra.is_empty()) {
        (true, true) => String::new(),
        (true, false) => format!("{{{extra}}}"),
        (false, true) => format!("{{{}}}", e.labels),
        (false, false) => format!("{{{},{extra}}}", e.labels),
    };
    match &e.metric {
        Metric::Counter(c) => {
            let _ = writeln!(out, "{}{} {}", e.name, braces(""), c.get());
        }
        Metric::Gauge(f) | Metric::CounterFn(f) => {
            let _ = writeln!(out, "{}{} {}", e.name, braces(""), f());
        }
        Metric::Histogram(h) => {
            let mut cumulative = 0;
            for (bound, bucket) in h.bounds.iter().zip(&h.buckets) {
                cumulative += bucket.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "{}_bucket{} {cumulative}",
                    e.name,
                    braces(&format!("le=\"{bound}\""))
                );
            }
            let count = h.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "{}_bucket{} {count}", e.name, braces("le=\"+Inf\""));
            let sum = h.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(out, "{}_sum{} {sum}", e.name, braces(""));
            let _ = writeln!(out, "{}_count{} {count}", e.name, braces(""));
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
        let b = r.counter("x_total", "X things.", &[("kind", "b")]);
        r.gauge("y_ratio", "Y.", &[], || 0.5);
        let h = r.histogram("z_seconds", "Z.", &[0.1, 1.0]);
        a.add(3);
        b.inc();
        h.observe(std::time::Duration::from_millis(50));
        h.observe(std::time::Duration::from_secs(5));
        let text = r.render();
        assert_eq!(text.matches("# TYPE x_total counter").count(), 1);
        assert!(text.contains("x_total{kind=\"a\"} 3\n"));
        assert!(text.contains("x_total{kind=\"b\"} 1\n"));
        assert!(text.contains("y_ratio 0.5\n"));
        assert!(text.contains("z_seconds_bucket{le=\"0.1\"} 1\n"));
        assert!(text.contains("z_seconds_bucket{le=\"1\"} 1\n"));
        assert!(text.contains("z_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("z_seconds_count 2\n"));
    }
}
