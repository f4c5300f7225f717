//! The default replica selector of the Web++ agents (`slipstream get` and the browser's Service
//! Worker): the fastest live replica by a latency estimate that decays with *time*, a small
//! budgeted exploration of the others, failed replicas retried with a capped exponential
//! back-off, and hedging at a high percentile inside the same budget. No I/O and no clock;
//! no randomness either, so the JavaScript agent (`web/agent/decay.mjs`) makes the same
//! choices (the shared vectors in `web/test-vectors/select/decay-*.json`).
//!
//! Why not the paper's Refresh ([`crate::Refresh`], still selectable by name): its newest
//! sample weighs r = 0.95 whatever the time between samples, so one outlier on the best replica
//! moves all traffic away, and nothing measures that replica again before the 41-minute TTL;
//! a failure takes a replica out for F = 28.8 hours. Each rule here comes from a system that
//! met those problems:
//!
//! - **Estimates that decay with time** (Finagle's and linkerd's Peak-EWMA: a sample's weight
//!   is `1 − e^(−Δt/τ)`, Δt the time since the previous sample, τ = [`Config::decay`], 10 s).
//!   A new sample also weighs at least `max(1/(n+1), min_weight)` (n the samples so far), so the
//!   first samples average evenly and back-to-back samples still count; with
//!   [`Config::min_weight`] = 0.1 one outlier moves the estimate by a tenth of its excess.
//!   Unlike Peak-EWMA we do not jump to a peak: a peak is what pinned Refresh. The spread is
//!   estimated the same way (`var' = (1−w)·var + w·(x − avg')²`).
//! - **A stale estimate returns to the long-run mean.** tower's and Finagle's Peak-EWMA decay
//!   an estimate that gets no new sample toward zero as time passes, so an endpoint left alone
//!   after a bad spell is tried again. We decay it toward the replica's long-run mean instead
//!   (a second estimate with τ = [`Config::long_decay`], 60 s, weighted by time alone), so a
//!   replica that is merely slow is not retried with user requests: the distance between the
//!   two shrinks by `e^(−age/relax)`, age the time since the last sample and
//!   [`Config::relax`] 2 s (only downward: an estimate below the long-run mean stays). After
//!   a spike on the fastest replica, traffic returns to it a second or two after the spike's
//!   last sample, without a probe; after a lasting slow-down, the long-run mean rises with each
//!   retry and the retries stop. The next sample updates the relaxed value, not the stale one.
//!   The cost: in spells of one to two seconds (brownouts), a relaxed retry often lands in the
//!   same spell (`docs/experiments/001-get.md`).
//! - **Bounded exploration** (the ε of bandit algorithms, spent as a budget as The Tail at
//!   Scale spends hedges): every user request ([`Select::requested`]) earns
//!   [`Config::budget`] (0.02) of a token, at most [`Config::burst`] held; an exploration
//!   probe (a HEAD to a live replica not chosen, unmeasured first, else the one measured
//!   longest ago once that is [`Config::explore_after`] old) and a hedge each cost one token.
//!   Extra requests are thus at most 2 % of requests plus the burst.
//! - **Back-off** (Envoy's outlier ejection): a timeout, refused connection or broken answer
//!   takes a replica out for [`Config::backoff`] (1 s), doubled by each further failure up to
//!   [`Config::max_backoff`] (2 minutes); a recovery probe is due then (it spends a token if
//!   one is held, so that probes of every kind share the budget, and is sent without one: the
//!   back-off bounds it), and again after the next back-off if its outcome never comes (a
//!   probe lost with its caller must not keep a replica out for good). An answer puts it
//!   back.
//! - **Racing the unknown**: while no live replica has a sample, a request goes to every live
//!   one at once ([`Select::race`]) and the first answer wins: the first fetch of a new client
//!   costs the fastest replica's time, not the first in sort order's.
//! - **Hedging** (Dean and Barroso, The Tail at Scale, 2013): a request still unanswered after
//!   the chosen replica's [`Config::hedge_percentile`] (99th) of latency goes to the next one
//!   too, if a token is there; the caller reports it with [`Select::hedged`].
//!
//! Order: live measured replicas by estimate (ties: set order), live unmeasured ones (set
//! order), failed ones by when their back-off ends (ties: set order).

use std::time::{Duration, Instant};

use crate::{normal, ConfigError, Outcome, Probe, ProbeKind, Select};

/// Configuration of [`Decay`].
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// τ: a sample's weight is `1 − e^(−Δt/τ)`. 10 s (Finagle's decay time).
    pub decay: Duration,
    /// The least weight of a new sample once `1/(n+1)` is smaller, in (0, 1]. 0.1.
    pub min_weight: f64,
    /// Tokens earned per user request, for probes and hedges, in [0, 1). 0.02.
    pub budget: f64,
    /// The most tokens held, and those a new selector starts with. 2.
    pub burst: f64,
    /// A live replica not chosen whose last sample is this old may be explored. 10 s.
    pub explore_after: Duration,
    /// The first back-off of a failed replica, doubled by each further failure. 1 s.
    pub backoff: Duration,
    /// The longest back-off. 2 minutes.
    pub max_backoff: Duration,
    /// The percentile (in (0, 100)) of the chosen replica's latency after which a request is
    /// hedged. 99.
    pub hedge_percentile: f64,
    /// The percentile (in (0, 100)) of latency at which a request times out. 99.9.
    pub timeout_percentile: f64,
    /// The timeout before a replica's first sample. 10 s.
    pub default_timeout: Duration,
    /// The least timeout. 1 s.
    pub min_timeout: Duration,
    /// The timeout is at least this multiple of the mean. 4.
    pub min_timeout_factor: f64,
    /// The greatest timeout. 60 s.
    pub max_timeout: Duration,
    /// How fast an estimate with no new sample returns to the long-run mean: their distance
    /// shrinks by `e^(−age/relax)`. 2 s; zero keeps the estimate as it was sampled.
    pub relax: Duration,
    /// τ of the long-run mean (a sample weighs `1 − e^(−Δt/τ)`: a few quick outliers barely
    /// move it). 60 s.
    pub long_decay: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            decay: Duration::from_secs(10),
            min_weight: 0.1,
            budget: 0.02,
            burst: 2.0,
            explore_after: Duration::from_secs(10),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(120),
            hedge_percentile: 99.0,
            timeout_percentile: 99.9,
            default_timeout: Duration::from_secs(10),
            min_timeout: Duration::from_secs(1),
            min_timeout_factor: 4.0,
            max_timeout: Duration::from_secs(60),
            relax: Duration::from_secs(2),
            long_decay: Duration::from_secs(60),
        }
    }
}

impl Config {
    /// The names [`Config::set`] takes: those of the shared vectors and of the browser agent,
    /// durations in milliseconds.
    pub const FIELDS: &'static [&'static str] = &[
        "decay_ms",
        "min_weight",
        "budget",
        "burst",
        "explore_after_ms",
        "backoff_ms",
        "max_backoff_ms",
        "hedge_percentile",
        "timeout_percentile",
        "default_timeout_ms",
        "min_timeout_ms",
        "min_timeout_factor",
        "max_timeout_ms",
        "relax_ms",
        "long_decay_ms",
    ];

    /// Sets one field by its vector and agent name ([`Config::FIELDS`]); false for an unknown
    /// name. [`Config::check`] says whether the result works.
    pub fn set(&mut self, field: &str, value: f64) -> bool {
        let ms = || Duration::from_nanos((value * 1e6).round().max(0.0) as u64);
        match field {
            "decay_ms" => self.decay = ms(),
            "min_weight" => self.min_weight = value,
            "budget" => self.budget = value,
            "burst" => self.burst = value,
            "explore_after_ms" => self.explore_after = ms(),
            "backoff_ms" => self.backoff = ms(),
            "max_backoff_ms" => self.max_backoff = ms(),
            "hedge_percentile" => self.hedge_percentile = value,
            "timeout_percentile" => self.timeout_percentile = value,
            "default_timeout_ms" => self.default_timeout = ms(),
            "min_timeout_ms" => self.min_timeout = ms(),
            "min_timeout_factor" => self.min_timeout_factor = value,
            "max_timeout_ms" => self.max_timeout = ms(),
            "relax_ms" => self.relax = ms(),
            "long_decay_ms" => self.long_decay = ms(),
            _ => return false,
        }
        true
    }

    /// Whether the configuration can work ([`Decay::new`] refuses one that cannot).
    pub fn check(&self) -> Result<(), ConfigError> {
        let percent = |v: f64| v > 0.0 && v < 100.0;
        if self.decay.is_zero() {
            return Err(ConfigError::new("decay", "must be positive"));
        }
        if self.long_decay.is_zero() {
            return Err(ConfigError::new("long_decay", "must be positive"));
        }
        if !(self.min_weight > 0.0 && self.min_weight <= 1.0) {
            return Err(ConfigError::new("min_weight", "must be in (0, 1]"));
        }
        if !(self.budget >= 0.0 && self.budget < 1.0) {
            return Err(ConfigError::new("budget", "must be in [0, 1)"));
        }
        if !(self.burst >= 0.0 && self.burst.is_finite()) {
            return Err(ConfigError::new("burst", "must be finite and >= 0"));
        }
        if self.backoff.is_zero() || self.max_backoff < self.backoff {
            return Err(ConfigError::new(
                "backoff",
                "must be positive and at most max_backoff",
            ));
        }
        if !percent(self.hedge_percentile) {
            return Err(ConfigError::new("hedge_percentile", "must be in (0, 100)"));
        }
        if !percent(self.timeout_percentile) {
            return Err(ConfigError::new(
                "timeout_percentile",
                "must be in (0, 100)",
            ));
        }
        if !(self.min_timeout_factor >= 0.0 && self.min_timeout_factor.is_finite()) {
            return Err(ConfigError::new(
                "min_timeout_factor",
                "must be finite and >= 0",
            ));
        }
        if self.min_timeout > self.max_timeout {
            return Err(ConfigError::new(
                "min_timeout",
                "must be at most max_timeout",
            ));
        }
        Ok(())
    }
}

/// One replica's latency estimate, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The time-decayed mean.
    pub avg_ms: f64,
    /// The time-decayed variance, in ms².
    pub var_ms2: f64,
    /// Samples taken so far.
    pub samples: u64,
    /// The long-run mean a stale estimate returns to ([`Config::long_decay`]).
    pub long_ms: f64,
}

/// What [`Decay::export`] saves of one replica and [`Decay::import`] restores: times as ages,
/// so that a table can be kept on disk between runs of a client.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    /// The replica.
    pub endpoint: String,
    /// Its estimate's mean, ms (none: never measured).
    pub avg_ms: Option<f64>,
    /// Its estimate's variance, ms².
    pub var_ms2: f64,
    /// Its samples.
    pub samples: u64,
    /// How long before the export its last sample came, ms.
    pub age_ms: u64,
    /// Failures in a row (0: live).
    pub failures: u32,
    /// How long after the export its back-off ends, ms.
    pub retry_in_ms: u64,
    /// Its long-run mean, ms (absent in tables saved before it existed: the mean).
    #[serde(default)]
    pub long_ms: Option<f64>,
}

#[derive(Debug, Clone)]
struct Entry {
    name: String,
    estimate: Option<Estimate>,
    /// The last sample, or when the replica joined the set.
    sampled: Instant,
    /// Failures in a row; 0 is live.
    failures: u32,
    /// When a failed replica's back-off ends (its recovery probe is due).
    retry_at: Instant,
    /// When an exploration probe was last handed out.
    explored: Option<Instant>,
}

/// The default selector; see the module documentation.
#[derive(Debug, Clone)]
pub struct Decay {
    config: Config,
    c_hedge: f64,
    c_timeout: f64,
    entries: Vec<Entry>,
    tokens: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

impl Decay {
    /// A selector over `endpoints` (their order breaks ties), all unmeasured and live, with
    /// [`Config::burst`] tokens.
    pub fn new(endpoints: &[String], config: Config, now: Instant) -> Result<Decay, ConfigError> {
        config.check()?;
        let mut d = Decay {
            c_hedge: normal::quantile(config.hedge_percentile / 100.0),
            c_timeout: normal::quantile(config.timeout_percentile / 100.0),
            tokens: config.burst,
            config,
            entries: Vec::new(),
        };
        d.update(endpoints, now);
        Ok(d)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `endpoint`'s estimate; `None` before its first sample or outside the set.
    pub fn estimate(&self, endpoint: &str) -> Option<Estimate> {
        self.entry(endpoint)?.estimate
    }

    /// `endpoint`'s mean as of `now`: the sampled mean drawn back toward the long-run mean as
    /// its last sample ages ([`Config::relax`]); what the order ranks by.
    pub fn current_ms(&self, endpoint: &str, now: Instant) -> Option<f64> {
        let e = self.entry(endpoint)?;
        Some(self.relaxed(e.estimate?, now.saturating_duration_since(e.sampled)))
    }

    /// `x`'s mean `age` after its last sample: drawn down toward the long-run mean, never up
    /// (a replica that was faster of late keeps its recent estimate).
    fn relaxed(&self, x: Estimate, age: Duration) -> f64 {
        if self.config.relax.is_zero() || x.avg_ms <= x.long_ms {
            return x.avg_ms;
        }
        x.long_ms + (x.avg_ms - x.long_ms) * (-ms(age) / ms(self.config.relax)).exp()
    }

    /// The tokens held for probes and hedges.
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    fn entry(&self, endpoint: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == endpoint)
    }

    fn entry_mut(&mut self, endpoint: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.name == endpoint)
    }

    /// The table as of `now`, to be restored by [`Decay::import`] (the tokens too).
    pub fn export(&self, now: Instant) -> (Vec<Saved>, f64) {
        let saved = self
            .entries
            .iter()
            .map(|e| Saved {
                endpoint: e.name.clone(),
                avg_ms: e.estimate.map(|x| x.avg_ms),
                var_ms2: e.estimate.map_or(0.0, |x| x.var_ms2),
                samples: e.estimate.map_or(0, |x| x.samples),
                age_ms: now.saturating_duration_since(e.sampled).as_millis() as u64,
                failures: e.failures,
                retry_in_ms: e.retry_at.saturating_duration_since(now).as_millis() as u64,
                long_ms: e.estimate.map(|x| x.long_ms),
            })
            .collect();
        (saved, self.tokens)
    }

    /// Restores what [`Decay::export`] saved for the replicas in the set (others are ignored),
    /// its ages counted back from `now`; `tokens` as saved, at most the burst.
    pub fn import(&mut self, saved: &[Saved], tokens: f64, now: Instant) {
        for s in saved {
            let Some(e) = self.entry_mut(&s.endpoint) else {
                continue;
            };
            e.estimate = s
                .avg_ms
                .filter(|a| a.is_finite() && *a >= 0.0)
                .map(|avg| Estimate {
                    avg_ms: avg,
                    var_ms2: if s.var_ms2.is_finite() {
                        s.var_ms2.max(0.0)
                    } else {
                        0.0
                    },
                    samples: s.samples.max(1),
                    long_ms: s
                        .long_ms
                        .filter(|l| l.is_finite() && *l >= 0.0)
                        .unwrap_or(avg),
                });
            e.sampled = now
                .checked_sub(Duration::from_millis(s.age_ms))
                .unwrap_or(now);
            e.failures = s.failures;
            e.retry_at = now + Duration::from_millis(s.retry_in_ms);
            e.explored = None;
        }
        if tokens.is_finite() {
            self.tokens = tokens.clamp(0.0, self.config.burst);
        }
    }

    fn timeout_ms(&self, estimate: Option<Estimate>) -> f64 {
        match estimate {
            None => ms(self.config.default_timeout),
            Some(e) => (e.avg_ms + self.c_timeout * e.var_ms2.sqrt())
                .max(self.config.min_timeout_factor * e.avg_ms)
                .max(ms(self.config.min_timeout))
                .min(ms(self.config.max_timeout)),
        }
    }

    /// The back-off after `failures` failures in a row.
    fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(30);
        self.config
            .backoff
            .saturating_mul(1u32 << doublings)
            .min(self.config.max_backoff)
    }
}

/// Sorting key: live measured by current mean, live unmeasured, failed by back-off end.
fn rank(d: &Decay, e: &Entry, base: Instant, now: Instant) -> (u8, f64) {
    match (e.failures > 0, e.estimate) {
        (false, Some(x)) => (0, d.relaxed(x, now.saturating_duration_since(e.sampled))),
        (false, None) => (1, 0.0),
        (true, _) => (2, ms(e.retry_at.saturating_duration_since(base))),
    }
}

impl Select for Decay {
    fn update(&mut self, endpoints: &[String], now: Instant) {
        let mut old = std::mem::take(&mut self.entries);
        self.entries = endpoints
            .iter()
            .map(|name| match old.iter().position(|e| &e.name == name) {
                Some(i) => old.swap_remove(i),
                None => Entry {
                    name: name.clone(),
                    estimate: None,
                    sampled: now,
                    failures: 0,
                    retry_at: now,
                    explored: None,
                },
            })
            .collect();
    }

    fn order(&mut self, now: Instant) -> Vec<String> {
        // Back-off ends are compared from a base no later than any of them.
        let base = self
            .entries
            .iter()
            .map(|e| e.retry_at)
            .min()
            .unwrap_or(now)
            .min(now);
        let mut ranked: Vec<(u8, f64, &str)> = self
            .entries
            .iter()
            .map(|e| {
                let (class, key) = rank(self, e, base, now);
                (class, key, e.name.as_str())
            })
            .collect();
        // Stable: the set order breaks ties.
        ranked.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
        ranked.into_iter().map(|(_, _, n)| n.to_owned()).collect()
    }

    fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        let backoff = |d: &Decay, f| d.backoff(f);
        let (decay, min_weight) = (ms(self.config.decay), self.config.min_weight);
        let long_decay = ms(self.config.long_decay);
        let Some(i) = self.entries.iter().position(|e| e.name == endpoint) else {
            return;
        };
        match outcome {
            Outcome::Answered { latency } => {
                let x = latency.as_nanos() as f64 / 1e6;
                let (old, sampled) = (self.entries[i].estimate, self.entries[i].sampled);
                let age = now.saturating_duration_since(sampled);
                let estimate = match old {
                    None => Estimate {
                        avg_ms: x,
                        var_ms2: 0.0,
                        samples: 1,
                        long_ms: x,
                    },
                    Some(old) => {
                        let dt = ms(age);
                        let n = 1.0 / (old.samples as f64 + 1.0);
                        let w = (1.0 - (-dt / decay).exp()).max(n).max(min_weight).min(1.0);
                        // The stale mean has returned part of the way to the long-run one.
                        let base = self.relaxed(old, age);
                        let avg_ms = (1.0 - w) * base + w * x;
                        let dev = x - avg_ms;
                        let wl = 1.0 - (-dt / long_decay).exp();
                        Estimate {
                            avg_ms,
                            var_ms2: (1.0 - w) * old.var_ms2 + w * dev * dev,
                            samples: old.samples.saturating_add(1),
                            long_ms: (1.0 - wl) * old.long_ms + wl * x,
                        }
                    }
                };
                let e = &mut self.entries[i];
                e.estimate = Some(estimate);
                e.sampled = now;
                e.failures = 0;
            }
            Outcome::TimedOut | Outcome::ConnectFailed | Outcome::Broken => {
                let failures = self.entries[i].failures.saturating_add(1);
                let wait = backoff(self, failures);
                let e = &mut self.entries[i];
                e.failures = failures;
                e.retry_at = now + wait;
            }
            Outcome::Cancelled => {}
        }
    }

    fn health(&self, _now: Instant) -> Vec<(String, bool)> {
        self.entries
            .iter()
            .map(|e| (e.name.clone(), e.failures == 0))
            .collect()
    }

    fn timeout(&self, endpoint: &str, _now: Instant) -> Option<Duration> {
        let e = self.entry(endpoint)?;
        let t = self.timeout_ms(e.estimate);
        Some(Duration::from_nanos((t * 1e6).round() as u64))
    }

    fn probes(&mut self, now: Instant) -> Vec<Probe> {
        let mut out = Vec::new();
        for i in 0..self.entries.len() {
            let (failures, due) = (self.entries[i].failures, self.entries[i].retry_at <= now);
            if failures > 0 && due {
                // Handed out once; again after the next back-off if no outcome comes.
                let next = now + self.backoff(failures.saturating_add(1));
                // It spends a token when one is there (probes and hedges wait for the next),
                // but is sent without one: the back-off bounds it.
                self.tokens = (self.tokens - 1.0).max(0.0);
                let e = &mut self.entries[i];
                e.retry_at = next;
                out.push(Probe {
                    endpoint: e.name.clone(),
                    kind: ProbeKind::Recover,
                });
            }
        }
        if self.tokens < 1.0 {
            return out;
        }
        let chosen = self.order(now).into_iter().next();
        let explore_after = self.config.explore_after;
        // Unmeasured live replicas first (the one that joined first), then the one measured
        // longest ago.
        let candidate = self
            .entries
            .iter()
            .filter(|e| e.failures == 0 && Some(&e.name) != chosen.as_ref())
            .filter(|e| {
                let last = e.explored.map_or(e.sampled, |x| x.max(e.sampled));
                let quiet = now.saturating_duration_since(last) >= explore_after;
                quiet || (e.estimate.is_none() && e.explored.is_none())
            })
            .min_by_key(|e| (e.estimate.is_some(), e.sampled))
            .map(|e| e.name.clone());
        if let Some(name) = candidate {
            self.tokens -= 1.0;
            if let Some(e) = self.entry_mut(&name) {
                // Not explored again before another `explore_after`.
                e.explored = Some(now);
            }
            out.push(Probe {
                endpoint: name,
                kind: ProbeKind::Refresh,
            });
        }
        out
    }

    fn hedge_after(&self, endpoint: &str, now: Instant) -> Option<Duration> {
        if self.tokens < 1.0 {
            return None;
        }
        let entry = self.entry(endpoint)?;
        let e = entry.estimate?;
        if e.samples < 2 {
            return None;
        }
        let avg = self.relaxed(e, now.saturating_duration_since(entry.sampled));
        let t = avg + self.c_hedge * e.var_ms2.sqrt();
        Some(Duration::from_nanos((t * 1e6).round() as u64))
    }

    fn requested(&mut self, _now: Instant) {
        self.tokens = (self.tokens + self.config.budget).min(self.config.burst);
    }

    fn hedged(&mut self, _endpoint: &str, _now: Instant) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    fn race(&self, _now: Instant) -> usize {
        let live = self.entries.iter().filter(|e| e.failures == 0);
        if live.clone().any(|e| e.estimate.is_some()) {
            1
        } else {
            live.count().max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn answered(ms: u64) -> Outcome {
        Outcome::Answered {
            latency: Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_new_client_races_every_replica_then_takes_the_fastest() {
        let t0 = Instant::now();
        let mut d = Decay::new(&names(&["slow", "mid", "fast"]), Config::default(), t0).unwrap();
        assert_eq!(d.race(t0), 3);
        d.record("fast", answered(20), t0);
        assert_eq!(d.race(t0), 1);
        assert_eq!(d.order(t0)[0], "fast");
        // The others, unmeasured, are explored within the burst.
        let probes = d.probes(t0);
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].kind, ProbeKind::Refresh);
        assert_ne!(probes[0].endpoint, "fast");
    }

    #[test]
    fn one_outlier_does_not_move_traffic_and_a_stale_estimate_is_explored_and_forgotten() {
        let t0 = Instant::now();
        // Relaxation off: exploration alone brings "fast" back here.
        let config = Config {
            relax: Duration::ZERO,
            ..Config::default()
        };
        let mut d = Decay::new(&names(&["fast", "mid"]), config, t0).unwrap();
        let mut t = t0;
        for _ in 0..20 {
            d.record("fast", answered(90), t);
            d.record("mid", answered(150), t);
            t += Duration::from_millis(200);
        }
        d.record("fast", answered(275), t);
        assert_eq!(d.order(t)[0], "fast", "{:?}", d.estimate("fast"));
        // A long slow spell moves traffic away...
        for _ in 0..30 {
            t += Duration::from_millis(200);
            d.record("fast", answered(400), t);
        }
        assert_eq!(d.order(t)[0], "mid");
        // ...and once "fast" has been quiet for explore_after, a probe measures it again; an
        // answer after that long weighs 1 − e^(−1): two explorations bring traffic back (about
        // 20 s after the spell, at 50 requests a second).
        let mut explored = 0;
        while d.order(t)[0] != "fast" {
            for _ in 0..10 {
                t += Duration::from_millis(100);
                d.requested(t);
                d.record("mid", answered(150), t);
                for p in d.probes(t) {
                    assert_eq!(p.endpoint, "fast");
                    explored += 1;
                    d.record("fast", answered(90), t);
                }
            }
            assert!(
                explored <= 2,
                "{explored} explorations: {:?}",
                d.estimate("fast")
            );
        }
        assert_eq!(explored, 2);
    }

    #[test]
    fn after_a_spike_traffic_returns_without_a_probe_and_a_lasting_slow_down_is_left_alone() {
        let t0 = Instant::now();
        let mut d = Decay::new(&names(&["fast", "mid"]), Config::default(), t0).unwrap();
        let mut t = t0;
        for _ in 0..40 {
            d.record("fast", answered(20), t);
            d.record("mid", answered(60), t);
            t += Duration::from_millis(250);
        }
        // A spike: three answers of 500 ms in a row.
        for _ in 0..3 {
            d.record("fast", answered(500), t);
            t += Duration::from_millis(100);
        }
        assert_eq!(d.order(t)[0], "mid");
        let spike_end = t;
        while d.order(t)[0] != "fast" {
            t += Duration::from_millis(50);
            d.record("mid", answered(60), t);
        }
        let back = t.duration_since(spike_end);
        assert!(back <= Duration::from_secs(5), "back after {back:?}");
        // Now "fast" stays slow: each user request it gets answers in 500 ms; a few such
        // requests raise its long-run mean above mid's and it is left alone.
        let mut tried = 0;
        for _ in 0..1200 {
            t += Duration::from_millis(50);
            if d.order(t)[0] == "fast" {
                tried += 1;
                d.record("fast", answered(500), t);
            } else {
                d.record("mid", answered(60), t);
            }
        }
        assert!(
            (1..=4).contains(&tried),
            "{tried} slow requests in a minute"
        );
        assert!(d.estimate("fast").unwrap().long_ms > 60.0);
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap_and_an_answer_ends_it() {
        let t0 = Instant::now();
        let mut d = Decay::new(&names(&["a", "b"]), Config::default(), t0).unwrap();
        d.record("b", answered(50), t0);
        let mut t = t0;
        let mut waits = Vec::new();
        for _ in 0..10 {
            d.record("a", Outcome::ConnectFailed, t);
            let due = (0..400)
                .map(|s| t + Duration::from_secs(s))
                .find(|at| {
                    let mut probe = d.clone();
                    probe
                        .probes(*at)
                        .iter()
                        .any(|p| p.kind == ProbeKind::Recover)
                })
                .unwrap();
            waits.push(due.duration_since(t).as_secs());
            let p = d.probes(due);
            assert_eq!(p[0].endpoint, "a");
            t = due;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 120, 120, 120]);
        assert_eq!(d.order(t), ["b", "a"]);
        d.record("a", answered(10), t);
        assert_eq!(d.order(t), ["a", "b"]);
        assert!(d.health(t).iter().all(|(_, up)| *up));
    }

    #[test]
    fn probes_and_hedges_stay_inside_the_budget() {
        let t0 = Instant::now();
        let mut d = Decay::new(&names(&["a", "b", "c"]), Config::default(), t0).unwrap();
        let mut t = t0;
        for n in 0..3 {
            d.record("a", answered(10 + n), t);
            d.record("b", answered(30), t);
            d.record("c", answered(40), t);
        }
        let mut extra = 0;
        for _ in 0..10_000 {
            t += Duration::from_secs(1);
            d.requested(t);
            d.record("a", answered(10), t);
            extra += d.probes(t).len();
            if d.hedge_after("a", t).is_some() {
                d.hedged("b", t);
                extra += 1;
            }
        }
        // 2 % of 10,000 requests, plus the burst of 2.
        assert!(extra <= 202, "{extra}");
        assert!(extra >= 150, "{extra}: the budget is used");
    }

    #[test]
    fn a_saved_table_comes_back_with_its_ages() {
        let t0 = Instant::now();
        let mut d = Decay::new(&names(&["a", "b"]), Config::default(), t0).unwrap();
        d.record("a", answered(30), t0);
        d.record("b", Outcome::TimedOut, t0);
        let later = t0 + Duration::from_millis(500);
        let (saved, tokens) = d.export(later);
        let mut e = Decay::new(&names(&["b", "a", "new"]), Config::default(), later).unwrap();
        e.import(&saved, tokens, later);
        assert_eq!(e.estimate("a"), d.estimate("a"));
        assert_eq!(e.order(later), ["a", "new", "b"]);
        assert_eq!(e.race(later), 1);
    }
}
