//! Shared accounting of a run: counters readable without locking for progress,
//! and the latency histogram and error table behind a short-held mutex.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::{Progress, Report};

/// Why a request did not complete. Labels are the keys of [`Report::errors`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The server answered with a status other than 2xx/3xx.
    Status(u16),
    /// The request (including connect and body read) exceeded the plan's timeout.
    Timeout,
    /// TCP connect or the HTTP handshake failed.
    Connect,
    /// The connection failed while sending or receiving.
    Io,
    /// Open loop only: the arrival found `max_in_flight` requests outstanding.
    Overload,
}

impl ErrorKind {
    pub(crate) fn label(self) -> String {
        match self {
            ErrorKind::Status(code) => format!("status {code}"),
            ErrorKind::Timeout => "timeout".to_owned(),
            ErrorKind::Connect => "connect".to_owned(),
            ErrorKind::Io => "io".to_owned(),
            ErrorKind::Overload => "overload".to_owned(),
        }
    }
}

/// Lowest and highest trackable latency, in microseconds, and the precision.
const LOWEST_US: u64 = 1;
const HIGHEST_US: u64 = 60_000_000;
const SIG_FIGS: u8 = 3;

pub(crate) fn new_histogram() -> Histogram<u64> {
    // The bounds are constants known to be valid, so this cannot fail.
    Histogram::new_with_bounds(LOWEST_US, HIGHEST_US, SIG_FIGS).expect("valid histogram bounds")
}

#[derive(Debug)]
pub(crate) struct Recorder {
    completed: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
    tables: Mutex<Tables>,
}

#[derive(Debug)]
struct Tables {
    latency_us: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            completed: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            tables: Mutex::new(Tables {
                latency_us: new_histogram(),
                errors: BTreeMap::new(),
            }),
        }
    }

    /// A 2xx/3xx response whose body (`body_bytes` long) was read in full.
    /// Only these contribute to the latency histogram.
    pub(crate) fn success(&self, latency: Duration, body_bytes: u64) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(LOWEST_US);
        // Latencies beyond the top of the range are clamped rather than dropped.
        self.tables().latency_us.saturating_record(us);
        self.bytes.fetch_add(body_bytes, Ordering::Relaxed);
        self.completed.fetch_add(1, Ordering::Relaxed);
    }

    /// A failed request; `body_bytes` is what was received of an error response's body.
    pub(crate) fn error(&self, kind: ErrorKind, body_bytes: u64) {
        *self.tables().errors.entry(kind.label()).or_insert(0) += 1;
        self.bytes.fetch_add(body_bytes, Ordering::Relaxed);
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn progress(&self, elapsed: Duration) -> Progress {
        Progress {
            elapsed,
            completed: self.completed.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn report(&self, elapsed: Duration) -> Report {
        let tables = self.tables();
        Report {
            elapsed,
            completed: self.completed.load(Ordering::Relaxed),
            errors: tables.errors.clone(),
            bytes: self.bytes.load(Ordering::Relaxed),
            latency_us: tables.latency_us.clone(),
        }
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic elsewhere while holding the lock leaves counts that are still
        // meaningful, so poisoning is ignored.
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_is_exact() {
        let r = Recorder::new();
        r.success(Duration::from_millis(2), 100);
        r.success(Duration::from_secs(3600), 1);
        r.error(ErrorKind::Status(404), 9);
        r.error(ErrorKind::Status(404), 0);
        r.error(ErrorKind::Overload, 0);
        let report = r.report(Duration::from_secs(1));
        assert_eq!(report.completed, 2);
        assert_eq!(report.bytes, 110);
        assert_eq!(report.errors["status 404"], 2);
        assert_eq!(report.errors["overload"], 1);
        assert_eq!(report.error_count(), 3);
        assert_eq!(report.latency_us.len(), 2);
        assert_eq!(r.progress(Duration::ZERO).errors, 3);
    }
}
