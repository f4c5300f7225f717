//! Choosing an upstream, without I/O: the [`Select`] trait over a set of endpoints that may
//! change at run time (parents of a proxy, origins, Web++ replicas, coop providers), fed with
//! the outcome and latency of every exchange. Time comes in as an argument, so the same
//! policy runs in the servers and in the simulator (the linkerd `pool` model: the trait low,
//! policies above it, one per file).
//!
//! - [`FailOver`]: the endpoints in the configured order; one that failed to connect or timed
//!   out is skipped for a while (Squid's parent fail-over).
//! - [`Decay`]: the Web++ agents' default: the fastest live endpoint by a latency estimate
//!   that decays with time, budgeted exploration and hedging, capped exponential back-off,
//!   a race while nothing is measured.
//! - [`Refresh`]: Web++'s extended Refresh algorithm (paper 001 §4.1): the replica with the
//!   least S-percentile of latency, a timeout at the T-percentile, failed replicas probed with
//!   doubling intervals, stale entries refreshed by a HEAD.
//! - [`PeakEwma`]: power of two choices over a peak-sensitive EWMA of latency times the
//!   requests in flight (Finagle, linkerd, tower), for comparison.
//! - [`Hedged`]: any policy, plus a second request to the next candidate once the first has
//!   taken longer than a percentile of its endpoint's recent latencies.
//!
//! Beyond [`Select::order`] and [`Select::record`], a caller asks a policy for the work it
//! cannot do itself, as data: [`Select::timeout`] (when to give up on an endpoint),
//! [`Select::probes`] (asynchronous HEAD requests now due) and [`Select::hedge_after`] (when to
//! send a second request). It reports what it did with [`Select::started`] and
//! [`Select::record`]. Every one of these has a default, so a policy implements only what it
//! uses.

mod decay;
mod failover;
mod hedged;
pub mod normal;
mod peak_ewma;
mod refresh;

use std::time::{Duration, Instant};

pub use decay::{Decay, Estimate as DecayEstimate, Saved};
pub use failover::FailOver;
pub use hedged::Hedged;
pub use peak_ewma::PeakEwma;
pub use refresh::Refresh;

/// Configurations, each named after its policy (`config::Refresh` configures [`Refresh`]).
pub mod config {
    pub use crate::decay::Config as Decay;
    pub use crate::hedged::Config as Hedged;
    pub use crate::peak_ewma::Config as PeakEwma;
    pub use crate::refresh::Config as Refresh;
}

/// A policy's configuration that cannot work, found when the policy is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selection policy: `{field}` {reason}")]
pub struct ConfigError {
    /// The offending field, as the configuration struct names it.
    pub field: &'static str,
    /// What it must be.
    pub reason: &'static str,
}

impl ConfigError {
    fn new(field: &'static str, reason: &'static str) -> ConfigError {
        ConfigError { field, reason }
    }
}

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
    /// The caller abandoned the exchange before an answer, with no fault of the endpoint's (the
    /// other request of a hedged pair answered first). No sample; it ends what
    /// [`Select::started`] began.
    Cancelled,
}

/// Why a policy wants an endpoint probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// The endpoint is counted as failed; an answer puts it back (001 §4.1: polled every F,
    /// F doubling).
    Recover,
    /// The endpoint's latency estimate is older than its time to live; an answer renews it
    /// (001 §4.1: the oldest entry older than TTL).
    Refresh,
}

/// An asynchronous request a policy wants sent: a HEAD to `endpoint`, off the request path.
/// Its outcome goes back through [`Select::record`] like any other exchange's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The endpoint to send it to.
    pub endpoint: String,
    /// Why.
    pub kind: ProbeKind,
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

    /// The outcome of one exchange with `endpoint` (ignored if it is no longer in the set). It
    /// also ends one request that [`Select::started`] began, if any.
    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant);

    /// Each endpoint and whether the policy currently counts it as up, in set order.
    fn health(&self, now: Instant) -> Vec<(String, bool)>;

    /// A request to `endpoint` was sent; [`Select::record`] ends it. Policies that weigh the
    /// requests in flight ([`PeakEwma`]) count them; the default ignores it.
    fn started(&mut self, endpoint: &str, now: Instant) {
        let _ = (endpoint, now);
    }

    /// How long to wait for `endpoint`'s response head before recording
    /// [`Outcome::TimedOut`] and failing over. `None` (the default, and for an endpoint not in
    /// the set): the caller's own timeout.
    fn timeout(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        let _ = (endpoint, now);
        None
    }

    /// The probes due at `now`. Each is returned once: the policy counts it as sent. The
    /// caller sends them off the request path and records their outcomes. Call it on every
    /// request or on a timer; the default has none.
    fn probes(&mut self, now: Instant) -> Vec<Probe> {
        let _ = now;
        Vec::new()
    }

    /// After how long without a response head from `endpoint` (the first of this request's
    /// order) to send the same request to the next endpoint of that order as well, keeping the
    /// first answer and recording the other as [`Outcome::Cancelled`]. `None` (the default):
    /// never.
    fn hedge_after(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        let _ = (endpoint, now);
        None
    }

    /// A user request began (not a probe, a hedge or a fail-over): a policy that budgets its
    /// extra requests ([`Decay`]) earns its share. The default ignores it.
    fn requested(&mut self, now: Instant) {
        let _ = now;
    }

    /// A hedge was sent to `endpoint` after [`Select::hedge_after`] said so: it is paid for.
    /// The default ignores it.
    fn hedged(&mut self, endpoint: &str, now: Instant) {
        let _ = (endpoint, now);
    }

    /// To how many of the order's first endpoints to send a request at once, the first answer
    /// winning (the others recorded as they come, or [`Outcome::Cancelled`]). 1, the default:
    /// no race.
    fn race(&self, now: Instant) -> usize {
        let _ = now;
        1
    }
}

/// A boxed policy is a policy, so wrappers such as [`Hedged`] take the proxy's
/// `Box<dyn Select>` as well as a concrete one.
impl<S: Select + ?Sized> Select for Box<S> {
    fn update(&mut self, endpoints: &[String], now: Instant) {
        (**self).update(endpoints, now);
    }

    fn order(&mut self, now: Instant) -> Vec<String> {
        (**self).order(now)
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        (**self).record(endpoint, outcome, now);
    }

    fn health(&self, now: Instant) -> Vec<(String, bool)> {
        (**self).health(now)
    }

    fn started(&mut self, endpoint: &str, now: Instant) {
        (**self).started(endpoint, now);
    }

    fn timeout(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        (**self).timeout(endpoint, now)
    }

    fn probes(&mut self, now: Instant) -> Vec<Probe> {
        (**self).probes(now)
    }

    fn hedge_after(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        (**self).hedge_after(endpoint, now)
    }

    fn requested(&mut self, now: Instant) {
        (**self).requested(now);
    }

    fn hedged(&mut self, endpoint: &str, now: Instant) {
        (**self).hedged(endpoint, now);
    }

    fn race(&self, now: Instant) -> usize {
        (**self).race(now)
    }
}
