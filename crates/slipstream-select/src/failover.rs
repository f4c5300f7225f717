//! Ordered fail-over: always the first endpoint that is up, in the configured order. An
//! endpoint that refused a connection or timed out is skipped for `retry_after`, then tried
//! again; while every endpoint is down they are still tried, in order, so a request is never
//! refused for want of a candidate.

use std::time::{Duration, Instant};

use crate::{Outcome, Select};

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct FailOver {
    retry_after: Duration,
    endpoints: Vec<State>,
}

#[derive(Debug, Clone)]
struct State {
    name: String,
    /// Skipped until then.
    down_until: Option<Instant>,
}

impl State {
    fn up(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| t <= now)
    }
}

impl FailOver {
    /// Fail-over over `endpoints` (in order of preference); a failed one is skipped for
    /// `retry_after`.
    pub fn new(endpoints: &[String], retry_after: Duration) -> FailOver {
        FailOver {
            retry_after,
            endpoints: endpoints
                .iter()
                .map(|name| State {
                    name: name.clone(),
                    down_until: None,
                })
                .collect(),
        }
    }
}

impl Select for FailOver {
    fn update(&mut self, endpoints: &[String], _now: Instant) {
        let old = std::mem::take(&mut self.endpoints);
        self.endpoints = endpoints
            .iter()
            .map(|name| {
                old.iter()
                    .find(|s| &s.name == name)
                    .cloned()
                    .unwrap_or_else(|| State {
                        name: name.clone(),
                        down_until: None,
                    })
            })
            .collect();
    }

    fn order(&mut self, now: Instant) -> Vec<String> {
        let (up, down): (Vec<&State>, Vec<&State>) = self.endpoints.iter().partition(|s| s.up(now));
        up.into_iter().chain(down).map(|s| s.name.clone()).collect()
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        let Some(state) = self.endpoints.iter_mut().find(|s| s.name == endpoint) else {
            return;
        };
        match outcome {
            Outcome::Answered { .. } => state.down_until = None,
            Outcome::ConnectFailed | Outcome::TimedOut => {
                state.down_until = Some(now + self.retry_after);
            }
            // A broken exchange says little about the next one (a reset keep-alive connection
            // is common); the endpoint stays in rotation and a refused connect takes it out.
            Outcome::Broken | Outcome::Cancelled => {}
        }
    }

    fn health(&self, now: Instant) -> Vec<(String, bool)> {
        self.endpoints
            .iter()
            .map(|s| (s.name.clone(), s.up(now)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("e{i}")).collect()
    }

    #[test]
    fn a_failed_endpoint_goes_last_until_its_retry_time() {
        let t0 = Instant::now();
        let mut s = FailOver::new(&names(3), Duration::from_secs(5));
        assert_eq!(s.order(t0), ["e0", "e1", "e2"]);
        s.record("e0", Outcome::ConnectFailed, t0);
        assert_eq!(s.order(t0), ["e1", "e2", "e0"]);
        assert_eq!(s.order(t0 + Duration::from_secs(5)), ["e0", "e1", "e2"]);
        s.record("e1", Outcome::TimedOut, t0);
        s.record(
            "e1",
            Outcome::Answered {
                latency: Duration::ZERO,
            },
            t0,
        );
        assert_eq!(s.order(t0), ["e1", "e2", "e0"]);
    }

    #[test]
    fn update_keeps_what_was_learnt_and_forgets_removed_endpoints() {
        let t0 = Instant::now();
        let mut s = FailOver::new(&names(2), Duration::from_secs(5));
        s.record("e0", Outcome::ConnectFailed, t0);
        s.update(&["e0".into(), "e1".into(), "new".into()], t0);
        assert_eq!(s.order(t0), ["e1", "new", "e0"]);
        s.update(&["new".into()], t0);
        assert_eq!(s.order(t0), ["new"]);
        s.record("e0", Outcome::ConnectFailed, t0);
        assert_eq!(s.health(t0), [("new".to_owned(), true)]);
    }

    proptest! {
        /// Never prefers a failed endpoint while a live one exists, and every endpoint is
        /// always a candidate exactly once.
        #[test]
        fn never_prefers_a_down_endpoint_while_one_is_up(
            events in prop::collection::vec((0usize..4, 0u8..4, 0u64..20), 0..60),
        ) {
            let t0 = Instant::now();
            let mut s = FailOver::new(&names(4), Duration::from_secs(5));
            for (i, kind, at) in events {
                let now = t0 + Duration::from_secs(at);
                let outcome = match kind {
                    0 => Outcome::Answered { latency: Duration::from_millis(3) },
                    1 => Outcome::ConnectFailed,
                    2 => Outcome::TimedOut,
                    _ => Outcome::Broken,
                };
                s.record(&format!("e{i}"), outcome, now);
                let order = s.order(now);
                let mut sorted = order.clone();
                sorted.sort();
                prop_assert_eq!(sorted, names(4));
                let health = s.health(now);
                if health.iter().any(|(_, up)| *up) {
                    let first = &order[0];
                    prop_assert!(health.iter().any(|(n, up)| n == first && *up));
                }
            }
        }
    }
}
