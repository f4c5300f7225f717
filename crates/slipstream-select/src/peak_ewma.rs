//! Power of two choices over Peak-EWMA costs, the load balancer of Finagle, linkerd and tower,
//! here to compare with Web++'s Refresh.
//!
//! An endpoint's cost is a latency estimate times one more than its requests in flight. The
//! estimate jumps to any sample above it (the peak) and otherwise moves towards the sample by
//! `1 - exp(-elapsed / decay)`, and between samples it decays towards zero with the same time
//! constant, so an endpoint left alone looks cheaper over time and is tried again (Finagle's
//! `PeakEwma.observe` and `get`, tower's `RttEstimate`). The decay is computed at `now` without
//! changing state, so asking for an order twice changes nothing. An endpoint with no sample
//! starts at [`Config::default_rtt`].
//!
//! A request picks two distinct live endpoints at random and takes the cheaper; the other live
//! endpoints follow by cost, then those counted down (soonest back first). An endpoint whose
//! exchange failed (connect, timeout, broken) is down for [`Config::retry_after`], as in
//! [`crate::FailOver`]: the balancers above leave that to a separate failure accrual, which
//! this crate folds in so that every policy keeps the same promise.
//!
//! **Randomness.** The policy owns a seeded generator ([`PeakEwma::new`] takes the seed), so
//! [`Select`] stays object-safe and a run is reproduced from its seed; no thread-local or OS
//! randomness is read.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::{ConfigError, Outcome, Select};

/// Configuration of [`PeakEwma`].
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The time constant of the estimate's decay. 10 seconds (linkerd's and Finagle's).
    pub decay: Duration,
    /// The estimate of an endpoint before its first sample. 30 ms (linkerd's).
    pub default_rtt: Duration,
    /// How long a failed endpoint is counted down. 10 seconds.
    pub retry_after: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            decay: Duration::from_secs(10),
            default_rtt: Duration::from_millis(30),
            retry_after: Duration::from_secs(10),
        }
    }
}

/// p2c + Peak-EWMA; see the module documentation.
#[derive(Debug, Clone)]
pub struct PeakEwma {
    config: Config,
    rng: StdRng,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    /// The estimate at `stamp`, in ms.
    estimate_ms: f64,
    stamp: Instant,
    pending: u32,
    down_until: Option<Instant>,
}

impl Entry {
    fn up(&self, now: Instant) -> bool {
        self.down_until.is_none_or(|t| t <= now)
    }
}

impl PeakEwma {
    /// A balancer over `endpoints`, drawing its choices from a generator seeded with `seed`.
    pub fn new(
        endpoints: &[String],
        config: Config,
        seed: u64,
        now: Instant,
    ) -> Result<PeakEwma, ConfigError> {
        if config.decay.is_zero() {
            return Err(ConfigError::new("decay", "must be positive"));
        }
        let mut p = PeakEwma {
            config,
            rng: StdRng::seed_from_u64(seed),
            entries: Vec::new(),
        };
        p.update(endpoints, now);
        Ok(p)
    }

    /// `endpoint`'s cost at `now`: the decayed estimate (ms) times one more than its requests
    /// in flight. `None` outside the set.
    pub fn cost(&self, endpoint: &str, now: Instant) -> Option<f64> {
        let e = self.entries.iter().find(|e| e.name == endpoint)?;
        Some(cost(self.config.decay, e, now))
    }

    /// `endpoint`'s requests in flight.
    pub fn pending(&self, endpoint: &str) -> Option<u32> {
        Some(self.entries.iter().find(|e| e.name == endpoint)?.pending)
    }

    fn decay_weight(&self, from: Instant, now: Instant) -> f64 {
        decay_weight(self.config.decay, from, now)
    }

    /// [`Select::order`] with the choices drawn from `rng` instead of the policy's own
    /// generator (for a simulator that owns one stream of randomness).
    pub fn order_with(&self, now: Instant, rng: &mut impl Rng) -> Vec<String> {
        order(&self.entries, self.config.decay, now, rng)
    }
}

/// `exp(-elapsed / decay)`.
fn decay_weight(decay: Duration, from: Instant, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(from).as_secs_f64();
    (-elapsed / decay.as_secs_f64()).exp()
}

fn cost(decay: Duration, e: &Entry, now: Instant) -> f64 {
    e.estimate_ms * decay_weight(decay, e.stamp, now) * f64::from(e.pending.saturating_add(1))
}

fn order(entries: &[Entry], decay: Duration, now: Instant, rng: &mut impl Rng) -> Vec<String> {
    let costs: Vec<f64> = entries.iter().map(|e| cost(decay, e, now)).collect();
    let (mut live, mut down): (Vec<usize>, Vec<usize>) =
        (0..entries.len()).partition(|&i| entries[i].up(now));
    // Two distinct live endpoints drawn uniformly; the cheaper wins, the first drawn on a tie.
    let first = match live.len() {
        0 => None,
        1 => Some(0),
        n => {
            let a = rng.gen_range(0..n);
            let b = (a + rng.gen_range(1..n)) % n;
            Some(if costs[live[b]] < costs[live[a]] {
                b
            } else {
                a
            })
        }
    };
    let first = first.map(|k| live.remove(k));
    live.sort_by(|&a, &b| costs[a].total_cmp(&costs[b]));
    down.sort_by_key(|&i| entries[i].down_until);
    first
        .into_iter()
        .chain(live)
        .chain(down)
        .map(|i| entries[i].name.clone())
        .collect()
}

impl Select for PeakEwma {
    fn update(&mut self, endpoints: &[String], now: Instant) {
        let mut old = std::mem::take(&mut self.entries);
        let default_ms = self.config.default_rtt.as_nanos() as f64 / 1e6;
        self.entries = endpoints
            .iter()
            .map(|name| match old.iter().position(|e| &e.name == name) {
                Some(i) => old.swap_remove(i),
                None => Entry {
                    name: name.clone(),
                    estimate_ms: default_ms,
                    stamp: now,
                    pending: 0,
                    down_until: None,
                },
            })
            .collect();
    }

    fn order(&mut self, now: Instant) -> Vec<String> {
        order(&self.entries, self.config.decay, now, &mut self.rng)
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        let retry_after = self.config.retry_after;
        let Some(i) = self.entries.iter().position(|e| e.name == endpoint) else {
            return;
        };
        let w = self.decay_weight(self.entries[i].stamp, now);
        let e = &mut self.entries[i];
        e.pending = e.pending.saturating_sub(1);
        match outcome {
            Outcome::Answered { latency } => {
                let sample = latency.as_nanos() as f64 / 1e6;
                e.estimate_ms = if sample > e.estimate_ms {
                    sample
                } else {
                    e.estimate_ms * w + sample * (1.0 - w)
                };
                e.stamp = now;
                e.down_until = None;
            }
            Outcome::ConnectFailed | Outcome::TimedOut | Outcome::Broken => {
                e.down_until = Some(now + retry_after);
            }
            Outcome::Cancelled => {}
        }
    }

    fn health(&self, now: Instant) -> Vec<(String, bool)> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), e.up(now)))
            .collect()
    }

    fn started(&mut self, endpoint: &str, _now: Instant) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.name == endpoint) {
            e.pending = e.pending.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("e{i}")).collect()
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_estimate_jumps_to_a_peak_and_decays_towards_lower_samples() {
        let t0 = Instant::now();
        let mut p = PeakEwma::new(&names(1), Config::default(), 1, t0).unwrap();
        // The default 30 ms, then a 100 ms peak is taken whole.
        assert_eq!(p.cost("e0", t0), Some(30.0));
        p.record("e0", Outcome::Answered { latency: ms(100) }, t0);
        assert_eq!(p.cost("e0", t0), Some(100.0));
        // A 20 ms sample one time constant later: 100 e^-1 + 20 (1 - e^-1).
        let t1 = t0 + Duration::from_secs(10);
        p.record("e0", Outcome::Answered { latency: ms(20) }, t1);
        let want = 100.0 * (-1f64).exp() + 20.0 * (1.0 - (-1f64).exp());
        assert!((p.cost("e0", t1).unwrap() - want).abs() < 1e-9);
        // Left alone for another time constant it decays by e^-1 (no state changes).
        let t2 = t1 + Duration::from_secs(10);
        assert!((p.cost("e0", t2).unwrap() - want * (-1f64).exp()).abs() < 1e-9);
        assert!((p.cost("e0", t2).unwrap() - want * (-1f64).exp()).abs() < 1e-9);
    }

    #[test]
    fn pending_requests_multiply_the_cost() {
        let t0 = Instant::now();
        let mut p = PeakEwma::new(&names(2), Config::default(), 7, t0).unwrap();
        p.started("e0", t0);
        p.started("e0", t0);
        assert_eq!(p.cost("e0", t0), Some(90.0));
        assert_eq!(p.pending("e0"), Some(2));
        // With both endpoints live, the two random picks are always e0 and e1: e1 wins.
        for _ in 0..20 {
            assert_eq!(p.order(t0), ["e1", "e0"]);
        }
        p.record("e0", Outcome::Cancelled, t0);
        p.record("e0", Outcome::Cancelled, t0);
        p.record("e0", Outcome::Cancelled, t0);
        assert_eq!(p.pending("e0"), Some(0));
    }

    #[test]
    fn the_same_seed_gives_the_same_choices() {
        let t0 = Instant::now();
        let run = |seed| {
            let mut p = PeakEwma::new(&names(5), Config::default(), seed, t0).unwrap();
            (0..50).map(|_| p.order(t0)[0].clone()).collect::<Vec<_>>()
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn the_cheaper_of_two_wins_so_the_dearest_is_never_first() {
        let t0 = Instant::now();
        let mut p = PeakEwma::new(&names(3), Config::default(), 9, t0).unwrap();
        p.record("e2", Outcome::Answered { latency: ms(500) }, t0);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let order = p.order(t0);
            assert_ne!(order[0], "e2");
            assert_eq!(order[2], "e2");
            firsts.insert(order[0].clone());
        }
        // e0 and e1 tie; the draw decides between them, so both are chosen.
        assert_eq!(firsts.len(), 2);
    }

    proptest! {
        /// Never picks a down endpoint while one is up; every endpoint appears exactly once;
        /// started and recorded requests balance.
        #[test]
        fn never_picks_a_down_endpoint_while_one_is_up(
            seed in any::<u64>(),
            events in prop::collection::vec((0usize..4, 0u8..5, 0u64..40, 1u64..400), 0..80),
        ) {
            let t0 = Instant::now();
            let mut p = PeakEwma::new(&names(4), Config::default(), seed, t0).unwrap();
            for (i, kind, at, lat) in events {
                let now = t0 + Duration::from_secs(at);
                let name = format!("e{i}");
                p.started(&name, now);
                let outcome = match kind {
                    0 | 1 => Outcome::Answered { latency: ms(lat) },
                    2 => Outcome::ConnectFailed,
                    3 => Outcome::TimedOut,
                    _ => Outcome::Broken,
                };
                p.record(&name, outcome, now);
                prop_assert_eq!(p.pending(&name), Some(0));
                let order = p.order(now);
                let mut sorted = order.clone();
                sorted.sort();
                prop_assert_eq!(sorted, names(4));
                let health = p.health(now);
                if health.iter().any(|(_, up)| *up) {
                    prop_assert!(health.iter().any(|(n, up)| n == &order[0] && *up));
                }
            }
        }
    }
}
