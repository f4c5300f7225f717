//! The result of a run: counts, errors by kind, bytes and the latency histogram,
//! with a human summary ([`std::fmt::Display`]) and a JSON form.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;

/// Results of one [`crate::run`].
#[derive(Debug, Clone)]
pub struct Report {
    /// From the start of the run until the last in-flight request finished.
    pub elapsed: Duration,
    /// Requests answered with a 2xx or 3xx status and read in full.
    pub completed: u64,
    /// Failed requests by kind: `"status 404"`, `"timeout"`, `"connect"`, `"io"`, `"overload"`.
    pub errors: BTreeMap<String, u64>,
    /// Response body bytes received (error responses included).
    pub bytes: u64,
    /// Latency of completed requests in microseconds (1 µs..60 s, 3 significant
    /// figures). Closed loop: from just before the send (including a reconnect if
    /// one was needed) to the end of the body; open loop: from the scheduled send time.
    pub latency_us: Histogram<u64>,
}

/// Percentiles shown and exported, with their labels.
const PERCENTILES: [(&str, f64); 4] =
    [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9)];

impl Report {
    /// Completed requests per second of elapsed time.
    pub fn throughput_rps(&self) -> f64 {
        per_second(self.completed as f64, self.elapsed)
    }

    /// Body megabytes (10^6 bytes) per second of elapsed time.
    pub fn megabytes_per_s(&self) -> f64 {
        per_second(self.bytes as f64 / 1e6, self.elapsed)
    }

    /// Total number of failed requests, all kinds together.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Machine-readable form. Latencies are in milliseconds under `latency_ms`
    /// with keys `p50`, `p90`, `p99`, `p99.9`, `max`, `mean`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut latency = serde_json::Map::new();
        for (label, q) in PERCENTILES {
            latency.insert(
                label.to_owned(),
                json!(ms(self.latency_us.value_at_quantile(q / 100.0) as f64)),
            );
        }
        latency.insert("max".to_owned(), json!(ms(self.latency_us.max() as f64)));
        latency.insert("mean".to_owned(), json!(ms(self.latency_us.mean())));
        json!({
            "elapsed_s": self.elapsed.as_secs_f64(),
            "completed": self.completed,
            "error_count": self.error_count(),
            "errors": self.errors,
            "bytes": self.bytes,
            "throughput_rps": self.throughput_rps(),
            "megabytes_per_s": self.megabytes_per_s(),
            "latency_ms": latency,
        })
    }
}

fn per_second(amount: f64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        amount / secs
    } else {
        0.0
    }
}

fn ms(us: f64) -> f64 {
    us / 1000.0
}

impl fmt::Display for Report {
    /// One row per figure: a label column, a right-aligned value column, a unit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut row = |label: &str, value: String, unit: &str| {
            let line = format!("{label:<14}{value:>12}  {unit}");
            writeln!(f, "{}", line.trim_end())
        };
        let errors = self.error_count();
        row(
            "requests",
            (self.completed + errors).to_string(),
            &format!(
                "({} completed, {} errors in {:.3} s)",
                self.completed,
                errors,
                self.elapsed.as_secs_f64()
            ),
        )?;
        for (kind, count) in &self.errors {
            row(&format!("  {kind}"), count.to_string(), "")?;
        }
        row(
            "throughput",
            format!("{:.1}", self.throughput_rps()),
            "req/s",
        )?;
        row(
            "",
            format!("{:.2}", self.megabytes_per_s()),
            &format!("MB/s ({} body bytes)", self.bytes),
        )?;
        let h = &self.latency_us;
        if h.is_empty() {
            return row("latency", "-".to_owned(), "(no completed requests)");
        }
        row("latency", String::new(), "")?;
        for (label, q) in PERCENTILES {
            row(
                &format!("  {label}"),
                format!("{:.3}", ms(h.value_at_quantile(q / 100.0) as f64)),
                "ms",
            )?;
        }
        row("  max", format!("{:.3}", ms(h.max() as f64)), "ms")?;
        row("  mean", format!("{:.3}", ms(h.mean())), "ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::new_histogram;

    fn sample() -> Report {
        let mut latency_us = new_histogram();
        for us in 1..=1000 {
            latency_us.record(us * 10).unwrap();
        }
        Report {
            elapsed: Duration::from_secs(2),
            completed: 1000,
            errors: BTreeMap::from([("status 404".to_owned(), 4), ("timeout".to_owned(), 1)]),
            bytes: 2_000_000,
            latency_us,
        }
    }

    #[test]
    fn rates_and_json() {
        let r = sample();
        assert_eq!(r.throughput_rps(), 500.0);
        assert_eq!(r.megabytes_per_s(), 1.0);
        assert_eq!(r.error_count(), 5);
        let j = r.to_json();
        assert_eq!(j["errors"]["status 404"], 4);
        let p50 = j["latency_ms"]["p50"].as_f64().unwrap();
        assert!((4.9..5.1).contains(&p50), "{p50}");
        let max = j["latency_ms"]["max"].as_f64().unwrap();
        assert!((9.9..10.1).contains(&max), "{max}");
        assert!(j["latency_ms"]["p99.9"].is_number());
        assert!(j["latency_ms"]["mean"].is_number());
    }

    #[test]
    fn display_lists_errors_and_percentiles() {
        let text = sample().to_string();
        for needle in [
            "1005",
            "status 404",
            "timeout",
            "req/s",
            "MB/s",
            "p99.9",
            "mean",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        let empty = Report {
            latency_us: new_histogram(),
            completed: 0,
            ..sample()
        };
        assert!(empty.to_string().contains("no completed requests"));
    }
}
