//! Choosing an upstream, without I/O: the [`Select`] trait over a set of endpoints that may
//! change at run time (parents of a proxy, origins, Web++ replicas, coop providers), fed with
//! the outcome and latency of every exchange. Time comes in as an argument, so the same
//! policy runs in the servers and in the simulator (the linkerd `pool` model: the trait low,
//! policies above it, one per file).
//!
//! - [`FailOver`]: the endpoints in the configured order; one that failed to connect or timed
//!   out is skipped for a while (Squid's parent fail-over).

mod failover;

use std::time::{Duration, Instant};

pub use failover::FailOver;

/// How an exchange with an endpoint ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A response head arrived after `latency`.
    Answered {
        /// From sending the request to the response head.
        latency: Duration,
    },
    /// No connection could be made.
    ConnectFailed,
    /// No response head within the deadline.
    TimedOut,
    /// The connection broke or the answer was not HTTP.
    Broken,
}

/// A selection policy over a changing set of named endpoints.
///
/// Every method takes `now`; implementations never read a clock.
pub trait Select: Send + std::fmt::Debug {
    /// Replaces the set of endpoints. Endpoints that stay keep what was learnt about them;
    /// new ones start fresh; removed ones are forgotten.
    fn update(&mut self, endpoints: &[String], now: Instant);

    /// The order in which to try the endpoints for one request: the first is the choice, the
    /// rest are fail-over candidates. Every endpoint appears once; an empty set gives an empty
    /// order.
    fn order(&mut self, now: Instant) -> Vec<String>;

    /// The outcome of one exchange with `endpoint` (ignored if it is no longer in the set).
    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant);

    /// Each endpoint and whether the policy currently counts it as up, in set order.
    fn health(&self, now: Instant) -> Vec<(String, bool)>;
}
