//! A WebStone-like HTTP load generator.
//!
//! The generator ([`run`]) drives a [`Plan`] against one origin: a closed loop of
//! clients that each own a keep-alive connection, or an open loop of arrivals at a
//! constant rate whose latency is measured from the scheduled send time (so a slow
//! server cannot hide its queueing delay: no coordinated omission). Every run is
//! bounded both by a request count and by a wall-clock duration, and in-flight
//! requests are bounded by the per-request timeout. Results come back as a
//! [`Report`] with an HDR latency histogram in microseconds.
//!
//! [`agent`] runs clients that prefetch as the browser agent does (paper 000).
//!
//! Connections are plain `hyper` 1.x client connections over TCP with
//! `TCP_NODELAY`: HTTP/1.1, or h2c with prior knowledge when [`Plan::http2`] is set.

pub mod agent;
mod conn;
mod recorder;
mod report;
mod run;
mod targets;
mod urls;

use std::time::Duration;

pub use report::Report;
pub use run::run;
pub use urls::{parse_url_list, UrlListError};

/// Everything one load-generation run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `scheme://authority` of the server under test, e.g. `http://127.0.0.1:8080`.
    /// Only `http` is supported; any path in it is ignored.
    pub base: http::Uri,
    /// Which paths to request.
    pub targets: Targets,
    /// Closed or open loop.
    pub mode: Mode,
    /// When the run stops.
    pub limits: Limits,
    /// Per-request timeout, covering connect (if needed), send and full body read.
    pub timeout: Duration,
    /// Use h2c with prior knowledge instead of HTTP/1.1.
    pub http2: bool,
    /// Send every request to this forward proxy (`http://host:port`), in absolute form, for
    /// the server in `base`; `None`: to `base` itself.
    pub proxy: Option<http::Uri>,
    /// Seed for the weighted target choice; the same seed gives the same sequence
    /// of paths per client.
    pub seed: u64,
}

/// The paths a run requests.
#[derive(Debug, Clone)]
pub enum Targets {
    /// `(path+query, weight)` pairs; each request picks one at random with
    /// probability proportional to its weight.
    Weighted(Vec<(String, f64)>),
    /// A trace replayed in order (request `n` gets entry `n`); the run stops at its end.
    Sequence(Vec<String>),
}

/// How requests are issued.
#[derive(Debug, Clone)]
pub enum Mode {
    /// `clients` concurrent clients, each with one keep-alive connection:
    /// request, read the full body, think, repeat. A client reconnects after a
    /// connection error or timeout.
    Closed {
        /// Number of concurrent clients (at least 1).
        clients: usize,
        /// Pause between a response and the next request of the same client.
        think_time: Duration,
    },
    /// Arrivals at constant intervals regardless of how the server keeps up.
    Open {
        /// Arrivals per second (positive, finite).
        rate_per_s: f64,
        /// At most this many requests in flight; an arrival beyond it is counted
        /// as error `"overload"` and not sent.
        max_in_flight: usize,
    },
}

/// When a run stops: at whichever limit is reached first. Requests already in
/// flight then finish (each bounded by [`Plan::timeout`]).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Maximum number of requests issued (arrivals counted as `"overload"` included).
    pub max_requests: u64,
    /// Maximum wall-clock time during which new requests are issued.
    pub duration: Duration,
}

/// A snapshot handed to the progress callback about every 500 ms, and once at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Time since the run started.
    pub elapsed: Duration,
    /// Requests finished with a 2xx or 3xx status so far.
    pub completed: u64,
    /// Requests finished with an error so far.
    pub errors: u64,
}
