//! Hedged requests ("The Tail at Scale", Dean and Barroso, 2013) over any policy: when the
//! first endpoint has not answered within a percentile of its own recent latencies, the same
//! request goes to the next endpoint of the order as well; the first answer is kept and the
//! other exchange recorded as [`Outcome::Cancelled`].
//!
//! The inner policy still orders the endpoints, times them out and asks for probes; this
//! wrapper only keeps, per endpoint, a window of its last [`Config::window`] latencies (bounded)
//! and answers [`Select::hedge_after`] with their [`Config::percentile`] (nearest rank). In a
//! steady state about `100 - percentile` % of requests are hedged, which is the extra load;
//! there is no hedge before [`Config::min_samples`] latencies, nor while fewer than two
//! endpoints are up (the second would go to a failed one).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::{ConfigError, Outcome, Probe, Select};

/// Configuration of [`Hedged`].
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The percentile of the endpoint's recent latencies after which to hedge, in (0, 100).
    /// 95 (Dean and Barroso's example: about 5 % more requests).
    pub percentile: f64,
    /// The latencies kept per endpoint. 128.
    pub window: usize,
    /// The latencies an endpoint needs before its requests are hedged. 16.
    pub min_samples: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            percentile: 95.0,
            window: 128,
            min_samples: 16,
        }
    }
}

/// A policy with hedged requests; see the module documentation.
#[derive(Debug, Clone)]
pub struct Hedged<S> {
    inner: S,
    config: Config,
    /// Each endpoint's latest latencies, oldest first, at most `config.window`.
    windows: Vec<(String, VecDeque<Duration>)>,
}

impl<S: Select> Hedged<S> {
    /// Hedges the requests that `inner` orders.
    pub fn new(inner: S, config: Config, now: Instant) -> Result<Hedged<S>, ConfigError> {
        if !(config.percentile > 0.0 && config.percentile < 100.0) {
            return Err(ConfigError::new("percentile", "must be in (0, 100)"));
        }
        if config.window == 0 || config.min_samples > config.window {
            return Err(ConfigError::new(
                "window",
                "must be positive and at least min_samples",
            ));
        }
        let mut h = Hedged {
            inner,
            config,
            windows: Vec::new(),
        };
        let names: Vec<String> = h.inner.health(now).into_iter().map(|(n, _)| n).collect();
        h.update_windows(&names);
        Ok(h)
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn update_windows(&mut self, endpoints: &[String]) {
        let mut old = std::mem::take(&mut self.windows);
        self.windows = endpoints
            .iter()
            .map(|name| match old.iter().position(|(n, _)| n == name) {
                Some(i) => old.swap_remove(i),
                None => (name.clone(), VecDeque::new()),
            })
            .collect();
    }
}

/// The nearest-rank `percentile` of `samples` (not empty): the least sample with at least
/// `percentile` % of the samples at or below it.
fn nearest_rank(samples: &VecDeque<Duration>, percentile: f64) -> Duration {
    let mut sorted: Vec<Duration> = samples.iter().copied().collect();
    sorted.sort_unstable();
    let rank = (percentile / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl<S: Select> Select for Hedged<S> {
    fn update(&mut self, endpoints: &[String], now: Instant) {
        self.inner.update(endpoints, now);
        self.update_windows(endpoints);
    }

    fn order(&mut self, now: Instant) -> Vec<String> {
        self.inner.order(now)
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        if let Outcome::Answered { latency } = outcome {
            if let Some((_, w)) = self.windows.iter_mut().find(|(n, _)| n == endpoint) {
                if w.len() == self.config.window {
                    w.pop_front();
                }
                w.push_back(latency);
            }
        }
        self.inner.record(endpoint, outcome, now);
    }

    fn health(&self, now: Instant) -> Vec<(String, bool)> {
        self.inner.health(now)
    }

    fn started(&mut self, endpoint: &str, now: Instant) {
        self.inner.started(endpoint, now);
    }

    fn timeout(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        self.inner.timeout(endpoint, now)
    }

    fn probes(&mut self, now: Instant) -> Vec<Probe> {
        self.inner.probes(now)
    }

    fn hedge_after(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        let (_, w) = self.windows.iter().find(|(n, _)| n == endpoint)?;
        if w.len() < self.config.min_samples.max(1) {
            return None;
        }
        if self.inner.health(now).iter().filter(|(_, up)| *up).count() < 2 {
            return None;
        }
        Some(nearest_rank(w, self.config.percentile))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailOver;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("e{i}")).collect()
    }

    fn hedged(n: usize, config: Config, t0: Instant) -> Hedged<FailOver> {
        Hedged::new(FailOver::new(&names(n), Duration::from_secs(5)), config, t0).unwrap()
    }

    fn answered(ms: u64) -> Outcome {
        Outcome::Answered {
            latency: Duration::from_millis(ms),
        }
    }

    #[test]
    fn hedges_at_the_nearest_rank_percentile_of_the_endpoints_window() {
        let t0 = Instant::now();
        let config = Config {
            percentile: 90.0,
            window: 10,
            min_samples: 5,
        };
        let mut h = hedged(2, config, t0);
        for ms in 1..=4 {
            h.record("e0", answered(ms * 10), t0);
        }
        assert_eq!(h.hedge_after("e0", t0), None, "fewer than min_samples");
        h.record("e0", answered(50), t0);
        // 10..50: ceil(0.9 * 5) = 5th smallest.
        assert_eq!(h.hedge_after("e0", t0), Some(Duration::from_millis(50)));
        for ms in 1..=10 {
            h.record("e0", answered(ms), t0);
        }
        // The window holds 1..10 ms only now: the 9th smallest.
        assert_eq!(h.hedge_after("e0", t0), Some(Duration::from_millis(9)));
        assert_eq!(h.hedge_after("e1", t0), None);
        assert_eq!(h.hedge_after("nowhere", t0), None);
    }

    #[test]
    fn no_hedge_while_fewer_than_two_endpoints_are_up() {
        let t0 = Instant::now();
        let mut h = hedged(2, Config::default(), t0);
        for _ in 0..20 {
            h.record("e0", answered(10), t0);
        }
        assert_eq!(h.hedge_after("e0", t0), Some(Duration::from_millis(10)));
        h.record("e1", Outcome::ConnectFailed, t0);
        assert_eq!(h.hedge_after("e0", t0), None);
        // The inner policy still orders: e1 is down, so last.
        assert_eq!(h.order(t0), ["e0", "e1"]);
    }

    #[test]
    fn update_keeps_the_windows_of_endpoints_that_stay() {
        let t0 = Instant::now();
        let mut h = hedged(2, Config::default(), t0);
        for _ in 0..20 {
            h.record("e0", answered(10), t0);
            h.record("e1", answered(10), t0);
        }
        h.update(&["e1".into(), "new".into(), "e0".into()], t0);
        assert_eq!(h.hedge_after("e0", t0), Some(Duration::from_millis(10)));
        h.update(&["e1".into(), "new".into()], t0);
        h.update(&["e0".into(), "e1".into()], t0);
        assert_eq!(
            h.hedge_after("e0", t0),
            None,
            "a removed endpoint is forgotten"
        );
        assert_eq!(h.hedge_after("e1", t0), Some(Duration::from_millis(10)));
    }

    #[test]
    fn invalid_configurations_are_refused() {
        let t0 = Instant::now();
        let f = || FailOver::new(&names(2), Duration::from_secs(1));
        let bad = |c: Config| Hedged::new(f(), c, t0).unwrap_err().field;
        let d = Config::default;
        assert_eq!(
            bad(Config {
                percentile: 100.0,
                ..d()
            }),
            "percentile"
        );
        assert_eq!(
            bad(Config {
                window: 0,
                min_samples: 0,
                ..d()
            }),
            "window"
        );
        assert_eq!(
            bad(Config {
                min_samples: 200,
                ..d()
            }),
            "window"
        );
    }
}
